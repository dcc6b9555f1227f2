"""Delivery's findings (delivery.py) computed with Spark: every logical send and receive of the histories,
joined with the decoded copies and the consume queues, aggregated per consumer group; every message behind
a FAIL streamed to OUT/delivery.jsonl. What the states mean: delivery.py's docstring.

Tests: tests/unit/pipeline/test_delivery.py, test_delivery_groups.py, test_delivery_history.py.
"""

from __future__ import annotations

import json
import os

from rmqha.runs.history import FROM_NOW

from . import consume_queues, delivery_table, runfolder
from .delivery import (
    AT_RISK_MS,
    DETAIL_FILE,
    DeliveryFindings,
    GroupDelivery,
    ID_AMBIGUOUS,
    ID_LOST,
    ID_LOST_AFTER,
    ID_STRANDED,
    ID_UNEXPECTED,
    MAX_LISTED,
    PARKED_TOPICS,
    QueueConsistency,
    REASONS,
    TRAN_PREPARED,
    TRAN_ROLLBACK,
    TRAN_TYPE_MASK,
    UNCONFIRMED,
    destroyed,
)
from .delivery_acks import first_acks, receives_per_send
from .delivery_table import answer_aggs, answer_conds, answer_group, groups_of, offset_of, placed
from .faults import FaultInterval, loss_blame, loss_suspects
from .runfolder import Node
from .spark import lit_map


# -- inputs ---------------------------------------------------------------------------------------


def queue_rows(nodes: list[Node]) -> list[tuple]:
    """(node, topic, queue_id, queue_offset, cq_phys, cq_size) for every consume-queue unit of every node."""
    out = []
    for n in queued_nodes(nodes):
        out.extend((n.name, *u) for u in consume_queues.read_node_queues(n.store_dir))
    return out


def queued_nodes(nodes: list[Node]) -> list[Node]:
    """The nodes whose consume queues are judged: those whose store has the consumequeue directory, which
    every broker (ours, 4.9, rocketmq-rust) creates at start. Not only those with a unit in it: a node that
    never builds a queue (rocketmq-rust's slave, the kit's rust.py) is the worst case. A store with no such
    directory is a byte copy no broker ran on."""
    return [n for n in nodes if n.store_dir and os.path.isdir(os.path.join(n.store_dir, "consumequeue"))]


def _history(hist):
    """The histories with a consumer/producer group on every line (the client's name when absent)."""
    from pyspark.sql import functions as F

    cols = hist.columns
    group = F.coalesce(F.col("group"), F.col("client")) if "group" in cols else F.col("client")
    h = hist.withColumn("grp", group)
    if "shard" not in cols:
        h = h.withColumn("shard", F.lit(None).cast("string"))
    return h


# -- gathering (Spark) ---------------------------------------------------------------------------


def gather(
    spark,
    decoded,
    hist,
    nodes: list[Node],
    fault_list: list[FaultInterval] = (),
    out_dir: str | None = None,
    run_dir: str | None = None,
) -> DeliveryFindings:
    """Every logical send and receive of the histories joined with the decoded copies and the consume
    queues, aggregated in Spark: the findings verdicts() judges (and OUT/delivery.jsonl, streamed)."""
    from pyspark.sql import functions as F

    f = DeliveryFindings()
    h = _history(hist)
    qrows = queue_rows(nodes)
    cq = spark.createDataFrame(
        qrows or [("", "", -1, -1, -1, -1)],
        "node string, topic string, queue_id int, queue_offset long, cq_phys long, cq_size int",
    ).filter(F.col("node") != "")
    sends, uniq_map = _logical_sends(h)
    known = sends.select(F.col("send_id").alias("k_sid"))
    copies = _copies(decoded, nodes, cq, known, uniq_map).cache()
    facts = _copy_facts(copies.join(sends.select(*_OK_COLS), "send_id"))
    # 3. receives, tied to a logical send the same two ways as the copies
    recv = (
        h.filter(F.col("op") == "receive")
        .join(known, F.col("send_id") == F.col("k_sid"), "left")
        .join(uniq_map, "uniq_key", "left")
        .withColumn("sid", F.coalesce("k_sid", "u_sid"))
    ).cache()
    subs, ordered_groups, windows = _subscriptions(h)
    if not subs:
        for d in (sends, recv, copies):
            d.unpersist()
        return f
    # n receives of each send per group, dup of them duplicates (a POP consumer: after its ack)
    per = receives_per_send(recv, first_acks(h, known, uniq_map)).cache()
    owed = _owed(sends, facts, per, subs, windows, run_dir).cache()
    f.groups = _group_deliveries(owed, recv, subs, ordered_groups)
    if fault_list:
        f.acked_on_group = _acked_on_group(spark, sends, facts, fault_list)
    _write_details(f, owed, recv, fault_list, out_dir)
    f.queues = queue_consistency(spark, decoded, cq, nodes, {n.name for n in queued_nodes(nodes)})
    delivery_table.write(out_dir, h, sends, facts, copies, per, owed)
    for d in (sends, recv, owed, per, copies):
        d.unpersist()
    return f


# the acknowledged try's UNIQ_KEY and what its answer names (queue id, queue offset, commit-log offset)
_OK_COLS = ("send_id", "s_topic", "ok_uniq", "ok_qid", "ok_qoff", "ok_phys")


def _logical_sends(h):
    """1. Logical sends: every try of a send_id, invoked or answered, one row each (cached); and the
    UNIQ_KEY of every try with its send_id."""
    from pyspark.sql import functions as F

    tries = h.filter(F.col("op").isin("invoke", "send") & F.col("send_id").isNotNull())
    answer = F.col("op") == "send"
    ok = answer & (F.col("status") == "SEND_OK")
    sends = (
        tries.groupBy("send_id")
        .agg(
            F.first("topic", ignorenulls=True).alias("s_topic"),
            F.first("client", ignorenulls=True).alias("producer"),
            F.first("shard", ignorenulls=True).alias("shard"),
            F.max(ok.cast("int")).alias("acked"),
            F.max((answer & F.col("status").isin(*UNCONFIRMED)).cast("int")).alias("unconf"),
            F.min(F.when(ok, F.col("end_ms"))).alias("ack_ms"),
            F.min(F.when(ok, F.col("seq"))).alias("ack_seq"),
            # the acknowledged try (the first SEND_OK by seq): the copy it names is the send's place
            F.min(
                F.when(ok, F.struct("seq", "uniq_key", "queue_id", "queue_offset", "offset_msg_id", "broker_name"))
            ).alias("okt"),
            F.min("start_ms").alias("first_ms"),
        )
        .withColumn(
            "state0",
            F.when(F.col("acked") == 1, "acked").when(F.col("unconf") == 1, "unconfirmed").otherwise("indeterminate"),
        )
        .select(
            "*",
            F.col("okt.uniq_key").alias("ok_uniq"),
            F.col("okt.queue_id").alias("ok_qid"),
            F.col("okt.queue_offset").alias("ok_qoff"),
            offset_of(F.col("okt.offset_msg_id")).alias("ok_phys"),
            F.when(F.col("okt.broker_name") != "", F.col("okt.broker_name")).alias("ok_broker"),
        )
        .drop("okt")
    ).cache()
    uniq_map = (
        tries.filter(F.col("uniq_key").isNotNull())
        .select("uniq_key", F.col("send_id").alias("u_sid"))
        .dropDuplicates(["uniq_key"])
    )
    return sends, uniq_map


def _copies(decoded, nodes: list[Node], cq, known, uniq_map):
    """2. Stored copies, tied to a logical send by KEYS (the recorder's send_id) or by UNIQ_KEY, with their
    broker group, whether on a master, and whether their consume-queue unit points at them (the nodes as
    literal maps, not a joined table: each join of one costs a Spark job)."""
    from pyspark.sql import functions as F

    broker_of = lit_map({n.name: n.broker_name for n in nodes})
    masters = [n.name for n in nodes if n.is_master]
    st = decoded.filter(F.col("status") == "ok").select(
        "node", "physical_offset", "size", "topic", "queue_id", "queue_offset", "uniq_key", "keys", "sys_flag"
    )
    by_keys = (
        st.withColumn("k_sid", F.explode(F.split(F.coalesce("keys", F.lit("")), " ")))
        .join(known, "k_sid")
        .withColumnRenamed("k_sid", "send_id")
    )
    by_uniq = st.join(uniq_map, "uniq_key").withColumn("send_id", F.col("u_sid")).drop("u_sid")
    return (
        by_keys.unionByName(by_uniq)
        .dropDuplicates(["send_id", "node", "physical_offset"])
        .filter(F.col("node").isin([n.name for n in nodes]))
        .withColumn("broker_name", broker_of[F.col("node")])
        .withColumn("is_master", F.col("node").isin(masters))
        .join(cq, ["node", "topic", "queue_id", "queue_offset"], "left")
        .withColumn("queued", F.coalesce(F.col("cq_phys") == F.col("physical_offset"), F.lit(False)))
    )


def _copy_facts(sc):
    """Per logical send, from its copies joined with the send (sc): where they are (_fact_cols), and its
    broker group (c_broker: its acknowledged try's, delivery_table.answer_group; with no copy of that try,
    the group of its copies in its topic when they are in one), or the groups when its copies are in
    several and its answer tells none apart (c_ambiguous)."""
    from pyspark.sql import functions as F

    facts = sc.groupBy("send_id").agg(*_fact_cols())
    group, cands = answer_group()
    return (
        facts.withColumn(
            "c_broker",
            F.coalesce(group, F.when((F.size(cands) == 0) & (F.size("g_any") == 1), F.col("g_any")[0])),
        )
        .withColumn(
            "c_ambiguous",
            F.when(F.col("c_broker").isNull() & (F.size(cands) > 1), cands).when(
                F.col("c_broker").isNull() & (F.size(cands) == 0) & (F.size("g_any") > 1), F.col("g_any")
            ),
        )
        .drop("g_top", "n_top", "g_park", "n_park", "g_any", "has_name")
    )


def _fact_cols() -> list:
    """The aggregates of a send's copies: on a master (in its topic), servable, on a slave, parked, where;
    the groups of the acknowledged try's copies (g_*), of those its answer names (n_*), of any copy in its
    topic (g_any); mqs: its master copies' queue places (delivery_table.placed picks one)."""
    from pyspark.sql import functions as F

    in_topic = F.col("topic") == F.col("s_topic")
    parked_copy = F.col("topic").isin(*PARKED_TOPICS)
    # the acknowledged try's copies (its UNIQ_KEY) in the topic, and those its answer names
    ok_top, _ok_park, named = answer_conds("ok_")
    return [
        F.max((in_topic & F.col("is_master")).cast("int")).alias("on_master"),
        F.max((in_topic & F.col("is_master") & F.col("queued")).cast("int")).alias("servable"),
        # a copy parked on a slave only (a delayed or half message a forked slave holds) is stranded too;
        # parked means parked where the group is served from: on a master
        F.max(((in_topic | parked_copy) & ~F.col("is_master")).cast("int")).alias("on_slave"),
        F.max((parked_copy & F.col("is_master")).cast("int")).alias("parked"),
        F.sort_array(F.collect_set(F.concat_ws("@", "node", F.col("physical_offset").cast("string")))).alias("where"),
        *answer_aggs("ok_"),
        groups_of(in_topic).alias("g_any"),
        # the master copies' places in their queues (where a consumer would find it), the acknowledged
        # try's named copy first: delivery_table.placed takes the one in the send's group
        F.collect_list(
            F.when(
                in_topic & F.col("is_master"),
                F.struct(
                    F.col("broker_name").alias("b"),
                    F.when(ok_top & named, 0).when(ok_top, 1).otherwise(2).alias("prio"),
                    "node",
                    "queue_id",
                    "queue_offset",
                ),
            )
        ).alias("mqs"),
    ]


def _subscriptions(h):
    """4a. What each group listened to, in one job: per (group, topic) whether it subscribed or received
    (and orderly), and the parts of the group's window, summed over its topics. The window: from its
    subscribe (FROM_NOW) or from the first send (FROM_FIRST, or no subscribe line), to the last
    unsubscribe once every consumer of the group has shut down (open while one still runs). Returns
    {group: topics}, the orderly groups, {group: (start or None, end or None)}."""
    from pyspark.sql import functions as F

    subs: dict[str, set] = {}
    ordered_groups = set()
    win: dict[str, list] = {}
    op = F.col("op")
    for r in (
        h.filter(op.isin("subscribe", "receive", "unsubscribe"))
        .groupBy("grp", "topic")
        .agg(
            F.max(op.isin("subscribe", "receive").cast("int")).alias("sr"),
            F.max(
                F.when(op.isin("subscribe", "receive"), F.coalesce(F.col("ordered"), F.lit(False)).cast("int"))
            ).alias("o"),
            F.sum((op == "subscribe").cast("int")).alias("subs"),
            F.sum((op == "unsubscribe").cast("int")).alias("unsubs"),
            F.min(F.when((op == "subscribe") & (F.coalesce(F.col("status"), F.lit("")) != FROM_NOW), F.lit(1))).alias(
                "first"
            ),
            F.min(F.when(op == "subscribe", F.col("start_ms"))).alias("since"),
            F.max(F.when(op == "unsubscribe", F.col("start_ms"))).alias("until"),
        )
        .collect()
    ):
        if r["topic"] is not None and r["sr"]:
            subs.setdefault(r["grp"], set()).add(r["topic"])
            if r["o"]:
                ordered_groups.add(r["grp"])
        w = win.setdefault(r["grp"], [0, 0, None, None, None])
        w[0] += r["subs"] or 0
        w[1] += r["unsubs"] or 0
        for i, v, pick in ((2, r["first"], min), (3, r["since"], min), (4, r["until"], max)):
            if v is not None:
                w[i] = v if w[i] is None else pick(w[i], v)
    windows = {}
    for g, (n_subs, n_unsubs, first, since, until) in win.items():
        start = None if first or not n_subs else since
        end = until if n_subs and n_unsubs >= n_subs else None
        windows[g] = (start, end)
    return subs, ordered_groups, windows


def _owed(sends, facts, per, subs, windows, run_dir):
    """4b. What each group is owed: the sends to a topic it subscribed to (or received from), within its
    window, with the send's facts, its place (delivery_table.placed) and how many times the group received it (n), judged
    (_judged)."""
    from pyspark.sql import functions as F

    sub_rows = [(g, t, *windows.get(g, (None, None))) for g, ts in subs.items() for t in sorted(ts)]
    by_topic: dict[str, list] = {}
    for g, t, w_start, w_end in sub_rows:
        by_topic.setdefault(t, []).append(
            F.struct(
                F.lit(g).alias("grp"),
                F.lit(w_start).cast("long").alias("w_start"),
                F.lit(w_end).cast("long").alias("w_end"),
            )
        )
    subscribed = lit_map({t: F.array(*gs) for t, gs in by_topic.items()})
    at = F.coalesce(F.col("ack_ms"), F.col("first_ms"))
    owed = (
        sends.select("*", F.explode(subscribed[F.col("s_topic")]).alias("sub"))
        .select("*", "sub.*")
        .drop("sub")
        .filter(
            (F.col("w_start").isNull() | (at >= F.col("w_start"))) & (F.col("w_end").isNull() | (at <= F.col("w_end")))
        )
        .join(facts, "send_id", "left")
        .transform(placed)
        .join(per.withColumnRenamed("sid", "send_id"), ["grp", "send_id"], "left")
        .withColumn("n", F.coalesce("n", F.lit(0)))
        .withColumn("dup", F.coalesce("dup", F.lit(0)))
        .fillna(0, ["on_master", "servable", "on_slave", "parked"])
    )
    return _judged(owed, run_dir)


def _judged(owed, run_dir):
    """Each owed send's state and, when lost, why (the module's doc)."""
    from pyspark.sql import functions as F

    # where each group's consumers stopped (rmqha.chaos.run's drain): a queued message at or past it is backlog
    # (the group never got that far: a stalled or stopped consumer), before it the consumer passed it by
    committed = [
        (g, m, q, c)
        for g, per in (runfolder.drain_committed(run_dir) if run_dir else {}).items()
        for m, qs in per.items()
        for q, c in qs.items()
    ]
    committed_at = lit_map({f"{g}\u0001{m}\u0001{q}": c for g, m, q, c in committed}, "long")

    def past_committed(x):  # a master copy at or past where the group's consumers stopped in its queue
        return x["queue_offset"] >= committed_at[F.concat_ws("\u0001", "grp", x["node"], x["queue_id"].cast("string"))]

    # a send in no broker group has no one queue: it is backlog when some group's queue never got that far
    owed = owed.withColumn(
        "backlog",
        F.when(F.col("broker").isNotNull(), past_committed(F.col("mq"))).otherwise(F.exists("mqs", past_committed)),
    )
    got = F.col("n") > 0
    state = (
        F.when(F.col("state0") != "acked", F.col("state0"))
        .when(got, "delivered")
        .when((F.col("on_master") == 0) & (F.col("parked") == 1), "parked")
        .when((F.col("on_master") == 0) & (F.col("on_slave") == 1), "stranded")
        .otherwise("lost")
    )
    reason = (
        F.when((F.col("servable") == 1) & F.col("backlog"), REASONS[0])
        .when(F.col("servable") == 1, "queued")
        .when(F.col("on_master") == 1, "unqueued")
        .otherwise("nowhere")
    )
    return (
        owed.withColumn("state", state)
        .withColumn("reason", F.when(F.col("state") == "lost", reason))
        .withColumn("gone_after", got & (F.col("on_master") == 0) & (F.col("parked") == 0))
    )


def _owed_counts():
    """The owed sends' states and lost reasons, aggregated per group."""
    from pyspark.sql import functions as F

    got = F.col("n") > 0
    return [
        *[
            F.sum((F.col("state") == s).cast("int")).alias(s)
            for s in ("delivered", "stranded", "parked", "lost", "unconfirmed", "indeterminate")
        ],
        *[F.sum(((F.col("state") == "lost") & (F.col("reason") == x)).cast("int")).alias("r_" + x) for x in REASONS],
        F.sum((F.col("state0") == "acked").cast("int")).alias("acknowledged"),
        F.sum(((F.col("state0") == "acked") & F.col("gone_after")).cast("int")).alias("after"),
        F.sum(((F.col("state0") == "unconfirmed") & F.col("gone_after")).cast("int")).alias("u_after"),
        F.sum(((F.col("state0") == "unconfirmed") & got).cast("int")).alias("u_got"),
        F.sum(((F.col("state0") == "indeterminate") & got).cast("int")).alias("i_got"),
        F.sum(F.greatest(F.col("dup"), F.lit(0))).alias("dups"),
        F.sum(((F.col("state0") == "acked") & F.col("ambiguous").isNotNull()).cast("int")).alias("amb"),
        F.slice(
            F.array_sort(
                F.collect_set(
                    F.when(
                        (F.col("state0") == "acked") & F.col("ambiguous").isNotNull(),
                        F.concat("send_id", F.lit(" ("), F.array_join("ambiguous", ", "), F.lit(")")),
                    )
                )
            ),
            1,
            MAX_LISTED,
        ).alias("amb_ex"),
        F.lit(1).alias("is_owed"),
    ]


def _group_deliveries(owed, recv, subs, ordered_groups) -> list[GroupDelivery]:
    """Each group's counts: the owed sends' states and lost reasons per group beside its receives (one job),
    and the sends it received out of order (_reordered)."""
    from pyspark.sql import functions as F

    owed_by_grp = owed.groupBy("grp").agg(*_owed_counts())
    recv_by_grp = recv.groupBy("grp").agg(
        F.count("*").alias("receives"), F.sum(F.col("sid").isNull().cast("int")).alias("unexpected")
    )
    agg, reasons, rcount, unexpected = {}, {}, {}, {}
    for r in owed_by_grp.join(recv_by_grp, "grp", "full_outer").collect():
        if r["is_owed"]:
            agg[r["grp"]] = r
            lost_by = {x: r["r_" + x] for x in REASONS if r["r_" + x]}
            if lost_by:
                reasons[r["grp"]] = lost_by
        if r["receives"]:
            rcount[r["grp"]] = r["receives"]
            if r["unexpected"]:
                unexpected[r["grp"]] = r["unexpected"]
    reordered = _reordered(owed, ordered_groups)
    out = []
    for g in sorted(subs):
        a = agg.get(g)
        gd = GroupDelivery(g, sorted(subs[g]), g in ordered_groups)
        if a is not None:
            gd.acknowledged, gd.delivered, gd.lost = int(a["acknowledged"]), int(a["delivered"]), int(a["lost"])
            gd.stranded, gd.parked = int(a["stranded"]), int(a["parked"])
            gd.unconfirmed, gd.indeterminate = int(a["unconfirmed"]), int(a["indeterminate"])
            gd.unconfirmed_delivered, gd.indeterminate_delivered = int(a["u_got"]), int(a["i_got"])
            gd.lost_after_delivery = int(a["after"])
            gd.unconfirmed_lost_after_delivery = int(a["u_after"])
            gd.duplicates = int(a["dups"] or 0)
            gd.ambiguous = int(a["amb"] or 0)
            if gd.ambiguous:
                gd.examples[ID_AMBIGUOUS] = list(a["amb_ex"])
        gd.lost_by_reason = dict(sorted(reasons.get(g, {}).items()))
        gd.receives = int(rcount.get(g, 0))
        gd.unexpected = int(unexpected.get(g, 0))
        gd.reordered = int(reordered.get(g, 0))
        out.append(gd)
    return out


def _reordered(owed, ordered_groups) -> dict[str, int]:
    """5. Order per sharding key, for groups with an orderly consumer: first receives of one producer's key
    must follow the order of its acknowledgements."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if not ordered_groups:
        return {}
    got = F.col("n") > 0
    w = Window.partitionBy("grp", "producer", "shard").orderBy("first")
    ordv = (
        owed.filter(
            F.col("grp").isin(*ordered_groups) & got & F.col("shard").isNotNull() & F.col("ack_seq").isNotNull()
        )
        .withColumn("prev", F.max("ack_seq").over(w.rowsBetween(Window.unboundedPreceding, -1)))
        .filter(F.col("ack_seq") < F.col("prev"))
    )
    return {r["grp"]: r["count"] for r in ordv.groupBy("grp").count().collect()}


def _acked_on_group(spark, sends, facts, fault_list) -> dict[str, int]:
    """5b. Per fault: acknowledged sends its own group stored while it was active (the group that
    acknowledged each: delivery_table.placed); a send stored in two groups that its answer does not tell apart counts on
    no group's."""
    from pyspark.sql import functions as F

    fdf = spark.createDataFrame(
        [(x.label, x.group, x.start_ms, x.end_ms) for x in fault_list],
        "label string, f_group string, f_start long, f_end long",
    )
    hit = (
        sends.filter(F.col("acked") == 1)
        .join(facts.select("send_id", "c_broker", F.lit(True).alias("copied")), "send_id", "left")
        .withColumn("broker", F.coalesce("ok_broker", "c_broker"))
        # a fault on every group (cluster-power-loss: its group is None) counts every group's acks
        # that some node stores or whose answer names its group
        .join(
            F.broadcast(fdf),
            (
                (F.col("broker") == F.col("f_group"))
                | (F.col("f_group").isNull() & (F.col("broker").isNotNull() | F.col("copied").isNotNull()))
            )
            & (F.col("ack_ms") >= F.col("f_start") - AT_RISK_MS)
            & (F.col("f_end").isNull() | (F.col("ack_ms") <= F.col("f_end"))),
        )
        .groupBy("label")
        .count()
        .collect()
    )
    return {x.label: 0 for x in fault_list} | {r["label"]: r["count"] for r in hit}


def _write_details(f: DeliveryFindings, owed, recv, fault_list, out_dir) -> None:
    """6. Every message behind a FAIL, with its faults, to delivery.jsonl (streamed: no cap), and each
    group's examples; f.by_fault counts them per fault."""
    from pyspark.sql import functions as F

    problems = owed.filter(
        (F.col("state").isin("lost", "stranded")) | ((F.col("state0") == "acked") & F.col("gone_after"))
    )
    strange = recv.filter(F.col("sid").isNull())
    by_group = {g.group: g for g in f.groups}
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        f.detail_path = os.path.join(out_dir, DETAIL_FILE)
    fh = open(f.detail_path, "w") if f.detail_path else None
    try:
        seen_by_fault = _problem_lines(problems, fault_list, by_group, f, fh)
        _unexpected_lines(strange, by_group, f, fh)
    finally:
        if fh:
            fh.close()
    f.by_fault = {label: {k: len(v) for k, v in kinds.items()} for label, kinds in seen_by_fault.items()}


def _problem_lines(problems, fault_list, by_group, f: DeliveryFindings, fh) -> dict[str, dict[str, set]]:
    """The lost, stranded and lost-after-delivery sends: a detail line and an example each; returns, per
    fault they count against, the send_ids per verdict id."""
    seen_by_fault: dict[str, dict[str, set]] = {}
    for r in (
        problems.select(
            "grp", "send_id", "s_topic", "producer", "state", "reason", "gone_after", "ack_ms", "where", "broker"
        )
        .orderBy("grp", "ack_ms")
        .toLocalIterator()
    ):
        kind = ID_LOST_AFTER if r["state"] == "delivered" else (ID_STRANDED if r["state"] == "stranded" else ID_LOST)
        labels = loss_suspects(fault_list, r["ack_ms"], r["broker"])
        # the matrix's cells: a loss counts against the fault that destroyed it (faults.loss_blame: the first
        # power cut of its group after it, ...), not one that merely happened when it was acknowledged;
        # a record still on its master (a consumer passed it by, or it has no queue entry) was destroyed by none
        blamed = loss_blame(fault_list, r["ack_ms"], r["broker"], destroyed(kind, r["reason"]))
        for label in blamed:
            seen_by_fault.setdefault(label, {}).setdefault(kind, set()).add(r["send_id"])
        item = {
            "verdict": kind,
            "group": r["grp"],
            "send_id": r["send_id"],
            "topic": r["s_topic"],
            "producer": r["producer"],
            "reason": r["reason"],
            "acked_ms": r["ack_ms"],
            "where": list(r["where"] or []),
            "faults": labels,
            "blamed": blamed,
            "broker": r["broker"],
        }
        _example(
            by_group[r["grp"]],
            kind,
            f"{r['send_id']}"
            + (f" ({r['reason']})" if r["reason"] else "")
            + (f" at {', '.join(item['where'][:2])}" if item["where"] else "")
            + f" [{', '.join(labels)}]",
        )
        f.detail_lines += 1
        if fh:
            fh.write(json.dumps(item) + "\n")
    return seen_by_fault


def _unexpected_lines(strange, by_group, f: DeliveryFindings, fh) -> None:
    """The receives that match no send: a detail line and an example each."""
    for r in (
        strange.select("grp", "client", "topic", "uniq_key", "send_id", "queue_id", "queue_offset", "start_ms")
        .orderBy("grp", "start_ms")
        .toLocalIterator()
    ):
        if r["grp"] not in by_group:
            continue
        _example(
            by_group[r["grp"]],
            ID_UNEXPECTED,
            f"{r['uniq_key']} (keys {r['send_id']}) on {r['topic']} q{r['queue_id']}@{r['queue_offset']}"
            f" by {r['client']}",
        )
        f.detail_lines += 1
        if fh:
            fh.write(
                json.dumps(
                    {
                        "verdict": ID_UNEXPECTED,
                        "group": r["grp"],
                        "client": r["client"],
                        "topic": r["topic"],
                        "uniq_key": r["uniq_key"],
                        "keys": r["send_id"],
                        "queue_id": r["queue_id"],
                        "queue_offset": r["queue_offset"],
                        "received_ms": r["start_ms"],
                    }
                )
                + "\n"
            )


def _example(g: GroupDelivery, kind: str, text: str) -> None:
    xs = g.examples.setdefault(kind, [])
    if len(xs) < MAX_LISTED:
        xs.append(text)


def queue_consistency(spark, decoded, cq, nodes: list[Node], have: set | None = None) -> list[QueueConsistency]:
    """Per node: every dispatchable record of its log has the consume-queue unit at its queue offset
    pointing at it, and every unit points at a record of the log (a record with no unit can never be
    pulled: the broker serves pulls from the queue, not from the log). have: the nodes judged
    (queued_nodes; the nodes cq has units of when not given)."""
    from pyspark.sql import functions as F

    if have is None:
        have = {r["node"] for r in cq.select("node").distinct().collect()}
    recs = (
        decoded.filter((F.col("status") == "ok") & F.col("node").isin(list(have) or [""]))
        .filter(~(F.col("sys_flag").bitwiseAND(TRAN_TYPE_MASK).isin(TRAN_PREPARED, TRAN_ROLLBACK)))
        .select("node", "topic", "queue_id", "queue_offset", "physical_offset")
    )
    j = recs.join(cq, ["node", "topic", "queue_id", "queue_offset"], "full_outer")
    kinds = j.withColumn(
        "k",
        F.when(F.col("cq_phys").isNull(), "unqueued")
        .when(F.col("physical_offset").isNull(), "dangling")
        .when(F.col("cq_phys") != F.col("physical_offset"), "mismatch")
        .otherwise("ok"),
    )
    counts: dict[str, QueueConsistency] = {n.name: QueueConsistency(n.name) for n in nodes if n.name in have}
    for r in kinds.groupBy("node", "k").count().collect():
        q = counts[r["node"]]
        if r["k"] in ("ok", "unqueued", "mismatch"):
            q.records += r["count"]
        if r["k"] in ("ok", "dangling", "mismatch"):
            q.entries += r["count"]
        if r["k"] in ("unqueued", "mismatch"):
            q.unqueued += r["count"]
        if r["k"] in ("dangling", "mismatch"):
            q.dangling += r["count"]
    if not any(q.unqueued or q.dangling for q in counts.values()):
        return [counts[k] for k in sorted(counts)]  # nothing to list (saves a Spark job)
    for r in (
        kinds.filter(F.col("k") != "ok")
        .orderBy("node", "topic", "queue_id", "queue_offset")
        .select("node", "topic", "queue_id", "queue_offset", "physical_offset", "cq_phys", "k")
        .limit(MAX_LISTED * max(1, len(counts)))
        .collect()
    ):
        q = counts[r["node"]]
        if len(q.examples) < MAX_LISTED:
            q.examples.append(
                f"{r['topic']} q{r['queue_id']}@{r['queue_offset']}: {r['k']} (record at "
                f"{r['physical_offset']}, unit -> {r['cq_phys']})"
            )
    return [counts[k] for k in sorted(counts)]
