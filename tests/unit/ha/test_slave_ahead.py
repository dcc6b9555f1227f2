"""A master that comes back behind its slave (issue 9, deliverable 5), on the IO-free sessions and on
both roles wired through in-memory transports on one fake clock.

After a power loss the master restarts holding less than its slave. The reference closes the
connection on every report and the slave loops; once the master has written past the slave's offset
it streams from there, into the middle of the slave's own tail. Here: the master calls that slave
SLAVE_AHEAD (not replicated to, not counted for sync acks), the slave MASTER_BEHIND (keeps its data,
stays connected), both with both offsets, until an operator decides."""

import struct

from rmqha.broker.ha.master_session import Incarnation, MasterSession, SessionState

from .harness import Cluster, put, remember_replica
from .test_master_session import FakeLog


def report(offset):
    return struct.pack(">q", offset)


def header(offset, size):
    return struct.pack(">qi", offset, size)


def session(log, inc, now=100.0):
    return MasterSession(
        log, "10.0.0.2:40000", batch_size=300, heartbeat_s=5.0, housekeeping_s=20.0, now=now, incarnation=inc
    )


def test_a_first_report_past_the_masters_start_that_it_never_sent_is_slave_ahead():
    log = FakeLog(1000)
    inc = Incarnation(1000)
    s = session(log, inc)
    assert s.on_data(report(1500), 101.0) is None  # no Ack: never raises push2SlaveMaxOffset
    assert (s.state, s.is_slave, s.slave_request_offset, s.slave_ack_offset) == (
        SessionState.SLAVE_AHEAD,
        False,
        1500,
        1500,
    )
    assert "holds the commit log up to 1500" in s.problem and "parts from it at 1000" in s.problem
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
    # as if the master had just restarted like this, knowing its slave from its earlier life (it streamed
    # to it then: haPeers.json; the in-memory connections' host is "?")
    remember_replica(tmp_path)
    c = Cluster(tmp_path, heartbeat_ms=1000, housekeeping_ms=4000, sync_wait_ms=1000)
    put(c.master, 5)
    put(c.slave, 8)
    c.ha.incarnation = Incarnation(c.master.max_offset, on_fence=c.ha._save_fence, peers=c.ha.peers)
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


# -- the fork remembered across a restart (found by the chaos matrix: a master that lost its tail came
# back, wrote past its slave's offset and was killed; in its next life it started above the slave's
# offset and streamed into the middle of the slave's lost history) ------------------------------------


def test_the_fence_keeps_a_slave_past_the_fork_ahead_until_one_reports_at_or_below_it():
    saved = []
    inc = Incarnation(5000, fence=(1000, 1500), on_fence=saved.append)
    assert inc.ahead(1001) and inc.ahead(1500) and inc.ahead(4000)  # all below this life's start
    assert not inc.ahead(1000) and inc.fork_from == 1000
    inc.remember_fork(1700)  # the same fork seen further on: widened, persisted
    assert inc.fence == (1000, 1700) and saved == [(1000, 1700)]
    inc.remember_fork(1200)  # nothing new: not written again
    assert saved == [(1000, 1700)]
    inc.saw_report(1001, "10.0.0.2")
    assert inc.fence == (1000, 1700)
    inc.saw_report(1000, "10.0.0.2")  # a slave truncated to the fork point: the fork is gone
    assert inc.fence is None and saved[-1] is None and inc.fork_from == 5000
    assert not inc.ahead(4000) and inc.ahead(5001)


def test_a_first_slave_ahead_remembers_the_fork_from_this_lifes_start():
    saved = []
    inc = Incarnation(1000, on_fence=saved.append)
    s = session(FakeLog(1000), inc)
    s.on_data(report(1500), 101.0)
    assert s.state == SessionState.SLAVE_AHEAD and saved == [(1000, 1500)]
    assert s.heartbeat(200.0) == header(1000, 0)  # the slave is told where the histories part


def test_fence_file_round_trip_and_bad_contents(tmp_path):
    from rmqha.broker.ha.master import load_fence, save_fence

    p = str(tmp_path / "haFence.json")
    assert load_fence(p) is None
    save_fence(p, (10, 20))
    assert load_fence(p) == (10, 20)
    save_fence(p, None)
    assert load_fence(p) is None and not (tmp_path / "haFence.json").exists()
    save_fence(p, None)  # removing what is not there is fine
    for bad in ("{", '{"from": 1}', '{"from": 30, "to": 20}', '{"from": -1, "to": 2}', "[1, 2]"):
        (tmp_path / "haFence.json").write_text(bad)
        assert load_fence(p) is None, bad


def _second_life(tmp_path, keep_fence=True):
    c = _ahead_cluster(tmp_path)
    m_end, s_end = c.master.max_offset, c.slave.max_offset
    c.connect()
    c.advance(1.5)
    assert c.master_conn().session.state == SessionState.SLAVE_AHEAD
    fence = tmp_path / "master" / "haFence.json"
    assert fence.exists() and c.ha.status()["forkFence"] == [m_end, s_end]
    put(c.master, 10, start=200)  # the master writes past the slave's offset, then dies
    assert c.master.max_offset > s_end
    c.close()
    if not keep_fence:
        fence.unlink()
    before = {p.name: p.read_bytes() for p in (tmp_path / "slave" / "commitlog").glob("*")}
    c2 = Cluster(tmp_path, heartbeat_ms=1000, housekeeping_ms=4000, sync_wait_ms=1000)  # the next life
    assert c2.ha.incarnation.start_offset > s_end
    c2.connect()
    c2.advance(3.0)
    return c2, before, (m_end, s_end)


def test_in_its_next_life_the_master_still_does_not_stream_into_the_lost_history(tmp_path):
    c, before, (m_end, s_end) = _second_life(tmp_path)
    assert c.master_conn().session.state == SessionState.SLAVE_AHEAD
    assert c.ha.status()["forkFence"] == [m_end, s_end] and c.ha.push2slave_max_offset == 0
    assert c.slave.max_offset == s_end and c.client.status()["state"] == "MASTER_BEHIND"
    assert {p.name: p.read_bytes() for p in (tmp_path / "slave" / "commitlog").glob("*")} == before
    c.close()


def test_without_the_fence_the_next_life_streams_into_the_slaves_tail(tmp_path):
    # what the fence prevents: the slave appends the master's new bytes after its own lost history
    c, before, (m_end, s_end) = _second_life(tmp_path, keep_fence=False)
    assert c.master_conn().session.state == SessionState.STREAMING
    assert c.slave.max_offset == c.master.max_offset > s_end and not c.identical()
    c.close()


def test_the_fence_and_its_removal_survive_a_power_cut(tmp_path, monkeypatch):
    # A rename or an unlink is durable only once its directory is fsynced. The matrix of 2026-11-29 found a
    # master whose power cut undid the fence's rename (haFence.json.tmp left, haFence.json gone): its next
    # life had no fence and streamed into the forked slave, mixing two histories.
    from rmqha.broker.ha import master
    from rmqha.broker.ha.master import save_fence
    from rmqha.broker.store import mapped_file
    from tests.unit.store.test_honest_power_cut import spy_dir_listings

    synced = spy_dir_listings(monkeypatch, mapped_file, master)
    p = str(tmp_path / "haFence.json")
    save_fence(p, (10, 20))
    assert synced and synced[-1] == (str(tmp_path), {"haFence.json"}), "the directory fsynced after the rename"
    synced.clear()
    save_fence(p, None)
    assert synced == [(str(tmp_path), set())], "the directory fsynced after the unlink"
    synced.clear()
    save_fence(p, None)
    assert synced == [], "nothing removed, nothing to sync"
