"""rmqha/proxy's IO-free parts: status mapping, routes, sends, receipt handles, settings."""

import pytest

from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.store import delay, record
from rmqha.proxy import codes, convert, receipt, routes, settings
from rmqha.proxy.service import java_hash_bucket, overall
from rmqha.proxy.third_party.rocketmq_apis.v2 import definition_pb2 as d
from rmqha.proxy.third_party.rocketmq_apis.v2 import service_pb2 as s

LEVELS = delay.parse_delay_levels(convert.DEFAULT_DELAY_LEVELS)
EP = d.Endpoints(scheme=d.IPv4, addresses=[d.Address(host="10.0.0.1", port=8081)])


# ---- status codes (ResponseBuilder, SendMessageActivity) ----------------------------------------


@pytest.mark.parametrize(
    "code,expected",
    [
        (ResponseCode.SUCCESS, d.OK),
        (ResponseCode.FLUSH_DISK_TIMEOUT, d.MASTER_PERSISTENCE_TIMEOUT),
        (ResponseCode.FLUSH_SLAVE_TIMEOUT, d.SLAVE_PERSISTENCE_TIMEOUT),
        (ResponseCode.SLAVE_NOT_AVAILABLE, d.HA_NOT_AVAILABLE),
        (ResponseCode.SYSTEM_BUSY, d.TOO_MANY_REQUESTS),
        (ResponseCode.REQUEST_CODE_NOT_SUPPORTED, d.NOT_IMPLEMENTED),
        (ResponseCode.SYSTEM_ERROR, d.INTERNAL_SERVER_ERROR),
        (ResponseCode.NO_PERMISSION, d.INTERNAL_SERVER_ERROR),
    ],
)
def test_send_outcomes_map_as_the_5x_proxy(code, expected):
    assert codes.from_send(code, "remark").code == expected


def test_remoting_table_keeps_the_remark_and_defaults_to_internal_error():
    st = codes.from_remoting(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, "no group")
    assert (st.code, st.message) == (d.CONSUMER_GROUP_NOT_FOUND, "no group")
    assert codes.from_remoting(ResponseCode.FLUSH_SLAVE_TIMEOUT, None) == d.Status(
        code=d.INTERNAL_SERVER_ERROR, message="12"
    )


def test_overall_status_is_multiple_results_when_entries_differ():
    ok, slow = (
        s.SendResultEntry(status=codes.status(d.OK)),
        s.SendResultEntry(status=codes.status(d.SLAVE_PERSISTENCE_TIMEOUT)),
    )
    assert overall([ok, ok]).code == d.OK
    assert overall([ok, slow]).code == d.MULTIPLE_RESULTS
    assert overall([]).code == d.INTERNAL_SERVER_ERROR


# ---- routes --------------------------------------------------------------------------------------


def _route(perm=6, r=4, w=4, slave_only=False):
    addrs = {"1": "10.0.0.3:10921"} if slave_only else {"0": "10.0.0.2:10911", "1": "10.0.0.3:10921"}
    return {
        "brokerDatas": [{"cluster": "C", "brokerName": "broker-a", "brokerAddrs": addrs}],
        "queueDatas": [
            {"brokerName": "broker-a", "readQueueNums": r, "writeQueueNums": w, "perm": perm, "topicSysFlag": 0}
        ],
    }


def test_message_queues_point_at_the_proxy_and_lay_out_as_route_activity():
    qs = routes.message_queues(_route(r=4, w=2), d.Resource(name="T"), EP)
    assert [(q.id, q.permission) for q in qs] == [(0, d.READ), (1, d.READ), (2, d.READ_WRITE), (3, d.READ_WRITE)]
    assert all(q.broker.endpoints == EP and q.broker.name == "broker-a" and q.broker.id == 0 for q in qs)
    assert list(qs[0].accept_message_types) == [d.NORMAL, d.FIFO, d.DELAY, d.TRANSACTION]


def test_a_broker_group_without_master_has_no_queues_and_no_write_queues():
    assert routes.message_queues(_route(slave_only=True), d.Resource(name="T"), EP) == []
    assert routes.write_queues(_route(slave_only=True)) == []
    assert routes.master_address(_route(), "broker-a") == "10.0.0.2:10911"


def test_assignments_one_per_broker_or_every_queue_for_fifo():
    a = routes.assignments(_route(), d.Resource(name="T"), EP, fifo=False)
    assert [x.message_queue.id for x in a] == [-1]
    a = routes.assignments(_route(), d.Resource(name="T"), EP, fifo=True)
    assert [x.message_queue.id for x in a] == [0, 1, 2, 3]
    assert routes.assignments(_route(perm=2), d.Resource(name="T"), EP, fifo=False) == []


# ---- sends ----------------------------------------------------------------------------------------


def _msg(**sp):
    m = d.Message(topic=d.Resource(name="T"), body=b"hello", user_properties={"k": "v"})
    m.system_properties.message_id = "ID1"
    for k, v in sp.items():
        if k in ("delivery_timestamp", "orphaned_transaction_recovery_duration"):
            getattr(m.system_properties, k).CopyFrom(v)
        elif k == "keys":
            m.system_properties.keys.extend(v)
        else:
            setattr(m.system_properties, k, v)
    return m


def test_send_request_carries_what_the_5x_proxy_stores():
    cmd = convert.send_request(_msg(tag="TA", keys=["a", "b"], message_group="G1"), 3, 1000, LEVELS)
    assert cmd.code == RequestCode.SEND_MESSAGE and cmd.body == b"hello"
    f = cmd.ext_fields
    assert (f["topic"], f["queueId"], f["producerGroup"], f["sysFlag"]) == ("T", "3", "T", "0")
    props = record.decode_properties(f["properties"])
    assert props == {"k": "v", "UNIQ_KEY": "ID1", "TAGS": "TA", "KEYS": "a b", "PGROUP": "T", "__SHARDINGKEY": "G1"}


def test_transactional_send_is_a_prepared_half():
    du = convert.duration_pb2.Duration(seconds=30)
    cmd = convert.send_request(
        _msg(message_type=d.TRANSACTION, orphaned_transaction_recovery_duration=du), 0, 0, LEVELS
    )
    props = record.decode_properties(cmd.ext_fields["properties"])
    assert cmd.ext_fields["sysFlag"] == str(record.TRANSACTION_PREPARED)
    assert (props["TRAN_MSG"], props["CHECK_IMMUNITY_TIME_IN_SECONDS"]) == ("true", "30")


def test_delivery_timestamp_rounds_up_to_a_delay_level():
    now = 1_000_000
    cmd = convert.send_request(_msg(delivery_timestamp=convert.timestamp(now + 7000)), 0, now, LEVELS)
    props = record.decode_properties(cmd.ext_fields["properties"])
    assert props["DELAY"] == "3" and props["TIMER_DELIVER_MS"] == str(now + 7000)  # 10 s: the first level > 7 s
    assert convert.delay_level(now + 10 * 86400_000, now, LEVELS) == len(LEVELS)


@pytest.mark.parametrize(
    "msg,code",
    [
        (_msg(delivery_timestamp=convert.timestamp(10**13)), d.ILLEGAL_DELIVERY_TIME),
        (d.Message(topic=d.Resource(name="T"), body=b"x"), d.ILLEGAL_MESSAGE_ID),
        (_msg(), None),
    ],
)
def test_send_validation(msg, code):
    if code is None:
        convert.send_request(msg, 0, 0, LEVELS)
        return
    with pytest.raises(convert.Invalid) as e:
        convert.send_request(msg, 0, 0, LEVELS)
    assert e.value.code == code


def test_system_property_names_and_empty_bodies_are_refused():
    m = _msg()
    m.user_properties["UNIQ_KEY"] = "forged"
    with pytest.raises(convert.Invalid) as e:
        convert.send_request(m, 0, 0, LEVELS)
    assert e.value.code == d.ILLEGAL_MESSAGE_PROPERTY_KEY
    m = _msg()
    m.body = b""
    with pytest.raises(convert.Invalid) as e:
        convert.send_request(m, 0, 0, LEVELS)
    assert e.value.code == d.MESSAGE_BODY_EMPTY


def test_fifo_group_always_lands_on_one_queue():
    assert len({java_hash_bucket("order-42", 8) for _ in range(5)}) == 1
    assert {java_hash_bucket(f"g{i}", 8) for i in range(200)} == set(range(8))


# ---- received messages and receipt handles ------------------------------------------------------


def test_stored_message_as_the_client_receives_it():
    m = record.Message(
        topic="T",
        body=b"abc",
        queue_id=2,
        queue_offset=7,
        born_timestamp=1500,
        store_timestamp=1600,
        reconsume_times=2,
        properties={"UNIQ_KEY": "ID9", "TAGS": "x", "KEYS": "k1 k2", "u": "1", "POP_CK": "0 1 2 0 0 b 2 7"},
    )
    out = convert.stored_message(m, "RH", 15000, 3)
    sp = out.system_properties
    assert (sp.message_id, sp.tag, list(sp.keys), sp.queue_offset, sp.delivery_attempt) == (
        "ID9",
        "x",
        ["k1", "k2"],
        7,
        3,
    )
    assert sp.body_digest.checksum == "352441C2" and sp.receipt_handle == "RH" and sp.invisible_duration.seconds == 15
    assert dict(out.user_properties) == {"u": "1"}


def test_receipt_handle_round_trip_and_extra_info():
    h = receipt.from_pop_ck("5 1700000000000 30000 0 1 broker-a 3 9", 12345)
    assert receipt.decode(h.encode()) == h
    assert h.extra_info() == "5 1700000000000 30000 0 1 broker-a 3"
    assert h.retry and receipt.real_topic("T", "G", h.topic_kind) == "%RETRY%G_T"
    with pytest.raises(receipt.BadHandle):
        receipt.decode("1 2 3")
    with pytest.raises(receipt.BadHandle):
        receipt.decode("a b c d e f g h")


# ---- settings -------------------------------------------------------------------------------------


def test_settings_keep_the_clients_and_add_the_servers():
    client = d.Settings(client_type=d.SIMPLE_CONSUMER, subscription=d.Subscription(group=d.Resource(name="G")))
    out = settings.consumer(client, retry_max_times=2, orderly=True)
    assert out.client_type == d.SIMPLE_CONSUMER and out.subscription.group.name == "G"
    assert out.backoff_policy.max_attempts == 3 and out.subscription.fifo
    assert out.subscription.long_polling_timeout.seconds == 20
    p = settings.producer(d.Settings(client_type=d.PRODUCER, publishing=d.Publishing(topics=[d.Resource(name="T")])))
    assert (
        p.backoff_policy.max_attempts == 3 and p.publishing.validate_message_type and p.publishing.topics[0].name == "T"
    )
