"""Transactional messages (rmqha/broker/transaction, END_TRANSACTION): half messages, commit, rollback, the op
topic, the check-back on the fake clock, a slave, and hostile END_TRANSACTION requests.

Expected layouts are RocketMQ 4.9.8's (TransactionalMessageBridge, EndTransactionProcessor,
TransactionalMessageServiceImpl, AbstractTransactionalMessageCheckListener, Broker2Client), written out
by hand here rather than through the code under test.
"""

from __future__ import annotations

import json
import struct

import pytest

from rmqha.broker.config.properties import BrokerConfig
from rmqha.broker.remoting.codec import encode
from rmqha.broker.remoting.codes import FLAG_ONEWAY, RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.store import record

from .harness import TOPIC, Broker, FakeContext, make_config, props, pull, send_v1
from .test_hostile_requests import LONE, Wire

GROUP = "PG_TX"
HALF, OP, MAX_TIME = "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC"
CID = "CID_RMQ_SYS_TRANS"
COMMIT, ROLLBACK, NOT_TYPE = 8, 12, 0
STORE_HOST = ("127.0.0.1", 10911)


# ---- helpers -------------------------------------------------------------------------------------


def now_ms(b: Broker) -> int:
    return int(b.clock.seconds() * 1000)


def half_request(b: Broker, uniq="U1", queue_id=1, body=b"tx", group=GROUP, **extra_props) -> RemotingCommand:
    """A transactional send as TransactionMQProducer makes it: TRAN_MSG=true, PGROUP, the PREPARED sysflag."""
    return send_v1(
        body=body,
        queue_id=queue_id,
        sysFlag=record.TRANSACTION_PREPARED,
        bornTimestamp=now_ms(b),
        properties=props(
            TAGS="tagA", KEYS="k1", UNIQ_KEY=uniq, WAIT="true", TRAN_MSG="true", PGROUP=group, **extra_props
        ),
    )


def send_half(b: Broker, **kw) -> RemotingCommand:
    resp = b.call(half_request(b, **kw))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return resp


def end_request(
    queue_offset, commit_log_offset, kind, group=GROUP, uniq="U1", from_check="false", **override
) -> RemotingCommand:
    fields = {
        "producerGroup": group,
        "tranStateTableOffset": queue_offset,
        "commitLogOffset": commit_log_offset,
        "commitOrRollback": kind,
        "fromTransactionCheck": from_check,
        "msgId": uniq,
    }
    fields.update(override)
    return RemotingCommand.request(RequestCode.END_TRANSACTION, {k: v for k, v in fields.items() if v is not None})


def end_after_send(resp: RemotingCommand, kind, **kw) -> RemotingCommand:
    """END_TRANSACTION as the client builds it from the send reply (DefaultMQProducerImpl.endTransaction)."""
    _host, commit_log_offset = record.parse_offset_msg_id(resp.ext_fields["msgId"])
    return end_request(int(resp.ext_fields["queueOffset"]), commit_log_offset, kind, **kw)


def end_after_check(check: RemotingCommand, kind, **kw) -> RemotingCommand:
    """END_TRANSACTION answering a CHECK_TRANSACTION_STATE (DefaultMQProducerImpl.checkTransactionState)."""
    f = check.ext_fields
    return end_request(int(f["tranStateTableOffset"]), int(f["commitLogOffset"]), kind, from_check="true", **kw)


def messages_in(b: Broker, topic: str, queue_id: int) -> list[record.Message]:
    out, offset = [], b.store.min_queue_offset(topic, queue_id)
    while True:
        res = b.store.get_messages(topic, queue_id, offset, 32)
        if not res.records:
            return out
        out += [record.scan(r).message for r in res.records]
        offset = res.next_begin_offset


def visible(b: Broker, topic=TOPIC) -> list[record.Message]:
    return [m for q in range(8) for m in messages_in(b, topic, q)]


def checks(ctx: FakeContext) -> list[RemotingCommand]:
    return [c for c in ctx.sent if c.code == RequestCode.CHECK_TRANSACTION_STATE]


def register_producer(b: Broker, ctx: FakeContext, group=GROUP) -> None:
    body = {"clientID": "producer-1", "producerDataSet": [{"groupName": group}], "consumerDataSet": []}
    resp = b.call(RemotingCommand.request(RequestCode.HEART_BEAT, body=json.dumps(body).encode()), ctx)
    assert resp.code == ResponseCode.SUCCESS


def tick(b: Broker, seconds: float, step: float = 1.0) -> None:
    """Move the fake clock forward one step at a time, so every periodic run in between happens."""
    n = int(round(seconds / step))
    b.clock.pump([step] * n)


def cid_offset(b: Broker, topic: str) -> int:
    return b.server.offsets.query(CID, topic, 0)


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path / "m")
    yield b
    b.stop()


@pytest.fixture
def fast(tmp_path):
    """A master that checks every second (the timeout stays the reference's 6 s)."""
    b = Broker(tmp_path / "f", transactionCheckInterval="1000", transactionCheckMax="3")
    yield b
    b.stop()


# ---- configuration -------------------------------------------------------------------------------


def test_config_names_and_defaults_are_the_references(tmp_path):
    c = make_config(tmp_path)
    assert (c.transactionTimeOut, c.transactionCheckMax, c.transactionCheckInterval) == (6000, 15, 60000)
    assert c.rejectTransactionMessage is False
    c = BrokerConfig.from_properties(
        {
            "brokerName": "b",
            "transactionTimeOut": "1000",
            "transactionCheckMax": "3",
            "transactionCheckInterval": "5000",
            "rejectTransactionMessage": "true",
        }
    )
    assert (c.transactionTimeOut, c.transactionCheckMax, c.transactionCheckInterval) == (1000, 3, 5000)
    assert c.rejectTransactionMessage is True and c.ignored_keys == []


# ---- half messages -------------------------------------------------------------------------------


def test_half_message_goes_to_the_half_topic_and_not_to_its_own(broker):
    resp = send_half(broker, queue_id=1)
    f = resp.ext_fields
    # The ordinary send reply: the half's offsetMsgId and half-queue offset, the real queue id; the 4.9.8
    # send path sets no transactionId (the client uses the message's UNIQ_KEY).
    assert (f["queueId"], f["queueOffset"]) == ("1", "0") and "transactionId" not in f
    assert f["msgId"] == record.offset_msg_id(STORE_HOST, 0)
    assert visible(broker) == []
    assert broker.call(pull(queue_id=1, sys_flag=0x4)).code == ResponseCode.PULL_NOT_FOUND
    [half] = messages_in(broker, HALF, 0)
    assert half.topic == HALF and half.queue_id == 0 and half.queue_offset == 0 and half.physical_offset == 0
    assert half.sys_flag & record.TRANSACTION_MASK == record.TRANSACTION_NOT_TYPE  # parseHalfMessageInner resets it
    assert half.body == b"tx" and half.born_timestamp == 0 and half.born_host == ("127.0.0.1", 50001)
    # The client's properties (WAIT kept: the reference serializes again after putting it back), CLUSTER,
    # and where the message was going.
    assert half.properties == {
        "TAGS": "tagA",
        "KEYS": "k1",
        "UNIQ_KEY": "U1",
        "WAIT": "true",
        "TRAN_MSG": "true",
        "PGROUP": GROUP,
        "CLUSTER": "DefaultCluster",
        "REAL_TOPIC": TOPIC,
        "REAL_QID": "1",
    }


def test_only_tran_msg_makes_a_half_message(broker):
    # The reference decides by Boolean.parseBoolean(TRAN_MSG): "1" is false. Without it a PREPARED
    # sysflag is stored in the message's own topic, where a prepared record gets no queue entry.
    resp = broker.call(send_v1(sysFlag=record.TRANSACTION_PREPARED, properties=props(TRAN_MSG="1", UNIQ_KEY="X")))
    assert resp.code == ResponseCode.SUCCESS
    assert messages_in(broker, HALF, 0) == [] and visible(broker) == []
    m = broker.store.message_by_offset(0)
    assert m.topic == TOPIC and m.transaction_type == record.TRANSACTION_PREPARED


def test_transactional_batch_is_refused(broker):
    resp = broker.call(send_v1(batch="1", body=b"", properties=props(TRAN_MSG="true", PGROUP=GROUP)))
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL and "transactional" in resp.remark
    assert broker.store.max_offset == 0


# ---- commit and rollback -------------------------------------------------------------------------


def test_commit_puts_the_message_in_its_topic_once_with_the_references_fields(broker):
    resp = send_half(broker, queue_id=1)
    [half] = messages_in(broker, HALF, 0)
    broker.clock.advance(2)
    reply = broker.call(end_after_send(resp, COMMIT))
    assert reply.code == ResponseCode.SUCCESS and reply.remark is None
    [m] = visible(broker)
    assert (m.topic, m.queue_id, m.queue_offset) == (TOPIC, 1, 0)
    assert m.transaction_type == record.TRANSACTION_COMMIT
    assert m.prepared_transaction_offset == half.physical_offset == 0
    assert (m.body, m.flag, m.born_timestamp, m.born_host, m.reconsume_times) == (
        half.body,
        half.flag,
        half.born_timestamp,
        half.born_host,
        half.reconsume_times,
    )
    assert m.store_timestamp == 2000  # stored now
    # 4.9.8 clears REAL_TOPIC, REAL_QID and TRAN_MSG only from the property map, after serializing it:
    # the committed record carries the half's properties as they are.
    assert m.properties == half.properties
    # The op message: OP topic, the half's queue, tag "d", body = the half's queue offset; TAGS and
    # WAIT in Java HashMap order (WAIT's bucket first), born at the broker, now.
    [op] = messages_in(broker, OP, 0)
    assert op.body == b"0" and op.queue_id == 0 and op.sys_flag == 0 and op.flag == 0
    assert list(op.properties.items()) == [("WAIT", "true"), ("TAGS", "d")]
    assert op.born_host == STORE_HOST and op.born_timestamp == 2000
    # A consumer of the topic gets it.
    got = broker.call(pull(queue_id=1, sys_flag=0x4))
    assert got.code == ResponseCode.SUCCESS
    # The same COMMIT again (a retried oneway, or an answer to a check): not stored twice.
    assert broker.call(end_after_send(resp, COMMIT)).code == ResponseCode.SUCCESS
    assert len(visible(broker)) == 1


def test_rollback_writes_only_the_op_message_and_is_never_visible(fast):
    b = fast
    ctx = FakeContext()
    register_producer(b, ctx)
    resp = send_half(b)
    assert b.call(end_after_send(resp, ROLLBACK)).code == ResponseCode.SUCCESS
    assert visible(b) == []
    [op] = messages_in(b, OP, 0)
    assert op.body == b"0"
    tick(b, 30)  # far past the timeout: the check knows it is resolved
    assert checks(ctx) == [] and visible(b) == []
    assert cid_offset(b, HALF) == 1 and cid_offset(b, OP) == 1
    # A COMMIT after the ROLLBACK does not bring it back.
    assert b.call(end_after_send(resp, COMMIT)).code == ResponseCode.SUCCESS
    assert visible(b) == []


def test_two_transactions_of_one_reused_message_are_two(broker):
    # A Java client keeps a message's UNIQ_KEY when the same Message object is sent again: the second
    # send is another transaction (another born time), not a repeat of the first.
    first = send_half(broker, uniq="SAME")
    assert broker.call(end_after_send(first, COMMIT, uniq="SAME")).code == ResponseCode.SUCCESS
    broker.clock.advance(0.001)
    second = send_half(broker, uniq="SAME")
    assert broker.call(end_after_send(second, COMMIT, uniq="SAME")).code == ResponseCode.SUCCESS
    assert len(visible(broker)) == 2


def test_resolutions_are_bounded():
    from rmqha.broker.transaction.service import Resolutions

    r = Resolutions(limit=2)
    for key in (b"a", b"b", b"c"):
        r.add(key, COMMIT)
    assert len(r) == 2 and r.get(b"a") is None and r.get(b"c") == COMMIT


def test_unknown_state_is_not_answered_and_stores_nothing(broker):
    resp = send_half(broker)
    before = broker.store.max_offset
    assert broker.call(end_after_send(resp, NOT_TYPE)) is None
    assert broker.store.max_offset == before and visible(broker) == []


# ---- check-back ----------------------------------------------------------------------------------


def test_check_back_after_the_timeout_with_the_references_header_and_body(tmp_path):
    b = Broker(tmp_path / "c")  # the reference's defaults: a check every 60 s, half messages older than 6 s
    try:
        w = Wire(b)  # the producer's connection, through the real protocol
        body = {"clientID": "producer-1", "producerDataSet": [{"groupName": GROUP}], "consumerDataSet": []}
        assert w.request(RemotingCommand.request(RequestCode.HEART_BEAT, body=json.dumps(body).encode())).code == 0
        resp = w.request(half_request(b))
        assert resp.code == ResponseCode.SUCCESS
        tick(b, 59)
        assert w.replies() == []  # no run yet
        tick(b, 1)  # t=60 s: the first run; the half is 60 s old
        [check] = w.replies()
        assert check.code == RequestCode.CHECK_TRANSACTION_STATE and not check.is_response
        assert check.flag & FLAG_ONEWAY  # invokeOneway
        # The half was stored again at the end of the half queue, with TRANSACTION_CHECK_TIMES=1.
        original, copy = messages_in(b, HALF, 0)
        assert copy.queue_offset == 1 and copy.properties["TRANSACTION_CHECK_TIMES"] == "1"
        assert {k: v for k, v in copy.properties.items() if k != "TRANSACTION_CHECK_TIMES"} == original.properties
        assert (copy.body, copy.born_timestamp, copy.born_host, copy.sys_flag) == (
            original.body,
            original.born_timestamp,
            original.born_host,
            original.sys_flag,
        )
        # CheckTransactionStateRequestHeader: about the copy; msgId = transactionId = UNIQ_KEY.
        assert check.ext_fields == {
            "tranStateTableOffset": "1",
            "commitLogOffset": str(copy.physical_offset),
            "offsetMsgId": record.offset_msg_id(STORE_HOST, copy.physical_offset),
            "msgId": "U1",
            "transactionId": "U1",
        }
        # The body: MessageDecoder.encode of the half as read, with the real topic and queue, the copy's
        # offsets, and the new check count.
        r = record.scan(check.body)
        assert r.kind == record.Scan.MESSAGE and r.size == len(check.body)
        m = r.message
        assert (m.topic, m.queue_id, m.queue_offset, m.physical_offset) == (TOPIC, 1, 1, copy.physical_offset)
        assert m.properties == copy.properties and m.body == b"tx"
        assert (m.store_timestamp, m.born_timestamp) == (original.store_timestamp, original.born_timestamp)
        # Progress: the half queue's CID_RMQ_SYS_TRANS offset is past the original.
        assert cid_offset(b, HALF) == 1
        # The producer answers COMMIT about the copy: visible once, and nothing is checked again.
        reply = w.request(end_after_check(check, COMMIT))
        assert reply.code == ResponseCode.SUCCESS
        [m] = visible(b)
        assert m.prepared_transaction_offset == copy.physical_offset
        assert m.properties["TRANSACTION_CHECK_TIMES"] == "1"
        tick(b, 300, step=60)
        assert w.replies() == [] and len(visible(b)) == 1
        assert cid_offset(b, HALF) == 2 and cid_offset(b, OP) == 1
    finally:
        b.stop()


def test_no_check_before_the_timeout(tmp_path):
    b = Broker(tmp_path / "t", transactionCheckInterval="500")
    try:
        ctx = FakeContext()
        register_producer(b, ctx)
        send_half(b)
        tick(b, 5.5, step=0.5)
        assert checks(ctx) == []
        tick(b, 0.5, step=0.5)  # t=6 s: 6000 ms old
        assert len(checks(ctx)) == 1
    finally:
        b.stop()


def test_checked_at_most_transaction_check_max_times_then_moved_aside(fast):
    b = fast  # transactionCheckMax=3, a run every second
    ctx = FakeContext()
    register_producer(b, ctx)
    send_half(b)
    tick(b, 30)
    sent = checks(ctx)
    assert len(sent) == 3
    assert [int(c.ext_fields["tranStateTableOffset"]) for c in sent] == [1, 2, 3]
    assert [record.scan(c.body).message.properties["TRANSACTION_CHECK_TIMES"] for c in sent] == ["1", "2", "3"]
    # The fourth time it is moved to TRANS_CHECK_MAX_TIME_TOPIC (one queue, READ|WRITE) and forgotten.
    [moved] = messages_in(b, MAX_TIME, 0)
    assert moved.properties["TRANSACTION_CHECK_TIMES"] == "3" and moved.properties["REAL_TOPIC"] == TOPIC
    assert moved.body == b"tx"
    tc = b.server.topics.get(MAX_TIME)
    assert (tc.read_queue_nums, tc.write_queue_nums, tc.perm) == (1, 1, 6)
    assert cid_offset(b, HALF) == 4 and visible(b) == []
    reg = b.server.controller.metrics
    assert reg.metrics["rocketmq_transaction_checks_total"].get(result="sent") == 3
    assert reg.metrics["rocketmq_transaction_discarded_total"].get() == 1
    tick(b, 30)
    assert len(checks(ctx)) == 3 and len(messages_in(b, MAX_TIME, 0)) == 1


def test_without_a_producer_connection_the_check_is_counted_and_spent(fast):
    b = fast
    ctx = FakeContext()
    register_producer(b, ctx)
    ctx.close()  # gone: the group has no connection left
    send_half(b)
    tick(b, 6)  # t=6 s: the first check
    assert b.server.controller.metrics.metrics["rocketmq_transaction_checks_total"].get(result="no_producer") == 1
    assert messages_in(b, HALF, 0)[-1].properties["TRANSACTION_CHECK_TIMES"] == "1"  # as the reference counts it
    # A producer that connects later gets the next check.
    later = FakeContext("127.0.0.1:50002")
    register_producer(b, later)
    tick(b, 1)
    [check] = checks(later)
    assert record.scan(check.body).message.properties["TRANSACTION_CHECK_TIMES"] == "2"


def test_checks_go_round_robin_over_the_groups_connections(fast):
    b = fast
    c1, c2 = FakeContext("127.0.0.1:1"), FakeContext("127.0.0.1:2")
    register_producer(b, c1)
    register_producer(b, c2)
    send_half(b, uniq="A")
    send_half(b, uniq="B")
    tick(b, 6)
    assert len(checks(c1)) == 1 and len(checks(c2)) == 1


def test_late_commit_after_a_check_back_is_visible_once_and_ends_the_checks(fast):
    b = fast
    ctx = FakeContext()
    register_producer(b, ctx)
    resp = send_half(b)
    tick(b, 6)
    [check] = checks(ctx)
    # The producer's own COMMIT arrives only now, naming the original half (queue offset 0).
    assert b.call(end_after_send(resp, COMMIT)).code == ResponseCode.SUCCESS
    [m] = visible(b)
    assert m.prepared_transaction_offset == 0
    tick(b, 10)
    assert len(checks(ctx)) == 1  # the copy the check made counts as resolved: no second check
    # ... and the producer's answer to the check, arriving later still, adds nothing.
    assert b.call(end_after_check(check, COMMIT)).code == ResponseCode.SUCCESS
    assert len(visible(b)) == 1
    tick(b, 5)
    # Every half and op message walked past: nothing left to check.
    assert cid_offset(b, HALF) == b.store.max_queue_offset(HALF, 0)
    assert cid_offset(b, OP) == b.store.max_queue_offset(OP, 0)
    assert b.server.transactions.backlog() == 0


def test_unknown_answer_to_a_check_is_asked_again(fast):
    b = fast
    ctx = FakeContext()
    register_producer(b, ctx)
    send_half(b)
    tick(b, 6)
    [first] = checks(ctx)
    assert b.call(end_after_check(first, NOT_TYPE)) is None
    tick(b, 1)
    assert len(checks(ctx)) == 2


def test_check_immunity_time_delays_the_first_check(tmp_path):
    b = Broker(tmp_path / "i", transactionCheckInterval="1000")
    try:
        ctx = FakeContext()
        register_producer(b, ctx)
        send_half(b, CHECK_IMMUNITY_TIME_IN_SECONDS="10")
        tick(b, 9)
        assert checks(ctx) == []
        # Meanwhile each run stored it again with TRAN_PREPARED_QUEUE_OFFSET = the first copy's offset,
        # and (the reference's order: needDiscard first) each of those copies counts as a check.
        copies = messages_in(b, HALF, 0)[1:]
        assert len(copies) == 9 and {c.properties["TRAN_PREPARED_QUEUE_OFFSET"] for c in copies} == {"0"}
        assert copies[-1].properties["TRANSACTION_CHECK_TIMES"] == "9"
        tick(b, 1)
        [check] = checks(ctx)
        assert record.scan(check.body).message.properties["TRANSACTION_CHECK_TIMES"] == "10"
    finally:
        b.stop()


def test_the_check_service_is_supervised(fast, monkeypatch):
    b = fast
    svc = b.server.transactions
    real, raised = svc.bridge.consume_offset, []

    def flaky(topic, queue_id):
        if not raised:
            raised.append(topic)
            raise OSError(5, "Input/output error")
        return real(topic, queue_id)

    monkeypatch.setattr(svc.bridge, "consume_offset", flaky)
    ctx = FakeContext()
    register_producer(b, ctx)
    send_half(b)
    tick(b, 10)
    health = b.server.status()["services"]["transaction_check"]
    assert health["failures"] == 1 and health["running"]
    assert len(checks(ctx)) >= 1  # restarted after the failure and checked


# ---- roles ---------------------------------------------------------------------------------------


def test_slave_refuses_end_transaction_and_never_checks(tmp_path):
    s = Broker(tmp_path / "s", brokerRole="SLAVE", transactionCheckInterval="1000")
    try:
        reply = s.call(end_request(0, 0, COMMIT))
        assert reply.code == ResponseCode.SLAVE_NOT_AVAILABLE
        assert s.store.max_offset == 0
        assert "transaction_check" not in s.server.status()["services"]
    finally:
        s.stop()


def test_replicated_records_give_the_slave_the_same_queues(tmp_path):
    m = Broker(tmp_path / "m", transactionCheckInterval="1000")
    s = Broker(tmp_path / "s", brokerRole="SLAVE")
    try:
        ctx = FakeContext()
        register_producer(m, ctx)
        committed = send_half(m, uniq="C")
        rolled_back = send_half(m, uniq="R")
        send_half(m, uniq="P")  # pending: checked
        tick(m, 7)
        m.call(end_after_send(committed, COMMIT))
        m.call(end_after_send(rolled_back, ROLLBACK))
        end = m.store.max_offset
        s.store.append_replicated(0, m.store.commitlog.read(0, end))
        s.store.dispatch()
        assert s.store.commitlog.read(0, end) == m.store.commitlog.read(0, end)
        for topic, q in ((HALF, 0), (OP, 0), (TOPIC, 1)):
            assert [x.physical_offset for x in messages_in(s, topic, q)] == [
                x.physical_offset for x in messages_in(m, topic, q)
            ], topic
        assert [x.body for x in visible(s)] == [b"tx"]
    finally:
        m.stop()
        s.stop()


# ---- hostile END_TRANSACTION ---------------------------------------------------------------------


def test_hostile_end_transaction_requests_are_answered_cleanly(broker):
    b = broker
    resp = send_half(b)
    ordinary = b.call(send_v1(body=b"plain"))
    _h, plain_offset = record.parse_offset_msg_id(ordinary.ext_fields["msgId"])
    w = Wire(b)

    def ask(**fields):
        base = {
            "producerGroup": GROUP,
            "tranStateTableOffset": "0",
            "commitLogOffset": "0",
            "commitOrRollback": str(COMMIT),
            "msgId": "U1",
        }
        base.update(fields)
        return w.request(
            RemotingCommand.request(RequestCode.END_TRANSACTION, {k: v for k, v in base.items() if v is not None})
        )

    def refused(reply, text):
        assert reply.code == ResponseCode.SYSTEM_ERROR and text in reply.remark, reply

    not_found = "Find prepared transaction message failed"
    refused(ask(commitLogOffset="-1"), not_found)
    refused(ask(commitLogOffset=str(b.store.max_offset)), not_found)
    refused(ask(commitLogOffset=str(1 << 40)), not_found)
    refused(ask(commitLogOffset="1"), not_found)  # inside the half record
    refused(ask(commitLogOffset=str(plain_offset), tranStateTableOffset="0"), not_found)  # not a half
    refused(ask(commitLogOffset="abc"), "commitLogOffset")
    refused(ask(commitLogOffset="9223372036854775808"), "commitLogOffset")
    refused(ask(tranStateTableOffset=None), "the custom field <tranStateTableOffset> is null")
    refused(ask(msgId=None), "the custom field <msgId> is null")
    refused(ask(commitOrRollback="5"), "commitOrRollback field wrong")
    refused(ask(commitOrRollback="x"), "commitOrRollback")
    refused(ask(producerGroup="OTHER"), "The producer group wrong")
    refused(ask(tranStateTableOffset="7"), "The transaction state table offset wrong")
    refused(ask(producerGroup="bad/../group"), "illegal characters")
    refused(
        w.json_request(
            RequestCode.END_TRANSACTION,
            '{"producerGroup":"G%s","tranStateTableOffset":"0","commitLogOffset":"0",'
            '"commitOrRollback":"8","msgId":"U1"}' % LONE,
        ),
        "illegal characters",
    )
    assert [m.body for m in visible(b)] == [b"plain"]  # nothing committed

    # A half forged inside another message's body: a well-formed half record (right CRC, PGROUP,
    # REAL_TOPIC, PHYSICALOFFSET = where it will land) sent as the body of an ordinary message.
    start = b.store.max_offset
    body_at = start + 88  # TOTALSIZE .. BODYLEN of an IPv4 record come first
    forged = record.Message(
        topic=HALF,
        body=b"evil",
        born_host=("127.0.0.1", 1),
        store_host=STORE_HOST,
        properties={"PGROUP": GROUP, "REAL_TOPIC": TOPIC, "REAL_QID": "0", "UNIQ_KEY": "F"},
    )
    forged_bytes = bytes(record.encode(forged).finish(0, body_at))
    carrier = b.call(send_v1(body=forged_bytes))
    assert record.parse_offset_msg_id(carrier.ext_fields["msgId"])[1] == start
    assert record.scan(b.store.commitlog.read(body_at, len(forged_bytes))).kind == record.Scan.MESSAGE
    refused(ask(commitLogOffset=str(body_at)), not_found)
    # A record whose TOTALSIZE claims far more than any message may hold is not read.
    huge = struct.pack(">iI", 1 << 30, record.MESSAGE_MAGIC) + b"\0" * 64
    at = b.store.max_offset + 88
    b.call(send_v1(body=huge))
    refused(ask(commitLogOffset=str(at)), not_found)

    # NOT_TYPE and oneway requests get no answer; a oneway COMMIT still commits.
    w.raw(encode(end_after_send(resp, NOT_TYPE)))
    assert w.replies() == []
    oneway = end_after_send(resp, COMMIT)
    oneway.mark_oneway()
    assert w.raw(encode(oneway)) == []
    assert [m.body for m in visible(b) if m.body == b"tx"] == [b"tx"]
    # ... and the broker still serves.
    assert b.call(send_v1(body=b"after")).code == ResponseCode.SUCCESS
