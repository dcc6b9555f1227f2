"""Which broker group answered a send, and the audit's per-send and per-try tables (Spark).

The one owner of the group attribution: a try's answer is its group's when the recorder wrote the group
(broker_name: the Rust client); else the group of the copy of its UNIQ_KEY in the send's topic (a delayed
or half message's copy parked on a master when there is none); when the client's internal retry left a
copy in two groups, the copy the answer names (its queue id, queue offset and the commit-log offset of its
offsetMsgId). The delivery checker places each acknowledged send by its SEND_OK try (delivery_gather.py);
the tables below place every answered try the same way.

OUT/sends.jsonl, one line per logical send (every try of one send_id), sorted by send_id:
    send_id, topic, state (acked | unconfirmed | indeterminate), first_ms (its first try), acked_ms (its
    first SEND_OK's end), group (the broker group that acknowledged it; for a send never acknowledged, the
    group of its copies in its topic when they are in one), ambiguous (the groups, when its copies are in
    several and its answer names none), stored (some node holds a copy of a try, in any topic), parked
    (no copy in its topic on a master, one parked on a master: not due yet), owed (the consumer groups whose
    window and topics it falls in), received (the groups that received it), duplicates (receives beyond
    each group's first, delivery_acks.receives_per_send's)
OUT/tries.jsonl, one line per answered try, sorted by send_id and start:
    send_id, seq (its line's place in its recorder), start_ms, end_ms, status (a SEND_STATUSES answer, else ERROR), group (the group that answered
    it; an ERROR only when the recorder wrote one)

The matrix (rmqha/matrix/figures.py) slices them per fault. Tests: tests/unit/pipeline/test_delivery_groups.py.
"""

from __future__ import annotations

import json
import os

from rmqha.runs.history import SEND_STATUSES

from .delivery import PARKED_TOPICS

SENDS_FILE = "sends.jsonl"
TRIES_FILE = "tries.jsonl"


def offset_of(col):
    """The commit-log offset an offsetMsgId names (its last 16 hex digits, after the store host: 32 or 56 hex
    digits, rmqha/broker/store/record.py parse_offset_msg_id); null when the column is not one."""
    from pyspark.sql import functions as F

    return F.when(
        col.rlike("^([0-9A-Fa-f]{24})?[0-9A-Fa-f]{32}$"), F.conv(F.substring(col, -16, 16), 16, 10).cast("long")
    )


def answer_conds(p: str) -> tuple:
    """On copies joined with an answer (its columns p+uniq, p+qid, p+qoff, p+phys, and the send's s_topic):
    (a copy of its UNIQ_KEY in the topic, one parked on a master, a copy at the place the answer names)."""
    from pyspark.sql import functions as F

    mine = F.col("uniq_key") == F.col(p + "uniq")
    top = (F.col("topic") == F.col("s_topic")) & mine
    park = F.col("topic").isin(*PARKED_TOPICS) & F.col("is_master") & mine
    named = F.lit(True)
    for have, col in ((p + "phys", "physical_offset"), (p + "qoff", "queue_offset"), (p + "qid", "queue_id")):
        named = named & (F.col(have).isNull() | (F.col(col) == F.col(have)))
    return top, park, named


def groups_of(cond):
    """The broker groups of the copies cond holds for, sorted (an aggregate)."""
    from pyspark.sql import functions as F

    return F.array_sort(F.collect_set(F.when(cond, F.col("broker_name"))))


def answer_aggs(p: str) -> list:
    """The aggregates answer_group() reads: the groups of the answer's copies in the topic (g_top) and
    parked (g_park), of those it names (n_top, n_park), and whether it names a place (has_name)."""
    from pyspark.sql import functions as F

    top, park, named = answer_conds(p)
    return [
        groups_of(top).alias("g_top"),
        groups_of(top & named).alias("n_top"),
        groups_of(park).alias("g_park"),
        groups_of(park & named).alias("n_park"),
        F.max(F.col(p + "phys").isNotNull() | F.col(p + "qoff").isNotNull()).alias("has_name"),
    ]


def answer_group() -> tuple:
    """(the group of the answer's copies when they are in one, or the one it names; the candidate groups),
    as columns over answer_aggs()."""
    from pyspark.sql import functions as F

    cands = F.when(F.size("g_top") > 0, F.col("g_top")).otherwise(F.col("g_park"))
    told = F.when(~F.col("has_name"), cands).when(F.size("g_top") > 0, F.col("n_top")).otherwise(F.col("n_park"))
    return F.when(F.size(cands) == 1, cands[0]).when((F.size(cands) > 1) & (F.size(told) == 1), told[0]), cands


def placed(df):
    """A send's broker group and its master copy's queue place, on sends joined with delivery_gather's
    facts: the group that acknowledged it (the answer's broker_name when its recorder wrote one; else the
    copies' choice, c_broker: the acknowledged try's copy, narrowed by what its answer names), `ambiguous`
    (the groups, when that choice found copies in several and the answer tells none apart), and `mq`: the
    master copy in that group, the acknowledged try's named copy first (none when there is no group: no
    group's copy is picked over another's)."""
    from pyspark.sql import functions as F

    broker = F.col("broker")
    return (
        df.withColumn("broker", F.coalesce("ok_broker", "c_broker"))
        .withColumn("ambiguous", F.when(F.col("ok_broker").isNull(), F.col("c_ambiguous")))
        .withColumn(
            "mq",
            F.when(broker.isNotNull(), F.array_min(F.filter("mqs", lambda x: x["b"] == broker))),
        )
    )


def _try_groups(h, sends, copies):
    """Every answered try (send_id, start_ms, end_ms, status, group): status ERROR for an answer that is not
    a SEND_STATUSES one; group: the recorder's broker_name, else (a broker's answer) answer_group()."""
    from pyspark.sql import functions as F

    named = F.when(F.col("broker_name") != "", F.col("broker_name"))
    answers = (
        h.filter((F.col("op") == "send") & F.col("send_id").isNotNull())
        .select(
            "send_id",
            F.coalesce("seq", F.lit(0)).alias("seq"),
            F.coalesce("start_ms", F.lit(0)).alias("start_ms"),
            F.coalesce("end_ms", "start_ms", F.lit(0)).alias("end_ms"),
            F.when(F.col("status").isin(*SEND_STATUSES), F.col("status")).otherwise("ERROR").alias("status"),
            named.alias("named"),
            F.col("uniq_key").alias("t_uniq"),
            F.col("queue_id").alias("t_qid"),
            F.col("queue_offset").alias("t_qoff"),
            offset_of(F.col("offset_msg_id")).alias("t_phys"),
        )
        .withColumn(
            "akey",
            F.concat_ws("\u0001", "send_id", *[F.coalesce(F.col(c).cast("string"), F.lit("-")) for c in _TRY_PLACE]),
        )
    )
    group, _cands = answer_group()
    asked = answers.filter((F.col("status") != "ERROR") & F.col("named").isNull()).select(
        "akey", "send_id", *_TRY_PLACE
    )
    attributed = (
        asked.dropDuplicates(["akey"])
        .join(sends.select("send_id", "s_topic"), "send_id")
        .join(copies.drop("send_id"), F.col("t_uniq") == F.col("uniq_key"))
        .groupBy("akey")
        .agg(*answer_aggs("t_"))
        .select("akey", group.alias("t_group"))
    )
    return (
        answers.join(attributed, "akey", "left")
        .withColumn(
            "group", F.when(F.col("status") == "ERROR", F.col("named")).otherwise(F.coalesce("named", "t_group"))
        )
        .select("send_id", "seq", "start_ms", "end_ms", "status", "group")
    )


_TRY_PLACE = ("t_uniq", "t_qid", "t_qoff", "t_phys")


def _send_rows(sends, facts, per, owed):
    """Every logical send with its state, group, owed and receiving groups (the module's doc)."""
    from pyspark.sql import functions as F

    owed_by = owed.groupBy("send_id").agg(F.array_sort(F.collect_set("grp")).alias("owed"))
    got_by = (
        per.filter(F.col("n") > 0)
        .groupBy(F.col("sid").alias("send_id"))
        .agg(
            F.array_sort(F.collect_set("grp")).alias("received"),
            F.sum(F.greatest(F.col("dup"), F.lit(0))).alias("duplicates"),
        )
    )
    return (
        sends.join(facts.withColumn("stored", F.lit(True)), "send_id", "left")
        .transform(placed)
        .join(owed_by, "send_id", "left")
        .join(got_by, "send_id", "left")
        .select(
            "send_id",
            F.col("s_topic").alias("topic"),
            F.col("state0").alias("state"),
            "first_ms",
            F.col("ack_ms").alias("acked_ms"),
            F.col("broker").alias("group"),
            "ambiguous",
            F.coalesce("stored", F.lit(False)).alias("stored"),
            ((F.coalesce("on_master", F.lit(0)) == 0) & (F.coalesce("parked", F.lit(0)) == 1)).alias("parked"),
            F.coalesce("owed", F.array().cast("array<string>")).alias("owed"),
            F.coalesce("received", F.array().cast("array<string>")).alias("received"),
            F.coalesce("duplicates", F.lit(0)).cast("long").alias("duplicates"),
        )
    )


def write(out_dir: str | None, h, sends, facts, copies, per, owed) -> None:
    """OUT/sends.jsonl and OUT/tries.jsonl (the module's doc), streamed."""
    if not out_dir:
        return
    os.makedirs(out_dir, exist_ok=True)
    _stream(_send_rows(sends, facts, per, owed).orderBy("send_id"), os.path.join(out_dir, SENDS_FILE))
    _stream(
        _try_groups(h, sends, copies).orderBy("send_id", "start_ms", "end_ms", "status", "group"),
        os.path.join(out_dir, TRIES_FILE),
    )


def _stream(df, path: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        for r in df.toLocalIterator():
            fh.write(json.dumps(r.asDict(), sort_keys=True) + "\n")
    os.replace(tmp, path)
