"""A master that comes back behind its slave (issue 9, deliverable 5), on the IO-free sessions and on
both roles wired through in-memory transports on one fake clock.

After a power loss the master restarts holding less than its slave. The reference closes the
connection on every report and the slave loops; once the master has written past the slave's offset
it streams from there, into the middle of the slave's own tail. Here: the master calls that slave
SLAVE_AHEAD (not replicated to, not counted for sync acks), the slave MASTER_BEHIND (keeps its data,
stays connected), both with both offsets, until an operator decides."""
import struct

from broker.ha.master_session import Incarnation, MasterSession, SessionState

from .harness import Cluster, put
from .test_master_session import FakeLog


def report(offset):
    return struct.pack(">q", offset)


def header(offset, size):
    return struct.pack(">qi", offset, size)


def session(log, inc, now=100.0):
    return MasterSession(log, "10.0.0.2:40000", batch_size=300, heartbeat_s=5.0, housekeeping_s=20.0,
                         now=now, incarnation=inc)


def test_a_first_report_past_the_masters_start_that_it_never_sent_is_slave_ahead():
    log = FakeLog(1000)
    inc = Incarnation(1000)
    s = session(log, inc)
    assert s.on_data(report(1500), 101.0) is None  # no Ack: never raises push2SlaveMaxOffset
    assert (s.state, s.is_slave, s.slave_request_offset, s.slave_ack_offset) == (
        SessionState.SLAVE_AHEAD, False, 1500, 1500)
    assert "holds the commit log up to 1500" in s.problem and "started at 1000" in s.problem
    assert s.next_frames(101.0, 10_000) == [] and log.reads == []
    # announced at once, then every heartbeat interval, with the master's start offset (below the slave's)
    assert s.heartbeat(101.0) == header(1000, 0)
    assert s.heartbeat(105.9) is None and s.heartbeat(106.0) == header(1000, 0)
    assert s.on_data(report(1500), 107.0) is None and s.last_read == 107.0  # keeps the link alive


def test_slave_ahead_is_sticky_after_the_master_writes_past_the_slaves_offset():
    log = FakeLog(1000)
    inc = Incarnation(1000)
    session(log, inc).on_data(report(1500), 101.0)
    log.data = bytes(3000)  # the master took new sends at [1000, 3000): other bytes than the slave's
    again = session(log, inc, now=200.0)  # the slave reconnects, still at 1500 <= 3000
    assert again.on_data(report(1500), 201.0) is None and again.state == SessionState.SLAVE_AHEAD


def test_a_slave_that_got_its_bytes_from_this_master_is_not_ahead():
    log = FakeLog(1000)
    inc = Incarnation(1000)
    s = session(log, inc)
    assert s.on_data(report(1000), 101.0) is not None
    log.data = bytes(range(256)) * 10  # 2560
    while s.next_frames(102.0, 10_000):
        pass
    assert inc.sent_max == 2560
    again = session(log, inc, now=200.0)  # reconnects from 2000: it got those bytes from us
    assert again.on_data(report(2000), 201.0).offset == 2000 and again.state == SessionState.STREAMING
    behind = session(log, inc, now=200.0)  # a slave below the start offset is an ordinary lagging one
    assert behind.on_data(report(400), 201.0).first and behind.state == SessionState.STREAMING


def test_without_an_incarnation_a_session_takes_the_log_end_at_connect():
    s = MasterSession(FakeLog(2500), "p", batch_size=300, heartbeat_s=5.0, housekeeping_s=20.0, now=1.0)
    assert s.incarnation == Incarnation(2500, 2500)
    assert s.on_data(report(2501), 2.0) is None and s.state == SessionState.SLAVE_AHEAD


def _ahead_cluster(tmp_path):
    """Both stores hold the same 5 records' offsets; the slave 3 more the master lost."""
    c = Cluster(tmp_path, heartbeat_ms=1000, housekeeping_ms=4000, sync_wait_ms=1000)
    put(c.master, 5)
    put(c.slave, 8)
    c.ha.incarnation = Incarnation(c.master.max_offset)  # as if the master had just restarted like this
    return c


def test_both_sides_show_the_state_with_both_offsets_and_stay_connected(tmp_path, caplog):
    c = _ahead_cluster(tmp_path)
    m_end, s_end = c.master.max_offset, c.slave.max_offset
    s_bytes = (tmp_path / "slave" / "commitlog").glob("*")
    before = {p.name: p.read_bytes() for p in s_bytes}
    c.connect()
    c.advance(1.5)
    st = c.ha.status()
    assert st["connectionCount"] == 0 and st["slavesAhead"] == 1 and st["masterStartOffset"] == m_end
    [sl] = st["slaves"]
    assert (sl["state"], sl["slaveAckOffset"]) == ("SLAVE_AHEAD", s_end) and sl["problem"].startswith("SLAVE_AHEAD")
    cs = c.client.status()
    assert cs["state"] == "MASTER_BEHIND" and cs["masterBehind"] == {"slave": s_end, "master": m_end}
    assert f"SLAVE: {s_end} MASTER: {m_end}" in caplog.text
    assert "ha_slave_ahead{slave=" in c.ha.metrics.render()
    assert "ha_slave_master_behind 1" in c.client.metrics.render()
    # a sync send on the master: SLAVE_NOT_AVAILABLE, not a false PUT_OK
    outcomes = []
    res = put(c.master, 1, start=100)[0]
    c.ha.wait_for_slave(res.next_offset).addCallback(outcomes.append)
    assert outcomes == ["SLAVE_NOT_AVAILABLE"]
    # the master writes past the slave's offset; over 3 housekeeping intervals nothing is streamed,
    # nothing reconnects, nothing on the slave is truncated or overwritten
    put(c.master, 10, start=200)
    assert c.master.max_offset > s_end
    c.advance(12.0)
    assert c.client.reconnects.get() == 1 and c.client.mismatches.get() == 0
    assert c.master_conn().session.state == SessionState.SLAVE_AHEAD and c.ha.push2slave_max_offset == 0
    assert c.slave.max_offset == s_end
    assert {p.name: p.read_bytes() for p in (tmp_path / "slave" / "commitlog").glob("*")} == before
    c.close()


def test_a_reconnect_after_the_master_wrote_past_the_slave_is_still_slave_ahead(tmp_path):
    c = _ahead_cluster(tmp_path)
    s_end = c.slave.max_offset
    put(c.master, 10, start=200)  # the master takes sends before its slave is back
    assert c.master.max_offset > s_end
    c.connect()
    c.advance(1.0)
    assert c.master_conn().session.state == SessionState.SLAVE_AHEAD
    assert c.slave.max_offset == s_end and c.client.status()["state"] == "MASTER_BEHIND"
    c.close()
