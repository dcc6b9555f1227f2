"""One fault's figures, sliced from its run's audited sends and tries (table.py): the sends at stake, delivered, indeterminate, duplicates, each group's availability and the records left out (tests/unit/matrix/test_cells.py)."""

from __future__ import annotations

# the audit's own: "acked during fault" starts AT_RISK_MS before it; answers that stored a send on the master
# without confirming it (NOT_ACCEPTED)
from rmqha.pipeline.delivery import AT_RISK_MS
from rmqha.pipeline.delivery import UNCONFIRMED as NOT_ACCEPTED

from .histories import explained as _explained
from .table import RunTable

UNWRITABLE_GAP_MS = 1000  # a group that accepted no send for longer than this while sends were tried was unwritable


def _union(spans: list[tuple[float, float]]) -> float:
    total, cur = 0.0, None
    for a, b in sorted(spans):
        if cur is None or a > cur[1]:
            if cur:
                total += cur[1] - cur[0]
            cur = [a, b]
        else:
            cur[1] = max(cur[1], b)
    return total + (cur[1] - cur[0] if cur else 0.0)


def group_availability(facts: RunTable, start: float, end: float) -> dict[str, dict]:
    """group -> {"answered", "accepted", "share", "unwritable_s", "not_accepted": {status: n}} for the tries
    started in [start, end] whose group the audit knows (rmqha/pipeline/delivery_table.py: the history's
    broker_name, else the group storing its UNIQ_KEY; a failed try with a broker_name counts as not
    accepted, "ERROR"), plus "?" -> {"errors": n, "unknown": n}:
    failed tries whose group is unknown (timeouts, exceptions, refusals: the official client's error names
    no broker) and answers stored nowhere. unwritable_s: the time within the window in gaps longer than
    UNWRITABLE_GAP_MS between two accepted answers of the group, while sends were tried."""
    tried = sorted(t[0] for t in facts.tries if start <= t[0] <= end)
    out: dict[str, dict] = {}
    unknown = {"errors": 0, "unknown": 0}
    ok_at: dict[str, list[float]] = {}
    for t0, t1, status, g in facts.tries:
        if status == "SEND_OK" and g:
            ok_at.setdefault(g, []).append(t1)
        if not start <= t0 <= end:
            continue
        if g is None:
            unknown["unknown" if status in ("SEND_OK",) + NOT_ACCEPTED else "errors"] += 1
            continue
        c = out.setdefault(g, {"answered": 0, "accepted": 0, "not_accepted": {}})
        c["answered"] += 1
        if status == "SEND_OK":
            c["accepted"] += 1
        else:
            c["not_accepted"][status] = c["not_accepted"].get(status, 0) + 1
    # sorted: the key order reaches the rendered table, which must not depend on PYTHONHASHSEED
    for g in sorted(set(out) | set(ok_at)):
        c = out.setdefault(g, {"answered": 0, "accepted": 0, "not_accepted": {}})
        c["share"] = round(c["accepted"] / c["answered"], 3) if c["answered"] else None
        marks = [start] + sorted(t for t in ok_at.get(g, []) if start < t < end) + [end]
        gaps = []
        for a, b in zip(marks, marks[1:]):
            # a gap counts only while the workload was trying: from the first try in it to its end
            first = next((t for t in tried if a <= t <= b), None)
            if first is not None and b - max(a, first) > UNWRITABLE_GAP_MS:
                gaps.append((max(a, first), b))
        c["unwritable_s"] = round(_union(gaps) / 1000, 1)
        c["longest_gap_s"] = round(max((b - a for a, b in gaps), default=0) / 1000, 1)
    out = {g: out[g] for g in sorted(out)}
    if unknown["errors"] or unknown["unknown"]:
        out["?"] = unknown
    return out


def _not_audited(facts: RunTable | None, summary: dict, label: str) -> list[str]:
    """Why the run's delivery figures cannot be counted for this fault ([] when they can)."""
    missing = []
    if facts is None:
        missing.append("no history in the run folder")
    elif not facts.stores:
        missing.append("no commit log in the run folder (no send has a group)")
    if not summary.get("delivery"):
        missing.append("summary.json has no delivery block (no consumer group was audited)")
    elif facts is not None and not facts.audited:
        missing.append("the audit wrote no report/sends.jsonl and tries.jsonl (an older audit): audit the run again")
    if label not in (summary.get("ackedOnGroupByFault") or {}):
        missing.append(f"summary.json has no ackedOnGroupByFault for {label}")
    return missing


def _sends_at_stake(facts: RunTable, f: dict, start: float, end: float) -> tuple[set[str], int, int, int]:
    """The faulted group's acknowledged sends (AT_RISK_MS before the fault to its heal), how many of them
    were delivered and parked, and the unanswered sends first tried while it was active."""
    mine = [f["group"]] if f.get("group") else None
    lo_at, hi_at = start - AT_RISK_MS, end
    acked_ids: set[str] = set()
    delivered, indeterminate, parked = 0, 0, 0
    for sid, s in facts.sends.items():
        g = s["group"]
        if s["state"] == "acked" and lo_at <= (s["acked_ms"] or 0) <= hi_at:
            # a cluster-wide fault: every acknowledged send some node stores (parked ones too, as the audit)
            if (mine is None and (g is not None or s["stored"])) or (mine is not None and g in mine):
                acked_ids.add(sid)
                delivered += facts.delivered(sid)
                parked += not facts.delivered(sid) and s["parked"]
        # not answered by any broker: counted here when it may be this group's (stored on it, or nowhere)
        if (
            s["state"] == "indeterminate"
            and start <= (s["first_ms"] or 0) <= end
            and (mine is None or g in (None, *mine))
        ):
            indeterminate += 1
    return acked_ids, delivered, indeterminate, parked


def _duplicates(facts: RunTable, f: dict, start: float, end: float, acked_ids: set[str]) -> int:
    """Receives beyond a consumer group's first of the sends at stake: the acknowledged ones and those
    first tried while the fault was active (a retry after a try the old leader stored is two copies)."""
    mine = [f["group"]] if f.get("group") else None
    stake = acked_ids | {
        sid
        for sid, s in facts.sends.items()
        if start <= (s["first_ms"] or 0) <= end and (mine is None or s["group"] in (None, *mine))
    }
    return sum(facts.sends[sid]["duplicates"] for sid in stake)


def _excluded_during(
    facts: RunTable, summary: dict, start: float, end: float
) -> tuple[dict[str, int], dict[str, str], set[str]]:
    """The records left out of the figures while the fault was active (and the run's, which have no
    time), counted by reason; where each was first seen; the reasons EXPLAINED covers."""
    excluded: dict[str, int] = {}
    where: dict[str, str] = {}
    explained: set[str] = set()
    if facts.checked is None:
        facts.checked = run_checks(facts, summary)
    for kind, reason, place, at, n in [(*x, 1) for x in facts.excluded] + facts.checked:
        if at is None or start <= at <= end:
            excluded[reason] = excluded.get(reason, 0) + n
            where.setdefault(reason, place)
            if _explained(kind):
                explained.add(reason)
    return excluded, where, explained


def fault_figures(facts: RunTable | None, f: dict, summary: dict, label: str) -> dict:
    """A fault's delivered / indeterminate / per-group availability / excluded, or None figures when the run
    was not audited for delivery (no consumer group in the summary, no history, no commit log)."""
    start, end = f["start_ms"], f["end_ms"] if f["end_ms"] is not None else float("inf")
    missing = _not_audited(facts, summary, label)
    if missing or facts is None:
        return {
            "delivered": None,
            "indeterminate": None,
            "duplicates": None,
            "group_availability": {},
            "not_audited": "; ".join(missing),
            "excluded": {},
        }
    acked_ids, delivered, indeterminate, parked = _sends_at_stake(facts, f, start, end)
    duplicates = _duplicates(facts, f, start, end, acked_ids)
    excluded, where, explained = _excluded_during(facts, summary, start, end)
    # the audit's count of this fault's acknowledged sends and its per-send table must agree (both give a
    # send the group that acknowledged it: rmqha/pipeline/delivery_table.py placed)
    audit_acked = summary["ackedOnGroupByFault"][label]
    if audit_acked != len(acked_ids):
        excluded[f"acknowledged the audit counted {audit_acked}, its per-send table {len(acked_ids)}"] = abs(
            audit_acked - len(acked_ids)
        )
    return {
        "delivered": delivered,
        "indeterminate": indeterminate,
        "duplicates": duplicates,
        "acked_recounted": len(acked_ids),
        # acknowledged, not delivered: parked (not due, owed to nobody yet) or a loss the audit blames
        "not_delivered": len(acked_ids) - delivered,
        "parked": parked,
        # a fault never healed: its window runs to the last try
        "group_availability": group_availability(
            facts, start, end if end != float("inf") else max((t[0] for t in facts.tries), default=start)
        ),
        "not_audited": None,
        "excluded": excluded,
        "excluded_where": where,
        "explained": sorted(explained),
        "_acked_ids": acked_ids,
    }


def run_checks(facts: RunTable, summary: dict) -> list[tuple[str, str, str, None, int]]:
    """The run's figures the audit's summary and its per-send table must agree on, per consumer group (no
    time: named in every cell of the run): the acknowledged sends it is owed, those it received, and the
    audit's own partition of them (delivered + lost + stranded + parked). Each with the size of the
    difference."""
    out = []
    for grp, d in sorted((summary.get("delivery") or {}).items()):
        owed = [sid for sid, s in facts.sends.items() if s["state"] == "acked" and grp in s["owed"]]
        got = sum(1 for sid in owed if grp in facts.sends[sid]["received"])
        if d.get("acknowledged") != len(owed):
            out.append(
                (
                    "audit-owed",
                    f"{grp}: the audit owed {d.get('acknowledged')} acknowledged, its per-send table {len(owed)}",
                    grp,
                    None,
                    abs((d.get("acknowledged") or 0) - len(owed)),
                )
            )
        if d.get("delivered") != got:
            out.append(
                (
                    "audit-delivered",
                    f"{grp}: the audit counted {d.get('delivered')} delivered, its per-send table {got}",
                    grp,
                    None,
                    abs((d.get("delivered") or 0) - got),
                )
            )
        parts = [d.get(k) or 0 for k in ("delivered", "lost", "stranded", "parked")]
        if (d.get("acknowledged") or 0) != sum(parts):
            out.append(
                (
                    "audit-partition",
                    f"{grp}: the audit's {d.get('acknowledged')} acknowledged are not "
                    "{} delivered + {} lost + {} stranded + {} parked".format(*parts),
                    grp,
                    None,
                    abs((d.get("acknowledged") or 0) - sum(parts)),
                )
            )
    return out
