"""A pull without the SUBSCRIPTION bit is answered as 4.9.8's PullMessageProcessor does; and %DLQ% topics
are created readable, as 4.9.8 creates them."""

from __future__ import annotations

import json

import pytest

from rmqha.broker.remoting.codes import PERM_READ, PERM_WRITE, RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand

from .harness import TOPIC, Broker, decode_records, props, pull, send_v1

FAQ = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path / "a")
    b.call(send_v1(body=b"m0", properties=props(UNIQ_KEY="U0")))
    yield b
    b.stop()


def heartbeat(broker, group, topic=TOPIC, model="CLUSTERING", sub_version=5):
    hb = {
        "clientID": "c1",
        "consumerDataSet": [
            {
                "groupName": group,
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": model,
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "subscriptionDataSet": [{"topic": topic, "subString": "*", "subVersion": sub_version}],
            }
        ],
    }
    assert broker.call(RemotingCommand.request(RequestCode.HEART_BEAT, body=json.dumps(hb).encode())).code == 0


def plain_pull(group, sub_version=5):
    req = pull(group=group, sys_flag=0)
    req.ext_fields["subVersion"] = str(sub_version)
    return req


def test_no_heartbeat_no_subscription_flag_is_subscription_not_exist(broker):
    r = broker.call(plain_pull("NEVER_SEEN"))
    assert (r.code, r.remark, r.body) == (
        ResponseCode.SUBSCRIPTION_NOT_EXIST,
        "the consumer's group info not exist" + FAQ,
        b"",
    )


def test_online_group_without_this_topic_is_subscription_not_exist(broker):
    heartbeat(broker, "OTHER", topic="SomeOtherTopic")
    r = broker.call(plain_pull("OTHER"))
    assert (r.code, r.remark) == (ResponseCode.SUBSCRIPTION_NOT_EXIST, "the consumer's subscription not exist" + FAQ)


def test_an_older_registered_version_is_subscription_not_latest(broker):
    heartbeat(broker, "G", sub_version=5)
    r = broker.call(plain_pull("G", sub_version=6))
    assert (r.code, r.remark) == (ResponseCode.SUBSCRIPTION_NOT_LATEST, "the consumer's subscription not latest")
    r = broker.call(plain_pull("G", sub_version=5))
    assert r.code == ResponseCode.SUCCESS and [m.body for m in decode_records(r.body)] == [b"m0"]


def test_broadcast_refused_when_the_group_disallows_it(broker):
    body = json.dumps({"groupName": "BC", "consumeBroadcastEnable": False}).encode()
    broker.call(RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body))
    heartbeat(broker, "BC", model="BROADCASTING")
    r = broker.call(plain_pull("BC"))
    assert (r.code, r.remark) == (ResponseCode.NO_PERMISSION, "the consumer group[BC] can not consume by broadcast way")
    # with the subscription in the request there is no such check (4.9 makes it on the registered path only)
    assert broker.call(pull(group="BC")).code == ResponseCode.SUCCESS


def test_subscription_flag_needs_no_heartbeat(broker):
    r = broker.call(pull(group="LONE", sys_flag=0x4))
    assert r.code == ResponseCode.SUCCESS


def test_dlq_is_created_readable_and_can_be_pulled(broker):
    # a retry message past its max reconsume times goes to %DLQ%<group>
    req = send_v1(topic="%RETRY%CG", body=b"dead", properties=props(UNIQ_KEY="U9", MAX_RECONSUME_TIMES="1"))
    req.ext_fields["reconsumeTimes"] = "1"
    assert broker.call(req).code == ResponseCode.SUCCESS
    tc = broker.server.topics.get("%DLQ%CG")
    assert (tc.perm, tc.read_queue_nums, tc.write_queue_nums) == (PERM_READ | PERM_WRITE, 1, 1)
    r = broker.call(pull(topic="%DLQ%CG", group="DLQ_READER"))
    assert r.code == ResponseCode.SUCCESS and [m.body for m in decode_records(r.body)] == [b"dead"]


def test_send_back_past_max_times_creates_a_readable_dlq(broker):
    from rmqha.broker.store import record

    r = broker.call(send_v1(body=b"fail me", properties=props(UNIQ_KEY="U7")))
    _host, phys = record.parse_offset_msg_id(r.ext_fields["msgId"])
    back = RemotingCommand.request(
        RequestCode.CONSUMER_SEND_MSG_BACK,
        {
            "offset": str(phys),
            "group": "SB",
            "delayLevel": "-1",
            "originMsgId": r.ext_fields["msgId"],
            "originTopic": TOPIC,
            "unitMode": "false",
            "maxReconsumeTimes": "16",
        },
    )
    assert broker.call(back).code == ResponseCode.SUCCESS
    assert broker.server.topics.get("%DLQ%SB").perm == PERM_READ | PERM_WRITE
    r = broker.call(pull(topic="%DLQ%SB", group="DLQ_READER"))
    assert [m.body for m in decode_records(r.body)] == [b"fail me"]


def test_send_back_needs_the_group_and_old_clients_get_its_retry_max_times(tmp_path):
    from rmqha.broker.store import record

    b = Broker(tmp_path / "b", autoCreateSubscriptionGroup="false")
    try:
        r = b.call(send_v1(body=b"x", properties=props(UNIQ_KEY="U1")))
        _host, phys = record.parse_offset_msg_id(r.ext_fields["msgId"])

        def back(group, version):
            req = RemotingCommand.request(
                RequestCode.CONSUMER_SEND_MSG_BACK,
                {
                    "offset": str(phys),
                    "group": group,
                    "delayLevel": "0",
                    "originMsgId": "",
                    "originTopic": TOPIC,
                    "maxReconsumeTimes": "16",
                },
                version=version,
            )
            return b.call(req)

        r = back("UNKNOWN", 409)
        assert (r.code, r.remark) == (
            ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
            "subscription group not exist, UNKNOWN " + FAQ,
        )
        body = json.dumps({"groupName": "ONCE", "retryMaxTimes": 0}).encode()
        b.call(RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body))
        assert back("ONCE", 409).code == ResponseCode.SUCCESS  # header's 16: to %RETRY%ONCE via a delay
        assert b.store.max_queue_offset("%DLQ%ONCE", 0) == 0
        assert back("ONCE", 63).code == ResponseCode.SUCCESS  # a pre-V3_4_9 client: the group's 0 -> DLQ
        assert b.store.max_queue_offset("%DLQ%ONCE", 0) == 1
    finally:
        b.stop()
