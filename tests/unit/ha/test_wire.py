import pytest

from rmqha.broker.ha.wire import FrameReader, ProtocolError, ReportReader, encode_header, encode_report


def frames_bytes():
    bodies = [b"a" * 10, b"", b"xyz" * 100, b"", b"q"]
    data = b"".join(encode_header(1000 + i, len(b)) + b for i, b in enumerate(bodies))
    return bodies, data


def collect(reader, pieces):
    out = []
    for p in pieces:
        out += [(f.offset, bytes(f.body)) for f in reader.feed(p)]
    return out


def test_frames_split_at_every_byte_boundary():
    bodies, data = frames_bytes()
    expected = [(1000 + i, b) for i, b in enumerate(bodies)]
    for cut in range(len(data) + 1):
        assert collect(FrameReader(), [data[:cut], data[cut:]]) == expected, cut
    for cut in range(0, len(data), 7):  # and three pieces
        for cut2 in range(cut, len(data), 13):
            assert collect(FrameReader(), [data[:cut], data[cut:cut2], data[cut2:]]) == expected


def test_frames_one_byte_at_a_time_and_coalesced():
    bodies, data = frames_bytes()
    expected = [(1000 + i, b) for i, b in enumerate(bodies)]
    assert collect(FrameReader(), [data[i : i + 1] for i in range(len(data))]) == expected
    assert collect(FrameReader(), [data + data]) == expected + expected


@pytest.mark.parametrize("size", [-1, -(2**31), 4 * 1024 * 1024 + 1, 2**31 - 1])
def test_bad_sizes_are_protocol_errors(size):
    with pytest.raises(ProtocolError, match="body size"):
        FrameReader().feed(encode_header(0, size))


def test_negative_offset_is_protocol_error():
    with pytest.raises(ProtocolError, match="negative"):
        FrameReader().feed(encode_header(-5, 0))


def test_only_the_last_complete_report_counts():
    r = ReportReader()
    data = encode_report(10) + encode_report(20) + encode_report(30)
    assert r.feed(data + encode_report(40)[:3]) == 30
    assert r.feed(b"") is None
    assert r.feed(encode_report(40)[3:]) == 40
    for cut in range(1, 8):
        r = ReportReader()
        assert r.feed(encode_report(77)[:cut]) is None
        assert r.feed(encode_report(77)[cut:]) == 77
