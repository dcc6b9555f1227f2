"""Master and slave roles end to end over in-memory transports, with a fake clock for all time."""

import pytest

from rmqha.broker.ha.master_session import Incarnation, SessionState
from rmqha.broker.ha.wire import encode_header, encode_report

from .harness import Cluster, put


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    yield c
    c.close()


def test_empty_slave_copies_the_log_byte_identically(cluster):
    put(cluster.master, 100)
    cluster.connect()
    conn = cluster.master_conn()
    assert conn.session.slave_request_offset == 0
    assert cluster.slave.max_offset == cluster.master.max_offset
    assert conn.session.slave_ack_offset == cluster.master.max_offset
    assert cluster.ha.push2slave_max_offset == cluster.master.max_offset
    assert cluster.identical()
    # New writes keep flowing, and the slave builds consume queues it can serve reads from.
    put(cluster.master, 50, start=100)
    cluster.flush()
    assert cluster.slave.max_offset == cluster.master.max_offset and cluster.identical()
    while cluster.slave.dispatch():
        pass
    for q in range(4):
        assert cluster.slave.max_queue_offset("T", q) == cluster.master.max_queue_offset("T", q)


def test_empty_slave_starts_at_the_masters_last_file(cluster, caplog):
    put(cluster.master, 300)  # several 64 KiB files
    last_start = cluster.master.commitlog.last_file_start()
    assert last_start > 0
    cluster.connect()
    assert cluster.slave.min_offset == last_start
    assert cluster.slave.max_offset == cluster.master.max_offset
    assert cluster.identical()
    assert "will NOT be on this slave" in caplog.text
    # The slave can serve what it has: its queues start where its log starts (filler units before).
    while cluster.slave.dispatch():
        pass
    first = cluster.slave.min_queue_offset("T", 0)
    assert 0 < first < cluster.slave.max_queue_offset("T", 0) == cluster.master.max_queue_offset("T", 0)
    got = cluster.slave.get_messages("T", 0, first, 32)
    assert got.status == "FOUND" and got.records


def test_batches_respect_size_and_file_boundaries(tmp_path):
    c = Cluster(tmp_path, batch_size=3000)
    put(c.master, 200)
    frames = []
    c.connect()
    s = c.master_conn().session
    # Drive the session directly to inspect what it would send.
    s.next_transfer_from = 0
    while True:
        f = s.next_frame(0)
        if f is None:
            break
        frames.append(f)
    import struct

    pos = 0
    for header, body in frames:
        off, size = struct.unpack(">qi", header)
        assert off == pos and size == len(body) <= 3000
        assert off // c.file_size == (off + size - 1) // c.file_size, "a batch crossed a file boundary"
        pos += size
    assert pos == c.master.max_offset
    c.close()


def test_reconnect_resumes_from_reported_offset_without_resending(cluster):
    put(cluster.master, 60)
    cluster.connect()
    assert cluster.identical()
    before = cluster.slave.max_offset
    # Cut the link, write more on the master while it is down.
    cluster.master_conn().transport.abortConnection()
    cluster.flush()
    assert cluster.ha.connection_count == 0 and cluster.client.proto is None
    put(cluster.master, 40, start=60)
    cluster.connect()
    conn = cluster.master_conn()
    assert conn.session.slave_request_offset == before
    # Only the new bytes crossed the link: nothing resent from 0.
    delta = cluster.master.max_offset - before
    assert delta <= conn.session.bytes_sent <= delta + 12 * 3  # the new bytes plus a few frame headers
    assert cluster.slave.max_offset == cluster.master.max_offset and cluster.identical()
    assert cluster.client.reconnects.get() == 2


def test_reconnect_is_fast(cluster):
    put(cluster.master, 5)
    cluster.connect()
    cluster.master_conn().transport.abortConnection()
    cluster.flush()
    # The client retries after 100 ms, not the reference's 5 s.
    cluster.reactor.advance(0.11)
    assert cluster.reactor.tcpClients, "no reconnect attempt within 110 ms"


def test_offset_mismatch_closes_then_resumes(cluster, caplog):
    """Seed 001 §12: the slave fails to store m1; m2's offset check fails; reconnect; resend from truth."""
    put(cluster.master, 10)
    cluster.connect()
    good = cluster.slave.max_offset
    # The slave silently loses the next append (a storage fault), as in the seed's case.
    real = cluster.slave.append_replicated
    dropped = []

    def lossy(offset, data):
        if not dropped:
            dropped.append(offset)
            return
        real(offset, data)

    cluster.slave.append_replicated = lossy
    put(cluster.master, 5, start=10)  # m1: lost by the slave
    cluster.flush()
    assert dropped and cluster.client.mismatches.get() == 0
    put(cluster.master, 5, start=15)  # m2: its offset no longer matches the slave's
    cluster.flush()
    assert cluster.client.mismatches.get() == 1
    slave_side, master_side = cluster.client.last_mismatch
    assert slave_side == good and master_side > good  # both offsets visible
    assert "SLAVE: %d MASTER:" % good in caplog.text
    cluster.slave.append_replicated = real
    cluster.connect()
    assert cluster.master_conn().session.slave_request_offset == good
    assert cluster.slave.max_offset == cluster.master.max_offset and cluster.identical()


def test_heartbeats_keep_an_idle_link_up(cluster):
    put(cluster.master, 3)
    cluster.connect()
    cluster.advance(200)  # ten housekeeping intervals of silence, apart from heartbeats
    assert cluster.ha.connection_count == 1 and cluster.client.proto is not None
    assert cluster.client.reconnects.get() == 1
    assert cluster.ha.housekeeping_closes.get() == 0 == cluster.client.housekeeping_closes.get()


def test_housekeeping_closes_a_silent_link_on_both_sides(cluster):
    put(cluster.master, 3)
    cluster.connect()
    # Black-hole both directions: bytes are written but never arrive.
    cluster.pump.clientIO.write = lambda data: None
    cluster.pump.serverIO.write = lambda data: None
    cluster.advance(19.0)
    assert cluster.ha.housekeeping_closes.get() == 0
    cluster.advance(1.5)
    assert cluster.ha.housekeeping_closes.get() == 1
    assert cluster.client.housekeeping_closes.get() == 1
    assert cluster.ha.connection_count == 0 and cluster.client.proto is None


def test_master_works_with_a_slave_that_waits_before_reporting(cluster):
    """The reference slave's first report comes one heartbeat interval after connecting."""
    put(cluster.master, 20)
    proto = cluster.ha.buildProtocol(None)
    from twisted.internet.testing import StringTransport

    t = StringTransport()
    proto.makeConnection(t)
    cluster.reactor.advance(4.9)
    assert t.value() == b"" and cluster.ha.connection_count == 0  # nothing sent, not a slave yet
    proto.dataReceived(encode_report(0))
    cluster.reactor.advance(0)
    assert cluster.ha.connection_count == 1
    assert t.value()[:12] == encode_header(0, cluster.master.max_offset)


def test_rogue_report_beyond_max_never_acks(tmp_path):
    """A first report beyond anything this master has from a host it never streamed to (issue #3015's rogue
    peer) closes that connection: never an ack, never a slave, nothing streamed, nothing written to disk
    (a real slave ahead of a master that lost its tail is a proven host: test_slave_ahead.py)."""
    c = Cluster(tmp_path, sync_wait_ms=1000)
    put(c.master, 5)
    proto = c.ha.buildProtocol(None)
    from twisted.internet.testing import StringTransport

    t = StringTransport()
    proto.makeConnection(t)
    res = c.master.put_message(put.__globals__["Message"](topic="T", body=b"x"))
    outcomes = []
    c.ha.wait_for_slave(res.next_offset).addCallback(outcomes.append)
    assert outcomes == ["SLAVE_NOT_AVAILABLE"], "a socket that never reported is not a slave"
    proto.dataReceived(encode_report(1 << 40))  # issue #3015: a huge offset
    proto.dataReceived(encode_report(1 << 41))
    assert proto.session.state == SessionState.CLOSED and c.ha.connection_count == 0
    assert c.ha.push2slave_max_offset == 0 and t.value() == b"" and c.ha.protocol_errors.get() == 1
    assert not (tmp_path / "master" / "haFence.json").exists() and c.ha.incarnation.fence is None
    res = c.master.put_message(put.__globals__["Message"](topic="T", body=b"y"))
    c.ha.wait_for_slave(res.next_offset).addCallback(outcomes.append)
    assert outcomes == ["SLAVE_NOT_AVAILABLE"] * 2
    c.close()


def test_offset_no_longer_on_master_is_loud(cluster, caplog):
    put(cluster.master, 300)
    # Pretend the master deleted its old files: its log now starts at its last file.
    mq = cluster.master.commitlog.queue
    while len(mq.files) > 1:
        mq.files.pop(0).destroy()
    cluster.ha.incarnation = Incarnation(cluster.master.max_offset)  # as if the master started with this log
    proto = cluster.ha.buildProtocol(None)
    from twisted.internet.testing import StringTransport

    t = StringTransport()
    proto.makeConnection(t)
    proto.dataReceived(encode_report(1000))
    assert proto.session.state == SessionState.OFFSET_UNAVAILABLE
    assert "data it needs is gone" in caplog.text
    assert "ha_slave_offset_unavailable{slave=" in cluster.ha.metrics.render()
    assert cluster.ha.status()["slaves"][0]["problem"]
