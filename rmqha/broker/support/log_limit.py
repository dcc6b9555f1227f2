"""Logging that a peer cannot turn into a flood.

A hostile or buggy client can repeat the same mistake thousands of times a second. Each kind of
event (a key such as ("bad request", code)) is logged the first time, then at most once per
``interval`` seconds with how many were left out since. Counts are kept for /metrics.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable

MAX_KEYS = 1024  # distinct keys remembered; beyond it the oldest half is forgotten


class LogLimiter:
    def __init__(self, logger: logging.Logger, interval: float = 60.0, now: Callable[[], float] = time.monotonic):
        self.logger = logger
        self.interval = interval
        self.now = now
        self._last: dict[Hashable, float] = {}
        self._suppressed: dict[Hashable, int] = {}
        self.total: dict[str, int] = {}  # events by kind (the key's first element), for metrics

    def log(self, level: int, key: Hashable, msg: str, *args, exc_info=None) -> bool:
        """Log ``msg % args`` unless ``key`` was logged less than ``interval`` ago; True if logged."""
        kind = key[0] if isinstance(key, tuple) and key else str(key)
        self.total[kind] = self.total.get(kind, 0) + 1
        t = self.now()
        last = self._last.get(key)
        if last is not None and t - last < self.interval:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return False
        if len(self._last) >= MAX_KEYS:
            for old in list(self._last)[: MAX_KEYS // 2]:
                self._last.pop(old, None)
                self._suppressed.pop(old, None)
        self._last[key] = t
        skipped = self._suppressed.pop(key, 0)
        if skipped:
            msg += " (%d more like this in the last %.0f s not logged)"
            args = (*args, skipped, self.interval)
        self.logger.log(level, msg, *args, exc_info=exc_info)
        return True
