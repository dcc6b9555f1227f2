"""The delivery checker's receive counts when a consumer acks (tests: tests/unit/pipeline/test_delivery_pop.py).

A push consumer's every receive after the first is a duplicate. A POP consumer (the 5.x client through the
proxy: its receive lines carry the delivery attempt, its acks are "ack" lines) may receive a message again
before it acks it: the message was not consumed, its invisible time passed and the broker revived it. That
is a redelivery; only a receive after the group's first ACKED of the message is a duplicate.
"""

from __future__ import annotations

from rmqha.runs.history import ACKED


def first_acks(h, known, uniq_map):
    """(grp, sid, acked_at): each send's first successful ack per group; None when no line is an ack."""
    from pyspark.sql import functions as F

    a = h.filter((F.col("op") == "ack") & (F.col("status") == ACKED))
    if a.limit(1).count() == 0:
        return None
    return (
        a.join(known, F.col("send_id") == F.col("k_sid"), "left")
        .join(uniq_map, "uniq_key", "left")
        .withColumn("sid", F.coalesce("k_sid", "u_sid"))
        .filter(F.col("sid").isNotNull())
        .groupBy("grp", "sid")
        .agg(F.min("start_ms").alias("acked_at"))
    )


def receives_per_send(recv, acks):
    """(grp, sid, n, dup, first): receives of each send per group, how many were duplicates, the first."""
    from pyspark.sql import functions as F

    r = recv.filter(F.col("sid").isNotNull())
    if acks is not None:
        r = r.join(acks, ["grp", "sid"], "left")
    else:
        r = r.withColumn("acked_at", F.lit(None).cast("long"))
    pop = F.col("attempt").isNotNull()
    return (
        r.groupBy("grp", "sid")
        .agg(
            F.count("*").alias("n"),
            F.max(pop.cast("int")).alias("pop"),
            F.sum((F.col("acked_at").isNotNull() & (F.col("start_ms") > F.col("acked_at"))).cast("int")).alias("after"),
            F.min(F.struct("start_ms", "client", "seq")).alias("first"),
        )
        .withColumn("dup", F.when(F.col("pop") == 1, F.col("after")).otherwise(F.col("n") - 1))
        .drop("pop", "after")
    )
