"""Queue-offset leases: a master never gives the same queue offset to two messages, even after a power cut.

Tested by tests/unit/store/test_power_loss_offset_reuse.py.

Why: a pull serves records before they are fsynced (the consume queue is fed from the written commit
log, and a slave serves what it received), so a consumer can move its offset past records that a power
cut then takes from the master. If the master then gave those queue offsets to new messages, that
consumer would never read them (issue 23, run mx-as-l2; 4.9.8's truncateDirtyLogicFiles does exactly
that). The consume queue itself cannot say how far offsets went: its unsynced units are lost in the same
cut.

So before a queue offset is given, it must be covered by a lease: `queueOffsetLease.json` in the store
root says, per queue, an offset below which every given offset lies. It is written durably (temp file,
fsync, rename, directory fsync) BEFORE the first offset past the old bound is handed out, `step` offsets
at a time, so one write covers many sends. After a restart the first new message of a queue goes to the
lease's bound at the earliest; the offsets between the queue's recovered end and the bound are filled
with filler units that a pull steps over.

They are filled only when a new message takes an offset (or the master starts taking writes), never at
recovery itself: until then the offsets stay free for records that come back with their own queue
offsets (the recovery fetch of rmqha/broker/ha/recovery.py, a slave re-copying its master). A slave
never leases: its queue offsets are the master's, carried in the records.

A clean shutdown tightens every bound to the queue's end, so a clean restart fills nothing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from rmqha.broker.support import validation
from rmqha.broker.support.files import atomic_write

from .consume_queue import ConsumeQueue
from .mapped_file import DiskFullError, StoreError

log = logging.getLogger("rmqha.broker.store.lease")

LEASE_FILE = "queueOffsetLease.json"
# Offsets one write leases past the one asked for, per queue: an unclean restart skips at most this many
# (plus what the cut took) in each queue. It starts small and doubles while a queue needs a new lease
# within a second of the last (so a busy queue pays a durable write a second at most), halving again when
# the queue is slow.
MIN_STEP = 128
MAX_STEP = 1 << 16
FAST_MS = 1000
SLOW_MS = 10_000

Key = tuple[str, int]


class QueueOffsetLease:
    def __init__(self, path: str):
        self.path = path
        self.bounds: dict[Key, int] = {}
        self.writes = 0
        self.steps: dict[Key, int] = {}
        self._last_ms: dict[Key, int] = {}
        # queues of the lease not padded up to their bound since the start
        self.unpadded: set[Key] = set()

    def load(self) -> None:
        """Read the bounds. A missing file leases nothing (a new store, or one a 4.9 broker wrote); a file
        that is not a lease table stops the store: starting without it could give offsets twice."""
        try:
            with open(self.path, "rb") as fh:
                raw = fh.read()
        except FileNotFoundError:
            return
        try:
            table = json.loads(raw)["queues"]
            bounds = {}
            for topic, queues in table.items():
                for qid, bound in queues.items():
                    key = (topic, int(qid))
                    if validation.topic_problem(topic) or not 0 <= key[1] <= 0x7FFFFFFF:
                        raise ValueError(f"queue {validation.shown(topic)}:{qid} is not a valid queue")
                    if type(bound) is not int or bound < 0:
                        raise ValueError(f"bound {bound!r} of {topic}:{qid} is not an offset")
                    bounds[key] = bound
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise StoreError(
                f"{self.path} is not a queue-offset lease table ({e}): without it this master could give a "
                "consumer's queue offsets to new messages; restore it, or remove it knowing that risk"
            ) from None
        self.bounds = bounds
        self.unpadded = set(bounds)

    def next_offset(self, key: Key, cq: ConsumeQueue) -> int:
        """The next queue offset of a queue nothing was put to since the last dispatch: its end, after
        padding it up to its bound the first time since the start (offsets a power cut may have taken
        from consumers). Raises DiskFullError when the fillers do not fit."""
        if key in self.unpadded:
            n = cq.pad_to(self.bound(key))
            self.unpadded.discard(key)
            if n:
                log.warning(
                    "queue %s:%d: offsets [%d, %d) are leased but not in the queue (a power cut took them, "
                    "and consumers may have read them): kept as fillers, not given again",
                    key[0],
                    key[1],
                    cq.max_index - n,
                    cq.max_index,
                )
        return cq.max_index

    def pad_all(self, queue: Callable[[str, int], ConsumeQueue]) -> int:
        """Pad every queue not padded since the start up to its bound (so no consumer's offset is past a
        queue's end); `queue` opens one. Returns the fillers written."""
        n = 0
        for key in sorted(self.unpadded):
            cq = queue(*key)  # (the names were checked when the lease was read)
            before = cq.max_index
            self.next_offset(key, cq)
            n += cq.max_index - before
        return n

    def claim(self, key: Key, cq: ConsumeQueue, counted: int | None, now_ms: int) -> tuple[int, str]:
        """(queue offset for a new message of `key`, "" or why it must be refused): `counted` (the next
        offset put_message counted) or the queue's end after padding, leased before it is given."""
        try:
            offset = self.next_offset(key, cq) if counted is None else counted
        except DiskFullError as e:
            log.error("no queue offset given, nothing stored: %s", e)
            return 0, f"disk full: {e}"
        return offset, self.cover({key: offset + 1}, now_ms)

    def cover(self, needed: dict[Key, int], now_ms: int) -> str:
        """Lease every offset below needed[key] not leased yet; "" or why it could not be (the offsets
        must then not be given)."""
        needed = {k: end for k, end in needed.items() if end > self.bound(k)}
        if not needed:
            return ""
        try:
            self.extend(needed, now_ms)
        except OSError as e:
            log.error("cannot lease queue offsets in %s: %s; the sends are refused", self.path, e)
            return f"cannot lease queue offsets: {e}"
        return ""

    def bound(self, key: Key) -> int:
        return self.bounds.get(key, 0)

    def extend(self, needed: dict[Key, int], now_ms: int) -> None:
        """Lease, durably, every offset below needed[key] for each key (and the key's step more). Raises
        OSError when the write fails: the offsets are then not leased and must not be given."""
        new = dict(self.bounds)
        for key, end in needed.items():
            if end > new.get(key, 0):
                new[key] = end + self._step(key, now_ms)
        self._write(new)
        for key in needed:
            self._last_ms[key] = now_ms

    def _step(self, key: Key, now_ms: int) -> int:
        step, last = self.steps.get(key, MIN_STEP), self._last_ms.get(key)
        if last is not None and now_ms - last < FAST_MS:
            step = min(step * 2, MAX_STEP)
        elif last is None or now_ms - last > SLOW_MS:
            step = max(step // 2, MIN_STEP)
        self.steps[key] = step
        return step

    def tighten(self, ends: dict[Key, int]) -> None:
        """A clean shutdown: every given offset is durable in its queue (fillers included), so the bounds
        can be the ends. A queue never padded since the start keeps its bound: a cut before this start
        may have taken offsets it still covers."""
        new = {k: min(b, ends.get(k, b)) if k not in self.unpadded else b for k, b in self.bounds.items()}
        if new != self.bounds:
            self._write(new)

    def forget(self, key: Key) -> None:
        """A destroyed queue: no bound any more (written with the next extend; until then a restart only
        recreates it as fillers)."""
        self.bounds.pop(key, None)
        self.unpadded.discard(key)

    def _write(self, bounds: dict[Key, int]) -> None:
        table: dict[str, dict[str, int]] = {}
        for (topic, qid), b in sorted(bounds.items()):
            table.setdefault(topic, {})[str(qid)] = b
        atomic_write(self.path, json.dumps({"queues": table}, separators=(",", ":")).encode())
        self.bounds = bounds
        self.writes += 1
