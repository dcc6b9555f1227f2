"""Recovery without stranding (rmqha/broker/ha/recovery.py): a master that comes back behind its slave after an
unclean start fetches the slave's tail over the 4.x HA wire, roles reversed, and stores only records
that pass every check. The IO-free sessions first, then both sides on in-memory transports and a fake
clock, then the controller's hold."""

import os
import random
import struct

import pytest
from twisted.internet.testing import MemoryReactorClock
from twisted.test.iosim import ConnectionCompleter

from rmqha.broker.ha.recovery import (
    FetchOutcome,
    FetchSession,
    RecordVerifier,
    RecoveryFetcher,
    RecoveryRefused,
    RecoverySourceService,
    RecoveryState,
    SourceSession,
)
from rmqha.broker.store.message_store import MessageStore
from rmqha.broker.store.record import Message

FILE = 64 * 1024
HOST = ("127.0.0.1", 10911)


def store(path, host=HOST):
    s = MessageStore(str(path), commitlog_file_size=FILE, cq_file_size=20 * 1000, store_host=host)
    s.start()
    return s


def put(s, n, start=0, size=700):
    for i in range(start, start + n):
        body = (f"{i}:".encode() * size)[:size]
        assert s.put_message(
            Message(topic="T", body=body, queue_id=i % 4, properties={"UNIQ_KEY": f"U{i}"})
        ).status.stored
    s.dispatch_pending()


def log_bytes(s, start=0):
    out, at = b"", start
    while at < s.max_offset:
        chunk = s.commitlog.read(at, 1 << 20)
        out += chunk
        at += len(chunk)
    return out


def prefix_copy(src, path, cut):
    """A store holding src's log up to `cut` (a record boundary): the master after its power loss."""
    dst = store(path)
    at = 0
    while at < cut:
        chunk = src.commitlog.read(at, cut - at)
        dst.append_replicated(at, chunk)
        at += len(chunk)
    while dst.dispatch():
        pass
    return dst


def boundary_near(s, offset):
    """The last record boundary at or below offset."""
    at = 0
    for pos, kind, size, _info, _reason in s.commitlog.walk(0, s.max_offset, check_crc=False):
        if pos + size > offset:
            return at
        at = pos + size
    return at


def shuttle(source: SourceSession, fetch: FetchSession, dst, rng):
    """Bytes both ways in random pieces until the fetch has its answer; stores what it verified."""
    source.on_report(fetch.start())
    stream = b"".join(source.next_frames(1 << 30))
    pos = 0
    while fetch.outcome == FetchOutcome.FETCHING and pos < len(stream):
        n = rng.randint(1, 5000)
        records, _report = fetch.on_data(stream[pos : pos + n])
        if records:
            dst.append_replicated(dst.max_offset, records)
        pos += n


@pytest.mark.parametrize("seed", range(8))
def test_the_master_gets_the_slaves_tail_byte_identical_however_the_stream_is_cut(tmp_path, seed):
    rng = random.Random(seed)
    slave = store(tmp_path / "slave")
    put(slave, 300)  # several 64 KiB files: blank end-of-file records inside the range
    cut = boundary_near(slave, rng.randint(1, slave.max_offset - 1))
    master = prefix_copy(slave, tmp_path / "master", cut)
    fetch = FetchSession(RecordVerifier(master.max_offset, FILE, HOST, 1 << 20))
    shuttle(SourceSession(slave.commitlog, batch=rng.choice([100, 4096, 1 << 20])), fetch, master, rng)
    assert fetch.outcome == FetchOutcome.COMPLETE and fetch.source_end == slave.max_offset
    assert log_bytes(master) == log_bytes(slave)
    while master.dispatch():
        pass
    assert [master.max_queue_offset("T", q) for q in range(4)] == [75] * 4
    last = master.queue("T", 3).get(74)  # the last unit of queue 3 points at the last record sent to it
    assert master.message_by_offset(last[0]).properties["UNIQ_KEY"] == "U299"


def test_a_source_behind_the_master_gives_nothing_and_says_so(tmp_path):
    master = store(tmp_path / "master")
    put(master, 50)
    slave = prefix_copy(master, tmp_path / "slave", boundary_near(master, master.max_offset // 2))
    fetch = FetchSession(RecordVerifier(master.max_offset, FILE, HOST, 1 << 20))
    before = log_bytes(master)
    shuttle(SourceSession(slave.commitlog), fetch, master, random.Random(1))
    assert fetch.outcome == FetchOutcome.SOURCE_BEHIND and fetch.source_end == slave.max_offset
    assert log_bytes(master) == before


def test_an_equal_source_completes_at_once(tmp_path):
    master = store(tmp_path / "master")
    put(master, 20)
    fetch = FetchSession(RecordVerifier(master.max_offset, FILE, HOST, 1 << 20))
    src = SourceSession(master.commitlog)
    src.on_report(fetch.start())
    assert fetch.on_data(b"".join(src.next_frames(1 << 20))) == ([], None)
    assert fetch.outcome == FetchOutcome.COMPLETE


def test_records_another_broker_stored_are_refused_and_nothing_after_them_is_kept(tmp_path):
    slave = store(tmp_path / "slave")
    put(slave, 30)
    cut = slave.max_offset
    master = prefix_copy(slave, tmp_path / "master", cut)
    # the slave's log goes on with records a different master (another store host) wrote
    slave.store_host = ("10.9.9.9", 10911)
    put(slave, 10, start=30)
    fetch = FetchSession(RecordVerifier(master.max_offset, FILE, HOST, 1 << 20))
    shuttle(SourceSession(slave.commitlog), fetch, master, random.Random(2))
    assert fetch.outcome == FetchOutcome.REFUSED and "10.9.9.9" in fetch.error
    assert master.max_offset == cut


def test_a_good_prefix_is_kept_and_a_corrupt_record_after_it_refused(tmp_path):
    slave = store(tmp_path / "slave")
    put(slave, 40)
    cut = boundary_near(slave, slave.max_offset // 3)
    master = prefix_copy(slave, tmp_path / "master", cut)
    good_end = boundary_near(slave, slave.max_offset * 2 // 3)
    stream = bytearray(log_bytes(slave, cut))
    stream[good_end - cut + 200] ^= 0xFF  # inside the body of the record at good_end: its CRC fails
    fetch = FetchSession(RecordVerifier(cut, FILE, HOST, 1 << 20))
    frames = struct.pack(">qi", cut, len(stream)) + bytes(stream)
    records, _ = fetch.on_data(frames)
    master.append_replicated(cut, records)
    assert fetch.outcome == FetchOutcome.REFUSED and "CRC" in fetch.error
    assert master.max_offset == good_end and log_bytes(master) == log_bytes(slave)[:good_end]


@pytest.mark.parametrize(
    "frame,why",
    [
        (struct.pack(">qi", 5, 4) + b"abcd", "not contiguous"),
        (struct.pack(">qi", 10**9, 0), "past the fetched end"),
    ],
)
def test_frames_no_source_sends_are_refused(tmp_path, frame, why):
    master = store(tmp_path / "master")
    put(master, 3)
    fetch = FetchSession(RecordVerifier(master.max_offset, FILE, HOST, 1 << 20))
    assert fetch.on_data(frame) == ([], None)
    assert fetch.outcome == FetchOutcome.REFUSED and why in fetch.error


def test_a_record_that_claims_another_offset_is_refused():
    v = RecordVerifier(0, FILE, HOST, 1 << 20)
    with pytest.raises(RecoveryRefused, match="zeros|magic"):
        v.feed(bytes(100))


# -- both sides on in-memory transports ----------------------------------------------------------


class Pair:
    def __init__(self, tmp_path, slave_records=200, master_cut=0.4, wait_s=30.0):
        self.reactor = MemoryReactorClock()
        self.slave = store(tmp_path / "slave")
        put(self.slave, slave_records)
        self.cut = boundary_near(self.slave, int(self.slave.max_offset * master_cut))
        self.master = prefix_copy(self.slave, tmp_path / "master", self.cut)
        self.source = RecoverySourceService(self.slave, self.reactor)
        self.source.listen(self.reactor, 20912)
        self.done = []
        self.fetcher = RecoveryFetcher(
            self.master,
            ["127.0.0.1:20912"],
            self.reactor,
            self.reactor,
            wait_s,
            HOST,
            1 << 20,
            on_done=self.done.append,
        )
        self.completer = ConnectionCompleter(self.reactor)

    def run(self, seconds=2.0):
        pump = None
        for _ in range(int(seconds / 0.05)):
            if pump is None and self.reactor.tcpClients:
                pump = self.completer.succeedOnce()
            if pump is not None:
                pump.flush()
            self.reactor.advance(0.05)
            if self.done:
                break


def test_the_fetcher_holds_until_the_source_answered_then_the_logs_are_equal(tmp_path):
    p = Pair(tmp_path)
    p.fetcher.start()
    assert p.fetcher.holding
    p.run()
    assert p.done == [RecoveryState.DONE] and not p.fetcher.holding
    assert log_bytes(p.master) == log_bytes(p.slave)
    st = p.fetcher.status()
    assert st["sources"][0]["state"] == "COMPLETE" and st["fetchedBytes"] == p.slave.max_offset - p.cut
    assert st["sources"][0]["records"] > 0
    # the recovered records are in the consume queues and the index, as if the master had never lost them
    assert p.master.max_queue_offset("T", 0) == p.slave.max_queue_offset("T", 0)


def test_an_unreachable_source_ends_the_hold_at_haRecoveryWaitMs(tmp_path):
    reactor = MemoryReactorClock()
    master = store(tmp_path / "master")
    put(master, 5)
    done = []
    f = RecoveryFetcher(master, ["127.0.0.1:1"], reactor, reactor, 3.0, HOST, 1 << 20, on_done=done.append)
    f.start()
    for _ in range(5):  # every attempt fails at once; each is retried until the deadline
        reactor.advance(0.5)
        for c in list(reactor.tcpClients):
            reactor.tcpClients.remove(c)
            c[2].clientConnectionFailed(None, _Failure("Connection refused"))
    assert f.holding and not done
    reactor.advance(0.5)  # 3.0 s after the start
    assert done == [RecoveryState.TIMED_OUT] and not f.holding
    st = f.status()
    assert st["sources"][0]["state"] == "UNREACHABLE" and st["sources"][0]["attempts"] >= 3
    assert st["heldSeconds"] == pytest.approx(3.0, abs=0.01)


class _Failure:
    def __init__(self, msg):
        self.msg = msg

    def getErrorMessage(self):
        return self.msg


def test_the_controller_refuses_writes_while_it_holds_and_serves_them_after(tmp_path):
    from rmqha.broker.config.properties import BrokerConfig
    from rmqha.broker.controller import BrokerController
    from rmqha.broker.store.message_store import PutStatus

    root = tmp_path / "m"
    cfg = BrokerConfig.from_properties(
        {
            "brokerName": "b",
            "brokerRole": "SYNC_MASTER",
            "storePathRootDir": str(root),
            "listenPort": "30911",
            "brokerIP1": "127.0.0.1",
            "haRecoveryEnable": "true",
            "haRecoveryPeers": "127.0.0.1:1",
            "haRecoveryWaitMs": "2000",
            "mappedFileSizeCommitLog": str(FILE),
        }
    )
    root.mkdir()
    (root / "abort").write_text("")  # the last life did not shut down cleanly
    # it streamed to its slave in that life (rmqha/broker/ha/peers.py): the slave's host may be fetched from
    (root / "haPeers.json").write_text('{"peers": {"127.0.0.1": {"ack": 1}}, "streamLimit": 1073741824}')
    reactor = MemoryReactorClock()
    c = BrokerController(
        cfg,
        reactor,
        run_in_thread=lambda f, *a: __import__("twisted.internet.defer", fromlist=["x"]).maybeDeferred(f, *a),
    )
    c.start(listen=False)
    try:
        assert c.writes_held and c.ha is None
        res = c.put(Message(topic="T", body=b"x", queue_id=0))
        assert res.status == PutStatus.SERVICE_NOT_AVAILABLE and "recovering" in res.remark
        assert c.status()["haRecovery"]["state"] == RecoveryState.HOLDING
        reactor.advance(2.1)
        assert not c.writes_held and c.ha is not None
        assert c.status()["haRecovery"]["state"] == RecoveryState.TIMED_OUT
    finally:
        c.stop()


def test_an_unclean_start_with_no_proven_slave_on_record_says_so_and_does_not_hold(tmp_path, caplog):
    from rmqha.broker.config.properties import BrokerConfig
    from rmqha.broker.controller import BrokerController

    root = tmp_path / "m"
    root.mkdir()
    (root / "abort").write_text("")
    cfg = BrokerConfig.from_properties(
        {
            "brokerName": "b",
            "brokerRole": "SYNC_MASTER",
            "storePathRootDir": str(root),
            "listenPort": "30911",
            "brokerIP1": "127.0.0.1",
            "haRecoveryEnable": "true",
            "haRecoveryPeers": "127.0.0.1:1",
            "mappedFileSizeCommitLog": str(FILE),
        }
    )
    c = BrokerController(cfg, MemoryReactorClock())
    c.start(listen=False)
    try:
        assert not c.writes_held and c.recovery is None and c.ha is not None
        assert "no slave was proven a replica" in caplog.text and "no source is usable" in caplog.text
    finally:
        c.stop()


def test_recovery_sources_are_the_proven_replicas_only():
    from rmqha.broker.ha.recovery import proven_sources

    srcs = ["10.0.0.2:10912", "10.0.0.3:10912", "broker-a-s:10912"]
    assert proven_sources(srcs, {}, 1 << 30)[0] == []  # nobody proven: nothing fetched
    assert proven_sources(srcs, {"10.0.0.2": {}}, None)[0] == []  # no streamLimit on record: the same
    kept, dropped = proven_sources(srcs, {"10.0.0.2": {}}, 1 << 30)
    assert kept == ["10.0.0.2:10912", "broker-a-s:10912"] and len(dropped) == 1 and "10.0.0.3" in dropped[0]


def test_the_verifier_takes_nothing_past_the_stream_limit(tmp_path):
    slave = store(tmp_path / "slave")
    put(slave, 3)
    data = log_bytes(slave)
    first = len(RecordVerifier(0, FILE, HOST, 1 << 20).feed(data)[0])
    v = RecordVerifier(0, FILE, HOST, 1 << 20, limit=first + 1)  # the second record ends past it
    with pytest.raises(RecoveryRefused, match="streamLimit") as e:
        v.feed(data)
    assert len(e.value.records) == 1 and v.end == first
    assert len(RecordVerifier(0, FILE, HOST, 1 << 20, limit=len(data)).feed(data)) == 3


def test_recovery_on_a_master_without_sources_is_a_config_error():
    from rmqha.broker.config.properties import BrokerConfig, ConfigError

    with pytest.raises(ConfigError, match="haRecoveryPeers"):
        BrokerConfig.from_properties({"brokerName": "b", "brokerRole": "SYNC_MASTER", "haRecoveryEnable": "true"})
    # a slave only serves its log: no sources needed
    BrokerConfig.from_properties(
        {
            "brokerName": "b",
            "brokerRole": "SLAVE",
            "brokerId": "1",
            "haRecoveryEnable": "true",
            "haMasterAddress": "127.0.0.1:10912",
        }
    )


def test_a_clean_start_does_not_hold(tmp_path):
    from rmqha.broker.config.properties import BrokerConfig
    from rmqha.broker.controller import BrokerController

    cfg = BrokerConfig.from_properties(
        {
            "brokerName": "b",
            "brokerRole": "ASYNC_MASTER",
            "storePathRootDir": str(tmp_path / "m"),
            "listenPort": "30911",
            "brokerIP1": "127.0.0.1",
            "haRecoveryEnable": "true",
            "haRecoveryPeers": "127.0.0.1:1",
            "mappedFileSizeCommitLog": str(FILE),
        }
    )
    c = BrokerController(cfg, MemoryReactorClock())
    c.start(listen=False)
    try:
        assert not c.writes_held and c.recovery is None and c.ha is not None
    finally:
        c.stop()


# -- the edges of each IO-free part (what mutation testing found unchecked) --------------------------


def test_the_verifier_counts_records_and_refuses_what_cannot_fit(tmp_path):
    slave = store(tmp_path / "slave")
    put(slave, 3)
    data = log_bytes(slave)
    v = RecordVerifier(0, FILE, HOST, 1 << 20)
    assert len(v.feed(data[:-1])) == 2 and v.records == 2 and v.partial == len(data) - 1 - v.end
    assert len(v.feed(data[-1:])) == 1 and v.records == 3 and v.partial == 0 and v.received_end == len(data)
    small = RecordVerifier(0, FILE, HOST, max_record=100)
    with pytest.raises(RecoveryRefused, match="does not fit"):
        small.feed(data[:50])  # a record head that declares more than max_record bytes


def test_a_blank_must_be_followed_by_zeros_and_may_arrive_in_pieces():
    from rmqha.broker.store import record

    blank = record.blank(FILE) + bytes(FILE - 8)
    v = RecordVerifier(0, FILE, HOST, 1 << 20)
    assert v.feed(blank[: FILE // 2]) == [] and v.partial == FILE // 2  # its zeros still arriving
    assert v.feed(blank[FILE // 2 :]) == [blank] and v.end == FILE
    for at in (8, 9):  # the first byte after the 8-byte head, and the next
        dirty = bytearray(blank)
        dirty[at] = 1
        with pytest.raises(RecoveryRefused, match="not followed by zeros"):
            RecordVerifier(0, FILE, HOST, 1 << 20).feed(bytes(dirty))
    last = bytearray(blank)
    last[-1] = 1
    with pytest.raises(RecoveryRefused, match="not followed by zeros"):
        RecordVerifier(0, FILE, HOST, 1 << 20).feed(bytes(last))


def test_a_fetch_ignores_a_heartbeat_behind_its_data_and_counts_bytes(tmp_path):
    slave = store(tmp_path / "slave")
    put(slave, 3)
    data = log_bytes(slave)
    fetch = FetchSession(RecordVerifier(0, FILE, HOST, 1 << 20))
    records, report = fetch.on_data(struct.pack(">qi", 0, len(data)) + data)
    assert len(records) == 3 and report == struct.pack(">q", len(data)) and fetch.bytes == len(data)
    # a 4.x master's heartbeat from an older position after data: neither behind nor complete
    assert fetch.on_data(struct.pack(">qi", 10, 0)) == ([], None) and fetch.outcome == FetchOutcome.FETCHING
    assert fetch.on_data(struct.pack(">qi", len(data), 0)) == ([], None)
    assert fetch.outcome == FetchOutcome.COMPLETE and fetch.source_end == len(data)
    assert fetch.on_data(struct.pack(">qi", len(data), 4) + b"more") == ([], None)  # answered: nothing more


def test_a_source_ending_inside_a_record_completes_without_it(tmp_path):
    slave = store(tmp_path / "slave")
    put(slave, 2)
    data = log_bytes(slave)
    fetch = FetchSession(RecordVerifier(0, FILE, HOST, 1 << 20))
    records, _ = fetch.on_data(struct.pack(">qi", 0, len(data) - 5) + data[:-5] + struct.pack(">qi", len(data) - 5, 0))
    assert len(records) == 1 and fetch.outcome == FetchOutcome.COMPLETE and fetch.source_end == len(data) - 5


def test_the_source_streams_within_max_bytes_and_checks_the_report(tmp_path):
    from rmqha.broker.ha.wire import ProtocolError

    slave = store(tmp_path / "slave")
    put(slave, 20)
    end = slave.max_offset
    src = SourceSession(slave.commitlog, batch=1000)
    assert src.next_frames(1 << 20) == []  # nothing before the report
    src.on_report(struct.pack(">q", 0))
    src.on_report(struct.pack(">q", 500))  # later reports are acks: the stream goes on where it is
    first = src.next_frames(2500)
    bodies = first[1::2]
    assert [len(b) for b in bodies] == [1000, 1000, 500] and src.next == 2500 and not src.said_end
    rest = []
    while not src.said_end:
        rest += src.next_frames(2500)
    assert rest[-1] == struct.pack(">qi", end, 0) and src.next == end
    assert src.next_frames(2500) == []
    with pytest.raises(ProtocolError, match="negative"):
        SourceSession(slave.commitlog).on_report(struct.pack(">q", -1))
    ahead = SourceSession(slave.commitlog)
    ahead.on_report(struct.pack(">q", end + 999))  # a master ahead of this log: told where it ends
    assert ahead.next_frames(100) == [struct.pack(">qi", end, 0)]


def test_the_controller_fills_leased_offsets_only_when_the_hold_ends(tmp_path):
    """The queue-offset lease (rmqha/broker/store/offset_lease.py) is filled when the master takes writes,
    never while it holds: the fetch puts the slave's records back at their own offsets first."""
    from rmqha.broker.config.properties import BrokerConfig
    from rmqha.broker.controller import BrokerController

    root = tmp_path / "m"
    cfg = BrokerConfig.from_properties(
        {
            "brokerName": "b",
            "brokerRole": "SYNC_MASTER",
            "storePathRootDir": str(root),
            "listenPort": "30911",
            "brokerIP1": "127.0.0.1",
            "haRecoveryEnable": "true",
            "haRecoveryPeers": "127.0.0.1:1",
            "haRecoveryWaitMs": "2000",
            "mappedFileSizeCommitLog": str(FILE),
            "mappedFileSizeConsumeQueue": str(20 * 1000),
        }
    )
    s = store(root)
    put(s, 8)  # two messages in each of 4 queues, leased past them
    bounds = dict(s.lease.bounds)
    s.commitlog.close()  # killed: the abort file stays, the lease too
    for cq in s.queues.values():
        cq.close()
    os.close(s._lock_fd)
    (root / "haPeers.json").write_text('{"peers": {"127.0.0.1": {"ack": 1}}, "streamLimit": 1073741824}')
    reactor = MemoryReactorClock()
    c = BrokerController(
        cfg,
        reactor,
        run_in_thread=lambda f, *a: __import__("twisted.internet.defer", fromlist=["x"]).maybeDeferred(f, *a),
    )
    c.start(listen=False)
    try:
        assert c.writes_held
        assert [c.store.max_queue_offset("T", q) for q in range(4)] == [2] * 4, "nothing filled while holding"
        reactor.advance(2.1)
        assert not c.writes_held
        assert [c.store.max_queue_offset("T", q) for q in range(4)] == [bounds[("T", q)] for q in range(4)]
        assert c.store.put_message(Message(topic="T", body=b"x", queue_id=1)).queue_offset == bounds[("T", 1)]
    finally:
        c.stop()


def test_the_fetched_tail_is_flushed_before_writes_are_taken(tmp_path):
    """The fetched records are fsynced (and the checkpoint says so) when the hold ends: a second power
    cut right after must not take them again, nor what the master acknowledges on top of them."""
    from rmqha.broker.store.message_store import CHECKPOINT_DURABLE, CHECKPOINT_DURABLE_AT

    p = Pair(tmp_path)
    p.fetcher.start()
    p.run()
    assert p.done == [RecoveryState.DONE]
    raw = (tmp_path / "master" / "checkpoint").read_bytes()
    (durable,) = CHECKPOINT_DURABLE.unpack_from(raw, CHECKPOINT_DURABLE_AT)
    assert durable == p.master.max_offset == p.slave.max_offset > p.cut


def started_fetcher_of_two_sources(tmp_path):
    """A master with 5 messages whose fetcher, started, asks sources 127.0.0.1:1 then :2 (memory reactor)."""
    reactor = MemoryReactorClock()
    master = store(tmp_path / "master")
    put(master, 5)
    done = []
    f = RecoveryFetcher(
        master, ["127.0.0.1:1", "127.0.0.1:2"], reactor, reactor, 30.0, HOST, 1 << 20, on_done=done.append
    )
    f.start()
    return reactor, master, done, f


def test_a_source_lost_mid_fetch_is_let_go_and_retried_after_the_others(tmp_path):
    from twisted.internet.error import ConnectionLost
    from twisted.internet.testing import StringTransport
    from twisted.python.failure import Failure

    reactor, master, done, f = started_fetcher_of_two_sources(tmp_path)
    assert [c[1] for c in reactor.tcpClients] == [1]
    proto = reactor.tcpClients[0][2].buildProtocol(None)
    proto.makeConnection(StringTransport())
    assert f.active is proto and f.status_sources[0].state == "FETCHING" and f.status_sources[0].attempts == 1
    proto.connectionLost(Failure(ConnectionLost("reset")))
    assert f.active is None and f.status_sources[0].state == "UNREACHABLE" and "reset" in f.status_sources[0].error
    proto.connectionLost(Failure(ConnectionLost("again")))  # a second report of the same loss changes nothing
    assert "again" not in f.status_sources[0].error
    reactor.advance(f.retry_s - 0.01)
    assert len(reactor.tcpClients) == 1, "not retried at once"
    reactor.advance(0.02)
    assert [c[1] for c in reactor.tcpClients] == [1, 2], "the other source first"
    assert [x.attempts for x in f.status_sources] == [1, 1] and f.status_sources[1].state == "CONNECTING"
    assert f.holding and not done


def test_a_loss_after_the_answer_or_after_the_hold_changes_nothing(tmp_path):
    reactor = MemoryReactorClock()
    master = store(tmp_path / "master")
    put(master, 5)
    done = []
    f = RecoveryFetcher(master, ["127.0.0.1:1"], reactor, reactor, 1.0, HOST, 1 << 20, on_done=done.append)
    f.start()
    src = f.status_sources[0]
    f.source_done(src, "COMPLETE", "")
    f.source_lost(src, "late reset")
    assert src.state == "COMPLETE" and src.error == ""
    reactor.advance(0)
    assert done == [RecoveryState.DONE]
    f2 = RecoveryFetcher(master, ["127.0.0.1:1"], reactor, reactor, 1.0, HOST, 1 << 20, on_done=done.append)
    f2.start()
    reactor.advance(1.0)  # timed out
    calls = len(reactor.getDelayedCalls())
    f2.source_lost(f2.status_sources[0], "reset")
    assert f2.status_sources[0].state == "UNREACHABLE" and len(reactor.getDelayedCalls()) == calls, "no retry"


def test_bytes_read_after_the_answer_start_no_second_fetch_from_the_next_source(tmp_path):
    """abortConnection closes the answered connection on a later turn of the reactor: bytes already
    read can still be delivered before it goes. They are ignored, so the source is done once and the
    next one is connected to once."""
    from twisted.internet.error import ConnectionAborted
    from twisted.internet.testing import StringTransport
    from twisted.python.failure import Failure

    reactor, master, done, f = started_fetcher_of_two_sources(tmp_path)
    proto = reactor.tcpClients[0][2].buildProtocol(None)
    t = StringTransport()
    proto.makeConnection(t)
    behind = struct.pack(">qi", 0, 0)  # a heartbeat below this master's end before any data: the source is behind
    proto.dataReceived(behind)
    assert f.status_sources[0].state == "SOURCE_BEHIND" and t.disconnecting
    proto.dataReceived(behind)  # read before the abort took effect
    proto.connectionLost(Failure(ConnectionAborted()))
    reactor.advance(0)
    assert [c[1] for c in reactor.tcpClients] == [1, 2], "the next source once"
    assert [s.attempts for s in f.status_sources] == [1, 1] and f.status_sources[0].state == "SOURCE_BEHIND"
    assert f.holding and not done


def test_a_record_exactly_filling_its_file_or_the_size_limit_is_taken_whole_or_in_pieces(tmp_path):
    slave = store(tmp_path / "slave")
    put(slave, 1)
    one = log_bytes(slave)
    n = len(one)
    last = bytearray(one)
    struct.pack_into(">q", last, 28, FILE - n)  # the same record, stored at the end of its file
    v = RecordVerifier(FILE - n, FILE, HOST, 1 << 20)
    assert v.feed(last[:-1]) == [], "its head declares exactly the file's rest: wait for the body"
    assert v.feed(last[-1:]) == [bytes(last)] and v.end == FILE
    at_limit = RecordVerifier(0, FILE, HOST, max_record=n)
    assert at_limit.feed(one[:-1]) == [] and at_limit.feed(one[-1:]) == [one]
    with pytest.raises(RecoveryRefused, match="does not fit"):
        RecordVerifier(FILE - n + 1, FILE, HOST, 1 << 20).feed(one[:-1])  # one byte more than the file's rest


class _PausingTransport:
    """A StringTransport whose buffer is 'full' after `room` writes: it pauses its producer, as Twisted's
    transports do."""

    def __init__(self, room, peer=("10.0.0.1", 5)):
        from twisted.internet.address import IPv4Address
        from twisted.internet.testing import StringTransport

        self.t = StringTransport(peerAddress=IPv4Address("TCP", *peer))
        self.room = room
        self.writes = 0
        self.t.write = self._write
        self._real_write = StringTransport.write.__get__(self.t)

    def _write(self, data):
        self._real_write(data)
        self.writes += 1
        if self.writes >= self.room:
            self.t.producer.pauseProducing()


def test_the_source_streams_as_a_push_producer_and_closes_on_a_bad_report(tmp_path):
    from twisted.internet.address import IPv4Address

    slave = store(tmp_path / "slave")
    put(slave, 1600)  # ~1.2 MB: more than one 1 MiB slice of the stream
    svc = RecoverySourceService(slave, MemoryReactorClock(), allowed=frozenset({"10.0.0.1"}))
    assert svc.buildProtocol(IPv4Address("TCP", "10.0.0.9", 5)) is None, "not in haAllowedAddresses"
    assert svc.status() == {"port": None, "connections": 0, "refused": 1}
    proto = svc.buildProtocol(IPv4Address("TCP", "10.0.0.1", 5))
    pt = _PausingTransport(room=1)
    proto.makeConnection(pt.t)
    assert svc.served == 1 and pt.t.producer is proto and pt.t.streaming is True
    assert proto.peer == "10.0.0.1:5"
    proto.dataReceived(struct.pack(">q", 0))  # the first report starts the stream...
    assert pt.writes == 1 and proto.paused and not proto.session.said_end  # ...until the transport is full
    proto.dataReceived(struct.pack(">q", 1000))  # an ack does not restart a paused stream
    assert pt.writes == 1
    pt.room = 10**9
    proto.resumeProducing()  # the buffer drained
    assert proto.session.said_end and not proto.paused
    stream = pt.t.value()
    fetch = FetchSession(RecordVerifier(0, FILE, HOST, 1 << 20))
    records, _ = fetch.on_data(stream)
    assert fetch.outcome == FetchOutcome.COMPLETE and b"".join(records) == log_bytes(slave)
    proto.stopProducing()
    assert proto.paused
    bad = svc.buildProtocol(IPv4Address("TCP", "10.0.0.1", 6))
    bt = _PausingTransport(room=10**9)
    bad.makeConnection(bt.t)
    bad.dataReceived(struct.pack(">q", -5))
    assert bt.t.disconnected and bt.t.value() == b"", "a negative report closes the connection, nothing sent"
    assert svc.status()["connections"] == 2


def test_the_fetch_protocol_acks_what_it_stored_and_closes_on_the_answer(tmp_path, caplog):
    from twisted.internet.error import ConnectionDone
    from twisted.internet.testing import StringTransport
    from twisted.python.failure import Failure

    slave = store(tmp_path / "slave")
    put(slave, 120)  # two 64 KiB files: a blank inside the fetched range
    cut = boundary_near(slave, slave.max_offset // 3)
    master = prefix_copy(slave, tmp_path / "master", cut)
    reactor = MemoryReactorClock()
    reactor.advance(100.0)  # a clock that does not start at 0
    done = []
    f = RecoveryFetcher(master, ["127.0.0.1:1"], reactor, reactor, 30.0, HOST, 1 << 20, on_done=done.append)
    f.start()
    assert reactor.tcpClients[0][:2] == ("127.0.0.1", 1) and reactor.tcpClients[0][3] == 5, "a 5 s connect timeout"
    proto = reactor.tcpClients[0][2].buildProtocol(None)
    t = StringTransport()
    proto.makeConnection(t)
    assert t.value() == struct.pack(">q", cut), "it reports where its log ends"
    assert f.active is proto and f.status_sources[0].state == "FETCHING"
    t.clear()
    src = SourceSession(slave.commitlog)
    src.on_report(struct.pack(">q", cut))
    stream = b"".join(src.next_frames(1 << 30))
    first = 12 + struct.unpack_from(">qi", stream)[1]  # the first frame: up to the end of the first file
    proto.dataReceived(stream[:first])
    assert master.max_offset > cut and t.value() == struct.pack(">q", master.max_offset), "an ack of what it stored"
    assert not t.disconnecting
    reactor.advance(1.5)
    proto.dataReceived(stream[first:])
    assert t.disconnected and proto.finished, "the answer came: the connection is closed"
    reactor.advance(0)
    assert done == [RecoveryState.DONE] and log_bytes(master) == log_bytes(slave)
    messages = sum(1 for _a, kind, *_ in slave.commitlog.walk(cut, slave.max_offset) if kind == "message")
    st = f.status()
    assert st["sources"][0] == {
        "address": "127.0.0.1:1",
        "state": "COMPLETE",
        "fetchedBytes": slave.max_offset - cut,
        "records": messages,  # the blank end of a file is fetched, but is no record
        "attempts": 1,
        "error": "",
    }
    assert st["heldSeconds"] == 1.5 and st["startOffset"] == cut and st["endOffset"] == slave.max_offset
    t.clear()
    proto.dataReceived(struct.pack(">qi", slave.max_offset, 4) + b"late")  # after the answer: ignored
    proto.connectionLost(Failure(ConnectionDone()))
    assert master.max_offset == slave.max_offset and f.status_sources[0].state == "COMPLETE"
    reactor.advance(60.0)  # the deadline was cancelled: no "ended before" error later
    assert "ended before" not in caplog.text
    assert f.status()["heldSeconds"] == 1.5, "the hold's length stays what it was"


def test_a_timeout_drops_the_source_still_sending_and_takes_nothing_after(tmp_path, caplog):
    from twisted.internet.testing import StringTransport

    slave = store(tmp_path / "slave")
    put(slave, 60)
    cut = boundary_near(slave, slave.max_offset // 2)
    master = prefix_copy(slave, tmp_path / "master", cut)
    reactor = MemoryReactorClock()
    done = []
    f = RecoveryFetcher(master, ["127.0.0.1:1"], reactor, reactor, 2.0, HOST, 1 << 20, on_done=done.append)
    f.start()
    proto = reactor.tcpClients[0][2].buildProtocol(None)
    t = StringTransport()
    proto.makeConnection(t)
    src = SourceSession(slave.commitlog)
    src.on_report(struct.pack(">q", cut))
    stream = b"".join(src.next_frames(1 << 30))
    first = 12 + struct.unpack_from(">qi", stream)[1]
    proto.dataReceived(stream[:first])
    taken = master.max_offset
    assert taken > cut
    reactor.advance(2.0)
    assert done == [RecoveryState.TIMED_OUT] and t.disconnected and f.active is proto
    assert "ended before 127.0.0.1:1 answered" in caplog.text
    proto.dataReceived(stream[first:])
    f.store_records([stream[first + 12 :]], f.status_sources[0])  # a late delivery is not stored either
    assert master.max_offset == taken


def test_proven_sources_keep_names_and_proven_addresses_in_order_ipv6_too():
    from rmqha.broker.ha.recovery import proven_sources

    srcs = ["broker-a-s:10912", "[::1]:10912", "[::2]:10912", "10.0.0.2:10912"]
    kept, dropped = proven_sources(srcs, {"::1": {}, "10.0.0.2": {}}, 1 << 30)
    assert kept == ["broker-a-s:10912", "[::1]:10912", "10.0.0.2:10912"]
    assert len(dropped) == 1 and dropped[0].startswith("[::2]:10912: ::2 was never proven")
    none, why = proven_sources(srcs, {}, 1 << 30)
    assert none == [] and len(why) == 4 and all("haPeers.json" in w for w in why)


def test_the_source_service_listens_and_says_on_which_port(tmp_path):
    slave = store(tmp_path / "slave")
    reactor = MemoryReactorClock()
    svc = RecoverySourceService(slave, reactor)
    port = svc.listen(reactor, 20913)
    assert port is svc.port and svc.status() == {"port": 20913, "connections": 0, "refused": 0}


def test_a_fetch_ends_at_its_answer_even_with_more_frames_in_the_same_read(tmp_path):
    slave = store(tmp_path / "slave")
    put(slave, 3)
    data = log_bytes(slave)
    junk = struct.pack(">qi", 10**6, 4) + b"junk"  # not contiguous: refused if it were read
    # the end of the log, then more bytes in the same read: the answer stands, the rest is not read
    fetch = FetchSession(RecordVerifier(0, FILE, HOST, 1 << 20))
    fetch.on_data(struct.pack(">qi", 0, len(data)) + data + struct.pack(">qi", len(data), 0) + junk)
    assert fetch.outcome == FetchOutcome.COMPLETE and fetch.source_end == len(data)
    # a source behind this master, then more
    behind = FetchSession(RecordVerifier(len(data), FILE, HOST, 1 << 20))
    assert behind.on_data(struct.pack(">qi", 5, 0) + junk) == ([], None)
    assert behind.outcome == FetchOutcome.SOURCE_BEHIND and behind.source_end == 5
    # a 4.x heartbeat from an older position after data does not end the fetch: the end after it does
    older = FetchSession(RecordVerifier(0, FILE, HOST, 1 << 20))
    older.on_data(
        struct.pack(">qi", 0, len(data)) + data + struct.pack(">qi", 10, 0) + struct.pack(">qi", len(data), 0)
    )
    assert older.outcome == FetchOutcome.COMPLETE and older.source_end == len(data)


def test_a_source_whose_log_expires_under_the_fetch_stops_without_claiming_its_end(tmp_path):
    """Retention deletes the source's first commit-log file while a master fetches from it: the next
    read finds nothing, so the source sends nothing more (the master's hold then ends at its deadline)
    and never says its log ends where it does not."""
    slave = store(tmp_path / "slave")
    put(slave, 120)  # two 64 KiB files
    src = SourceSession(slave.commitlog, batch=1000)
    src.on_report(struct.pack(">q", 0))
    assert len(src.next_frames(3000)) == 6 and src.next == 3000
    first = slave.commitlog.queue.files.pop(0)  # as retention deletes an expired file
    first.destroy()
    assert src.next_frames(1 << 20) == [] and src.next == 3000 and not src.said_end


def test_status_gives_the_hold_so_far_to_the_millisecond(tmp_path):
    reactor = MemoryReactorClock()
    master = store(tmp_path / "master")
    f = RecoveryFetcher(master, ["127.0.0.1:1"], reactor, reactor, 30.0, HOST, 1 << 20, on_done=lambda s: None)
    f.start()
    reactor.advance(1.23456)
    assert f.status()["heldSeconds"] == 1.235 and f.holding
