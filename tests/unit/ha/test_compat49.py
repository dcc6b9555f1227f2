"""haCompat49: the master as Apache RocketMQ 4.9 behaves where this broker deliberately differs, so the
guarantee matrix can show both (docs/ha-protocol.md §9). Each 4.9 behaviour next to ours."""

import struct

from twisted.internet import defer

from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport

from rmqha.broker.ha.master import HAService
from rmqha.broker.store.message_store import PutStatus

from .harness import Cluster, make_store, put


def report(offset):
    return struct.pack(">q", offset)


def conn(ha, host="10.6.6.6"):
    proto = ha.buildProtocol(None)
    t = StringTransport(peerAddress=IPv4Address("TCP", host, 40000))
    proto.makeConnection(t)
    return proto, t


def service(tmp_path, compat49, clock):
    store = make_store(tmp_path / ("m49" if compat49 else "m"), 1 << 20)
    return store, HAService(store, clock=clock, sync_wait_ms=1000, compat49=compat49)


def test_a_first_report_past_the_log_is_a_false_ack_in_49_and_refused_here(tmp_path):
    from twisted.internet.task import Clock

    for compat49 in (True, False):
        clock = Clock()
        store, ha = service(tmp_path, compat49, clock)
        put(store, 3)
        res = put(store, 1, start=10)[0]
        outcomes = []
        proto, t = conn(ha)
        ha.wait_for_slave(res.next_offset).addCallback(outcomes.append)
        proto.dataReceived(report(1 << 30))
        if compat49:
            # SEND_OK for a message no slave holds: push2SlaveMaxOffset took the rogue's word
            assert outcomes == [PutStatus.PUT_OK] and ha.push2slave_max_offset == 1 << 30
        else:
            # nothing is a slave: the wait said SLAVE_NOT_AVAILABLE at once, and the report changed nothing
            assert outcomes == [PutStatus.SLAVE_NOT_AVAILABLE] and ha.push2slave_max_offset == 0
            assert t.disconnecting or proto.session.state == "CLOSED"


def test_any_socket_is_a_slave_in_49():
    from twisted.internet.task import Clock
    import tempfile
    from pathlib import Path

    tmp = Path(tempfile.mkdtemp())
    for compat49, count in ((True, 1), (False, 0)):
        clock = Clock()
        store, ha = service(tmp, compat49, clock)
        put(store, 2)
        conn(ha)  # a TCP health probe: connects, says nothing
        assert ha.connection_count == count
        assert ha.is_slave_ok(store.max_offset) is bool(count)


def test_a_sync_wait_ends_at_its_deadline_in_49_as_here_and_the_49_deadline_is_slave_timeout():
    """4.9.x waits to a deadline (4.9.8 HAService.java:291, since 4.6.0); the five wake-ups were 4.5's.
    The deadline is 4.9.3+'s slaveTimeout, 3000 ms when unset; ours defaults to syncFlushTimeout."""
    from twisted.internet.task import Clock

    from rmqha.broker.config.properties import BrokerConfig

    conf = {"syncFlushTimeout": "1500"}
    assert BrokerConfig.from_properties(conf).sync_wait_ms == 1500
    assert BrokerConfig.from_properties({**conf, "haCompat49": "true"}).sync_wait_ms == 3000
    assert BrokerConfig.from_properties({**conf, "haCompat49": "true", "slaveTimeout": "700"}).sync_wait_ms == 700
    import tempfile
    from pathlib import Path

    tmp = Path(tempfile.mkdtemp())
    for compat49 in (True, False):
        clock = Clock()
        _, ha = service(tmp, compat49, clock)  # sync_wait_ms=1000
        gt = ha.group_transfer
        caught_up, late = [], []
        gt.wait(1000).addCallback(caught_up.append)
        for ack in range(100, 1000, 100):  # nine rises short of the offset, 0.1 s apart
            clock.advance(0.1)
            gt.notify_transfer(ack)
        assert caught_up == [], compat49  # rises do not use up the wait
        gt.notify_transfer(1000)
        assert caught_up == [PutStatus.PUT_OK], compat49
        gt.wait(2000).addCallback(late.append)
        clock.advance(0.999)
        assert late == [], compat49
        clock.advance(0.001)
        assert late == [PutStatus.FLUSH_SLAVE_TIMEOUT], compat49


def test_once_the_log_passes_a_49_slaves_offset_it_streams_into_the_middle_of_its_records(tmp_path):
    c = Cluster(tmp_path, heartbeat_ms=1000, housekeeping_ms=4000, sync_wait_ms=1000)
    c.ha.compat49 = True
    c.ha.incarnation.compat49 = True
    put(c.master, 5)
    put(c.slave, 8)  # the slave holds 3 records the master lost (a power loss)
    s_end = c.slave.max_offset
    put(c.master, 10, start=200)  # the master writes past the slave's offset: other records there
    c.connect()
    c.advance(1.5)
    conn = c.master_conn()
    assert conn.session.slave_request_offset == s_end
    # 4.9 streamed from the slave's offset, which is not a record boundary of the master's log: the slave's
    # log is now its own history followed by the tail of one of the master's records, then the rest
    assert c.slave.max_offset == c.master.max_offset and not c.identical()
    c.close()


def _recorder(calls):
    """run_in_thread that records each flush and never finishes it."""
    return lambda fn: calls.append(fn) or defer.Deferred()


def test_a_49_sync_flush_store_forces_what_it_holds_every_10_ms_and_ours_at_its_flush_interval(tmp_path):
    """4.9's SYNC_FLUSH GroupCommitService wakes every 10 ms and, with no send waiting (a slave's
    replicated bytes), forces everything written (4.9.8 CommitLog.java:1227-1260, GroupCommitService
    doCommit and run: flush(0)). Ours flushes such bytes at flushIntervalCommitLog (500 ms). The
    difference decides who keeps more after a whole group's power cut: the 4.9 mode's slave lost more
    than its master at every cut, so the master never came back behind it and the pair could not fork
    as 4.9.8's did (docs/guarantees.md, the three-column matrix)."""
    from twisted.internet.testing import MemoryReactorClock

    from rmqha.broker.config.properties import BrokerConfig
    from rmqha.broker.controller import BrokerController

    from ..processors.harness import make_config

    assert BrokerConfig.from_properties({"flushDiskType": "SYNC_FLUSH", "haCompat49": "true"}).flush_interval_ms == 10
    assert BrokerConfig.from_properties({"flushDiskType": "SYNC_FLUSH"}).flush_interval_ms == 500
    assert BrokerConfig.from_properties({"flushDiskType": "ASYNC_FLUSH", "haCompat49": "true"}).flush_interval_ms == 500
    for compat49, first_flush_ms in ((True, 10), (False, 500)):
        flushes = []
        clock = MemoryReactorClock()
        cfg = make_config(
            tmp_path / f"s{compat49}",
            brokerRole="SLAVE",
            flushDiskType="SYNC_FLUSH",
            haCompat49=str(compat49).lower(),
            haMasterAddress="127.0.0.1:1",
        )
        c = BrokerController(cfg, clock, clock=clock, run_in_thread=_recorder(flushes))
        c.start(listen=False)
        try:
            c.store.append_replicated(c.store.max_offset, b"\0" * 64)  # bytes from the master, no waiter
            clock.advance((first_flush_ms - 0.5) / 1000)
            assert flushes == [], compat49
            clock.advance(0.001)
            assert len(flushes) == 1, compat49
        finally:
            c.flusher._running = False  # the flush "thread" never finished: let stop() go
            c.stop()
