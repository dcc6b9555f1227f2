"""Delivery: what each consumer group got of what was acknowledged, judged as Jepsen's queue checkers do.

A message is delivered when its consumer group received it, not when some disk holds it: an acknowledged
send that no consumer of the group can ever get is lost to its user, whatever node it sits on. Every
logical send (rmqha/runs/recorder.py's send_id: all tries of one message) to a topic a group subscribed to, in
the group's window (from its subscribe, or from the start for FROM_FIRST; to the shutdown of its last
consumer), is owed to that group and ends in exactly one state:

    delivered      the group received it (any try's copy)
    stranded       acknowledged, not received, stored only where the group cannot be served from: on a
                   slave but not on its group's master (a fork: the master came back behind its slave)
    lost           acknowledged, not received, and not stranded; the reason says which:
                   "queued"      on its master with a consume-queue entry, before the offset the
                                 group's consumers committed: they passed it by (a consumer-side loss),
                   "backlog"     the same, at or past that offset: the group never got that far (its
                                 consumer stalled or stopped before the end of the drain; a send in
                                 no broker group: in some group's queue),
                   "unqueued"    on its master with no consume-queue entry (undeliverable),
                   "nowhere"     on no node at all
    parked         acknowledged, only in SCHEDULE_TOPIC_XXXX / the half-message topic of a master (not due
                   yet); parked on a slave only, it is stranded
    unconfirmed    answered FLUSH_*_TIMEOUT / SLAVE_NOT_AVAILABLE and never SEND_OK: not owed
    indeterminate  never answered by the broker (client errors, timeouts, no answer at all): not owed,
                   never counted lost nor unexpected if it shows up

and, beside the states: lost-after-delivery (received, then gone from the group's master: a consumer
that resets its offset, or a new group, can no longer get it), unexpected (received, never sent),
duplicate (received more than once), reordered (an orderly consumer received a sharding key's
messages out of the order the producer's acknowledgements gave them).

Every count is exact (Spark aggregates, nothing capped) and every message behind a FAIL is written to
OUT/delivery.jsonl with the faults active when it was acknowledged or later able to destroy it ("faults")
and the one(s) it is blamed on ("blamed": faults.loss_blame, what deliveryByFault counts).
Verdicts carry stable ids (ID_* below) and the group as their subject.

This module holds the findings and judges them (verdicts(), no Spark); delivery_gather.py computes them
with Spark. Tests: tests/unit/pipeline/test_delivery*.py, test_checkers.py (without Spark).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from rmqha.broker.support.beans import bean_json

from . import ids
from .verdict import FAIL, INFO, PASS, WARN, Verdict

ID_LOST = ids.DELIVERY_LOST
ID_STRANDED = ids.DELIVERY_STRANDED
ID_LOST_AFTER = ids.DELIVERY_LOST_AFTER
ID_UNEXPECTED = ids.DELIVERY_UNEXPECTED
ID_DUPLICATE = ids.DELIVERY_DUPLICATE
ID_REORDERED = ids.DELIVERY_REORDERED
ID_INDETERMINATE = ids.DELIVERY_INDETERMINATE
ID_DELIVERED = ids.DELIVERY_DELIVERED
ID_QUEUES = ids.QUEUES
ID_NO_GROUP = ids.DELIVERY_NO_GROUP
ID_AMBIGUOUS = ids.DELIVERY_AMBIGUOUS

PARKED_TOPICS = ("SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC")
UNCONFIRMED = ("FLUSH_DISK_TIMEOUT", "FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE")
MAX_LISTED = 10
AT_RISK_MS = 5000  # acknowledged this long before a fault: still at stake when it hits (unflushed, in flight)
DETAIL_FILE = "delivery.jsonl"
# A record the broker dispatches to a consume queue: not a transaction's prepared or rollback record.
TRAN_TYPE_MASK, TRAN_PREPARED, TRAN_ROLLBACK = 0xC, 0x4, 0xC
REASONS = ("backlog", "queued", "unqueued", "nowhere")  # why a lost send is lost (the module's doc)


def destroyed(verdict_id: str, reason: str | None) -> bool:
    """Whether a lost acknowledged send's record is gone from its group's master, so that a fault destroyed
    it (faults.loss_blame): stranded on a slave, received and then gone, or lost "nowhere". One lost
    "queued", "backlog" or "unqueued" is still on its master: no fault destroyed it."""
    return verdict_id in (ID_STRANDED, ID_LOST_AFTER) or (verdict_id == ID_LOST and reason == "nowhere")


@dataclass
class GroupDelivery:
    group: str
    topics: list[str]
    ordered: bool = False
    acknowledged: int = 0
    delivered: int = 0
    lost: int = 0
    lost_by_reason: dict = field(default_factory=dict)
    stranded: int = 0
    parked: int = 0
    lost_after_delivery: int = 0
    unconfirmed: int = 0
    unconfirmed_delivered: int = 0
    unconfirmed_lost_after_delivery: int = 0
    indeterminate: int = 0
    indeterminate_delivered: int = 0
    receives: int = 0
    duplicates: int = 0
    unexpected: int = 0
    reordered: int = 0
    ambiguous: int = 0  # acknowledged, owed, in no broker group: copies in two, the answer names neither
    examples: dict = field(default_factory=dict)  # verdict id -> [short text] (at most MAX_LISTED)

    def summary(self) -> dict:
        """summary.json's per-group `delivery` block."""
        return bean_json(
            self,
            "acknowledged delivered lost lost_by_reason stranded parked lost_after_delivery duplicates indeterminate"
            " indeterminate_delivered unconfirmed unconfirmed_delivered unexpected reordered receives"
            " ambiguousGroup=ambiguous topics ordered",
        )


@dataclass
class QueueConsistency:
    node: str
    records: int = 0  # dispatchable records of the node's log
    entries: int = 0  # consume-queue units read
    unqueued: int = 0  # records with no unit at their queue offset pointing at them
    dangling: int = 0  # units pointing at no record of the node's log
    examples: list = field(default_factory=list)


@dataclass
class DeliveryFindings:
    groups: list[GroupDelivery] = field(default_factory=list)
    queues: list[QueueConsistency] = field(default_factory=list)
    detail_path: str | None = None
    detail_lines: int = 0
    # fault label -> {verdict id: distinct messages it is a suspect of} (the matrix's cells)
    by_fault: dict = field(default_factory=dict)
    # fault label -> acknowledged sends stored in the fault's own broker group from AT_RISK_MS before it
    # until its heal: what the fault could destroy or had to protect (a killed master acknowledges nothing
    # while it is down; what it acknowledged just before is what is at stake). A fault with none showed
    # nothing about its group ("not exercised"), whatever the other groups did
    acked_on_group: dict = field(default_factory=dict)

    def summary(self) -> dict:
        return {g.group: g.summary() for g in self.groups}


# -- verdicts -------------------------------------------------------------------------------------


def _few(xs: list[str], total: int) -> str:
    more = total - len(xs)
    return "; ".join(xs) + (f"; and {more} more (all in {DETAIL_FILE})" if more > 0 else "")


def verdicts(f: DeliveryFindings, have_history: bool = True) -> list[Verdict]:
    out: list[Verdict] = []
    if not f.groups:
        if have_history:
            out.append(
                Verdict(
                    "delivery",
                    WARN,
                    "no consumer group in the histories (no subscribe or receive "
                    "lines): delivery not judged, only storage",
                    ID_NO_GROUP,
                )
            )
    for g in f.groups:
        s = g.group
        owed = g.acknowledged - g.parked
        ex = g.examples
        out.append(
            Verdict(
                f"delivered {s}",
                INFO,
                f"delivered {g.delivered} of {g.acknowledged} acknowledged on {', '.join(g.topics)} "
                f"({g.lost} lost, {g.stranded} stranded, {g.parked} parked); {g.receives} receives; "
                f"not owed: {g.unconfirmed} unconfirmed ({g.unconfirmed_delivered} received), "
                f"{g.indeterminate} indeterminate ({g.indeterminate_delivered} received)",
                ID_DELIVERED,
                s,
            )
        )
        lost_txt = ", ".join(f"{k} {v}" for k, v in g.lost_by_reason.items())
        out.append(
            Verdict(
                f"acknowledged sends delivered to {s}",
                FAIL if g.lost else PASS,
                f"{g.lost} of {owed} acknowledged send(s) never received ({lost_txt}): "
                + _few(ex.get(ID_LOST, []), g.lost)
                if g.lost
                else f"all {g.delivered} owed acknowledged sends received",
                ID_LOST,
                s,
            )
        )
        out.append(
            Verdict(
                f"nothing acknowledged stranded for {s}",
                FAIL if g.stranded else PASS,
                f"{g.stranded} acknowledged send(s) stored only on a slave the group is not served "
                "from (the master came back without them): " + _few(ex.get(ID_STRANDED, []), g.stranded)
                if g.stranded
                else "no acknowledged send held only by a slave",
                ID_STRANDED,
                s,
            )
        )
        out.append(
            Verdict(
                f"nothing lost after delivery to {s}",
                FAIL if g.lost_after_delivery else PASS,
                f"{g.lost_after_delivery} acknowledged send(s) received, then gone from the group's "
                "master (a reset offset or a new group cannot get them): "
                + _few(ex.get(ID_LOST_AFTER, []), g.lost_after_delivery)
                if g.lost_after_delivery
                else "every received acknowledged send is still on its master"
                + (
                    f" ({g.unconfirmed_lost_after_delivery} unconfirmed sends received then gone)"
                    if g.unconfirmed_lost_after_delivery
                    else ""
                ),
                ID_LOST_AFTER,
                s,
            )
        )
        out.append(
            Verdict(
                f"nothing unexpected received by {s}",
                FAIL if g.unexpected else PASS,
                f"{g.unexpected} receive(s) match no send: " + _few(ex.get(ID_UNEXPECTED, []), g.unexpected)
                if g.unexpected
                else f"{g.receives} receives all match a send",
                ID_UNEXPECTED,
                s,
            )
        )
        rate = g.duplicates / g.receives if g.receives else 0.0
        out.append(
            Verdict(
                f"duplicates received by {s}",
                WARN if g.duplicates else PASS,
                f"{g.duplicates} duplicate receive(s), {rate:.2%} of {g.receives} (at-least-once allows them)",
                ID_DUPLICATE,
                s,
            )
        )
        if g.ordered:
            out.append(
                Verdict(
                    f"order per sharding key for {s}",
                    FAIL if g.reordered else PASS,
                    f"{g.reordered} message(s) received before an earlier-acknowledged message of "
                    "their producer's sharding key"
                    if g.reordered
                    else "every sharding key received in its acknowledgement order",
                    ID_REORDERED,
                    s,
                )
            )
        if g.ambiguous:
            out.append(
                Verdict(
                    f"broker group of acknowledged sends to {s}",
                    WARN,
                    f"{g.ambiguous} acknowledged send(s) stored in several broker groups, their answer "
                    "names none of the copies: counted on no group's fault, blamed on every group's: "
                    + "; ".join(ex.get(ID_AMBIGUOUS, []))
                    + (f"; and {g.ambiguous - MAX_LISTED} more" if g.ambiguous > MAX_LISTED else ""),
                    ID_AMBIGUOUS,
                    s,
                )
            )
        if g.indeterminate:
            out.append(
                Verdict(
                    f"indeterminate sends to {s}",
                    INFO,
                    f"{g.indeterminate} send(s) never answered by the broker ({g.indeterminate_delivered} "
                    "received anyway): neither lost nor unexpected",
                    ID_INDETERMINATE,
                    s,
                )
            )
    for q in f.queues:
        bad = q.unqueued + q.dangling
        out.append(
            Verdict(
                f"consume queues match the log on {q.node}",
                FAIL if bad else PASS,
                f"{q.unqueued} record(s) without their queue unit (undeliverable), {q.dangling} unit(s) "
                f"pointing at no record: " + "; ".join(q.examples)
                if bad
                else f"{q.records} records, each with its queue unit",
                ID_QUEUES,
                q.node,
            )
        )
    return out


def as_dict(f: DeliveryFindings) -> dict:
    return {"groups": [asdict(g) for g in f.groups], "queues": [asdict(q) for q in f.queues]}
