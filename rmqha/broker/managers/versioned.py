"""What topics.json and subscriptionGroup.json share: 4.9's ConfigManager subclasses that carry a
DataVersion. The file and the master's answer are {"dataVersion": {"counter", "timestamp"}, <TABLE_KEY>:
{name: entry}} with the names sorted; every change moves the version on, and a slave takes the
master's as it is (slave_sync). Tests: tests/unit/processors/test_registration_sync.py,
test_subscription_groups.py, test_topics*.py."""

from __future__ import annotations

import os
from typing import Any

from rmqha.broker.remoting import json_body


def read_version(dv: dict) -> dict:
    """A DataVersion from a file or a peer's body: its counter and timestamp as integers (0 if absent)."""
    return {"counter": int(dv.get("counter", 0)), "timestamp": int(dv.get("timestamp", 0))}


class VersionedTable:
    """A table of named entries (each with to_json()) and its DataVersion, kept in
    <storePathRootDir>/config/<FILE>."""

    FILE = ""  # topics.json, subscriptionGroup.json
    TABLE_KEY = ""  # the table's key in the file: topicConfigTable, subscriptionGroupTable

    def __init__(self, config, clock, table: dict[str, Any]) -> None:
        self.config = config
        self.clock = clock
        self.path = os.path.join(config.storePathRootDir, "config", self.FILE)
        self.table = table
        self.data_version = {"counter": 0, "timestamp": self._now_ms()}

    def _now_ms(self) -> int:
        return int(self.clock.seconds() * 1000)

    def _next_version(self) -> None:
        self.data_version = {"counter": self.data_version["counter"] + 1, "timestamp": self._now_ms()}

    def to_json(self) -> dict:
        """The file's content, as 4.9 writes it."""
        return {
            "dataVersion": dict(self.data_version),
            self.TABLE_KEY: {name: entry.to_json() for name, entry in sorted(self.table.items())},
        }

    def encode(self) -> bytes:
        return json_body.dumps(self.to_json())
