"""DLedger cells: failover and recovery from the status samples' "dledger" block (tests/unit/matrix/test_dledger.py)."""

from __future__ import annotations

from pathlib import Path


from rmqha.runs.faults import LEADER_FAULTS, evidence
from .evidence import _grew, _ms
from .histories import read_jsonl


# ---- DLedger cells: failover and recovery from the status samples' "dledger" block (rmqha/cluster/sample.py)

# a leader fault's election may end after its heal (the hold is barely above the election time on a busy
# machine): another leader this soon after the heal, and before the next fault, is still its failover
FAILOVER_GRACE_MS = 10000


def dledger_rounds(run: Path) -> list[tuple[float, dict[str, dict[str, dict | None]]]]:
    """(ts ms, {group: {member: its DLedger state, None when it did not answer}}) per sample round, for the
    DLedger nodes (rows with a "dledger" block, and the down rows of those nodes). Each state gets
    "leader": the node its leaderId names (selfIds from every round: the leader may not answer)."""
    p = run / "metrics" / "samples.jsonl"
    if not p.exists():
        return []
    rounds: dict[float, dict] = {}
    members: dict[str, str] = {}
    node_of: dict[str, str] = {}
    rows = list(read_jsonl(p))
    for r in rows:
        if r.get("dledger"):
            members[r["node"]] = r.get("brokerName") or "?"
            if r["dledger"].get("selfId"):
                node_of[r["dledger"]["selfId"]] = r["node"]
    for r in rows:
        if r["node"] in members:
            g = rounds.setdefault(_ms(r["ts"]), {}).setdefault(members[r["node"]], {})
            d = r.get("dledger") if r.get("up") else None
            g[r["node"]] = dict(d, leader=node_of.get(d.get("leaderId") or "")) if d else None
    return sorted(rounds.items())


def _leader(members: dict[str, dict | None]) -> str | None:
    """The group's leader as the answering members tell it: the node that a member in the highest term
    says leads (itself, as LEADER, or its leader, as FOLLOWER); a term has one leader. A deposed leader, or
    a follower still naming a dead one, is in a lower term than the new leader's followers."""
    claims = [
        (d.get("term") or 0, n if d.get("role") == "LEADER" else d.get("leader"))
        for n, d in members.items()
        if d and (d.get("role") == "LEADER" or (d.get("role") == "FOLLOWER" and d.get("leader")))
    ]
    return max(claims)[1] if claims else None


def took_effect(run: Path) -> dict[int, int]:
    """fault id -> when its inject ended (ts_ms in the fault log): the leader was killed, frozen or cut off
    then. A DLedger inject first asks who leads, which can take seconds when the leader is slow to answer;
    the fault's start_ms (the audit's) is when the inject began."""
    out = {}
    for p in sorted((run / "faults").glob("*.jsonl")) if (run / "faults").is_dir() else []:
        for r in read_jsonl(p):
            if r.get("op") == "inject" and r.get("result", "ok") == "ok" and r.get("ts_ms"):
                out[r["id"]] = r["ts_ms"]
    return out


def failover_s(f: dict, rounds, next_start: float | None = None, effect_ms: float | None = None) -> float | None:
    """A leader fault: seconds from when it took effect (effect_ms, else its start) to the first sample
    round in which a node other than the leader it hit leads (_leader), up to FAILOVER_GRACE_MS past its
    heal and before the next fault; None when no other node led (no election)."""
    old = (f.get("info") or {}).get("leader") or f["target"]
    at = max(f["start_ms"], effect_ms or 0)
    end = (f["end_ms"] if f["end_ms"] is not None else float("inf")) + FAILOVER_GRACE_MS
    end = min(end, next_start if next_start is not None else float("inf"))
    for ts, groups in rounds:
        if at <= ts <= end:
            leader = _leader(groups.get(f.get("group") or "", {}))
            if leader is not None and leader != old:
                return round((ts - at) / 1000, 1)
    return None


def dledger_recovery(f: dict, rounds) -> tuple[float | None, bool]:
    """(seconds from the heal to the first sample round in which every member of the group answers and
    its committed index equals the leader's, never: no such round). A member ahead of the leader or
    behind it is not caught up. (None, False): no DLedger samples, or none with a committed index (Apache's
    4.9.8 reports its role but not its term, leader or committed index: its recovery is not measured)."""
    if not rounds:
        return None, False
    if not any(d and d.get("committedIndex") is not None for _ts, g in rounds for m in g.values() for d in m.values()):
        return None, False
    if f["end_ms"] is None:
        return None, True
    for ts, groups in rounds:
        members = groups.get(f.get("group") or "", {})
        if ts < f["end_ms"] or not members or any(d is None for d in members.values()):
            continue
        leader = _leader(members)
        if leader is None:
            continue
        top = (members.get(leader) or {}).get("committedIndex")
        if top is not None and all(d.get("committedIndex") == top for d in members.values()):
            return round((ts - f["end_ms"]) / 1000, 1), False
    return None, True


def dledger_no_effect(f: dict, rounds, failover: float | None) -> str | None:
    """Why a DLedger fault showed no effect beyond what no_effect() checks (the target seen down), or None:
    a leader fault must have made another node leader; a partitioned follower must have stopped
    appending while the leader's log grew. Only checked with DLedger samples."""
    if not rounds:
        return None
    end = f["end_ms"] if f["end_ms"] is not None else float("inf")
    if f["kind"] in LEADER_FAULTS and failover is None:
        return (
            f"no other node led while {f['target']}'s {f['kind']} was active: the leader fault caused no election "
            "(the leader kept or regained leadership in its own term)"
        )
    if evidence(f["kind"]) == "appending":
        ends: dict[str, list[tuple[float, int, None]]] = {}
        leaders = []
        for ts, groups in rounds:
            members = groups.get(f.get("group") or "", {})
            for n, d in members.items():
                if d and d.get("endIndex") is not None:
                    ends.setdefault(n, []).append((ts, d["endIndex"], None))
            if f["start_ms"] <= ts <= end:
                leaders.append(_leader(members))
        leader = next((x for x in leaders if x and x != f["target"]), None)
        start = f["start_ms"] + 1000
        if leader and _grew(ends.get(f["target"], []), start, end) and _grew(ends.get(leader, []), start, end):
            return f"{f['target']} went on appending while its DLedger links were cut: the fault had no visible effect"
    return None
