"""Which pulls this node served: a bounded log of (topic, queue, offset range) the kit reads over HTTP.

A consumer's client does not say which broker answered a pull (the official C++ client exposes no
store host, and a slave's records carry the master's), so a test history cannot tell a receive served
by a master from one served by its slave. Each node therefore remembers the queue-offset ranges it
returned: one entry per PULL_MESSAGE answered SUCCESS, numbered from 1 in this process's life.

`GET /served?after=N` (rmqha.broker.observability.metrics) returns the entries numbered above N:

    {"incarnation": 1763770000123, "last": 42, "dropped": 0,
     "ranges": [[seq, ts_ms, group, topic, queueId, fromOffset, nextOffset, messages], ...]}

`incarnation` is the process's start time (ms): a reader that sees it change starts again from 0.
`dropped` counts entries pushed out of the ring before anyone read them (the reader polls faster
than `capacity` pulls arrive, or it is told how many it missed). `fromOffset` is the queue offset the
consumer asked for and `nextOffset` the one it was told to ask for next, so every message returned
lies in [fromOffset, nextOffset) (a tag filter may skip some of them).
"""

from __future__ import annotations

import collections
import itertools

DEFAULT_CAPACITY = 65536


class ServedLog:
    def __init__(self, incarnation_ms: int, capacity: int = DEFAULT_CAPACITY):
        if capacity <= 0:
            raise ValueError("capacity must be positive")
        self.incarnation = incarnation_ms
        self.capacity = capacity
        self.last = 0
        self._ring: collections.deque = collections.deque(maxlen=capacity)

    def record(
        self, ts_ms: int, group: str, topic: str, queue_id: int, from_offset: int, next_offset: int, messages: int
    ) -> None:
        self.last += 1
        self._ring.append((self.last, ts_ms, group, topic, queue_id, from_offset, next_offset, messages))

    @property
    def first(self) -> int:
        """The number of the oldest entry still held (last + 1 when empty)."""
        return self._ring[0][0] if self._ring else self.last + 1

    def since(self, after: int, limit: int = 10000) -> dict:
        """Entries numbered above `after` (at most `limit`, oldest first) and how many of those are gone."""
        after = max(0, min(after, self.last))
        dropped = max(0, self.first - after - 1)
        skip = max(0, after + 1 - self.first)
        ranges = [list(e) for e in itertools.islice(self._ring, skip, skip + max(0, limit))]
        return {"incarnation": self.incarnation, "last": self.last, "dropped": dropped, "ranges": ranges}
