"""DELETE_TOPIC_IN_BROKER, GET_TOPIC_STATS_INFO, GET_SYSTEM_TOPIC_LIST_FROM_BROKER, GET_TOPIC_CONFIG and
the store clean-ups, as 4.9.8 answers them."""

from __future__ import annotations

import json
import os

import pytest

from rmqha.broker.remoting import object_keys
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.store import queries

from .harness import TOPIC, Broker, props, pull, send_v1
from .test_hostile_requests import Wire


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path / "a")
    yield b
    b.stop()


def send(b, n, queue_id=0, topic=TOPIC):
    for i in range(n):
        assert (
            b.call(
                send_v1(
                    topic=topic, queue_id=queue_id, body=b"m%d" % i, properties=props(UNIQ_KEY=f"U{topic}{queue_id}{i}")
                )
            ).code
            == 0
        )


def req(code, **fields):
    return RemotingCommand.request(code, {k: str(v) for k, v in fields.items()})


def test_topic_stats_body_is_fastjson_with_message_queue_keys(broker):
    broker.clock.advance(1_700_000_000)  # store times are the clock's
    send(broker, 3, queue_id=1)
    r = broker.call(req(RequestCode.GET_TOPIC_STATS_INFO, topic=TOPIC))
    assert r.code == ResponseCode.SUCCESS
    text = r.body.decode()
    # the key is an object, as fastjson writes a HashMap<MessageQueue, TopicOffset>
    assert text.startswith(
        '{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"TopicTest"}:'
        '{"lastUpdateTimestamp":0,"maxOffset":0,"minOffset":0},'
    )
    table = object_keys.loads(r.body)["offsetTable"]
    assert len(table) == 4  # writeQueueNums of the auto-created topic
    key = json.dumps({"brokerName": "broker-a", "queueId": 1, "topic": TOPIC}, separators=(",", ":"))
    stored = queries.queue_store_time(broker.store, TOPIC, 1, 2)
    assert table[key] == {"lastUpdateTimestamp": stored, "maxOffset": 3, "minOffset": 0} and stored > 0
    assert object_keys.loads(r.body)["topicPutTps"] == 0.0  # 5.x's field; no stats sample taken yet


def test_topic_stats_of_an_unknown_topic(broker):
    r = broker.call(req(RequestCode.GET_TOPIC_STATS_INFO, topic="Nope"))
    assert (r.code, r.remark) == (ResponseCode.TOPIC_NOT_EXIST, "topic[Nope] not exist")


def test_delete_topic_removes_config_and_queues(broker, tmp_path):
    send(broker, 2)
    send(broker, 1, topic="Keep")
    cq_dir = tmp_path / "a" / "consumequeue" / TOPIC
    assert cq_dir.is_dir()
    r = broker.call(req(RequestCode.DELETE_TOPIC_IN_BROKER, topic=TOPIC))
    assert (r.code, r.remark) == (ResponseCode.SUCCESS, None)
    assert broker.server.topics.get(TOPIC) is None
    assert not cq_dir.exists() and (TOPIC, 0) not in broker.store.queues
    assert broker.store.max_queue_offset("Keep", 0) == 1
    with open(tmp_path / "a" / "config" / "topics.json") as fh:
        assert TOPIC not in json.load(fh)["topicConfigTable"]
    # sent again, the topic starts over at offset 0, as 4.9 (removeQueueFromTopicQueueTable)
    r = broker.call(send_v1(body=b"again", properties=props(UNIQ_KEY="again")))
    assert r.ext_fields["queueOffset"] == "0"
    assert broker.call(pull(offset=0)).code == ResponseCode.SUCCESS


def test_delete_refuses_system_topics_and_slaves(broker, tmp_path):
    for topic in ("TBW102", "SCHEDULE_TOPIC_XXXX", "broker-a", "DefaultCluster", "rmq_sys_x"):
        r = broker.call(req(RequestCode.DELETE_TOPIC_IN_BROKER, topic=topic))
        assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic.")
    assert broker.server.topics.get("TBW102") is not None
    slave = Broker(tmp_path / "s", brokerRole="SLAVE")
    try:
        r = slave.call(req(RequestCode.DELETE_TOPIC_IN_BROKER, topic="SELF_TEST_TOPIC"))
        assert r.code == ResponseCode.SYSTEM_ERROR and r.remark.startswith("Can't modify topic")
    finally:
        slave.stop()


def test_delete_without_topic_is_a_system_error(broker):
    r = Wire(broker).request(RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_BROKER, {}))
    assert r.code == ResponseCode.SYSTEM_ERROR and "topic" in r.remark


def test_system_topic_list(broker):
    r = broker.call(req(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER))
    topics = json.loads(r.body)["topicList"]
    assert {
        "TBW102",
        "SCHEDULE_TOPIC_XXXX",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "OFFSET_MOVED_EVENT",
        "broker-a",
        "DefaultCluster",
    } <= set(topics)
    assert TOPIC not in topics


def test_get_topic_config_5x(broker):
    send(broker, 1)
    r = broker.call(req(RequestCode.GET_TOPIC_CONFIG, topic=TOPIC))
    body = json.loads(r.body)
    assert (body["topicName"], body["readQueueNums"], body["writeQueueNums"], body["perm"]) == (TOPIC, 4, 4, 6)
    r = broker.call(req(RequestCode.GET_TOPIC_CONFIG, topic="Nope"))
    assert (r.code, r.remark) == (ResponseCode.TOPIC_NOT_EXIST, "No topic in this broker. topic: Nope")


def test_clean_unused_topic_drops_queues_without_config(broker, tmp_path):
    send(broker, 1)
    broker.server.topics.table.pop(TOPIC)  # config gone behind the store's back
    r = broker.call(req(RequestCode.CLEAN_UNUSED_TOPIC))
    assert r.code == ResponseCode.SUCCESS
    assert not os.path.exists(tmp_path / "a" / "consumequeue" / TOPIC)


def test_clean_expired_consume_queue_keeps_live_queues(broker):
    send(broker, 1)
    assert broker.call(req(RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE)).code == ResponseCode.SUCCESS
    assert broker.store.max_queue_offset(TOPIC, 0) == 1


def test_delete_expired_commitlog_asks_the_retention_service_for_20_runs(broker):
    # 4.9.8's executeDeleteFilesManually (what the files' age then allows: tests/unit/store/test_retention.py)
    assert broker.server.controller.retention.manual_times == 0
    r = broker.call(req(RequestCode.DELETE_EXPIRED_COMMITLOG))
    assert (r.code, r.remark) == (ResponseCode.SUCCESS, None)
    assert broker.server.controller.retention.manual_times == 20
