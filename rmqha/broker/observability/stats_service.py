"""BrokerStats: the broker's 4.9-style statistics (rmqha/broker/observability/stats.py) and the once-a-second tick that
samples them, supervised like every periodic service."""

from __future__ import annotations

import logging

from rmqha.broker.observability.stats import StatsClock, StatsTable, StoreStats
from rmqha.broker.support.supervision import PeriodicService

log = logging.getLogger("rmqha.broker")


class BrokerStats:
    def __init__(self, cluster_name: str, clock, metrics=None):
        self.clock = clock
        now = self.now_ms()
        self.table = StatsTable(cluster_name)
        self.store = StoreStats(boot_ms=now)
        self.schedule = StatsClock(self.table, self.store, now)
        self.samplers: list = []  # more once-a-second samplings, called with now_ms (HA transfer rates)
        self._ticker = PeriodicService("stats", self.tick, 1.0, clock, metrics, logger=log)

    def now_ms(self) -> int:
        return int(self.clock.seconds() * 1000)

    def tick(self) -> None:
        now = self.now_ms()
        self.schedule.tick(now)
        for sample in self.samplers:
            sample(now)

    def start(self) -> None:
        self._ticker.start(now=True)

    def stop(self) -> None:
        self._ticker.stop()
