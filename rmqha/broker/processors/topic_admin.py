"""Topic administration beyond UPDATE_AND_CREATE_TOPIC: DELETE_TOPIC_IN_BROKER (215),
GET_TOPIC_STATS_INFO (202), GET_SYSTEM_TOPIC_LIST_FROM_BROKER (305), 5.x's GET_TOPIC_CONFIG (351), and
the store clean-ups CLEAN_UNUSED_TOPIC (316), CLEAN_EXPIRED_CONSUMEQUEUE (306) and
DELETE_EXPIRED_COMMITLOG (329), as 4.9.8's AdminBrokerProcessor answers them.

Deleting a topic removes its config and then, as 4.9's cleanUnusedTopic, the consume queues of every
topic that has no config (SCHEDULE_TOPIC_XXXX and RMQ_SYS_TRANS_OP_HALF_TOPIC excepted). The commit log
keeps the records until its files go; consumer offsets are kept, as 4.9.8 keeps them.
"""

from __future__ import annotations

import logging
import os
import shutil

from rmqha.broker.support import validation
from rmqha.broker.remoting import json_body, object_keys
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.remoting.handlers import Processors, handles
from rmqha.broker.remoting.object_keys import ObjectKeyed, message_queue
from rmqha.broker.observability.stats import TOPIC_PUT_NUMS
from rmqha.broker.store import queries

from rmqha.broker.managers.topics import (
    SCHEDULE_TOPIC,
    SLAVE_REFUSES,
    SYSTEM_TOPICS,
    TopicConfigManager,
    validate_topic,
)

log = logging.getLogger("rmqha.broker.topic_admin")

TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
KEPT_WITHOUT_CONFIG = frozenset({SCHEDULE_TOPIC, TRANS_OP_HALF_TOPIC})  # cleanUnusedTopic never drops these


def store_time(store, topic: str, queue_id: int, offset: int) -> int:
    """4.9's getMessageStoreTimeStamp: the store time of a queue's message, -1 when there is none."""
    ts = queries.queue_store_time(store, topic, queue_id, offset)
    return -1 if ts is None else ts


def destroy_queue(store, topic: str, queue_id: int) -> None:
    """Close a consume queue, delete its files and forget its next offset (4.9's cq.destroy() and
    removeQueueFromTopicQueueTable). Units still pending dispatch are written first, so none lands
    in a closed queue afterwards."""
    store.dispatch_pending()
    cq = store.queues.pop((topic, queue_id), None)
    store.queue_offsets.pop((topic, queue_id), None)
    store.lease.forget((topic, queue_id))  # a queue made again later starts at 0, as in 4.9
    if cq is None:
        return
    cq.close()
    shutil.rmtree(os.path.join(store.cq_root, topic, str(queue_id)), ignore_errors=True)
    topic_dir = os.path.join(store.cq_root, topic)
    if os.path.isdir(topic_dir) and not os.listdir(topic_dir):
        os.rmdir(topic_dir)
    log.info("consume queue %s:%d destroyed", topic, queue_id)


def clean_unused_topics(store, keep) -> list[str]:
    """4.9's cleanUnusedTopic: destroy the queues of every topic not in `keep`. The topics cleaned."""
    gone = sorted({t for t, _ in store.queues if t not in keep and t not in KEPT_WITHOUT_CONFIG})
    for topic, queue_id in [k for k in store.queues if k[0] in gone]:
        destroy_queue(store, topic, queue_id)
    if gone:
        log.info("cleanUnusedTopic: %s destroyed", ", ".join(gone))
    return gone


def clean_expired_queues(store) -> int:
    """4.9's cleanExpiredConsumerQueue: destroy queues whose every record left the commit log."""
    store.dispatch_pending()
    min_phys = store.commitlog.min_offset
    cleaned = 0
    for (topic, queue_id), cq in list(store.queues.items()):
        if topic == SCHEDULE_TOPIC or cq.max_index <= cq.min_index:
            continue  # 4.9 skips an empty queue ("maybe ConsumeQueue was created just now")
        last = cq.get(cq.max_index - 1)
        if last is not None and last[0] + last[1] <= min_phys:
            destroy_queue(store, topic, queue_id)
            cleaned += 1
    return cleaned


class TopicAdminProcessors(Processors):
    def __init__(self, config, topics: TopicConfigManager, store, stats=None, retention=lambda: None):
        self.config = config
        self.stats = stats  # BrokerStats: topicPutTps
        self.topics = topics
        self.store = store
        self.retention = retention  # () -> the store's RetentionService, None when there is none (DLedger)

    @handles(RequestCode.DELETE_TOPIC_IN_BROKER)
    def delete_topic(self, req: RemotingCommand, ctx) -> RemotingCommand:
        if not self.config.is_master:
            return req.make_response(ResponseCode.SYSTEM_ERROR, SLAVE_REFUSES)
        topic = req.get_str("topic")
        why = validate_topic(topic)
        if why:
            return req.make_response(ResponseCode.SYSTEM_ERROR, why)
        if self.topics.is_system_topic(topic):
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic.")
        self.topics.delete(topic)
        clean_unused_topics(self.store, set(self.topics.table))
        return req.make_response()

    @handles(RequestCode.GET_TOPIC_STATS_INFO)
    def get_topic_stats_info(self, req: RemotingCommand, ctx) -> RemotingCommand:
        topic = req.get_str("topic")
        tc = self.topics.get(topic)
        if tc is None:
            return req.make_response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{validation.shown(topic)}] not exist")
        pairs = []
        for queue_id in range(tc.write_queue_nums):
            low = max(self.store.min_queue_offset(topic, queue_id), 0)
            high = max(self.store.max_queue_offset(topic, queue_id), 0)
            last = store_time(self.store, topic, queue_id, high - 1) if high > 0 else 0
            pairs.append(
                (
                    message_queue(topic, self.config.brokerName, queue_id),
                    {"lastUpdateTimestamp": last, "maxOffset": high, "minOffset": low},
                )
            )
        # topicPutTps is 5.x's (4.9's tools ignore it, clients modelled on 5.x require it)
        body = {"offsetTable": ObjectKeyed(pairs), "topicPutTps": self._put_tps(topic)}
        return req.make_response(body=object_keys.dumps(body))

    def _put_tps(self, topic: str) -> float:
        item = self.stats.table.item(TOPIC_PUT_NUMS, topic) if self.stats is not None else None
        return float(item.window("minute")["tps"]) if item is not None else 0.0

    def system_topics(self) -> list[str]:
        """4.9's TopicValidator.getSystemTopicSet: the fixed set plus what this broker added at start."""
        c = self.config
        names = set(SYSTEM_TOPICS) | {n for n in (c.brokerClusterName, c.brokerName) if n}
        if c.traceTopicEnable:
            names.add(c.msgTraceTopicName)
        return sorted(names)

    @handles(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER)
    def get_system_topic_list(self, req: RemotingCommand, ctx) -> RemotingCommand:
        return req.make_response(body=json_body.dumps({"topicList": self.system_topics()}))

    @handles(RequestCode.GET_TOPIC_CONFIG)
    def get_topic_config(self, req: RemotingCommand, ctx) -> RemotingCommand:
        """5.x: header topic (and lo, for static topics, which this broker has none of); body the
        TopicConfigAndQueueMapping, i.e. the TopicConfig with no mappingDetail."""
        topic = req.get_str("topic")
        tc = self.topics.get(topic)
        if tc is None:
            return req.make_response(
                ResponseCode.TOPIC_NOT_EXIST, f"No topic in this broker. topic: {validation.shown(topic)}"
            )
        return req.make_response(body=json_body.dumps(tc.to_json()))

    @handles(RequestCode.CLEAN_UNUSED_TOPIC)
    def clean_unused_topic(self, req: RemotingCommand, ctx) -> RemotingCommand:
        clean_unused_topics(self.store, set(self.topics.table))
        return req.make_response()

    @handles(RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE)
    def clean_expired_consume_queue(self, req: RemotingCommand, ctx) -> RemotingCommand:
        clean_expired_queues(self.store)
        return req.make_response()

    @handles(RequestCode.DELETE_EXPIRED_COMMITLOG)
    def delete_expired_commit_log(self, req: RemotingCommand, ctx) -> RemotingCommand:
        """4.9's executeDeleteFilesManually: the next 20 cleaning runs delete the commit-log files past
        fileReservedTime whatever the hour (rmqha/broker/store/retention.py); SUCCESS at once."""
        retention = self.retention()
        if retention is None:
            return req.make_response(
                ResponseCode.SYSTEM_ERROR,
                "this broker does not delete DLedger's files yet (docs/dledger.md, Not yet); nothing was deleted",
            )
        log.warning("invoke deleteExpiredCommitLog (from %s)", getattr(ctx, "peer_address", "?"))
        retention.execute_delete_files_manually()
        return req.make_response()
