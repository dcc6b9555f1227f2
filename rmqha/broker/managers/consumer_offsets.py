"""Consumer offsets: ConsumerOffsetManager (persisted to <storePathRootDir>/config/consumerOffset.json);
QUERY_CONSUMER_OFFSET / UPDATE_CONSUMER_OFFSET are rmqha/broker/processors/consumer_offsets.py.

The table is RocketMQ's: "<topic>@<group>" -> {queueId: next offset to consume}. The file is
`{"offsetTable":{"<topic>@<group>":{"0":12,...}}}` (quoted keys; fastjson's unquoted keys are read
too). It is written atomically (temp file + fsync + rename) every `flush_interval` seconds when
something changed, as the Java broker does every flushConsumerOffsetInterval (5 s), and on stop.
"""

from __future__ import annotations

import logging
import os

from rmqha.broker.support import validation
from rmqha.broker.remoting import json_body
from rmqha.broker.support.supervision import PeriodicService

from rmqha.broker.support.files import atomic_write, read_json_file

log = logging.getLogger("rmqha.broker.offsets")

TOPIC_GROUP_SEPARATOR = "@"
FLUSH_INTERVAL_S = 5.0


class ConsumerOffsetManager:
    def __init__(self, root_dir: str, clock, flush_interval: float = FLUSH_INTERVAL_S, metrics=None):
        self.path = os.path.join(root_dir, "config", "consumerOffset.json")
        self.clock = clock
        self.flush_interval = flush_interval
        self.table: dict[str, dict[int, int]] = {}
        self.dirty = False
        self._metrics = metrics
        self._loop: PeriodicService | None = None

    # -- lifecycle --------------------------------------------------------------------------------
    def load(self) -> None:
        obj = read_json_file(self.path)
        if obj is None:
            return
        self.table = self._parse_table(obj.get("offsetTable") or {})
        log.info("loaded consumer offsets for %d topic@group keys from %s", len(self.table), self.path)

    @staticmethod
    def _parse_table(raw: dict) -> dict[str, dict[int, int]]:
        """The offset table from a file or the master; entries that are not topic@group -> {int: int}
        with valid names are left out (logged), so one bad entry cannot stop the rest."""
        out: dict[str, dict[int, int]] = {}
        for key, queues in raw.items() if isinstance(raw, dict) else ():
            topic, _, group = str(key).partition(TOPIC_GROUP_SEPARATOR)
            why = validation.topic_problem(topic) or validation.group_problem(group)
            try:
                parsed = {int(q): int(o) for q, o in (queues or {}).items()}
            except (TypeError, ValueError, AttributeError):
                why = why or "queue offsets are not integers"
            if why:
                log.warning("ignoring consumer offsets of %s: %s", validation.shown(str(key)), why)
                continue
            out[str(key)] = parsed
        return out

    def start(self) -> None:
        # Supervised: a write that fails is counted, shows in /status, and is retried after a back-off
        # (the table stays dirty until a write succeeds).
        self._loop = PeriodicService(
            "consumer_offsets_flush", self._persist_dirty, self.flush_interval, self.clock, self._metrics, logger=log
        )
        self._loop.start()

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.stop()
        self.persist_if_dirty()

    def to_json(self) -> dict:
        return {"offsetTable": {k: {str(q): o for q, o in sorted(v.items())} for k, v in sorted(self.table.items())}}

    def encode(self) -> bytes:
        """GET_ALL_CONSUMER_OFFSET's body and the file content."""
        return json_body.dumps(self.to_json())

    def persist(self) -> None:
        atomic_write(self.path, self.encode())
        self.dirty = False

    def persist_if_dirty(self) -> None:
        """Write the table if it changed; an OSError is logged (the table stays dirty), not raised."""
        try:
            self._persist_dirty()
        except OSError as e:
            log.error("cannot write %s: %s (retrying at the next flush)", self.path, e)

    def _persist_dirty(self) -> None:
        if self.dirty:
            self.persist()

    # -- the table --------------------------------------------------------------------------------
    @staticmethod
    def key(topic: str, group: str) -> str:
        return f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Raises InvalidName for a name that must not enter the persisted table."""
        validation.check_group(group)
        validation.check_topic(topic)
        queues = self.table.setdefault(self.key(topic, group), {})
        if queues.get(queue_id) != offset:
            queues[queue_id] = offset
            self.dirty = True

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The stored offset, or -1 when there is none."""
        return self.table.get(self.key(topic, group), {}).get(queue_id, -1)

    def _topic_groups(self):
        """(topic, group) of every key in the table."""
        for k in self.table:
            t, _, g = k.partition(TOPIC_GROUP_SEPARATOR)
            yield t, g

    def groups_of_topic(self, topic: str) -> set[str]:
        return {g for t, g in self._topic_groups() if t == topic}

    def topics_of_group(self, group: str) -> set[str]:
        """4.9's whichTopicByConsumer: every topic the group has offsets in (its %RETRY% topic too)."""
        return {t for t, g in self._topic_groups() if g == group}

    def remove_group(self, group: str) -> None:
        """4.9's removeOffset(group): DELETE_SUBSCRIPTIONGROUP with removeOffset=true."""
        for topic in self.topics_of_group(group):
            del self.table[self.key(topic, group)]
            self.dirty = True

    def clone(self, src_group: str, dest_group: str, topic: str) -> None:
        """4.9's cloneOffset: dest's offsets of `topic` become a copy of src's (nothing when src has none)."""
        offsets = self.table.get(self.key(topic, src_group))
        if offsets is not None:
            validation.check_group(dest_group)
            self.table[self.key(topic, dest_group)] = dict(offsets)
            self.dirty = True

    def replace_all(self, raw_table: dict) -> None:
        """Slave sync: the master's table replaces ours (RocketMQ's syncConsumerOffset)."""
        table = self._parse_table(raw_table)
        if table != self.table:
            self.table = table
            self.dirty = True
