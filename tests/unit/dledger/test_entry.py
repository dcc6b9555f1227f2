"""The DLedger entry and index layouts, against bytes worked out by hand from DLedgerEntryCoder (0.3.1.2)."""

import pytest

from rmqha.broker.dledger import entry as E
from rmqha.broker.dledger.entry import DLedgerEntry, EntryFormatError
from rmqha.broker.store import record


def hexbytes(s: str) -> bytes:
    return bytes.fromhex("".join(s.split()))


# magic=1, size=48+5, index=7, term=3, pos=1024, channel=0, chainCrc=0, bodyCrc=0, bodySize=5, "hello"
HELLO = (
    hexbytes("""
    00000001 00000035
    0000000000000007
    0000000000000003
    0000000000000400
    00000000 00000000 00000000
    00000005
""")
    + b"hello"
)


def test_the_layout_constants_are_dledgers():
    assert (E.POS_OFFSET, E.HEADER_SIZE, E.BODY_OFFSET, E.INDEX_UNIT_SIZE) == (24, 44, 48, 32)
    assert (E.MAGIC_1, E.CURRENT_MAGIC, E.BLANK_MAGIC_CODE, E.MIN_BLANK_LEN) == (1, 1, -1, 8)


def test_the_structs_are_as_long_as_the_layout_says():
    """Checked here rather than by an assert at import: a wrong constant then fails a test, not the import."""
    assert (E._HEADER.size, E._INDEX.size) == (E.BODY_OFFSET, E.INDEX_UNIT_SIZE)


def test_encode_matches_the_hand_computed_bytes_and_sets_size():
    e = DLedgerEntry(body=b"hello", index=7, term=3, pos=1024)
    assert E.encode_entry(e) == HELLO
    assert e.size == 53


def test_decode_reads_every_field():
    e = E.decode_entry(HELLO)
    assert (e.magic, e.size, e.index, e.term, e.pos, e.channel, e.chain_crc, e.body_crc, e.body) == (
        1,
        53,
        7,
        3,
        1024,
        0,
        0,
        0,
        b"hello",
    )


def test_signed_fields_and_crcs_round_trip():
    e = DLedgerEntry(body=b"", index=2**63 - 1, term=0, pos=-1, channel=-5, chain_crc=-(2**31), body_crc=2**31 - 1)
    raw = E.encode_entry(e)
    assert raw[36:44] == hexbytes("80000000 7fffffff")
    back = E.decode_entry(raw)
    assert (back.index, back.pos, back.channel, back.chain_crc, back.body_crc) == (
        2**63 - 1,
        -1,
        -5,
        -(2**31),
        2**31 - 1,
    )


def test_decode_at_an_offset_inside_a_file():
    buf = b"\x00" * 10 + HELLO + b"\xff" * 3
    assert E.decode_entry(buf, 10).body == b"hello"
    assert E.read_pos(buf, 10) == 1024


def test_equality_is_dledgers_no_crcs():
    a = E.decode_entry(HELLO)
    b = E.decode_entry(HELLO)
    b.body_crc = 99
    b.chain_crc = 98
    assert a == b
    b.pos = 1025
    assert a != b
    c = E.decode_entry(HELLO)
    c.body = b"hellO"
    assert a != c


def test_index_entry_layout():
    raw = E.encode_index(pos=1024, size=53, magic=1, index=7, term=3)
    assert raw == hexbytes("00000001 0000000000000400 00000035 0000000000000007 0000000000000003")
    assert E.decode_index(raw) == E.IndexEntry(magic=1, pos=1024, size=53, index=7, term=3)
    assert E.index_entry_for(E.decode_entry(HELLO)) == raw


def test_set_pos_and_set_index_term_patch_in_place():
    buf = bytearray(E.encode_entry(DLedgerEntry(body=b"hello")))  # index/term/pos -1 until the leader sets them
    E.set_index_term(buf, 7, 3, E.CURRENT_MAGIC)
    E.set_pos(buf, 1024)
    assert bytes(buf) == HELLO


def test_blank():
    assert E.encode_blank(12) == hexbytes("ffffffff 0000000c 00000000")
    assert E.is_blank(E.encode_blank(8)) and not E.is_blank(HELLO)
    with pytest.raises(EntryFormatError):
        E.encode_blank(7)
    with pytest.raises(EntryFormatError, match="blank"):
        E.decode_entry(E.encode_blank(64))


@pytest.mark.parametrize(
    "raw, message",
    [
        (HELLO[:47], "need 48 header bytes"),
        (HELLO[:50], "truncated"),
        (hexbytes("00000002") + HELLO[4:], "unknown magic=2"),
        (HELLO[:4] + hexbytes("00000036") + HELLO[8:], "size 54 != 5 \\+ 48"),
        (HELLO[:4] + hexbytes("0000002c") + HELLO[8:], "should > 44"),
    ],
)
def test_decode_rejects_bad_bytes_clearly(raw, message):
    with pytest.raises(EntryFormatError, match=message):
        E.decode_entry(raw)


def test_decode_index_rejects_short_input():
    with pytest.raises(EntryFormatError, match="need 32 index bytes"):
        E.decode_index(b"\x00" * 31)


@pytest.mark.parametrize(
    "field, value", [("index", 2**63), ("term", -(2**63) - 1), ("pos", 1.5), ("magic", 2**31), ("channel", True)]
)
def test_encode_rejects_values_java_cannot_hold(field, value):
    e = DLedgerEntry(body=b"x", index=0, term=0, pos=0)
    setattr(e, field, value)
    with pytest.raises(EntryFormatError, match=field):
        E.encode_entry(e)


def test_encode_rejects_a_non_bytes_body():
    with pytest.raises(EntryFormatError, match="body must be bytes"):
        E.encode_entry(DLedgerEntry(body="text"))


def test_a_rocketmq_message_as_the_body_sits_at_pos_plus_body_offset():
    """DLedgerCommitLog stores one 4.x message per entry; its commit-log offset is pos + BODY_OFFSET."""
    pos = 1 << 30  # DLedgerCommitLog starts DLedger's files after the classic commit log's last file
    msg = record.Message(topic="TopicTest", body=b"payload", queue_id=2, properties={"TAGS": "a"})
    raw_msg = bytes(record.encode(msg).finish(queue_offset=5, physical_offset=pos + E.BODY_OFFSET))
    raw = E.encode_entry(DLedgerEntry(body=raw_msg, index=0, term=1, pos=pos))
    assert len(raw) == E.BODY_OFFSET + len(raw_msg)
    found = record.scan(raw, E.BODY_OFFSET)
    assert found.kind == record.Scan.MESSAGE
    assert (found.message.topic, found.message.body, found.message.physical_offset) == (
        "TopicTest",
        b"payload",
        pos + E.BODY_OFFSET,
    )
    assert E.decode_entry(raw).body == raw_msg
