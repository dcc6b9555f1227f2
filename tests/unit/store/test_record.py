import struct
import zlib

import pytest

from rmqha.broker.store import record
from rmqha.broker.store.record import Message, Scan


def make(topic="TopicTest", body=b"hello", **kw):
    fields = dict(
        queue_id=3,
        flag=7,
        born_timestamp=1700000000000,
        born_host=("10.0.0.5", 53211),
        store_timestamp=1700000000123,
        store_host=("10.0.0.9", 10911),
        properties={"TAGS": "TagA", "KEYS": "k1", "UNIQ_KEY": "ABC"},
    )
    fields.update(kw)
    return Message(topic=topic, body=body, **fields)


def test_layout_matches_wire_facts_byte_for_byte():
    msg = make()
    rec = record.encode(msg)
    buf = bytes(rec.finish(queue_offset=42, physical_offset=1 << 33))
    props = "TAGS\x01TagA\x02KEYS\x01k1\x02UNIQ_KEY\x01ABC".encode()
    assert len(buf) == 91 + 5 + len("TopicTest") + len(props)
    total, magic, crc, qid, flag, qoff, phys, sysflag, born = struct.unpack_from(">iIiiiqqiq", buf)
    assert (total, magic, qid, flag, qoff, phys, sysflag, born) == (
        len(buf),
        0xDAA320A7,
        3,
        7,
        42,
        1 << 33,
        0,
        1700000000000,
    )
    assert crc == zlib.crc32(b"hello") & 0x7FFFFFFF
    assert buf[48:56] == bytes([10, 0, 0, 5]) + struct.pack(">i", 53211)
    assert struct.unpack_from(">q", buf, 56)[0] == 1700000000123
    assert buf[64:72] == bytes([10, 0, 0, 9]) + struct.pack(">i", 10911)
    assert struct.unpack_from(">iq", buf, 72) == (0, 0)
    assert struct.unpack_from(">i", buf, 84)[0] == 5 and buf[88:93] == b"hello"
    assert buf[93] == 9 and buf[94:103] == b"TopicTest"
    assert struct.unpack_from(">h", buf, 103)[0] == len(props) and buf[105:] == props


def test_round_trip_and_ipv6_hosts():
    msg = make(born_host=("::1", 5), store_host=("fe80::1", 10911))
    buf = record.encode(msg).finish(1, 2)
    r = record.scan(buf)
    assert r.kind == Scan.MESSAGE and r.size == len(buf)
    m = r.message
    assert m.sys_flag & (record.FLAG_BORNHOST_V6 | record.FLAG_STOREHOST_V6) == 0x30
    assert (m.topic, m.body, m.queue_offset, m.physical_offset) == ("TopicTest", b"hello", 1, 2)
    assert m.born_host == ("::1", 5) and m.store_host == ("fe80::1", 10911)
    assert m.properties == msg.properties and m.tags == "TagA" and m.uniq_key == "ABC"
    assert len(buf) == 91 + 24 + 5 + 9 + len(record.encode_properties(msg.properties))


def test_scan_rejects_corruption():
    buf = bytearray(record.encode(make()).finish(0, 0))
    bad = bytearray(buf)
    bad[90] ^= 0xFF
    assert record.scan(bad).kind == Scan.INVALID and "CRC" in record.scan(bad).reason
    assert record.scan(bad, check_crc=False).kind == Scan.MESSAGE
    bad = bytearray(buf)
    struct.pack_into(">i", bad, 0, len(buf) + 4)
    bad += b"\0\0\0\0"
    assert record.scan(bad).kind == Scan.INVALID
    assert record.scan(bytes(200)).kind == Scan.INVALID
    assert record.scan(buf[:50]).kind == Scan.PARTIAL
    assert record.scan(buf[:5]).kind == Scan.PARTIAL
    assert record.scan(b"\x00\x00\x01\x00\xcb\xd4\x31\x94").kind == Scan.BLANK
    assert record.scan(b"garbage!" * 20).kind == Scan.INVALID


def test_limits():
    with pytest.raises(record.RecordError):
        record.encode(make(topic="t" * 128))
    with pytest.raises(record.RecordError):
        record.encode(make(properties={"K": "v" * 40000}))


def test_properties_java_rules():
    assert record.decode_properties("a\x01b\x02c\x01d\x02") == {"a": "b", "c": "d"}
    assert record.decode_properties("\x02a\x01\x02\x01x\x02k\x01v") == {"k": "v"}
    assert record.encode_properties({"a": "b", "c": "d"}) == "a\x01b\x02c\x01d"


def test_java_hash_code():
    # Values of Java's "TagA".hashCode() etc.
    assert record.java_string_hash("TagA") == 2598919
    assert record.java_string_hash("") == 0
    assert record.java_string_hash("polygenelubricants") == -2147483648
    assert record.java_string_hash("\u00e9t\u00e9") == 227742
    assert record.java_string_hash("\U0001f600") == 1772899  # a surrogate pair: two UTF-16 units
    assert record.tags_code(None) == 0


def test_offset_msg_id():
    mid = record.offset_msg_id(("10.0.0.9", 10911), 123456)
    assert mid == "0A00000900002A9F000000000001E240"
    assert record.parse_offset_msg_id(mid) == (("10.0.0.9", 10911), 123456)
    assert len(record.offset_msg_id(("::1", 1), 0)) == 56


def test_scan_index_agrees_with_scan():
    cases = [
        make(),
        make(properties={}),
        make(properties={"KEYS": "a", "TAGS": "\u00e9t\u00e9"}),
        make(born_host=("::1", 5), store_host=("fe80::1", 10911), body=b"x" * 5000),
        make(properties={"TAGS": ""}),
        make(sys_flag=record.TRANSACTION_PREPARED),
    ]
    for m in cases:
        buf = bytes(record.encode(m).finish(9, 1234))
        full = record.scan(buf)
        kind, size, info, _ = record.scan_index(buf)
        assert kind == full.kind == Scan.MESSAGE and size == full.size
        fm = full.message
        assert (
            info.topic,
            info.queue_id,
            info.queue_offset,
            info.physical_offset,
            info.store_timestamp,
            info.tags_code,
            info.gets_queue_entry,
        ) == (
            fm.topic,
            fm.queue_id,
            fm.queue_offset,
            fm.physical_offset,
            fm.store_timestamp,
            record.tags_code(fm.tags),
            fm.gets_queue_entry,
        )
    buf = bytearray(record.encode(make()).finish(0, 0))
    buf[90] ^= 1
    assert record.scan_index(buf)[0] == Scan.INVALID
    assert record.scan_index(buf, check_crc=False)[0] == Scan.MESSAGE
    assert record.scan_index(buf[:40])[0] == Scan.PARTIAL
    assert record.scan_index(bytes(100))[0] == Scan.INVALID


def _summary_expected(buf, pos=0):
    """scan_summary()'s tuple computed the slow way, from scan()'s Message, as a dict by field name."""
    r = record.scan(buf, pos)
    m = r.message
    return {
        "size": r.size,
        "body_crc": m.body_crc,
        "queue_id": m.queue_id,
        "queue_offset": m.queue_offset,
        "physical_offset": m.physical_offset,
        "sys_flag": m.sys_flag,
        "born_timestamp": m.born_timestamp,
        "store_timestamp": m.store_timestamp,
        "store_host_raw": record.encode_host(m.store_host),
        "topic": m.topic,
        "uniq_key": m.uniq_key,
        "keys": m.keys,
        "tags": m.tags,
        "record_crc": zlib.crc32(bytes(buf[pos : pos + r.size])),
    }


def _named(fields):
    assert len(fields) == len(record.SUMMARY_FIELDS)
    return dict(zip(record.SUMMARY_FIELDS, fields))


SUMMARY_CASES = [
    make(),
    make(properties={}),
    make(properties={"KEYS": "a b", "TAGS": "\u00e9t\u00e9 \U0001f600"}, topic="T\u00f6pic"),
    make(born_host=("::1", 5), store_host=("fe80::1", 10911), body=b"x" * 5000),
    make(store_host=("2001:db8::7", 1)),
    make(born_host=("::ffff:10.0.0.1", 5)),
    make(properties={"TAGS": ""}),
    make(properties={"UNIQ_KEY": "U", "KEYS": "k\x01with-sep", "X": "UNIQ_KEY\x01no"}),
    make(sys_flag=record.TRANSACTION_PREPARED, prepared_transaction_offset=77),
    make(sys_flag=record.TRANSACTION_ROLLBACK | record.FLAG_MULTI_TAGS),
    make(body=b""),
    make(properties={"UNIQ_KEY": "A" * 32, "KEYS": "send-1 send-2", "TAGS": "t", "WAIT": "true"}),
]


@pytest.mark.parametrize("i", range(len(SUMMARY_CASES)))
def test_scan_summary_agrees_with_scan(i):
    buf = bytes(record.encode(SUMMARY_CASES[i]).finish(9, (1 << 32) + i))
    kind, size, fields, reason = record.scan_summary(buf)
    assert (kind, size, reason) == (Scan.MESSAGE, len(buf), "")
    assert _named(fields) == _summary_expected(buf)
    # the same inside a larger buffer, as bytes, bytearray and memoryview
    big = b"\0" * 13 + buf + b"garbage"
    for b in (big, bytearray(big), memoryview(big)):
        assert record.scan_summary(b, 13) == (kind, size, fields, reason)


def _raw_props(props: bytes, body=b"hello"):
    """A record whose properties bytes are exactly `props` (possibly not what encode() would write)."""
    m = make(body=body, properties={"P": "x" * (len(props) - 2)} if len(props) >= 3 else {})
    buf = bytearray(record.encode(m).finish(0, 0))
    plen = struct.unpack_from(">h", buf, len(buf) - len(props) - 2)[0]
    assert plen == len(props)
    buf[len(buf) - len(props) :] = props
    return bytes(buf)


@pytest.mark.parametrize(
    "props",
    [
        b"TAGS\x01a\x02TAGS\x01b",  # the last one wins
        b"TAGS\x01a\x02TAGS\x01",  # ... unless its value is empty (skipped)
        b"KEYS\x01\x02UNIQ_KEY\x01\x02TAGS\x01\x02xyz",  # all empty
        b"\x02\x01\x02UNIQ_KEY\x01u\x02",  # empty segments, trailing separator
        b"XTAGS\x01no\x02TAGSX\x01no\x02KEYS\x01k",  # names that only contain the key
        b"TAGS\x01\xe9\xff!\x02KEYS\x01\xc3",  # invalid UTF-8: replaced, as scan() does
    ],
)
def test_scan_summary_properties_follow_scan(props):
    buf = _raw_props(props)
    kind, size, fields, _ = record.scan_summary(buf)
    assert kind == Scan.MESSAGE and _named(fields) == _summary_expected(buf)


def test_scan_summary_rejects_what_scan_rejects_with_the_same_reason():
    good = bytes(record.encode(make()).finish(0, 0))
    v6 = bytes(record.encode(make(born_host=("::1", 5), store_host=("fe80::1", 1))).finish(0, 0))
    cases = []
    bad = bytearray(good)
    bad[90] ^= 0xFF
    cases.append(bytes(bad))  # body CRC
    bad = bytearray(good)
    struct.pack_into(">i", bad, 0, len(good) + 4)
    cases.append(bytes(bad) + bytes(4))
    bad = bytearray(good)
    struct.pack_into(">i", bad, 84, 10**6)
    cases.append(bytes(bad))  # body length
    bad = bytearray(good)
    struct.pack_into(">i", bad, 84, -1)
    cases.append(bytes(bad))
    bad = bytearray(good)
    bad[93] = 200
    cases.append(bytes(bad))  # topic length
    bad = bytearray(good)
    bad[94] = 0xFF
    cases.append(bytes(bad))  # topic not UTF-8
    bad = bytearray(good)
    struct.pack_into(">h", bad, 103, -5)
    cases.append(bytes(bad))
    bad = bytearray(good)
    struct.pack_into(">h", bad, 103, 3)
    cases.append(bytes(bad))
    bad = bytearray(v6)
    struct.pack_into(">i", bad, 0, 95)
    cases.append(bytes(bad))  # v6 head > TOTALSIZE
    bad = bytearray(v6)
    struct.pack_into(">i", bad, 0, 95)
    cases.append(bytes(bad[:95]))
    cases += [
        bytes(200),
        b"garbage!" * 20,
        good[:50],
        good[:5],
        b"",
        b"\x00\x00\x01\x00\xcb\xd4\x31\x94",
        b"\x00\x00\x00\x04\xcb\xd4\x31\x94",
        struct.pack(">iI", 60, record.MESSAGE_MAGIC) + bytes(60),
    ]
    for buf in cases:
        full = record.scan(buf, 0, True, False)
        kind, size, fields, reason = record.scan_summary(buf)
        assert (kind, size, reason) == (full.kind, full.size, full.reason), buf[:16]
        assert fields is None
    bad = bytearray(good)
    bad[90] ^= 0xFF
    kind, _, fields, _ = record.scan_summary(bytes(bad), check_crc=False)
    assert kind == Scan.MESSAGE and _named(fields)["tags"] == "TagA"


def test_scan_summary_partial_then_whole():
    buf = bytes(record.encode(make(body=b"z" * 3000)).finish(5, 6))
    for cut in (8, 60, 200, len(buf) - 1):
        kind, size, fields, _ = record.scan_summary(buf[:cut])
        assert (kind, size, fields) == (Scan.PARTIAL, len(buf), None)
    assert _named(record.scan_summary(buf)[2]) == _summary_expected(buf)


def test_cached_host_decoding():
    raw = record.encode_host(("fe80::1", 10911))
    assert record.decode_host_cached(raw) == ("fe80::1", 10911) == record.decode_host(raw)
    assert record.msg_id_prefix(record.encode_host(("10.0.0.9", 10911))) == "0A00000900002A9F"


def test_scanners_never_raise_on_records_whose_fields_run_past_the_buffer():
    """Found by `make fuzz` (record_scan): a TOTALSIZE of 91 with the IPv6 host bits set puts BODYLEN past
    a buffer that ends with the record (scan_index raised struct.error), and a BODYLEN that ends the body
    exactly at the buffer's end left no byte for the topic length (scan raised IndexError)."""
    v4 = bytearray(record.encode(make(topic="T", body=b"", properties={})).finish(0, 0))[:91]
    struct.pack_into(">i", v4, 0, 91)
    body_to_end = bytearray(v4)
    struct.pack_into(">i", body_to_end, 84, 3)  # the body would end at byte 91: no room for TOPICLEN
    v6 = bytearray(v4)
    struct.pack_into(">i", v6, 36, record.FLAG_BORNHOST_V6 | record.FLAG_STOREHOST_V6)
    for buf in (bytes(body_to_end), bytes(v6), bytes(v6) + b"\0" * 2):
        for check_crc in (True, False):
            r = record.scan(buf, 0, check_crc)
            assert r.kind == Scan.INVALID, r
            kind, size, info, _ = record.scan_index(buf, 0, check_crc)
            assert (kind, size, info) == (Scan.INVALID, 0, None)
            assert [res.kind for _, res in record.iter_records(buf, 0, check_crc)] == [Scan.INVALID]


@pytest.mark.parametrize(
    "props,plain",
    [
        ({}, True),
        ({"KEYS": "k"}, True),
        ({"KEYS": "a b", "UNIQ_KEY": "U1", "TAGS": "t"}, True),
        ({"KEYS": "a\x01b"}, False),
        ({"KEYS": "a\x02b", "TAGS": "t"}, False),
        ({"K\x02": "v"}, False),
    ],
)
def test_encode_says_whether_the_stored_properties_read_back_the_same(props, plain):
    m = Message(topic="T", body=b"x", queue_id=0, born_timestamp=1, born_host=("10.0.0.1", 1), properties=props)
    assert record.encode(m).plain_properties is plain
    assert record.properties_round_trip(props) is plain


def test_a_record_built_without_the_check_does_not_claim_plain_properties():
    """plain_properties defaults to False: only encode() checks the separators, and a record that says
    nothing about them has its index keys read from its bytes (message_store), not from a dict."""
    rec = record.EncodedRecord(bytearray(b"x" * 91), 0)
    assert rec.plain_properties is False and rec.size == 91
