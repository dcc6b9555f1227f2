"""The audit's checkers, each `check(run) -> Result` on a facts.Run, and CHECKERS: all of them, in report
order, for checker.compose().

Each judges one concern from plain data; the judging itself is its module's (audit.verdicts,
delivery.verdicts, ...), which these wrap with their counts. Three are informational and never FAIL by
design (faults, served, trace: attribution and statistics, as before); the others FAIL when their
guarantee breaks. Which checker owns which verdict ids: OWNS.

Loss has one owner: delivery.lost (per consumer group, what a consumer can get). history.acked-lost (an
acknowledged send on no node at all) stays beside it as the storage fact it refines (ids.REFERS_TO): it
also covers topics no group subscribed to, and the fault attribution counts its list.

Tests: tests/unit/pipeline/test_checkers.py (every checker on hand-written runs, no Spark).
"""

from __future__ import annotations

from typing import Any

from . import audit, delivery, dledger_log, faults, history_check, ids, offsets, served, trace
from .checker import Checker, Result
from .facts import Run
from .verdict import INFO, Verdict


def replicas(run: Run) -> Result:
    """Each node's log readable, each slave the same bytes as its master (a fork a master power loss
    explains is a WARN), and for DLedger nodes how far their logs were read."""
    vs = audit.verdicts(run.pairs, run.integrity, run.nodes, run.final_acks, faults.forks_allowed(run.faults))
    vs += dledger_log.verdicts(run.nodes)
    return Result.of(
        vs,
        {
            "nodes": len(run.integrity),
            "unreadable": sum(len(ni.invalid) for ni in run.integrity),
            "pairs": len(run.pairs),
            "divergent": sum(p.first_divergent_offset is not None for p in run.pairs),
            "forks": sum(p.fork_offset is not None for p in run.pairs),
        },
    )


def deliveries(run: Run) -> Result:
    """What each consumer group got of what was acknowledged, and each node's consume queues against its
    log. Not judged without histories (run.delivery is None)."""
    if run.delivery is None:
        return Result.of([], {"groups": 0})
    f = run.delivery
    return Result.of(
        delivery.verdicts(f),
        {
            "groups": len(f.groups),
            "acknowledged": sum(g.acknowledged for g in f.groups),
            "lost": sum(g.lost for g in f.groups),
            "stranded": sum(g.stranded for g in f.groups),
            "lostAfterDelivery": sum(g.lost_after_delivery for g in f.groups),
            "unexpected": sum(g.unexpected for g in f.groups),
            "reordered": sum(g.reordered for g in f.groups),
            "queuesBroken": sum(bool(q.unqueued or q.dangling) for q in f.queues),
        },
    )


def histories(run: Run) -> Result:
    """The histories against the stored copies: acknowledged sends on no node, missing on a SYNC slave,
    stored twice, phantoms, per-queue order, latencies."""
    f = run.history
    return Result.of(
        history_check.verdicts(f),
        {
            "sends": f.sends,
            "acked": f.acked,
            "receives": f.receives,
            "ackedLost": len(f.lost),
            "missingOnSlave": len(f.missing_on_slave),
            "dupUniq": len(f.dup_uniq),
            "phantoms": max(f.phantom_count, len(f.phantoms)),
            "orderViolations": max(f.order_violation_count, len(f.order_violations)),
        },
    )


def committed_offsets(run: Run) -> Result:
    """Consumer groups' committed offsets never move back unless a master restart or a leader change
    explains it (from the metric samples)."""
    regs = offsets.regressions(run.samples, run.faults)
    unjudged = offsets.roleless(run.samples)
    return Result.of(
        offsets.verdicts(regs, any(r.get("consumerOffsets") for r in run.samples), unjudged),
        {"regressions": len(regs), "unexplained": sum(not r.faults for r in regs), "unjudgedSamples": unjudged},
    )


def fault_blame(run: Run) -> Result:
    """Informational: the faults injected and what each is blamed for (never FAILs; WARNs for a fault that
    could not exercise replication, and for scheduled faults the nemesis skipped)."""
    a = run.attribution()
    skips = faults.skipped(run.run_dir) if run.run_dir else []
    return Result.of(
        faults.verdicts(run.faults, a, skips),
        {
            "faults": len(run.faults),
            "notExercised": sum(bool(f.info.get("notExercised")) for f in run.faults),
            "skipped": len(skips),
            "cutShort": sum(bool(f.cut_short) for f in run.faults),
        },
    )


def serving(run: Run) -> Result:
    """Informational: which node served the receives, and during each master outage."""
    f = run.history
    if not f.receives:
        return Result.of([], {"receives": 0})
    outage_list = served.outages(run.faults, f.served_buckets)
    unattributed = f.served_by.get(served.UNATTRIBUTED, 0)
    v = Verdict(
        "receives by serving node",
        INFO,
        served.describe(
            {k: n for k, n in f.served_by.items() if k != served.UNATTRIBUTED},
            unattributed,
            run.served_dropped,
            run.have_served_files,
            outage_list,
            run.unlogged_nodes,
        ),
        ids.SERVED,
    )
    return Result.of([v], {"receives": f.receives, "unattributed": unattributed})


def trace_verdict(t: dict[str, Any]) -> Verdict:
    """The "message trace" INFO verdict from gather's trace summary."""
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


def traces(run: Run) -> Result:
    """Informational: the message-trace records the masters hold, matched to the stored messages."""
    if run.trace is None:
        return Result.of([], {"records": 0})
    return Result.of([trace_verdict(run.trace)], {"records": run.trace["records"]})


# Every checker, in the order the report lists their verdicts.
CHECKERS: dict[str, Checker] = {
    "replicas": replicas,
    "delivery": deliveries,
    "history": histories,
    "offsets": committed_offsets,
    "faults": fault_blame,
    "served": serving,
    "trace": traces,
}

# Which verdict ids each checker gives (a checker gives no id of another's).
OWNS = {
    "replicas": (ids.LOG_INTEGRITY, ids.REPLICA, ids.REPLICA_NO_MASTER, ids.DLEDGER_UNCOMMITTED),
    "delivery": (
        ids.DELIVERY_LOST,
        ids.DELIVERY_STRANDED,
        ids.DELIVERY_LOST_AFTER,
        ids.DELIVERY_UNEXPECTED,
        ids.DELIVERY_DUPLICATE,
        ids.DELIVERY_REORDERED,
        ids.DELIVERY_INDETERMINATE,
        ids.DELIVERY_DELIVERED,
        ids.DELIVERY_NO_GROUP,
        ids.DELIVERY_AMBIGUOUS,
        ids.QUEUES,
    ),
    "history": (
        ids.HISTORY_EMPTY,
        ids.HISTORY_COUNTS,
        ids.HISTORY_ACKED_LOST,
        ids.HISTORY_PARKED,
        ids.HISTORY_SYNC_ON_SLAVE,
        ids.HISTORY_UNCONFIRMED,
        ids.HISTORY_ON_MASTER,
        ids.HISTORY_UNIQ_ONCE,
        ids.HISTORY_SEND_ONCE,
        ids.HISTORY_PHANTOM,
        ids.HISTORY_QUEUE_ORDER,
        ids.HISTORY_UNPLACED,
        ids.HISTORY_ACKED_RECEIVED,
        ids.HISTORY_SEND_LATENCY,
        ids.HISTORY_E2E_LATENCY,
    ),
    "offsets": (ids.OFFSET_REGRESSION,),
    "faults": (
        ids.FAULTS_INJECTED,
        ids.FAULTS_NOT_EXERCISED,
        ids.FAULTS_SKIPPED,
        ids.FAULTS_NON_OK,
        ids.FAULTS_LOST,
        ids.FAULTS_DIVERGENT,
    ),
    "served": (ids.SERVED,),
    "trace": (ids.TRACE,),
}
