"""A consumer group's committed offset moving back, from the master samples (`cluster sample`'s
`consumerOffsets`, GET_ALL_CONSUMER_OFFSET every round).

A committed offset that moves back makes the group consume again what it had (duplicates) at best, and
at worst (a reset past messages) skip them. In 4.9 a master persists consumer offsets every 5 s
(`flushConsumerOffsetInterval`), so a master restart, kill or power loss may legitimately bring a
group's offsets back by up to that much: such a regression is explained by the fault (WARN). One that
no fault on that master explains is a FAIL: the broker lost or rewrote what a consumer committed.

Offsets are followed per group (brokerName), whichever node is its master at each sample: in a DLedger
group the master moves, and a new leader serves the offsets it last copied as a follower (4.9's slaves
copy them every 10 s), so a leader change may also bring them back (WARN when a leader fault of that
group explains it). A DLedger member's row counts as its group's master only while its DLedger role is
LEADER: a member just restarted keeps its file's brokerRole (a MASTER) until its first role event, with
brokerId -1, and its offsets then are what it last persisted as a follower, served to no client (no
route names it). Taking them for the group's (mx-dl-l3, 2026-11-29: a candidate back from a power cut,
1088 -> 433 on every queue) failed the check for offsets no consumer ever saw.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rmqha.runs.faults import CLUSTER_WIDE, RESTARTING
from rmqha.runs.faults import LEADER_FAULTS as LEADER_CHANGING  # the new leader's offsets may trail (see above)

from . import ids
from .faults import FaultInterval
from .verdict import FAIL, PASS, WARN, Verdict

ID_REGRESSION = ids.OFFSET_REGRESSION
EXPLAIN_MS = 30_000
MAX_LISTED = 5


@dataclass
class Regression:
    group: str
    topic: str
    node: str
    queue_id: str
    before: int
    after: int
    ts_ms: int
    faults: list[str] = field(default_factory=list)


def _explains(f: FaultInterval, node: str, broker: str) -> bool:
    if f.kind in RESTARTING:
        return f.target == node or f.kind in CLUSTER_WIDE
    return f.kind in LEADER_CHANGING and f.group == broker


def regressions(samples: list[dict], faults: list[FaultInterval] = ()) -> list[Regression]:
    """Every step down of a (group, topic@consumer group, queue)'s committed offset from one master sample
    to the next, with the faults around it that explain it: a restart of the master that answered the
    lower one, or a leader fault of its DLedger group, started between the two samples (the master was not
    answering in between, as a restart leaves it) or healed at most EXPLAIN_MS before the lower one (a
    consumer corrects an offset past a shortened queue at its next pull). samples: report.load_metrics
    rows, ts in ms."""
    prev: dict[tuple, tuple[int, int]] = {}
    out = []

    def master_row(r: dict) -> bool:
        dl = r.get("dledger")
        return bool(r.get("consumerOffsets")) and (dl is None or dl.get("role") == "LEADER")

    for row in sorted((r for r in samples if master_row(r)), key=lambda r: r["ts"]):
        node, ts = row["node"], int(row["ts"])
        broker = row.get("brokerName") or node
        for key, queues in row["consumerOffsets"].items():
            topic, _, group = key.rpartition("@")
            for qid, off in queues.items():
                k = (broker, key, qid)
                last = prev.get(k)
                if last is not None and off < last[0]:
                    why = [
                        f.label
                        for f in faults
                        if _explains(f, node, broker)
                        and last[1] - EXPLAIN_MS <= f.start_ms <= ts
                        and (f.end_ms is None or ts <= f.end_ms + EXPLAIN_MS)
                    ]
                    out.append(Regression(group, topic, node, qid, last[0], off, ts, why))
                prev[k] = (off, ts)
    return out


def roleless(samples: list[dict]) -> int:
    """Samples with consumer offsets from a DLedger member that named no role: regressions() cannot tell
    whether it led, so their offsets are not judged; verdicts() says how many."""
    return sum(
        1 for r in samples if r.get("consumerOffsets") and r.get("dledger") is not None and not r["dledger"].get("role")
    )


def verdicts(regs: list[Regression], sampled: bool, unjudged: int = 0) -> list[Verdict]:
    """unjudged: roleless() samples, named in every verdict; with no regression they make it a WARN, never a
    PASS over offsets nobody looked at."""
    if not sampled:
        return []
    note = (
        f" ({unjudged} sample(s) of DLedger members that named no role not judged: whether they led is unknown)"
        if unjudged
        else ""
    )
    by_group: dict[str, list[Regression]] = {}
    for r in regs:
        by_group.setdefault(r.group, []).append(r)
    out = []
    for group, rs in sorted(by_group.items()):
        bad = [r for r in rs if not r.faults]
        text = "; ".join(
            f"{r.node} {r.topic} q{r.queue_id}: {r.before} -> {r.after}"
            + (f" ({', '.join(r.faults)})" if r.faults else " (no fault)")
            for r in (bad or rs)[:MAX_LISTED]
        )
        more = len(bad or rs) - MAX_LISTED
        text += f"; and {more} more" if more > 0 else ""
        if bad:
            out.append(
                Verdict(
                    f"committed offsets of {group} never move back",
                    FAIL,
                    f"{len(bad)} regression(s) no restart of the master or leader change explains: {text}{note}",
                    ID_REGRESSION,
                    group,
                )
            )
        else:
            out.append(
                Verdict(
                    f"committed offsets of {group} never move back",
                    WARN,
                    f"{len(rs)} regression(s), each after its master restarted or its group's leader changed "
                    f"(offsets are persisted every 5 s, and copied to followers every 10 s: redelivery "
                    f"follows): {text}{note}",
                    ID_REGRESSION,
                    group,
                )
            )
    if not by_group:
        out.append(
            Verdict(
                "committed offsets never move back",
                WARN if unjudged else PASS,
                f"no consumer group's committed offset moved back in the samples{note}",
                ID_REGRESSION,
            )
        )
    return out
