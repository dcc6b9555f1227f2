"""POP_MESSAGE, ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME (rmqha/broker/processors/pop.py, rmqha/broker/pop/)
on an in-process broker with a fake clock: checkpoints and acks are revive-topic records, an unacked
message comes back on the group's retry topic after its invisible time, also across a restart, and an
acked one never does."""

from __future__ import annotations

import pytest
from twisted.internet import defer

from rmqha.broker.pop import checkpoint as cp
from rmqha.broker.pop.revive import ReviveTable
from rmqha.broker.processors.pop import ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME, POLLING_TIMEOUT, POP_MESSAGE
from rmqha.broker.remoting.codes import ResponseCode
from rmqha.broker.remoting.command import RemotingCommand

from .harness import TOPIC, Broker, decode_records, props, send_v1

GROUP = "GPOP"
RETRY = cp.retry_topic(GROUP, TOPIC)
REVIVE = cp.revive_topic("DefaultCluster")


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path / "a")
    yield b
    b.stop()


def send(b, body: bytes, queue_id: int = 0):
    r = b.call(send_v1(body=body, queue_id=queue_id, properties=props(UNIQ_KEY=body.decode())))
    assert r.code == ResponseCode.SUCCESS, r.remark


def pop(b, n=32, invisible=10_000, poll=0, queue_id=-1, group=GROUP):
    req = RemotingCommand.request(
        POP_MESSAGE,
        {
            "consumerGroup": group,
            "topic": TOPIC,
            "queueId": queue_id,
            "maxMsgNums": n,
            "invisibleTime": invisible,
            "pollTime": poll,
            "bornTime": 0,
            "initMode": 1,
            "expType": "TAG",
            "exp": "*",
            "order": False,
        },
    )
    return b.call(req)


def bodies(resp):
    return sorted(m.body for m in decode_records(resp.body))


def ack_req(m, code=ACK_MESSAGE, **extra):
    info = m.properties["POP_CK"].split(" ")
    topic = RETRY if info[4] == cp.RETRY_TOPIC else TOPIC
    fields = {
        "consumerGroup": GROUP,
        "topic": topic,
        "queueId": m.queue_id,
        "extraInfo": " ".join(info[:7]),
        "offset": m.queue_offset,
        **extra,
    }
    return RemotingCommand.request(code, fields)


def revive(b, seconds):
    """Let the revive loop run for this long on the fake clock, a second at a time."""
    for _ in range(int(seconds)):
        b.clock.advance(1)


def test_pop_stamps_pop_ck_and_moves_the_groups_offset(broker):
    for i in range(3):
        send(broker, b"m%d" % i, queue_id=i)
    r = pop(broker)
    assert r.code == ResponseCode.SUCCESS and bodies(r) == [b"m0", b"m1", b"m2"]
    for m in decode_records(r.body):
        info = m.properties["POP_CK"].split(" ")
        assert info[4:] == ["0", "broker-a", str(m.queue_id), str(m.queue_offset)]
        assert int(info[2]) == 10_000 and int(r.ext_fields["popTime"]) == int(info[1])
    assert pop(broker).code == ResponseCode.PULL_NOT_FOUND  # popped: invisible now
    # three checkpoints, one per queue, in the revive topic
    assert broker.store.max_queue_offset(REVIVE, 0) == 3


def test_the_revive_topic_is_created_by_the_first_pop(broker):
    # 4.9.8 has no POP: a broker no 5.x client used keeps its topics (5.x has the topic from start)
    assert broker.server.topics.get(REVIVE) is None and broker.server.pop.running
    send(broker, b"m")
    assert pop(broker).code == ResponseCode.SUCCESS
    tc = broker.server.topics.get(REVIVE)
    assert (tc.read_queue_nums, tc.write_queue_nums) == (1, 1) and broker.server.topics.is_system_topic(REVIVE)


def test_unacked_comes_back_on_the_retry_topic_and_acked_never(broker):
    send(broker, b"keep", 0)
    send(broker, b"drop", 1)
    msgs = {m.body: m for m in decode_records(pop(broker, invisible=5_000).body)}
    assert broker.call(ack_req(msgs[b"drop"])).code == ResponseCode.SUCCESS
    revive(broker, 4)
    assert pop(broker).code == ResponseCode.PULL_NOT_FOUND  # not yet
    revive(broker, 3)
    r = pop(broker)
    [m] = decode_records(r.body)
    assert (m.body, m.topic, m.reconsume_times) == (b"keep", RETRY, 1)
    assert m.properties["RETRY_TOPIC"] == TOPIC and m.properties["POP_CK"].split(" ")[4] == cp.RETRY_TOPIC
    assert broker.call(ack_req(m)).code == ResponseCode.SUCCESS
    revive(broker, 20)
    assert pop(broker).code == ResponseCode.PULL_NOT_FOUND
    assert broker.server.pop.revived == 1


def test_change_invisible_time_moves_the_revive_and_answers_the_new_pop_time(broker):
    send(broker, b"slow")
    [m] = decode_records(pop(broker, invisible=5_000).body)
    broker.clock.advance(2)
    r = broker.call(ack_req(m, CHANGE_MESSAGE_INVISIBLETIME, invisibleTime=10_000))
    assert r.code == ResponseCode.SUCCESS and r.ext_fields["invisibleTime"] == "10000"
    revive(broker, 8)  # past the first invisible time, not the new one
    assert pop(broker).code == ResponseCode.PULL_NOT_FOUND
    revive(broker, 6)
    [again] = decode_records(pop(broker).body)
    assert again.body == b"slow" and again.reconsume_times == 1


def test_revive_state_survives_a_restart(tmp_path):
    b = Broker(tmp_path / "r")
    send(b, b"acked", 0)
    send(b, b"pending", 1)
    msgs = {m.body: m for m in decode_records(pop(b, invisible=5_000).body)}
    assert b.call(ack_req(msgs[b"acked"])).code == ResponseCode.SUCCESS
    b.stop()
    b2 = Broker(tmp_path / "r")  # a new process on the same store: the table is read back from the revive queue
    try:
        assert len(b2.server.pop.table) == 1
        revive(b2, 8)
        [m] = decode_records(pop(b2).body)
        assert m.body == b"pending" and m.topic == RETRY
    finally:
        b2.stop()


def test_long_polling_answers_when_a_message_arrives_or_times_out(broker):
    send(broker, b"first")
    assert bodies(pop(broker)) == [b"first"]
    d = pop(broker, poll=5_000)
    assert isinstance(d, defer.Deferred) and not d.called
    send(broker, b"late")
    broker.clock.advance(0)
    out = []
    d.addCallback(out.append)
    broker.clock.advance(0)
    assert out and out[0].code == ResponseCode.SUCCESS and bodies(out[0]) == [b"late"]
    d = pop(broker, poll=2_000)
    out = []
    d.addCallback(out.append)
    broker.clock.advance(2.1)
    assert out and out[0].code == POLLING_TIMEOUT


def test_slave_and_bad_requests_are_refused(tmp_path):
    s = Broker(tmp_path / "s", brokerRole="SLAVE")
    try:
        assert pop(s).code == ResponseCode.SERVICE_NOT_AVAILABLE
    finally:
        s.stop()
    b = Broker(tmp_path / "b")
    try:
        assert pop(b, n=33).code == ResponseCode.SYSTEM_ERROR
        bad = RemotingCommand.request(
            ACK_MESSAGE, {"consumerGroup": GROUP, "topic": TOPIC, "queueId": 0, "extraInfo": "1 2", "offset": 0}
        )
        assert b.call(bad).code == ResponseCode.SYSTEM_ERROR
    finally:
        b.stop()


def test_revive_table_reads_records_again_without_reviving_twice():
    ck = cp.CheckPoint("G", "T", 0, 10, 1000, 500, [0, 2], "b")
    t = ReviveTable(0)
    t.feed_ck(ck, 5, scan=False)  # what the service stored just now
    t.feed_ack(cp.Ack("G", "T", 0, 10, 1000, 10), 6, scan=False)
    assert t.due(1499) == [] and t.due(1500) == [(ck, [12])]
    t.done(ck)
    assert t.safe_offset() == 0  # the scan has not read offsets 5 and 6 yet
    t.feed_ck(cp.decode("ck", ck.encode()), 5)  # the scan reads them
    t.feed_ack(cp.decode("ack", cp.Ack("G", "T", 0, 10, 1000, 10).encode()), 6)
    assert t.due(10**9) == [] and t.safe_offset() == 7 and not t.finished
    with pytest.raises(cp.BadRecord):
        cp.decode("ck", b"{}")


def test_a_crash_with_an_old_offsets_file_pops_nothing_twice(tmp_path):
    """consumerOffset.json is flushed every few seconds: a crash can leave it from before the pops. The
    revive queue says what was popped, so acked messages are not delivered again and pending ones come
    back once, after their invisible time."""
    import shutil

    b = Broker(tmp_path / "c")
    send(b, b"acked", 0)
    send(b, b"pending", 1)
    b.server.offsets.persist()
    path = tmp_path / "c" / "config" / "consumerOffset.json"
    shutil.copy(path, tmp_path / "before.json")
    msgs = {m.body: m for m in decode_records(pop(b, invisible=5_000).body)}
    assert b.call(ack_req(msgs[b"acked"])).code == ResponseCode.SUCCESS
    b.stop()
    shutil.copy(tmp_path / "before.json", path)  # the file as the crash left it
    b2 = Broker(tmp_path / "c")
    try:
        assert pop(b2).code == ResponseCode.PULL_NOT_FOUND  # neither is popped again at once
        revive(b2, 8)
        assert bodies(pop(b2)) == [b"pending"]
        revive(b2, 20)
        assert [m.body for m in decode_records(pop(b2).body)] == [b"pending"]  # not acked after the revive either
    finally:
        b2.stop()
