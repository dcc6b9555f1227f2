"""Delay levels (ScheduleMessageService) on a fake clock: where a delayed message is stored, when it
is delivered, what it looks like then, and what a slave holds (issue 13)."""

from __future__ import annotations

import json

import pytest

from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.store import record
from rmqha.broker.store.delay import deliver_time, parse_delay_levels, to_schedule_topic

from .harness import TOPIC, Broker, batch_body, props, send_v1

SCHEDULE = "SCHEDULE_TOPIC_XXXX"
LEVELS = parse_delay_levels("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h")


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path / "m")
    yield b
    b.stop()


def delayed(level, body=b"later", **kw) -> RemotingCommand:
    return send_v1(
        body=body, queue_id=1, properties=props(TAGS="tagA", KEYS="k1", UNIQ_KEY="U1", DELAY=str(level)), **kw
    )


def in_topic(b, topic=TOPIC, queue=1) -> list[record.Message]:
    res = b.store.get_messages(topic, queue, 0, 32)
    return [record.scan(x).message for x in res.records]


def units(b, level):
    cq = b.store.queues[(SCHEDULE, level - 1)]
    return cq.units(0, 100)


def test_the_default_levels_are_the_references():
    assert LEVELS[:4] == (1000, 5000, 10000, 30000) and LEVELS[-1] == 7_200_000 and len(LEVELS) == 18
    with pytest.raises(ValueError, match="'5x'"):
        parse_delay_levels("1s 5x")


def test_a_delayed_message_is_parked_then_delivered_when_due(broker):
    broker.clock.advance(3.25)  # the send is not at t=0: deadlines count from the store time
    r = broker.call(delayed(2))
    assert r.code == ResponseCode.SUCCESS
    assert in_topic(broker) == []
    [(phys, size, tags)] = units(broker, 2)
    stored = record.scan(broker.store.commitlog.read_record(phys, size)).message
    assert stored.topic == SCHEDULE and stored.queue_id == 1
    assert stored.properties["REAL_TOPIC"] == TOPIC and stored.properties["REAL_QID"] == "1"
    assert tags == stored.store_timestamp + 5000 == 8250  # the unit's tagsCode is the deliver time
    broker.clock.advance(4.99)
    assert in_topic(broker) == []
    broker.clock.advance(0.01)
    [m] = in_topic(broker)
    assert m.body == b"later" and "DELAY" not in m.properties and m.properties["KEYS"] == "k1"
    assert m.properties["REAL_TOPIC"] == TOPIC  # kept, as the reference's messageTimeup keeps it
    assert m.tags == "tagA" and m.store_timestamp == 8250 and m.born_timestamp == stored.born_timestamp
    # Its unit carries the TAGS hash again, so tag filters work.
    assert broker.store.queues[(TOPIC, 1)].units(0, 1)[0][2] == record.tags_code("tagA")
    assert broker.server.schedule.offsets == {2: 1}
    broker.clock.advance(60)
    assert len(in_topic(broker)) == 1  # delivered once


def test_levels_deliver_independently_and_in_order_within_a_level(broker):
    for level, body in [(3, b"c1"), (1, b"a1"), (3, b"c2"), (1, b"a2")]:
        assert broker.call(delayed(level, body=body)).code == ResponseCode.SUCCESS
    broker.clock.advance(1)
    assert [m.body for m in in_topic(broker)] == [b"a1", b"a2"]
    broker.clock.advance(9)
    assert [m.body for m in in_topic(broker)] == [b"a1", b"a2", b"c1", b"c2"]


def test_a_level_above_the_highest_is_the_highest_and_a_bad_level_is_illegal(broker):
    assert broker.call(delayed(99)).code == ResponseCode.SUCCESS
    [(phys, size, tags)] = units(broker, 18)
    assert record.scan(broker.store.commitlog.read_record(phys, size)).message.properties["DELAY"] == "18"
    r = broker.call(delayed("abc"))
    assert r.code == ResponseCode.MESSAGE_ILLEGAL and "DELAY" in r.remark
    assert broker.call(delayed(0)).code == ResponseCode.SUCCESS and len(in_topic(broker)) == 1  # no delay


def test_a_batch_cannot_be_delayed_and_the_schedule_topic_cannot_be_sent_to(broker):
    header = send_v1(properties=props(DELAY="2")).ext_fields
    batch = RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, header, body=batch_body([(b"x", {})]))
    r = broker.call(batch)
    assert r.code == ResponseCode.MESSAGE_ILLEGAL and "delay" in r.remark
    r = broker.call(send_v1(topic=SCHEDULE))
    assert r.code == ResponseCode.NO_PERMISSION and "forbidden" in r.remark


def test_delay_offsets_persist_and_a_restart_does_not_deliver_twice(tmp_path):
    b = Broker(tmp_path / "m")
    b.call(delayed(1, body=b"one"))
    b.call(delayed(2, body=b"two"))
    b.clock.advance(1)
    assert [m.body for m in in_topic(b)] == [b"one"]
    b.stop()
    with open(tmp_path / "m" / "config" / "delayOffset.json") as fh:
        assert json.load(fh) == {"offsetTable": {"1": 1}}
    b2 = Broker(tmp_path / "m")
    try:
        b2.clock.advance(10)
        assert [m.body for m in in_topic(b2)] == [b"one", b"two"]
        r = b2.call(RemotingCommand.request(RequestCode.GET_ALL_DELAY_OFFSET))
        assert r.code == ResponseCode.SUCCESS and json.loads(r.body) == {"offsetTable": {"1": 1, "2": 1}}
    finally:
        b2.stop()


def test_a_slave_builds_deliver_times_from_replicated_bytes_and_never_delivers(tmp_path):
    m = Broker(tmp_path / "m")
    s = Broker(tmp_path / "s", brokerRole="SLAVE")
    try:
        m.call(delayed(2))
        data = m.store.commitlog.read(0, m.store.max_offset)
        s.store.append_replicated(0, data)
        s.store.dispatch()
        assert s.store.queues[(SCHEDULE, 1)].units(0, 10) == units(m, 2)  # same units, same deliver time
        s.clock.advance(60)
        assert s.store.max_offset == len(data) and in_topic(s) == []  # only a master delivers
        m.clock.advance(5)
        assert len(in_topic(m)) == 1
        # The slave copies the master's delay offsets, as SlaveSynchronize does.
        body = m.call(RemotingCommand.request(RequestCode.GET_ALL_DELAY_OFFSET)).body
        s.server.schedule.replace_all(s.server.schedule.parse_table(json.loads(body)["offsetTable"]))
        assert s.server.schedule.offsets == {2: 1}
        assert json.loads((tmp_path / "s" / "config" / "delayOffset.json").read_text()) == {"offsetTable": {"2": 1}}
    finally:
        m.stop()
        s.stop()


def test_recovery_rebuilds_deliver_times(tmp_path):
    b = Broker(tmp_path / "m")
    b.call(delayed(3))
    before = units(b, 3)
    b.stop()
    # Lose the consume queues: recovery rebuilds them from the commit log, deliver times included.
    import shutil

    shutil.rmtree(tmp_path / "m" / "consumequeue")
    b2 = Broker(tmp_path / "m")
    try:
        assert units(b2, 3) == before
    finally:
        b2.stop()


def test_a_deliver_time_beyond_the_levels_delay_means_the_clock_went_back(broker):
    broker.clock.advance(1000)
    real_now = broker.store.now_ms
    broker.store.now_ms = lambda: real_now() + 36_000_000  # stored 10 h "in the future"
    broker.call(delayed(2))
    broker.store.now_ms = real_now
    [(_, _, tags)] = units(broker, 2)
    assert tags == 1000_000 + 36_000_000 + 5000
    broker.clock.advance(0)  # the reference's correctDeliverTimestamp: due now, not in 10 h
    assert len(in_topic(broker)) == 1


def test_pure_rules_match_the_reference():
    msg = record.Message(topic=TOPIC, body=b"", queue_id=3, properties={"DELAY": "4"})
    to_schedule_topic(msg, LEVELS)
    assert (msg.topic, msg.queue_id) == (SCHEDULE, 3)
    assert msg.properties == {"DELAY": "4", "REAL_TOPIC": TOPIC, "REAL_QID": "3"}
    prepared = record.Message(
        topic=TOPIC, body=b"", queue_id=0, sys_flag=record.TRANSACTION_PREPARED, properties={"DELAY": "4"}
    )
    to_schedule_topic(prepared, LEVELS)
    assert prepared.topic == TOPIC  # half messages are not delayed
    assert deliver_time(LEVELS, "4", 1000) == 31000 and deliver_time(LEVELS, "0", 1000) is None
    assert deliver_time(LEVELS, None, 1000) is None and deliver_time(LEVELS, "x", 5) is None
    assert deliver_time(LEVELS, "40", 0) == 7_200_000  # clamped to the highest level
