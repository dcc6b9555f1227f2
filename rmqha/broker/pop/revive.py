"""The revive table: what was popped and not acked yet, and when it comes back. IO-free (tests:
tests/unit/processors/test_pop.py).

Records are fed in revive-queue order (feed_ck, feed_ack) with their revive-queue offset; `due(now)`
names the checkpoints whose invisible time has passed with offsets still unacked; `done(ck)` marks one
revived. `safe_offset()` is where a restart must scan from: the revive-queue offset of the oldest
checkpoint not yet done (acks of a checkpoint always come after it in the queue), else the scan end.
An ack that arrives before its checkpoint is fed (never, in one queue) or after it was revived is
kept nowhere: the message was already put back, as in 5.x (at least once).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .checkpoint import Ack, CheckPoint


@dataclass
class _Entry:
    ck: CheckPoint
    revive_offset: int
    acked: set[int] = field(default_factory=set)

    def unacked(self) -> list[int]:
        return [o for o in self.ck.offsets() if o not in self.acked]


class ReviveTable:
    """`scanned` moves only with the scan (scan=True); the service also feeds what it has just stored,
    so ack state is current at once, and the scan reads those records again later: feeding is
    idempotent, and a checkpoint already revived or fully acked is remembered until the scan has
    passed it, so reading it again does not bring it back."""

    def __init__(self, start_offset: int = 0):
        self.entries: dict[tuple, _Entry] = {}
        self.finished: dict[tuple, int] = {}  # key -> revive offset, until the scan passes it
        self.scanned = start_offset  # next revive-queue offset to feed

    def _advance(self, revive_offset: int, scan: bool) -> None:
        if scan and revive_offset + 1 > self.scanned:
            self.scanned = revive_offset + 1
            if self.finished:
                self.finished = {k: o for k, o in self.finished.items() if o >= self.scanned}

    def feed_ck(self, ck: CheckPoint, revive_offset: int, scan: bool = True) -> None:
        if ck.key not in self.finished:
            self.entries.setdefault(ck.key, _Entry(ck, revive_offset))
        self._advance(revive_offset, scan)

    def feed_ack(self, ack: Ack, revive_offset: int, scan: bool = True) -> None:
        e = self.entries.get(ack.key)
        if e is not None:
            e.acked.add(ack.ack_offset)
            if not e.unacked():
                self._finish(ack.key)
        self._advance(revive_offset, scan)

    def _finish(self, key: tuple) -> None:
        e = self.entries.pop(key, None)
        if e is not None and e.revive_offset >= self.scanned:
            self.finished[key] = e.revive_offset

    def skip(self, revive_offset: int) -> None:
        self._advance(revive_offset, True)

    def is_acked(self, key: tuple, offset: int) -> bool:
        e = self.entries.get(key)
        return e is None or offset in e.acked

    def due(self, now_ms: int) -> list[tuple[CheckPoint, list[int]]]:
        out = [(e.ck, e.unacked()) for e in self.entries.values() if e.ck.revive_time <= now_ms]
        return sorted(out, key=lambda x: x[0].revive_time)

    def done(self, ck: CheckPoint) -> None:
        self._finish(ck.key)

    def safe_offset(self) -> int:
        if not self.entries:
            return self.scanned
        return min(e.revive_offset for e in self.entries.values())

    def __len__(self) -> int:
        return len(self.entries)
