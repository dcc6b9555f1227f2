"""Topic configs: the TopicConfigManager (persisted to <storePathRootDir>/config/topics.json); the request
that changes it, UPDATE_AND_CREATE_TOPIC, is rmqha/broker/processors/topics.py.

Follows RocketMQ 4.x's TopicConfigManager:
* system topics exist from the start, as 4.9.8's constructor makes them: SELF_TEST_TOPIC,
  OFFSET_MOVED_EVENT, SCHEDULE_TOPIC_XXXX, BenchmarkTest, the cluster-name (16 queues) and broker-name
  topics, <cluster>_REPLY_TOPIC, and TBW102 (AUTO_CREATE_TOPIC_KEY) when autoCreateTopicEnable is true,
  with defaultTopicQueueNums queues and perm READ|WRITE|INHERIT;
* a send to an unknown topic creates it from its defaultTopic (TBW102) when that one is inheritable:
  min(client's defaultTopicQueueNums, default's writeQueueNums) queues, the default's perm without
  INHERIT. With autoCreateTopicEnable=false there is no TBW102, so nothing is created;
* %RETRY%<group> topics are created with the group's retryQueueNums queues and READ|WRITE (heartbeat
  and send-back), %DLQ%<group> topics with 1 queue (send-back);
* every change bumps the data version {counter, timestamp}, is written at once (atomically), and is
  announced to listeners (registration re-registers with the name servers).
"""

from __future__ import annotations

import logging

from rmqha.broker.support import validation
from rmqha.broker.support.errors import BadRequest
from rmqha.broker.namesrv.register_body import TopicConfig
from rmqha.broker.remoting.codes import PERM_INHERIT, PERM_READ, PERM_WRITE

from rmqha.broker.support.files import atomic_write, read_json_file
from rmqha.broker.managers.versioned import VersionedTable, read_version

log = logging.getLogger("rmqha.broker.topics")

AUTO_CREATE_TOPIC_KEY = "TBW102"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
SCHEDULE_TOPIC_QUEUE_NUM = 18
BENCHMARK_TOPIC = "BenchmarkTest"
# Topics a client may not send to (4.9.8 TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET): NO_PERMISSION.
NOT_ALLOWED_SEND_TOPICS = frozenset(
    {
        SCHEDULE_TOPIC,
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT,
    }
)
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
# 4.9's TopicValidator.SYSTEM_TOPIC_SET (and its prefix): a client may not create or redefine them (a
# redefined TBW102 breaks topic auto-creation); the cluster's and broker's names and the trace topic are
# added per broker, as 4.9 does at start.
SYSTEM_TOPICS = frozenset(
    {
        AUTO_CREATE_TOPIC_KEY,
        SCHEDULE_TOPIC,
        BENCHMARK_TOPIC,
        "RMQ_SYS_TRANS_HALF_TOPIC",
        TRACE_TOPIC,
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT,
    }
)
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
SLAVE_REFUSES = "Can't modify topic or subscription group from slave broker, please execute it from master broker."


def reply_topic(cluster: str) -> str:
    return cluster + "_REPLY_TOPIC"


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


def is_readable(perm: int) -> bool:
    return bool(perm & PERM_READ)


def is_writeable(perm: int) -> bool:
    return bool(perm & PERM_WRITE)


def validate_topic(topic: str) -> str | None:
    """None when the name is acceptable, else why not (the Java broker's TopicValidator rules)."""
    return validation.topic_problem(topic)


class TopicConfigManager(VersionedTable):
    FILE, TABLE_KEY = "topics.json", "topicConfigTable"
    table: dict[str, TopicConfig]

    def __init__(self, config, clock):
        super().__init__(config, clock, {})
        self.listeners: list = []  # called with no argument after any change
        # group -> its subscription group's retryQueueNums (set by the server; 4.9's heartbeat uses it)
        self.retry_queue_nums = lambda group: 1
        self._add_system_topics()

    def _add_system_topics(self) -> None:
        c = self.config
        rw = PERM_READ | PERM_WRITE
        if c.autoCreateTopicEnable:
            self.table[AUTO_CREATE_TOPIC_KEY] = TopicConfig(
                AUTO_CREATE_TOPIC_KEY, c.defaultTopicQueueNums, c.defaultTopicQueueNums, rw | PERM_INHERIT
            )
        self.table[SELF_TEST_TOPIC] = TopicConfig(SELF_TEST_TOPIC, 1, 1, rw)
        # One queue per delay level (the reference's SCHEDULE_TOPIC_QUEUE_NUM).
        self.table[SCHEDULE_TOPIC] = TopicConfig(SCHEDULE_TOPIC, SCHEDULE_TOPIC_QUEUE_NUM, SCHEDULE_TOPIC_QUEUE_NUM, rw)
        self.table[OFFSET_MOVED_EVENT] = TopicConfig(OFFSET_MOVED_EVENT, 1, 1, rw)
        self.table[BENCHMARK_TOPIC] = TopicConfig(BENCHMARK_TOPIC, 1024, 1024, rw)
        # 4.9.8: the cluster's topic keeps TopicConfig's default 16 queues, the broker's has one
        for name, queues in ((c.brokerClusterName, 16), (c.brokerName, 1)):
            if name and not validate_topic(name):
                self.table[name] = TopicConfig(name, queues, queues, rw | PERM_INHERIT)
        reply = reply_topic(c.brokerClusterName)
        if not validate_topic(reply):  # where request-reply messages go (4.9's MixAll.REPLY_TOPIC_POSTFIX)
            self.table[reply] = TopicConfig(reply, 1, 1, rw)
        if c.traceTopicEnable and not validate_topic(c.msgTraceTopicName):
            # 4.9: one queue, read and write, a system topic of this broker (clients with trace on send there)
            self.table[c.msgTraceTopicName] = TopicConfig(c.msgTraceTopicName, 1, 1, rw)

    def is_system_topic(self, topic: str) -> bool:
        c = self.config
        return (
            topic in SYSTEM_TOPICS
            or topic.startswith(SYSTEM_TOPIC_PREFIX)
            or topic in (c.brokerClusterName, c.brokerName, reply_topic(c.brokerClusterName))
            or (c.traceTopicEnable and topic == c.msgTraceTopicName)
        )

    # -- persistence ------------------------------------------------------------------------------
    def load(self) -> None:
        obj = read_json_file(self.path)
        if obj is None:
            return
        for name, cfg in (obj.get(self.TABLE_KEY) or {}).items():
            tc = TopicConfig.from_json({"topicName": name, **cfg})
            if _usable(tc.topic_name, self.path):
                self.table[tc.topic_name] = tc
        if not self.config.autoCreateTopicEnable:
            self.table.pop(AUTO_CREATE_TOPIC_KEY, None)
        self.data_version = read_version(obj.get("dataVersion") or {})
        log.info("loaded %d topic configs from %s", len(self.table), self.path)

    # encode() (VersionedTable): GET_ALL_TOPIC_CONFIG's body, and the topics.json content
    # (TopicConfigSerializeWrapper)
    def persist(self) -> None:
        atomic_write(self.path, self.encode())

    def _changed(self) -> None:
        self._next_version()
        try:
            self.persist()
        except OSError as e:
            log.error("cannot write %s: %s (topic config kept in memory)", self.path, e)
        for cb in list(self.listeners):
            try:
                cb()
            except Exception:
                log.exception("topic config listener failed")

    # -- lookups and changes ----------------------------------------------------------------------
    def get(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)

    def update(self, tc: TopicConfig) -> None:
        """Add or replace one topic; a name that fails validation raises InvalidName and changes
        nothing (the table is persisted and registered, so one bad name would poison both)."""
        self.update_many([tc])

    def update_many(self, tcs: list[TopicConfig]) -> None:
        """Add or replace several topics with ONE write of topics.json and one re-registration (a
        heartbeat naming a thousand groups must not rewrite the file a thousand times)."""
        for tc in tcs:
            validation.check_topic(tc.topic_name)
            if not 0 <= tc.read_queue_nums <= MAX_QUEUE_NUMS or not 0 <= tc.write_queue_nums <= MAX_QUEUE_NUMS:
                raise BadRequest(
                    f"topic {tc.topic_name}: queue numbers must be 0..{MAX_QUEUE_NUMS} "
                    f"(read {tc.read_queue_nums}, write {tc.write_queue_nums})"
                )
        new = {tc.topic_name for tc in tcs} - self.table.keys()
        limit = self.config.maxTopicCount
        if new and len(self.table) + len(new) > limit:
            raise BadRequest(
                f"the broker holds {len(self.table)} topics; creating {len(new)} more would pass maxTopicCount={limit}"
            )
        for tc in tcs:
            old = self.table.get(tc.topic_name)
            self.table[tc.topic_name] = tc
            log.info("topic config %s: %s -> %s", "updated" if old else "created", old, tc)
        if tcs:
            self._changed()

    def delete(self, topic: str) -> bool:
        """4.9's deleteTopicConfig: drop the topic (a new data version, written, announced)."""
        old = self.table.pop(topic, None)
        if old is None:
            return False
        log.info("delete topic config OK, topic: %s", old)
        self._changed()
        return True

    def create_retry_topics(self, groups: list[str]) -> None:
        """%RETRY%<group> for each group that has none yet (HEART_BEAT), in one change."""
        missing = sorted({g for g in groups if retry_topic(g) not in self.table})
        # the group's retryQueueNums, within what a topic here may have
        nums = {g: min(max(int(self.retry_queue_nums(g)), 1), MAX_QUEUE_NUMS) for g in missing}
        self.update_many([TopicConfig(retry_topic(g), nums[g], nums[g], PERM_READ | PERM_WRITE) for g in missing])

    def create_in_send(self, topic: str, default_topic: str, client_queue_nums: int) -> TopicConfig | None:
        """The topic a SEND_MESSAGE to an unknown topic gets, or None if it may not be created."""
        tc = self.table.get(topic)
        if tc is not None:
            return tc
        default = self.table.get(default_topic)
        if default is None:
            log.warning(
                "send to unknown topic %s: default topic %s does not exist, not creating it", topic, default_topic
            )
            return None
        perm = default.perm
        if default_topic == AUTO_CREATE_TOPIC_KEY and not self.config.autoCreateTopicEnable:
            perm = PERM_READ | PERM_WRITE
        if not perm & PERM_INHERIT:
            log.warning(
                "send to unknown topic %s: default topic %s has no inherit permission (perm %d)",
                topic,
                default_topic,
                perm,
            )
            return None
        queue_nums = max(0, min(client_queue_nums, default.write_queue_nums))
        tc = TopicConfig(
            topic, queue_nums, queue_nums, perm & ~PERM_INHERIT, default.topic_filter_type, default.topic_sys_flag
        )
        self.update(tc)
        return tc

    def create_in_send_back(
        self, topic: str, queue_nums: int = 1, perm: int = PERM_READ | PERM_WRITE, sys_flag: int = 0
    ) -> TopicConfig:
        """4.9's createTopicInSendMessageBackMethod: the topic as it is, or new with queue_nums read and
        write queues (a %RETRY% topic: its group's retryQueueNums; a %DLQ% topic: 1)."""
        tc = self.table.get(topic)
        if tc is None:
            tc = TopicConfig(topic, queue_nums, queue_nums, perm, topic_sys_flag=sys_flag)
            self.update(tc)
        return tc

    def replace_all(self, table: dict[str, TopicConfig], data_version: dict) -> bool:
        """Slave sync: take the master's table as is. Returns True if anything changed."""
        same = {n: t.to_json() for n, t in table.items()} == {n: t.to_json() for n, t in self.table.items()}
        if same and data_version == self.data_version:
            return False
        self.table = {n: t for n, t in table.items() if _usable(n, "the master's topic table")}
        self.data_version = read_version(data_version)
        try:
            self.persist()
        except OSError as e:
            log.error("cannot write %s: %s", self.path, e)
        for cb in list(self.listeners):
            cb()
        return True


# ours: a queue is a directory and a preallocated file; the reference has no bound, an admin typo
# of 100000 queues would fill the disk one send at a time.
MAX_QUEUE_NUMS = 1024


def _usable(name: str, source: str) -> bool:
    why = validation.topic_problem(name)
    if why:
        log.warning("ignoring topic from %s: %s", source, why)
    return not why
