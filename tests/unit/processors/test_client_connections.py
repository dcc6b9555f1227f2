"""GET_CONSUMER_CONNECTION_LIST (203), GET_PRODUCER_CONNECTION_LIST (204) and GET_ALL_PRODUCER_INFO (328):
the bodies 4.9.8 writes, whichever client (C++ ordinals or Java names) sent the heartbeat."""

import json

import pytest

from rmqha.broker.managers import client_views as client_info
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.command import HeaderFieldError, RemotingCommand

from .harness import TOPIC, Broker, FakeContext


def heartbeat(client_id, consumer=None, producer=None, language="CPP", version=63):
    body = {"clientID": client_id}
    if consumer is not None:
        body["consumerDataSet"] = [consumer]
    if producer is not None:
        body["producerDataSet"] = [{"groupName": producer}]
    return RemotingCommand.request(
        RequestCode.HEART_BEAT, body=json.dumps(body).encode(), language=language, version=version
    )


CPP_CONSUMER = {
    "groupName": "CG",
    "consumeType": 1,
    "messageModel": 1,
    "consumeFromWhere": 4,
    "subscriptionDataSet": [
        {
            "topic": TOPIC,
            "subString": "a || b",
            "subVersion": "1700000000123",
            "tagsSet": ["a", "b"],
            "codeSet": [97, 98],
        }
    ],
}
JAVA_CONSUMER = {
    "groupName": "CG",
    "consumeType": "CONSUME_PASSIVELY",
    "messageModel": "CLUSTERING",
    "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
    "unitMode": False,
    "subscriptionDataSet": [
        {
            "classFilterMode": False,
            "topic": TOPIC,
            "subString": "a || b",
            "subVersion": 1700000000123,
            "tagsSet": ["a", "b"],
            "codeSet": [97, 98],
            "expressionType": "TAG",
        }
    ],
}
EXPECTED_CONNECTION = {
    "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
    "consumeType": "CONSUME_PASSIVELY",
    "messageModel": "CLUSTERING",
    "subscriptionTable": {
        TOPIC: {
            "classFilterMode": False,
            "codeSet": [97, 98],
            "expressionType": "TAG",
            "subString": "a || b",
            "subVersion": 1700000000123,
            "tagsSet": ["a", "b"],
            "topic": TOPIC,
        }
    },
}


def consumer_connections(b, group="CG"):
    return b.call(RemotingCommand.request(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group}))


def test_consumer_connection_list_from_a_cpp_and_a_java_heartbeat_reads_the_same(tmp_path):
    for name, consumer, language, version in (("cpp", CPP_CONSUMER, "CPP", 63), ("java", JAVA_CONSUMER, "JAVA", 409)):
        b = Broker(tmp_path / name)
        try:
            ctx = FakeContext("10.0.0.7:41000")
            assert b.call(heartbeat("ip@1", consumer, language=language, version=version), ctx).code == 0
            r = consumer_connections(b)
            assert (r.code, r.remark) == (ResponseCode.SUCCESS, None)
            assert json.loads(r.body) == dict(
                EXPECTED_CONNECTION,
                connectionSet=[
                    {"clientAddr": "10.0.0.7:41000", "clientId": "ip@1", "language": language, "version": version}
                ],
            )
        finally:
            b.stop()


def test_consumer_connection_list_of_a_group_not_online(tmp_path):
    b = Broker(tmp_path / "a")
    try:
        r = consumer_connections(b, "Nobody")
        assert (r.code, r.remark, r.body) == (
            ResponseCode.CONSUMER_NOT_ONLINE,
            "the consumer group[Nobody] not online",
            b"",
        )
        ctx = FakeContext()
        b.call(heartbeat("ip@1", CPP_CONSUMER), ctx)
        ctx.close()  # its last connection went: not online again
        assert consumer_connections(b).code == ResponseCode.CONSUMER_NOT_ONLINE
        with pytest.raises(HeaderFieldError, match="the custom field <consumerGroup> is null"):  # SYSTEM_ERROR
            b.call(RemotingCommand.request(RequestCode.GET_CONSUMER_CONNECTION_LIST))
    finally:
        b.stop()


def test_heartbeat_fields_a_client_left_out_take_javas_defaults(tmp_path):
    b = Broker(tmp_path / "a")
    try:
        b.clock.advance(1_700_000_000.5)
        sparse = {"groupName": "CG", "consumeType": 7, "subscriptionDataSet": [{"topic": TOPIC, "subString": "*"}]}
        b.call(heartbeat("ip@1", sparse), FakeContext())
        body = json.loads(consumer_connections(b).body)
        assert "consumeType" not in body and "messageModel" not in body and "consumeFromWhere" not in body
        assert body["subscriptionTable"][TOPIC] == {
            "classFilterMode": False,
            "codeSet": [],
            "expressionType": "TAG",
            "subString": "*",
            "subVersion": 1_700_000_000_500,
            "tagsSet": [],
            "topic": TOPIC,
        }
    finally:
        b.stop()


def test_producer_connection_list_and_all_producer_info(tmp_path):
    b = Broker(tmp_path / "a")
    try:
        b.clock.advance(1_700_000_000)
        c1, c2 = FakeContext("10.0.0.1:1001"), FakeContext("10.0.0.2:1002")
        b.call(heartbeat("p@1", producer="PG"), c1)
        b.clock.advance(2.5)
        b.call(heartbeat("p@2", producer="PG", language="JAVA", version=409), c2)
        r = b.call(RemotingCommand.request(RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "PG"}))
        assert r.code == ResponseCode.SUCCESS
        assert json.loads(r.body) == {
            "connectionSet": [
                {"clientAddr": "10.0.0.1:1001", "clientId": "p@1", "language": "CPP", "version": 63},
                {"clientAddr": "10.0.0.2:1002", "clientId": "p@2", "language": "JAVA", "version": 409},
            ]
        }
        info = b.call(RemotingCommand.request(RequestCode.GET_ALL_PRODUCER_INFO))
        assert json.loads(info.body) == {
            "data": {
                "PG": [
                    {
                        "clientId": "p@1",
                        "language": "CPP",
                        "lastUpdateTimestamp": 1_700_000_000_000,
                        "remoteIP": "/10.0.0.1:1001",
                        "version": 63,
                    },
                    {
                        "clientId": "p@2",
                        "language": "JAVA",
                        "lastUpdateTimestamp": 1_700_000_002_500,
                        "remoteIP": "/10.0.0.2:1002",
                        "version": 409,
                    },
                ]
            }
        }
        # one unregisters, the other closes: the group is gone
        unreg = RemotingCommand.request(RequestCode.UNREGISTER_CLIENT, {"clientID": "p@1", "producerGroup": "PG"})
        assert b.call(unreg, c1).code == ResponseCode.SUCCESS
        c2.close()
        gone = b.call(RemotingCommand.request(RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "PG"}))
        assert (gone.code, gone.remark) == (ResponseCode.SYSTEM_ERROR, "the producer group[PG] not exist")
        assert json.loads(b.call(RemotingCommand.request(RequestCode.GET_ALL_PRODUCER_INFO)).body) == {"data": {}}
    finally:
        b.stop()


def test_producers_expire_after_120_s_without_heartbeat(tmp_path):
    b = Broker(tmp_path / "a")
    try:
        ctx = FakeContext()
        b.call(heartbeat("p@1", producer="PG"), ctx)
        b.clock.advance(119)
        b.call(heartbeat("p@1", producer="PG"), ctx)  # refreshed
        b.clock.advance(119)
        assert not ctx.closed
        b.clock.advance(11)  # the 10 s scan after 120 s of silence
        assert ctx.closed
        r = b.call(RemotingCommand.request(RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "PG"}))
        assert r.code == ResponseCode.SYSTEM_ERROR
    finally:
        b.stop()


def test_enum_names_and_version_descriptions():
    assert client_info.enum_name(5, client_info.CONSUME_FROM_WHERE) == "CONSUME_FROM_TIMESTAMP"
    assert client_info.enum_name("0", client_info.MESSAGE_MODELS) == "BROADCASTING"
    assert client_info.enum_name("PUSH", client_info.CONSUME_TYPES) is None
    assert client_info.enum_name(True, client_info.CONSUME_TYPES) is None
    assert [client_info.version_desc(v) for v in (0, 15, 16, 17, 28, 45, 46, 61, 62, 409)] == [
        "V3_0_0_SNAPSHOT",
        "V3_0_0_FINAL",
        "V3_0_1_SNAPSHOT",
        "V3_0_1",
        "V3_0_7_SNAPSHOT",
        "V3_0_15",
        "V3_1_0_SNAPSHOT",
        "V3_1_7",
        "V3_1_8_SNAPSHOT",
        "version 409",
    ]
