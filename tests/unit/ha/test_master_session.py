"""MasterSession alone (docs/ha-protocol.md §3): reports in, frames and heartbeats out, time passed in.

The commit log is a fake with the three things the session reads (min/max offset, the last file's
start, reads that stop at a file boundary); frames are checked against hand-built headers."""

import struct

import pytest

from rmqha.broker.ha.master_session import Ack, MasterSession, SessionState
from rmqha.broker.ha.wire import ProtocolError


class FakeLog:
    def __init__(self, max_offset, file_size=1000, min_offset=0):
        self.file_size = file_size
        self.min_offset = min_offset
        self.data = bytes(i % 251 for i in range(max_offset))
        self.reads = []

    @property
    def max_offset(self):
        return len(self.data)

    def last_file_start(self):
        m = self.max_offset
        return m - m % self.file_size

    def read(self, offset, max_bytes):
        self.reads.append((offset, max_bytes))
        end = min(offset + max_bytes, self.max_offset, (offset // self.file_size + 1) * self.file_size)
        return self.data[offset:end]

    def region(self, offset, max_bytes):
        """(file, position in it, length), as CommitLog.region: never past a file's end; None if empty."""
        self.reads.append((offset, max_bytes))
        base = offset - offset % self.file_size
        n = min(max_bytes, self.max_offset - offset, base + self.file_size - offset)
        return (f"file@{base}", offset - base, n) if n > 0 else None


def report(offset):
    return struct.pack(">q", offset)


def header(offset, size):
    return struct.pack(">qi", offset, size)


def session(log, now=100.0, batch=300, heartbeat=5.0, housekeeping=20.0):
    return MasterSession(
        log, "10.0.0.2:40000", batch_size=batch, heartbeat_s=heartbeat, housekeeping_s=housekeeping, now=now
    )


def test_state_before_any_report():
    log = FakeLog(2500)
    s = session(log, now=42.0)
    assert (s.state, s.is_slave) == (SessionState.AWAITING_REPORT, False)
    assert (s.slave_request_offset, s.slave_ack_offset, s.next_transfer_from) == (-1, -1, -1)
    assert (s.last_read, s.last_write, s.connected_at, s.bytes_sent, s.problem) == (42.0, 42.0, 42.0, 0, "")
    assert (s.peer, s.batch_size, s.heartbeat_s, s.housekeeping_s) == ("10.0.0.2:40000", 300, 5.0, 20.0)
    assert s.lag() == 2500  # nothing acknowledged yet: the whole log
    assert s.next_frames(43.0, 10_000) == [] and s.heartbeat(1000.0) is None and log.reads == []


def test_the_first_report_sets_the_request_offset_and_later_ones_only_the_ack():
    log = FakeLog(2500)
    s = session(log)
    assert s.on_data(report(1200)[:5], 101.0) is None and s.last_read == 101.0
    assert s.on_data(report(1200)[5:], 102.0) == Ack(1200, True)
    assert (s.state, s.is_slave, s.slave_request_offset, s.slave_ack_offset, s.next_transfer_from) == (
        SessionState.STREAMING,
        True,
        1200,
        1200,
        1200,
    )
    assert s.lag() == 1300
    assert s.on_data(report(1500), 103.0) == Ack(1500, False)
    assert (s.slave_request_offset, s.slave_ack_offset, s.next_transfer_from) == (1200, 1500, 1200)
    assert s.on_data(report(1400), 104.0) == Ack(1400, False)  # backwards: logged, still the ack
    assert s.slave_ack_offset == 1400 and s.last_read == 104.0


def test_a_report_of_exactly_the_masters_max_offset_is_a_caught_up_slave():
    log = FakeLog(2500)
    s = session(log)
    assert s.on_data(report(2500), 101.0) == Ack(2500, True)
    assert s.state == SessionState.STREAMING and s.lag() == 0
    assert s.next_frames(101.0, 10_000) == [] and log.reads == []
    with pytest.raises(ProtocolError, match="reported offset 2501 beyond the master's max offset 2500"):
        s.on_data(report(2501), 102.0)


def test_a_negative_report_is_a_protocol_error_and_zero_is_not():
    with pytest.raises(ProtocolError, match="negative offset -1"):
        session(FakeLog(10)).on_data(report(-1), 1.0)
    assert session(FakeLog(10)).on_data(report(0), 1.0) == Ack(0, True)


def test_an_empty_slave_starts_at_the_last_file():
    log = FakeLog(2500, file_size=1000)
    s = session(log)
    s.on_data(report(0), 101.0)
    assert (s.state, s.slave_request_offset, s.next_transfer_from) == (SessionState.STREAMING, 0, 2000)
    log2 = FakeLog(999, file_size=1000)
    s2 = session(log2)
    s2.on_data(report(0), 101.0)
    assert s2.next_transfer_from == 0


def test_an_empty_slave_is_not_refused_when_the_masters_old_files_are_gone():
    log = FakeLog(2500, file_size=1000, min_offset=1000)
    s = session(log)
    s.on_data(report(0), 101.0)
    assert (s.state, s.next_transfer_from, s.problem) == (SessionState.STREAMING, 2000, "")


def test_a_slave_asking_for_exactly_the_masters_min_offset_streams_and_one_below_is_unavailable():
    log = FakeLog(2500, file_size=1000, min_offset=1000)
    s = session(log)
    s.on_data(report(1000), 101.0)
    assert (s.state, s.next_transfer_from, s.problem) == (SessionState.STREAMING, 1000, "")
    assert s.next_frames(101.0, 300)[0] == header(1000, 300)
    gone = session(log)
    gone.on_data(report(999), 101.0)
    assert gone.state == SessionState.OFFSET_UNAVAILABLE and gone.is_slave
    assert "asks for offset 999 but the master's commit log starts at 1000" in gone.problem
    assert gone.next_frames(101.0, 10_000) == []
    # it still gets heartbeats (and is told loudly), at the offset it asked for
    assert gone.heartbeat(106.0) == header(999, 0)


def test_frames_are_cut_at_the_batch_size_and_the_file_boundary():
    log = FakeLog(2500, file_size=1000)
    s = session(log, batch=300)
    s.on_data(report(100), 101.0)
    out = s.next_frames(102.0, 10_000)
    assert log.reads == [(100, 10_000)]
    sizes = [300, 300, 300]
    assert out[0::2] == [header(100 + 300 * i, n) for i, n in enumerate(sizes)]
    assert [bytes(b) for b in out[1::2]] == [log.data[100 + 300 * i : 100 + 300 * i + n] for i, n in enumerate(sizes)]
    assert (s.next_transfer_from, s.bytes_sent, s.last_write) == (1000, 900 + 3 * 12, 102.0)
    out = s.next_frames(103.0, 10_000)  # the next file, to the end of the log
    assert out[0::2] == [header(1000, 300), header(1300, 300), header(1600, 300), header(1900, 100)]
    assert s.next_transfer_from == 2000 and s.bytes_sent == 936 + 1000 + 4 * 12


def test_a_read_is_at_least_one_batch_and_at_most_what_was_asked():
    log = FakeLog(2500, file_size=10_000)
    s = session(log, batch=300)
    s.on_data(report(0), 101.0)
    assert [len(b) for b in s.next_frames(102.0, 700)[1::2]] == [300, 300, 100]
    assert [len(b) for b in s.next_frames(102.0, 10)[1::2]] == [300]  # never less than a batch
    assert log.reads == [(0, 700), (700, 300)]
    assert s.next_frame(103.0) == (header(1000, 300), log.data[1000:1300])


def test_a_read_that_finds_nothing_sends_nothing():
    log = FakeLog(600)
    s = session(log, batch=300)
    s.on_data(report(0), 101.0)
    log.read = lambda offset, max_bytes: b""  # e.g. a file the log no longer has
    assert s.next_frames(102.0, 1000) == [] and s.next_frame(102.0) is None
    assert (s.next_transfer_from, s.bytes_sent, s.last_write) == (0, 0, 100.0)


def test_next_frame_is_none_when_caught_up():
    log = FakeLog(600)
    s = session(log, batch=300)
    s.on_data(report(300), 101.0)
    header_, body = s.next_frame(101.0)
    assert header_ == header(300, 300) and bytes(body) == log.data[300:]
    assert s.next_frame(101.0) is None


def test_heartbeats_count_over_several_intervals_each_at_its_deadline():
    log = FakeLog(0)
    s = session(log, now=10.0, heartbeat=5.0)
    assert s.heartbeat(20.0) is None  # no report yet: the writer has not started
    s.on_data(report(0), 10.5)  # an empty slave of an empty master: start at 0
    sent = []
    t = 10.0
    while t < 40.0 - 1e-9:  # a ticker every 100 ms for 30 s
        t = round(t + 0.1, 1)
        hb = s.heartbeat(t)
        if hb is not None:
            sent.append((t, hb))
    assert [when for when, _ in sent] == [15.0, 20.0, 25.0, 30.0, 35.0, 40.0]
    assert all(hb == header(0, 0) for _, hb in sent)


def test_data_moves_the_heartbeat_deadline():
    log = FakeLog(600)
    s = session(log, now=0.0, heartbeat=5.0)
    s.on_data(report(600), 0.0)
    assert s.heartbeat(4.999) is None
    assert s.heartbeat(5.0) == header(600, 0)
    log.data += b"x" * 10
    assert s.next_frames(7.0, 100) == [header(600, 10), b"x" * 10]
    assert s.heartbeat(11.999) is None  # 5 s after the data, not after the heartbeat
    assert s.heartbeat(12.0) == header(610, 0)


def test_housekeeping_deadline_is_exact_and_restarts_on_each_read():
    s = session(FakeLog(100), now=50.0, housekeeping=20.0)
    assert not s.expired(70.0)
    assert s.expired(70.001)
    s.on_data(b"\x00", 65.0)  # any bytes count as a read, even a partial report
    assert not s.expired(85.0) and s.expired(85.5)


def test_file_frames_are_cut_like_frames_and_name_positions_in_the_file():
    log = FakeLog(2500, file_size=1000)
    s = session(log, batch=300)
    assert s.next_file_frames(101.0, 10_000) is None  # no report yet
    s.on_data(report(1100), 101.0)
    f, frames = s.next_file_frames(102.0, 10_000)
    assert log.reads == [(1100, 10_000)]
    assert f == "file@1000" and frames == [
        (header(1100, 300), 100, 300),
        (header(1400, 300), 400, 300),
        (header(1700, 300), 700, 300),
    ]
    assert (s.next_transfer_from, s.bytes_sent, s.last_write, s.incarnation.sent_max) == (2000, 900 + 36, 102.0, 2500)
    f, frames = s.next_file_frames(103.0, 10)  # at least one batch, however little was asked
    assert (f, frames) == ("file@2000", [(header(2000, 300), 0, 300)]) and log.reads[-1] == (2000, 300)
    f, frames = s.next_file_frames(104.0, 10_000)
    assert frames == [(header(2300, 200), 300, 200)] and s.next_transfer_from == 2500
    assert s.next_file_frames(105.0, 10_000) is None and len(log.reads) == 3  # caught up: nothing read


def test_sent_max_is_the_highest_offset_any_session_sent():
    from rmqha.broker.ha.master_session import Incarnation

    log = FakeLog(2500, file_size=10_000)
    inc = Incarnation(1000)
    assert inc.sent_max == 1000
    a = MasterSession(log, "a", batch_size=300, heartbeat_s=5.0, housekeeping_s=20.0, now=0.0, incarnation=inc)
    b = MasterSession(log, "b", batch_size=300, heartbeat_s=5.0, housekeeping_s=20.0, now=0.0, incarnation=inc)
    a.on_data(report(1000), 1.0)
    b.on_data(report(500), 1.0)
    a.next_frames(2.0, 600)
    assert inc.sent_max == 1600
    b.next_frames(2.0, 600)  # b sends below it: the max stays
    assert inc.sent_max == 1600 and b.next_transfer_from == 1100


def test_a_region_that_is_not_there_sends_nothing():
    log = FakeLog(600)
    s = session(log, batch=300)
    s.on_data(report(0), 101.0)
    log.region = lambda offset, max_bytes: None
    assert s.next_file_frames(102.0, 1000) is None
    assert (s.next_transfer_from, s.bytes_sent, s.last_write) == (0, 0, 100.0)


def test_slave_ahead_records_both_offsets_and_keeps_the_slaves_latest():
    from rmqha.broker.ha.master_session import Incarnation

    log = FakeLog(1200)
    s = MasterSession(
        log, "p", batch_size=300, heartbeat_s=5.0, housekeeping_s=20.0, now=0.0, incarnation=Incarnation(1000)
    )
    assert s.ahead_master_offset == -1
    assert s.on_data(report(1500), 1.0) is None
    assert (s.state, s.ahead_master_offset, s.slave_request_offset, s.slave_ack_offset) == (
        SessionState.SLAVE_AHEAD,
        1200,
        1500,
        1500,
    )
    assert s.on_data(report(1600), 2.0) is None  # later reports: shown, never acks
    assert (s.slave_request_offset, s.slave_ack_offset, s.ahead_master_offset) == (1500, 1600, 1200)


def test_a_slave_that_comes_back_with_exactly_what_was_sent_is_not_ahead():
    from rmqha.broker.ha.master_session import Incarnation

    log = FakeLog(2000, file_size=10_000)
    inc = Incarnation(1000)
    first = MasterSession(log, "a", batch_size=300, heartbeat_s=5.0, housekeeping_s=20.0, now=0.0, incarnation=inc)
    first.on_data(report(1000), 1.0)
    first.next_frames(2.0, 500)
    assert inc.sent_max == 1500
    again = MasterSession(log, "a", batch_size=300, heartbeat_s=5.0, housekeeping_s=20.0, now=3.0, incarnation=inc)
    assert again.on_data(report(1500), 3.0) == Ack(1500, True)  # everything it holds came from this master
    assert again.state == SessionState.STREAMING
    third = MasterSession(log, "a", batch_size=300, heartbeat_s=5.0, housekeeping_s=20.0, now=3.0, incarnation=inc)
    assert third.on_data(report(1501), 3.0) is None and third.state == SessionState.SLAVE_AHEAD


def test_the_last_file_frame_is_the_remainder():
    log = FakeLog(2500, file_size=10_000)
    s = session(log, batch=300)
    s.on_data(report(0), 101.0)
    f, frames = s.next_file_frames(102.0, 700)
    assert frames == [(header(0, 300), 0, 300), (header(300, 300), 300, 300), (header(600, 100), 600, 100)]
    assert s.next_transfer_from == 700 and s.bytes_sent == 700 + 36


@pytest.mark.parametrize("file_frames", [False, True])
def test_a_file_deleted_under_a_streaming_slave_makes_the_session_unavailable_not_silent(file_frames):
    # Retention (rmqha/broker/store/retention.py) deleted the master's first files while this slave was
    # still behind them: nothing can be sent from where it is; say so as at connect time (4.9 just stalls).
    log = FakeLog(2500)
    s = session(log)
    s.on_data(report(300), 101.0)
    log.min_offset = 1000
    sent = s.next_file_frames(102.0, 10_000) if file_frames else s.next_frames(102.0, 10_000)
    assert not sent
    assert s.state == SessionState.OFFSET_UNAVAILABLE
    assert "starts at 1000" in s.problem and "rebuild the slave" in s.problem
