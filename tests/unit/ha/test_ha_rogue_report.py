"""A report cannot switch replication off (issue 23, deliverable 6).

One forged 8-byte first report past the master used to put its connection into SLAVE_AHEAD and write
store/haFence.json, after which the real slave was refused for good, across restarts. Now only a host
proven to be a replica (it acknowledged bytes this master streamed to it; broker/ha/peers.py) can be
SLAVE_AHEAD or set the fence; anybody else's such report closes that connection and writes nothing."""
import json
import random
import struct

from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport

from broker.ha.master_session import SessionState
from broker.ha.peers import ProvenPeers, load_peers

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


def test_a_proven_slave_can_be_ahead_but_a_stranger_still_cannot_fence(tmp_path):
    c = Cluster(tmp_path, sync_wait_ms=1000)
    put(c.master, 5)
    c.connect()
    put(c.master, 2, start=100)
    c.advance(1.0)
    assert c.ha.peers.is_proven("?")  # acknowledged what was streamed to it
    p = rogue(c, "10.6.6.6", struct.pack(">q", c.master.max_offset + 4096))
    assert p.session.state == SessionState.CLOSED and c.ha.incarnation.fence is None
    # the proven host past the master: SLAVE_AHEAD, as after a power loss
    q = rogue(c, "?", struct.pack(">q", c.master.max_offset + 4096))
    assert q.session.state == SessionState.SLAVE_AHEAD and c.ha.incarnation.fence is not None
    c.close()


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

    from broker.ha.master import HAService
    from broker.ha.recovery import RecoverySourceService

    from .harness import make_store
    store = make_store(tmp_path / "m")
    ha = HAService(store, clock=MemoryReactorClock(), allowed=frozenset({"10.0.0.2"}))
    assert ha.buildProtocol(IPv4Address("TCP", "10.0.0.9", 5)) is None
    assert ha.buildProtocol(IPv4Address("TCP", "10.0.0.2", 5)) is not None
    assert ha.refused_peers.get() == 1
    src = RecoverySourceService(store, MemoryReactorClock(), allowed=frozenset({"10.0.0.1"}))
    assert src.buildProtocol(IPv4Address("TCP", "10.0.0.9", 5)) is None and src.refused == 1
    assert src.buildProtocol(IPv4Address("TCP", "10.0.0.1", 5)) is not None
