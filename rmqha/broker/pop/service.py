"""The broker's POP service: pops from a group's queues, stores checkpoints and acks in the revive
topic, and puts unacked messages back on the group's retry topic when their invisible time has passed
(tests: tests/unit/processors/test_pop.py; the protocol side is rmqha/broker/processors/pop.py).

As 5.x's PopMessageProcessor, AckMessageProcessor, ChangeInvisibleTimeProcessor and PopReviveService,
with these differences, all on the side of keeping ack state:
* a checkpoint is stored (and, on a SYNC_MASTER, replicated) before the pop is answered and before the
  group's offset moves; 5.x buffers it in memory first (PopBufferMergeService);
* the checkpoint is an ordinary record, not a timer message: the revive table holds it until its revive
  time (this broker has no timer wheel);
* one revive queue (5.x: reviveQueueNum 8) and one retry queue per group and topic, as 5.x's
  retryQueueNum 1;
* a group new to a queue starts at the queue's min offset (5.x's ConsumeInitMode.MAX starts at the end
  unless the queue is still all in memory, which in practice is the start of a young queue).
A revived message is the original with reconsumeTimes + 1, RETRY_TOPIC = its topic and ORIGIN_MESSAGE_ID,
on %RETRY%<group>_<topic>; the DLQ decision (reconsumeTimes reaching the client's max attempts) is the
proxy's, as in 5.x (PopMessageResultFilterImpl, then CONSUMER_SEND_MSG_BACK to %DLQ%<group>).
"""

from __future__ import annotations

import logging

from twisted.internet import defer, task

from rmqha.broker.remoting.codes import PERM_READ, PERM_WRITE
from rmqha.broker.store import record
from rmqha.broker.store.message_store import GetStatus

from . import checkpoint as cp
from .revive import ReviveTable

log = logging.getLogger("rmqha.broker.pop")

REVIVE_QID = 0
REVIVE_INTERVAL_S = 1.0
SCAN_BATCH = 32


class PopError(Exception):
    """A pop, ack or change that could not be done; code is the remoting response code."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


class PopService:
    def __init__(self, config, store, put_message, offsets, topics, clock):
        self.config = config
        self.store = store
        self.put_message = put_message  # (msg, wait_store_ok) -> Deferred[PutResult]
        self.offsets = offsets
        self.topics = topics
        self.clock = clock
        self.revive_topic = cp.revive_topic(config.brokerClusterName)
        self.table = ReviveTable()
        self._loop: task.LoopingCall | None = None
        self._busy = False
        self.revived = 0  # messages put back on a retry topic since start

    # ---- life -------------------------------------------------------------------------------------

    def start(self) -> None:
        """On a master: the table from the revive queue since the saved offset, then the loop. The revive
        topic is created by the first record (_put_revive), so a broker no POP client uses keeps 4.9.8's
        topics (5.x makes it a system topic at start)."""
        start = max(0, self.offsets.query(cp.REVIVE_GROUP, self.revive_topic, REVIVE_QID))
        self.table = ReviveTable(max(start, self.store.min_queue_offset(self.revive_topic, REVIVE_QID)))
        self.scan()
        log.info("pop: %d checkpoints pending from revive offset %d", len(self.table), start)
        self._loop = task.LoopingCall(self.tick)
        self._loop.clock = self.clock
        self._loop.start(REVIVE_INTERVAL_S, now=False).addErrback(
            lambda f: log.error("the revive loop stopped: %s", f.getTraceback())
        )

    def stop(self) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()

    @property
    def running(self) -> bool:
        """Whether the revive loop runs: on a master (DLedger: the leader, role_handler.py)."""
        return self._loop is not None and self._loop.running

    def now_ms(self) -> int:
        return int(self.clock.seconds() * 1000)

    # ---- the revive queue ---------------------------------------------------------------------------

    def scan(self) -> int:
        """Feed every revive record stored since the last scan; returns how many."""
        n = 0
        while True:
            res = self.store.get_messages(self.revive_topic, REVIVE_QID, self.table.scanned, SCAN_BATCH)
            if res.status != GetStatus.FOUND:
                if res.next_begin_offset > self.table.scanned:  # a gap (an offset too small): move on
                    self.table.skip(res.next_begin_offset - 1)
                    continue
                return n
            for data in res.records:
                sr = record.scan(data, 0, check_crc=False)
                m = sr.message
                if m is None:
                    continue
                try:
                    rec = cp.decode(m.tags, m.body)
                except cp.BadRecord as e:
                    log.warning("revive record at %d: %s", m.queue_offset, e)
                    self.table.skip(m.queue_offset)
                    continue
                if isinstance(rec, cp.CheckPoint):
                    self.table.feed_ck(rec, m.queue_offset)
                    self._cover(rec)
                else:
                    self.table.feed_ack(rec, m.queue_offset)
                n += 1

    def _cover(self, ck: cp.CheckPoint) -> None:
        """The group's pop position past every message this checkpoint holds. consumerOffset.json is
        flushed every few seconds, so after a crash it can be older than the revive queue: without this
        the messages popped since the flush would be popped again, acked ones included. The revive
        offset comes from the same file, so the scan after a restart reads every checkpoint since it."""
        end = ck.start_offset + (max(ck.diffs) if ck.diffs else 0) + 1
        if self.offsets.query(ck.group, ck.topic, ck.queue_id) < end:
            self.offsets.commit(ck.group, ck.topic, ck.queue_id, end)

    def tick(self) -> defer.Deferred | None:
        """One revive round: new records, then every due checkpoint's unacked messages back, then the
        revive offset. One round at a time."""
        if self._busy or not self.config.is_master:
            return None
        self._busy = True
        self.scan()
        d = self._revive_due()

        def finish(_):
            self._busy = False
            safe = self.table.safe_offset()
            # only once there is something to revive: an unused broker keeps no REVIVE group offset
            if safe > 0 and safe != self.offsets.query(cp.REVIVE_GROUP, self.revive_topic, REVIVE_QID):
                self.offsets.commit(cp.REVIVE_GROUP, self.revive_topic, REVIVE_QID, safe)

        def failed(f):
            self._busy = False
            log.warning("revive round failed: %s", f.getErrorMessage())

        return d.addCallbacks(finish, failed)

    @defer.inlineCallbacks
    def _revive_due(self):
        for ck, unacked in self.table.due(self.now_ms()):
            ok = True
            for offset in unacked:
                put = yield self._revive_one(ck, offset)
                ok = ok and put
            if ok:
                self.table.done(ck)

    def _revive_one(self, ck: cp.CheckPoint, offset: int) -> defer.Deferred:
        """The message at (ck.topic, ck.queue_id, offset) again on the group's retry topic; True when it
        was stored (or is gone from the store: nothing to put back)."""
        res = self.store.get_messages(ck.topic, ck.queue_id, offset, 1)
        if res.status != GetStatus.FOUND:
            log.warning(
                "revive: %s queue %d offset %d is not in the store (%s)", ck.topic, ck.queue_id, offset, res.status
            )
            return defer.succeed(True)
        orig = record.scan(res.records[0], 0, check_crc=False).message
        if orig is None or orig.queue_offset != offset:
            return defer.succeed(True)
        real = orig.properties.get("RETRY_TOPIC") or ck.topic
        if ck.topic.startswith("%RETRY%"):
            retry = ck.topic
        else:
            retry = cp.retry_topic(ck.group, ck.topic)
        self.topics.create_in_send_back(retry, 1, PERM_READ | PERM_WRITE)
        props = dict(orig.properties)
        for k in ("DELAY", cp.PROPERTY_POP_CK, "WAIT"):
            props.pop(k, None)
        props["RETRY_TOPIC"] = real
        props.setdefault("ORIGIN_MESSAGE_ID", orig.properties.get("UNIQ_KEY") or orig.msg_id)
        props.setdefault(cp.PROPERTY_FIRST_POP_TIME, str(ck.pop_time))
        msg = record.Message(
            topic=retry,
            body=orig.body,
            queue_id=0,
            flag=orig.flag,
            sys_flag=orig.sys_flag & ~(record.FLAG_BORNHOST_V6 | record.FLAG_STOREHOST_V6 | record.TRANSACTION_MASK),
            born_timestamp=orig.born_timestamp,
            born_host=orig.born_host,
            reconsume_times=orig.reconsume_times + 1,
            properties=props,
        )

        def stored(r):
            if not r.status.stored:
                log.warning("revive of %s offset %d: %s %s", ck.topic, offset, r.status, r.remark)
                return False
            self.revived += 1
            return True

        return self.put_message(msg, False).addCallback(stored)

    # ---- pop ----------------------------------------------------------------------------------------

    def queues_of(self, topic: str, queue_id: int) -> list[int]:
        tc = self.topics.get(topic)
        if tc is None:
            return []
        if queue_id >= 0:
            return [queue_id] if queue_id < tc.read_queue_nums else []
        return list(range(tc.read_queue_nums))

    def _start_offset(self, group: str, topic: str, qid: int) -> int:
        off = self.offsets.query(group, topic, qid)
        lo = self.store.min_queue_offset(topic, qid)
        return lo if off < 0 else max(off, lo)

    def collect(self, group: str, topic: str, queue_id: int, max_nums: int, tag_codes: set[int] | None, rotate: int):
        """What a pop would take now: [(real topic, kind, queue id, start offset, next offset, records)],
        the retry topic first (its messages are due), then the topic's queues from a rotating start."""
        want = max_nums
        out = []
        retry = cp.retry_topic(group, topic)
        sources = [(retry, cp.RETRY_TOPIC, q) for q in self.queues_of(retry, -1)]
        qs = self.queues_of(topic, queue_id)
        if qs:
            k = rotate % len(qs)
            qs = qs[k:] + qs[:k]
        sources += [(topic, cp.NORMAL_TOPIC, q) for q in qs]
        for real, kind, q in sources:
            if want <= 0:
                break
            start = self._start_offset(group, real, q)
            res = self.store.get_messages(real, q, start, want, tag_codes)
            if res.status == GetStatus.FOUND:
                out.append((real, kind, q, start, res.next_begin_offset, res.records))
                want -= len(res.records)
            elif res.next_begin_offset > start and res.status in (
                GetStatus.NO_MATCHED_MESSAGE,
                GetStatus.OFFSET_TOO_SMALL,
            ):
                self.offsets.commit(group, real, q, res.next_begin_offset)  # filtered out: nobody wants them
        return out

    @defer.inlineCallbacks
    def pop(self, group: str, topic: str, queue_id: int, max_nums: int, invisible_ms: int, tag_codes, rotate: int = 0):
        """(pop time, [(extra info, record bytes)], restNum); a checkpoint per queue stored first."""
        now = self.now_ms()
        found = self.collect(group, topic, queue_id, max_nums, tag_codes, rotate)
        out = []
        for real, kind, q, start, nxt, records in found:
            msgs = [record.scan(r, 0, check_crc=False).message for r in records]
            msgs = [m for m in msgs if m is not None]
            if not msgs:
                continue
            ck = cp.CheckPoint(
                group, real, q, start, now, invisible_ms, [m.queue_offset - start for m in msgs], self.config.brokerName
            )
            put = yield self._put_revive(cp.CK_TAG, ck.encode(), now)
            self.table.feed_ck(ck, put.queue_offset, scan=False)
            self.offsets.commit(group, real, q, nxt)
            for m in msgs:
                m.properties[cp.PROPERTY_POP_CK] = cp.extra_info(ck, REVIVE_QID, kind, m.queue_offset)
                m.properties.setdefault(cp.PROPERTY_FIRST_POP_TIME, str(now))
                out.append(m)
        rest = sum(
            max(0, self.store.max_queue_offset(topic, q) - self._start_offset(group, topic, q))
            for q in self.queues_of(topic, -1)
        )
        return now, out, rest

    def _put_revive(self, tag: str, body: bytes, now: int) -> defer.Deferred:
        try:
            self.topics.create_in_send_back(self.revive_topic, 1, PERM_READ | PERM_WRITE)
        except ValueError as e:  # maxTopicCount reached: the pop or ack fails, saying why
            return defer.fail(PopError(1, f"cannot create {self.revive_topic}: {e}"))
        msg = record.Message(
            topic=self.revive_topic,
            body=body,
            queue_id=REVIVE_QID,
            born_timestamp=now,
            born_host=record.host_of(self.config.broker_addr),
            properties={"TAGS": tag},
        )

        def stored(r):
            if not r.status.stored:
                raise PopError(1, f"storing the {tag} record failed: {r.status} {r.remark}")
            return r

        return self.put_message(msg, True).addCallback(stored)

    # ---- ack and change -----------------------------------------------------------------------------

    @defer.inlineCallbacks
    def ack(self, group: str, topic: str, queue_id: int, extra: cp.ExtraInfo, offset: int):
        """An ack record, stored (and replicated on a SYNC_MASTER) before the answer."""
        a = cp.Ack(group, topic, queue_id, extra.start_offset, extra.pop_time, offset, extra.broker_name)
        put = yield self._put_revive(cp.ACK_TAG, a.encode(), self.now_ms())
        self.table.feed_ack(a, put.queue_offset, scan=False)

    @defer.inlineCallbacks
    def change_invisible(
        self, group: str, topic: str, queue_id: int, extra: cp.ExtraInfo, offset: int, invisible_ms: int
    ):
        """5.x's ChangeInvisibleTimeProcessor: a new checkpoint for this one message from now, then the ack
        of the old one. Returns the new checkpoint."""
        now = self.now_ms()
        ck = cp.CheckPoint(group, topic, queue_id, offset, now, invisible_ms, [0], extra.broker_name)
        put = yield self._put_revive(cp.CK_TAG, ck.encode(), now)
        self.table.feed_ck(ck, put.queue_offset, scan=False)
        yield self.ack(group, topic, queue_id, extra, offset)
        return ck
