import json

import pytest

from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.store import queries, record

from .harness import TOPIC, Broker, decode_records, props, send_v1


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path / "a")
    yield b
    b.stop()


def q(code, **fields):
    return RemotingCommand.request(code, fields)


def send_at(b, ts, n=1, queue_id=0):
    b.store.now_ms = lambda: ts
    for _ in range(n):
        assert b.call(send_v1(queue_id=queue_id)).code == ResponseCode.SUCCESS


def test_max_min_offset_and_earliest_time(broker):
    send_at(broker, 1000, 3)
    assert broker.call(q(RequestCode.GET_MAX_OFFSET, topic=TOPIC, queueId=0)).ext_fields["offset"] == "3"
    assert broker.call(q(RequestCode.GET_MIN_OFFSET, topic=TOPIC, queueId=0)).ext_fields["offset"] == "0"
    assert broker.call(q(RequestCode.GET_MAX_OFFSET, topic="None", queueId=0)).ext_fields["offset"] == "0"
    r = broker.call(q(RequestCode.GET_EARLIEST_MSG_STORETIME, topic=TOPIC, queueId=0))
    assert r.ext_fields["timestamp"] == "1000"
    r = broker.call(q(RequestCode.GET_EARLIEST_MSG_STORETIME, topic=TOPIC, queueId=3))
    assert r.ext_fields["timestamp"] == "-1"


def test_search_offset_by_timestamp(broker):
    for ts in (100, 200, 200, 300, 400):
        send_at(broker, ts)

    def search(ts):
        return int(
            broker.call(q(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, topic=TOPIC, queueId=0, timestamp=ts)).ext_fields[
                "offset"
            ]
        )

    assert [search(t) for t in (50, 100, 150, 200, 250, 300, 400, 401)] == [0, 0, 1, 1, 3, 3, 4, 5]
    assert queries.search_offset_by_timestamp(broker.store, "None", 0, 1) == 0
    assert queries.queue_store_time(broker.store, TOPIC, 0, 3) == 300


def test_view_message_by_id(broker):
    r = broker.call(send_v1(body=b"look at me"))
    _host, phys = record.parse_offset_msg_id(r.ext_fields["msgId"])
    v = broker.call(q(RequestCode.VIEW_MESSAGE_BY_ID, offset=phys))
    assert v.code == ResponseCode.SUCCESS and decode_records(v.body)[0].body == b"look at me"
    assert broker.call(q(RequestCode.VIEW_MESSAGE_BY_ID, offset=phys + 1)).code == ResponseCode.SYSTEM_ERROR
    assert queries.record_by_offset_msg_id(broker.store, r.ext_fields["msgId"])[1].body == b"look at me"


def test_admin_bodies(broker):
    broker.call(send_v1())
    broker.server.offsets.commit("G", TOPIC, 2, 9)
    t = json.loads(broker.call(q(RequestCode.GET_ALL_TOPIC_CONFIG)).body)
    assert t["topicConfigTable"][TOPIC]["readQueueNums"] == 4 and "counter" in t["dataVersion"]
    o = json.loads(broker.call(q(RequestCode.GET_ALL_CONSUMER_OFFSET)).body)
    assert o == {"offsetTable": {f"{TOPIC}@G": {"2": 9}}}
    info = json.loads(broker.call(q(RequestCode.GET_BROKER_RUNTIME_INFO)).body)["table"]
    assert info["brokerVersionDesc"] == "V4_9_8" and int(info["commitLogMaxOffset"]) > 0
    assert all(isinstance(v, str) for v in info.values())


def test_unknown_code_is_not_in_the_registry(broker):
    assert broker.server.registry.get(9999) is None and broker.server.registry.reply_to_unknown


def send_back(phys, group="CG", delay=0, max_times=16):
    return q(
        RequestCode.CONSUMER_SEND_MSG_BACK,
        offset=phys,
        group=group,
        delayLevel=delay,
        originMsgId="",
        originTopic=TOPIC,
        unitMode="0",
        maxReconsumeTimes=max_times,
    )


def test_send_back_goes_to_retry_then_dlq(broker):
    r = broker.call(send_v1(body=b"fail me", properties=props(TAGS="t", UNIQ_KEY="U9")))
    msg_id = r.ext_fields["msgId"]
    _h, phys = record.parse_offset_msg_id(msg_id)
    assert broker.call(send_back(phys)).code == ResponseCode.SUCCESS
    # RECONSUME_LATER (level 0) -> level 3 + reconsumeTimes = 3 (10 s): parked in SCHEDULE_TOPIC_XXXX
    assert broker.store.max_queue_offset("%RETRY%CG", 0) == 0
    assert broker.store.max_queue_offset("SCHEDULE_TOPIC_XXXX", 2) == 1
    broker.clock.advance(10)
    res = broker.store.get_messages("%RETRY%CG", 0, 0, 32)
    [m] = [record.scan(x).message for x in res.records]
    assert m.body == b"fail me" and m.reconsume_times == 1
    assert m.properties["RETRY_TOPIC"] == TOPIC and m.properties["ORIGIN_MESSAGE_ID"] == msg_id
    assert m.properties["UNIQ_KEY"] == "U9" and "DELAY" not in m.properties
    assert m.properties["REAL_TOPIC"] == "%RETRY%CG" and m.properties["REAL_QID"] == "0"
    assert broker.call(send_back(m.physical_offset, max_times=1)).code == ResponseCode.SUCCESS
    assert broker.store.max_queue_offset("%DLQ%CG", 0) == 1
    assert broker.call(send_back(10**9)).code == ResponseCode.SYSTEM_ERROR
