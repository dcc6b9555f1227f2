"""What the repair puts back on the master, and how: one decision per stranded record, no I/O
(rmqha/cluster/repair.py reads the logs, sends and cuts).

How 4.9 stores what a slave may hold past the fork, and how each is put back so the master serves it
as it would have (MessageConst, CommitLog.putMessage, TransactionalMessageBridge; here rmqha/broker/store/
delay.py and rmqha/broker/transaction/messages.py):

* an ordinary message, a %RETRY%<group> message (the consumer's send-back) or a %DLQ% one: sent again
  as it is, to the same topic and queue; a committed transaction copy keeps TRAN_MSG=true in its
  stored properties (4.9.8 serializes them before clearing it), so TRAN_MSG is dropped or the master
  would take it for a half;
* a delayed message is parked in SCHEDULE_TOPIC_XXXX, queue DELAY-1, with REAL_TOPIC / REAL_QID naming
  where it goes: sent to REAL_TOPIC / REAL_QID with its DELAY level, so the master parks it again (its
  delay restarts at the re-send); skipped when its delivered copy is on the master or re-sent too;
* a transaction half is RMQ_SYS_TRANS_HALF_TOPIC with REAL_TOPIC / REAL_QID / PGROUP: when no op
  record past the fork resolves it and no committed copy exists, it is sent again as a half (TRAN_MSG,
  PREPARED sysflag, to its real topic) and the master's transaction check asks a producer of PGROUP
  whether to commit it, as 4.9 does for any half it holds unresolved; op records (what END_TRANSACTION
  wrote) are not re-sent: a half they resolved is not re-sent either, and a half from before the fork
  whose op is lost is checked with its producer again;
* a record that gets no queue entry (PREPARED / ROLLBACK sysflag) was never deliverable;
* a topic no client may send to (TRANS_CHECK_MAX_TIME_TOPIC, SELF_TEST_TOPIC, OFFSET_MOVED_EVENT)
  cannot be put back: it blocks the cut unless the operator accepts losing that topic
  (`--accept-loss TOPIC`).

Every re-sent message carries REPAIR_OF=<slave>@<offset>; a message is on the master when a record
there carries that tag with the same body CRC, KEYS and (real) topic, or, for a message with a
UNIQ_KEY, the same UNIQ_KEY, real topic and reconsume count: a second run re-sends nothing twice.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from rmqha.broker.managers.topics import NOT_ALLOWED_SEND_TOPICS
from rmqha.broker.store import record
from rmqha.broker.store.delay import PROPERTY_DELAY, PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC, SCHEDULE_TOPIC
from rmqha.broker.transaction.messages import (
    HALF_TOPIC,
    OP_TOPIC,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_TRANSACTION_PREPARED,
    op_half_offset,
)

REPAIR_PROPERTY = "REPAIR_OF"
PRODUCER_GROUP = "RMQ_REPAIR_PRODUCER"
UNSENDABLE = frozenset(NOT_ALLOWED_SEND_TOPICS - {SCHEDULE_TOPIC, HALF_TOPIC, OP_TOPIC}) | {"TBW102"}
RETRY_PREFIX, DLQ_PREFIX = "%RETRY%", "%DLQ%"


def real_topic(m: record.Message) -> str:
    """Where a parked (delayed) or half message goes; any other record's own topic."""
    if m.topic in (SCHEDULE_TOPIC, HALF_TOPIC):
        return m.properties.get(PROPERTY_REAL_TOPIC, "")
    return m.topic


def identity(m: record.Message) -> tuple:
    """The same message in any of its forms (parked, delivered, half, committed)."""
    uniq = m.uniq_key
    what = ("u", uniq) if uniq else ("b", m.keys or "", record.body_crc(m.body))
    return real_topic(m), m.reconsume_times, what


def content(m: record.Message) -> tuple:
    """What verifies a re-sent message on the master, UNIQ_KEY or not: its tag, body CRC and KEYS."""
    return m.properties.get(REPAIR_PROPERTY), record.body_crc(m.body), m.keys or ""


@dataclass(frozen=True)
class Resend:
    offset: int  # on the slave
    kind: str  # message | retry | delayed | half
    message: record.Message  # what to send: topic, queue id, sysflag, properties (REPAIR_OF included)
    producer_group: str
    topics: frozenset[str]  # where the master may store it (a retry past its max goes to %DLQ%)

    @property
    def tag(self) -> str:
        return self.message.properties[REPAIR_PROPERTY]


@dataclass
class Plan:
    resend: list[Resend] = field(default_factory=list)
    already_on_master: int = 0
    skipped: Counter = field(default_factory=Counter)  # not re-sent, nothing lost: why -> count
    blocked: list[str] = field(default_factory=list)  # cannot be put back: one line each


def _kind(m: record.Message) -> str:
    if m.topic == OP_TOPIC:
        return "op"
    if m.topic == HALF_TOPIC:
        return "half"
    if m.topic == SCHEDULE_TOPIC:
        return "delayed"
    if not m.gets_queue_entry:
        return "no-entry"
    if m.topic in UNSENDABLE:
        return "unsendable"
    return "retry" if m.topic.startswith(RETRY_PREFIX) else "message"


def _redirected(m: record.Message, props: dict[str, str]) -> record.Message | None:
    """A parked or half record sent to its REAL_TOPIC / REAL_QID again; None when those are unusable."""
    topic = props.pop(PROPERTY_REAL_TOPIC, "")
    try:
        queue_id = int(props.pop(PROPERTY_REAL_QUEUE_ID, ""))
    except ValueError:
        return None
    if not topic or queue_id < 0:
        return None
    return dataclasses.replace(m, topic=topic, queue_id=queue_id, properties=props)


def _describe(off: int, m: record.Message, why: str) -> str:
    return f"offset {off} topic {m.topic} UNIQ_KEY {m.uniq_key or '-'} KEYS {m.keys or '-'}: {why}"


def plan(
    stranded: list[tuple[int, record.Message]],
    on_master: Iterable[record.Message],
    slave: str,
    accept_loss: frozenset[str] = frozenset(),
) -> Plan:
    """Decide, for every record the slave holds from the fork on, how it gets back on the master."""
    master_ids, master_tags = set(), set()
    for m in on_master:
        if m.uniq_key:  # without one, two equal sends are one message: only a repair tag proves it is there
            master_ids.add(identity(m))
        master_tags.add(content(m))
    deliverable = {identity(m) for _o, m in stranded if _kind(m) in ("message", "retry")}
    resolved = {op_half_offset(m) for _o, m in stranded if m.topic == OP_TOPIC} - {None}
    last_half = {identity(m): off for off, m in stranded if m.topic == HALF_TOPIC}
    p = Plan()
    for off, m in stranded:
        kind = _kind(m)
        if kind == "op":
            p.skipped["transaction op record (a half it resolved is not re-sent)"] += 1
            continue
        if kind == "no-entry":
            p.skipped["prepared or rolled-back transaction record (never deliverable)"] += 1
            continue
        if kind == "unsendable":
            if m.topic in accept_loss:
                p.skipped[f"{m.topic} (loss accepted by the operator)"] += 1
            else:
                p.blocked.append(_describe(off, m, "no client may send to this topic"))
            continue
        tag = f"{slave}@{off}"
        ident = identity(m)
        props = dict(m.properties) | {REPAIR_PROPERTY: tag}
        if ident in master_ids or (tag, record.body_crc(m.body), m.keys or "") in master_tags:
            p.already_on_master += 1
            continue
        group, out = PRODUCER_GROUP, None
        if kind in ("message", "retry"):
            props.pop(PROPERTY_TRANSACTION_PREPARED, None)
            out = dataclasses.replace(m, properties=props)
        elif kind == "delayed":
            if ident in deliverable:
                p.skipped["delayed message whose delivered copy is re-sent"] += 1
                continue
            out = _redirected(m, props)
            if out is not None and not out.properties.get(PROPERTY_DELAY):
                out = None
        elif kind == "half":
            if m.queue_offset in resolved or ident in deliverable:
                p.skipped["transaction half resolved past the fork (op record or committed copy)"] += 1
                continue
            if last_half[ident] != off:
                p.skipped["older copy of a transaction half (the last one is re-sent)"] += 1
                continue
            props[PROPERTY_TRANSACTION_PREPARED] = "true"
            group = props.get(PROPERTY_PRODUCER_GROUP) or PRODUCER_GROUP
            out = _redirected(m, props)
            if out is not None:
                flags = (m.sys_flag & ~record.TRANSACTION_MASK) | record.TRANSACTION_PREPARED
                out = dataclasses.replace(out, sys_flag=flags)
        if out is None:
            p.blocked.append(_describe(off, m, "its REAL_TOPIC / REAL_QID / DELAY are unusable"))
            continue
        topics = {out.topic}
        if out.topic.startswith(RETRY_PREFIX):
            topics.add(DLQ_PREFIX + out.topic[len(RETRY_PREFIX) :])
        p.resend.append(Resend(off, kind, out, group, frozenset(topics)))
    return p


def missing(resent: list[Resend], on_master: Iterable[record.Message]) -> list[Resend]:
    """The re-sent messages the master's log does not hold: tag, body CRC, KEYS and (real) topic."""
    held = {content(m) + (real_topic(m),) for m in on_master if REPAIR_PROPERTY in m.properties}
    return [r for r in resent if not any(content(r.message) + (t,) in held for t in r.topics)]
