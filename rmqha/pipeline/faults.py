"""Faults of a run (RUN/faults/*.jsonl, written by rmqha/runs/faultlog.py) and what they are blamed for.

A fault is active from its inject's start_ms to its heal's ts_ms (to the end of time when no heal was
written: a fault that was never healed). An event is attributed to every fault active during it, or
that ended at most GRACE_MS before it: a slave that was cut off still catches up after the heal, and
sends time out meanwhile. An event that no fault explains is attributed to "no fault", which is what
a reader must look at first.

Events: every non-OK send (its start..end), every acknowledged send lost (loss_blame), and every
diverging replica pair (a divergence has no time: it is attributed to the faults on its broker group that
can rewrite a log: power loss, kill, restart, partition of the master).

An acknowledged send that was lost is blamed on the fault that destroyed it, never on a fault that merely
happened when it was acknowledged (loss_blame: the one rule, used by the audit's lostByFault and
deliveryByFault and by the guarantee matrix's cells, rmqha/matrix/cells.py).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from rmqha.runs.faultlog import read_faults
from rmqha.runs.faults import (
    CLUSTER_WIDE,
    DESTRUCTIVE,
    FAULTS,
    LEADER_FAULTS,
    LOG_REWRITING,
    POWER_LOSSES,
    master_power_cut,
)

from . import ids
from .verdict import INFO, WARN, Verdict

GRACE_MS = 5000
NO_FAULT = "no fault"


@dataclass
class FaultInterval:
    id: int
    kind: str
    target: str
    group: str | None
    role: str | None
    link: str | None
    params: dict
    start_ms: int
    end_ms: int | None  # None: never healed
    inject_error: str | None = None
    heal_error: str | None = None
    info: dict = field(default_factory=dict)
    cut_short: str | None = None  # the heal's info.cutShort: healed at the run's end before its hold was over

    @property
    def label(self) -> str:
        return f"#{self.id} {self.kind} {self.link or self.target}"

    def covers(self, start_ms: int, end_ms: int, grace_ms: int = GRACE_MS) -> bool:
        end = float("inf") if self.end_ms is None else self.end_ms + grace_ms
        return start_ms <= end and end_ms >= self.start_ms


def fault_files(run_dir: str) -> list[str]:
    d = os.path.join(run_dir, "faults")
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".jsonl")) if os.path.isdir(d) else []


def load(run_dir: str) -> list[FaultInterval]:
    """Inject and heal records paired by (file, id)."""
    out: list[FaultInterval] = []
    for path in fault_files(run_dir):
        by_id: dict[int, FaultInterval] = {}
        with open(path) as fh:
            for line in fh:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                fid = r.get("id")
                if r.get("op") == "inject":
                    group = None if r.get("kind") in CLUSTER_WIDE else r.get("group")
                    fi = FaultInterval(
                        fid,
                        r.get("kind", "?"),
                        r.get("target", "?"),
                        group,
                        r.get("role"),
                        r.get("link"),
                        r.get("params") or {},
                        int(r.get("start_ms") or r["ts_ms"]),
                        None,
                        r.get("error"),
                        None,
                        r.get("info") or {},
                    )
                    by_id[fid] = fi
                    out.append(fi)
                elif r.get("op") == "heal" and fid in by_id:
                    by_id[fid].end_ms = int(r["ts_ms"])
                    by_id[fid].heal_error = r.get("error")
                    by_id[fid].cut_short = (r.get("info") or {}).get("cutShort")
    return sorted(out, key=lambda f: f.start_ms)


def skipped(run_dir: str) -> list[dict]:
    """The scheduled faults the nemesis did not inject ("skip" lines: moved so late by earlier faults that
    their hold would not have ended before the run's quiet end, or not reached before the run stopped),
    each {id, kind, target, group, why}."""
    return [
        {k: r.get(k) for k in ("id", "kind", "target", "group")} | {"why": (r.get("info") or {}).get("skipped", "")}
        for r in read_faults(run_dir)
        if r.get("op") == "skip"
    ]


def master_power_loss(f) -> bool:
    """A fault that cut a master's power (alone, or with its whole group)."""
    return master_power_cut(f.kind, f.role)


def forks_allowed(faults: list[FaultInterval]) -> dict[str, str]:
    """broker group -> the master power loss that allows its logs to fork (the fault's label)."""
    out: dict[str, str] = {}
    for f in faults:
        if master_power_loss(f) and not f.inject_error:
            out.setdefault(f.group or "*", f"power loss {f.label}")  # "*": every group
    return out


def blame(faults: list[FaultInterval], start_ms: int, end_ms: int | None = None) -> list[str]:
    end_ms = start_ms if end_ms is None else end_ms
    hit = [f.label for f in faults if f.covers(start_ms, end_ms)]
    return hit or [NO_FAULT]


# -- who an acknowledged send that was lost is blamed on -------------------------------------------

DESTROYS, MAY_DESTROY = 1, 2  # _destroyer's answers, the surer first


def _destroyer(f: FaultInterval) -> int:
    """Whether fault f can destroy an acknowledged record its group stored, and how surely (0: it cannot).

    DESTROYS: a power cut of a node that holds the record: a classic group's master, alone, with its group
    or with the cluster (master_power_cut: a slave's cut leaves the master's copy), or any member of a
    DLedger group (only a power cut drops what the page cache held); or a fault that moves a DLedger
    group's leadership (LEADER_FAULTS: a new leader truncates the entries its own log lacks).
    MAY_DESTROY: a classic fault that can take its master's tail or leave it behind its slave
    (DESTRUCTIVE, not on a slave): a kill or a restart keeps the page cache, so before a power cut it
    strands nothing by itself. A fault whose inject failed did nothing."""
    kind = FAULTS.get(f.kind)
    if kind is None or f.inject_error:
        return 0
    if (f.kind in POWER_LOSSES and (kind.dledger or master_power_loss(f))) or f.kind in LEADER_FAULTS:
        return DESTROYS
    if f.kind in DESTRUCTIVE and f.role != "slave":
        return MAY_DESTROY
    return 0


def _at_risk(faults: list[FaultInterval], ack_ms: int, group: str | None) -> list[FaultInterval]:
    """The faults that could reach a record acknowledged at ack_ms: active then or started later (not
    healed before it), on its broker group (every group's when the group is unknown; a cluster-wide
    fault's group is None: every group's)."""
    return [
        f for f in faults if (f.end_ms is None or f.end_ms >= ack_ms) and (group is None or f.group in (None, group))
    ]


def loss_blame(
    faults: list[FaultInterval], ack_ms: int | None, group: str | None = None, destroyed: bool = True
) -> list[str]:
    """The fault(s) an acknowledged send that was lost is blamed on: the rule every loss count follows
    (lostByFault, deliveryByFault, the matrix's cells).

    destroyed: the record is gone from its group's master (on no node, only on a slave, received and then
    gone). It is blamed on the first fault active at its acknowledgement or later, on its group, that can
    destroy it (_destroyer): the first power cut of a node holding it or DLedger leadership change, else
    the first other fault that can take a classic master's tail (a kill or restart before a power cut
    strands nothing by itself: the cut is blamed). When its group is unknown (an answer that names none, a record on no
    node) the destroying fault cannot be determined: each group's first destroyer is blamed (a
    cluster-wide fault is every group's), the send counts in each of those cells.
    When no fault active at its acknowledgement or later could destroy it: the faults active when it was
    acknowledged or healed at most GRACE_MS before (blame()), those of its group that can destroy a record
    first; else "no fault". A fault that happened to be active at the acknowledgement is never blamed for
    a destruction a later fault did.

    Not destroyed (still on its master: a consumer passed it by, never got that far, or it has no queue
    entry): no fault destroyed it, and what made it unservable cannot be told from the stores (the broker
    when it took the send, or a later restart's recovery, fork or consumers' failover): both the faults
    active when it was acknowledged and the first later fault of its group that can destroy a record
    (either kind) are blamed, it counts in each of those cells; none: "no fault"."""
    t = ack_ms or 0
    reach = _at_risk(faults, t, group)
    if not destroyed:
        later = sorted((f for f in reach if _destroyer(f) and f.start_ms >= t), key=lambda f: (f.start_ms, f.id))
        now = [x for x in blame(faults, t) if x != NO_FAULT]
        return list(dict.fromkeys(now + (_first_per_group(later) if later else []))) or [NO_FAULT]
    for tier in (DESTROYS, MAY_DESTROY):
        able = sorted((f for f in reach if _destroyer(f) == tier), key=lambda f: (f.start_ms, f.id))
        if able:
            return _first_per_group(able)
    # none could reach it: the faults at its acknowledgement (healed at most GRACE_MS before it), among them
    # those of its group that can destroy a record when there are any (a kill beside a power cut strands
    # nothing by itself)
    active = [f for f in faults if f.covers(t, t)]
    for tier in (DESTROYS, MAY_DESTROY):
        able = [f.label for f in active if _destroyer(f) == tier and (group is None or f.group in (None, group))]
        if able:
            return list(dict.fromkeys(able))
    return blame(faults, t)


def _first_per_group(able: list[FaultInterval]) -> list[str]:
    """The first of the faults (sorted by start) per broker group they hit; a cluster-wide one hits every
    group."""
    groups = sorted({f.group for f in able} - {None})
    if not groups:
        return [able[0].label]
    firsts = {next(f for f in able if f.group in (None, g)).label: None for g in groups}
    return [f.label for f in able if f.label in firsts]


def loss_suspects(faults: list[FaultInterval], ack_ms: int | None, group: str | None = None) -> list[str]:
    """Every fault a lost send's detail line names (OUT/delivery.jsonl "faults"): those active when it was
    acknowledged, and every later fault of its group that could destroy it; loss_blame picks among them."""
    t = ack_ms or 0
    later = [f.label for f in _at_risk(faults, t, group) if _destroyer(f) and f.start_ms >= t]
    labels = [x for x in blame(faults, t) if x != NO_FAULT or not later] + later
    return list(dict.fromkeys(labels))


def lost_by_fault(faults: list[FaultInterval], lost) -> list[tuple[str, list[str]]]:
    """(uniq_key, the faults loss_blame blames) for each of the history's acknowledged sends on no node
    (uniq_key, send_id, client, topic, end_ms[, broker group]: summary.json's `lost`; without a group, each
    group's first destroyer after it)."""
    return [(uniq, loss_blame(faults, end, group[0] if group else None)) for uniq, _s, _c, _t, end, *group in lost]


def from_summary(rows: list[dict]) -> list[FaultInterval]:
    """summary.json's `faults` (each FaultInterval as a dict) as FaultIntervals again."""
    names = FaultInterval.__dataclass_fields__
    base = {"kind": "?", "target": "?", "group": None, "role": None, "link": None, "params": {}, "start_ms": 0}
    return [FaultInterval(**(base | {"end_ms": None} | {k: v for k, v in r.items() if k in names})) for r in rows]


@dataclass
class Attribution:
    non_ok: dict = field(default_factory=dict)  # fault label -> {status: count}
    lost: dict = field(default_factory=dict)  # fault label -> [uniq_key]
    divergent: dict = field(default_factory=dict)  # fault label -> ["master/slave at offset"]


def attribute(faults: list[FaultInterval], non_ok_sends, lost, pairs, groups_of_pair=None) -> Attribution:
    """non_ok_sends: (status, start_ms, end_ms[, sends]) (sends: how many sends had these, 1 when absent);
    lost: (uniq_key, send_id, client, topic, end_ms[, broker group]) (lost_by_fault); pairs: rmqha.pipeline.audit pairs (master, slave,
    first_divergent_offset)."""
    a = Attribution()
    for status, start, end, *n in non_ok_sends:
        for label in blame(faults, start, end):
            d = a.non_ok.setdefault(label, {})
            d[status] = d.get(status, 0) + (n[0] if n else 1)
    for uniq, labels in lost_by_fault(faults, lost):
        for label in labels:
            a.lost.setdefault(label, []).append(uniq)
    for p in pairs:
        if p.first_divergent_offset is None:
            continue
        group = (groups_of_pair or {}).get(p.master)
        labels = [f.label for f in faults if f.kind in LOG_REWRITING and (group is None or f.group in (None, group))]
        for label in labels or [NO_FAULT]:
            a.divergent.setdefault(label, []).append(f"{p.master}/{p.slave} at {p.first_divergent_offset}")
    return a


def verdicts(faults: list[FaultInterval], a: Attribution, skips: list[dict] | None = None) -> list[Verdict]:
    """skips: the faults the nemesis skipped (skipped())."""
    out = []
    if skips:
        out.append(
            Verdict(
                "faults skipped",
                WARN,
                f"{len(skips)} scheduled fault(s) not injected, moved past the run's end by earlier faults "
                "that took long (the run tested less than its schedule): "
                + "; ".join(f"#{s['id']} {s['kind']} {s['target']}: {s['why']}" for s in skips[:5]),
                ids.FAULTS_SKIPPED,
            )
        )
    if not faults:
        return out
    kinds: dict[str, int] = {}
    for f in faults:
        kinds[f.kind] = kinds.get(f.kind, 0) + 1
    failed = [f for f in faults if f.inject_error or f.heal_error]
    never = [f for f in faults if f.end_ms is None]
    short = [f for f in faults if f.cut_short]
    idle = [f for f in faults if f.info.get("notExercised")]
    out.append(
        Verdict(
            "faults injected",
            INFO,
            f"{len(faults)} ({', '.join(f'{k} x{n}' for k, n in sorted(kinds.items()))})"
            + (
                f"; {len(failed)} with an inject/heal error: "
                + "; ".join(f"{f.label}: {f.inject_error or f.heal_error}" for f in failed[:5])
                if failed
                else ""
            )
            + (f"; {len(never)} never healed" if never else "")
            + (
                f"; {len(short)} cut short by the run's end: "
                + "; ".join(f"{f.label}: {f.cut_short}" for f in short[:5])
                if short
                else ""
            ),
            ids.FAULTS_INJECTED,
        )
    )
    if idle:
        out.append(
            Verdict(
                "faults not exercised",
                WARN,
                f"{len(idle)} fault(s) hit a group that could no longer "
                "replicate, so they show nothing about replication: "
                + "; ".join(f"{f.label}: {f.info['notExercised']}" for f in idle[:5]),
                ids.FAULTS_NOT_EXERCISED,
            )
        )
    if a.non_ok:
        out.append(
            Verdict(
                "non-OK sends by fault",
                INFO,
                "; ".join(
                    f"{label}: " + ", ".join(f"{s} {n}" for s, n in sorted(st.items()))
                    for label, st in sorted(a.non_ok.items(), key=lambda kv: (kv[0] == NO_FAULT, kv[0]))
                ),
                ids.FAULTS_NON_OK,
            )
        )
    if a.lost:
        out.append(
            Verdict(
                "acknowledged losses by fault",
                INFO,
                "; ".join(
                    f"{label}: {len(keys)} ({', '.join(keys[:3])}{', ...' if len(keys) > 3 else ''})"
                    for label, keys in sorted(a.lost.items())
                ),
                ids.FAULTS_LOST,
            )
        )
    if a.divergent:
        out.append(
            Verdict(
                "divergences by fault",
                INFO,
                "; ".join(f"{label}: {', '.join(v)}" for label, v in sorted(a.divergent.items())),
                ids.FAULTS_DIVERGENT,
            )
        )
    return out


def shade(ax, faults: list[FaultInterval], t0_ms: float, scale_ms: float = 1000.0, end_ms: float | None = None) -> None:
    """Shade each fault's interval on a plot whose x axis is (t - t0_ms) / scale_ms."""
    colors = {}
    palette = ["#f4a582", "#92c5de", "#b2abd2", "#fddbc7", "#a6dba0", "#e6e6e6", "#fee08b"]
    for f in faults:
        c = colors.setdefault(f.kind, palette[len(colors) % len(palette)])
        end = f.end_ms if f.end_ms is not None else (end_ms or f.start_ms + 1000)
        first = f.kind not in {k for k, v in colors.items() if v == c and k in getattr(ax, "_shaded", set())}
        ax.axvspan(
            (f.start_ms - t0_ms) / scale_ms,
            (end - t0_ms) / scale_ms,
            color=c,
            alpha=0.35,
            label=f"fault: {f.kind}" if first else None,
            zorder=0,
        )
        ax._shaded = getattr(ax, "_shaded", set()) | {f.kind}


def markdown(faults: list[FaultInterval], a: Attribution, t0_ms: int | None = None) -> list[str]:
    if not faults:
        return []
    t0 = t0_ms if t0_ms is not None else faults[0].start_ms
    lines = [
        "",
        "## Faults",
        "",
        "Every inject and heal of the nemesis (`faults/*.jsonl`). Times are seconds from the first fault.",
        "",
        "| fault | kind | target | group | from (s) | to (s) | params | result | info |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for f in faults:
        to = f"{(f.end_ms - t0) / 1000:.1f}" if f.end_ms is not None else "never healed"
        res = f.inject_error or f.heal_error or ("cut short" if f.cut_short else "ok")
        lines.append(
            f"| {f.id} | {f.kind} | {f.link or f.target} | {f.group or '-'} | {(f.start_ms - t0) / 1000:.1f} "
            f"| {to} | {_kv(f.params)} | {res} | {_kv(f.info)} |"
        )
    rows = []
    for label in sorted(set(a.non_ok) | set(a.lost) | set(a.divergent), key=lambda s: (s == NO_FAULT, s)):
        rows.append(
            f"| {label} | {', '.join(f'{s} {n}' for s, n in sorted(a.non_ok.get(label, {}).items())) or '-'} "
            f"| {len(a.lost.get(label, []))} | {', '.join(a.divergent.get(label, [])) or '-'} |"
        )
    if rows:
        lines += [
            "",
            f"Attribution (an event is blamed on every fault active during it or healed at most "
            f"{GRACE_MS / 1000:g} s before it; an acknowledged loss on the fault that destroyed it, the first "
            "power cut or DLedger leadership change of its group from its acknowledgement on, else the first "
            "other fault that can take a master's tail, else those active when it was acknowledged):",
            "",
            "| fault | non-OK sends | acknowledged losses | divergences |",
            "|---|---|---|---|",
        ] + rows
    return lines


def _kv(d: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in (d or {}).items()) or "-"
