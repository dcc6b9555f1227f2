"""Disk flushing: ASYNC_FLUSH flushes on a timer; SYNC_FLUSH makes a send wait for its bytes on disk.

fdatasync runs off the reactor thread (it can take milliseconds), and SYNC_FLUSH waiters are served
by group commit: one fdatasync covers every send that arrived while the previous one ran.
"""
from __future__ import annotations

import logging
from collections import deque

from twisted.internet import defer, task

log = logging.getLogger("broker.store.flush")


class FlushService:
    def __init__(self, store, *, clock, run_in_thread, sync: bool, interval_ms: int = 500,
                 timeout_ms: int = 5000):
        self.store = store
        self.clock = clock
        self.run_in_thread = run_in_thread  # callable(fn) -> Deferred; deferToThread on a live broker
        self.sync = sync
        self.interval_s = interval_ms / 1000.0
        self.timeout_s = timeout_ms / 1000.0
        self.flushed = store.max_offset
        self._waiters: deque = deque()  # (offset, deadline, deferred)
        self._running = False
        self._loop = None
        self.errors = 0

    def start(self):
        self._loop = task.LoopingCall(self._tick)
        self._loop.clock = self.clock
        self._loop.start(self.interval_s, now=False)

    def stop(self):
        if self._loop is not None and self._loop.running:
            self._loop.stop()

    def wait(self, offset: int) -> defer.Deferred:
        """SYNC_FLUSH: fires 'PUT_OK' once offset is on disk, 'FLUSH_DISK_TIMEOUT' after the timeout."""
        d = defer.Deferred()
        if offset <= self.flushed:
            d.callback("PUT_OK")
            return d
        self._waiters.append((offset, self.clock.seconds() + self.timeout_s, d))
        self._kick()
        return d

    def _tick(self):
        now = self.clock.seconds()
        q = self._waiters
        while q and q[0][1] <= now:
            q.popleft()[2].callback("FLUSH_DISK_TIMEOUT")
        self._kick()

    def _kick(self):
        if self._running or (not self._waiters and self.flushed >= self.store.max_offset):
            return
        self._running = True
        d = self.run_in_thread(self.store.flush)
        d.addCallbacks(self._done, self._failed)

    def _done(self, flushed: int):
        self._running = False
        self.flushed = max(self.flushed, flushed)
        q = self._waiters
        while q and q[0][0] <= self.flushed:
            q.popleft()[2].callback("PUT_OK")
        if q:
            self._kick()

    def _failed(self, failure):
        self._running = False
        self.errors += 1
        log.error("flush failed: %s", failure.getErrorMessage())
