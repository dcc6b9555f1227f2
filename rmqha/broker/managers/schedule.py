"""Delay levels: RocketMQ 4.9's ScheduleMessageService, on the reactor.

How a delayed message travels (all of it through the commit log, so a slave holds the same bytes):
1. A message with property DELAY = level > 0 (not a prepared or rolled-back transaction) is stored by
   the store (MessageStore.put_message) in SCHEDULE_TOPIC_XXXX, queue level - 1, with REAL_TOPIC and
   REAL_QID holding where it was going; a level above the highest is the highest. Its consume-queue
   unit's tagsCode is its deliver time: store timestamp + the level's delay (`deliver_time`), on the
   master as on the slave, which builds its units from the replicated record.
2. On the master only, this service keeps, per level, the next queue offset to deliver
   (config/delayOffset.json, `{"offsetTable":{"<level>":offset}}`, written every
   flushDelayOffsetInterval ms and on stop). When the unit at that offset is due it reads the record
   and stores it again in REAL_TOPIC/REAL_QID without DELAY (the reference's messageTimeup: body, flag,
   properties, sysflag, born time and host, reconsume times kept), then moves the offset on.
3. A slave copies the master's offsets (GET_ALL_DELAY_OFFSET, in SlaveSynchronize), so if it takes
   over reads it knows what was delivered.

One timer per level for the head unit's deliver time, woken early when a unit is added to the level's
queue, instead of the reference's 100 ms poll of every level. A deliver time further away than the
level's delay (the clock went back) is taken as now, as the reference does.
"""

from __future__ import annotations

import logging
import os

from rmqha.broker.support.files import atomic_write, read_json_file
from rmqha.broker.remoting import json_body
from rmqha.broker.store import record
from rmqha.broker.store.delay import PROPERTY_REAL_TOPIC, SCHEDULE_TOPIC, time_up  # noqa: F401 (re-exported)
from rmqha.broker.store.message_store import PutStatus
from rmqha.broker.support.supervision import PeriodicService

log = logging.getLogger("rmqha.broker.schedule")

FIRST_DELAY_S = 1.0  # the reference's FIRST_DELAY_TIME
RETRY_S = 0.1  # after a failed delivery (the reference's DELAY_FOR_A_WHILE)
SLICE = 512  # deliveries per reactor turn per level; the rest follow at once
FILLER_SIZE = 0x7FFFFFFF  # a consume-queue filler unit's size


class ScheduleMessageService:
    def __init__(
        self,
        store,
        put_message,
        clock,
        root_dir: str,
        levels_ms: tuple[int, ...],
        flush_interval_s: float = 10.0,
        metrics=None,
    ):
        self.store = store
        self.put_message = put_message  # controller.put_message(msg, wait_store_ok) -> Deferred[PutResult]
        self.clock = clock
        self.levels_ms = levels_ms
        self.path = os.path.join(root_dir, "config", "delayOffset.json")
        self.offsets: dict[int, int] = {}
        self.delivered = 0
        self.dropped = 0  # due records that cannot be delivered (no such record, no real topic)
        self._timers: dict[int, object] = {}
        self._busy: set[int] = set()  # levels with a delivery in flight
        self._dirty = False
        self._started = False
        self._flush_interval_s = flush_interval_s
        self._metrics = metrics
        self._persist: PeriodicService | None = None  # made by start(): only a master delivers and flushes
        if metrics is not None:
            metrics.gauge(
                "schedule_delivered_total", "delayed messages delivered to their real topic", lambda: self.delivered
            )
            metrics.gauge(
                "schedule_backlog",
                "delayed messages not yet delivered, by level",
                lambda: [({"level": lv}, self.backlog(lv)) for lv in range(1, len(self.levels_ms) + 1)],
            )

    # -- lifecycle ---------------------------------------------------------------------------------
    def load(self) -> None:
        obj = read_json_file(self.path)
        if obj is not None:
            self.offsets = self.parse_table(obj.get("offsetTable") or {})
        # correctDelayOffset: an offset outside its queue is brought back inside it.
        for level, offset in list(self.offsets.items()):
            cq = self.store.queues.get((SCHEDULE_TOPIC, level - 1))
            if cq is not None and not cq.min_index <= offset <= cq.max_index:
                fixed = min(max(offset, cq.min_index), cq.max_index)
                log.error(
                    "delay offset of level %d was %d, outside its queue [%d, %d]: using %d",
                    level,
                    offset,
                    cq.min_index,
                    cq.max_index,
                    fixed,
                )
                self.offsets[level] = fixed

    def start(self) -> None:
        self.load()
        self._started = True
        self.store.dispatch_listeners.append(self._on_dispatch)
        for level in range(1, len(self.levels_ms) + 1):
            self._arm(level, FIRST_DELAY_S)
        if self._persist is None:
            self._persist = PeriodicService(
                "delay_offset_flush",
                self.persist_if_dirty,
                self._flush_interval_s,
                self.clock,
                self._metrics,
                logger=log,
            )
        self._persist.start()

    def stop(self) -> None:
        self._started = False
        if self._on_dispatch in self.store.dispatch_listeners:
            self.store.dispatch_listeners.remove(self._on_dispatch)
        for timer in self._timers.values():
            if timer.active():
                timer.cancel()
        self._timers.clear()
        if self._persist is not None:
            self._persist.stop()
        self.persist_if_dirty()

    @staticmethod
    def parse_table(raw) -> dict[int, int]:
        """{level: offset} from a delayOffset.json table (keys quoted or fastjson's bare ints)."""
        out = {}
        for k, v in raw.items() if isinstance(raw, dict) else ():
            try:
                level, offset = int(k), int(v)
            except (TypeError, ValueError):
                log.warning("ignoring delay offset entry %r: %r", k, v)
                continue
            if level > 0 and offset >= 0:
                out[level] = offset
        return out

    def encode(self) -> bytes:
        """delayOffset.json's content, and GET_ALL_DELAY_OFFSET's body."""
        return json_body.dumps({"offsetTable": {str(k): v for k, v in sorted(self.offsets.items())}})

    def persist_if_dirty(self) -> None:
        if self._dirty:
            atomic_write(self.path, self.encode())
            self._dirty = False

    def replace_all(self, table: dict[int, int]) -> None:
        """Slave: the master's offsets (SlaveSynchronize)."""
        if table != self.offsets:
            self.offsets = dict(table)
            self._dirty = True
            self.persist_if_dirty()

    def backlog(self, level: int) -> int:
        cq = self.store.queues.get((SCHEDULE_TOPIC, level - 1))
        return max(0, cq.max_index - self.offsets.get(level, 0)) if cq is not None else 0

    # -- delivery ----------------------------------------------------------------------------------
    def _on_dispatch(self, topic: str, queue_id: int) -> None:
        if topic == SCHEDULE_TOPIC and 0 <= queue_id < len(self.levels_ms):
            level = queue_id + 1
            timer = self._timers.get(level)
            # A new unit of a level that was idle: look at once (its deliver time sets the timer).
            if timer is None or not timer.active():
                self._arm(level, 0)

    def _arm(self, level: int, delay_s: float) -> None:
        if not self._started:
            return
        timer = self._timers.get(level)
        if timer is not None and timer.active():
            if timer.getTime() <= self.clock.seconds() + delay_s:
                return
            timer.cancel()
        self._timers[level] = self.clock.callLater(max(0.0, delay_s), self._deliver, level)

    def _deliver(self, level: int) -> None:
        self._timers.pop(level, None)
        if not self._started or level in self._busy:
            return
        cq = self.store.queues.get((SCHEDULE_TOPIC, level - 1))
        if cq is None:
            return  # the first unit's dispatch arms us
        offset = max(self.offsets.get(level, 0), cq.min_index)
        delay_ms = self.levels_ms[level - 1]
        for n, (phys, size, deliver_at) in enumerate(cq.units(offset, SLICE)):
            now_ms = int(self.clock.seconds() * 1000)
            if deliver_at > now_ms + delay_ms:
                deliver_at = now_ms  # correctDeliverTimestamp: the clock went back
            if deliver_at > now_ms:
                self._arm(level, (deliver_at - now_ms) / 1000.0)
                return
            msg = self._due_message(phys, size)
            if msg is None:
                self.dropped += 1
                log.error(
                    "delay level %d offset %d: no deliverable record at %d (%d bytes); skipped",
                    level,
                    offset + n,
                    phys,
                    size,
                )
                self._advance(level, offset + n + 1)
                continue
            result: list = []
            d = self.put_message(msg, False)
            d.addBoth(result.append)  # the answer (a Failure too) is kept here, and consumed
            if not result:
                # DLedger mode: answered once a quorum has the entry (4.9's putMessage blocks that long);
                # the level waits for it and goes on from its callback
                self._busy.add(level)
                d.addCallback(lambda _, at=offset + n, got=result: self._answered(got[0], level, at))
                return
            if not self._delivered(result[0], level, offset + n):
                return
        if self.offsets.get(level, 0) < cq.max_index:
            self._arm(level, 0)  # more than one slice due: go on next turn

    def _answered(self, result, level: int, offset: int) -> None:
        self._busy.discard(level)
        if self._delivered(result, level, offset):
            self._arm(level, 0)

    def _delivered(self, result, level: int, offset: int) -> bool:
        """The put of the unit at `offset`: PUT_OK moves the level on; anything else retries it soon."""
        if getattr(result, "status", None) != PutStatus.PUT_OK:
            log.warning(
                "delay level %d: delivering offset %d failed (%s); retrying in %.1f s",
                level,
                offset,
                getattr(result, "status", result),
                RETRY_S,
            )
            self._arm(level, RETRY_S)
            return False
        self.delivered += 1
        self._advance(level, offset + 1)
        return True

    def _due_message(self, phys: int, size: int) -> record.Message | None:
        """The message to deliver for a unit, or None (a filler unit, a record that is gone or is not
        a delayed message with a real topic and queue)."""
        if size <= 0 or size == FILLER_SIZE or phys < self.store.commitlog.min_offset:
            return None
        stored = self.store.commitlog.message_at(phys, size)
        if stored is None or stored.topic != SCHEDULE_TOPIC:
            return None
        try:
            msg = time_up(stored)
        except ValueError:  # REAL_QID is not a number
            return None
        return msg if msg.topic else None

    def _advance(self, level: int, next_offset: int) -> None:
        self.offsets[level] = next_offset
        self._dirty = True
