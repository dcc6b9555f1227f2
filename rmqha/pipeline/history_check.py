"""Histories (rmqha/runs/recorder.py) joined with the decoded replicas: what was lost, duplicated, reordered, late.

Stored copies are found by UNIQ_KEY. A logical send (send_id) is tied to its stored copies through the
message KEYS, which the recorder sets to the send_id: that also catches copies left by retries inside
the C++ client, whose UNIQ_KEYs never reach the history.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import ids, served
from .audit import groups
from .runfolder import Node
from .spark import lit_map
from .verdict import FAIL, INFO, PASS, WARN, Verdict

SYSTEM_TOPIC_PREFIXES = ("%RETRY%", "%DLQ%", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_", "TRANS_")
# Where the broker keeps a message that is not in its topic yet (a delay level not due, a transaction
# not committed); it reaches its topic as a new record with the same UNIQ_KEY.
PARKED_TOPICS = ("SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC")
MAX_LISTED = 10
LISTED = 1000  # phantoms and order violations listed in the findings (their counts are exact)
UNCONFIRMED = ("FLUSH_DISK_TIMEOUT", "FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE")  # stored on the master

HISTORY_SCHEMA = (
    "client string, seq long, op string, group string, shard string, topic string, send_id string, attempt int, "
    "uniq_key string, status string, error string, offset_msg_id string, "
    "broker_name string, queue_id int, queue_offset long, commit_log_offset long, "
    "store_timestamp long, ordered boolean, start_ms long, end_ms long, body_len long, library string"
)


@dataclass
class HistoryFindings:
    sends: int = 0
    acked: int = 0
    receives: int = 0
    lost: list = field(default_factory=list)  # acked, on no node: (uniq_key, send_id, client, topic, end_ms, group)
    parked: list = field(default_factory=list)  # acked, only in SCHEDULE/HALF topics
    missing_on_slave: list = field(default_factory=list)  # (uniq_key, broker, slave, phys) SYNC_MASTER
    missing_on_slave_async: int = 0
    missing_on_master: list = field(default_factory=list)  # acked, on a slave only
    unconfirmed: int = 0  # FLUSH_*_TIMEOUT / SLAVE_NOT_AVAILABLE sends
    unconfirmed_missing: list = field(default_factory=list)  # of those, on no node: (uniq_key, send_id, status)
    dup_uniq: list = field(default_factory=list)  # (uniq_key, copies)
    dup_resent: list = field(default_factory=list)  # the same, of a client that resends with one id (5.x)
    dup_logical: list = field(default_factory=list)  # (send_id, copies)
    phantoms: list = field(default_factory=list)  # received, never sent
    order_violations: list = field(default_factory=list)  # (client, broker, topic, qid, offset, prev max)
    order_violations_ordered: int = 0
    order_violation_count: int = 0  # exact (order_violations lists the first 1000)
    phantom_count: int = 0  # exact (phantoms lists the first 1000)
    redeliveries: int = 0
    acked_not_received: int = 0
    send_latency: dict = field(default_factory=dict)  # percentile -> ms
    e2e_latency: dict = field(default_factory=dict)
    statuses: dict = field(default_factory=dict)
    served_by: dict = field(default_factory=dict)  # serving node -> receives (rmqha/pipeline/served.py)
    served_buckets: list = field(default_factory=list)  # (broker, node, bucket start ms, receives)
    # receives not judged for per-queue order, every one: (client, topic, queue id, queue offset, uniq_key, why)
    unplaced: list = field(default_factory=list)


def load_histories(spark, paths: list[str]):
    from pyspark.sql import functions as F

    df = spark.read.schema(HISTORY_SCHEMA).json(paths)
    return df.withColumn(
        "status", F.when(F.col("status") == "SLAVE_NOT_AVAILABE", "SLAVE_NOT_AVAILABLE").otherwise(F.col("status"))
    )


def _pct_cols(col, prefix: str) -> list:
    """Aggregate columns for _pcts_of: percentiles, max and count of col (nulls skipped)."""
    from pyspark.sql import functions as F

    return [
        F.percentile_approx(col, [0.5, 0.9, 0.99, 0.999], 10000).alias(prefix + "p"),
        F.max(col).alias(prefix + "max"),
        F.count(col).alias(prefix + "n"),
    ]


def _pcts_of(r, prefix: str) -> dict:
    if not r or not r[prefix + "n"]:
        return {}
    p = r[prefix + "p"]
    return {"p50": p[0], "p90": p[1], "p99": p[2], "p99.9": p[3], "max": r[prefix + "max"], "n": r[prefix + "n"]}


def _pcts(df, col: str) -> dict:
    from pyspark.sql import functions as F

    return _pcts_of(df.select(*_pct_cols(F.col(col), "")).first(), "")


def _placed_receives(stored, recvs):
    """The receives with their broker group (`broker`): the history's broker_name, else the group of the
    stored copy at the receive's own place (UNIQ_KEY, topic, queue id, queue offset; any node: a slave's
    copy has its master's place). Copies of two groups at that place (a client's internal retry stored one
    UNIQ_KEY in both, at the same queue offset) are told apart by the receive's commit-log offset, when it
    has one. Otherwise no group, and `reason` says why."""
    from pyspark.sql import functions as F

    places = (
        stored.filter(F.col("uniq_key").isNotNull())
        .groupBy("uniq_key", "topic", "queue_id", "queue_offset")
        .agg(
            F.array_sort(F.collect_set("broker_name")).alias("p_groups"),
            F.collect_set(F.struct(F.col("broker_name").alias("b"), F.col("physical_offset").alias("phys"))).alias(
                "p_at"
            ),
        )
    )
    told = F.array_sort(
        F.array_distinct(
            F.transform(F.filter("p_at", lambda x: x["phys"] == F.col("commit_log_offset")), lambda x: x["b"])
        )
    )
    given = F.when(F.col("broker_name") != "", F.col("broker_name"))
    found = F.when(F.size("p_groups") == 1, F.col("p_groups")[0]).when(F.size(told) == 1, told[0])
    return (
        recvs.join(places, ["uniq_key", "topic", "queue_id", "queue_offset"], "left")
        .withColumn("broker", F.coalesce(given, found))
        .withColumn(
            "reason",
            F.when(F.col("broker").isNotNull() & F.col("queue_offset").isNotNull(), F.lit(None).cast("string"))
            .when(F.col("queue_offset").isNull(), "no queue offset")
            .when(
                F.size("p_groups") > 1,
                F.concat(F.lit("stored in "), F.array_join("p_groups", ", "), F.lit(" at its place")),
            )
            .otherwise("no stored copy at its place"),
        )
        .drop("p_groups", "p_at")
    )


def gather(spark, decoded, hist, nodes: list[Node], served_rows: list | None = None) -> HistoryFindings:
    """The histories joined with the decoded copies, aggregated in Spark: the findings verdicts() judges."""
    from pyspark.sql import functions as F

    f = HistoryFindings()
    stored = _stored(decoded, nodes).cache()
    sends = hist.filter(F.col("op") == "send").cache()
    recvs = hist.filter(F.col("op") == "receive").cache()
    _count_ops(hist, f)
    acked = sends.filter(F.col("status") == "SEND_OK").filter(F.col("uniq_key").isNotNull())
    f.acked = f.statuses.get("SEND_OK", 0)
    # Where each UNIQ_KEY is stored: one row per distinct stored copy (broker group, offset).
    copies = (
        stored.filter(F.col("uniq_key").isNotNull())
        .groupBy("uniq_key", "broker_name", "physical_offset", "topic")
        .agg(F.collect_set("node").alias("holders"), F.max(F.col("is_master").cast("int")).alias("on_master"))
    ).cache()
    _lost_and_parked(acked, copies, f)
    _unconfirmed_missing(sends, copies, f)
    _missing_copies(acked, copies, nodes, f)
    send_ids = sends.select("send_id").distinct()
    _duplicates(stored, copies, send_ids, f, _resent_ids(sends))
    _phantoms(sends, recvs, send_ids, f)
    _receive_order(spark, stored, recvs, served_rows, f)
    _end_to_end(sends, recvs, f)
    for d in (stored, sends, recvs, copies):
        d.unpersist()
    return f


def _stored(decoded, nodes: list[Node]):
    """The copies the nodes hold, with whether the node is a master and where its log starts (the nodes as
    literal maps, not joined tables: each join of one costs a Spark job)."""
    from pyspark.sql import functions as F

    node_start = lit_map({n.name: n.start_offset for n in nodes}, "long")
    masters = [n.name for n in nodes if n.is_master]
    return decoded.filter((F.col("status") == "ok") & F.col("node").isin([n.name for n in nodes])).select(
        "node",
        "broker_name",
        "physical_offset",
        "topic",
        "queue_id",
        "queue_offset",
        "uniq_key",
        "keys",
        "store_timestamp",
        F.col("node").isin(masters).alias("is_master"),
        node_start[F.col("node")].alias("node_start"),
    )


def _count_ops(hist, f: HistoryFindings) -> None:
    """Counts per op and status, and (6.) the SEND_OK sends' call latency, in one job."""
    from pyspark.sql import functions as F

    send_ok = (F.col("op") == "send") & (F.col("status") == "SEND_OK")
    for r in (
        hist.groupBy("op", "status")
        .agg(F.count("*").alias("count"), *_pct_cols(F.when(send_ok, F.col("end_ms") - F.col("start_ms")), "lat_"))
        .collect()
    ):
        if r["op"] == "send":
            f.sends += r["count"]
            f.statuses[r["status"]] = r["count"]
            if r["status"] == "SEND_OK":
                f.send_latency = _pcts_of(r, "lat_")
        elif r["op"] == "receive":
            f.receives += r["count"]


def _lost_and_parked(acked, copies, f: HistoryFindings) -> None:
    """1. Acknowledged sends on no node at all. A copy parked in SCHEDULE_TOPIC_XXXX (a delayed message not
    yet delivered) or RMQ_SYS_TRANS_HALF_TOPIC (a half message not committed) is not in its topic: such a
    send is "parked", not delivered and not lost."""
    from pyspark.sql import functions as F

    parked_topic = F.col("topic").isin(*PARKED_TOPICS)
    in_topic = copies.filter(~parked_topic).select("uniq_key").distinct()
    parked_keys = copies.filter(parked_topic).select("uniq_key").distinct()
    not_in_topic = acked.join(in_topic, "uniq_key", "left_anti")
    # lost (not parked either) and parked in one job; every one: counts and attribution are exact
    for r in (
        not_in_topic.join(parked_keys.withColumn("is_parked", F.lit(True)), "uniq_key", "left")
        .select("uniq_key", "send_id", "client", "topic", "end_ms", "broker_name", "is_parked")
        .orderBy("end_ms", "uniq_key", "send_id")
        .collect()
    ):
        if r["is_parked"]:
            f.parked.append((r["uniq_key"], r["send_id"], r["topic"]))
        else:
            # the group that acknowledged it when the answer names one (the Rust client): whose faults can
            # have destroyed it (faults.loss_blame)
            group = r["broker_name"] or None
            f.lost.append((r["uniq_key"], r["send_id"], r["client"], r["topic"], r["end_ms"], group))


def _unconfirmed_missing(sends, copies, f: HistoryFindings) -> None:
    """1b. Sends the broker answered FLUSH_DISK_TIMEOUT / FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE: the
    master did store them (only flush or replication is unconfirmed), so each should be somewhere."""
    from pyspark.sql import functions as F

    unconf = sends.filter(F.col("status").isin(*UNCONFIRMED)).filter(F.col("uniq_key").isNotNull())
    f.unconfirmed = sum(f.statuses.get(st, 0) for st in UNCONFIRMED)
    if f.unconfirmed:  # none answered so: nothing to look for (saves a Spark job)
        gone = unconf.join(copies.select("uniq_key").distinct(), "uniq_key", "left_anti")
        f.unconfirmed_missing = [
            (r["uniq_key"], r["send_id"], r["status"]) for r in gone.orderBy("end_ms", "uniq_key").collect()
        ]


def _missing_copies(acked, copies, nodes: list[Node], f: HistoryFindings) -> None:
    """2. Acknowledged sends missing on a node of their group that should hold them. For a slave: it must
    hold every acked message at or after its start when the master is SYNC_MASTER (ASYNC: counted only)."""
    from pyspark.sql import functions as F

    members: dict[str, list] = {}
    for n in nodes:
        members.setdefault(n.broker_name, []).append(
            F.struct(
                F.lit(n.name).alias("node"),
                F.lit(bool(n.is_master)).alias("is_master"),
                F.lit(n.start_offset).cast("long").alias("node_start"),
            )
        )
    group_members = lit_map({b: F.array(*ms) for b, ms in members.items()})
    master_role = lit_map({name: m.role if m else "UNKNOWN" for name, (m, _) in groups(nodes).items()})
    expected = (
        acked.select("uniq_key")
        .distinct()
        .join(copies, "uniq_key")
        .select("*", F.explode(group_members[F.col("broker_name")]).alias("m"))
        .select("*", "m.*")
        .drop("m")
        .filter(F.col("physical_offset") >= F.col("node_start"))
        .filter(~F.array_contains("holders", F.col("node")))
        .withColumn("master_role", master_role[F.col("broker_name")])
    )
    for r in expected.orderBy("physical_offset").collect():
        if r["is_master"]:
            f.missing_on_master.append((r["uniq_key"], r["broker_name"], r["node"], r["physical_offset"]))
        elif r["master_role"] == "SYNC_MASTER":
            f.missing_on_slave.append((r["uniq_key"], r["broker_name"], r["node"], r["physical_offset"]))
        else:
            f.missing_on_slave_async += 1


def _user_topic():
    """User topics only: retry/DLQ/schedule copies keep the UNIQ_KEY of the message they copy."""
    from pyspark.sql import functions as F

    return ~F.col("topic").rlike("^(" + "|".join(SYSTEM_TOPIC_PREFIXES) + ")")


def _resent_ids(sends):
    """The UNIQ_KEYs sent by a client that resends a failed try with the same message id: the 5.x client
    (its message id is fixed when the message is built; the 4.x clients make a new UNIQ_KEY per try)."""
    from pyspark.sql import functions as F

    from rmqha.runs.history import PYTHON5_LIBRARY

    return (
        sends.filter((F.col("library") == PYTHON5_LIBRARY) & F.col("uniq_key").isNotNull())
        .select("uniq_key")
        .distinct()
    )


def _duplicates(stored, copies, send_ids, f: HistoryFindings, resent=None) -> None:
    """3a. The same UNIQ_KEY stored at two places, and 3b. several stored copies of one logical send
    (send_id in KEYS), in one job (sorted here: Python's str order is Spark's UTF-8 byte order)."""
    from pyspark.sql import functions as F

    dup = (
        copies.filter(_user_topic())
        .groupBy("uniq_key", "topic")
        .agg(
            F.count("*").alias("copies"),
            F.collect_list(F.concat_ws("@", "broker_name", F.col("physical_offset").cast("string"))).alias("where"),
        )
        .filter(F.col("copies") > 1)
    )
    by_key = (
        stored.filter(_user_topic() & F.col("keys").isNotNull())
        .select("broker_name", "physical_offset", "uniq_key", F.explode(F.split("keys", " ")).alias("send_id"))
        .join(send_ids, "send_id")
        .groupBy("send_id")
        .agg(
            F.countDistinct("broker_name", "physical_offset").alias("copies"),
            F.collect_set("uniq_key").alias("uniq_keys"),
        )
        .filter(F.col("copies") > 1)
    )
    both = dup.select(
        F.lit("uniq").alias("kind"),
        F.col("uniq_key").alias("key"),
        F.col("copies").cast("long"),
        F.col("where").alias("xs"),
    ).unionByName(
        by_key.select(
            F.lit("logical").alias("kind"),
            F.col("send_id").alias("key"),
            F.col("copies").cast("long"),
            F.col("uniq_keys").alias("xs"),
        )
    )
    if resent is not None:  # a resending client's copies of one id are its retries, not the broker's doing
        retried = resent.select(F.col("uniq_key").alias("key"), F.lit(1).alias("resent"))
        both = both.join(retried, "key", "left").withColumn(
            "kind", F.when((F.col("kind") == "uniq") & (F.col("resent") == 1), F.lit("resent")).otherwise(F.col("kind"))
        )
    rows = sorted(both.collect(), key=lambda r: r["key"])
    f.dup_uniq = [(r["key"], r["copies"], sorted(r["xs"])) for r in rows if r["kind"] == "uniq"]
    f.dup_resent = [(r["key"], r["copies"], sorted(r["xs"])) for r in rows if r["kind"] == "resent"]
    f.dup_logical = [(r["key"], r["copies"], sorted(r["xs"])) for r in rows if r["kind"] == "logical"]


def _phantoms(sends, recvs, send_ids, f: HistoryFindings) -> None:
    """4. Received but never sent: neither its UNIQ_KEY nor its send_id (KEYS) is in any history."""
    from pyspark.sql import functions as F

    sent_topics = sends.select("topic").distinct()
    sent_keys = sends.filter(F.col("uniq_key").isNotNull()).select("uniq_key").distinct()
    r_topics = recvs.join(sent_topics, "topic", "left_semi")
    phantom = r_topics.join(sent_keys, "uniq_key", "left_anti").join(send_ids, "send_id", "left_anti")
    f.phantoms = [
        (r["client"], r["topic"], r["uniq_key"], r["send_id"], r["queue_id"], r["queue_offset"])
        for r in phantom.limit(LISTED).collect()
    ]
    # exact: the list is all of them unless it is full, and only then is a count needed
    f.phantom_count = len(f.phantoms) if len(f.phantoms) < LISTED else phantom.count()


def _receive_order(spark, stored, recvs, served_rows, f: HistoryFindings) -> None:
    """5. Per-queue order among received messages, per consumer client. The queue is (broker, topic, queue
    id); the broker is the history's, else the group whose stored copy is at the receive's own place
    (_placed_receives). A receive in no group, or with no queue offset, is not judged: counted and named
    (unplaced). Then (5b.) which node served each receive."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    rq = _placed_receives(stored, recvs)
    judged = F.col("broker").isNotNull() & F.col("queue_offset").isNotNull()
    wq = Window.partitionBy("client", "broker", "topic", "queue_id").orderBy("seq")
    seen = Window.partitionBy("client", "broker", "topic", "queue_id", "queue_offset").orderBy("seq")
    rq = rq.withColumn(
        "prev_max", F.max("queue_offset").over(wq.rowsBetween(Window.unboundedPreceding, -1))
    ).withColumn("nth", F.row_number().over(seen))
    is_viol = judged & (F.col("nth") == 1) & (F.col("queue_offset") < F.col("prev_max"))
    rq = rq.withColumn("viol", F.coalesce(is_viol, F.lit(False))).withColumn("judged", judged).cache()
    agg = rq.agg(
        F.sum((F.col("judged") & (F.col("nth") > 1)).cast("int")).alias("redeliveries"),
        F.sum((F.col("viol") & F.coalesce(F.col("ordered"), F.lit(False))).cast("int")).alias("ordered"),
        F.sum(F.col("viol").cast("int")).alias("viol"),
        F.sum((~F.col("judged")).cast("int")).alias("unplaced"),
    ).first()
    f.redeliveries = int(agg["redeliveries"] or 0)
    f.order_violations_ordered = int(agg["ordered"] or 0)
    f.order_violation_count = int(agg["viol"] or 0)
    if f.order_violation_count:  # listed only when there are some (saves a Spark job on a clean run)
        f.order_violations = [
            (r["client"], r["broker"], r["topic"], r["queue_id"], r["queue_offset"], r["prev_max"], bool(r["ordered"]))
            for r in rq.filter("viol").orderBy("client", "seq").limit(LISTED).collect()
        ]
    if agg["unplaced"]:  # every one (no cap), and only when there are some
        f.unplaced = [
            (r["client"], r["topic"], r["queue_id"], r["queue_offset"], r["uniq_key"], r["reason"])
            for r in rq.filter(~F.col("judged")).orderBy("client", "seq").collect()
        ]
    if served_rows is not None:
        _served_by(spark, rq, served_rows, f)
    rq.unpersist()


def _served_by(spark, rq, served_rows, f: HistoryFindings) -> None:
    """5b. Which node served each receive: its group's node whose served pull covers its queue offset (a
    receive in no group is unattributed)."""
    from pyspark.sql import functions as F

    by = served.attribute(
        spark,
        rq.filter(F.col("queue_offset").isNotNull()).select(
            "client", "seq", "broker", "topic", "queue_id", "queue_offset", "start_ms"
        ),
        served_rows,
    )
    bucket = (F.col("start_ms") / served.BUCKET_MS).cast("long") * served.BUCKET_MS
    for r in by.groupBy("broker", "served_by", bucket.alias("t")).count().collect():
        f.served_buckets.append((r["broker"], r["served_by"], r["t"], r["count"]))
        f.served_by[r["served_by"]] = f.served_by.get(r["served_by"], 0) + r["count"]


def _end_to_end(sends, recvs, f: HistoryFindings) -> None:
    """6. Latency end to end (first try of the logical send -> first receive; the send call's latency is
    _count_ops'), and the acknowledged logical sends never received, in one job."""
    from pyspark.sql import functions as F

    first_send = sends.groupBy("send_id").agg(
        F.min("start_ms").alias("sent_ms"),
        F.max(((F.col("status") == "SEND_OK") & F.col("uniq_key").isNotNull()).cast("int")).alias("acked"),
    )
    first_recv = recvs.filter(F.col("send_id").isNotNull()).groupBy("send_id").agg(F.min("start_ms").alias("recv_ms"))
    e2e = first_send.join(first_recv, "send_id", "left").withColumn("lat", F.col("recv_ms") - F.col("sent_ms"))
    r = e2e.agg(
        *_pct_cols(F.col("lat"), ""),
        F.sum(((F.col("acked") == 1) & F.col("recv_ms").isNull()).cast("int")).alias("unreceived"),
    ).first()
    f.e2e_latency = _pcts_of(r, "")
    if f.receives:
        f.acked_not_received = int(r["unreceived"] or 0)


def _few(items, fmt, limit=MAX_LISTED) -> str:
    txt = "; ".join(fmt(i) for i in items[:limit])
    return txt + (f"; and {len(items) - limit} more" if len(items) > limit else "")


def verdicts(f: HistoryFindings) -> list[Verdict]:
    out = []
    if not f.sends and not f.receives:
        return [Verdict("histories", WARN, "no history records: client-side guarantees not checked", ids.HISTORY_EMPTY)]
    out.append(
        Verdict(
            "history",
            INFO,
            f"{f.sends} sends ({', '.join(f'{k} {v}' for k, v in sorted(f.statuses.items()))}), {f.receives} receives",
            ids.HISTORY_COUNTS,
        )
    )
    out.append(
        Verdict(
            "no acknowledged send lost",
            FAIL if f.lost else PASS,
            f"{len(f.lost)} SEND_OK message(s) on no node: " + _few(f.lost, lambda x: f"{x[0]} (send {x[1]} by {x[2]})")
            if f.lost
            else f"all {f.acked} SEND_OK messages are stored",
            ids.HISTORY_ACKED_LOST,
        )
    )
    if f.parked:
        out.append(
            Verdict(
                "acknowledged sends delivered to their topic",
                WARN,
                f"{len(f.parked)} SEND_OK message(s) are stored but only parked (a delay level "
                "not due by the end of the run, or a transaction never committed): "
                + _few(f.parked, lambda x: f"{x[0]} (send {x[1]} to {x[2]})"),
                ids.HISTORY_PARKED,
            )
        )
    out.append(
        Verdict(
            "SYNC_MASTER SEND_OK is on the slave",
            FAIL if f.missing_on_slave else PASS,
            f"{len(f.missing_on_slave)} acknowledged message(s) missing on a slave: "
            + _few(f.missing_on_slave, lambda x: f"{x[0]} at {x[3]} of {x[1]} missing on {x[2]}")
            if f.missing_on_slave
            else "every SEND_OK of a SYNC_MASTER group is on its slaves"
            + (
                f" ({f.missing_on_slave_async} ASYNC_MASTER messages not yet on a slave)"
                if f.missing_on_slave_async
                else ""
            ),
            ids.HISTORY_SYNC_ON_SLAVE,
        )
    )
    if f.unconfirmed:
        out.append(
            Verdict(
                "unconfirmed sends stored on the master",
                WARN if f.unconfirmed_missing else PASS,
                f"{len(f.unconfirmed_missing)} of {f.unconfirmed} send(s) answered "
                f"{'/'.join(UNCONFIRMED)} are on no node (the broker had stored them; the client "
                "contract allows losing them, a broker should not): "
                + _few(f.unconfirmed_missing, lambda x: f"{x[0]} ({x[2]}, send {x[1]})")
                if f.unconfirmed_missing
                else f"all {f.unconfirmed} are stored (flush or replication was unconfirmed, not the write)",
                ids.HISTORY_UNCONFIRMED,
            )
        )
    if f.missing_on_master:
        out.append(
            Verdict(
                "acknowledged sends kept by the master",
                WARN,
                f"{len(f.missing_on_master)} SEND_OK message(s) only on a slave: "
                + _few(f.missing_on_master, lambda x: f"{x[0]} at {x[3]} missing on {x[2]}"),
                ids.HISTORY_ON_MASTER,
            )
        )
    out.append(
        Verdict(
            "no UNIQ_KEY stored twice",
            FAIL if f.dup_uniq else (WARN if f.dup_resent else PASS),
            f"{len(f.dup_uniq)} duplicate(s): " + _few(f.dup_uniq, lambda x: f"{x[0]} x{x[1]} at {', '.join(x[2])}")
            if f.dup_uniq
            else (
                f"{len(f.dup_resent)} message id(s) stored more than once by the 5.x client's own resends (it "
                "keeps a message's id across tries; at-least-once allows it): "
                + _few(f.dup_resent, lambda x: f"{x[0]} x{x[1]} at {', '.join(x[2])}")
                if f.dup_resent
                else "each stored UNIQ_KEY is stored once"
            ),
            ids.HISTORY_UNIQ_ONCE,
        )
    )
    out.append(
        Verdict(
            "one stored copy per logical send",
            WARN if f.dup_logical else PASS,
            f"{len(f.dup_logical)} logical send(s) stored more than once (retries; at-least-once "
            "allows it): " + _few(f.dup_logical, lambda x: f"{x[0]} x{x[1]}")
            if f.dup_logical
            else "no logical send stored twice",
            ids.HISTORY_SEND_ONCE,
        )
    )
    out.append(
        Verdict(
            "nothing received that was never sent",
            FAIL if f.phantoms else PASS,
            f"{max(f.phantom_count, len(f.phantoms))} phantom(s): "
            + _few(f.phantoms, lambda x: f"{x[2]} on {x[1]} q{x[4]}@{x[5]} by {x[0]}")
            if f.phantoms
            else f"{f.receives} receives all match a send",
            ids.HISTORY_PHANTOM,
        )
    )
    if f.order_violations:
        st = FAIL if f.order_violations_ordered else WARN
        out.append(
            Verdict(
                "per-queue receive order",
                st,
                f"{max(f.order_violation_count, len(f.order_violations))} message(s) received after a "
                "later offset of their queue "
                f"({f.order_violations_ordered} by ordered consumers): "
                + _few(f.order_violations, lambda x: f"{x[0]} {x[1]}/{x[2]}/q{x[3]} offset {x[4]} after {x[5]}"),
                ids.HISTORY_QUEUE_ORDER,
            )
        )
    else:
        out.append(
            Verdict(
                "per-queue receive order",
                PASS,
                f"in order ({f.redeliveries} redeliveries of an already received offset)"
                + (f"; {len(f.unplaced)} receive(s) in no queue not judged" if f.unplaced else ""),
                ids.HISTORY_QUEUE_ORDER,
            )
        )
    if f.unplaced:
        out.append(
            Verdict(
                "broker group of receives",
                WARN,
                f"{len(f.unplaced)} receive(s) in no broker group's queue, not judged for per-queue order: "
                + _few(f.unplaced, lambda x: f"{x[4]} on {x[1]} q{x[2]}@{x[3]} by {x[0]} ({x[5]})"),
                ids.HISTORY_UNPLACED,
            )
        )
    if f.receives:
        out.append(
            Verdict(
                "acknowledged sends received",
                INFO,
                f"{f.acked_not_received} SEND_OK logical send(s) never received",
                ids.HISTORY_ACKED_RECEIVED,
            )
        )

    def lat(d):
        return ", ".join(f"{k} {v}" for k, v in d.items()) if d else "no data"

    out.append(Verdict("send latency (ms)", INFO, lat(f.send_latency), ids.HISTORY_SEND_LATENCY))
    out.append(Verdict("end-to-end latency send->receive (ms)", INFO, lat(f.e2e_latency), ids.HISTORY_E2E_LATENCY))
    return out
