"""record.py against an independent oracle: records built by hand here, field by field, following
docs/formats.md §6.1 (big-endian; TOTALSIZE = 91 + body + topic + properties with IPv4 hosts,
+12 per IPv6 host), never with record.encode() or checked by record.scan() alone. Covers every field
(reconsume times, prepared transaction offset, total size, sysflag bits), the exact limits (127-byte
topic, 32767-byte properties, empty body), positions other than 0, and the scanners' never-raise
contract with CRC checking on and off."""

import ipaddress
import random
import struct
import zlib

import pytest

from rmqha.broker.store import record
from rmqha.broker.store.record import Message, Scan

MAGIC = 0xDAA320A7
BLANK = 0xCBD43194


def ip(addr):
    return ipaddress.ip_address(addr).packed


def hand(
    *,
    topic=b"T",
    body=b"",
    props=b"",
    queue_id=0,
    flag=0,
    queue_offset=0,
    phys=0,
    sysflag=0,
    born_ts=0,
    born=("127.0.0.1", 0),
    store_ts=0,
    store=("127.0.0.1", 0),
    reconsume=0,
    prepared=0,
    crc=None,
    total=None,
    magic=MAGIC,
):
    """One commit-log record, byte by byte as docs/formats.md §6.1 lays it out."""
    crc = zlib.crc32(body) & 0x7FFFFFFF if crc is None else crc
    rest = b"".join(
        [
            struct.pack(">I", magic),
            struct.pack(">i", crc),
            struct.pack(">i", queue_id),
            struct.pack(">i", flag),
            struct.pack(">q", queue_offset),
            struct.pack(">q", phys),
            struct.pack(">i", sysflag),
            struct.pack(">q", born_ts),
            ip(born[0]),
            struct.pack(">i", born[1]),
            struct.pack(">q", store_ts),
            ip(store[0]),
            struct.pack(">i", store[1]),
            struct.pack(">i", reconsume),
            struct.pack(">q", prepared),
            struct.pack(">i", len(body)),
            body,
            bytes([len(topic)]),
            topic,
            struct.pack(">h", len(props)),
            props,
        ]
    )
    size = 4 + len(rest) if total is None else total
    return struct.pack(">i", size) + rest


FULL = dict(
    topic=b"TopicTest",
    body=b"\x00body\xff",
    props=b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01ABC",
    queue_id=3,
    flag=0x7B,
    queue_offset=42,
    phys=(1 << 33) + 5,
    sysflag=record.TRANSACTION_PREPARED | record.FLAG_COMPRESSED | record.FLAG_MULTI_TAGS,
    born_ts=1700000000000,
    born=("10.0.0.5", 53211),
    store_ts=1700000000123,
    store=("10.0.0.9", 10911),
    reconsume=3,
    prepared=123456789,
)


def full_message(**kw):
    f = dict(
        topic="TopicTest",
        body=b"\x00body\xff",
        queue_id=3,
        flag=0x7B,
        sys_flag=FULL["sysflag"],
        born_timestamp=1700000000000,
        born_host=("10.0.0.5", 53211),
        store_timestamp=1700000000123,
        store_host=("10.0.0.9", 10911),
        reconsume_times=3,
        prepared_transaction_offset=123456789,
        properties={"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "ABC"},
    )
    f.update(kw)
    return Message(**f)


# -- encode: every field where the layout says -----------------------------------------------------


def test_encode_writes_every_field_where_the_layout_says():
    rec = record.encode(full_message())
    assert rec.size == 91 + 6 + 9 + len(FULL["props"]) == len(rec.buf)
    assert rec.crc == zlib.crc32(b"\x00body\xff") & 0x7FFFFFFF
    assert bytes(rec.finish(42, (1 << 33) + 5)) == hand(**FULL)


@pytest.mark.parametrize(
    "born,store,bits",
    [
        (("::1", 5), ("10.0.0.9", 10911), record.FLAG_BORNHOST_V6),
        (("10.0.0.5", 5), ("fe80::1", 10911), record.FLAG_STOREHOST_V6),
        (("::1", 5), ("2001:db8::7", 1), record.FLAG_BORNHOST_V6 | record.FLAG_STOREHOST_V6),
    ],
)
def test_ipv6_hosts_set_their_sysflag_bits_and_add_12_bytes_each(born, store, bits):
    msg = full_message(born_host=born, store_host=store, sys_flag=FULL["sysflag"] | 0x30)  # stale bits dropped
    buf = bytes(record.encode(msg).finish(42, (1 << 33) + 5))
    want = hand(**dict(FULL, born=born, store=store, sysflag=FULL["sysflag"] | bits))
    assert buf == want
    assert len(buf) == 91 + 6 + 9 + len(FULL["props"]) + 12 * bin(bits).count("1")
    assert record.encoded_size(6, 9, len(FULL["props"]), bits) == len(buf)


def test_encoded_size_counts_each_ipv6_host():
    assert record.encoded_size(1, 2, 3) == 97
    assert record.encoded_size(1, 2, 3, record.FLAG_BORNHOST_V6) == 109
    assert record.encoded_size(1, 2, 3, record.FLAG_STOREHOST_V6) == 109
    assert record.encoded_size(1, 2, 3, 0x30 | 0x0F) == 121


def test_finish_patches_queue_and_physical_offset_only():
    rec = record.encode(full_message())
    before = bytes(rec.buf)
    out = rec.finish(0x0102030405060708, 0x1112131415161718)
    assert out is rec.buf
    assert out[20:28] == bytes.fromhex("0102030405060708") and out[28:36] == bytes.fromhex("1112131415161718")
    assert out[:20] == before[:20] and out[36:] == before[36:]


def test_a_127_byte_topic_is_stored_and_read_back_and_128_is_refused():
    topic = "t" * 127
    buf = bytes(record.encode(full_message(topic=topic)).finish(0, 0))
    assert buf == hand(**dict(FULL, topic=topic.encode(), queue_offset=0, phys=0))
    assert record.scan(buf).message.topic == topic
    assert record.scan_index(buf)[2].topic == topic
    assert dict(zip(record.SUMMARY_FIELDS, record.scan_summary(buf)[2]))["topic"] == topic
    with pytest.raises(record.RecordError, match="topic must be 1..127 bytes, got 128"):
        record.encode(full_message(topic="t" * 128))
    with pytest.raises(record.RecordError, match="got 0"):
        record.encode(full_message(topic=""))
    # a multi-byte topic counts bytes, not characters
    with pytest.raises(record.RecordError):
        record.encode(full_message(topic="\u00e9" * 64))


def test_a_topic_length_byte_over_127_is_invalid_for_every_scanner():
    buf = bytearray(hand(topic=b"x" * 128, body=b"b"))
    for check in (True, False):
        r = record.scan(bytes(buf), 0, check)
        assert r.kind == Scan.INVALID and r.reason == "topic length 128"
        assert record.scan_index(bytes(buf), 0, check)[:2] == (Scan.INVALID, 0)
        assert record.scan_summary(bytes(buf), 0, check)[0] == Scan.INVALID


def test_properties_of_exactly_32767_bytes_are_stored_and_one_more_is_refused():
    value = "v" * (32767 - len("K\x01"))
    buf = bytes(record.encode(full_message(properties={"K": value})).finish(1, 2))
    props = ("K\x01" + value).encode()
    assert len(props) == 32767
    assert buf == hand(**dict(FULL, props=props, queue_offset=1, phys=2))
    m = record.scan(buf).message
    assert m.properties == {"K": value} and m.total_size == len(buf)
    with pytest.raises(record.RecordError, match="properties are 32768 bytes, over the limit of 32767"):
        record.encode(full_message(properties={"K": value + "v"}))


def test_a_properties_length_read_as_negative_is_invalid():
    buf = bytearray(hand(props=b"a\x01b"))
    struct.pack_into(">H", buf, len(buf) - 5, 0x8000)  # 32768 as Java's signed short: -32768
    for check in (True, False):
        r = record.scan(bytes(buf), 0, check)
        assert r.kind == Scan.INVALID and r.reason == "properties length -32768"
        assert record.scan_index(bytes(buf), 0, check)[0] == Scan.INVALID
        assert record.scan_summary(bytes(buf), 0, check)[:2] == (Scan.INVALID, 0)


# -- decode: every field, from hand-built bytes ----------------------------------------------------


def test_scan_reads_every_field_of_a_hand_built_record():
    buf = hand(**FULL)
    r = record.scan(buf)
    assert (r.kind, r.size, r.reason) == (Scan.MESSAGE, len(buf), "")
    m = r.message
    assert (m.topic, m.body, m.queue_id, m.flag, m.sys_flag) == ("TopicTest", b"\x00body\xff", 3, 0x7B, 0x07)
    assert (m.queue_offset, m.physical_offset, m.born_timestamp, m.store_timestamp) == (
        42,
        (1 << 33) + 5,
        1700000000000,
        1700000000123,
    )
    assert (m.born_host, m.store_host) == (("10.0.0.5", 53211), ("10.0.0.9", 10911))
    assert (m.reconsume_times, m.prepared_transaction_offset) == (3, 123456789)
    assert (m.total_size, m.body_crc) == (len(buf), zlib.crc32(b"\x00body\xff") & 0x7FFFFFFF)
    assert m.properties == {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "ABC"}
    assert (m.tags, m.keys, m.uniq_key) == ("TagA", "k1 k2", "ABC")
    assert m.transaction_type == record.TRANSACTION_PREPARED and not m.gets_queue_entry
    assert m.msg_id == "0A00000900002A9F" + f"{(1 << 33) + 5:016X}"
    assert record.scan(buf, decode_body=False).message.body == b""


def test_scan_reads_ipv6_hosts_by_their_sysflag_bits():
    buf = hand(**dict(FULL, born=("::1", 5), store=("2001:db8::7", 1), sysflag=0x30 | 0x8))
    m = record.scan(buf).message
    assert (m.born_host, m.store_host, m.store_timestamp, m.reconsume_times, m.prepared_transaction_offset) == (
        ("::1", 5),
        ("2001:db8::7", 1),
        1700000000123,
        3,
        123456789,
    )
    assert m.transaction_type == record.TRANSACTION_COMMIT and m.gets_queue_entry
    kind, size, info, _ = record.scan_index(buf)
    assert (kind, size, info.store_timestamp, info.sys_flag) == (Scan.MESSAGE, len(buf), 1700000000123, 0x38)
    f = dict(zip(record.SUMMARY_FIELDS, record.scan_summary(buf)[2]))
    assert f["store_host_raw"] == ip("2001:db8::7") + struct.pack(">i", 1)
    assert (f["store_timestamp"], f["born_timestamp"], f["sys_flag"]) == (1700000000123, 1700000000000, 0x38)


@pytest.mark.parametrize("tx,queued", [(0x0, True), (0x4, False), (0x8, True), (0xC, False)])
def test_transaction_type_decides_the_queue_entry(tx, queued):
    buf = hand(sysflag=tx | record.FLAG_MULTI_TAGS)
    m = record.scan(buf).message
    assert (m.transaction_type, m.gets_queue_entry) == (tx, queued)
    assert record.scan_index(buf)[2].gets_queue_entry is queued
    assert full_message(sys_flag=tx).gets_queue_entry is queued


def test_scan_index_reads_what_a_consume_queue_needs():
    buf = hand(**FULL)
    kind, size, info, reason = record.scan_index(buf)
    assert (kind, size, reason) == (Scan.MESSAGE, len(buf), "")
    assert (
        info.size,
        info.topic,
        info.queue_id,
        info.queue_offset,
        info.physical_offset,
        info.sys_flag,
        info.store_timestamp,
    ) == (len(buf), "TopicTest", 3, 42, (1 << 33) + 5, 0x07, 1700000000123)
    assert info.tags_code == 2598919  # Java's "TagA".hashCode()


def test_scan_summary_reads_every_listed_field():
    buf = hand(**FULL)
    kind, size, fields, reason = record.scan_summary(buf)
    assert (kind, size, reason) == (Scan.MESSAGE, len(buf), "")
    assert dict(zip(record.SUMMARY_FIELDS, fields)) == {
        "size": len(buf),
        "body_crc": zlib.crc32(b"\x00body\xff") & 0x7FFFFFFF,
        "queue_id": 3,
        "queue_offset": 42,
        "physical_offset": (1 << 33) + 5,
        "sys_flag": 0x07,
        "born_timestamp": 1700000000000,
        "store_timestamp": 1700000000123,
        "store_host_raw": bytes([10, 0, 0, 9]) + struct.pack(">i", 10911),
        "topic": "TopicTest",
        "uniq_key": "ABC",
        "keys": "k1 k2",
        "tags": "TagA",
        "record_crc": zlib.crc32(buf),
    }


def test_an_empty_body_in_every_scanner():
    buf = hand(topic=b"E", body=b"", props=b"TAGS\x01x", store_ts=9)
    assert len(buf) == 91 + 1 + 6
    for check in (True, False):
        r = record.scan(buf, 0, check)
        assert r.kind == Scan.MESSAGE and r.message.body == b"" and r.message.body_crc == 0
        kind, size, info, _ = record.scan_index(buf, 0, check)
        assert (kind, size, info.topic, info.store_timestamp) == (Scan.MESSAGE, len(buf), "E", 9)
        assert info.tags_code == record.java_string_hash("x")
        assert record.scan_summary(buf, 0, check)[2][9] == "E"
    # and nothing at all after the topic: no properties
    bare = hand(topic=b"E")
    assert len(bare) == 92 and record.scan_index(bare)[2].tags_code == 0
    assert record.scan(bare).message.properties == {}
    assert dict(zip(record.SUMMARY_FIELDS, record.scan_summary(bare)[2]))["tags"] is None


def test_a_record_that_ends_one_byte_short_of_its_fields_is_invalid():
    good = hand(topic=b"T", body=b"ab", props=b"k\x01v")
    for delta in (-1, 1):
        buf = bytearray(good)
        struct.pack_into(">i", buf, 0, len(good) + delta)
        buf = bytes(buf) + bytes(max(delta, 0))
        for check in (True, False):
            assert record.scan(buf, 0, check).kind == Scan.INVALID
            assert record.scan_index(buf, 0, check)[0] == Scan.INVALID
            assert record.scan_summary(buf, 0, check)[0] == Scan.INVALID


def test_body_crc_is_checked_only_when_asked():
    buf = hand(body=b"payload", crc=5)
    assert record.scan(buf).reason == f"body CRC {zlib.crc32(b'payload') & 0x7FFFFFFF} != stored 5"
    assert record.scan_index(buf)[3] == f"body CRC {zlib.crc32(b'payload') & 0x7FFFFFFF} != stored 5"
    assert record.scan_summary(buf)[0] == Scan.INVALID
    assert record.scan(buf, check_crc=False).message.body_crc == 5
    assert record.scan_index(buf, check_crc=False)[0] == Scan.MESSAGE
    assert record.scan_summary(buf, check_crc=False)[2][1] == 5


# -- positions other than 0 ------------------------------------------------------------------------


def test_every_scanner_reads_at_a_non_zero_position():
    a = hand(**FULL)
    b = hand(topic=b"Second", body=b"zz", props=b"UNIQ_KEY\x01U2", queue_offset=7, phys=len(a) + 13)
    buf = b"\xee" * 13 + a + b + b"\0" * 8
    for pos, want in ((13, a), (13 + len(a), b)):
        r = record.scan(buf, pos)
        assert (r.kind, r.size) == (Scan.MESSAGE, len(want))
        assert r.message == record.scan(want).message
        kind, size, info, _ = record.scan_index(buf, pos)
        assert (kind, size, info.topic) == (Scan.MESSAGE, len(want), r.message.topic)
        kind, size, fields, _ = record.scan_summary(memoryview(buf), pos)
        assert (kind, size, fields) == record.scan_summary(want)[:3]
    cut = buf[: 13 + len(a) - 1]  # the record at 13 lacks its last byte
    assert record.scan(cut, 13).kind == Scan.PARTIAL and record.scan(cut[:20], 13).kind == Scan.PARTIAL
    assert record.scan_index(cut, 13)[:2] == (Scan.PARTIAL, len(a))
    assert record.scan_summary(cut, 13)[:2] == (Scan.PARTIAL, len(a))
    walked = list(record.iter_records(buf[13:], base_offset=1000))
    assert [(off, r.kind) for off, r in walked] == [
        (1000, Scan.MESSAGE),
        (1000 + len(a), Scan.MESSAGE),
        (1000 + len(a) + len(b), Scan.INVALID),
    ]
    assert walked[2][1].reason == "zeros"


def test_iter_records_stops_at_a_blank_and_at_a_partial_tail():
    a = hand(topic=b"A")
    blank = struct.pack(">iI", 100, BLANK) + bytes(92)
    assert [r.kind for _, r in record.iter_records(a + blank + a)] == [Scan.MESSAGE, Scan.BLANK]
    assert [r.kind for _, r in record.iter_records(a + a[:50])] == [Scan.MESSAGE, Scan.PARTIAL]
    assert list(record.iter_records(b"")) == []


def test_partial_records_report_what_is_missing():
    a = hand(body=b"x" * 100)
    r = record.scan(a[:7])
    assert (r.kind, r.size, r.reason) == (Scan.PARTIAL, 0, "7 bytes, fewer than a record head")
    r = record.scan(b"\0" * 3 + a[:150], 3)
    assert (r.kind, r.size, r.reason) == (Scan.PARTIAL, len(a), f"record of {len(a)} bytes, 150 present")
    assert record.scan_index(a[:8]) == (Scan.PARTIAL, len(a), None, f"record of {len(a)} bytes, 8 present")
    assert record.scan_index(a, len(a) - 3)[:2] == (Scan.PARTIAL, 0)


# -- blanks and heads ------------------------------------------------------------------------------


def test_blank_marker_bytes_and_its_minimum_length():
    assert record.blank(4096) == struct.pack(">iI", 4096, BLANK)
    assert record.scan(record.blank(8)) == record.ScanResult(Scan.BLANK, size=8)
    assert record.scan_index(record.blank(8)) == (Scan.BLANK, 8, None, "")
    r = record.scan(record.blank(7))
    assert (r.kind, r.size, r.reason) == (Scan.INVALID, 0, "blank record with length 7")
    assert record.scan_index(record.blank(7)) == (Scan.INVALID, 0, None, "blank record with length 7")
    assert record.scan_summary(record.blank(7)) == (Scan.INVALID, 0, None, "blank record with length 7")


def test_minimum_total_size_is_91():
    buf = bytearray(hand())  # 92 bytes: a 1-byte topic
    struct.pack_into(">i", buf, 0, 90)
    r = record.scan(bytes(buf))
    assert (r.kind, r.reason) == (Scan.INVALID, "TOTALSIZE 90 below the minimum 91")
    assert record.scan_index(bytes(buf))[3] == "TOTALSIZE 90 below the minimum 91"


def test_zeros_and_garbage_are_told_apart():
    assert record.scan(bytes(100)).reason == "zeros"
    assert record.scan(struct.pack(">iI", 0, 0x12345678) + bytes(92)).reason == "magic 0x12345678"
    assert record.scan(struct.pack(">iI", 5, 0) + bytes(92)).reason == "magic 0x00000000"
    assert record.scan_index(bytes(100))[3] == "zeros"


def test_message_size_and_store_timestamp_peeks_at_their_exact_lengths():
    v4 = hand(**FULL)
    assert record.HEAD_SIZE == 8 and record.MAGIC_AT == 4
    assert record.message_size(v4[:8]) == len(v4) and record.message_size(v4[:7]) == 0
    assert record.message_size(struct.pack(">iI", 0, MAGIC)) == 0
    assert record.message_size(struct.pack(">iI", -5, MAGIC)) == 0
    assert record.message_size(struct.pack(">iI", 1, MAGIC)) == 1
    assert record.store_timestamp(v4[:64]) == 1700000000123  # IPv4 born host: the field ends at 64
    assert record.store_timestamp(v4[:63]) is None and record.store_timestamp(v4[:47]) is None
    v6 = hand(**dict(FULL, born=("::1", 5), sysflag=0x10))
    assert record.STORE_TIMESTAMP_PEEK == 76
    assert record.store_timestamp(v6[:76]) == 1700000000123 and record.store_timestamp(v6[:75]) is None
    assert record.store_timestamp(record.blank(200) + bytes(80)) is None


# -- properties, tags, keys ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "props,uniq,keys,tags",
    [
        (b"KEYS\x01a\x02KEYS\x01b", None, "b", None),  # duplicate: the last wins
        (b"KEYS\x01a\x02KEYS\x01", None, "a", None),  # an empty last one is skipped
        (b"KEYS\x01\x02UNIQ_KEY\x01", None, None, None),  # empty segments only
        (b"UNIQ_KEY\x01u1\x02UNIQ_KEY\x01u2\x02", "u2", None, None),  # trailing separator
        (b"UNIQ_KEY\x01u1\x02UNIQ_KEY\x01\x02TAGS\x01t", "u1", None, "t"),
        (b"TAGS\x01\x02TAGS\x01t1\x02TAGS\x01", None, None, "t1"),
        (b"\x02\x02KEYS\x01k\x02\x02", None, "k", None),  # empty segments around it
        (b"XKEYS\x01no\x02KEYSX\x01no\x02UNIQ_KEYS\x01no", None, None, None),  # other names
        (b"A\x01KEYS\x01no", None, None, None),  # "KEYS\x01" inside a value
        (b"KEYS\x01a\x01b", None, "a\x01b", None),  # a value may hold \x01
    ],
)
def test_duplicate_and_empty_keys_uniq_key_and_tags_segments(props, uniq, keys, tags):
    buf = hand(props=props)
    f = dict(zip(record.SUMMARY_FIELDS, record.scan_summary(buf)[2]))
    assert (f["uniq_key"], f["keys"], f["tags"]) == (uniq, keys, tags)
    m = record.scan(buf).message
    assert (m.uniq_key, m.keys, m.tags) == (uniq, keys, tags)
    assert record.scan_index(buf)[2].tags_code == (record.java_string_hash(tags) if tags else 0)


def test_decode_properties_java_rules_and_encode_without_trailing_separator():
    assert record.decode_properties(None) == {} and record.decode_properties(b"") == {}
    assert record.decode_properties(b"a\x01b\x02c\x01\xc3\xa9") == {"a": "b", "c": "\u00e9"}
    assert record.decode_properties(memoryview(b"a\x01b")) == {"a": "b"}
    assert record.decode_properties("\x01v\x02k\x01\x02n\x01v") == {"n": "v"}
    assert record.encode_properties({}) == "" and record.encode_properties({"a": "b"}) == "a\x01b"


def test_tags_code_is_zero_without_tags():
    assert record.tags_code(None) == 0 and record.tags_code("") == 0
    assert record.tags_code("TagA") == 2598919
    assert record.java_string_hash("a") == 97 and record.java_string_hash("ab") == 97 * 31 + 98


# -- hosts and ids ---------------------------------------------------------------------------------


def test_hosts_and_offset_msg_ids():
    assert record.encode_host(("10.0.0.9", 10911)) == bytes([10, 0, 0, 9, 0, 0, 0x2A, 0x9F])
    assert record.decode_host(bytes([10, 0, 0, 9, 0, 0, 0x2A, 0x9F])) == ("10.0.0.9", 10911)
    raw6 = ip("fe80::1") + struct.pack(">i", 7)
    assert record.decode_host(raw6) == ("fe80::1", 7) == record.decode_host_cached(raw6)
    mid = record.offset_msg_id(("::1", 1), 255)
    assert mid == ("0" * 31 + "1") + "00000001" + "00000000000000FF"
    assert record.parse_offset_msg_id(mid) == (("::1", 1), 255)
    with pytest.raises(ValueError, match="32 or 56 hex characters, got 30"):
        record.parse_offset_msg_id("00" * 15)
    assert record.msg_id_prefix(raw6) == raw6.hex().upper()


def test_host_of_parses_and_resolves():
    assert record.host_of("10.1.2.3:10911") == ("10.1.2.3", 10911)
    assert record.host_of("[::1]:5") == ("::1", 5)
    assert record.host_of("localhost:9") == ("127.0.0.1", 9)


# -- never raises ------------------------------------------------------------------------------------

SAMPLES = [
    hand(**FULL),
    hand(**dict(FULL, born=("::1", 5), store=("fe80::1", 1), sysflag=0x30)),
    hand(topic=b"E"),
    hand(body=b"x" * 300, props=b"TAGS\x01t\x02KEYS\x01k\x02UNIQ_KEY\x01u"),
]


def _all_scanners(buf, pos, check):
    """scan_index() and scan_summary() give scan()'s verdict and size (scan_summary also its reason),
    and for a message the same fields; none of them raises."""
    r = record.scan(buf, pos, check)
    i = record.scan_index(buf, pos, check)
    s = record.scan_summary(buf, pos, check)
    assert (i[0], i[1]) == (r.kind, r.size), (r, i)
    assert (s[0], s[1], s[3]) == (r.kind, r.size, r.reason), (r, s)
    if r.kind == Scan.MESSAGE:
        m = r.message
        assert (
            i[2].topic,
            i[2].queue_id,
            i[2].queue_offset,
            i[2].physical_offset,
            i[2].sys_flag,
            i[2].store_timestamp,
            i[2].tags_code,
        ) == (
            m.topic,
            m.queue_id,
            m.queue_offset,
            m.physical_offset,
            m.sys_flag,
            m.store_timestamp,
            record.tags_code(m.tags),
        )
        f = dict(zip(record.SUMMARY_FIELDS, s[2]))
        assert (
            f["size"],
            f["body_crc"],
            f["queue_id"],
            f["queue_offset"],
            f["physical_offset"],
            f["sys_flag"],
            f["born_timestamp"],
            f["store_timestamp"],
            f["store_host_raw"],
            f["topic"],
            f["uniq_key"],
            f["keys"],
            f["tags"],
            f["record_crc"],
        ) == (
            m.total_size,
            m.body_crc,
            m.queue_id,
            m.queue_offset,
            m.physical_offset,
            m.sys_flag,
            m.born_timestamp,
            m.store_timestamp,
            record.encode_host(m.store_host),
            m.topic,
            m.uniq_key,
            m.keys,
            m.tags,
            zlib.crc32(bytes(buf[pos : pos + r.size])),
        )
    else:
        assert i[2] is None and s[2] is None
    list(record.iter_records(buf[pos:], 0, check))  # never raises either
    return r.kind


@pytest.mark.parametrize("check", [True, False])
def test_scanners_never_raise_on_truncated_or_damaged_records(check):
    rng = random.Random(15)
    for good in SAMPLES:
        for cut in range(len(good)):  # every truncation, at offset 0 and at offset 5
            _all_scanners(good[:cut], 0, check)
            _all_scanners(b"\0" * 5 + good[:cut], 5, check)
        for pos in range(len(good)):  # every byte flipped, and set to 0x80 and 0xFF
            for value in (good[pos] ^ 0xFF, 0x80, 0xFF, 0x00):
                bad = bytearray(good)
                bad[pos] = value
                _all_scanners(bytes(bad), 0, check)
        for _ in range(200):  # random damage of several bytes
            bad = bytearray(good)
            for _ in range(rng.randint(1, 6)):
                bad[rng.randrange(len(bad))] = rng.randrange(256)
            _all_scanners(bytes(bad), 0, check)
    for _ in range(300):  # random bytes behind a message magic
        junk = struct.pack(">iI", rng.randint(-5, 400), MAGIC) + rng.randbytes(rng.randint(0, 300))
        _all_scanners(junk, 0, check)


def test_a_valid_record_is_valid_for_every_scanner_with_either_crc_setting():
    for good in SAMPLES:
        for check in (True, False):
            assert _all_scanners(good, 0, check) == Scan.MESSAGE


# -- exact boundaries and reasons, and damage the fast paths must not accept ------------------------------


def test_the_layout_constants_are_wire_facts():
    assert (record.MESSAGE_MAGIC, record.BLANK_MAGIC, record.END_FILE_MIN_BLANK_LENGTH) == (MAGIC, BLANK, 8)
    assert (record.FIXED_SIZE_IPV4, record.IPV6_EXTRA, record.MAX_TOPIC_BYTES, record.MAX_PROPERTIES_BYTES) == (
        91,
        12,
        127,
        32767,
    )
    assert (
        record.FLAG_COMPRESSED,
        record.FLAG_MULTI_TAGS,
        record.TRANSACTION_MASK,
        record.TRANSACTION_NOT_TYPE,
        record.TRANSACTION_PREPARED,
        record.TRANSACTION_COMMIT,
        record.TRANSACTION_ROLLBACK,
        record.FLAG_BORNHOST_V6,
        record.FLAG_STOREHOST_V6,
    ) == (0x1, 0x2, 0xC, 0x0, 0x4, 0x8, 0xC, 0x10, 0x20)
    assert (record.NAME_VALUE_SEPARATOR, record.PROPERTY_SEPARATOR) == ("\x01", "\x02")


def test_the_smallest_record_91_bytes_with_nothing_in_it():
    buf = hand(topic=b"", body=b"", props=b"", store_ts=5)
    assert len(buf) == 91
    for check in (True, False):
        assert _all_scanners(buf, 0, check) == Scan.MESSAGE
        assert _all_scanners(b"\0" * 3 + buf, 3, check) == Scan.MESSAGE
    m = record.scan(buf).message
    assert (m.topic, m.body, m.properties, m.total_size) == ("", b"", {}, 91)


def _with_int(buf, at, value, fmt=">i"):
    b = bytearray(buf)
    struct.pack_into(fmt, b, at, value)
    return bytes(b)


def test_which_check_ends_a_bad_record_scan():
    good = hand(topic=b"T", body=b"abc", props=b"k\x01v")  # 98 bytes: BODYLEN at 84, TOPICLEN at 91
    assert len(good) == 98
    assert record.scan(_with_int(good, 84, -1)).reason == "body length -1 does not fit in TOTALSIZE 98"
    assert record.scan(_with_int(good, 84, 10**6)).reason == "body length 1000000 does not fit in TOTALSIZE 98"
    assert record.scan(_with_int(good, 84, 11)).reason == "body length 11 does not fit in TOTALSIZE 98"
    # a body that ends exactly at the record's end leaves no TOPICLEN byte: read past the record
    r = record.scan(_with_int(good, 84, 10) + b"\x00\x00\x00", check_crc=False)
    assert r.kind == Scan.INVALID and r.reason == "TOTALSIZE 98 != size computed from the fields 101"
    assert record.scan(_with_int(good, 84, 10), check_crc=False).reason.startswith("unparseable record: ")


def test_which_check_ends_a_bad_record_scan_index():
    good = hand(topic=b"T", body=b"abc", props=b"k\x01v")
    assert (
        record.scan_index(_with_int(good, 0, 0x12345678, ">I")[:4] + struct.pack(">I", 0x12345678) + good[8:])[3]
        == "magic 0x12345678"
    )
    assert record.scan_index(struct.pack(">iI", 0, 0x12345678) + bytes(92))[3] == "magic 0x12345678"
    assert record.scan_index(struct.pack(">iI", 7, 0) + bytes(92))[3] == "magic 0x00000000"
    assert record.scan_index(_with_int(good, 84, 11))[3] == "body length 11 does not fit in TOTALSIZE 98"
    assert record.scan_index(_with_int(good, 84, 8))[3] == "body length 8 does not fit in TOTALSIZE 98"
    # a shorter body: TOPICLEN is read from a properties byte ("k")
    assert record.scan_index(_with_int(good, 84, 7), check_crc=False)[3] == "topic length 107"
    # the topic overruns the record by one and by two bytes
    for t in (5, 6):
        bad = bytearray(good)
        bad[91] = t
        assert record.scan_index(bytes(bad) + bytes(8))[3] == f"topic length {t}"
        assert record.scan_summary(bytes(bad))[0] == Scan.INVALID
    # IPv6 hosts in a record whose TOTALSIZE leaves no room for BODYLEN: 84 + 24 = 108 = BODYLEN's offset
    v6 = _with_int(hand(born=("::1", 1), store=("::1", 2), sysflag=0x30, topic=b""), 0, 111)
    assert record.scan_index(v6 + bytes(40))[3] == "TOTALSIZE 111 leaves no room for BODYLEN"
    assert record.scan_index(_with_int(v6, 0, 112) + bytes(40))[3] == "body length 0 does not fit in TOTALSIZE 112"


def test_scan_summary_never_reads_past_a_record_at_the_end_of_the_buffer():
    good = hand(topic=b"T", body=b"abc", props=b"k\x01v")
    body_to_end = _with_int(good, 84, 10)  # the body would end at the record's end: no TOPICLEN byte
    topic_to_end = bytearray(good)
    topic_to_end[91] = 6  # the topic would end at the record's end: no PROPLEN
    for buf in (body_to_end, bytes(topic_to_end)):
        for check in (True, False):
            assert record.scan_summary(buf, 0, check)[:3] == (Scan.INVALID, 0, None)
            _all_scanners(buf, 0, check)


@pytest.mark.parametrize(
    "props,field",
    [
        (b"k\x01v", 3 + 4),
        (b"k\x01v", 3 - 1),
        (b"k\x01v", 3 + 1),
        (b"p\x01" + b"x" * 510, 256),  # 512 bytes, the field says 256
    ],
)
def test_a_properties_length_that_lies_is_invalid_for_every_scanner(props, field):
    buf = bytearray(hand(topic=b"T", props=props))
    struct.pack_into(">H", buf, len(buf) - len(props) - 2, field)
    for check in (True, False):
        assert _all_scanners(bytes(buf), 0, check) == Scan.INVALID
        assert _all_scanners(bytes(buf) + bytes(600), 0, check) == Scan.INVALID


def test_a_lying_properties_length_low_byte_equal_to_the_last_topic_byte():
    buf = bytearray(hand(topic=b"T\x03", props=b"k\x01v"))
    struct.pack_into(">H", buf, len(buf) - 5, 5)  # says 5; the true length, 3, is the topic's last byte
    for check in (True, False):
        assert _all_scanners(bytes(buf), 0, check) == Scan.INVALID


def test_topic_and_properties_split_where_topiclen_says_even_when_bytes_look_like_lengths():
    # the topic's last two bytes read as a PROPLEN would make a consistent record two bytes earlier
    a = hand(topic=b"T\x00\x02", props=b"")
    # TOPICLEN (1) and the topic's byte ("A", 65) read as a PROPLEN of 321 make a consistent record too
    b = hand(topic=b"A", body=b"xyz", props=b"UNIQ_KEY\x01" + b"u" * 310)
    for buf in (a, b):
        for check in (True, False):
            assert _all_scanners(buf, 0, check) == Scan.MESSAGE
    assert record.scan_summary(a)[2][9] == "T\x00\x02" and record.scan_summary(b)[2][9] == "A"
    assert record.scan_summary(b)[2][10] == "u" * 310


@pytest.mark.parametrize(
    "props,keys,tags",
    [
        (b"KEYS\x01\x02TAGS\x01t", None, "t"),
        (b"TAGS\x01\x02KEYS\x01k", "k", None),
        (b"UNIQ_KEY\x01\x02KEYS\x01k", "k", None),
    ],
)
def test_an_empty_value_followed_by_another_segment(props, keys, tags):
    f = dict(zip(record.SUMMARY_FIELDS, record.scan_summary(hand(props=props))[2]))
    assert (f["uniq_key"], f["keys"], f["tags"]) == (None, keys, tags)


def test_iter_records_defaults_start_at_offset_0_and_check_crc():
    a = hand(topic=b"A", body=b"ok")
    bad = hand(topic=b"B", body=b"no", crc=1)
    walked = list(record.iter_records(a + bad))
    assert [(off, r.kind) for off, r in walked] == [(0, Scan.MESSAGE), (len(a), Scan.INVALID)]
    assert [r.kind for _, r in record.iter_records(a + bad, 0, False)] == [Scan.MESSAGE, Scan.MESSAGE]


# -- hashes, properties round trip, index keys --------------------------------------------------------


def java_hash_oracle(s):
    """Java's String.hashCode(), the textbook loop over UTF-16 code units, signed 32-bit."""
    data, h = s.encode("utf-16-be"), 0
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) % (1 << 32)
    return h - (1 << 32) if h >= 1 << 31 else h


@pytest.mark.parametrize(
    "text",
    [
        "",
        "a",
        "TagA",
        "polygenelubricants",
        "x" * 4096,
        "y" * 4097,
        "TagA" * 3000,
        "\u00e9t\u00e9",
        "\U0001f600",
        "\u00e9" * 4096,
        "\u00e9" * 4097,
        ("k\u00e9y-" * 1000) + "\U0001f600" * 900,
    ],
)
def test_java_string_hash_matches_the_textbook_loop_on_every_path(text):
    assert record.java_string_hash(text) == java_hash_oracle(text)


@pytest.mark.parametrize(
    "props,ok",
    [
        ({}, True),
        ({"a": "b"}, True),
        ({"a": "b", "c": "d"}, True),
        ({"a": "b", "c": "d", "e": "f"}, True),
        ({"a\x01": "b"}, False),
        ({"a": "b\x01"}, False),
        ({"a": "b\x02c"}, False),
        ({"a\x02": "b", "c": "d"}, False),
    ],
)
def test_properties_round_trip(props, ok):
    assert record.properties_round_trip(props) is ok
    if ok:
        assert record.decode_properties(record.encode_properties(props)) == props


@pytest.mark.parametrize(
    "props,keys",
    [
        (b"UNIQ_KEY\x01U1\x02KEYS\x01k1 k2", ("U1", "k1 k2")),
        (b"KEYS\x01k", (None, "k")),
        (b"UNIQ_KEY\x01U", ("U", None)),
        (b"TAGS\x01t", (None, None)),
        (b"", (None, None)),
        (b"KEYS\x01\x02UNIQ_KEY\x01", (None, None)),
    ],
)
def test_index_info_carries_the_raw_properties_and_their_keys(props, keys):
    buf = hand(topic=b"T", props=props)
    info = record.scan_index(buf)[2]
    assert info.props == props and info.index_keys() == keys
