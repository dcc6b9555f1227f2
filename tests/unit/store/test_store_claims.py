"""The store claims (docs/broker.md), each checked: checkCRCOnRecover, recovery from the third-last file, a full
disk at file creation, and the flush interval and group commit (SYNC_FLUSH) as the broker wires them."""

import errno
import os

import pytest

from rmqha.broker.store import mapped_file
from rmqha.broker.store.message_store import PutStatus

from .conftest import FILE_SIZE, msg, open_store
from .test_recovery import crash, log_file


def flip_body_byte(path, result, base=0):
    """Damage one byte inside a record's body (its CRC no longer matches; its size fields still do)."""
    with open(path, "r+b") as fh:
        fh.seek(result.wrote_offset - base + result.wrote_bytes - 40)
        b = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([b[0] ^ 0x55]))


@pytest.mark.parametrize("check_crc", [True, False])
def test_check_crc_on_recover_decides_whether_a_damaged_body_ends_the_log(tmp_path, check_crc):
    s = open_store(tmp_path)
    res = [s.put_message(msg(i)) for i in range(6)]
    crash(s)
    flip_body_byte(log_file(tmp_path), res[3])
    s = open_store(tmp_path, check_crc_on_recover=check_crc)
    try:
        if check_crc:  # the record with the bad CRC and everything after it are gone
            assert s.max_offset == res[3].wrote_offset
            assert s.recovery.reason.startswith(f"invalid record at {res[3].wrote_offset}: body CRC ")
            assert s.max_queue_offset("T", 0) == 3
        else:  # checkCRCOnRecover=false: the walk trusts the sizes, the log is kept whole
            assert s.max_offset == res[-1].next_offset and s.recovery.reason == ""
            assert s.max_queue_offset("T", 0) == 6
    finally:
        s.shutdown()


def fill_files(store, files):
    """Messages until the log spans `files` files; returns the put results."""
    out = []
    while len(store.commitlog.queue.files) < files or not out:
        out.append(store.put_message(msg(len(out), size=300)))
    return out


def test_recovery_walks_from_the_third_last_file(tmp_path):
    s = open_store(tmp_path)
    res = fill_files(s, 5)
    starts = [f.base for f in s.commitlog.queue.files]
    assert len(starts) == 5 and starts[1] == FILE_SIZE
    crash(s)
    # Damage a record in the oldest file: recovery does not read it (the reference starts at the
    # third-last file too), so the log is kept whole.
    first = next(r for r in res if r.wrote_offset < FILE_SIZE)
    flip_body_byte(log_file(tmp_path, 0), first)
    s = open_store(tmp_path)
    assert s.recovery.start_offset == starts[2] and s.recovery.reason == ""
    assert s.max_offset == res[-1].next_offset
    assert s.recovery.records == sum(1 for r in res if r.wrote_offset >= starts[2])
    crash(s)
    # The same damage in the third-last file ends the log there.
    third = next(r for r in res if r.wrote_offset >= starts[2])
    flip_body_byte(log_file(tmp_path, starts[2]), third, starts[2])
    s = open_store(tmp_path)
    try:
        assert s.recovery.start_offset == starts[2]
        assert s.max_offset == third.wrote_offset and "CRC" in s.recovery.reason
        bases = [f.base for f in s.commitlog.queue.files]
        assert bases[:2] == starts[:2] and starts[3] not in bases and starts[4] not in bases  # later files deleted
    finally:
        s.shutdown()


def test_recovery_of_a_log_with_fewer_than_three_files_starts_at_the_first(tmp_path):
    s = open_store(tmp_path)
    res = fill_files(s, 2)
    crash(s)
    s = open_store(tmp_path)
    try:
        assert s.recovery.start_offset == 0 and s.recovery.records == len(res)
    finally:
        s.shutdown()


def test_a_full_disk_at_file_creation_is_disk_full_and_loses_nothing(tmp_path, monkeypatch):
    s = open_store(tmp_path)
    try:
        res = [s.put_message(msg(0, size=300))]
        size = res[0].wrote_bytes
        while s.commitlog.queue.files[-1].free >= size + 8:  # fill the first file: the next one will not fit
            res.append(s.put_message(msg(len(res), size=300)))
        end, units = s.max_offset, s.max_queue_offset("T", 0)
        real = mapped_file.os.posix_fallocate

        def no_space(fd, offset, length):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(mapped_file.os, "posix_fallocate", no_space)
        r = s.put_message(msg(1000, size=300))  # needs the next file, which cannot be reserved
        assert r.status == PutStatus.DISK_FULL and not r.stored
        assert "No space left on device reserving" in r.remark
        assert not os.path.exists(log_file(tmp_path, FILE_SIZE)), "the half-made file is removed"
        assert s.max_queue_offset("T", 0) == units
        assert s.max_offset <= FILE_SIZE
        monkeypatch.setattr(mapped_file.os, "posix_fallocate", real)
        r = s.put_message(msg(1001, size=300))
        assert r.status == PutStatus.PUT_OK and r.wrote_offset == FILE_SIZE and r.queue_offset == units
        got = s.get_messages("T", 0, 0, 64)
        assert len(got.records) == units + 1 and end <= FILE_SIZE
    finally:
        s.shutdown()


def test_the_broker_wires_flush_interval_sync_flush_and_its_timeout(tmp_path):
    from tests.unit.processors.harness import Broker

    b = Broker(tmp_path / "sync", flushDiskType="SYNC_FLUSH", flushIntervalCommitLog="200", syncFlushTimeout="1500")
    try:
        f = b.server.controller.flusher
        assert (f.sync, f.interval_s, f.timeout_s) == (True, 0.2, 1.5)
    finally:
        b.stop()
    b = Broker(tmp_path / "async", flushIntervalCommitLog="300")
    try:
        f = b.server.controller.flusher
        assert (f.sync, f.interval_s) == (False, 0.3)
    finally:
        b.stop()


def test_async_flush_runs_every_interval_exactly():
    from twisted.internet import defer
    from twisted.internet.task import Clock
    from rmqha.broker.store.flush import FlushService

    class Store:
        max_offset, min_offset, was_clean_shutdown = 0, 0, True

        def flush(self):
            flushes.append(clock.seconds())
            return self.max_offset

    flushes, clock, store = [], Clock(), Store()
    fs = FlushService(store, clock=clock, run_in_thread=lambda fn: defer.maybeDeferred(fn), sync=False, interval_ms=250)
    fs.start()
    for i in range(1, 11):  # new bytes before every tick
        store.max_offset = 100 * i
        clock.advance(0.125)
        n = len(flushes)
        clock.advance(0.125)
        assert len(flushes) == n + 1, f"tick {i} missing"
    assert fs.durable_offset == 1000 and flushes == [0.25 * i for i in range(1, 11)]
    clock.advance(1.0)  # nothing new: no flush
    assert len(flushes) == 10
