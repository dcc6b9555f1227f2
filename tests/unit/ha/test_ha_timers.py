"""The HA timing claims (docs/ha-protocol.md), on the fake clock: heartbeats counted interval by interval, the
slave's reconnect back-off (100 ms doubling to haReconnectMaxDelay, 1 s), the sync wait taken from
slaveTimeout when set, the master's lagBytes, and ticking that survives a first tick that raises."""

import struct

import pytest
from twisted.internet.error import ConnectionRefusedError
from twisted.python.failure import Failure

from rmqha.broker.ha.group_transfer import GroupTransfer
from rmqha.broker.ha.wire import encode_header, encode_report

from .harness import Cluster, put


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    yield c
    c.close()


def record_reads(proto, clock):
    """Every read a protocol gets, with the clock time it got it."""
    got, real = [], proto.dataReceived

    def spy(data):
        got.append((clock.seconds(), bytes(data)))
        real(data)

    proto.dataReceived = spy
    return got


def step(cluster, seconds):
    """Advance whole seconds (exact float times), delivering bytes after each."""
    for _ in range(int(seconds)):
        cluster.reactor.advance(1.0)
        cluster.flush()


def test_heartbeats_and_reports_every_interval_on_an_idle_link(cluster):
    put(cluster.master, 3)
    cluster.connect()  # t=0: connect, report, catch up
    end = cluster.master.max_offset
    assert cluster.slave.max_offset == end
    to_slave = record_reads(cluster.client.proto, cluster.reactor)
    to_master = record_reads(cluster.master_conn(), cluster.reactor)
    step(cluster, 60)
    # haSendHeartbeatInterval = 5 s: one master heartbeat and one slave report every 5 s, not more, not less
    assert to_slave == [(float(t), encode_header(end, 0)) for t in range(5, 61, 5)]
    assert to_master == [(float(t), encode_report(end)) for t in range(5, 61, 5)]
    assert cluster.ha.connection_count == 1 and cluster.client.reconnects.get() == 1


def pending_attempts(reactor):
    return len(reactor.tcpClients)


def refuse(reactor):
    """Fail the slave's pending connection attempt, as a master that is down does."""
    host, port, factory, *_ = reactor.tcpClients.pop(0)
    connector = reactor.connectors.pop(0)
    factory.clientConnectionFailed(connector, Failure(ConnectionRefusedError()))


def retry_in(client, reactor):
    """Seconds until the slave's scheduled reconnect (exactly one is scheduled)."""
    [call] = [c for c in reactor.getDelayedCalls() if c.func == client.connect]
    return call.getTime() - reactor.seconds()


def expect_attempt_after(client, reactor, wait):
    """The next attempt is due exactly `wait` seconds from now: none just before, one just after."""
    due = retry_in(client, reactor)
    assert due == pytest.approx(wait, abs=1e-9)
    reactor.advance(due - 0.0005)
    assert pending_attempts(reactor) == 0
    reactor.advance(0.001)
    assert pending_attempts(reactor) == 1


def test_reconnect_backs_off_from_100_ms_doubling_to_1_s_and_resets_after_a_connect(cluster):
    put(cluster.master, 3)
    cluster.connect()
    r = cluster.reactor
    cluster.master_conn().transport.abortConnection()
    cluster.flush()
    assert cluster.client.proto is None and pending_attempts(r) == 0
    waits = [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]
    for i, wait in enumerate(waits):
        expect_attempt_after(cluster.client, r, wait)
        if i < len(waits) - 1:
            refuse(r)
    cluster.pump = cluster.completer.succeedOnce()  # the master is back
    cluster.flush()
    assert cluster.client.proto is not None and cluster.client.reconnects.get() == 2
    # after a good connection the back-off starts again at 100 ms
    cluster.master_conn().transport.abortConnection()
    cluster.flush()
    expect_attempt_after(cluster.client, r, 0.1)


def test_reconnect_cap_is_ha_reconnect_max_delay(tmp_path):
    from rmqha.broker.ha.slave import HAClient

    c = Cluster(tmp_path)
    c.client = HAClient(c.slave, "127.0.0.1:10912", clock=c.reactor, reactor=c.reactor, reconnect_max_ms=300)
    try:
        c.connect()
        c.master_conn().transport.abortConnection()
        c.flush()
        for wait in (0.1, 0.2, 0.3, 0.3):
            expect_attempt_after(c.client, c.reactor, wait)
            refuse(c.reactor)
    finally:
        c.close()


def test_lag_bytes_on_the_master_are_its_max_offset_minus_the_slaves_ack(cluster):
    put(cluster.master, 10)
    cluster.connect()
    [slave] = cluster.ha.status()["slaves"]
    assert slave["lagBytes"] == 0 and slave["slaveAckOffset"] == cluster.master.max_offset
    acked = cluster.master.max_offset
    cluster.pump.clientIO.write = lambda data: None  # the slave's reports stop arriving
    put(cluster.master, 5, start=10)
    cluster.flush()
    lag = cluster.master.max_offset - acked
    assert lag > 0 and cluster.slave.max_offset == cluster.master.max_offset  # replicated, not acked
    [slave] = cluster.ha.status()["slaves"]
    assert (slave["lagBytes"], slave["slaveAckOffset"]) == (lag, acked)
    peer = cluster.master_conn().peer
    assert f'rocketmq_ha_slave_lag_bytes{{slave="{peer}"}} {lag}' in cluster.ha.metrics.render()


def test_a_first_service_tick_that_raises_does_not_stop_the_heartbeats(cluster):
    put(cluster.master, 3)
    real, raised = cluster.ha.tick, []

    def first_fails():
        if not raised:
            raised.append(cluster.reactor.seconds())
            raise RuntimeError("first tick")
        real()

    cluster.ha._ticker.fn = first_fails  # the supervised function itself, before its first run
    cluster.connect()
    end = cluster.master.max_offset
    to_slave = record_reads(cluster.client.proto, cluster.reactor)
    step(cluster, 30)
    assert raised == [1.0]
    assert [t for t, data in to_slave if data == encode_header(end, 0)] == [5.0, 10.0, 15.0, 20.0, 25.0, 30.0]
    assert cluster.ha._ticker.health()["running"] and cluster.ha._ticker.consecutive_failures == 0


def test_sync_wait_is_slave_timeout_when_set_else_sync_flush_timeout(tmp_path):
    from tests.unit.processors.harness import Broker, send_v1
    from rmqha.broker.remoting.codes import ResponseCode

    for overrides, wait in (
        ({"syncFlushTimeout": "5000", "slaveTimeout": "2000"}, 2.0),
        ({"syncFlushTimeout": "1500"}, 1.5),
    ):
        b = Broker(tmp_path / str(wait), brokerRole="SYNC_MASTER", **overrides)
        try:
            ha = b.server.controller.ha
            assert isinstance(ha.group_transfer, GroupTransfer) and ha.group_transfer.timeout_s == wait
            ha.is_slave_ok = lambda where: True  # a slave is "connected" but never acknowledges
            b.clock.advance(10.0)  # a wait that starts after t=0
            d = b.call(send_v1())
            out = []
            d.addCallback(out.append)
            b.clock.advance(wait - 0.001)
            assert out == [] and len(ha.group_transfer) == 1
            b.clock.advance(0.001)
            assert out and out[0].code == ResponseCode.FLUSH_SLAVE_TIMEOUT
        finally:
            b.stop()


def test_report_bytes_are_the_slaves_max_offset_big_endian(cluster):
    put(cluster.master, 2)
    cluster.connect()
    to_master = record_reads(cluster.master_conn(), cluster.reactor)
    put(cluster.master, 1, start=2)
    cluster.flush()
    assert to_master[-1][1] == struct.pack(">q", cluster.slave.max_offset)
