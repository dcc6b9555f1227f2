"""Sync-master waits (GroupTransferService, HA-PROTOCOL §5): each waiter ends at its deadline.

A waiter succeeds the moment push2SlaveMaxOffset covers its offset, and times out at its deadline, as
4.9.x does (HAService.doWaitTransfer loops to the request's deadline since 4.6.0, 85a6cc1c8e; before
that it woke a fixed 5 times and could time out with the data already on the slave, #1244).
Waiters are queued in append order, so both their offsets and their deadlines increase along the
queue: one timer, for the head, is enough.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from twisted.internet import defer

from rmqha.broker.support.clock import Clock, DelayedCall
from rmqha.broker.store.message_store import PutStatus

# A waiter: (next offset, deadline, started, its Deferred).
_Waiter = tuple[int, float, float, "defer.Deferred[PutStatus]"]


class GroupTransfer:
    def __init__(self, clock: Clock, timeout_s: float, on_outcome: Callable[[PutStatus, float], object] | None = None):
        self.clock = clock
        self.timeout_s = timeout_s
        self.on_outcome = on_outcome  # (outcome, waited_seconds) for metrics
        self._waiters: deque[_Waiter] = deque()
        self._timer: DelayedCall | None = None
        self.acked = 0

    def __len__(self) -> int:
        return len(self._waiters)

    def wait(self, next_offset: int) -> defer.Deferred[PutStatus]:
        now = self.clock.seconds()
        d: defer.Deferred[PutStatus] = defer.Deferred()
        if next_offset <= self.acked:
            self._finish(d, PutStatus.PUT_OK, now, now)
            return d
        self._waiters.append((next_offset, now + self.timeout_s, now, d))
        if self._timer is None:
            self._arm()
        return d

    def notify_transfer(self, push2slave: int) -> None:
        """push2SlaveMaxOffset rose: release every waiter it covers."""
        if push2slave <= self.acked:
            return
        self.acked = push2slave
        self._release(lambda w: w[0] <= push2slave, PutStatus.PUT_OK, self.clock.seconds())
        # The timer stays armed for the old head; when it fires it re-arms for the new one.

    def _expire(self) -> None:
        self._timer = None
        now = self.clock.seconds()
        self._release(lambda w: w[1] <= now, PutStatus.FLUSH_SLAVE_TIMEOUT, now)
        self._arm()

    def _release(self, done: Callable[[_Waiter], bool], outcome: PutStatus, now: float) -> None:
        """End the waiters at the head for which done(waiter) holds with outcome. Offsets and deadlines
        both increase along the queue, so the first that is not done ends the walk."""
        q = self._waiters
        while q and done(q[0]):
            _, _, started, d = q.popleft()
            self._finish(d, outcome, started, now)

    def _arm(self) -> None:
        if self._waiters and self._timer is None:
            delay = max(0.0, self._waiters[0][1] - self.clock.seconds())
            self._timer = self.clock.callLater(delay, self._expire)

    def _finish(self, d: defer.Deferred[PutStatus], outcome: PutStatus, started: float, now: float) -> None:
        if self.on_outcome:
            self.on_outcome(outcome, now - started)
        d.callback(outcome)

    def shutdown(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
        while self._waiters:
            _, _, started, d = self._waiters.popleft()
            self._finish(d, PutStatus.FLUSH_SLAVE_TIMEOUT, started, self.clock.seconds())
