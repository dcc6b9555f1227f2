"""The check walk over one half queue (RocketMQ 4.9.8 TransactionalMessageServiceImpl.check), written
as a generator that yields between half messages, so a long walk is sliced by a Cooperator instead of
holding the reactor.

For half queue q and its op queue (same id), starting at CID_RMQ_SYS_TRANS's offsets of both:

* op messages are read 32 at a time; each names a half queue offset. Offsets below where the half walk
  starts are already done; the others go into a "resolved" map (half offset -> op offset);
* the walk goes through the half queue from its offset. A half the map names is done. Otherwise:
  - TRANSACTION_CHECK_TIMES already at transactionCheckMax, or born more than the reference's file
    reserved time (72 h) ago: moved to TRANS_CHECK_MAX_TIME_TOPIC, done;
  - stored after this run began: the walk stops (a copy this run just made, or newer);
  - born less than transactionTimeOut ago (or less than its CHECK_IMMUNITY_TIME_IN_SECONDS, for which
    the reference's immunity rule applies): the walk stops, every later half is younger;
  - if more op messages remain, they are read first (the op for this half may be among them);
  - else it is stored again at the end of the half queue with TRANSACTION_CHECK_TIMES + 1, and the
    producer is asked about the new copy (CHECK_TRANSACTION_STATE): done;
* at the end the half offset moves past everything done, and the op offset past the op messages
  done without a gap.

Differences, each deliberate: "old enough" is age >= timeout (the reference's age > timeout with a
clock that does not move in tests would re-read op messages forever); a half whose copy cannot be
stored ends the walk (the reference retries it at once, forever); an op message that names a half
offset another op message already named, or that is not a "d" op, counts as done (in the reference
it holds the op offset back for good); a half whose transaction (UNIQ_KEY) an END_TRANSACTION already
resolved since this broker started gets an op message instead of another check (`Listener.resolved`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from twisted.internet import defer

from rmqha.broker.remoting.command import java_parse_int
from rmqha.broker.store import record
from rmqha.broker.store.message_store import PutResult, PutStatus

from . import messages
from .bridge import when_put

log = logging.getLogger("rmqha.broker.transaction")

OP_BATCH = 32  # op messages read at a time (fillOpRemoveMap)
MAX_PROCESS_TIME_MS = 60_000  # one queue's walk per run (MAX_PROCESS_TIME_LIMIT)
FILE_RESERVED_TIME_MS = 72 * 3600 * 1000  # needSkip: the reference's default fileReservedTime (72 h)
_LONG = (-(1 << 63), (1 << 63) - 1)


class Listener:
    """What the walk asks of the broker around it (AbstractTransactionalMessageCheckListener)."""

    def resolved(self, half: record.Message) -> bool:  # pragma: no cover - interface
        return False

    def discard(self, half: record.Message) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def check(self, half: record.Message, copy: PutResult) -> None:  # pragma: no cover - interface
        raise NotImplementedError


@dataclass
class Ops:
    """The op messages read so far: half offset -> op offset, op offsets done, and the last read."""

    resolved: dict[int, int] = field(default_factory=dict)
    done: list[int] = field(default_factory=list)
    found: bool = False  # the last read returned op messages (so there may be more)
    next_offset: int = 0
    last_born: int = 0


def read_ops(bridge, queue_id: int, offset: int, min_half_offset: int, ops: Ops) -> None:
    """fillOpRemoveMap: up to OP_BATCH op messages from `offset` into `ops`."""
    status, next_offset, found = bridge.get(messages.OP_TOPIC, queue_id, offset, OP_BATCH)
    ops.next_offset = next_offset
    ops.found = bool(found)
    if status in ("OFFSET_ILLEGAL", "NO_MATCHED_MSG"):
        log.warning("op queue %d: offset %d is illegal (%s); moving to %d", queue_id, offset, status, next_offset)
        bridge.update_consume_offset(messages.OP_TOPIC, queue_id, next_offset)
        return
    if not found:
        return
    ops.last_born = found[-1].born_timestamp
    for op in found:
        half_offset = messages.op_half_offset(op)
        if half_offset is None:
            log.error(
                'op queue %d offset %d is not a "d" op message with a number; skipping it', queue_id, op.queue_offset
            )
            ops.done.append(op.queue_offset)
        elif half_offset < min_half_offset:
            ops.done.append(op.queue_offset)
        else:
            earlier = ops.resolved.get(half_offset)
            if earlier is not None:  # a second op for the same half
                ops.done.append(earlier)
            ops.resolved[half_offset] = op.queue_offset


def next_op_offset(done: list[int], old: int) -> int:
    """calculateOpOffset: past the op offsets done, from `old`, without a gap."""
    new = old
    for offset in sorted(set(done)):
        if offset == new:
            new += 1
        elif offset > new:
            break
    return new


def need_discard(half: record.Message, check_max: int) -> bool:
    """needDiscard: True when the half was checked check_max times; otherwise counts this check in its
    TRANSACTION_CHECK_TIMES property (1 the first time)."""
    times = messages.check_times(half)
    if times is None:
        times = 1
    elif times >= check_max:
        return True
    else:
        times += 1
    half.properties[messages.PROPERTY_CHECK_TIMES] = str(times)
    return False


def immunity_ms(text: str, timeout_ms: int) -> int:
    """getImmunityTime: CHECK_IMMUNITY_TIME_IN_SECONDS in ms; -1 (or not a number) means the timeout."""
    try:
        value = java_parse_int(text, _LONG)
    except ValueError:
        value = -1
    return timeout_ms if value == -1 else value * 1000


def check_queue(
    bridge, queue_id: int, now_ms, timeout_ms: int, check_max: int, listener: Listener, stopping=lambda: False
):
    """Walk half queue `queue_id` once; a generator (yields None between half messages, and a put's
    Deferred in DLedger mode, which the Cooperator waits for)."""
    half_topic, op_topic = messages.HALF_TOPIC, messages.OP_TOPIC
    start = now_ms()
    half_offset = bridge.consume_offset(half_topic, queue_id)
    op_offset = bridge.consume_offset(op_topic, queue_id)
    if half_offset < 0 or op_offset < 0:
        log.error("half queue %d: illegal offsets half=%d op=%d; skipping it", queue_id, half_offset, op_offset)
        return
    ops = Ops()
    read_ops(bridge, queue_id, op_offset, half_offset, ops)
    misses = 0
    i = new_offset = half_offset
    while not stopping():
        if now_ms() - start > MAX_PROCESS_TIME_MS:
            log.info(
                "half queue %d: the check ran %d ms; the rest waits for the next run", queue_id, MAX_PROCESS_TIME_MS
            )
            break
        if i in ops.resolved:
            ops.done.append(ops.resolved.pop(i))
            i = new_offset = i + 1
            continue
        status, next_offset, found = bridge.get(half_topic, queue_id, i, 1)
        if not found:
            misses += 1
            if misses > 1 or status == "NO_NEW_MSG":
                break
            log.info("half queue %d: nothing at offset %d (%s); going on at %d", queue_id, i, status, next_offset)
            i = new_offset = next_offset
            continue
        step = _check_half(
            bridge, queue_id, i, found[0], now_ms(), start, timeout_ms, check_max, listener, ops, half_offset
        )
        if isinstance(step, defer.Deferred):  # DLedger mode: a put answered once a quorum has it
            box: list = []
            step.addBoth(box.append)
            yield step  # the Cooperator resumes the walk when it fires
            step = box[0] if isinstance(box[0], str) else _STOP
        if step == _STOP:
            break
        if step == _AGAIN:
            continue
        i = new_offset = i + 1
        yield
    if new_offset != half_offset:
        bridge.update_consume_offset(half_topic, queue_id, new_offset)
    new_op_offset = next_op_offset(ops.done, op_offset)
    if new_op_offset != op_offset:
        bridge.update_consume_offset(op_topic, queue_id, new_op_offset)


# What the walk does after one half message: go on to the next, stop this run, or look at the same
# offset again (an op read meanwhile resolved it).
_NEXT, _STOP, _AGAIN = "next", "stop", "again"


def _check_half(
    bridge,
    queue_id: int,
    i: int,
    half: record.Message,
    now: int,
    start: int,
    timeout_ms: int,
    check_max: int,
    listener: Listener,
    ops: Ops,
    half_offset: int,
) -> str | defer.Deferred:
    """One half message at offset i: resolved (its op written), discarded, immune, not due yet, or
    stored again and checked with the producer. In DLedger mode a put is answered once a quorum has it:
    then a Deferred of the step."""
    if listener.resolved(half):
        bridge.put_op(half, now)
        return _NEXT
    if need_discard(half, check_max) or now - half.born_timestamp > FILE_RESERVED_TIME_MS:
        listener.discard(half)
        return _NEXT
    if half.store_timestamp >= start:
        return _STOP  # stored during this run (a copy made for a check) or later
    age = now - half.born_timestamp
    immunity_text = half.properties.get(messages.PROPERTY_CHECK_IMMUNITY_TIME)
    immunity = timeout_ms
    if immunity_text is not None:
        immunity = immunity_ms(immunity_text, timeout_ms)
        immune = _immune(bridge, half, ops) if age < immunity else False
        if isinstance(immune, defer.Deferred):  # its copy was put (DLedger): stored or not, this run ends here
            return immune.addCallback(lambda ok: _NEXT if ok else _STOP)
        if immune:
            return _NEXT
    elif 0 <= age < immunity:
        return _STOP  # every later half is younger
    # Read more op messages while there are any: the op for this half may be among them.
    while ops.found and i not in ops.resolved and not ops.last_born - start > timeout_ms:
        read_ops(bridge, queue_id, ops.next_offset, half_offset, ops)
    if i in ops.resolved:
        return _AGAIN
    if not (age >= immunity or age <= -1 or (ops.found and ops.last_born - start > timeout_ms)):
        return _STOP

    def copied(copy: PutResult) -> str:
        if not PutStatus(copy.status).stored:
            log.error(
                "half queue %d offset %d: its copy for a check was not stored (%s %s); the walk stops "
                "here until the next run",
                queue_id,
                i,
                copy.status,
                copy.remark,
            )
            return _STOP
        listener.check(half, copy)
        return _NEXT

    return when_put(bridge.put(messages.renewed(half)), copied)


def _immune(bridge, half: record.Message, ops: Ops) -> bool | defer.Deferred:
    """checkPrepareQueueOffset: True when a half inside its immunity time is done for this run (its
    first copy was resolved, or it was stored again with TRAN_PREPARED_QUEUE_OFFSET)."""
    text = half.properties.get(messages.PROPERTY_PREPARED_QUEUE_OFFSET)
    if text is not None:
        try:
            first = java_parse_int(text, _LONG)
        except ValueError:
            first = -1
        if first == -1:
            return False
        if first in ops.resolved:
            ops.done.append(ops.resolved.pop(first))
            return True
    return when_put(bridge.put(messages.immunity_renewed(half)), lambda res: PutStatus(res.status).stored)
