"""Commit, rollback and the periodic check-back of transactional messages (RocketMQ 4.9.8's
EndTransactionProcessor body, TransactionalMessageCheckService, the check listeners and
Broker2Client.checkProducerTransactionState).

* `end_transaction` finds the half an END_TRANSACTION names (`Bridge.half_at`), checks it as the
  reference does (producer group, queue offset, commit-log offset: the reference's remarks), stores the
  committed copy for a COMMIT and then the op message. Records are stored without waiting for a flush or
  a slave, as the reference does (the client sends END_TRANSACTION oneway and never sees the answer).
* On a master, `start` runs the check (`check.check_queue` over every queue of the half topic) every
  transactionCheckInterval ms as a supervised PeriodicService; a Cooperator slices it so a long backlog
  never holds the reactor. A check-back is CHECK_TRANSACTION_STATE, oneway, to one live connection of
  the half's PGROUP among those HEART_BEAT registered (round robin, as ProducerManager.getAvailableChannel).

Ours: one transaction, resolved once. The reference stores a committed copy for every COMMIT it gets,
and checks a half's copy again even when the producer answered about an earlier copy, so a late COMMIT
after a check-back, or a COMMIT answer to a check after the producer's own COMMIT, puts the message into
its topic twice. Here the first COMMIT or ROLLBACK of a half send (its UNIQ_KEY, born time and host and
producer group, which every copy of it keeps) is remembered (the last RESOLVED_MAX of them, in memory,
so not across a restart): a later END_TRANSACTION for it, and the check meeting a copy of it, only
store the op message that marks that copy done.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
from collections import OrderedDict

from twisted.internet import task

from rmqha.broker.support import validation
from rmqha.broker.support.log_limit import LogLimiter
from rmqha.broker.remoting.codes import PERM_READ, PERM_WRITE, ResponseCode
from rmqha.broker.store import record
from rmqha.broker.store.message_store import PutResult, PutStatus
from rmqha.broker.support.supervision import PeriodicService

from . import check, messages
from .bridge import Bridge, when_put

log = logging.getLogger("rmqha.broker.transaction")
_limiter = LogLimiter(log)

RESOLVED_MAX = 100_000  # transactions remembered as resolved (a 16-byte digest each, ~150 bytes with the table)
COMMIT, ROLLBACK, NOT_TYPE = record.TRANSACTION_COMMIT, record.TRANSACTION_ROLLBACK, record.TRANSACTION_NOT_TYPE
KIND_NAMES = {COMMIT: "commit", ROLLBACK: "rollback", NOT_TYPE: "unknown"}
PAST = {COMMIT: "committed", ROLLBACK: "rolled back"}


def transaction_key(half: record.Message) -> bytes:
    """What every copy of one half send shares (and two sends of one reused client message do not): its
    UNIQ_KEY, producer group, born time and born host, as a 16-byte digest (a UNIQ_KEY may be 32 KiB)."""
    p = half.properties
    text = "\x00".join(
        (
            p.get(messages.PROPERTY_UNIQ_KEY, ""),
            p.get(messages.PROPERTY_PRODUCER_GROUP, ""),
            str(half.born_timestamp),
            half.born_host[0],
            str(half.born_host[1]),
        )
    )
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class Resolutions:
    """The last `limit` resolved transactions: key -> COMMIT or ROLLBACK (the first answer)."""

    def __init__(self, limit: int = RESOLVED_MAX):
        self.limit = limit
        self._kinds: OrderedDict = OrderedDict()

    def get(self, key) -> int | None:
        return self._kinds.get(key)

    def add(self, key, kind: int) -> None:
        self._kinds[key] = kind
        self._kinds.move_to_end(key)
        while len(self._kinds) > self.limit:
            self._kinds.popitem(last=False)

    def __len__(self) -> int:
        return len(self._kinds)


def final_result(res: PutResult, max_message_size: int) -> tuple[ResponseCode, str | None]:
    """sendFinalMessage: a stored commit is SUCCESS whatever the flush or slave said; the rest as the
    reference words them."""
    status = PutStatus(res.status)
    if status.stored:
        return ResponseCode.SUCCESS, None
    if status in (PutStatus.MESSAGE_ILLEGAL, PutStatus.PROPERTIES_SIZE_EXCEEDED):
        return ResponseCode.MESSAGE_ILLEGAL, (
            "The message is illegal, maybe msg body or properties length not matched. msg body length limit "
            f"{max_message_size}B, msg properties length limit 32KB."
        )
    if status == PutStatus.SERVICE_NOT_AVAILABLE:
        return ResponseCode.SERVICE_NOT_AVAILABLE, "Service not available now."
    return ResponseCode.SYSTEM_ERROR, f"{status.value}: {res.remark}" if res.remark else status.value


class TransactionService(check.Listener):
    def __init__(self, config, store, put_message, offsets, topics, clients, clock, metrics=None):
        self.config = config
        self.bridge = Bridge(store, put_message, offsets, config.maxMessageSize)
        self.topics = topics
        self.clients = clients
        self.clock = clock
        self.metrics = metrics
        self.resolutions = Resolutions()
        self._loop: PeriodicService | None = None
        self._stopping = False
        self._round_robin = itertools.count()
        self._cooperator = task.Cooperator(scheduler=lambda work: clock.callLater(0, work))
        self.ends = self.checks = self.discards = None
        if metrics is not None:
            self.ends = metrics.counter(
                "end_transaction_total", "END_TRANSACTION requests on this master by action and response code"
            )
            self.checks = metrics.counter(
                "transaction_checks_total",
                "half messages checked: CHECK_TRANSACTION_STATE sent, or no producer "
                "connection of the group to send it to",
            )
            self.discards = metrics.counter(
                "transaction_discarded_total",
                "half messages moved to TRANS_CHECK_MAX_TIME_TOPIC after "
                "transactionCheckMax checks (or older than 72 h)",
            )
            metrics.gauge("transaction_half_backlog", "half messages the check has not walked past yet", self.backlog)

    def now_ms(self) -> int:
        """The store's clock: the one its store timestamps come from (the reactor's)."""
        return self.bridge.store.now_ms()

    def backlog(self) -> int:
        b = self.bridge
        return max(0, b.store.max_queue_offset(messages.HALF_TOPIC, 0) - b.consume_offset(messages.HALF_TOPIC, 0))

    # -- END_TRANSACTION (a master) --------------------------------------------------------------------
    def end_transaction(self, kind: int, group: str, tran_state_offset: int, commit_log_offset: int):
        """COMMIT or ROLLBACK the half at commit_log_offset: (response code, remark), or in DLedger mode a
        Deferred of it for a COMMIT (answered once a quorum has the committed message)."""

        def counted(answer):
            if self.ends is not None:
                self.ends.inc(action=KIND_NAMES.get(kind, str(kind)), code=int(answer[0]))
            return answer

        return when_put(self._end(kind, group, tran_state_offset, commit_log_offset), counted)

    def _end(self, kind, group, tran_state_offset, commit_log_offset):
        half = self.bridge.half_at(commit_log_offset)
        if half is None:
            return ResponseCode.SYSTEM_ERROR, "Find prepared transaction message failed"
        if half.properties.get(messages.PROPERTY_PRODUCER_GROUP) != group:
            return ResponseCode.SYSTEM_ERROR, "The producer group wrong"
        if half.queue_offset != tran_state_offset:
            return ResponseCode.SYSTEM_ERROR, "The transaction state table offset wrong"
        if half.physical_offset != commit_log_offset:
            return ResponseCode.SYSTEM_ERROR, "The commit log offset wrong"
        key = transaction_key(half)
        earlier = self.resolutions.get(key)
        if earlier is not None:
            level = logging.INFO if earlier == kind else logging.WARNING
            log.log(
                level,
                "transaction %s of group %s was already %s; the %s of its half at queue offset %d "
                "only marks that half done",
                validation.shown(half.properties.get(messages.PROPERTY_UNIQ_KEY, "")),
                validation.shown(group),
                PAST[earlier],
                KIND_NAMES[kind],
                half.queue_offset,
            )
            self.bridge.put_op(half, self.now_ms())
            return ResponseCode.SUCCESS, None
        if kind == COMMIT:
            try:
                final = messages.committed(half)
            except messages.HalfError as e:
                return ResponseCode.SYSTEM_ERROR, str(e)

            def stored(res: PutResult):
                code, remark = final_result(res, self.config.maxMessageSize)
                return (code, remark) if code != ResponseCode.SUCCESS else self._resolved(key, kind, half)

            return when_put(self.bridge.put(final), stored)
        return self._resolved(key, kind, half)

    def _resolved(self, key: bytes, kind: int, half: record.Message) -> tuple[ResponseCode, str | None]:
        self.resolutions.add(key, kind)
        self.bridge.put_op(half, self.now_ms())  # deletePrepareMessage: its failure is logged, not answered
        return ResponseCode.SUCCESS, None

    # -- the periodic check (a master) ---------------------------------------------------------------
    def start(self) -> None:
        c = self.config
        self._stopping = False
        self._loop = PeriodicService(
            "transaction_check",
            self.check_all,
            c.transactionCheckInterval / 1000.0,
            self.clock,
            self.metrics,
            logger=log,
        )
        self._loop.start()

    def stop(self) -> None:
        self._stopping = True  # a walk in flight ends at its next step
        if self._loop is not None:
            self._loop.stop()

    def check_all(self):
        """One run over every half queue (TransactionalMessageServiceImpl.check); a Deferred."""
        # fetchMessageQueues -> selectTopicConfig: the half topic, made with one queue the first time.
        tc = self.topics.create_in_send_back(messages.HALF_TOPIC, 1, PERM_READ | PERM_WRITE)
        c = self.config

        def walk():
            for queue_id in range(tc.read_queue_nums):
                yield from check.check_queue(
                    self.bridge,
                    queue_id,
                    self.now_ms,
                    c.transactionTimeOut,
                    c.transactionCheckMax,
                    self,
                    lambda: self._stopping,
                )

        return self._cooperator.coiterate(walk())

    # -- check.Listener ------------------------------------------------------------------------------
    def resolved(self, half: record.Message) -> bool:
        return self.resolutions.get(transaction_key(half)) is not None

    def discard(self, half: record.Message) -> None:
        """resolveDiscardMsg: into TRANS_CHECK_MAX_TIME_TOPIC (made with one queue, READ|WRITE)."""
        self.topics.create_in_send_back(
            messages.CHECK_MAX_TIME_TOPIC, messages.CHECK_MAX_TIME_QUEUE_NUMS, PERM_READ | PERM_WRITE
        )
        if self.discards is not None:
            self.discards.inc()

        def logged(res) -> None:
            log.error(
                "half message at queue offset %d (UNIQ_KEY %s, real topic %s) was checked %s times: moved to %s (%s)",
                half.queue_offset,
                validation.shown(half.properties.get(messages.PROPERTY_UNIQ_KEY, "")),
                validation.shown(half.properties.get(messages.PROPERTY_REAL_TOPIC, "")),
                half.properties.get(messages.PROPERTY_CHECK_TIMES),
                messages.CHECK_MAX_TIME_TOPIC,
                getattr(res, "status", res),
            )

        when_put(self.bridge.put(messages.discarded(half)), logged, logged)

    def check(self, half: record.Message, copy: PutResult) -> None:
        """sendCheckMessage: CHECK_TRANSACTION_STATE about the copy just stored, to one producer of PGROUP."""
        group = half.properties.get(messages.PROPERTY_PRODUCER_GROUP, "")
        ctx = self.producer_connection(group)
        if ctx is None:
            self._count_check("no_producer")
            _limiter.log(
                logging.WARNING,
                ("no producer", group),
                "cannot check a transaction: no producer of group %s is connected (half queue offset %d)",
                validation.shown(group),
                copy.queue_offset,
            )
            return
        try:
            request = messages.check_request(half, copy.queue_offset, copy.wrote_offset, copy.msg_id)
            ctx.send_oneway(request)
        except Exception as e:  # a bad REAL_QID, or a connection closing under us: this check is lost
            self._count_check("failed")
            _limiter.log(
                logging.WARNING,
                ("check failed", group),
                "check of group %s to %s failed: %s",
                validation.shown(group),
                ctx.peer_address,
                e,
            )
            return
        self._count_check("sent")

    def _count_check(self, result: str) -> None:
        if self.checks is not None:
            self.checks.inc(result=result)

    def producer_connection(self, group: str):
        """ProducerManager.getAvailableChannel: the group's live connections in turn, or None."""
        members = [ctx for ctx in self.clients.producer_groups.get(group, {}) if not ctx.closed]
        if not members:
            return None
        return members[next(self._round_robin) % len(members)]
