import pytest
from twisted.internet import defer

from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.store import record
from rmqha.broker.store.message_store import PutResult, PutStatus

from .harness import TOPIC, Broker, batch_body, props, send_v1, send_v2


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path / "a")
    yield b
    b.stop()


def stored(broker, topic=TOPIC, queue_id=0, offset=0):
    res = broker.store.get_messages(topic, queue_id, offset, 32)
    return [record.scan(r).message for r in res.records]


def test_v1_send_auto_creates_topic_and_answers_with_string_fields(broker):
    resp = broker.call(send_v1(queue_id=1))
    assert resp.code == ResponseCode.SUCCESS
    f = resp.ext_fields
    assert set(f) >= {"msgId", "queueId", "queueOffset", "MSG_REGION", "TRACE_ON"}
    assert all(isinstance(v, str) for v in f.values())
    assert f["queueId"] == "1" and f["queueOffset"] == "0"
    assert f["MSG_REGION"] == "DefaultRegion" and f["TRACE_ON"] == "true"
    assert len(f["msgId"]) == 32 and f["msgId"] == record.offset_msg_id(("127.0.0.1", 10911), 0)
    tc = broker.server.topics.get(TOPIC)
    assert (tc.read_queue_nums, tc.write_queue_nums, tc.perm) == (4, 4, 6)  # min(4, TBW102's 8)
    [m] = stored(broker, queue_id=1)
    assert m.body == b"hello"
    assert "WAIT" not in m.properties
    assert m.properties["CLUSTER"] == "DefaultCluster"
    assert m.properties["TAGS"] == "tagA" and m.properties["KEYS"] == "k1"
    assert m.born_host == ("127.0.0.1", 50001)
    assert m.born_timestamp == 1700000000000


def test_v2_short_names_are_the_same_request(broker):
    resp = broker.call(send_v2(queue_id=2, body=b"v2"))
    assert resp.code == ResponseCode.SUCCESS and resp.ext_fields["queueId"] == "2"
    [m] = stored(broker, queue_id=2)
    assert m.body == b"v2" and m.properties["UNIQ_KEY"] == "U1"


def test_queue_id_out_of_range_is_system_error_and_negative_picks_one(broker):
    broker.call(send_v1())
    resp = broker.call(send_v1(queue_id=4))
    assert resp.code == ResponseCode.SYSTEM_ERROR and "queueId" in resp.remark
    resp = broker.call(send_v1(queue_id=-1))
    assert resp.code == ResponseCode.SUCCESS and 0 <= int(resp.ext_fields["queueId"]) < 4


def test_no_auto_create_means_topic_not_exist(tmp_path):
    b = Broker(tmp_path / "x", autoCreateTopicEnable="false")
    try:
        assert "TBW102" not in b.server.topics.table
        resp = b.call(send_v1())
        assert resp.code == ResponseCode.TOPIC_NOT_EXIST
        assert b.store.max_offset == 0
    finally:
        b.stop()


def test_slave_refuses_sends(tmp_path):
    b = Broker(tmp_path / "s", brokerRole="SLAVE")
    try:
        for req in (send_v1(), send_v2()):
            resp = b.call(req)
            assert resp.code == ResponseCode.SERVICE_NOT_AVAILABLE
            assert "broker is a slave" in resp.remark
        assert b.store.max_offset == 0 and b.server.topics.get(TOPIC) is None
    finally:
        b.stop()


def test_broker_without_write_permission(tmp_path):
    b = Broker(tmp_path / "p", brokerPermission="4")
    try:
        assert b.call(send_v1()).code == ResponseCode.NO_PERMISSION
    finally:
        b.stop()


def test_reserved_and_bad_topic_names(broker):
    assert broker.call(send_v1(topic="TBW102")).code == ResponseCode.SYSTEM_ERROR
    assert broker.call(send_v1(topic="bad topic")).code == ResponseCode.SYSTEM_ERROR


def test_body_over_max_message_size_is_illegal(tmp_path):
    b = Broker(tmp_path / "m", maxMessageSize="100")
    try:
        resp = b.call(send_v1(body=b"x" * 101))
        assert resp.code == ResponseCode.MESSAGE_ILLEGAL
    finally:
        b.stop()


def test_transaction_messages_are_refused_with_reject_transaction_message(tmp_path):
    # Half messages themselves: tests/unit/processors/test_transactions.py.
    b = Broker(tmp_path / "r", rejectTransactionMessage="true")
    try:
        resp = b.call(send_v1(properties=props(TRAN_MSG="true")))
        assert resp.code == ResponseCode.NO_PERMISSION
        assert b.store.max_offset == 0
    finally:
        b.stop()


@pytest.mark.parametrize(
    "status,code,filled",
    [
        (PutStatus.PUT_OK, ResponseCode.SUCCESS, True),
        (PutStatus.FLUSH_DISK_TIMEOUT, ResponseCode.FLUSH_DISK_TIMEOUT, True),
        (PutStatus.SLAVE_NOT_AVAILABLE, ResponseCode.SLAVE_NOT_AVAILABLE, True),
        (PutStatus.FLUSH_SLAVE_TIMEOUT, ResponseCode.FLUSH_SLAVE_TIMEOUT, True),
        (PutStatus.MESSAGE_ILLEGAL, ResponseCode.MESSAGE_ILLEGAL, False),
        (PutStatus.PROPERTIES_SIZE_EXCEEDED, ResponseCode.MESSAGE_ILLEGAL, False),
        (PutStatus.SERVICE_NOT_AVAILABLE, ResponseCode.SERVICE_NOT_AVAILABLE, False),
        (PutStatus.DISK_FULL, ResponseCode.SYSTEM_ERROR, False),
    ],
)
def test_each_put_status_maps_to_its_response_code(broker, status, code, filled):
    def fake_put(msg, wait_store_ok=True):
        if status in (
            PutStatus.PUT_OK,
            PutStatus.FLUSH_DISK_TIMEOUT,
            PutStatus.SLAVE_NOT_AVAILABLE,
            PutStatus.FLUSH_SLAVE_TIMEOUT,
        ):
            return defer.succeed(PutResult(status, 4096, 200, 7, "ABC", 1))
        return defer.succeed(PutResult(status, remark="because"))

    broker.server.controller.put = fake_put  # what the send path calls (put_message wraps it)
    resp = broker.call(send_v1(queue_id=3))
    assert resp.code == code
    if filled:
        assert resp.ext_fields["msgId"] == "ABC"
        assert resp.ext_fields["queueId"] == "3" and resp.ext_fields["queueOffset"] == "7"
    else:
        assert "msgId" not in resp.ext_fields
    if status == PutStatus.DISK_FULL:
        assert "disk is full" in resp.remark


def test_sync_master_without_slave_is_slave_not_available_but_stored(tmp_path):
    b = Broker(tmp_path / "sm", brokerRole="SYNC_MASTER")
    try:
        resp = b.call(send_v1())
        assert resp.code == ResponseCode.SLAVE_NOT_AVAILABLE
        assert resp.ext_fields["queueOffset"] == "0" and resp.ext_fields["msgId"]
        assert len(stored(b)) == 1
    finally:
        b.stop()


def test_wait_false_does_not_wait_for_the_slave(tmp_path):
    b = Broker(tmp_path / "sw", brokerRole="SYNC_MASTER")
    try:
        resp = b.call(send_v1(properties=props(WAIT="false")))
        assert resp.code == ResponseCode.SUCCESS
        [m] = stored(b)
        assert "WAIT" not in m.properties
    finally:
        b.stop()


def test_sync_master_with_slave_connected_waits_then_times_out(tmp_path):
    b = Broker(tmp_path / "st", brokerRole="SYNC_MASTER", syncFlushTimeout="1500")
    try:
        ha = b.server.controller.ha
        ha.is_slave_ok = lambda where: True  # a slave is "connected" but never acknowledges
        d = b.call(send_v1())
        assert isinstance(d, defer.Deferred)
        out = []
        d.addCallback(out.append)
        b.clock.advance(1.499)
        assert out == [] and len(ha.group_transfer) == 1  # it waits: no answer before the deadline
        b.clock.advance(0.002)
        assert out and out[0].code == ResponseCode.FLUSH_SLAVE_TIMEOUT
        assert out[0].ext_fields["msgId"]
    finally:
        b.stop()


@pytest.mark.parametrize("flag_field", [{"batch": "1"}, {"batch": "true"}])
def test_batch_is_stored_as_one_record_per_item(broker, flag_field):
    body = batch_body(
        [(b"one", {"KEYS": "k1", "UNIQ_KEY": "A"}), (b"two", {"KEYS": "k2", "UNIQ_KEY": "B", "WAIT": "true"})]
    )
    resp = broker.call(send_v1(body=body, properties=props(WAIT="true", TAGS="bt"), **flag_field))
    assert resp.code == ResponseCode.SUCCESS
    ids = resp.ext_fields["msgId"].split(",")
    assert len(ids) == 2 and resp.ext_fields["queueOffset"] == "0"
    msgs = stored(broker)
    assert [m.body for m in msgs] == [b"one", b"two"]
    assert [m.queue_offset for m in msgs] == [0, 1]
    assert [m.properties["UNIQ_KEY"] for m in msgs] == ["A", "B"]
    assert all(m.properties["CLUSTER"] == "DefaultCluster" and "WAIT" not in m.properties for m in msgs)
    assert all(m.properties["TAGS"] == "bt" for m in msgs)  # header properties added to each item
    assert ids == [m.msg_id for m in msgs]


def test_code_320_is_a_batch_and_a_bad_batch_is_illegal(broker):
    req = send_v2(body=batch_body([(b"x", {}), (b"y", {})]))
    req.code = RequestCode.SEND_BATCH_MESSAGE
    assert broker.call(req).code == ResponseCode.SUCCESS
    assert len(stored(broker)) == 2
    assert broker.call(send_v1(body=b"\x00\x00\x00\x30garbage", batch="1")).code == ResponseCode.MESSAGE_ILLEGAL


def test_compressed_body_is_stored_as_sent(broker):
    import zlib

    raw = zlib.compress(b"z" * 5000, 5)
    assert broker.call(send_v1(body=raw, sysFlag=1)).code == ResponseCode.SUCCESS
    [m] = stored(broker)
    assert m.body == raw and m.sys_flag & record.FLAG_COMPRESSED


def test_retry_topic_past_max_reconsume_goes_to_dlq(broker):
    resp = broker.call(send_v1(topic="%RETRY%CG", reconsumeTimes=3, maxReconsumeTimes=3))
    assert resp.code == ResponseCode.SUCCESS
    assert broker.store.max_queue_offset("%DLQ%CG", 0) == 1
    assert broker.store.max_queue_offset("%RETRY%CG", 0) == 0


def test_metrics_count_responses(broker):
    broker.call(send_v1())
    broker.call(send_v1(topic="TBW102"))
    text = broker.server.controller.metrics.render()
    assert 'rocketmq_send_responses_total{code="0"} 1' in text
    assert 'rocketmq_send_responses_total{code="1"} 1' in text


@pytest.mark.parametrize("status", list(PutStatus))
def test_reply_for_every_put_status_comes_from_its_table(broker, status):
    """Every PutStatus member, including any added later: its code, and msgId only when stored."""

    def fake_put(msg, wait_store_ok=True):
        return defer.succeed(
            PutResult(status, 4096, 200, 7, "ABC", 1) if status.stored else PutResult(status, remark="because")
        )

    broker.server.controller.put = fake_put  # what the send path calls (put_message wraps it)
    resp = broker.call(send_v1(queue_id=1))
    assert resp.code == status.response_code
    assert ("msgId" in resp.ext_fields) == status.stored
    if status.stored and status is not PutStatus.PUT_OK:
        assert resp.remark == status.value


def test_sync_master_wait_that_errbacks_is_answered_flush_slave_timeout(tmp_path):
    b = Broker(tmp_path / "se", brokerRole="SYNC_MASTER")
    try:
        b.server.controller.ha.wait_for_slave = lambda offset: defer.fail(RuntimeError("lost the wait"))
        resp = b.call(send_v1())
        assert resp.code == ResponseCode.FLUSH_SLAVE_TIMEOUT, "an error in the wait was answered as success"
        assert resp.ext_fields["msgId"] and "lost the wait" in resp.remark
        assert len(stored(b)) == 1
    finally:
        b.stop()
