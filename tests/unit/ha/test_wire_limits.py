"""HA wire decoders at their exact limits (docs/ha-protocol.md §2), checked against hand-built bytes."""

import struct

import pytest

from rmqha.broker.ha import wire
from rmqha.broker.ha.wire import FrameReader, ProtocolError, ReportReader

FOUR_MIB = 4 * 1024 * 1024


def header(offset, size):
    """fromPhyOffset (i8) + size (i4), big-endian, written without the module under test."""
    return struct.pack(">qi", offset, size)


def test_encoders_write_big_endian_fields():
    assert wire.encode_report(0x0102030405060708) == bytes([1, 2, 3, 4, 5, 6, 7, 8])
    assert wire.encode_header(0x0102030405060708, 0x0A0B0C0D) == bytes([1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13])
    assert wire.HEADER_SIZE == 12 and wire.REPORT_SIZE == 8


def test_the_max_body_is_the_reference_slaves_4_mib_buffer():
    assert wire.MAX_FRAME_BODY == FOUR_MIB
    assert FrameReader().max_body == FOUR_MIB


def test_a_frame_of_exactly_4_mib_is_accepted_and_one_byte_more_is_not():
    body = bytes(range(256)) * (FOUR_MIB // 256)
    frames = FrameReader().feed(header(64, FOUR_MIB) + body)
    assert len(frames) == 1 and frames[0].offset == 64 and bytes(frames[0].body) == body
    # the same frame arriving in pieces, the header split too
    r = FrameReader()
    data = header(64, FOUR_MIB) + body
    assert r.feed(data[:5]) == [] and r.feed(data[5:1000]) == []
    [f] = r.feed(data[1000:])
    assert f.offset == 64 and bytes(f.body) == body
    with pytest.raises(ProtocolError, match=f"declares body size {FOUR_MIB + 1}; allowed 0..{FOUR_MIB}"):
        FrameReader().feed(header(64, FOUR_MIB + 1))


def test_a_smaller_limit_is_exact_too():
    assert [bytes(f.body) for f in FrameReader(max_body=3).feed(header(0, 3) + b"abc")] == [b"abc"]
    with pytest.raises(ProtocolError):
        FrameReader(max_body=3).feed(header(0, 4) + b"abcd")


def test_offset_zero_is_a_valid_frame_and_minus_one_is_not():
    [f] = FrameReader().feed(header(0, 2) + b"hi")
    assert f.offset == 0 and bytes(f.body) == b"hi"
    [hb] = FrameReader().feed(header(0, 0))
    assert hb.offset == 0 and hb.is_heartbeat
    with pytest.raises(ProtocolError, match="negative fromPhyOffset=-1"):
        FrameReader().feed(header(-1, 0))


def test_a_frame_may_end_at_the_largest_long_and_not_one_byte_past_it():
    """The slave reports its max offset as a long: a log ending past 2^63 - 1 could never be reported."""
    top = (1 << 63) - 1
    [f] = FrameReader().feed(header(top - 2, 2) + b"hi")
    assert f.offset == top - 2
    [hb] = FrameReader().feed(header(top, 0))
    assert hb.is_heartbeat
    with pytest.raises(ProtocolError, match="ends past the largest offset"):
        FrameReader().feed(header(top - 2, 3) + b"abc")


def test_a_header_split_after_its_offset_checks_the_size_when_it_completes():
    r = FrameReader()
    assert r.feed(header(7, FOUR_MIB + 1)[:8]) == []
    with pytest.raises(ProtocolError, match="body size"):
        r.feed(header(7, FOUR_MIB + 1)[8:])


def test_heartbeat_and_data_frames_tell_themselves_apart():
    hb, data = FrameReader().feed(header(10, 0) + header(10, 1) + b"x")
    assert hb.is_heartbeat is True and data.is_heartbeat is False
    assert (hb.offset, bytes(hb.body), data.offset, bytes(data.body)) == (10, b"", 10, b"x")


def test_pending_counts_the_bytes_of_an_unfinished_frame():
    r = FrameReader()
    assert r.pending == 0
    r.feed(header(5, 4)[:3])
    assert r.pending == 3
    r.feed(header(5, 4)[3:] + b"ab")
    assert r.pending == 14
    [f] = r.feed(b"cd" + header(9, 1))
    assert bytes(f.body) == b"abcd" and r.pending == 12
    [g] = r.feed(b"z")
    assert (g.offset, bytes(g.body), r.pending) == (9, b"z", 0)


def test_a_header_completed_exactly_then_its_body_in_the_next_read():
    r = FrameReader()
    assert r.feed(header(3, 2)) == [] and r.pending == 12
    f, hb = r.feed(b"ok" + header(5, 0))
    assert (f.offset, bytes(f.body), hb.offset, bytes(hb.body)) == (3, b"ok", 5, b"")
    assert r.pending == 0


def test_report_reader_takes_exactly_eight_bytes_and_keeps_the_rest():
    r = ReportReader()
    assert r.feed(struct.pack(">q", 0)) == 0  # a report of 0 is a report, not "nothing"
    assert r.feed(struct.pack(">q", 1 << 40) + b"\x00" * 7) == 1 << 40
    assert r.feed(b"\x2a") == 42  # the 7 kept bytes and this one make the next report
    assert r.feed(b"") is None and r.feed(b"\x00" * 7) is None
    assert r.feed(b"\x01") == 1
