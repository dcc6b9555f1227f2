"""Run the whole audit on a run folder and write report.md with a verdict table and PNG plots."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from . import audit, decode, delivery, dledger_log, faults, history_check, ids, offsets, runfolder, served, trace
from .verdict import FAIL, INFO, Verdict, failed


@dataclass
class Report:
    verdicts: list[Verdict]
    plots: list[str] = field(default_factory=list)
    path: str = ""
    pairs: list = field(default_factory=list)  # the replica audit's PairAudit per master/slave pair

    @property
    def failed(self) -> bool:
        return failed(self.verdicts)


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


# -- plots ----------------------------------------------------------------------------------------


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_lag(out_dir, series, pairs, master_curve, fault_list=()) -> str:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 4))
    t0 = None
    if series:
        t0 = min(t for s in series.values() for t, _ in s)
        for slave, pts in sorted(series.items()):
            ax.plot([(t - t0) / 1000 for t, _ in pts], [v for _, v in pts], "o-", markersize=3, label=slave)
        ax.set_title("replication lag per slave (master maxPhyOffset - slave ackOffset, from metrics)")
        ax.set_ylabel("bytes behind")
    else:
        # No metrics: only the master's growth (store timestamps) and each slave's final end can be shown.
        t0 = min((t for pts in master_curve.values() for t, _ in pts), default=0)
        for broker, pts in sorted(master_curve.items()):
            ax.plot([(t - t0) / 1000 for t, _ in pts], [v for _, v in pts], label=f"{broker} master log end")
        for p in pairs:
            ax.axhline(p.slave_end, linestyle="--", linewidth=1, label=f"{p.slave} final end (lag {p.lag_bytes} B)")
        ax.set_title("no metrics/: master log end over store time, and each slave's final end")
        ax.set_ylabel("commit-log offset")
    ax.set_xlabel("seconds since first sample")
    if fault_list and t0 is not None:
        faults.shade(ax, fault_list, t0, 1000.0)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    path = os.path.join(out_dir, "replication_lag.png")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_latency(out_dir, latencies: list[tuple[int, int]], over_time=(), fault_list=()) -> str:
    """A histogram of SEND_OK latencies ((latency ms, sends) pairs) and, when the sends' times are known,
    every send's latency over time by status ((end ms, latency, status), Series.over_time), with the
    faults shaded."""
    plt = _plt()
    if over_time:
        fig, (ax, ax2) = plt.subplots(2, 1, figsize=(9, 7))
    else:
        fig, ax = plt.subplots(figsize=(9, 4))
    if latencies:
        values = [v for v, _ in latencies]
        ax.hist(values, weights=[n for _, n in latencies], bins=min(100, max(10, len(set(values)))), log=True)
    else:
        ax.text(0.5, 0.5, "no SEND_OK sends in the histories", ha="center", transform=ax.transAxes)
    ax.set_title("send latency (SEND_OK, ms)")
    ax.set_xlabel("ms")
    ax.set_ylabel("sends")
    if over_time:
        t0 = min(t for t, _, _ in over_time)
        for status in sorted({st for _, _, st in over_time}):
            pts = [(t, lat) for t, lat, st in over_time if st == status]
            ax2.plot([(t - t0) / 1000 for t, _ in pts], [lat for _, lat in pts], ".", markersize=2, label=status)
        if fault_list:
            faults.shade(ax2, fault_list, t0, 1000.0)
        ax2.set_yscale("symlog")
        ax2.set_title("every send's latency over time, by status (faults shaded)")
        ax2.set_xlabel("seconds since the first send")
        ax2.set_ylabel("ms")
        ax2.legend(fontsize=7)
    path = os.path.join(out_dir, "send_latency.png")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_throughput(out_dir, stored: dict, sent: list[tuple[int, int]], fault_list=()) -> str:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 4))
    starts = [t for pts in stored.values() for t, _ in pts] + [t for t, _ in sent]
    t0 = min(starts, default=0)
    for broker, pts in sorted(stored.items()):
        ax.plot(
            [t - t0 for t, _ in pts], [n for _, n in pts], "o-", markersize=3, label=f"{broker}: stored msgs/s (master)"
        )
    if sent:
        ax.plot([t - t0 for t, _ in sent], [n for _, n in sent], label="SEND_OK/s (histories)", linestyle="--")
    ax.set_title("throughput over time")
    ax.set_xlabel("seconds")
    ax.set_ylabel("messages per second")
    if fault_list and starts:
        faults.shade(ax, fault_list, t0 * 1000.0, 1000.0)
    if starts:
        ax.legend(fontsize=7)
    path = os.path.join(out_dir, "throughput.png")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


# -- the run --------------------------------------------------------------------------------------


def run(spark, run_dir: str, out_dir: str, range_bytes: int | None = None) -> Report:

    os.makedirs(out_dir, exist_ok=True)
    nodes = runfolder.load_nodes(run_dir)
    df = decode.decode(spark, nodes, range_bytes).cache()
    samples = load_metrics(runfolder.metrics_files(run_dir))

    integrity = audit.node_integrity(df, nodes)
    pairs = audit.audit_pairs(spark, df, nodes, integrity)
    fault_list = faults.load(run_dir)
    verdicts = audit.verdicts(pairs, integrity, nodes, final_acks(samples, nodes), faults.forks_allowed(fault_list))
    verdicts += dledger_log.verdicts(nodes)  # DLedger nodes: committed index, uncommitted entries not read

    hpaths = runfolder.history_files(run_dir)
    served_rows, served_dropped = served.load(run_dir)
    findings = history_check.HistoryFindings()
    delivered = delivery.DeliveryFindings()
    masters = {m.name: b for b, (m, _) in audit.groups(nodes).items() if m}
    hist = None
    if hpaths:
        hist = history_check.load_histories(spark, hpaths).cache()
        delivered = delivery.check(spark, df, hist, nodes, fault_list, out_dir, run_dir)
        verdicts += delivery.verdicts(delivered)
        findings = history_check.check(spark, df, hist, nodes, served_rows)
    verdicts += history_check.verdicts(findings)
    series = _series(df, hist, masters)
    if hist is not None:
        hist.unpersist()
    verdicts += offsets.verdicts(
        offsets.regressions(samples, fault_list), any(r.get("consumerOffsets") for r in samples)
    )
    group_of = {m.name: b for b, (m, _) in audit.groups(nodes).items() if m}
    attribution = faults.attribute(fault_list, series.non_ok, findings.lost, pairs, group_of)
    verdicts += faults.verdicts(fault_list, attribution)
    outage_list = served.outages(fault_list, findings.served_buckets)
    if findings.receives:
        unattributed = findings.served_by.get(served.UNATTRIBUTED, 0)
        verdicts.append(
            Verdict(
                "receives by serving node",
                INFO,
                served.describe(
                    {k: v for k, v in findings.served_by.items() if k != served.UNATTRIBUTED},
                    unattributed,
                    served_dropped,
                    bool(served.served_files(run_dir)),
                    outage_list,
                ),
                ids.SERVED,
            )
        )

    trace_summary = _trace(df, nodes, masters, out_dir)
    if trace_summary is not None:
        verdicts.append(trace_verdict(trace_summary))
    df.unpersist()

    plots = [
        plot_lag(out_dir, lag_series(samples, nodes), pairs, series.curve, fault_list),
        plot_latency(out_dir, series.latencies, series.over_time, fault_list),
        plot_throughput(out_dir, series.stored, series.sent_per_s, fault_list),
    ]
    rep = Report(verdicts, plots, pairs=pairs)
    rep.path = write_markdown(
        out_dir, run_dir, nodes, rep, pairs, bool(samples), faults.markdown(fault_list, attribution)
    )
    write_summary(out_dir, rep, fault_list, attribution, findings, pairs, outage_list, delivered, trace_summary)
    return rep


def trace_verdict(t: dict) -> Verdict:
    """The "message trace" INFO verdict from _trace's summary."""
    p, q = t["produceToStoreMs"], t["storeToConsumeMs"]
    return Verdict(
        "message trace",
        INFO,
        f"{t['records']} trace records in {', '.join(t['topics'])} ({t['pub']} sends, {t['sub']} "
        f"consumes); {t['matched']} traced sends found stored, send -> store ms p50 "
        f"{p['p50']}, p99 {p['p99']}, max {p['max']}; {t['consumed']} consumed, store -> "
        f"consume ms p50 {q['p50']}, p99 {q['p99']}, max {q['max']}; {t['failedSends']} "
        f"traced sends failed; per message: {trace.DETAIL_FILE}",
        ids.TRACE,
    )


# The latency-over-time plot draws every send's latency at its end time rounded down to this many ms:
# one point per (status, time step, latency) whatever the number of sends.
OVER_TIME_STEP_MS = 100


@dataclass
class Series:
    """What the plots and the fault attribution need from the histories and the masters' logs: every send
    counted (aggregated in Spark, nothing capped)."""

    non_ok: list = field(default_factory=list)  # (status, start_ms, end_ms, sends): faults.attribute
    latencies: list = field(default_factory=list)  # (SEND_OK latency ms, sends)
    over_time: list = field(default_factory=list)  # (end ms rounded to OVER_TIME_STEP_MS, latency, status)
    sent_per_s: list = field(default_factory=list)  # (second, SEND_OK sends)
    stored: dict = field(default_factory=dict)  # broker -> [(second, records stored by its master)]
    curve: dict = field(default_factory=dict)  # broker -> [(ms, master log end)]


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


def write_summary(
    out_dir,
    rep: Report,
    fault_list,
    attribution,
    findings,
    pairs,
    outage_list=(),
    delivered: delivery.DeliveryFindings | None = None,
    trace_summary: dict | None = None,
) -> str:
    """summary.json: the verdicts, the faults and what each is blamed for, for tools (rmqha/chaos/matrix.py)."""
    from dataclasses import asdict

    path = os.path.join(out_dir, "summary.json")
    with open(path, "w") as fh:
        json.dump(
            {
                "failed": rep.failed,
                "verdicts": [asdict(v) for v in rep.verdicts],
                "faults": [asdict(f) for f in fault_list],
                "lost": [list(x) for x in findings.lost],
                "lostByFault": {k: len(v) for k, v in attribution.lost.items()},
                "divergentByFault": attribution.divergent,
                "nonOkByFault": attribution.non_ok,
                "servedBy": findings.served_by,
                # per consumer group: acknowledged, delivered, lost, stranded, lostAfterDelivery, duplicates, ...
                "delivery": delivered.summary() if delivered else {},
                "deliveryByFault": delivered.by_fault if delivered else {},
                "ackedOnGroupByFault": delivered.acked_on_group if delivered else {},
                "queues": [
                    {"node": q.node, "records": q.records, "unqueued": q.unqueued, "dangling": q.dangling}
                    for q in (delivered.queues if delivered else [])
                ],
                "receivesDuringMasterOutages": [
                    {"fault": o.label, "group": o.group, "byNode": o.by_node} for o in outage_list
                ],
                "trace": trace_summary,
                "pairs": [
                    {
                        "master": p.master,
                        "slave": p.slave,
                        "firstDivergentOffset": p.first_divergent_offset,
                        "forkOffset": p.fork_offset,
                        "lagBytes": p.lag_bytes,
                    }
                    for p in pairs
                ],
            },
            fh,
            indent=1,
            default=str,
        )
    return path


def _cell(s: str) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def write_markdown(out_dir, run_dir, nodes, rep: Report, pairs, have_metrics: bool, fault_lines: list[str] = ()) -> str:
    lines = [
        f"# Audit of `{run_dir}`",
        "",
        f"**Result: {'FAIL' if rep.failed else 'PASS'}** "
        f"({sum(v.status == FAIL for v in rep.verdicts)} failed guarantee(s))",
        "",
        "| verdict | status | evidence |",
        "|---|---|---|",
    ]
    lines += [f"| {_cell(v.name)} | **{v.status}** | {_cell(v.detail)} |" for v in rep.verdicts]
    lines += ["", "## Nodes", "", "| node | broker | id | role | files | start offset |", "|---|---|---|---|---|---|"]
    lines += [
        f"| {n.name} | {n.broker_name} | {n.broker_id} | {n.role} | {len(n.files)} | {n.start_offset} |" for n in nodes
    ]
    if pairs:
        lines += [
            "",
            "## Replicas",
            "",
            "| master | slave | slave start | common prefix (B) | first divergent | CRC mismatches | "
            "missing (B) | slave-only records | lag (B) |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {p.master} | {p.slave} | {p.slave_start} | {p.common_prefix_bytes} | "
            f"{p.first_divergent_offset if p.first_divergent_offset is not None else '-'} | "
            f"{p.crc_mismatches} | {p.missing_bytes} | {p.slave_only_records} | {p.lag_bytes} |"
            for p in pairs
        ]
    lines += list(fault_lines)
    lines += ["", "## Plots", ""]
    if not have_metrics:
        lines += [
            "No `metrics/*.jsonl` in the run folder: replication lag over time cannot be known "
            "(a slave's log holds no time of arrival). The lag plot shows the master's log end "
            "over store time and each slave's final end instead.",
            "",
        ]
    lines += [f"![{os.path.basename(p)}]({os.path.basename(p)})" for p in rep.plots]
    path = os.path.join(out_dir, "report.md")
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    return path
