"""A run's cell samples, one per fault, from its audit summary and its run folder, and the cells they make (tests/unit/matrix/test_cells.py)."""

from __future__ import annotations

import json
from pathlib import Path

from rmqha.cluster import runfolder as rf

from rmqha.runs.faults import DESTRUCTIVE, LEADER_FAULTS
from rmqha.pipeline import ids
from rmqha.pipeline.delivery import DETAIL_FILE, destroyed
from rmqha.pipeline.delivery_table import SENDS_FILE
from rmqha.pipeline.faults import from_summary, loss_blame, lost_by_fault
from rmqha.pipeline.verdict import UNKNOWN
from .dledger import dledger_no_effect, dledger_recovery, dledger_rounds, failover_s, took_effect
from .evidence import (
    LOSS_FIELDS,
    _master_power,
    _recovery,
    _same_group,
    down_seen,
    no_effect,
    offsets_seen,
    replication_rounds,
    stuck_groups,
    unequal_at_end,
)
from .histories import sends
from .table import RunTable, run_table
from .figures import fault_figures
from .promises import _sum_or_none, excluded_text, exercised, judge, merge_groups, promise, unavailable_s
from .plan import is_dledger
from .render import JUDGED, run_state
from .verdicts import verdict_key


def _cause(out: list[dict], faults: list[dict], i: int) -> int | None:
    """The earlier exercised fault of the same group that most likely caused what fault i is blamed for:
    the latest master power loss, else the latest fault that can destroy or strand a message, else the
    latest fault of the group."""
    earlier = [j for j in range(i) if _same_group(faults[i], faults[j]) and not out[j]["not_exercised"]]
    for pick in (_master_power, lambda f: f["kind"] in DESTRUCTIVE, lambda f: True):
        js = [j for j in earlier if pick(faults[j])]
        if js:
            return js[-1]
    return None


def reattribute(out: list[dict], faults: list[dict]) -> None:
    """A fault that was not exercised (its group could not replicate, or it had no visible effect) cannot
    have caused what the audit blames on it: each count moves to the earlier fault that did (_cause), kept
    at the larger of the two (the audit counts a message against every suspect, so the two sets overlap).
    With no such fault the counts stay on the sample as `unattributed`: judge() fails the cell for them."""
    for i, s in enumerate(out):
        moved = {k: s[k] for k in LOSS_FIELDS if s.get(k)}
        if not s["not_exercised"] or not moved:
            continue
        for k in moved:
            s[k] = 0
        j = _cause(out, faults, i)
        if j is None:
            s["unattributed"] = moved
            continue
        for k, n in moved.items():
            out[j][k] = max(out[j].get(k, 0), n)
        out[j].setdefault("inherited_from", []).append(s["label"])
        s["blamed_on"] = {"fault": out[j]["label"], **moved}


class _RunEvidence:
    """What cell_samples() reads once per run: the sends, the audit's per-send table, the metric and status
    samples."""

    def __init__(self, run: Path, summary: dict, topology: str) -> None:
        self.run = run
        self.dledger = is_dledger(topology)
        self.all_sends = sends(run)
        self.facts = run_table(run)
        self.rounds = replication_rounds(run)
        self.unequal = unequal_at_end(run, summary)
        self.down = down_seen(run)
        self.offsets = offsets_seen(run)
        self.dl_rounds = dledger_rounds(run) if self.dledger else []
        self.effect = took_effect(run) if self.dledger else {}
        self.sampled = bool(self.rounds) or bool(self.dl_rounds)


def _divergent(f: dict, faults: list[dict], summary: dict, label: str) -> int:
    """The divergent pairs the audit blames on the fault. A divergence has no time: it is this fault's if the
    fault can rewrite its group's log and no master power loss of the same group (the likelier cause) is
    also blamed."""
    blamed = summary["divergentByFault"].get(label, [])
    power = any(_master_power(g) and g["group"] in (None, f["group"]) for g in faults)
    return len(blamed) if blamed and (_master_power(f) or not power) else 0


def _recovery_and_failover(ev: _RunEvidence, f: dict, faults: list[dict]) -> tuple:
    """(recovery_s, never recovered, failover_s): failover only for a DLedger leader fault."""
    if not ev.dledger:
        recovery, never = _recovery(f, ev.rounds, ev.unequal, faults)
        return recovery, never, None
    recovery, never = dledger_recovery(f, ev.dl_rounds)
    later = [x["start_ms"] for x in faults if x["start_ms"] > f["start_ms"] and _same_group(x, f)]
    failover = (
        failover_s(f, ev.dl_rounds, min(later, default=None), ev.effect.get(f["id"]))
        if f["kind"] in LEADER_FAULTS
        else None
    )
    return recovery, never, failover


def _nemesis_info(ev: _RunEvidence, f: dict) -> dict:
    """The nemesis's notes on the fault, with the groups the samples show stuck when it did not judge (a
    run recorded before it did, or a cluster-wide fault)."""
    info = dict(f.get("info") or {})
    if not info.get("notExercised") and ev.rounds and not ev.dledger:
        stuck = stuck_groups(ev.run, f["start_ms"])
        mine = [g for g in stuck if f.get("group") in (None, g)]
        if f.get("group") is None and mine:
            info["notExercisedGroups"] = {**{g: stuck[g] for g in mine}, **(info.get("notExercisedGroups") or {})}
            every = {x for _ts, gs in ev.rounds for x in gs}
            if every and every <= set(info["notExercisedGroups"]):
                info["notExercised"] = "; ".join(info["notExercisedGroups"][g] for g in sorted(every))
        elif mine:
            info["notExercised"] = stuck[mine[0]]
    return info


def _not_exercised(ev: _RunEvidence, f: dict, info: dict, summary: dict, label: str, failover) -> str | None:
    """Why the fault tested nothing (None: it was exercised): the nemesis's word, no visible effect, or a
    DLedger fault the members did not notice."""
    return (
        info.get("notExercised")
        or no_effect(
            f, ev.down, ev.sampled, sum((summary.get("nonOkByFault") or {}).get(label, {}).values()), ev.offsets
        )
        or (dledger_no_effect(f, ev.dl_rounds, failover) if ev.dledger else None)
    )


def _fault_sample(ev: _RunEvidence, f: dict, faults: list[dict], summary: dict) -> dict:
    """One fault's cell sample: its sends, losses, recovery, failover and delivery figures."""
    start, end = f["start_ms"], f["end_ms"]
    label = f"#{f['id']} {f['kind']} {f['link'] or f['target']}"
    during = [s for s in ev.all_sends if start <= s[0] <= (end or s[0])]
    recovery, never, failover = _recovery_and_failover(ev, f, faults)
    by_fault = (summary.get("deliveryByFault") or {}).get(label, {})
    info = _nemesis_info(ev, f)
    return {
        "label": label,
        "kind": f["kind"],
        "role": f["role"],
        "target": f["target"],
        "sends": len(during),
        "ok": sum(1 for s in during if s[2] == "SEND_OK"),
        "lost": summary["lostByFault"].get(label, 0),
        "divergent": _divergent(f, faults, summary, label),
        "recovery_s": recovery,
        "recovery_never": never,
        # delivery (rmqha/pipeline/delivery.py): acknowledged messages this fault is a suspect of that no
        # consumer group got, those only a slave holds, and those received then gone
        "undelivered": by_fault.get("delivery.lost", 0),
        "stranded": by_fault.get("delivery.stranded", 0),
        "lost_after_delivery": by_fault.get("delivery.lost-after-delivery", 0),
        # acknowledged sends stored by the faulted group itself while the fault was active
        # (None for summaries older than the delivery checker: then `ok`, the whole cluster's)
        "acked_on_group": (summary.get("ackedOnGroupByFault") or {}).get(label),
        "not_exercised": _not_exercised(ev, f, info, summary, label, failover),
        # a DLedger leader fault: start -> another node leads (None: none did, or not a leader fault)
        "failover_s": failover,
        "group": f.get("group"),
        # a fault on every group: the groups it could not exercise (nemesis.py)
        "groups_not_exercised": sorted(info.get("notExercisedGroups") or {}),
        "error": f.get("inject_error") or f.get("heal_error"),
        # delivered / indeterminate / per-group availability / excluded records (fault_figures)
        **fault_figures(ev.facts, f, summary, label),
    }


def _note_shared_acks(out: list[dict], facts: RunTable | None) -> None:
    """The at-risk look-back (AT_RISK_MS, as the audit's) is longer than the sweep's gap between two faults:
    an acknowledged send at stake in two faults counts in both cells, and each says with which fault."""
    ids = [s.pop("_acked_ids", set()) for s in out]
    for i, s in enumerate(out):
        shared = {out[j]["label"]: len(ids[i] & ids[j]) for j in range(len(out)) if j != i and ids[i] & ids[j]}
        if facts is not None and not s.get("not_audited"):
            s["shared_acks"] = shared


def _delivery_problems(run: Path) -> list[dict] | None:
    """The audit's detail lines of the acknowledged sends lost, stranded or received then gone
    (report/delivery.jsonl), each with its broker group (an audit older than the line's "broker": the
    group of its report/sends.jsonl line); None when the audit wrote no detail file."""
    path = run / "report" / DETAIL_FILE
    if not path.is_file():
        return None
    out = [
        x for x in map(json.loads, filter(str.strip, path.read_text().splitlines())) if x["verdict"] in CELL_VERDICTS
    ]
    sends = run / "report" / SENDS_FILE
    if any("broker" not in x for x in out) and sends.is_file():
        group = {
            r["send_id"]: r.get("group") for r in map(json.loads, filter(str.strip, sends.read_text().splitlines()))
        }
        for x in out:
            x.setdefault("broker", group.get(x["send_id"]))
    return out


def reblame(run: Path, summary: dict) -> dict:
    """The summary with its loss counts per fault (lostByFault, deliveryByFault) counted again by the
    audit's own rule (rmqha.pipeline.faults.loss_blame: a loss is the fault's that destroyed it, not the
    one active when it was acknowledged) from the audit's per-send findings: the history's acknowledged
    sends on no node (summary.json's `lost`) and the detail lines of report/delivery.jsonl. A run audited
    before the rule is judged by it too; the audit's own counts stand only where it kept no per-send
    findings (a summary without `lost`, a report without the detail file)."""
    if summary.get("_reblamed"):
        return summary
    out = dict(summary, _reblamed=True)
    faults = from_summary(summary.get("faults") or [])
    if "lost" in summary:
        lost: dict[str, int] = {}
        for _uniq, labels in lost_by_fault(faults, summary["lost"]):
            for label in labels:
                lost[label] = lost.get(label, 0) + 1
        out["lostByFault"] = lost
    problems = _delivery_problems(run)
    if problems is not None and summary.get("delivery"):
        seen: dict[str, dict[str, set]] = {}
        for x in problems:
            for label in loss_blame(
                faults, x.get("acked_ms"), x.get("broker"), destroyed(x["verdict"], x.get("reason"))
            ):
                seen.setdefault(label, {}).setdefault(x["verdict"], set()).add(x["send_id"])
        out["deliveryByFault"] = {label: {k: len(v) for k, v in d.items()} for label, d in seen.items()}
    return out


def cell_samples(run: Path, summary: dict, topology: str, flush: str) -> list[dict]:
    summary = reblame(run, summary)
    ev = _RunEvidence(run, summary, topology)
    faults = summary["faults"]
    out = [_fault_sample(ev, f, faults, summary) for f in faults]
    _note_shared_acks(out, ev.facts)
    reattribute(out, faults)
    return out


# Audit FAILs a cell can carry: an acknowledged message some fault is a suspect of. Any other FAIL (a
# phantom, a UNIQ_KEY stored twice, a damaged log, a queue entry missing, a loss no fault explains) is a
# defect of the run as a whole, and fails the matrix however its cells look.
CELL_VERDICTS = (ids.DELIVERY_LOST, ids.DELIVERY_STRANDED, ids.DELIVERY_LOST_AFTER)


def unexplained_failures(summary: dict) -> list[str]:
    """The audit's FAIL verdicts no cell accounts for, and every UNKNOWN one (a checker that crashed: what
    it checks was never judged, so no cell can account for it)."""
    out = []
    no_fault = (summary.get("deliveryByFault") or {}).get("no fault", {})
    for v in summary.get("verdicts", []):
        vid = verdict_key(v)[0]
        if v["status"] == UNKNOWN:
            out.append(f"{v['name']} ({vid or 'no id'})")
            continue
        if v["status"] != "FAIL":
            continue
        if vid in CELL_VERDICTS and summary.get("faults") and not no_fault.get(vid):
            continue
        if vid == ids.HISTORY_ACKED_LOST and summary.get("lostByFault") and "no fault" not in summary["lostByFault"]:
            continue
        out.append(f"{v['name']} ({vid or 'no id'})")
    return out


def collect(name: str, topology: str, flush: str) -> tuple[list[dict], bool | None, list[str]]:
    """A run's cell samples from its audit summary (none when it was not audited), whether the audit
    failed, and its failures no cell accounts for."""
    summary_path = rf.run_dir(name) / "report" / "summary.json"
    if not summary_path.exists():
        return [], None, []
    summary = reblame(rf.run_dir(name), json.loads(summary_path.read_text()))
    return (cell_samples(rf.run_dir(name), summary, topology, flush), summary["failed"], unexplained_failures(summary))


def build(results: list[dict]) -> list[dict]:
    cells: dict[tuple, dict] = {}
    for r in results:
        for s in r["samples"]:
            mode = r.get("mode", "ours")
            key = (mode, r["topology"], r["flush"], s["kind"], s["role"])
            c = cells.setdefault(
                key,
                {
                    "mode": mode,
                    "topology": r["topology"],
                    "flush": r["flush"],
                    "kind": s["kind"],
                    "role": s["role"],
                    "backend": r["backend"],
                    "samples": [],
                },
            )
            c["samples"].append(s)
    out = []
    for key, c in sorted(cells.items()):
        p = promise(*key[1:])
        ss = c["samples"]
        verdict, note = judge(p, ss)
        mine = [s for s in ss if not s.get("not_exercised")]  # a not-exercised sample's losses are elsewhere
        n_sends = sum(s["sends"] for s in ss)
        rec = [s["recovery_s"] for s in ss if s["recovery_s"] is not None]
        fo = [s["failover_s"] for s in ss if s.get("failover_s") is not None]
        out.append(
            {
                **{k: v for k, v in c.items() if k != "samples"},
                "runs": len(ss),
                "exercised": len(exercised(ss)),
                "lost": sum(s["lost"] for s in mine),
                "divergent": sum(s["divergent"] for s in mine),
                "undelivered": sum(s.get("undelivered", 0) + s.get("lost_after_delivery", 0) for s in mine),
                "stranded": sum(s.get("stranded", 0) for s in mine),
                "availability": round(sum(s["ok"] for s in ss) / n_sends, 3) if n_sends else None,
                "acked_during": sum(
                    s["acked_on_group"] if s.get("acked_on_group") is not None else s["ok"] for s in ss
                ),
                # of those, received by every consumer group owed them; sends no broker answered (None: not audited)
                "delivered": _sum_or_none(ss, "delivered"),
                "indeterminate": _sum_or_none(ss, "indeterminate"),
                "group_availability": merge_groups(ss),
                "excluded": excluded_text(ss),
                # the slowest recovery, and how many samples never recovered (a slave ahead, a fork)
                "recovery_s": max(rec) if rec else None,
                "recovery_never": sum(1 for s in ss if s.get("recovery_never")),
                # DLedger leader faults: the slowest failover, and the runs in which no other node led
                "failover_applies": c["kind"] in LEADER_FAULTS,
                "failover_s": max(fo) if fo else None,
                "failover_none": sum(1 for s in ss if s.get("failover_s") is None),
                "unavailable_s": unavailable_s(ss),
                "duplicates": _sum_or_none(ss, "duplicates"),
                # losses moved here from later faults that were not exercised, and moved away from here
                "inherited_from": [x for s in ss for x in s.get("inherited_from", [])],
                "blamed_on": [s["blamed_on"] for s in ss if s.get("blamed_on")],
                "verdict": verdict,
                "note": note,
                "promise": p["why"],
            }
        )
    return out


def judge_runs(results: list[dict]) -> list[dict]:
    """Each run's fault samples and its audit's unexplained FAILs (none for a run not judged), the runs
    sorted as the table lists them; the matrix's cells."""
    for r in results:
        r["samples"], failed, r["unexplained"] = collect(r["name"], r["topology"], r["flush"])
        r["failed_run"] = failed is None
        if failed is not None:
            r["audit_failed"] = failed
        r["state"] = run_state(r)
        if r["state"] not in JUDGED:  # a folder left by an earlier run is not this run's result
            r["samples"], r["unexplained"] = [], []
    results.sort(key=lambda r: (r.get("mode", "ours"), r["backend"], r["topology"], r["flush"], r["seed"]))
    return build(results)
