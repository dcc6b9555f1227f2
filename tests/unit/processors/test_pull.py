import pytest
from twisted.internet import defer

from rmqha.broker.remoting.codes import ResponseCode
from rmqha.broker.store import record
from rmqha.broker.processors.pull import FLAG_SUBSCRIPTION

from .harness import TOPIC, Broker, FakeContext, decode_records, props, pull, send_v1


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path / "a")
    yield b
    b.stop()


def send(b, n=1, queue_id=0, tags="tagA", start=0):
    for i in range(start, start + n):
        r = b.call(send_v1(queue_id=queue_id, body=f"m{i}".encode(), properties=props(TAGS=tags, UNIQ_KEY=f"U{i}")))
        assert r.code == ResponseCode.SUCCESS


def test_found_returns_raw_records_and_offsets(broker):
    send(broker, 3)
    resp = broker.call(pull(offset=0))
    assert resp.code == ResponseCode.SUCCESS and resp.remark == "FOUND"
    f = resp.ext_fields
    assert (f["nextBeginOffset"], f["minOffset"], f["maxOffset"], f["suggestWhichBrokerId"]) == ("3", "0", "3", "0")
    msgs = decode_records(resp.body)
    assert [m.body for m in msgs] == [b"m0", b"m1", b"m2"]
    # byte for byte what the commit log holds
    assert resp.body == b"".join(broker.store.get_messages(TOPIC, 0, 0, 32).records)


def test_max_msgs_and_tag_filter(broker):
    send(broker, 2, tags="tagA")
    send(broker, 2, tags="tagB", start=2)
    resp = broker.call(pull(offset=0, max_msgs=1))
    assert len(decode_records(resp.body)) == 1 and resp.ext_fields["nextBeginOffset"] == "1"
    resp = broker.call(pull(offset=0, subscription="tagB || tagC"))
    assert [m.body for m in decode_records(resp.body)] == [b"m2", b"m3"]
    resp = broker.call(pull(offset=0, subscription="tagC"))
    assert resp.code == ResponseCode.PULL_RETRY_IMMEDIATELY and resp.ext_fields["nextBeginOffset"] == "4"


def test_offset_statuses(broker):
    # no suspension, so each status is answered at once
    send(broker, 2)
    r = broker.call(pull(offset=2, sys_flag=FLAG_SUBSCRIPTION))
    assert r.code == ResponseCode.PULL_NOT_FOUND and r.remark == "OFFSET_OVERFLOW_ONE"
    r = broker.call(pull(offset=9, sys_flag=FLAG_SUBSCRIPTION))
    assert r.code == ResponseCode.PULL_OFFSET_MOVED and r.ext_fields["nextBeginOffset"] == "2"
    r = broker.call(pull(queue_id=1, offset=0, sys_flag=FLAG_SUBSCRIPTION))  # empty queue
    assert r.code == ResponseCode.PULL_NOT_FOUND
    r = broker.call(pull(queue_id=1, offset=5, sys_flag=FLAG_SUBSCRIPTION))
    assert r.code == ResponseCode.PULL_OFFSET_MOVED


def test_unknown_topic_and_bad_queue(broker):
    assert broker.call(pull(topic="Nope")).code == ResponseCode.TOPIC_NOT_EXIST
    send(broker)
    assert broker.call(pull(queue_id=7)).code == ResponseCode.SYSTEM_ERROR


def test_long_poll_is_answered_when_a_message_arrives(broker):
    send(broker, 1)
    d = broker.call(pull(offset=1))
    assert isinstance(d, defer.Deferred) and len(broker.server.pull.hold_service) == 1
    got = []
    d.addCallback(got.append)
    broker.clock.advance(5)
    assert not got
    send(broker, 1, start=1)
    broker.clock.advance(0)
    assert got and got[0].code == ResponseCode.SUCCESS
    assert [m.body for m in decode_records(got[0].body)] == [b"m1"]
    assert len(broker.server.pull.hold_service) == 0


def test_long_poll_other_queue_does_not_wake_it(broker):
    send(broker, 1)
    d = broker.call(pull(offset=1))
    got = []
    d.addCallback(got.append)
    send(broker, 1, queue_id=2)
    broker.clock.advance(0)
    assert not got


def test_long_poll_times_out_with_not_found(broker):
    send(broker, 1)
    d = broker.call(pull(offset=1, suspend_ms=2000))
    got = []
    d.addCallback(got.append)
    broker.clock.advance(1.9)
    assert not got
    broker.clock.advance(0.2)
    assert got and got[0].code == ResponseCode.PULL_NOT_FOUND


def test_no_suspend_flag_answers_at_once(broker):
    send(broker, 1)
    r = broker.call(pull(offset=1, sys_flag=0x4))
    assert r.code == ResponseCode.PULL_NOT_FOUND


def test_closed_connection_drops_its_held_pull(broker):
    send(broker, 1)
    ctx = FakeContext()
    broker.call(pull(offset=1), ctx)
    assert len(broker.server.pull.hold_service) == 1
    ctx.close()
    assert len(broker.server.pull.hold_service) == 0


def test_commit_offset_flag(broker):
    send(broker, 3)
    broker.call(pull(offset=2, sys_flag=0x1 | 0x4, commit_offset=2, group="G1"))
    assert broker.server.offsets.query("G1", TOPIC, 0) == 2
    broker.call(pull(offset=2, sys_flag=0x4, commit_offset=3, group="G1"))
    assert broker.server.offsets.query("G1", TOPIC, 0) == 2


def test_slave_does_not_commit_and_turns_offset_moved_into_retry(tmp_path):
    b = Broker(tmp_path / "s", brokerRole="SLAVE")
    try:
        m = record.Message(topic=TOPIC, body=b"x", properties={"UNIQ_KEY": "u"})
        # give the slave data as replication would
        enc = record.encode(m)
        enc.finish(0, 0)
        b.store.append_replicated(0, bytes(enc.buf))
        b.clock.advance(0)
        assert b.store.max_queue_offset(TOPIC, 0) == 1
        r = b.call(pull(offset=0, sys_flag=0x1 | 0x4, commit_offset=1, group="G"))
        assert r.code == ResponseCode.SUCCESS  # no topic config on the slave yet: served anyway
        assert b.server.offsets.query("G", TOPIC, 0) == -1
        r = b.call(pull(offset=9, sys_flag=0x4))
        assert r.code == ResponseCode.PULL_RETRY_IMMEDIATELY
    finally:
        b.stop()


def test_slave_long_poll_wakes_on_replicated_data(tmp_path):
    b = Broker(tmp_path / "s2", brokerRole="SLAVE")
    try:
        from rmqha.broker.namesrv.register_body import TopicConfig

        b.server.topics.update(TopicConfig(TOPIC, 4, 4))  # as slave sync would copy it
        d = b.call(pull(offset=0))
        got = []
        d.addCallback(got.append)
        enc = record.encode(record.Message(topic=TOPIC, body=b"r", properties={"UNIQ_KEY": "u"}))
        enc.finish(0, 0)
        b.store.append_replicated(0, bytes(enc.buf))
        b.clock.advance(0)
        b.clock.advance(0)
        assert got and got[0].code == ResponseCode.SUCCESS
    finally:
        b.stop()


def test_registered_subscription_used_without_subscription_flag(broker):
    import json
    from rmqha.broker.remoting.codes import RequestCode
    from rmqha.broker.remoting.command import RemotingCommand

    hb = {
        "clientID": "c1",
        "consumerDataSet": [
            {
                "groupName": "G",
                "consumeType": 1,
                "messageModel": 1,
                "consumeFromWhere": 0,
                "subscriptionDataSet": [{"topic": TOPIC, "subString": "tagB", "subVersion": 1}],
            }
        ],
    }
    broker.call(RemotingCommand.request(RequestCode.HEART_BEAT, body=json.dumps(hb).encode()))
    send(broker, 1, tags="tagA")
    send(broker, 1, tags="tagB", start=1)
    r = broker.call(pull(offset=0, sys_flag=0, group="G"))
    assert [m.body for m in decode_records(r.body)] == [b"m1"]


def test_stop_answers_held_pulls(broker):
    send(broker, 1)
    d = broker.call(pull(offset=1))
    got = []
    d.addCallback(got.append)
    broker.server.pull.hold_service.stop()
    assert got and got[0].code == ResponseCode.PULL_NOT_FOUND
