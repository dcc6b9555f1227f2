import json
import os

import pytest

from rmqha.broker.namesrv.register_body import TopicConfig
from rmqha.broker.managers.consumer_offsets import ConsumerOffsetManager
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand

from .harness import TOPIC, Broker, send_v1


def update_offset(group, topic, qid, offset):
    return RemotingCommand.request(
        RequestCode.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": group, "topic": topic, "queueId": qid, "commitOffset": offset},
    )


def query_offset(group, topic, qid):
    return RemotingCommand.request(
        RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": qid}
    )


def test_offsets_update_query_and_survive_a_restart(tmp_path):
    b = Broker(tmp_path / "a")
    assert b.call(update_offset("G", TOPIC, 1, 42)).code == ResponseCode.SUCCESS
    r = b.call(query_offset("G", TOPIC, 1))
    assert r.code == ResponseCode.SUCCESS and r.ext_fields["offset"] == "42"
    b.stop()
    path = tmp_path / "a" / "config" / "consumerOffset.json"
    assert json.loads(path.read_text()) == {"offsetTable": {f"{TOPIC}@G": {"1": 42}}}
    assert not os.path.exists(str(path) + ".tmp")
    b2 = Broker(tmp_path / "a")
    try:
        r = b2.call(query_offset("G", TOPIC, 1))
        assert r.ext_fields["offset"] == "42"
    finally:
        b2.stop()


def test_offsets_are_flushed_periodically(tmp_path):
    b = Broker(tmp_path / "a")
    try:
        b.call(update_offset("G", TOPIC, 0, 7))
        path = tmp_path / "a" / "config" / "consumerOffset.json"
        assert not path.exists()
        b.clock.advance(5.1)
        assert json.loads(path.read_text())["offsetTable"][f"{TOPIC}@G"] == {"0": 7}
    finally:
        b.stop()


def test_fastjson_offset_file_is_read(tmp_path):
    os.makedirs(tmp_path / "config")
    (tmp_path / "config" / "consumerOffset.json").write_text('{"offsetTable":{"T@G":{0:5,1:6}}}')
    m = ConsumerOffsetManager(str(tmp_path), clock=None)
    m.load()
    assert m.query("G", "T", 0) == 5 and m.query("G", "T", 1) == 6 and m.query("G", "T", 2) == -1


def test_query_without_stored_offset_answers_zero_for_a_queue_starting_at_zero(tmp_path):
    b = Broker(tmp_path / "a")
    try:
        r = b.call(query_offset("New", TOPIC, 0))
        assert r.code == ResponseCode.SUCCESS and r.ext_fields["offset"] == "0"
        b.store.min_queue_offset = lambda t, q: 10  # a queue whose head was deleted
        assert b.call(query_offset("New", TOPIC, 0)).code == ResponseCode.QUERY_NOT_FOUND
    finally:
        b.stop()


def test_topics_auto_created_are_persisted_and_reloaded(tmp_path):
    b = Broker(tmp_path / "a")
    assert {"TBW102", "SELF_TEST_TOPIC", "DefaultCluster", "broker-a"} <= set(b.server.topics.table)
    assert b.server.topics.get("TBW102").perm == 7
    b.call(send_v1(topic="AutoT"))
    v = b.server.topics.data_version["counter"]
    b.stop()
    saved = json.loads((tmp_path / "a" / "config" / "topics.json").read_text())
    assert saved["topicConfigTable"]["AutoT"]["writeQueueNums"] == 4
    b2 = Broker(tmp_path / "a")
    try:
        assert b2.server.topics.get("AutoT").read_queue_nums == 4
        assert b2.server.topics.data_version["counter"] == v
    finally:
        b2.stop()


def test_update_and_create_topic(tmp_path):
    b = Broker(tmp_path / "a")
    try:
        req = RemotingCommand.request(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {
                "topic": "Made",
                "defaultTopic": "TBW102",
                "readQueueNums": 2,
                "writeQueueNums": 3,
                "perm": 6,
                "topicFilterType": "\x00",
                "order": "0",
            },
        )
        assert b.call(req).code == ResponseCode.SUCCESS
        tc = b.server.topics.get("Made")
        assert (tc.read_queue_nums, tc.write_queue_nums, tc.topic_filter_type) == (2, 3, "SINGLE_TAG")
        changed = []
        b.server.topics.listeners.append(lambda: changed.append(1))
        b.server.topics.update(TopicConfig("Other", 1, 1))
        assert changed == [1]
    finally:
        b.stop()


def test_heartbeat_creates_retry_topic_on_master_only(tmp_path):
    hb = {
        "clientID": "c1",
        "consumerDataSet": [
            {"groupName": "CG", "consumeType": 1, "messageModel": 1, "consumeFromWhere": 0, "subscriptionDataSet": []}
        ],
    }
    req = RemotingCommand.request(RequestCode.HEART_BEAT, body=json.dumps(hb).encode())
    b = Broker(tmp_path / "a")
    s = Broker(tmp_path / "s", brokerRole="SLAVE")
    try:
        b.call(req)
        tc = b.server.topics.get("%RETRY%CG")
        assert tc is not None and (tc.read_queue_nums, tc.perm) == (1, 6)
        s.call(req)
        assert s.server.topics.get("%RETRY%CG") is None
    finally:
        b.stop()
        s.stop()


def test_corrupt_topics_file_refuses_to_start(tmp_path):
    from rmqha.broker.store.mapped_file import StoreError

    os.makedirs(tmp_path / "a" / "config")
    (tmp_path / "a" / "config" / "topics.json").write_text("{not json")
    with pytest.raises(StoreError, match="topics.json"):
        Broker(tmp_path / "a")


def _create(b, topic):
    return b.call(
        RemotingCommand.request(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {"topic": topic, "readQueueNums": 1, "writeQueueNums": 1, "perm": 6, "topicFilterType": "SINGLE_TAG"},
        )
    )


@pytest.mark.parametrize(
    "topic",
    [
        "TBW102",
        "SCHEDULE_TOPIC_XXXX",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRACE_TOPIC",
        "rmq_sys_anything",
        "DefaultCluster",
        "broker-a",
        "SELF_TEST_TOPIC",
    ],
)
def test_system_topics_cannot_be_created_or_redefined(tmp_path, topic):
    b = Broker(tmp_path / "b")
    try:
        before = b.server.topics.get(topic)
        r = _create(b, topic)
        assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic.")
        assert b.server.topics.get(topic) == before  # TBW102 keeps its INHERIT perm: auto-creation still works
    finally:
        b.stop()


def test_a_slave_refuses_topic_changes(tmp_path):
    b = Broker(tmp_path / "b", brokerRole="SLAVE")
    try:
        r = _create(b, "Made")
        assert r.code == ResponseCode.SYSTEM_ERROR and r.remark.startswith("Can't modify topic")
        assert b.server.topics.get("Made") is None
    finally:
        b.stop()


def test_trace_topic_enable_creates_the_trace_topic(tmp_path):
    b = Broker(tmp_path / "b", traceTopicEnable="true")
    try:
        tc = b.server.topics.get("RMQ_SYS_TRACE_TOPIC")
        assert (tc.read_queue_nums, tc.write_queue_nums, tc.perm) == (1, 1, 6)
    finally:
        b.stop()
    b = Broker(tmp_path / "c", traceTopicEnable="true", msgTraceTopicName="MyTrace")
    try:
        assert b.server.topics.get("MyTrace") is not None and b.server.topics.get("RMQ_SYS_TRACE_TOPIC") is None
        assert _create(b, "MyTrace").code == ResponseCode.SYSTEM_ERROR
    finally:
        b.stop()


# 4.9.8's TopicConfigManager constructor, as a 4.9.8 broker (brokerClusterName=FidCluster,
# brokerName=fid-broker, defaults otherwise) answers GET_ALL_TOPIC_CONFIG right after its start:
# name -> (readQueueNums, writeQueueNums, perm). RMQ_SYS_TRANS_HALF_TOPIC comes later, at the first
# transaction check (transactionCheckInterval), in 4.9.8 and here.
SYSTEM_TOPICS_4_9_8 = {
    "BenchmarkTest": (1024, 1024, 6),
    "FidCluster": (16, 16, 7),
    "FidCluster_REPLY_TOPIC": (1, 1, 6),
    "OFFSET_MOVED_EVENT": (1, 1, 6),
    "SCHEDULE_TOPIC_XXXX": (18, 18, 6),
    "SELF_TEST_TOPIC": (1, 1, 6),
    "TBW102": (8, 8, 7),
    "fid-broker": (1, 1, 7),
}


def test_the_system_topics_at_start_are_4_9_8s(tmp_path):
    b = Broker(tmp_path / "b", brokerClusterName="FidCluster", brokerName="fid-broker")
    try:
        r = b.call(RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG))
        table = json.loads(r.body)["topicConfigTable"]
        # 5.x's POP revive topic is not among them: the first POP creates it (tests/unit/processors/test_pop.py)
        got = {name: (t["readQueueNums"], t["writeQueueNums"], t["perm"]) for name, t in table.items()}
        assert got == SYSTEM_TOPICS_4_9_8
        for name in SYSTEM_TOPICS_4_9_8:
            assert b.server.topics.is_system_topic(name), name
    finally:
        b.stop()
