"""What the metric samples show about a fault: replication rounds, nodes seen down, offsets, groups stuck or unequal at the end, and recovery (tests/unit/matrix/test_evidence.py)."""

from __future__ import annotations

import json
from pathlib import Path


from rmqha.runs.faults import NODE_DOWN, evidence, master_power_cut
from .histories import read_jsonl
from rmqha.pipeline import ids

from .verdicts import verdict_key


def _ms(ts: float) -> float:
    return ts * 1000 if ts < 1e11 else ts


def replication_rounds(run: Path) -> list[tuple[float, dict[str, int]]]:
    """(ts ms, {broker group: the largest distance between a slave's log end and its master's}) per sample
    round; -1 when a node of the group did not answer or its offset is unknown. The distance counts both
    ways: a slave AHEAD of its master (the master came back behind it) is not caught up either."""
    rounds: dict[float, dict] = {}
    p = run / "metrics" / "samples.jsonl"
    if not p.exists():
        return []
    for r in read_jsonl(p):
        rounds.setdefault(r["ts"], {})[r["node"]] = r
    out = []
    for ts in sorted(rounds):
        nodes = rounds[ts]
        groups: dict[str, int] = {}
        for r in nodes.values():
            if r.get("role") != "SLAVE":
                continue
            g = r.get("brokerName") or r.get("master") or "?"
            m = nodes.get(r.get("master") or "")
            if (
                not r.get("up")
                or not m
                or not m.get("up")
                or r.get("maxPhyOffset") is None
                or m.get("maxPhyOffset") is None
            ):
                groups[g] = -1
            elif groups.get(g, 0) >= 0:
                groups[g] = max(groups.get(g, 0), abs(m["maxPhyOffset"] - r["maxPhyOffset"]))
        out.append((_ms(ts), groups))
    return out


def lags_over_time(run: Path) -> list[tuple[float, int]]:
    """(ts ms, the largest slave distance of that sample round, either way; -1 when a node did not answer)."""
    out = []
    for ts, groups in replication_rounds(run):
        out.append((ts, -1 if any(v < 0 for v in groups.values()) else max(groups.values(), default=0)))
    return out


def node_groups(run: Path, summary: dict) -> dict[str, str]:
    """node -> its broker group, from the samples (brokerName), else from the faults that targeted it."""
    out = {f["target"]: f["group"] for f in summary.get("faults", []) if f.get("group") and f.get("target")}
    p = run / "metrics" / "samples.jsonl"
    if p.exists():
        for r in read_jsonl(p):
            if r.get("brokerName"):
                out[r["node"]] = r["brokerName"]
    return out


def unequal_at_end(run: Path, summary: dict) -> dict[str, tuple[bool, str]]:
    """group -> (forked, why) for each group a slave of which did not end byte-equal with its master: the
    audit's replica verdict (replica.consistent) is not PASS, its pair diverges or lags, or the run's ending
    (rmqha/chaos/run.py wait_catch_up) says it did not catch up. forked: the logs differ (not only a lag)."""
    groups = node_groups(run, summary)
    out: dict[str, tuple[bool, str]] = {}

    def mark(node: str, forked: bool, why: str) -> None:
        g = groups.get(node)
        if g is not None and not (g in out and out[g][0]):
            out[g] = (forked, why)

    for v in summary.get("verdicts", []):
        if verdict_key(v)[0] == ids.REPLICA and v.get("status") != "PASS" and v.get("subject"):
            detail = v.get("detail") or ""
            mark(v["subject"], v.get("status") == "FAIL" or "fork" in detail, f"{v['status']} {v.get('name')}")
    for pr in summary.get("pairs", []):
        if pr.get("firstDivergentOffset") is not None:
            mark(pr["slave"], True, f"{pr['slave']} diverges from {pr['master']} at {pr['firstDivergentOffset']}")
        elif pr.get("lagBytes"):
            mark(pr["slave"], False, f"{pr['slave']} ends {pr['lagBytes']} bytes behind {pr['master']}")
    for e in sorted((run / "chaos").glob("ending-*.json")) if (run / "chaos").is_dir() else []:
        try:
            catch_up = json.loads(e.read_text()).get("catchUp") or {}
        except ValueError:
            continue
        for slave, state in catch_up.items():
            if state != "caught up":
                mark(slave, str(state).startswith("forked"), f"{slave}: {state}")
    return out


# Faults that take a node away: the samples must have seen it not answering while the fault was active,
# or the fault had no effect anyone could see ("not exercised": a nemesis that silently did nothing)
NODE_DOWN_FAULTS = NODE_DOWN


def down_seen(run: Path) -> dict[str, list[float]]:
    """node -> the sample times (ms) at which it did not answer."""
    out: dict[str, list[float]] = {}
    p = run / "metrics" / "samples.jsonl"
    if p.exists():
        for r in read_jsonl(p):
            if r.get("up") is False:
                out.setdefault(r["node"], []).append(r["ts"] * 1000 if r["ts"] < 1e11 else r["ts"])
    return out


def offsets_seen(run: Path) -> dict[str, list[tuple[float, int, str | None]]]:
    """node -> [(sample time ms, maxPhyOffset, its master)] of the samples where it answered."""
    out: dict[str, list] = {}
    p = run / "metrics" / "samples.jsonl"
    if p.exists():
        for r in read_jsonl(p):
            if r.get("up") and r.get("maxPhyOffset") is not None:
                ts = r["ts"] * 1000 if r["ts"] < 1e11 else r["ts"]
                out.setdefault(r["node"], []).append((ts, int(r["maxPhyOffset"]), r.get("master")))
    return out


def _grew(series, start: float, end: float) -> bool | None:
    """Whether a node's log grew between start and end (None: not enough samples to tell)."""
    inside = [off for ts, off, _m in series if start <= ts <= end]
    return None if len(inside) < 2 else inside[-1] > inside[0]


def _behind(offsets: dict, slave: str, start: float, end: float) -> bool:
    """Whether the slave's log was behind its master's in two consecutive sample rounds within [start, end]."""
    series = offsets.get(slave, [])
    master = next((m for _t, _o, m in series if m), None)
    mine = {round(t): o for t, o, _m in series if start <= t <= end}
    theirs = {round(t): o for t, o, _m in offsets.get(master, []) if start <= t <= end} if master else {}
    behind = [t for t in sorted(mine) if t in theirs and theirs[t] > mine[t]]
    rounds = sorted(t for t in mine if t in theirs)
    return any(a in behind and b in behind for a, b in zip(rounds, rounds[1:]))


def no_effect(
    f: dict, down: dict[str, list[float]], sampled: bool, non_ok: int = 0, offsets: dict | None = None
) -> str | None:
    """Why a fault showed no effect, or None. Node faults: a sample must have seen the node stop answering.
    disk-full: a full master must have refused a send; a full slave must have stopped storing while its
    master's log grew. Only checked with samples."""
    if not sampled:
        return None
    end = f["end_ms"] if f["end_ms"] is not None else float("inf")
    seen = evidence(f["kind"])
    if seen == "disk":
        if f.get("role") == "master":
            return (
                None
                if non_ok
                else (f"no send was refused while {f['target']}'s disk was full: the fault had no visible effect")
            )
        series = (offsets or {}).get(f["target"], [])
        master = next((m for _t, _o, m in series if m), None)
        slave_grew = _grew(series, f["start_ms"] + 1000, end)
        master_grew = _grew((offsets or {}).get(master, []), f["start_ms"] + 1000, end) if master else None
        if slave_grew and master_grew:
            return f"{f['target']} went on storing while its disk was full: the fault had no visible effect"
        return None
    if seen == "behind":
        # the slave's HA link cut or slowed past the sync wait: a sync send timed out or was refused, or the
        # slave fell behind its master in two sample rounds in a row
        if non_ok or _behind(offsets or {}, f["target"], f["start_ms"], end):
            return None
        return (
            f"{f['target']} never fell behind its master and no send failed while its link was {f['kind']}: "
            "the fault had no visible effect"
        )
    if seen == "refused":
        return None if non_ok else f"every send succeeded while the clients' link to {f['target']} was cut"
    if seen != "down":
        return None  # slicer, client-latency: their effect (split frames, slow replies) is not in the samples
    if any(f["start_ms"] <= t <= end + 1000 for t in down.get(f["target"], [])):
        return None
    return f"no sample saw {f['target']} down while the fault was active: the fault had no visible effect"


def _master_power(f: dict) -> bool:
    return master_power_cut(f["kind"], f.get("role"))


# what a sample can be blamed for: moved whole to the fault that caused it when its own fault was not exercised
LOSS_FIELDS = ("lost", "undelivered", "stranded", "lost_after_delivery", "divergent")


def _same_group(a: dict, b: dict) -> bool:
    return a.get("group") is None or b.get("group") is None or a["group"] == b["group"]


STUCK_WINDOW_MS = 2000  # the sample rounds (500 ms apart) just before a fault that show a group replicating


def stuck_groups(run: Path, at_ms: float) -> dict[str, str]:
    """group -> why it could not replicate just before at_ms, from the samples alone: in every round of the
    STUCK_WINDOW_MS before it (3 at least, every node answering) a slave was ahead of its master (the master
    came back behind it), or the slave stored nothing while its master's log grew (a fork the master has
    written past). What the nemesis checks live (SLAVE_AHEAD, nemesis.py), for runs it did not record."""
    p = run / "metrics" / "samples.jsonl"
    if not p.exists():
        return {}
    series: dict[tuple[str, str], list[tuple[float, int, int]]] = {}
    rounds: dict[float, dict] = {}
    for r in read_jsonl(p):
        if at_ms - STUCK_WINDOW_MS <= _ms(r["ts"]) < at_ms:
            rounds.setdefault(r["ts"], {})[r["node"]] = r
    for ts in sorted(rounds):
        for r in rounds[ts].values():
            m = rounds[ts].get(r.get("master") or "")
            if (
                r.get("role") == "SLAVE"
                and m
                and r.get("maxPhyOffset") is not None
                and m.get("maxPhyOffset") is not None
            ):
                key = (r.get("brokerName") or m["node"], r["node"])
                series.setdefault(key, []).append((ts, m["maxPhyOffset"], r["maxPhyOffset"]))
    out = {}
    for (g, slave), xs in series.items():
        if len(xs) < 3 or len(xs) < len(rounds):
            continue
        if all(sl > ms for _t, ms, sl in xs):
            out[g] = f"group {g} cannot replicate: {slave} was ahead of its master before the fault (a fork)"
        elif len({sl for _t, _m, sl in xs}) == 1 and all(b[1] > a[1] for a, b in zip(xs, xs[1:])):
            out[g] = (
                f"group {g} cannot replicate: {slave} stored nothing while its master's log grew before "
                "the fault (a fork)"
            )
    return out


def _recovery(
    f: dict, rounds: list[tuple[float, dict[str, int]]], unequal: dict[str, tuple[bool, str]], faults: list[dict]
) -> tuple[float | None, bool]:
    """(seconds from heal to every slave of the fault's group at its master's offset, never: it did not
    happen). A slave ahead of its master or not answering is not caught up; nor is any round after the first
    master power loss of a group that did not end byte-equal (a fork: equal offsets, different bytes), nor
    after the group's last fault when it ended unequal for another reason. (None, False): no samples."""
    end = f["end_ms"]
    if not rounds:
        return None, False
    if end is None:
        return None, True
    slave_groups = {g for _ts, gs in rounds for g in gs}
    groups = [f["group"]] if f.get("group") else sorted(slave_groups)
    cutoff = {}
    for g in groups:
        if g not in unequal:
            continue
        mine = [x for x in faults if _same_group(x, {"group": g})]
        rewrites = [x["start_ms"] for x in mine if _master_power(x)] if unequal[g][0] else []
        cutoff[g] = min(rewrites) if rewrites else max((x["start_ms"] for x in mine), default=0)
    for ts, gs in rounds:
        if ts < end:
            continue
        if all(gs.get(g, -1 if g in slave_groups else 0) == 0 and ts < cutoff.get(g, float("inf")) for g in groups):
            return round((ts - end) / 1000, 1), False
    return None, True
