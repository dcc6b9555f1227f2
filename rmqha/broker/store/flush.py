"""Disk flushing: ASYNC_FLUSH flushes on a timer; SYNC_FLUSH makes a send wait for its bytes on disk.

fdatasync runs off the reactor thread (it can take milliseconds), and SYNC_FLUSH waiters are served
by group commit: one fdatasync covers every send whose bytes were written before it started.

`durable_offset` is exactly the commit-log offset the last successful flush covered (the store reads
each file's position before its fdatasync), never higher: a send appended while a flush runs waits
for the next one. A failed fdatasync answers every waiting send FLUSH_DISK_TIMEOUT (stored, not
confirmed on disk), is counted and logged, and the next tick tries again.

A failed fdatasync is sticky ("fsyncgate"): Linux may drop the dirty pages it could not write and
mark them clean, so a later fdatasync that succeeds proves nothing about the earlier bytes. After one
failure the durable offset never moves again and every SYNC_FLUSH send is answered
FLUSH_DISK_TIMEOUT until the broker is restarted (recovery then re-reads what is really there).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from twisted.internet import defer
from twisted.python.failure import Failure

from rmqha.broker.support.clock import Clock, DelayedCall
from rmqha.broker.support.supervision import PeriodicService

from .message_store import MessageStore, PutStatus

log = logging.getLogger("rmqha.broker.store.flush")


class FlushService:
    def __init__(
        self,
        store: MessageStore,
        *,
        clock: Clock,
        run_in_thread: Callable[[Callable[[], int]], defer.Deferred[int]],
        sync: bool,
        interval_ms: int = 500,
        timeout_ms: int = 5000,
    ):
        self.store = store
        self.clock = clock
        self.run_in_thread = run_in_thread  # callable(fn) -> Deferred; deferToThread on a live broker
        self.sync = sync
        self.interval_s = interval_ms / 1000.0
        self.timeout_s = timeout_ms / 1000.0
        # On disk at start: everything after a clean shutdown (it flushed); after a crash the recovered
        # bytes may be only in the page cache until our first flush (which syncs every loaded file).
        self.durable_offset = store.max_offset if store.was_clean_shutdown else store.min_offset
        # (offset, deadline, deferred) in append order: both increase
        self._waiters: deque[tuple[int, float, defer.Deferred[PutStatus]]] = deque()
        self._timer: DelayedCall | None = None  # one timer, for the head waiter's deadline
        self._running = False
        self._idle: list[defer.Deferred[None]] = []  # fired when the flush in flight ends (stop() waits)
        self._stopped = False
        self._loop: PeriodicService | None = None
        self.errors = 0  # failed flushes, ever (a metric)
        self.failing = 0  # failed flushes since the last good one
        self.last_error = ""
        self.poisoned = False  # an fdatasync failed since start: nothing is durable any more

    @property
    def running(self) -> bool:
        """An fdatasync is in flight on the worker thread."""
        return self._running

    def start(self, metrics: Any = None) -> None:  # metrics: a rmqha.broker.observability.metrics Registry
        self._loop = PeriodicService("commitlog_flush", self._tick, self.interval_s, self.clock, metrics, logger=log)
        self._loop.start()

    def stop(self) -> defer.Deferred[None]:
        """Stop flushing. Fires once the flush in flight, if any, has ended (so the store can be
        closed under it safely); then every send still waiting is answered FLUSH_DISK_TIMEOUT, as its
        bytes were not confirmed on disk. Never fails."""
        self._stopped = True
        if self._loop is not None:
            self._loop.stop()
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
        d: defer.Deferred[None] = defer.Deferred()
        if self._running:
            self._idle.append(d)
        else:
            d.callback(None)
        d.addCallback(lambda _: self._answer_all(PutStatus.FLUSH_DISK_TIMEOUT, "the broker is stopping"))
        return d

    def wait(self, offset: int) -> defer.Deferred[PutStatus]:
        """SYNC_FLUSH: fires PUT_OK once the log is durable up to offset; FLUSH_DISK_TIMEOUT after
        the timeout, when an fdatasync fails, or when the service stops first. Never errbacks."""
        d: defer.Deferred[PutStatus] = defer.Deferred()
        if offset <= self.durable_offset:
            d.callback(PutStatus.PUT_OK)
        elif self._stopped or self.poisoned:
            d.callback(PutStatus.FLUSH_DISK_TIMEOUT)
        else:
            self._waiters.append((offset, self.clock.seconds() + self.timeout_s, d))
            self._kick()
            self._arm()
        return d

    def _tick(self) -> None:
        self._kick()  # ASYNC_FLUSH's periodic flush; after a failure, the retry

    def _kick(self) -> None:
        if self._running or self._stopped:
            return
        if not self._waiters and self.durable_offset >= self.store.max_offset:
            return
        self._running = True
        d = defer.maybeDeferred(self.run_in_thread, self.store.flush)  # a refusal is a failed flush too
        d.addCallbacks(self._done, self._failed)
        d.addErrback(lambda f: log.error("disk flush bookkeeping failed: %s", f.getTraceback()))

    def _done(self, offset: int) -> None:
        self._running = False
        if self.failing:
            log.warning(
                "disk flush works again after %d failed attempt(s) (last: %s), but bytes written "
                "before the failure may be lost: the durable offset stays %d and SYNC_FLUSH sends "
                "are answered FLUSH_DISK_TIMEOUT until the broker is restarted",
                self.failing,
                self.last_error,
                self.durable_offset,
            )
            self.failing = 0
        if self.poisoned:
            self._answer_all(PutStatus.FLUSH_DISK_TIMEOUT)
            self._went_idle()
            return
        self.durable_offset = max(self.durable_offset, offset)
        q = self._waiters
        while q and q[0][0] <= self.durable_offset:
            q.popleft()[2].callback(PutStatus.PUT_OK)
        more = bool(q) and not self._stopped and self.store.max_offset > offset
        self._went_idle()
        if more:
            self._kick()  # sends appended during that flush: the next group commit, now

    def _failed(self, failure: Failure) -> None:
        self._running = False
        self.errors += 1
        self.failing += 1
        # Only a failed fdatasync/write (OSError) can have lost pages; a refused worker thread did not
        # touch the disk.
        self.poisoned = self.poisoned or (failure.type is not None and issubclass(failure.type, OSError))
        self.last_error = failure.getErrorMessage()  # an OSError's reads "[Errno 5] Input/output error"
        if self.failing == 1:  # once per failing streak; the recovery is logged by _done
            log.error(
                "disk flush failed: %s: %s. The %d send(s) waiting for the disk, and any until a "
                "flush succeeds, are answered FLUSH_DISK_TIMEOUT; durable offset stays %d; "
                "retrying every %.0f ms",
                getattr(failure.type, "__name__", "?"),
                self.last_error,
                len(self._waiters),
                self.durable_offset,
                self.interval_s * 1000,
            )
        self._answer_all(PutStatus.FLUSH_DISK_TIMEOUT)
        self._went_idle()

    def _went_idle(self) -> None:
        idle, self._idle = self._idle, []
        for d in idle:
            d.callback(None)

    def _answer_all(self, status: PutStatus, why: str = "") -> None:
        q = self._waiters
        if q and why:
            log.warning("%d send(s) waiting for the disk answered %s: %s", len(q), status, why)
        while q:
            q.popleft()[2].callback(status)

    def _arm(self) -> None:
        if self._waiters and self._timer is None and not self._stopped:
            delay = max(0.0, self._waiters[0][1] - self.clock.seconds())
            self._timer = self.clock.callLater(delay, self._expire)

    def _expire(self) -> None:
        self._timer = None
        now = self.clock.seconds()
        q = self._waiters
        while q and q[0][1] <= now:
            q.popleft()[2].callback(PutStatus.FLUSH_DISK_TIMEOUT)
        self._arm()
