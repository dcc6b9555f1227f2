"""Requests the broker answers by asking a consumer (client_calls.py): GET_CONSUMER_RUNNING_INFO (307),
CONSUME_MESSAGE_DIRECTLY (309), INVOKE_BROKER_TO_RESET_OFFSET (222), INVOKE_BROKER_TO_GET_CONSUMER_STATUS
(223). The consumer is a real RemotingProtocol on an in-memory transport and the broker's fake clock, so
the 10 s and 5 s timeouts are the protocol's own."""

import json

import pytest
from twisted.internet import defer
from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport

from rmqha.broker.remoting import object_keys
from rmqha.broker.remoting.codec import FrameDecoder, encode
from rmqha.broker.remoting.codes import FLAG_ONEWAY, RequestCode, ResponseCode
from rmqha.broker.remoting.command import HeaderFieldError, RemotingCommand
from rmqha.broker.remoting.protocol import RemotingProtocol
from rmqha.broker.store import queries, record

from .harness import TOPIC, Broker, send_v1

MQ = lambda q: json.dumps(object_keys.message_queue(TOPIC, "broker-a", q), separators=(",", ":"), sort_keys=True)


class Consumer:
    """One client connection to the broker; what the broker sends it is read back as commands."""

    def __init__(self, broker: Broker, client_id: str, port: int, language="JAVA", version=409, group="CG"):
        self.broker = broker
        self.proto = RemotingProtocol(clock=broker.clock)
        self.transport = StringTransport(
            hostAddress=IPv4Address("TCP", "127.0.0.1", 10911), peerAddress=IPv4Address("TCP", "10.0.0.9", port)
        )
        self.proto.makeConnection(self.transport)
        self._decoder = FrameDecoder()
        body = {
            "clientID": client_id,
            "consumerDataSet": [
                {
                    "groupName": group,
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                    "subscriptionDataSet": [{"topic": TOPIC, "subString": "*", "subVersion": 1}],
                }
            ],
        }
        hb = RemotingCommand.request(
            RequestCode.HEART_BEAT, body=json.dumps(body).encode(), language=language, version=version
        )
        assert broker.call(hb, self.proto.context).code == ResponseCode.SUCCESS

    def received(self, code=None) -> list[RemotingCommand]:
        """Requests the broker sent (notifications left out unless asked for)."""
        data = self.transport.value()
        self.transport.clear()
        cmds = list(self._decoder.feed(data))
        self.pending = getattr(self, "pending", []) + cmds
        return [c for c in cmds if code is None or c.code == code]

    def reply(self, request: RemotingCommand, code=ResponseCode.SUCCESS, remark=None, body=b"", ext=None):
        self.proto.dataReceived(encode(request.make_response(code, remark, ext_fields=ext, body=body)))


def admin(code, fields, language="JAVA", body=b""):
    return RemotingCommand.request(code, fields, body=body, language=language)


def result(d):
    """The response a processor's Deferred fired with (it must have fired)."""
    out = []
    d.addBoth(out.append)
    assert out, "the broker has not answered"
    return out[0]


def running_info(b, client_id="ip@1", group="CG"):
    return b.call(
        admin(
            RequestCode.GET_CONSUMER_RUNNING_INFO,
            {"consumerGroup": group, "clientId": client_id, "jstackEnable": False},
        )
    )


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path / "a")
    yield b
    b.stop()


def test_running_info_is_forwarded_to_the_client_and_its_reply_returned(broker):
    c = Consumer(broker, "ip@1", 5001)
    c.received()
    d = running_info(broker)
    assert isinstance(d, defer.Deferred)
    [asked] = c.received(RequestCode.GET_CONSUMER_RUNNING_INFO)
    assert asked.ext_fields == {"consumerGroup": "CG", "clientId": "ip@1", "jstackEnable": "false"}
    assert not asked.is_oneway and not asked.is_response
    c.reply(asked, body=b'{"properties":{"PROP_CONSUME_TYPE":"CONSUME_PASSIVELY"}}', remark="fine")
    r = result(d)
    assert (r.code, r.remark, r.body) == (0, "fine", b'{"properties":{"PROP_CONSUME_TYPE":"CONSUME_PASSIVELY"}}')


def test_running_info_refusals_timeout_and_lost_connection(broker):
    r = running_info(broker, "ghost")
    assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, "The Consumer <CG> <ghost> not online")
    Consumer(broker, "old@1", 5002, version=61)
    r = running_info(broker, "old@1")
    assert (r.code, r.remark) == (
        ResponseCode.SYSTEM_ERROR,
        "The Consumer <old@1> Version <V3_1_7> too low to finish, please upgrade it to V3_1_8_SNAPSHOT",
    )
    silent = Consumer(broker, "ip@1", 5003)
    d = running_info(broker)
    broker.clock.advance(9.9)
    assert not d.called
    broker.clock.advance(0.2)  # Broker2Client.callClient's 10 s
    r = result(d)
    assert r.code == ResponseCode.CONSUME_MSG_TIMEOUT and r.remark.startswith("consumer <CG> <ip@1> Timeout: ")
    [late] = silent.received(RequestCode.GET_CONSUMER_RUNNING_INFO)
    silent.reply(late)  # too late: dropped, nothing breaks
    d = running_info(broker)
    silent.proto.connectionLost(None)
    r = result(d)
    assert r.code == ResponseCode.SYSTEM_ERROR and r.remark.startswith("invoke consumer <CG> <ip@1> Exception: ")
    assert silent.proto._pending == {}  # no timer left behind


def test_consume_message_directly_sends_the_stored_record_and_this_brokers_name(broker):
    put = broker.call(send_v1(TOPIC, b"directly", queue_id=0))
    assert put.code == ResponseCode.SUCCESS
    msg_id = put.ext_fields["msgId"]
    c = Consumer(broker, "ip@1", 5004)
    d = broker.call(
        admin(RequestCode.CONSUME_MESSAGE_DIRECTLY, {"consumerGroup": "CG", "clientId": "ip@1", "msgId": msg_id})
    )
    [asked] = c.received(RequestCode.CONSUME_MESSAGE_DIRECTLY)
    assert asked.ext_fields == {"consumerGroup": "CG", "clientId": "ip@1", "msgId": msg_id, "brokerName": "broker-a"}
    scanned = record.scan(asked.body, 0)
    assert scanned.kind == record.Scan.MESSAGE and scanned.message.body == b"directly"
    assert scanned.size == len(asked.body)
    c.reply(asked, body=b'{"consumeResult":"CR_SUCCESS","order":false,"autoCommit":true,"spentTimeMills":3}')
    assert json.loads(result(d).body)["consumeResult"] == "CR_SUCCESS"
    # an id that names nothing, or is not an offsetMsgId
    gone = broker.call(
        admin(
            RequestCode.CONSUME_MESSAGE_DIRECTLY,
            {"consumerGroup": "CG", "clientId": "ip@1", "msgId": "7F00000100002A9F0000000000FFFFFF"},
        )
    )
    assert gone.code == ResponseCode.SYSTEM_ERROR and "no message stored here" in gone.remark
    bad = broker.call(
        admin(RequestCode.CONSUME_MESSAGE_DIRECTLY, {"consumerGroup": "CG", "clientId": "ip@1", "msgId": "zz"})
    )
    assert bad.code == ResponseCode.SYSTEM_ERROR and "not an offsetMsgId" in bad.remark
    with pytest.raises(HeaderFieldError):
        broker.call(admin(RequestCode.CONSUME_MESSAGE_DIRECTLY, {"consumerGroup": "CG"}))
    assert c.received(RequestCode.CONSUME_MESSAGE_DIRECTLY) == []


def store_times(broker, n):
    """n messages in queue 0 of TOPIC, one second apart on the fake clock; their store times."""
    for i in range(n):
        broker.clock.advance(1)
        assert broker.call(send_v1(TOPIC, f"m{i}".encode(), queue_id=0)).code == ResponseCode.SUCCESS
    return [queries.queue_store_time(broker.store, TOPIC, 0, i) for i in range(n)]


def reset(broker, timestamp, force=True, language="JAVA", group="CG"):
    return broker.call(
        admin(
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
            {"topic": TOPIC, "group": group, "timestamp": timestamp, "isForce": force},
            language,
        )
    )


def commit(broker, queue_id, offset, group="CG"):
    req = RemotingCommand.request(
        RequestCode.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": group, "topic": TOPIC, "queueId": queue_id, "commitOffset": offset},
    )
    assert broker.call(req).code == ResponseCode.SUCCESS


def test_reset_offset_by_time_tells_every_client_in_its_own_form(broker):
    times = store_times(broker, 5)
    queues = broker.server.topics.get(TOPIC).write_queue_nums
    for q in range(queues):
        commit(broker, q, 5 if q == 0 else 0)
    java, cpp = Consumer(broker, "java@1", 5005), Consumer(broker, "cpp@1", 5006, language="CPP", version=63)
    java.received(), cpp.received()
    r = reset(broker, times[2])
    assert r.code == ResponseCode.SUCCESS
    expected = {MQ(q): (2 if q == 0 else 0) for q in range(queues)}
    assert object_keys.loads(r.body) == {"offsetTable": expected}
    [to_java] = java.received(RequestCode.RESET_CONSUMER_CLIENT_OFFSET)
    [to_cpp] = cpp.received(RequestCode.RESET_CONSUMER_CLIENT_OFFSET)
    for sent in (to_java, to_cpp):
        assert sent.flag & FLAG_ONEWAY
        assert sent.ext_fields == {"topic": TOPIC, "group": "CG", "timestamp": str(times[2]), "isForce": "false"}
    assert object_keys.loads(to_java.body) == {"offsetTable": expected}
    assert json.loads(to_cpp.body) == {
        "offsetTable": [
            {"brokerName": "broker-a", "offset": 2 if q == 0 else 0, "queueId": q, "topic": TOPIC}
            for q in range(queues)
        ]
    }
    # as 4.9: the broker's committed offsets are the clients' to change
    assert broker.server.offsets.query("CG", TOPIC, 0) == 5


def test_reset_offset_without_force_never_moves_forward_and_minus_one_is_the_end(broker):
    times = store_times(broker, 4)
    queues = broker.server.topics.get(TOPIC).write_queue_nums
    for q in range(queues):
        commit(broker, q, 1)
    Consumer(broker, "java@1", 5007)
    table = object_keys.loads(reset(broker, times[3], force=False).body)["offsetTable"]
    assert table[MQ(0)] == 1  # 3 is past the committed 1: kept
    assert table[MQ(1)] == 0  # an empty queue: 0 is before 1
    assert object_keys.loads(reset(broker, -1, force=True).body)["offsetTable"][MQ(0)] == 4
    assert object_keys.loads(reset(broker, 0, force=True).body)["offsetTable"][MQ(0)] == 0
    # a C++ admin tool gets the Java form back too, and sends the list form to every client
    assert object_keys.loads(reset(broker, -1, language="CPP").body)["offsetTable"][MQ(0)] == 4


def test_reset_offset_refusals_as_4_9(broker):
    r = broker.call(
        admin(
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
            {"topic": "NoSuchTopic", "group": "CG", "timestamp": 0, "isForce": True},
        )
    )
    assert (r.code, r.remark) == (
        ResponseCode.SYSTEM_ERROR,
        "[reset-offset] reset offset failed, no topic in this broker. topic=NoSuchTopic",
    )
    store_times(broker, 1)
    r = reset(broker, 0)
    assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, "THe consumer group <CG> not exist")
    for q in range(broker.server.topics.get(TOPIC).write_queue_nums):
        commit(broker, q, 0)
    r = reset(broker, 7)
    assert (r.code, r.remark) == (
        ResponseCode.CONSUMER_NOT_ONLINE,
        "Consumer not online, so can not reset offset, Group: CG Topic: TopicTest Timestamp: 7",
    )
    Consumer(broker, "old@1", 5008, version=27)
    r = reset(broker, 7)
    assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, "the client does not support this feature. version=V3_0_6")
    with pytest.raises(HeaderFieldError):
        broker.call(admin(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, {"topic": TOPIC, "group": "CG"}))


def test_consumer_status_asks_every_client_side_by_side_and_skips_the_silent(broker):
    a, b, c = (Consumer(broker, f"c@{i}", 5010 + i) for i in range(3))
    for x in (a, b, c):
        x.received()
    d = broker.call(admin(RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS, {"topic": TOPIC, "group": "CG"}))
    [qa], [qb], [qc] = (x.received(RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT) for x in (a, b, c))
    assert qa.ext_fields == {"topic": TOPIC, "group": "CG"}
    a.reply(
        qa,
        body=object_keys.dumps(
            {
                "messageQueueTable": object_keys.ObjectKeyed(
                    [
                        (object_keys.message_queue(TOPIC, "broker-a", 0), 12),
                        (object_keys.message_queue(TOPIC, "broker-a", 1), 3),
                    ]
                )
            }
        ),
    )
    b.reply(qb, code=ResponseCode.SYSTEM_ERROR, remark="no")
    assert not d.called  # c is silent
    broker.clock.advance(5.1)
    r = result(d)
    assert r.code == ResponseCode.SUCCESS
    assert object_keys.loads(r.body) == {"consumerTable": {"c@0": {MQ(0): 12, MQ(1): 3}}, "messageQueueTable": {}}
    # clientAddr names one client: only it is asked
    d = broker.call(
        admin(RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS, {"topic": TOPIC, "group": "CG", "clientAddr": "c@1"})
    )
    assert [len(x.received(RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT)) for x in (a, b, c)] == [0, 1, 0]
    b.proto.connectionLost(None)
    assert object_keys.loads(result(d).body) == {"consumerTable": {}, "messageQueueTable": {}}
    r = broker.call(admin(RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS, {"topic": TOPIC, "group": "Nobody"}))
    assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, "No Any Consumer online in the consumer group: [Nobody]")
