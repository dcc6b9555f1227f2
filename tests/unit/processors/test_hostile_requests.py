"""Hostile requests through the whole remoting path (frame -> protocol -> processor -> reply) of an
in-process broker: each test is one finding of issue 11, and failed before its fix."""

from __future__ import annotations

import json
import logging
import os
import struct

import pytest
from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport

from rmqha.broker.remoting import codec
from rmqha.broker.remoting.codec import FrameDecoder, encode
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.store import record
from rmqha.broker.store.consume_queue import ConsumeQueue
from rmqha.broker.store.mapped_file import StoreError

from .harness import TOPIC, Broker, batch_body, pull, send_v1

LONE = "\\ud800"  # a JSON escape of a lone UTF-16 surrogate, as bytes on the wire


class Wire:
    """One client connection to the broker's real RemotingServerFactory, on a StringTransport."""

    def __init__(self, broker: Broker):
        self.broker = broker
        self.transport = StringTransport(
            hostAddress=IPv4Address("TCP", "127.0.0.1", 10911), peerAddress=IPv4Address("TCP", "10.9.9.9", 50000)
        )
        self.proto = broker.server.factory.buildProtocol(None)
        self.proto.makeConnection(self.transport)
        self._decoder = FrameDecoder()
        self._opaque = 0

    def raw(self, data: bytes) -> list[RemotingCommand]:
        self.proto.dataReceived(data)
        self.broker.clock.advance(0)
        return self.replies()

    def replies(self) -> list[RemotingCommand]:
        data = self.transport.value()
        self.transport.clear()
        return list(self._decoder.feed(data))

    def json_request(self, code: int, ext_json: str, body: bytes = b"") -> RemotingCommand:
        """A JSON-header request whose extFields are given as JSON text (escapes kept verbatim)."""
        self._opaque += 1
        header = (
            '{"code":%d,"flag":0,"language":"JAVA","opaque":%d,"version":409,"extFields":%s}'
            % (code, self._opaque, ext_json)
        ).encode()
        frame = struct.pack(">II", 4 + len(header) + len(body), len(header)) + header + body
        [reply] = [c for c in self.raw(frame) if c.is_response]
        assert reply.opaque == self._opaque
        return reply

    def request(self, cmd: RemotingCommand) -> RemotingCommand:
        self._opaque += 1
        cmd.opaque = self._opaque
        [reply] = [c for c in self.raw(encode(cmd)) if c.is_response]  # not the broker's notifications
        return reply


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path / "store")
    yield b
    b.stop()


def heartbeat_body(group: str) -> bytes:
    # group is JSON text inside quotes, so escapes such as \ud800 reach the broker as escapes
    return (
        '{"clientID":"c1","producerDataSet":[],"consumerDataSet":[{"groupName":"%s","consumeType":1,'
        '"messageModel":1,"consumeFromWhere":0,"subscriptionDataSet":[{"topic":"%s","subString":"*"}]}]}'
        % (group, TOPIC)
    ).encode()


def files_under(path) -> set[str]:
    return {os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs}


# ---- 1. poisoned names ----------------------------------------------------------------------------


def test_lone_surrogate_group_in_heartbeat_is_refused_and_poisons_nothing(broker):
    w = Wire(broker)
    r = w.request(RemotingCommand.request(RequestCode.HEART_BEAT, body=heartbeat_body("G" + LONE)))
    assert r.code == ResponseCode.SYSTEM_ERROR and "illegal characters" in r.remark
    assert not any(t.startswith("%RETRY%G") for t in broker.server.topics.table)
    # Every JSON encoding of the table still works: registration body, GET_ALL_TOPIC_CONFIG, topics.json.
    broker.server.topics.persist()
    r = w.request(RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG))
    assert r.code == ResponseCode.SUCCESS and json.loads(r.body)["topicConfigTable"]


def test_lone_surrogate_group_in_offset_commit_is_refused_and_flush_keeps_working(broker):
    w = Wire(broker)
    ext = '{"consumerGroup":"G%s","topic":"%s","queueId":"0","commitOffset":"5"}' % (LONE, TOPIC)
    r = w.json_request(RequestCode.UPDATE_CONSUMER_OFFSET, ext)
    assert r.code == ResponseCode.SYSTEM_ERROR and "illegal characters" in r.remark
    ok = w.json_request(
        RequestCode.UPDATE_CONSUMER_OFFSET,
        '{"consumerGroup":"CG","topic":"%s","queueId":"0","commitOffset":"5"}' % TOPIC,
    )
    assert ok.code == ResponseCode.SUCCESS
    broker.server.offsets.persist_if_dirty()
    with open(broker.server.offsets.path) as fh:
        assert json.load(fh)["offsetTable"] == {f"{TOPIC}@CG": {"0": 5}}


@pytest.mark.parametrize("code", [RequestCode.SEND_MESSAGE, RequestCode.PULL_MESSAGE])
def test_lone_surrogate_topic_gets_a_reply(broker, code):
    w = Wire(broker)
    ext = {
        "producerGroup": "PG",
        "consumerGroup": "CG",
        "queueId": "0",
        "queueOffset": "0",
        "sysFlag": "0",
        "bornTimestamp": "0",
        "flag": "0",
        "properties": "",
        "maxMsgNums": "1",
        "commitOffset": "0",
        "suspendTimeoutMillis": "0",
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
    }
    text = json.dumps(ext)[:-1] + ',"topic":"X%s"}' % LONE
    r = w.json_request(code, text)
    assert r.code == ResponseCode.SYSTEM_ERROR and "illegal characters" in r.remark


def test_surrogates_in_header_values_become_question_marks_as_java_writes_them():
    header = b'{"code":10,"opaque":1,"flag":0,"extFields":{"k":"a\\ud800b","ok":"\\ud83d\\ude00"},"remark":"\\udfff"}'
    cmd = codec.decode_frame(struct.pack(">I", len(header)) + header)
    assert cmd.ext_fields == {"k": "a?b", "ok": "\U0001f600"}  # a valid pair is kept
    assert cmd.remark == "?"
    cmd.ext_fields["raw"] = "\udc80"  # whatever a processor builds, encode never fails
    assert codec.decode(encode(cmd)).ext_fields["raw"] == "?"


# ---- 2. path traversal ----------------------------------------------------------------------------


def test_send_back_with_traversal_group_is_refused_and_creates_no_file(broker, tmp_path):
    w = Wire(broker)
    sent = w.request(send_v1())
    assert sent.code == ResponseCode.SUCCESS
    phys = record.parse_offset_msg_id(sent.ext_fields["msgId"])[1]
    before = files_under(tmp_path)
    back = RemotingCommand.request(
        RequestCode.CONSUMER_SEND_MSG_BACK,
        {
            "group": "hostile/../../../x",
            "offset": phys,
            "delayLevel": 0,
            "originMsgId": "",
            "originTopic": TOPIC,
            "unitMode": "false",
            "maxReconsumeTimes": 16,
        },
    )
    r = w.request(back)
    assert r.code == ResponseCode.SYSTEM_ERROR and "illegal characters" in r.remark
    assert files_under(tmp_path) == before


@pytest.mark.parametrize("name", ["hostile/../../../x", "..", "a\nb", "X\n", "A" * 121, "", " "])
def test_bad_group_names_in_heartbeat_are_refused(broker, name):
    w = Wire(broker)
    r = w.request(RemotingCommand.request(RequestCode.HEART_BEAT, body=heartbeat_body(json.dumps(name)[1:-1])))
    assert r.code == ResponseCode.SYSTEM_ERROR or name.strip() == ""  # blank groups register nothing
    assert not any(t != "%RETRY%CG" and t.startswith("%RETRY%") for t in broker.server.topics.table)


@pytest.mark.parametrize("topic", ["X\n", "a/b", "..", "A" * 128, "T\x00"])
def test_bad_topics_are_refused_by_send(broker, topic):
    w = Wire(broker)
    r = w.request(send_v1(topic=topic))
    assert r.code == ResponseCode.SYSTEM_ERROR
    assert topic not in broker.server.topics.table


def test_a_127_char_topic_is_fine_and_a_retry_topic_of_a_120_char_group_too(broker):
    w = Wire(broker)
    assert w.request(send_v1(topic="T" * 127)).code == ResponseCode.SUCCESS
    r = w.request(RemotingCommand.request(RequestCode.HEART_BEAT, body=heartbeat_body("G" * 120)))
    assert r.code == ResponseCode.SUCCESS and "%RETRY%" + "G" * 120 in broker.server.topics.table


def test_consume_queue_refuses_a_topic_that_is_not_a_safe_directory(tmp_path):
    for topic in ("../evil", "a/b", "", "x\n"):
        with pytest.raises(StoreError):
            ConsumeQueue(str(tmp_path), topic, 0, 2000)
    assert os.listdir(tmp_path) == []


def test_replicated_record_with_a_bad_topic_is_stored_but_gets_no_queue(tmp_path):
    slave = Broker(tmp_path / "slave", brokerRole="SLAVE")
    try:
        evil = record.encode(record.Message(topic="../../evil", body=b"x", queue_id=0))
        good = record.encode(record.Message(topic=TOPIC, body=b"y", queue_id=0))
        data = bytes(evil.finish(0, 0)) + bytes(good.finish(0, len(evil.buf)))
        slave.store.append_replicated(0, data)
        slave.store.dispatch()
        assert slave.store.reput_offset == len(data)  # dispatch went on past it
        assert slave.store.unqueueable_records == 1
        assert slave.store.max_queue_offset(TOPIC, 0) == 1
        assert not os.path.exists(tmp_path / "evil")
    finally:
        slave.stop()


# ---- 3. unbounded work ----------------------------------------------------------------------------


def test_a_batch_over_max_message_size_is_refused_before_it_is_parsed(broker):
    w = Wire(broker)
    body = batch_body([(b"", {})] * 200_000)  # 4.4 MB of empty items
    cmd = RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, send_v1().ext_fields, body=body)
    r = w.request(cmd)
    assert r.code == ResponseCode.MESSAGE_ILLEGAL and "maxMessageSize" in r.remark
    assert broker.store.max_offset == 0


def test_a_batch_with_more_items_than_allowed_is_refused_and_stores_nothing(tmp_path):
    b = Broker(tmp_path / "s", maxBatchMessages=100)
    try:
        w = Wire(b)
        cmd = RemotingCommand.request(
            RequestCode.SEND_BATCH_MESSAGE, send_v1().ext_fields, body=batch_body([(b"m", {})] * 101)
        )
        r = w.request(cmd)
        assert r.code == ResponseCode.MESSAGE_ILLEGAL and "maxBatchMessages=100" in r.remark
        assert b.store.max_offset == 0
        cmd.body = batch_body([(b"m", {})] * 100)
        r = w.request(cmd)
        assert r.code == ResponseCode.SUCCESS and len(r.ext_fields["msgId"].split(",")) == 100
    finally:
        b.stop()


@pytest.mark.parametrize("depth", [100_000, 5000])
def test_deeply_nested_header_closes_the_connection_cleanly(broker, depth):
    w = Wire(broker)
    header = b'{"code":10,"extFields":{"a":' + b"[" * depth + b"]" * depth + b"}}"
    out = w.raw(struct.pack(">II", 4 + len(header), len(header)) + header)
    assert out == [] and w.transport.disconnecting


def test_header_over_the_limit_closes_the_connection(tmp_path):
    b = Broker(tmp_path / "s", maxHeaderLength=4096)
    try:
        w = Wire(b)
        header = json.dumps({"code": 34, "opaque": 1, "extFields": {"x": "y" * 5000}}).encode()
        assert w.raw(struct.pack(">II", 4 + len(header), len(header)) + header) == []
        assert w.transport.disconnecting
    finally:
        b.stop()


def test_huge_numbers_in_header_fields_are_malformed_frames(broker):
    w = Wire(broker)
    header = b'{"code":10,"opaque":99999999999999999999,"flag":0}'
    assert w.raw(struct.pack(">II", 4 + len(header), len(header)) + header) == []
    assert w.transport.disconnecting


# ---- 4. memory and connections ----------------------------------------------------------------------


def test_decoder_keeps_no_memory_after_a_large_frame():
    d = FrameDecoder()
    big = encode(RemotingCommand.request(RequestCode.SEND_MESSAGE, {"topic": "T"}, body=b"x" * (8 << 20)))
    assert len(list(d.feed(big[:1000]))) == 0
    [cmd] = list(d.feed(big[1000:]))
    assert len(cmd.body) == 8 << 20
    assert d.buffered == 0 and len(d._buffer) == 0 and d._buffer.__sizeof__() < 4096


def test_closed_connection_releases_its_partial_frame_at_once(broker):
    w = Wire(broker)
    big = encode(RemotingCommand.request(RequestCode.SEND_MESSAGE, {"topic": "T"}, body=b"x" * (4 << 20)))
    w.raw(big[:-1])
    assert w.proto.decoder.buffered == len(big) - 1
    w.proto.connectionLost(None)
    assert w.proto.decoder.buffered == 0 and w.proto.decoder._buffer.__sizeof__() < 4096


def test_idle_client_connections_are_closed_after_server_channel_max_idle_time(tmp_path):
    b = Broker(tmp_path / "s", serverChannelMaxIdleTimeSeconds=120)
    try:
        busy, idle = Wire(b), Wire(b)
        for _ in range(5):
            b.clock.advance(60)
            busy.request(RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG))
            # a connection with traffic every 60 s lives on; the silent one goes at 120 s
        assert idle.transport.disconnecting and not busy.transport.disconnecting
    finally:
        b.stop()


def test_connections_beyond_the_limit_are_refused(tmp_path):
    b = Broker(tmp_path / "s", maxClientConnections=2)
    try:
        w1, _w2 = Wire(b), Wire(b)
        assert b.server.factory.buildProtocol(None) is None and b.server.factory.refused == 1
        w1.proto.connectionLost(None)
        assert b.server.factory.buildProtocol(None) is not None
    finally:
        b.stop()


def test_a_peer_that_does_not_read_its_replies_stops_being_read(broker):
    w = Wire(broker)
    frames = b"".join(encode(RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG, opaque=i)) for i in range(10))
    w.proto.pauseProducing = _record_pause(w.proto)  # what the transport does past its high-water mark
    w.proto.dataReceived(frames)
    assert len(w.replies()) == 1 and w.transport.producerState == "paused"
    assert w.proto.decoder.buffered > 0  # the other nine wait, undecoded work is not done
    w.proto.resumeProducing()
    assert len(w.replies()) == 1  # one more, then paused again (each reply is "over the mark")


def _record_pause(proto):
    """pauseProducing called after every reply, as a transport with a full buffer would."""
    original = proto.pauseProducing
    write = proto.transport.write

    def writing(data):
        write(data)
        original()

    proto.transport.write = writing
    return original


def test_held_pulls_are_bounded_and_one_close_hook_per_connection(tmp_path):
    b = Broker(tmp_path / "s", maxHeldPullRequests=3)
    try:
        w = Wire(b)
        w.request(send_v1())  # creates the topic
        ctx = w.proto.context
        for i in range(5):
            w.proto.dataReceived(encode(pull(offset=1, suspend_ms=30000)))
        replies = w.replies()
        # two over the limit are answered at once (PULL_NOT_FOUND); three are held
        assert [r.code for r in replies] == [ResponseCode.PULL_NOT_FOUND] * 2
        assert len(b.server.pull.hold_service) == 3 and b.server.pull.hold_service.refused == 2
        assert len(ctx._close_hooks) <= 2  # the client manager's and the hold service's, not one per pull
        b.clock.advance(31)
        assert len(w.replies()) == 3 and len(b.server.pull.hold_service) == 0
    finally:
        b.stop()


# ---- 5. errors and logs ---------------------------------------------------------------------------


def test_unsupported_codes_are_logged_once_per_code(broker, caplog):
    w = Wire(broker)
    with caplog.at_level(logging.INFO, logger="rmqha.broker.remoting.protocol"):
        for _ in range(50):
            assert w.request(RemotingCommand.request(400)).code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    lines = [r for r in caplog.records if "400" in r.getMessage()]
    assert len(lines) == 1 and broker.server.registry.unsupported[400] == 50


def test_client_mistakes_are_one_warning_line_without_traceback_and_rate_limited(broker, caplog):
    w = Wire(broker)
    with caplog.at_level(logging.INFO):
        for _ in range(100):
            r = w.json_request(
                RequestCode.UPDATE_CONSUMER_OFFSET,
                '{"consumerGroup":"CG","topic":"T","queueId":"abc","commitOffset":"1"}',
            )
            assert r.code == ResponseCode.SYSTEM_ERROR
    assert r.remark == "the custom field <queueId> is not a number: 'abc'"
    refused = [x for x in caplog.records if "refused" in x.getMessage()]
    assert len(refused) == 1 and refused[0].levelno == logging.WARNING and refused[0].exc_info is None
    assert not [x for x in caplog.records if x.levelno >= logging.ERROR]


def test_bad_max_reconsume_times_property_is_a_java_style_remark(broker):
    w = Wire(broker)
    props = record.encode_properties({"MAX_RECONSUME_TIMES": "abc"})
    r = w.request(send_v1(topic="%RETRY%CG", properties=props, reconsumeTimes=1))
    assert r.code == ResponseCode.MESSAGE_ILLEGAL
    assert "invalid literal" not in r.remark and "MAX_RECONSUME_TIMES" in r.remark


def _heartbeat_of(groups) -> RemotingCommand:
    body = {"clientID": "c", "consumerDataSet": [{"groupName": g, "subscriptionDataSet": []} for g in groups]}
    return RemotingCommand.request(RequestCode.HEART_BEAT, body=json.dumps(body).encode())


def test_a_heartbeat_naming_many_groups_writes_topics_json_once(broker, monkeypatch):
    writes = []
    real = broker.server.topics.persist
    monkeypatch.setattr(broker.server.topics, "persist", lambda: (writes.append(1), real()))
    w = Wire(broker)
    # Before: one full rewrite of topics.json (and one re-registration) per group: 4000 groups blocked
    # the reactor for 49 s.
    assert w.request(_heartbeat_of([f"G{i}" for i in range(1000)])).code == ResponseCode.SUCCESS
    assert len(writes) == 1 and "%RETRY%G999" in broker.server.topics.table
    r = w.request(_heartbeat_of([f"H{i}" for i in range(1001)]))
    assert r.code == ResponseCode.SYSTEM_ERROR and "at most 1000 groups" in r.remark
    assert "%RETRY%H0" not in broker.server.topics.table and len(writes) == 1


def test_topic_count_and_queue_numbers_are_bounded(tmp_path):
    b = Broker(tmp_path / "s", maxTopicCount=20)
    try:
        w = Wire(b)
        n = len(b.server.topics.table)
        codes = [w.request(send_v1(topic=f"T{i}")).code for i in range(30)]
        assert codes.count(ResponseCode.SUCCESS) == 20 - n and len(b.server.topics.table) == 20
        r = w.request(send_v1(topic="T29"))
        assert r.code == ResponseCode.SYSTEM_ERROR and "maxTopicCount=20" in r.remark
        create = RemotingCommand.request(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {"topic": "T0", "readQueueNums": 100000, "writeQueueNums": 100000, "perm": 6},
        )
        r = w.request(create)
        assert r.code == ResponseCode.SYSTEM_ERROR and "0..1024" in r.remark
        assert b.server.topics.get("T0").write_queue_nums != 100000
    finally:
        b.stop()
