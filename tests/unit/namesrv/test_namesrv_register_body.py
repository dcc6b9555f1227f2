import struct
import zlib

import pytest

from rmqha.broker.namesrv.register_body import RegisterBrokerBody, TooManyTopics, TopicConfig, body_crc32

# As a Java 4.9 broker writes it with fastjson (sorted keys, no spaces).
JAVA_PLAIN = (
    b'{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":3,'
    b'"timestamp":1700000000123},"topicConfigTable":{"TopicTest":{"order":false,"perm":6,'
    b'"readQueueNums":4,"topicFilterType":"SINGLE_TAG","topicName":"TopicTest","topicSysFlag":0,'
    b'"writeQueueNums":4},"%RETRY%g":{"order":false,"perm":6,"readQueueNums":1,'
    b'"topicFilterType":"SINGLE_TAG","topicName":"%RETRY%g","topicSysFlag":0,"writeQueueNums":1}}}}'
)


def java_compressed(data_version: bytes, topics: list[str], filters: bytes = b"[]") -> bytes:
    out = struct.pack(">i", len(data_version)) + data_version + struct.pack(">i", len(topics))
    for t in topics:
        b = t.encode()
        out += struct.pack(">i", len(b)) + b
    out += struct.pack(">i", len(filters)) + filters
    return zlib.compress(out, 9)


def test_decode_java_plain_json():
    body = RegisterBrokerBody.decode(JAVA_PLAIN, compressed=False)
    assert body.data_version == {"counter": 3, "timestamp": 1700000000123}
    assert set(body.topic_configs) == {"TopicTest", "%RETRY%g"}
    tc = body.topic_configs["TopicTest"]
    assert (tc.read_queue_nums, tc.write_queue_nums, tc.perm, tc.topic_filter_type) == (4, 4, 6, "SINGLE_TAG")
    assert body.filter_servers == []


def test_decode_java_compressed_form():
    data = java_compressed(
        b'{"counter":7,"timestamp":42}',
        ["TopicTest 8 8 6 SINGLE_TAG", 'T5 2 2 4 MULTI_TAG {"a":"b"}'],
        b'["10.0.0.1:9999"]',
    )
    body = RegisterBrokerBody.decode(data, compressed=True)
    assert body.data_version == {"counter": 7, "timestamp": 42}
    assert body.topic_configs["TopicTest"] == TopicConfig("TopicTest", 8, 8, 6, "SINGLE_TAG")
    assert body.topic_configs["T5"].topic_filter_type == "MULTI_TAG"
    assert body.filter_servers == ["10.0.0.1:9999"]


@pytest.mark.parametrize("compressed", [False, True])
def test_round_trip(compressed):
    body = RegisterBrokerBody(
        {"A": TopicConfig("A", 4, 2, 6), "B": TopicConfig("B", 1, 1, 4)}, {"counter": 9, "timestamp": 5}, ["x:1"]
    )
    back = RegisterBrokerBody.decode(body.encode(compressed), compressed)
    assert back == body


def test_truncated_compressed_body():
    data = zlib.compress(struct.pack(">i", 100) + b"{}")
    with pytest.raises(ValueError, match="truncated"):
        RegisterBrokerBody.decode(data, compressed=True)


def test_crc_is_31_bits():
    assert body_crc32(b"hello") == zlib.crc32(b"hello") & 0x7FFFFFFF
    assert body_crc32(b"\xff" * 9) < 2**31


def _inner(data_version: bytes, count: int = 0, filters: bytes = b"[]") -> bytes:
    return (
        struct.pack(">i", len(data_version))
        + data_version
        + struct.pack(">i", count)
        + struct.pack(">i", len(filters))
        + filters
    )


@pytest.mark.parametrize(
    "data, compressed",
    [
        # Found by `make fuzz` (register_body): each raised something other than a ValueError (the
        # comment says what), or returned a body with a non-dict data_version.
        (b"\x01\x02not zlib", True),  # zlib.error
        (zlib.compress(b"x" * 100)[:-4], True),  # a zlib stream cut short
        (b"[1, 2]", False),  # AttributeError
        (b'{"topicConfigSerializeWrapper": [1]}', False),  # AttributeError
        (b'{"topicConfigSerializeWrapper": {"topicConfigTable": [1]}}', False),  # AttributeError
        (b'{"topicConfigSerializeWrapper": {"topicConfigTable": {"T": 5}}}', False),  # TypeError
        (b'{"topicConfigSerializeWrapper": {"topicConfigTable": {"T": {"perm": null}}}}', False),  # TypeError
        (b'{"topicConfigSerializeWrapper": {"topicConfigTable": {"T": {"perm": [6]}}}}', False),  # TypeError
        (b'{"topicConfigSerializeWrapper": {"topicConfigTable": {"T": {"readQueueNums": 1e999}}}}', False),  # Overflow
        (b'{"topicConfigSerializeWrapper": {"dataVersion": 7}}', False),  # TypeError
        (b'{"filterServerList": 3}', False),  # TypeError
        (b"[" * 5000 + b"]" * 5000, False),  # RecursionError
        (zlib.compress(_inner(b"[1]")), True),  # data_version came back a list
        (zlib.compress(_inner(b"{}", filters=b"7")), True),  # TypeError
        (zlib.compress(_inner(b"{}", filters=b"[" * 5000)), True),  # RecursionError
        (zlib.compress(_inner(b"{}", count=1) + b"\xff\xfe"), True),  # a ValueError already; the same error type now
    ],
)
def test_hostile_bodies_raise_register_body_error(data, compressed):
    from rmqha.broker.namesrv.register_body import RegisterBodyError

    with pytest.raises(RegisterBodyError):
        RegisterBrokerBody.decode(data, compressed)
    assert issubclass(RegisterBodyError, ValueError)


def test_compressed_body_inflating_past_the_limit_is_refused():
    from rmqha.broker.namesrv.register_body import MAX_INFLATED_BYTES, RegisterBodyError

    bomb = zlib.compress(bytes(MAX_INFLATED_BYTES + 1), 9)  # about 64 KiB on the wire
    assert len(bomb) < 100_000
    with pytest.raises(RegisterBodyError, match="inflates past"):
        RegisterBrokerBody.decode(bomb, compressed=True)


@pytest.mark.parametrize("compressed", [True, False])
def test_too_many_topics_is_refused_from_the_count_before_any_config_is_decoded(compressed, monkeypatch):
    body = RegisterBrokerBody({f"T{i}": TopicConfig(f"T{i}", 4, 4, 6) for i in range(6)}).encode(compressed)
    assert len(RegisterBrokerBody.decode(body, compressed, max_topics=6).topic_configs) == 6
    decoded = []
    for name in ("decode_text", "from_json"):
        real = getattr(TopicConfig, name)
        monkeypatch.setattr(TopicConfig, name, classmethod(lambda cls, *a, real=real: decoded.append(a) or real(*a)))
    with pytest.raises(TooManyTopics, match="carries 6 topic configs; this name server takes at most 5"):
        RegisterBrokerBody.decode(body, compressed, max_topics=5)
    assert decoded == []
