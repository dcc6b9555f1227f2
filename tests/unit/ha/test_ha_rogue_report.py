"""A report cannot switch replication off (issue 23, deliverable 6).

One forged 8-byte first report past the master used to put its connection into SLAVE_AHEAD and write
store/haFence.json, after which the real slave was refused for good, across restarts; and "proven" meant
"acknowledged bytes streamed to it", which any host speaking the wire achieves in a second. Now only a
host proven in an EARLIER life, reporting within what this master ever streamed, and not served this
life's log, can be SLAVE_AHEAD, set or clear the fence (rmqha/broker/ha/peers.py); anybody else's such report
closes that connection and writes nothing."""

import json
import random
import struct

from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport

from rmqha.broker.ha.master_session import SessionState
from rmqha.broker.ha.peers import ProvenPeers, load_peers

from .harness import Cluster, put


def rogue(c, host: str, data: bytes):
    """A connection from `host` that sends `data` and nothing else; returns its protocol."""
    proto = c.ha.buildProtocol(None)
    proto.makeConnection(StringTransport(peerAddress=IPv4Address("TCP", host, 40000)))
    proto.dataReceived(data)
    if proto.session.state == SessionState.CLOSED:  # StringTransport: abortConnection does not call back
        proto.connectionLost(None)
    return proto


def sync_outcome(c):
    res = put(c.master, 1, start=900)[0]
    out = []
    c.ha.wait_for_slave(res.next_offset).addCallback(out.append)
    c.advance(1.0)
    return out


def test_a_forged_report_from_a_stranger_writes_nothing_and_the_real_slave_replicates(tmp_path):
    c = Cluster(tmp_path, sync_wait_ms=1000)
    put(c.master, 5)
    p = rogue(c, "10.6.6.6", struct.pack(">q", 1 << 40))
    assert p.session.state == SessionState.CLOSED and c.ha.protocol_errors.get() == 1
    assert c.ha.incarnation.fence is None and c.ha.push2slave_max_offset == 0
    assert not (tmp_path / "master" / "haFence.json").exists()
    assert not (tmp_path / "master" / "haPeers.json").exists()
    c.connect()
    c.advance(1.0)
    assert c.master_conn().session.state == SessionState.STREAMING and c.identical()
    assert sync_outcome(c) == ["PUT_OK"]
    # the real slave is now a proven replica, on disk for the master's next life
    assert "?" in json.loads((tmp_path / "master" / "haPeers.json").read_text())["peers"]
    c.close()


def test_a_thousand_random_first_reports_never_fence_the_real_slave(tmp_path):
    c = Cluster(tmp_path, sync_wait_ms=1000)
    put(c.master, 5)
    rnd = random.Random(23)
    closed = past = 0
    for i in range(1000):
        data = rnd.randbytes(8)
        past += struct.unpack(">q", data)[0] > c.master.max_offset  # what used to fence
        p = rogue(c, f"10.9.{i // 250}.{i % 250}", data)
        closed += p.session.state == SessionState.CLOSED
    # about half of random longs are past the log (the rest negative): every one closed, none fenced
    assert 400 < past < 600 and closed == 1000, (past, closed)
    assert c.ha.incarnation.fence is None and not (tmp_path / "master" / "haFence.json").exists()
    assert c.ha.peers.peers == {} and c.ha.slaves_ahead() == []
    c.connect()
    c.advance(1.0)
    assert c.master_conn().session.state == SessionState.STREAMING and sync_outcome(c) == ["PUT_OK"]
    c.close()


def _no_fence_and_the_real_slave_replicates(c, tmp_path, real):
    """The forged session closed; nothing on disk; the real slave, reconnecting, is served as before."""
    assert c.ha.incarnation.fence is None and c.ha.slaves_ahead() == []
    assert not (tmp_path / "master" / "haFence.json").exists()
    assert real.session.state == SessionState.STREAMING
    real.transport.loseConnection()
    c.flush()
    c.connect()
    c.advance(1.0)
    assert [p.session.state for p in c.ha.connections] == [SessionState.STREAMING]
    assert sync_outcome(c) == ["PUT_OK"] and c.slave.max_offset == c.master.max_offset and c.identical()


def test_a_stranger_that_first_acts_as_a_slave_still_cannot_fence(tmp_path):
    # It reports 0, takes the stream and acks it (it is now "proven", for the master's next life), then
    # forges a report past the log on a second connection: refused, as any stranger's.
    c = Cluster(tmp_path, sync_wait_ms=1000)
    put(c.master, 5)
    c.connect()
    c.advance(1.0)
    real = c.master_conn()
    stranger = rogue(c, "10.6.6.6", struct.pack(">q", 0))
    c.advance(1.0)
    assert stranger.transport.value()  # it was streamed the log, like a slave
    stranger.dataReceived(struct.pack(">q", c.master.max_offset))
    assert c.ha.peers.is_proven("10.6.6.6")
    forged = rogue(c, "10.6.6.6", struct.pack(">q", c.master.max_offset + (1 << 30)))
    assert forged.session.state == SessionState.CLOSED and c.ha.protocol_errors.get() == 1
    stranger.transport.loseConnection()
    stranger.connectionLost(None)
    _no_fence_and_the_real_slave_replicates(c, tmp_path, real)
    c.close()


def test_a_forged_report_from_the_real_slaves_own_host_cannot_fence(tmp_path, caplog):
    # On one machine every node is 127.0.0.1, through Toxiproxy every slave is the proxy: the forger
    # shares the proven slave's address. Its host was served this life's log, so it cannot claim a
    # history this life lost, and the proof gathered in this life counts only in the next.
    c = Cluster(tmp_path, sync_wait_ms=1000)
    put(c.master, 5)
    c.connect()
    put(c.master, 2, start=100)
    c.advance(1.0)
    real = c.master_conn()
    assert c.ha.peers.is_proven(real.session.host)
    q = rogue(c, real.session.host, struct.pack(">q", c.master.max_offset + 4096))
    assert q.session.state == SessionState.CLOSED and c.ha.protocol_errors.get() == 1
    assert "was served this life's log" in caplog.text
    _no_fence_and_the_real_slave_replicates(c, tmp_path, real)
    c.close()


def _forked(tmp_path):
    """Life 1 streams to the slave and records it proven; the master then loses its tail (the slave
    holds 3 records more than the master: as if a power loss took them). Life 2 starts from that."""
    c = Cluster(tmp_path, sync_wait_ms=1000)
    put(c.master, 5)
    c.connect()
    c.advance(1.0)
    assert c.identical()
    record = json.loads((tmp_path / "master" / "haPeers.json").read_text())
    assert record["peers"].keys() == {"?"}
    assert record.get("streamLimit", 1 << 62) >= c.master.max_offset  # (before streamLimit: none written)
    c.close()
    c2 = Cluster(tmp_path, heartbeat_ms=1000, housekeeping_ms=4000, sync_wait_ms=1000)
    put(c2.slave, 3, start=50)  # the slave's tail the master no longer has
    return c2


def test_a_slave_forked_by_a_power_loss_is_still_fenced_and_handled_as_before(tmp_path):
    c = _forked(tmp_path)
    m_end, s_end = c.master.max_offset, c.slave.max_offset
    c.connect()
    c.advance(1.5)
    assert c.master_conn().session.state == SessionState.SLAVE_AHEAD
    assert c.client.status()["state"] == "MASTER_BEHIND"
    assert json.loads((tmp_path / "master" / "haFence.json").read_text()) == {"from": m_end, "to": s_end}
    assert sync_outcome(c) == ["SLAVE_NOT_AVAILABLE"]
    c.close()


def test_a_stranger_cannot_clear_a_fence(tmp_path):
    c = _forked(tmp_path)
    c.connect()
    c.advance(1.5)
    fence = c.ha.incarnation.fence
    assert fence is not None
    # a stranger reporting at the fork point: it would unfence the forked slave's next reconnect
    p = rogue(c, "10.6.6.6", struct.pack(">q", fence[0]))
    assert p.session.state == SessionState.STREAMING and c.ha.incarnation.fence == fence
    # from the forked slave's own address, while that slave is still there (SLAVE_AHEAD): the same
    q = rogue(c, "?", struct.pack(">q", 0))
    assert q.session.state == SessionState.STREAMING and c.ha.incarnation.fence == fence
    assert (tmp_path / "master" / "haFence.json").exists()
    # the forked slave goes (to be truncated by an operator) and comes back at the fork: the fence is done
    for conn in list(c.ha.connections):
        conn.transport.loseConnection()
        conn.connectionLost(None)
    assert c.ha.incarnation.ahead_live == {}
    rogue(c, "?", struct.pack(">q", fence[0]))
    assert c.ha.incarnation.fence is None and not (tmp_path / "master" / "haFence.json").exists()
    c.close()


def test_random_first_reports_from_the_slaves_own_address_after_a_restart_never_fence(tmp_path):
    # The forged report comes first in the new life, from the proven address, before the real slave is
    # back: it must also be at or below the streamLimit, which a random or guessed long never is.
    c = _forked(tmp_path)
    rnd = random.Random(6)
    past = 0
    for _ in range(300):
        data = rnd.randbytes(8)
        past += struct.unpack(">q", data)[0] > c.master.max_offset
        assert rogue(c, "?", data).session.state == SessionState.CLOSED
    assert past > 100 and c.ha.incarnation.fence is None and c.ha.incarnation.served == set()
    assert not (tmp_path / "master" / "haFence.json").exists()
    c.connect()  # the real, forked slave: still found SLAVE_AHEAD
    c.advance(1.5)
    assert c.master_conn().session.state == SessionState.SLAVE_AHEAD
    c.close()


def test_a_peers_file_without_stream_limit_vouches_for_no_history(tmp_path):
    (tmp_path / "master").mkdir()
    (tmp_path / "master" / "haPeers.json").write_text('{"peers": {"?": {"ack": 1, "provenAtMs": 0}}}')
    c = Cluster(tmp_path)
    put(c.master, 5)
    p = rogue(c, "?", struct.pack(">q", c.master.max_offset + 100))
    assert p.session.state == SessionState.CLOSED and c.ha.incarnation.fence is None
    c.close()


def test_the_stream_limit_is_written_before_the_bytes_go_out():
    from rmqha.broker.ha.master_session import Incarnation, MasterSession

    from .test_master_session import FakeLog

    saved = []
    peers = ProvenPeers(on_proven=lambda p: saved.append(p.stream_limit))
    log = FakeLog(1000)
    s = MasterSession(
        log,
        "10.0.0.2:1",
        batch_size=300,
        heartbeat_s=5.0,
        housekeeping_s=20.0,
        now=0.0,
        incarnation=Incarnation(1000, peers=peers),
    )
    s.on_data(struct.pack(">q", 100), 1.0)
    assert s.next_frames(1.0, 10_000) and saved and saved[-1] >= s.next_transfer_from
    n = len(saved)
    log.data = bytes(5000)
    while s.next_frames(2.0, 10_000):
        pass
    assert len(saved) == n  # one write per LEASE_BYTES, not per frame
    assert peers.stream_limit >= 5000


def test_an_unreadable_peers_file_is_logged_and_empty(tmp_path, caplog):
    path = tmp_path / "haPeers.json"
    for bad in ("{", "[]", '{"peers": 3}', '{"peers": {"h": {"ack": "x"}}}'):
        path.write_text(bad)
        assert load_peers(str(path)) == {}, bad
    assert "unreadable" in caplog.text
    assert load_peers(str(tmp_path / "missing.json")) == {}
    (tmp_path / "master").mkdir()
    (tmp_path / "master" / "haPeers.json").write_text("{")
    c = Cluster(tmp_path)  # starts all the same, knowing no peer
    assert c.ha.peers.peers == {}
    c.close()


def test_proof_is_recorded_once_and_bounded():
    saved = []
    peers = ProvenPeers(on_proven=saved.append)
    assert peers.prove("10.0.0.2", 100, 1) and not peers.prove("10.0.0.2", 200, 2)
    assert len(saved) == 1 and peers.peers["10.0.0.2"]["ack"] == 200
    for i in range(100):
        peers.prove(f"10.1.0.{i}", 1, 10 + i)
    assert len(peers.peers) == 64 and "10.0.0.2" not in peers.peers  # the oldest proof went first


def test_ha_allowed_addresses_refuses_every_other_peer_before_it_can_send_a_byte(tmp_path):
    from twisted.internet.address import IPv4Address
    from twisted.internet.testing import MemoryReactorClock

    from rmqha.broker.ha.master import HAService
    from rmqha.broker.ha.recovery import RecoverySourceService

    from .harness import make_store

    store = make_store(tmp_path / "m")
    ha = HAService(store, clock=MemoryReactorClock(), allowed=frozenset({"10.0.0.2"}))
    assert ha.buildProtocol(IPv4Address("TCP", "10.0.0.9", 5)) is None
    assert ha.buildProtocol(IPv4Address("TCP", "10.0.0.2", 5)) is not None
    assert ha.refused_peers.get() == 1
    src = RecoverySourceService(store, MemoryReactorClock(), allowed=frozenset({"10.0.0.1"}))
    assert src.buildProtocol(IPv4Address("TCP", "10.0.0.9", 5)) is None and src.refused == 1
    assert src.buildProtocol(IPv4Address("TCP", "10.0.0.1", 5)) is not None
