"""Each planted bug (rmqha/controls/planted.py) does what it says and nothing without plantBug; the audit-side
proof that each is caught is tests/integration/test_planted_bugs.py."""

import pytest

from rmqha.broker import __main__ as entry
from rmqha.broker.config.properties import ConfigError
from rmqha.broker.server import BrokerServer
from rmqha.controls import planted
from rmqha.broker.remoting.codes import ResponseCode

from ..processors.harness import TOPIC, Broker, make_config, now_thread, send_v1
from ..processors.test_send import stored


def test_unknown_bugs_are_a_config_error_naming_the_known_ones(tmp_path, capsys):
    with pytest.raises(ValueError, match="unknown planted bug.*nope.*known: ack-before-replication"):
        planted.seams_for("skip-flush,nope")
    # the process entry refuses them before anything starts, as a config error (exit 2)
    conf = tmp_path / "broker.properties"
    conf.write_text(
        f"brokerName=broker-a\nbrokerId=0\nstorePathRootDir={tmp_path / 'store'}\nplantBug=skip-flush,nope\n"
    )
    assert entry.main(["-c", str(conf), "--check"]) == 2
    assert "plantBug='skip-flush,nope': unknown planted bug(s) nope; known: ack-before-replication" in (
        capsys.readouterr().err
    )
    assert entry.controls_for(make_config(tmp_path)).names == frozenset()
    assert entry.controls_for(make_config(tmp_path, plantBug="skip-flush")).names == {"skip-flush"}
    assert make_config(tmp_path, plantBug=" skip-flush , duplicate-store").planted_bugs == {
        "skip-flush",
        "duplicate-store",
    }
    assert make_config(tmp_path).planted_bugs == frozenset()


def test_ack_before_replication_answers_success_with_no_slave(tmp_path):
    b = Broker(tmp_path / "b", brokerRole="SYNC_MASTER", plantBug="ack-before-replication")
    try:
        assert b.call(send_v1()).code == ResponseCode.SUCCESS  # a correct broker: SLAVE_NOT_AVAILABLE
        assert b.server.controller.status()["plantedBugs"] == ["ack-before-replication"]
    finally:
        b.stop()


def test_skip_flush_acknowledges_sync_flush_with_nothing_durable(tmp_path):
    b = Broker(tmp_path / "b", flushDiskType="SYNC_FLUSH", plantBug="skip-flush")
    try:
        assert b.call(send_v1()).code == ResponseCode.SUCCESS
        b.clock.advance(5)
        assert b.server.controller.flusher.durable_offset == 0 < b.store.max_offset
    finally:
        b.stop()


def test_lie_about_fsync_reports_durable_what_it_never_synced(tmp_path):
    b = Broker(tmp_path / "b", flushDiskType="SYNC_FLUSH", plantBug="lie-about-fsync")
    try:
        assert b.call(send_v1()).code == ResponseCode.SUCCESS
        b.clock.advance(1)  # the first flush is a real one: the file and its size are on disk
        assert b.call(send_v1()).code == ResponseCode.SUCCESS  # SYNC_FLUSH answered as if on disk
        b.clock.advance(5)
        f = b.store.commitlog.queue.last
        assert b.server.controller.flusher.durable_offset == b.store.max_offset > 0
        assert f.flushed < f.wrote  # while the second message was never synced
    finally:
        b.stop()


def test_duplicate_store_appends_each_message_twice(tmp_path):
    b = Broker(tmp_path / "b", plantBug="duplicate-store")
    try:
        assert b.call(send_v1(body=b"once")).code == ResponseCode.SUCCESS
        assert [m.body for m in stored(b)] == [b"once", b"once"]
    finally:
        b.stop()


def test_no_bug_no_status_field(tmp_path):
    b = Broker(tmp_path / "b")
    try:
        assert "plantedBugs" not in b.server.controller.status()
        assert b.server.controller.bugs == frozenset()
    finally:
        b.stop()


def test_corrupting_store_flips_one_bit_of_the_first_chunk_only():
    got = []

    class Store:
        max_offset = 7

        def append_replicated(self, offset, data):
            got.append((offset, data))

    s = planted.CorruptingStore(Store())
    s.append_replicated(100, [b"\x00\x00\x00\x00", b"abc"])
    s.append_replicated(200, b"\x10\x20\x30")
    assert got == [(100, [b"\x00\x00\x01\x00", b"abc"]), (200, [b"\x10\x21\x30"])]
    assert s.max_offset == 7  # everything else passes through
    assert planted.corrupt(b"") == b""


def test_lose_tail_on_restart_forks_a_master_without_a_power_loss(tmp_path):
    b = Broker(tmp_path / "b", brokerRole="SYNC_MASTER")
    try:
        for _ in range(300):  # ~47 KB: more than the 16 KiB the bug drops
            b.call(send_v1())
        before = b.store.max_offset
    finally:
        b.stop()
    again = Broker(tmp_path / "b", brokerRole="SYNC_MASTER", plantBug="lose-tail-on-restart")
    try:
        after = again.store.max_offset
        assert before - planted.LOST_TAIL_BYTES - 1024 < after <= before - planted.LOST_TAIL_BYTES
        assert again.store.recovery.end_offset == after  # recovered to a whole record: a clean, shorter log
    finally:
        again.stop()
    clean = Broker(tmp_path / "b", brokerRole="SYNC_MASTER")  # without the bug nothing more is lost
    try:
        assert clean.store.max_offset == after
    finally:
        clean.stop()


def _records(b):
    return [
        info
        for _at, kind, _size, info, _r in b.store.commitlog.walk(0, b.store.max_offset, full=True)
        if kind == "message"
    ]


def test_skip_queue_entry_stores_every_message_and_queues_48_of_50(tmp_path):
    b = Broker(tmp_path / "b", plantBug="skip-queue-entry")
    try:
        for i in range(100):
            assert b.call(send_v1(body=b"m%d" % i, queue_id=0)).code == ResponseCode.SUCCESS
        b.clock.advance(0.1)
        assert len(_records(b)) == 100
        cq = b.store.queue(TOPIC, 0)
        pointed = {u[0] for u in (cq.get(i) for i in range(cq.max_index)) if u is not None}
        phys = [m.physical_offset for m in _records(b)]
        # queue offsets 49 and 99: stored, acknowledged, and no unit points at them
        assert [i for i, p in enumerate(phys) if p not in pointed] == [49, 99]
    finally:
        b.stop()


def test_ack_then_truncate_cuts_acknowledged_log_once_and_writes_on(tmp_path):
    b = Broker(tmp_path / "b", plantBug="ack-then-truncate")
    try:
        for i in range(planted.TRUNCATE_AFTER_PUTS):
            assert b.call(send_v1(body=b"x" * 500)).code == ResponseCode.SUCCESS
        b.clock.advance(0.1)
        size = _records(b)[0].total_size
        after = b.store.max_offset
        # every put was answered SUCCESS, then the last 16 KiB (whole records) were cut
        assert planted.TRUNCATE_AFTER_PUTS * size - after >= planted.LOST_TAIL_BYTES
        assert len(_records(b)) == after // size
        assert b.call(send_v1(body=b"y" * 500)).code == ResponseCode.SUCCESS
        b.clock.advance(0.1)
        assert b.store.max_offset == after + size and _records(b)[-1].body == b"y" * 500
    finally:
        b.stop()


def test_a_planted_bug_set_without_its_controls_is_refused(tmp_path):
    """A BrokerServer built in code with plantBug and no seams would run correct while the test believes it
    broken: it refuses to start instead."""
    with pytest.raises(ConfigError, match="plantBug='skip-flush' but the controls installed are"):
        BrokerServer(make_config(tmp_path, plantBug="skip-flush"), None, run_in_thread=now_thread)
