"""SlaveSession alone (docs/ha-protocol.md §4): frames in, appends and reports out, time passed in."""

import struct

import pytest

from rmqha.broker.ha.slave_session import OffsetMismatch, SlaveSession
from rmqha.broker.ha.wire import ProtocolError


class FakeStore:
    def __init__(self, max_offset=0):
        self.max_offset = max_offset
        self.appends = []

    def append_replicated(self, offset, chunks):
        assert offset == self.max_offset or self.max_offset == 0
        data = b"".join(bytes(c) for c in chunks)
        self.appends.append((offset, data))
        self.max_offset = offset + len(data)


def frame(offset, body=b""):
    return struct.pack(">qi", offset, len(body)) + body


def report(offset):
    return struct.pack(">q", offset)


def test_state_on_connect_and_the_first_report():
    store = FakeStore(700)
    s = SlaveSession(store, heartbeat_s=5.0, housekeeping_s=20.0, now=30.0)
    assert (s.reported, s.bytes_received, s.last_data, s.last_read, s.last_write) == (-1, 0, None, 30.0, 30.0)
    assert (s.heartbeat_s, s.housekeeping_s, s.store) == (5.0, 20.0, store)
    assert s.start(31.0) == report(700)
    assert (s.reported, s.last_write) == (700, 31.0)


def test_frames_are_appended_with_one_write_per_read_and_reported_once():
    store = FakeStore(100)
    s = SlaveSession(store, heartbeat_s=5.0, housekeeping_s=20.0, now=0.0)
    s.start(0.0)
    data = frame(100, b"abc") + frame(103, b"") + frame(103, b"defg")
    assert s.on_data(data, 2.5) == report(107)
    assert store.appends == [(100, b"abcdefg")]
    assert (s.reported, s.bytes_received, s.last_read, s.last_write, s.last_data) == (107, len(data), 2.5, 2.5, 2.5)
    # a heartbeat at the slave's offset: read, but no data and nothing new to report
    assert s.on_data(frame(107), 3.0) is None
    assert (s.last_read, s.last_data, s.bytes_received) == (3.0, 2.5, len(data) + 12)


def test_an_empty_slave_takes_the_first_frame_wherever_it_starts():
    store = FakeStore(0)
    s = SlaveSession(store, heartbeat_s=5.0, housekeeping_s=20.0, now=0.0)
    assert s.start(0.0) == report(0)
    assert s.on_data(frame(4096, b"xy"), 1.0) == report(4098)
    assert store.appends == [(4096, b"xy")]


def test_a_mismatch_keeps_what_matched_before_it_in_the_same_read():
    store = FakeStore(100)
    s = SlaveSession(store, heartbeat_s=5.0, housekeeping_s=20.0, now=0.0)
    s.start(0.0)
    with pytest.raises(OffsetMismatch) as e:
        s.on_data(frame(100, b"ok") + frame(150, b"bad"), 1.0)
    assert (e.value.slave_offset, e.value.master_offset) == (102, 150)
    assert str(e.value) == ("master pushed offset not equal the max phy offset in slave, SLAVE: 102 MASTER: 150")
    assert store.appends == [(100, b"ok")] and s.last_data == 1.0


def test_a_heartbeat_at_the_wrong_offset_is_a_mismatch_too():
    s = SlaveSession(FakeStore(100), heartbeat_s=5.0, housekeeping_s=20.0, now=0.0)
    with pytest.raises(OffsetMismatch):
        s.on_data(frame(101), 1.0)


def test_a_heartbeat_below_our_offset_is_a_master_behind_us_not_a_mismatch():
    """A SLAVE_AHEAD master's heartbeat (its start offset, below ours): no close, nothing truncated."""
    store = FakeStore(100)
    s = SlaveSession(store, heartbeat_s=5.0, housekeeping_s=20.0, now=0.0)
    assert s.on_data(frame(99), 1.0) == report(100)  # it goes on reporting its own offset
    assert s.on_data(frame(99), 2.0) is None
    assert s.master_behind == (100, 99) and store.max_offset == 100


def test_master_behind_at_its_exact_limits():
    store = FakeStore(100)
    s = SlaveSession(store, heartbeat_s=5.0, housekeeping_s=20.0, now=0.0)
    assert s.on_data(frame(100), 1.0) == report(100)  # a heartbeat at exactly our offset: all is well
    assert s.master_behind is None
    s.on_data(frame(0), 2.0)  # a master that holds nothing at all is behind too, not a mismatch
    assert s.master_behind == (100, 0)
    s.on_data(frame(40) + frame(60), 3.0)  # every heartbeat of a read counts: the last one is shown
    assert s.master_behind == (100, 60) and store.appends == []


def test_the_frame_size_limit_is_the_sessions():
    s = SlaveSession(FakeStore(0), heartbeat_s=5.0, housekeeping_s=20.0, now=0.0, max_body=4)
    assert s.frames.max_body == 4
    s.on_data(frame(0, b"1234"), 1.0)
    with pytest.raises(ProtocolError):
        s.on_data(frame(4, b"12345"), 1.0)
    assert SlaveSession(FakeStore(0), heartbeat_s=5.0, housekeeping_s=20.0, now=0.0).frames.max_body == 4 << 20


def test_heartbeats_count_over_several_intervals_each_at_its_deadline():
    store = FakeStore(10)
    s = SlaveSession(store, heartbeat_s=5.0, housekeeping_s=20.0, now=100.0)
    s.start(100.0)
    sent = []
    t = 100.0
    while t < 130.0 - 1e-9:
        t = round(t + 0.1, 1)
        if t == 112.0:  # data from the master: the report it causes moves the next deadline
            assert s.on_data(frame(10, b"z"), t) == report(11)
        hb = s.heartbeat(t)
        if hb is not None:
            sent.append((t, hb))
    assert sent == [
        (105.0, report(10)),
        (110.0, report(10)),
        (117.0, report(11)),
        (122.0, report(11)),
        (127.0, report(11)),
    ]


def test_housekeeping_deadline_is_exact_and_restarts_on_each_read():
    s = SlaveSession(FakeStore(0), heartbeat_s=5.0, housekeeping_s=20.0, now=10.0)
    assert not s.expired(30.0) and s.expired(30.001)
    s.on_data(b"\x00\x00", 25.0)  # part of a header is a read
    assert not s.expired(45.0) and s.expired(45.5)


def test_only_a_backlog_pouring_in_counts_as_catching_up():
    """Dispatch yields to the stream during a catch-up (hundreds of MiB/s) but not to live sends
    (tens of MiB/s), which it must keep pace with for as long as they last."""
    import types

    from rmqha.broker.ha.slave import CATCH_UP_RATE, HAClient

    def fed(rate, seconds=1.0, step=0.005):
        store = FakeStore(0)
        s = SlaveSession(store, heartbeat_s=5.0, housekeeping_s=20.0, now=0.0)
        at, t = 0, 0.0
        while t < seconds:
            t = round(t + step, 6)
            body = bytes(int(rate * step))
            s.on_data(frame(at, body), t)
            at += len(body)
        client = HAClient(store, None, clock=None, reactor=None)
        client.proto = types.SimpleNamespace(session=s)
        return client, s, t

    live, s, t = fed(20 << 20)
    assert 19 << 20 < s.recent_rate < 21 << 20 and not live.catching_up(t)
    backlog, s, t = fed(600 << 20)
    assert s.recent_rate > CATCH_UP_RATE and backlog.catching_up(t)
    assert backlog.catching_up(t + 0.099) and not backlog.catching_up(t + 0.1)  # the stream paused
    edge, s, t = fed(CATCH_UP_RATE * 1.02)
    assert edge.catching_up(t)
    below, s, t = fed(CATCH_UP_RATE * 0.98)
    assert not below.catching_up(t)
    idle = HAClient(FakeStore(0), None, clock=None, reactor=None)
    assert not idle.catching_up(1.0)  # not connected


def test_the_receive_rate_is_exact_over_each_window():
    s = SlaveSession(FakeStore(0), heartbeat_s=5.0, housekeeping_s=20.0, now=0.0)
    assert s.recent_rate == 0.0  # nothing measured yet
    s.on_data(frame(0, bytes(988)), 0.05)  # 1000 bytes inside the first window
    assert s.recent_rate == 0.0
    s.on_data(frame(988), 0.1)  # the window [0, 0.1) closes exactly at 0.1: its bytes over its length
    assert s.recent_rate == 1000 / 0.1
    s.on_data(frame(988, bytes(488)), 0.15)
    s.on_data(frame(1476), 0.35)  # a longer gap: 12 + 500 bytes over 0.25 s
    assert s.recent_rate == pytest.approx(512 / 0.25)
