"""What the transaction code reads from and writes to the store (RocketMQ 4.9.8's
TransactionalMessageBridge): half and op messages by queue offset, a half by commit-log offset, the
check's progress as consumer offsets of CID_RMQ_SYS_TRANS, and puts that never wait for a flush or a
slave (the reference sets waitStoreMsgOK=false on every record it writes here).
"""

from __future__ import annotations

import logging

from twisted.internet import defer
from twisted.python.failure import Failure

from rmqha.broker.store import record
from rmqha.broker.store.message_store import GetStatus, PutResult, PutStatus

from . import messages

log = logging.getLogger("rmqha.broker.transaction")

# The largest record a commit-log offset from a peer may make us read: a body of maxMessageSize plus
# the fixed part, a 127-byte topic, 32767 bytes of properties and two IPv6 hosts.
RECORD_OVERHEAD = record.FIXED_SIZE_IPV4 + record.MAX_TOPIC_BYTES + record.MAX_PROPERTIES_BYTES + 2 * record.IPV6_EXTRA


class Bridge:
    def __init__(self, store, put_message, offsets, max_message_size: int):
        self.store = store
        self.put_message = put_message  # controller.put_message(msg, wait_store_ok) -> Deferred[PutResult]
        self.offsets = offsets  # ConsumerOffsetManager
        self.max_record_size = max_message_size + RECORD_OVERHEAD

    # -- progress -----------------------------------------------------------------------------------
    def consume_offset(self, topic: str, queue_id: int) -> int:
        """fetchConsumeOffset: CID_RMQ_SYS_TRANS's offset, or the queue's min offset when there is none."""
        offset = self.offsets.query(messages.CHECK_GROUP, topic, queue_id)
        return offset if offset != -1 else self.store.min_queue_offset(topic, queue_id)

    def update_consume_offset(self, topic: str, queue_id: int, offset: int) -> None:
        self.offsets.commit(messages.CHECK_GROUP, topic, queue_id, offset)

    # -- reading by queue offset ----------------------------------------------------------------------
    def get(self, topic: str, queue_id: int, offset: int, max_msgs: int) -> tuple[str, int, list[record.Message]]:
        """(status, next begin offset, messages) from a queue, as getHalfMessage/getOpMessage read it;
        status is "FOUND", "NO_NEW_MSG" (nothing more yet) or "OFFSET_ILLEGAL"."""
        res = self.store.get_messages(topic, queue_id, offset, max_msgs)
        if res.status == GetStatus.FOUND:
            found = []
            for raw in res.records:
                r = record.scan(raw, 0, check_crc=False)
                if r.kind == record.Scan.MESSAGE:
                    found.append(r.message)
            return "FOUND", res.next_begin_offset, found
        # A queue that does not exist yet is empty (the reference's getMessage makes it on first use).
        if res.status in (
            GetStatus.NO_MESSAGE_IN_QUEUE,
            GetStatus.OFFSET_OVERFLOW_ONE,
            GetStatus.NO_MATCHED_LOGIC_QUEUE,
        ):
            return "NO_NEW_MSG", res.next_begin_offset, []
        if res.status == GetStatus.NO_MATCHED_MESSAGE:
            return "NO_MATCHED_MSG", res.next_begin_offset, []
        return "OFFSET_ILLEGAL", res.next_begin_offset, []

    # -- reading by commit-log offset -------------------------------------------------------------------
    def half_at(self, commit_log_offset: int) -> record.Message | None:
        """lookMessageByOffset, for an offset a peer gave: the half message that starts exactly there, or None.

        The reference decodes whatever bytes sit at the offset. Here the offset must be inside the log,
        the record there must be a message of at most maxMessageSize (so a forged TOTALSIZE cannot make
        us read a gigabyte), in RMQ_SYS_TRANS_HALF_TOPIC, and the half queue's unit at the record's
        QUEUEOFFSET must point back at this offset: only the consume queue knows where records really
        start, so a record forged inside some message's body is not taken for a half.
        """
        s = self.store
        if not s.min_offset <= commit_log_offset < s.max_offset:
            return None
        s.dispatch_pending()  # a half put on this reactor turn has its unit from now on
        size = record.message_size(s.commitlog.read(commit_log_offset, record.HEAD_SIZE))
        if not 0 < size <= self.max_record_size:
            return None
        msg = s.commitlog.message_at(commit_log_offset, size)
        if msg is None or msg.topic != messages.HALF_TOPIC:
            return None
        cq = s.queues.get((messages.HALF_TOPIC, msg.queue_id))
        unit = cq.get(msg.queue_offset) if cq is not None and msg.queue_offset >= cq.min_index else None
        if unit is None or unit[0] != commit_log_offset or unit[1] != size:
            return None
        msg.physical_offset = commit_log_offset
        return msg

    # -- writing -------------------------------------------------------------------------------------
    def put(self, msg: record.Message) -> PutResult | defer.Deferred:
        """Store without waiting for a flush or a slave: the result at once, or in DLedger mode a Deferred
        firing with it once a quorum has the entry (4.9's DLedgerCommitLog.putMessage blocks that long)."""
        out: list = []
        d = self.put_message(msg, wait_store_ok=False)
        d.addBoth(out.append)  # the answer (a Failure too) is kept here, and consumed
        if not out:
            later: defer.Deferred = defer.Deferred()
            d.addCallback(lambda _: later.errback(out[0]) if isinstance(out[0], Failure) else later.callback(out[0]))
            return later
        if isinstance(out[0], Failure):
            out[0].raiseException()
        return out[0]

    def put_op(self, half: record.Message, now_ms: int) -> None:
        """putOpMessage(REMOVETAG): the op message resolving `half`; a failure is logged (the check asks
        about that half again)."""

        def stored(res: PutResult) -> None:
            if not PutStatus(res.status).stored:
                log.error(
                    "op message for half queue offset %d not stored: %s %s", half.queue_offset, res.status, res.remark
                )

        def failed(f: Failure) -> None:
            log.error("op message for half queue offset %d not stored: %s", half.queue_offset, f.getErrorMessage())

        when_put(self.put(messages.op_message(half, now_ms, self.store.store_host)), stored, failed)


def when_put(res, then, failed=None):
    """then(PutResult) now, or once a Deferred put is answered (DLedger mode): then's value, or a Deferred
    of it. failed(Failure), when given, handles a put that raised."""
    if isinstance(res, defer.Deferred):
        res.addCallback(then)
        return res.addErrback(failed) if failed is not None else res
    return then(res)
