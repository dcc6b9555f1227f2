"""Run the whole audit on a run folder: gather the facts (gather.py, Spark), judge them with every checker
composed (checkers.py, checker.compose), and write report.md with a verdict table, summary.json and PNG plots.

Tests: tests/unit/pipeline/test_audit.py, test_delivery.py, test_serve.py (Spark); the checkers without
Spark: tests/unit/pipeline/test_checkers.py.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from . import checker, checkers, delivery, faults, gather, served
from .checker import Result
from .facts import Run
from .gather import final_acks, lag_series, load_metrics
from .verdict import FAIL, UNKNOWN, Verdict

__all__ = ["Report", "final_acks", "lag_series", "load_metrics", "run"]


@dataclass
class Report:
    verdicts: list[Verdict]
    plots: list[str] = field(default_factory=list)
    path: str = ""
    pairs: list = field(default_factory=list)  # the replica audit's PairAudit per master/slave pair
    result: Result | None = None  # the composed checkers' result (its counts per checker)

    @property
    def valid(self) -> checker.Valid:
        """True when every guarantee held, False when one FAILed, "unknown" when a checker could not judge."""
        return checker.valid_of(self.verdicts)

    @property
    def failed(self) -> bool:
        """Not valid: a FAIL, or a checker that crashed (never taken for a PASS)."""
        return self.valid is not True

    @property
    def status(self) -> str:
        return "PASS" if self.valid is True else FAIL if self.valid is False else UNKNOWN


# -- plots ----------------------------------------------------------------------------------------


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt, fig, out_dir, name: str) -> str:
    """Write fig as out_dir/name (100 dpi), free it, and return the path."""
    path = os.path.join(out_dir, name)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


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
    return _save(plt, fig, out_dir, "replication_lag.png")


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
    return _save(plt, fig, out_dir, "send_latency.png")


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
    return _save(plt, fig, out_dir, "throughput.png")


# -- the run --------------------------------------------------------------------------------------


def run(spark, run_dir: str, out_dir: str, range_bytes: int | None = None) -> Report:
    facts = gather.gather(spark, run_dir, out_dir, range_bytes)
    result = checker.compose(checkers.CHECKERS)(facts)
    return render(facts, result, out_dir)


def render(facts: Run, result: Result, out_dir: str) -> Report:
    """The report of a judged run: the plots, report.md and summary.json."""
    os.makedirs(out_dir, exist_ok=True)
    attribution = facts.attribution()
    s = facts.series
    plots = [
        plot_lag(out_dir, lag_series(facts.samples, facts.nodes), facts.pairs, s.curve, facts.faults),
        plot_latency(out_dir, s.latencies, s.over_time, facts.faults),
        plot_throughput(out_dir, s.stored, s.sent_per_s, facts.faults),
    ]
    rep = Report(result.verdicts, plots, pairs=facts.pairs, result=result)
    rep.path = write_markdown(
        out_dir,
        facts.run_dir,
        facts.nodes,
        rep,
        facts.pairs,
        bool(facts.samples),
        faults.markdown(facts.faults, attribution),
    )
    outage_list = served.outages(facts.faults, facts.history.served_buckets)
    write_summary(
        out_dir, rep, facts.faults, attribution, facts.history, facts.pairs, outage_list, facts.delivery, facts.trace
    )
    return rep


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
                # True, False or "unknown" (a checker crashed), and each checker's own (checkers.py)
                "valid": rep.valid,
                "checkers": {
                    name: {"valid": r.valid, "counts": r.counts}
                    for name, r in (rep.result.results if rep.result else {}).items()
                },
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
        f"**Result: {rep.status}** "
        f"({sum(v.status == FAIL for v in rep.verdicts)} failed guarantee(s)"
        + (
            f", {sum(v.status == UNKNOWN for v in rep.verdicts)} checker(s) could not judge"
            if rep.valid not in (True, False)
            else ""
        )
        + ")",
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
