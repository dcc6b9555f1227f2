"""MasterSession's edges that only the HA master's later rules reach (docs/ha-protocol.md §10): the
haCompat49 first report, the proof a slave gives by acknowledging streamed bytes (rmqha/broker/ha/peers.py),
a slave that started empty next to a fork fence, and the live SLAVE_AHEAD count per host.

IO-free: the commit log is test_master_session's FakeLog, time is passed in as the reactor would."""

import pytest

from rmqha.broker.ha.master_session import Ack, Incarnation, MasterSession, SessionState
from rmqha.broker.ha.peers import ProvenPeers
from rmqha.broker.ha.wire import ProtocolError

from .test_master_session import FakeLog, header, report

HOST = "10.0.0.2"


def session(log, inc, now=100.0):
    return MasterSession(
        log, f"{HOST}:40000", batch_size=300, heartbeat_s=5.0, housekeeping_s=20.0, now=now, incarnation=inc
    )


# -- haCompat49: 4.9's HAConnection takes a connection's first report unchecked ----------------------


def test_compat49_a_first_report_past_the_log_is_a_first_ack_and_streaming_starts_there():
    # 4.9 ReadSocketService: slaveRequestOffset = the report, then notifyTransferSome (the false SEND_OK
    # the matrix's 4.9 column shows). The Ack's `first` is what makes the HA service start the writer.
    log = FakeLog(2500, file_size=1000)
    s = session(log, Incarnation(2500, compat49=True))
    assert s.on_data(report(1 << 30), 101.0) == Ack(1 << 30, True)
    assert (s.state, s.is_slave, s.slave_request_offset, s.slave_ack_offset, s.next_transfer_from) == (
        SessionState.STREAMING,
        True,
        1 << 30,
        1 << 30,
        1 << 30,
    )
    assert s.next_frames(102.0, 10_000) == [] and log.reads == []  # nothing there to stream yet
    # within the log: the same, a first ack at exactly the master's max offset
    at_max = session(log, Incarnation(2500, compat49=True))
    assert at_max.on_data(report(2500), 101.0) == Ack(2500, True) and at_max.next_transfer_from == 2500


def test_compat49_sets_the_request_offset_once_even_for_an_empty_slave():
    # 4.9 sets slaveRequestOffset only while it is still -1: an empty slave's 0 is its request, and every
    # later report is an ack (and, 4.9.3+, one beyond the max closes the connection).
    log = FakeLog(2500, file_size=1000)
    s = session(log, Incarnation(2500, compat49=True))
    assert s.on_data(report(0), 101.0) == Ack(0, True)
    assert (s.slave_request_offset, s.next_transfer_from) == (0, 2000)  # the master's last file
    assert s.next_frames(102.0, 300)[0] == header(2000, 300)
    assert s.on_data(report(2300), 103.0) == Ack(2300, False)
    assert (s.slave_request_offset, s.slave_ack_offset, s.next_transfer_from) == (0, 2300, 2300)
    with pytest.raises(ProtocolError, match="reported offset 2600 beyond the master's max offset 2500"):
        s.on_data(report(2600), 104.0)


# -- a slave that started empty, next to a fence it cannot clear -------------------------------------


def test_a_slave_rebuilt_elsewhere_is_acked_as_it_streams_past_a_fence_it_cannot_clear():
    # A fork fence from an earlier life (the forked slave was rebuilt at a new address, docs §10: that does
    # not end the fence). The new, empty slave reports 0: its request is 0, known, so none of its later
    # reports is a first one, and its acks past the fence's `from` are acks, not a claim on the lost history.
    peers = ProvenPeers()  # nobody proven in an earlier life
    inc = Incarnation(1000, fence=(500, 800), peers=peers)
    log = FakeLog(2000, file_size=10_000)
    s = session(log, inc)
    assert s.on_data(report(0), 101.0) == Ack(0, True)
    assert (s.state, s.slave_request_offset, s.next_transfer_from, inc.fence) == (
        SessionState.STREAMING,
        0,
        0,
        (500, 800),
    )  # not proven earlier: the fence stays
    assert len(s.next_frames(102.0, 1000)) == 8 and s.next_transfer_from == 1000
    assert s.on_data(report(1000), 103.0) == Ack(1000, False)
    assert (s.state, s.slave_request_offset, s.slave_ack_offset) == (SessionState.STREAMING, 0, 1000)


# -- the proof: a host that acknowledged bytes this master streamed to it ----------------------------


def test_a_host_is_proven_only_by_acking_past_its_request_with_the_time_in_ms():
    peers = ProvenPeers()
    inc = Incarnation(1000, peers=peers)
    log = FakeLog(2000, file_size=10_000)
    s = session(log, inc, now=1_764_020_000.0)
    assert s.on_data(report(1000), 1_764_020_000.0) == Ack(1000, True)
    assert peers.peers == {}  # a first report proves nothing: anybody can send one
    s.next_frames(1_764_020_001.0, 500)
    assert s.next_transfer_from == 1500
    # the slave's periodic report before it stored anything streamed: the same offset, still no proof
    assert s.on_data(report(1000), 1_764_020_005.0) == Ack(1000, False)
    assert peers.peers == {}
    assert s.on_data(report(1300), 1_764_020_010.25) == Ack(1300, False)
    # what haPeers.json records (peers.py's format): the ack, and when, in ms since the epoch
    assert peers.peers == {HOST: {"ack": 1300, "provenAtMs": 1_764_020_010_250}}


# -- the live SLAVE_AHEAD count per host, which keeps a fence from being cleared ---------------------


def _proven_earlier():
    return ProvenPeers.from_record(({HOST: {"ack": 1500, "provenAtMs": 1}}, 64 << 20))


def test_the_slave_ahead_count_follows_each_session_and_is_gone_when_the_last_one_closes():
    log = FakeLog(1000)
    inc = Incarnation(1000, peers=_proven_earlier())
    # the forked slave, and the same slave reconnected before housekeeping closed the old half-open link
    old, new = session(log, inc), session(log, inc, now=110.0)
    assert old.on_data(report(1500), 101.0) is None and old.state == SessionState.SLAVE_AHEAD
    assert inc.ahead_live == {HOST: 1} and inc.fence == (1000, 1500)
    assert new.on_data(report(1500), 111.0) is None and new.state == SessionState.SLAVE_AHEAD
    assert inc.ahead_live == {HOST: 2}
    old.close()
    assert old.state == SessionState.CLOSED and inc.ahead_live == {HOST: 1}
    # a report at the fork point from that host while the forked slave is still there: the fence stays
    low = session(log, inc, now=120.0)
    assert low.on_data(report(1000), 121.0) == Ack(1000, True) and inc.fence == (1000, 1500)
    low.close()  # a session that was never SLAVE_AHEAD: the count is not its
    assert low.state == SessionState.CLOSED and inc.ahead_live == {HOST: 1}
    new.close()
    assert new.state == SessionState.CLOSED and inc.ahead_live == {}
    # the forked slave is gone (truncated by an operator) and comes back at the fork: the fence is done
    back = session(log, inc, now=130.0)
    assert back.on_data(report(1000), 131.0) == Ack(1000, True) and inc.fence is None
