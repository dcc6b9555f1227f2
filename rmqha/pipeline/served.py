"""Which node served each receive: the histories' receives matched to the nodes' served pulls.

The consumer's client does not say which broker answered (see rmqha/broker/observability/served.py), so every node logs
the queue-offset ranges it returned and the sampler copies them into RUN/served/pulls.jsonl. A receive
(broker group, topic, queue, queue offset, time) was served by the node of its group whose latest
pull answered at or before the receive (plus SKEW_MS, for the clocks of containers and clients)
covers its queue offset. A receive is "unattributed" when no such pull is in the file (or two nodes' pulls
answered at the same millisecond cover it: neither is picked): the node died
before the sampler's next round read its log, the run predates this log, or the message came back
through its group's retry topic (the client reports the original topic with the retry queue's
offset).

While a master is out (killed, powered off, restarting, paused or partitioned), its group's consumers
can only receive from a slave, and only once their route stops naming the master (the 4.x clients
refresh routes every 30 s); `outages()` counts, per such fault, the group's receives by serving node.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from rmqha.runs.faults import MASTER_OUT

SKEW_MS = 2000
BUCKET_MS = 100
UNATTRIBUTED = "unattributed"


def served_files(run_dir: str) -> list[str]:
    d = os.path.join(run_dir, "served")
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".jsonl")) if os.path.isdir(d) else []


def load(run_dir: str) -> tuple[list[tuple], int]:
    """(node, brokerName, topic, queueId, from, next, ts_ms) per served pull, and how many entries the
    nodes dropped before the sampler read them."""
    rows, dropped, seen = [], 0, set()
    for path in served_files(run_dir):
        with open(path) as fh:
            for line in fh:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue  # a line cut by a killed sampler
                if r.get("dropped"):
                    dropped += int(r["dropped"])
                    continue
                key = (r.get("node"), r.get("incarnation"), r.get("seq"))
                if key in seen:
                    continue  # a sampler restarted on the same run reads a node's log again
                seen.add(key)
                try:
                    rows.append(
                        (
                            r["node"],
                            r["brokerName"],
                            r["topic"],
                            int(r["queueId"]),
                            int(r["from"]),
                            int(r["next"]),
                            int(r["ts_ms"]),
                        )
                    )
                except (KeyError, TypeError, ValueError):
                    continue
    return rows, dropped


SCHEMA = (
    "served_node string, served_broker string, served_topic string, served_qid int, "
    "served_from long, served_next long, served_ts long"
)


def attribute(spark, receives, served_rows: list[tuple]):
    """receives: a DataFrame with client, seq, broker, topic, queue_id, queue_offset, start_ms.
    Returns it with a `served_by` column (a node name, or UNATTRIBUTED)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if not served_rows:
        return receives.withColumn("served_by", F.lit(UNATTRIBUTED))
    sdf = spark.createDataFrame(served_rows, SCHEMA)
    cond = (
        (F.col("broker") == F.col("served_broker"))
        & (F.col("topic") == F.col("served_topic"))
        & (F.col("queue_id") == F.col("served_qid"))
        & (F.col("queue_offset") >= F.col("served_from"))
        & (F.col("queue_offset") < F.col("served_next"))
        & (F.col("served_ts") <= F.col("start_ms") + SKEW_MS)
    )
    per_receive = Window.partitionBy("client", "seq")
    latest = per_receive.orderBy(F.col("served_ts").desc())
    # the latest covering pulls; when two nodes answered them at the same ms, neither is picked
    matched = (
        receives.join(F.broadcast(sdf) if len(served_rows) < 200000 else sdf, cond, "left")
        .withColumn("_top", F.max("served_ts").over(per_receive))
        .filter(F.col("served_ts").isNull() | (F.col("served_ts") == F.col("_top")))
        .withColumn("_nodes", F.size(F.collect_set("served_node").over(per_receive)))
        .withColumn("_n", F.row_number().over(latest))
        .filter(F.col("_n") == 1)
    )
    one = F.when(F.col("_nodes") == 1, F.col("served_node"))
    return matched.withColumn("served_by", F.coalesce(one, F.lit(UNATTRIBUTED))).drop(
        "_top", "_nodes", "_n", *[c.split()[0] for c in SCHEMA.split(", ")]
    )


@dataclass
class Outage:
    label: str  # the fault, as rmqha.pipeline.faults labels it
    group: str
    start_ms: int
    end_ms: int | None
    by_node: dict = field(default_factory=dict)  # serving node -> receives of the group during the fault


def outages(faults, buckets: list[tuple[str, str, int, int]]) -> list[Outage]:
    """buckets: (broker group, serving node, start of a BUCKET_MS bucket, receives in it)."""
    out = []
    for f in faults:
        if f.kind not in MASTER_OUT or f.role != "master" or not f.group or f.inject_error:
            continue
        o = Outage(f.label, f.group, f.start_ms, f.end_ms)
        end = float("inf") if f.end_ms is None else f.end_ms
        for group, node, t, n in buckets:
            if group == f.group and f.start_ms <= t + BUCKET_MS and t < end:
                o.by_node[node] = o.by_node.get(node, 0) + n
        out.append(o)
    return out


def unlogged_nodes(run_dir: str) -> dict[str, str]:
    """node -> its broker implementation, for each node of the run that does not log its served pulls:
    that log is ours alone (rmqha/broker/observability/served.py), Apache's and rocketmq-rust's brokers
    keep none, so which of their nodes served a receive is unavailable, not "none"."""
    try:
        with open(os.path.join(run_dir, "state.json"), encoding="utf-8") as fh:
            nodes = json.load(fh).get("nodes") or []
    except (OSError, ValueError, AttributeError):
        return {}
    return {
        n["name"]: n["implementation"]
        for n in nodes
        if isinstance(n, dict) and n.get("name") and n.get("implementation", "ours") != "ours"
    }


def describe(
    by_node: dict[str, int],
    unattributed: int,
    dropped: int,
    have_log: bool,
    outage_list: list[Outage],
    unlogged: dict[str, str] | None = None,
) -> str:
    unlogged = unlogged or {}
    if unlogged and not by_node:
        kinds = ", ".join(sorted(set(unlogged.values())))
        return (
            f"unavailable: the brokers of this run ({kinds}: {', '.join(sorted(unlogged))}) log no served "
            f"pulls (this broker's own log), so which node served each of the {unattributed} receives is "
            "unknown"
        )
    if not have_log:
        return (
            "no served-pull log in the run folder (RUN/served/*.jsonl, written by `python -m rmqha.cluster "
            "sample`): which node served each receive is unknown"
        )
    parts = [", ".join(f"{k} {v}" for k, v in sorted(by_node.items())) or "no receives"]
    if unattributed:
        parts.append(f"{unattributed} unattributed")
    if unlogged:
        parts.append(
            "not logged by "
            + ", ".join(f"{n} ({k})" for n, k in sorted(unlogged.items()))
            + ": what they served is among the unattributed"
        )
    if dropped:
        parts.append(f"{dropped} served pulls dropped by the nodes before they were read")
    for o in outage_list:
        got = ", ".join(f"{k} {v}" for k, v in sorted(o.by_node.items())) or "none"
        parts.append(f"during {o.label} ({o.group}'s master out): {got}")
    return "; ".join(parts)
