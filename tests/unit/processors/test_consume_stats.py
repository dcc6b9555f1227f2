"""GET_CONSUME_STATS, GET_BROKER_CONSUME_STATS, QUERY_TOPIC_CONSUME_BY_WHO, QUERY_CONSUME_TIME_SPAN,
QUERY_CONSUME_QUEUE and CLONE_GROUP_OFFSET, as 4.9.8 answers them."""

from __future__ import annotations

import json

import pytest

from rmqha.broker.remoting import object_keys
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.store import queries

from .harness import TOPIC, Broker, FakeContext, props, pull, send_v1
from .test_hostile_requests import Wire

NOW_S = 1_700_000_000


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path / "a")
    b.clock.advance(NOW_S)
    for i in range(3):
        assert b.call(send_v1(queue_id=0, body=b"m%d" % i, properties=props(TAGS="tagA", UNIQ_KEY=f"U{i}"))).code == 0
    b.server.topics.create_retry_topics(["CG"])
    b.server.offsets.commit("CG", TOPIC, 0, 1)
    b.server.offsets.commit("CG", "%RETRY%CG", 0, 0)
    yield b
    b.stop()


def req(code, **fields):
    return RemotingCommand.request(code, {k: str(v) for k, v in fields.items()})


def mq(topic, queue_id):
    return json.dumps(object_keys.message_queue(topic, "broker-a", queue_id), separators=(",", ":"))


def heartbeat(broker, group, topic, ctx=None):
    hb = {
        "clientID": "c1",
        "consumerDataSet": [
            {
                "groupName": group,
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "subscriptionDataSet": [{"topic": topic, "subString": "*", "subVersion": 1}],
            }
        ],
    }
    broker.call(RemotingCommand.request(RequestCode.HEART_BEAT, body=json.dumps(hb).encode()), ctx or FakeContext())


def test_consume_stats_of_a_group_includes_its_retry_topic(broker):
    r = broker.call(req(RequestCode.GET_CONSUME_STATS, consumerGroup="CG"))
    assert r.code == ResponseCode.SUCCESS
    body = object_keys.loads(r.body)
    assert body["consumeTps"] == 0.0
    table = body["offsetTable"]
    assert sorted(table) == sorted([mq(TOPIC, q) for q in range(4)] + [mq("%RETRY%CG", 0)])
    first = queries.queue_store_time(broker.store, TOPIC, 0, 0)
    assert table[mq(TOPIC, 0)] == {"brokerOffset": 3, "consumerOffset": 1, "lastTimestamp": first, "pullOffset": 1}
    assert first >= NOW_S * 1000
    assert table[mq(TOPIC, 1)] == {"brokerOffset": 0, "consumerOffset": 0, "lastTimestamp": 0, "pullOffset": 0}
    assert r.body.startswith(b'{"consumeTps":0.0,"offsetTable":{{"brokerName":"broker-a"')


def test_consume_stats_of_one_topic_and_an_online_group_without_it(broker):
    r = broker.call(req(RequestCode.GET_CONSUME_STATS, consumerGroup="CG", topic=TOPIC))
    assert len(object_keys.loads(r.body)["offsetTable"]) == 4
    heartbeat(broker, "CG", "Elsewhere")  # online, subscribed to another topic only: left out, as 4.9
    r = broker.call(req(RequestCode.GET_CONSUME_STATS, consumerGroup="CG", topic=TOPIC))
    assert object_keys.loads(r.body)["offsetTable"] == {}


def test_consume_stats_without_group_is_a_system_error(broker):
    r = Wire(broker).request(RemotingCommand.request(RequestCode.GET_CONSUME_STATS, {}))
    assert r.code == ResponseCode.SYSTEM_ERROR and "consumerGroup" in r.remark


def test_broker_consume_stats(broker):
    r = broker.call(req(RequestCode.GET_BROKER_CONSUME_STATS, isOrder="false"))
    assert object_keys.loads(r.body)["totalDiff"] == 0  # CG has offsets but no subscription group yet
    broker.call(pull(group="CG", sys_flag=0x4, offset=1))  # a pull creates it, as 4.9
    r = broker.call(req(RequestCode.GET_BROKER_CONSUME_STATS, isOrder="false"))
    body = object_keys.loads(r.body)
    assert body["brokerAddr"] == "127.0.0.1:10911"
    assert body["totalDiff"] == 2  # TopicTest queue 0: 3 - 1; the retry topic is empty
    assert body["totalInflightDiff"] == 0
    by_group = {g: stats for entry in body["consumeStatsList"] for g, stats in entry.items()}
    assert "TOOLS_CONSUMER" in by_group and by_group["TOOLS_CONSUMER"] == []
    assert [sorted(s["offsetTable"]) for s in by_group["CG"]] == [
        sorted([mq("%RETRY%CG", 0)]),
        sorted(mq(TOPIC, q) for q in range(4)),
    ]
    r = broker.call(req(RequestCode.GET_BROKER_CONSUME_STATS, isOrder="true"))
    assert object_keys.loads(r.body)["totalDiff"] == 0  # no orderly topic


def test_topic_consumed_by_offsets_and_online_groups(broker):
    heartbeat(broker, "LIVE", TOPIC)
    r = broker.call(req(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, topic=TOPIC))
    assert json.loads(r.body) == {"groupList": ["CG", "LIVE"]}


def test_consume_time_span(broker):
    r = broker.call(req(RequestCode.QUERY_CONSUME_TIME_SPAN, topic=TOPIC, group="CG"))
    spans = json.loads(r.body)["consumeTimeSpanSet"]
    assert len(spans) == 4
    t0, t1, t2 = (queries.queue_store_time(broker.store, TOPIC, 0, i) for i in range(3))
    assert spans[0] == {
        "messageQueue": {"brokerName": "broker-a", "queueId": 0, "topic": TOPIC},
        "minTimeStamp": t0,
        "maxTimeStamp": t2,
        "consumeTimeStamp": t0,
        "delayTime": NOW_S * 1000 - t1,
    }
    # an empty queue without an offset: 4.9 computes now - getMessageStoreTimeStamp(-1) = now - (-1)
    assert spans[1]["minTimeStamp"] == -1 and spans[1]["delayTime"] == NOW_S * 1000 + 1
    r = broker.call(req(RequestCode.QUERY_CONSUME_TIME_SPAN, topic="Nope", group="CG"))
    assert r.code == ResponseCode.TOPIC_NOT_EXIST


def test_query_consume_queue(broker):
    r = broker.call(req(RequestCode.QUERY_CONSUME_QUEUE, topic=TOPIC, queueId=0, index=1, count=5, consumerGroup="CG"))
    body = json.loads(r.body)
    assert (body["minQueueIndex"], body["maxQueueIndex"], body["filterData"]) == (0, 3, "CG@TopicTest is not online!")
    units = [broker.store.queues[(TOPIC, 0)].get(i) for i in (1, 2)]
    assert body["queueData"] == [
        {"eval": False, "physicOffset": p, "physicSize": s, "tagsCode": t} for p, s, t in units
    ]
    r = broker.call(req(RequestCode.QUERY_CONSUME_QUEUE, topic=TOPIC, queueId=0, index=7, count=1))
    assert (r.code, r.remark, r.body) == (ResponseCode.SUCCESS, "Index 7 of 0@TopicTest is not exist!", b"")
    r = broker.call(req(RequestCode.QUERY_CONSUME_QUEUE, topic=TOPIC, queueId=9, index=0, count=1))
    assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, "9@TopicTest is not exist!")


def test_clone_group_offset(broker):
    r = broker.call(req(RequestCode.CLONE_GROUP_OFFSET, srcGroup="CG", destGroup="COPY", topic=TOPIC, offline="false"))
    assert r.code == ResponseCode.SUCCESS
    assert broker.server.offsets.query("COPY", TOPIC, 0) == 1
    assert broker.server.offsets.query("COPY", "%RETRY%CG", 0) == -1
    broker.call(req(RequestCode.CLONE_GROUP_OFFSET, srcGroup="CG", destGroup="ALL", offline="true"))
    assert broker.server.offsets.topics_of_group("ALL") == {TOPIC, "%RETRY%CG"}
