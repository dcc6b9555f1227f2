"""A run folder -> facts.Run: Spark decodes every node's log and aggregates the histories; everything the
checkers judge comes back to the driver as plain data (Spark stays here, for decoding and aggregating).

Tests: tests/unit/pipeline/test_audit.py, test_delivery.py and the other Spark tests (through report.run).
"""

from __future__ import annotations

import json
import os

from . import audit, decode, delivery_gather, faults, history_check, runfolder, served, trace
from .facts import Run, Series


def gather(spark, run_dir: str, out_dir: str, range_bytes: int | None = None) -> Run:
    """Decode and aggregate the run folder (writes OUT/delivery.jsonl and the trace detail file on the way:
    the per-message files are streamed, never collected)."""
    os.makedirs(out_dir, exist_ok=True)
    nodes = runfolder.load_nodes(run_dir)
    df = decode.decode(spark, nodes, range_bytes).cache()
    samples = load_metrics(runfolder.metrics_files(run_dir))
    integrity = audit.node_integrity(df, nodes)
    pairs = audit.audit_pairs(spark, df, nodes, integrity)
    fault_list = faults.load(run_dir)
    run = Run(
        run_dir=run_dir,
        nodes=nodes,
        integrity=integrity,
        pairs=pairs,
        samples=samples,
        final_acks=final_acks(samples, nodes),
        faults=fault_list,
    )
    hpaths = runfolder.history_files(run_dir)
    served_rows, run.served_dropped = served.load(run_dir)
    run.have_served_files = bool(served.served_files(run_dir))
    run.unlogged_nodes = served.unlogged_nodes(run_dir)
    masters = run.group_of_master()
    hist = None
    if hpaths:
        hist = history_check.load_histories(spark, hpaths).cache()
        run.delivery = delivery_gather.gather(spark, df, hist, nodes, fault_list, out_dir, run_dir)
        run.history = history_check.gather(spark, df, hist, nodes, served_rows)
    run.series = _series(df, hist, masters)
    if hist is not None:
        hist.unpersist()
    run.trace = _trace(df, nodes, masters, out_dir)
    df.unpersist()
    return run


# -- metrics --------------------------------------------------------------------------------------


def load_metrics(paths: list[str]) -> list[dict]:
    """Metric samples, oldest first. Takes both the documented form (ts in ms, "slaves" a map) and
    what `python -m rmqha.cluster sample` writes (ts in seconds, "slaves" a list of {addr, ackOffset},
    rows with "up": false for nodes that did not answer, which are skipped)."""
    out = []
    for p in paths:
        with open(p) as fh:
            for line in fh:
                if not line.strip():
                    continue
                r = json.loads(line)
                if r.get("up") is False or r.get("maxPhyOffset") is None:
                    continue
                ts = r.get("ts", 0)
                if ts < 1e11:  # seconds
                    r["ts"] = int(ts * 1000)
                out.append(r)
    return sorted(out, key=lambda r: r.get("ts", 0))


def _acks(sample: dict, master: str, slaves_of: dict[str, list[str]], by_addr: dict[str, str]) -> dict:
    """{slave node (or address): ackOffset} from a master's sample, in either form."""
    raw = sample.get("slaves") or {}
    if isinstance(raw, dict):
        return {by_addr.get(k, k): v for k, v in raw.items() if v is not None}
    conns = [c for c in raw if c.get("ackOffset") is not None]
    mine = slaves_of.get(master, [])
    # Through a proxy the master sees the proxy's address, not the slave's: with one slave and one
    # connection the pairing is certain; otherwise keep the addresses.
    if len(conns) == 1 and len(mine) == 1:
        return {mine[0]: conns[0]["ackOffset"]}
    return {by_addr.get(c.get("addr"), c.get("addr")): c["ackOffset"] for c in conns}


def _topology(nodes: list[runfolder.Node]):
    by_addr = {n.addr: n.name for n in nodes if n.addr}
    slaves_of: dict[str, list[str]] = {}
    for m, slaves in audit.groups(nodes).values():
        if m:
            slaves_of[m.name] = [sl.name for sl in slaves]
    return by_addr, slaves_of


def lag_series(samples: list[dict], nodes: list[runfolder.Node]) -> dict[str, list[tuple[int, int]]]:
    """slave node -> [(ts ms, lag bytes)]. From the master's per-slave ackOffset when sampled, else
    from the slave's own maxPhyOffset against the master's latest sample at or before it."""
    by_addr, slaves_of = _topology(nodes)
    node_by_name = {n.name: n for n in nodes}
    masters = {name: m.name for name, (m, _) in audit.groups(nodes).items() if m}
    series: dict[str, list[tuple[int, int]]] = {}
    latest_master: dict[str, int] = {}
    have_ack: set[str] = set()
    for s in samples:
        node = node_by_name.get(s.get("node"))
        if node is None:
            continue
        if node.is_master:
            latest_master[node.name] = s.get("maxPhyOffset", 0)
            for slave, ack in _acks(s, node.name, slaves_of, by_addr).items():
                have_ack.add(slave)
                series.setdefault(slave, []).append((s["ts"], s.get("maxPhyOffset", 0) - ack))
        elif node.name not in have_ack and "maxPhyOffset" in s:
            m = masters.get(node.broker_name)
            if m in latest_master:
                series.setdefault(node.name, []).append((s["ts"], latest_master[m] - s["maxPhyOffset"]))
    return series


def final_acks(samples: list[dict], nodes: list[runfolder.Node]) -> dict[str, int]:
    by_addr, slaves_of = _topology(nodes)
    node_by_name = {n.name: n for n in nodes}
    out = {}
    for s in samples:
        node = node_by_name.get(s.get("node"))
        if node is not None and node.is_master:
            out.update(_acks(s, node.name, slaves_of, by_addr))
    return out


# The latency-over-time plot draws every send's latency at its end time rounded down to this many ms:
# one point per (status, time step, latency) whatever the number of sends.
OVER_TIME_STEP_MS = 100


def _series(df, hist, masters: dict) -> Series:
    """One Spark job: the aggregates behind the plots and the non-OK sends' attribution, as one union."""
    from pyspark.sql import functions as F

    cols = ["kind", "key", "a", "b", "n"]

    def shape(d, kind, key, a, b, n):
        return d.select(
            F.lit(kind).alias("kind"),
            key.cast("string").alias("key"),
            a.cast("long").alias("a"),
            b.cast("long").alias("b"),
            n.cast("long").alias("n"),
        ).select(*cols)

    none = F.lit(None)
    parts = [
        shape(
            df.filter((F.col("status") == "ok") & F.col("node").isin(list(masters) or [""]))
            .groupBy("node", (F.col("store_timestamp") / 1000).cast("long").alias("s"))
            .agg(F.count("*").alias("n"), F.max(F.col("physical_offset") + F.col("size")).alias("end")),
            "stored",
            F.col("node"),
            F.col("s"),
            F.col("end"),
            F.col("n"),
        )
    ]
    if hist is not None:
        sends = hist.filter(F.col("op") == "send")
        ok = sends.filter(F.col("status") == "SEND_OK")
        lat = F.col("end_ms") - F.col("start_ms")
        step = (F.col("end_ms") / OVER_TIME_STEP_MS).cast("long") * OVER_TIME_STEP_MS
        parts += [
            shape(
                sends.filter(F.col("status") != "SEND_OK").groupBy("status", "start_ms", "end_ms").count(),
                "non_ok",
                F.col("status"),
                F.col("start_ms"),
                F.col("end_ms"),
                F.col("count"),
            ),
            shape(ok.groupBy(lat.alias("l")).count(), "latency", none, F.col("l"), none, F.col("count")),
            shape(
                ok.groupBy((F.col("end_ms") / 1000).cast("long").alias("s")).count(),
                "rate",
                none,
                F.col("s"),
                none,
                F.col("count"),
            ),
            shape(
                sends.filter(F.col("end_ms").isNotNull()).groupBy("status", step.alias("t"), lat.alias("l")).count(),
                "point",
                F.col("status"),
                F.col("t"),
                F.col("l"),
                F.col("count"),
            ),
        ]
    u = parts[0]
    for p in parts[1:]:
        u = u.unionByName(p)
    out = Series()

    def order(r):
        return (r["key"] is not None, r["key"] or "", r["a"] is not None, r["a"] or 0, r["b"] is not None, r["b"] or 0)

    for r in sorted(u.collect(), key=order):
        k = r["kind"]
        if k == "stored":
            out.stored.setdefault(masters[r["key"]], []).append((r["a"], r["n"]))
            out.curve.setdefault(masters[r["key"]], []).append((r["a"] * 1000, r["b"]))
        elif k == "non_ok":
            out.non_ok.append((r["key"], r["a"] or 0, r["b"] or 0, r["n"]))
        elif k == "latency":
            out.latencies.append((r["a"], r["n"]))
        elif k == "rate":
            out.sent_per_s.append((r["a"], r["n"]))
        else:
            out.over_time.append((r["a"], r["b"], r["key"]))
    return out


def _trace(df, nodes, masters: dict, out_dir: str | None = None) -> dict | None:
    """The trace records the masters hold (rmqha/pipeline/trace.py), matched to the stored messages; None when
    no master has its trace topic (each node's msgTraceTopicName, from its node.json or broker.properties:
    a named trace topic is read, not only 4.9's default)."""
    from pyspark.sql import functions as F

    records, topics = [], set()
    for n in nodes:
        if n.name in masters and trace.exists(n.store_dir, n.trace_topic):
            records += trace.read_store(n.store_dir, topic=n.trace_topic)
            topics.add(n.trace_topic)
    if not records:
        return None
    ids = list({r.msg_id for r in records if r.kind == "Pub" and r.msg_id})
    store_ms = {}
    if ids:
        for row in (
            df.filter(F.col("uniq_key").isin(ids) & F.col("node").isin(list(masters)))
            .groupBy("uniq_key")
            .agg(F.min("store_timestamp").alias("t"))
            .collect()
        ):
            store_ms[row["uniq_key"]] = row["t"]
    if out_dir:
        with open(os.path.join(out_dir, trace.DETAIL_FILE), "w") as fh:
            for row in trace.per_message(records, store_ms):
                fh.write(json.dumps(row) + "\n")
    return {**trace.summary(records, store_ms), "topics": sorted(topics)}
