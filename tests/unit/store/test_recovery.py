"""Restart after a crash: the commit log keeps every complete record and nothing after it."""

import os
import struct

from rmqha.broker.store import record
from rmqha.broker.store.consume_queue import UNIT_SIZE
from rmqha.broker.store.message_store import PutStatus

from .conftest import FILE_SIZE, msg, open_store


def crash(store):
    """Stop as a killed process would: no flush, no checkpoint, the abort file stays."""
    store.commitlog.close()
    for cq in store.queues.values():
        cq.close()
    os.close(store._lock_fd)
    store.closed = True


def fill(store, n, **kw):
    return [store.put_message(msg(i, **kw)) for i in range(n)]


def log_file(tmp_path, offset=0):
    return tmp_path / "commitlog" / f"{offset:020d}"


def bodies(store, topic="T", qid=0):
    out, off = [], 0
    while True:
        got = store.get_messages(topic, qid, off, 32)
        if got.next_begin_offset <= off:  # the end (a run of fillers moves the offset with no record)
            return out
        out += [record.scan(b).message.body for b in got.records]
        off = got.next_begin_offset


def test_crash_is_detected_and_intact_log_kept(tmp_path):
    s = open_store(tmp_path)
    res = fill(s, 30)
    crash(s)
    s = open_store(tmp_path)
    assert not s.was_clean_shutdown
    assert s.max_offset == res[-1].next_offset and s.max_queue_offset("T", 0) == 30
    s.shutdown()


def test_torn_tail_is_truncated_and_wiped(tmp_path):
    s = open_store(tmp_path)
    res = fill(s, 10)
    crash(s)
    last = res[-1]
    # Tear the last record in half: its second half never reached the disk.
    with open(log_file(tmp_path), "r+b") as fh:
        fh.seek(last.wrote_offset + last.wrote_bytes // 2)
        fh.write(bytes(last.wrote_bytes - last.wrote_bytes // 2))
    s = open_store(tmp_path)
    assert s.max_offset == last.wrote_offset
    assert s.recovery.reason.startswith("invalid record at") and "CRC" in s.recovery.reason
    assert s.max_queue_offset("T", 0) == 9, "the unit of the torn record is dropped"
    data = open(log_file(tmp_path), "rb").read()
    assert data[last.wrote_offset :] == bytes(FILE_SIZE - last.wrote_offset), "stale bytes wiped"
    r = s.put_message(msg(77))
    # the torn record's queue offset 9 is not given again (a consumer may have read it before the crash):
    # the new message goes past the lease, the offsets between are fillers (test_power_loss_offset_reuse.py)
    assert r.status == PutStatus.PUT_OK and r.wrote_offset == last.wrote_offset and r.queue_offset > 9
    assert len(bodies(s)) == 10 and bodies(s)[-1] == msg(77).body
    s.shutdown()


def test_garbage_after_last_record(tmp_path):
    s = open_store(tmp_path)
    res = fill(s, 5)
    end = res[-1].next_offset
    crash(s)
    with open(log_file(tmp_path), "r+b") as fh:
        fh.seek(end)
        fh.write(os.urandom(500))
    s = open_store(tmp_path)
    assert s.max_offset == end and s.recovery.discarded_bytes >= 499
    s.shutdown()
    s = open_store(tmp_path)  # and the next start is clean and the same
    assert s.max_offset == end and s.recovery.discarded_bytes == 0
    s.shutdown()


def test_record_that_looks_valid_but_lies_about_its_size(tmp_path):
    s = open_store(tmp_path)
    res = fill(s, 4)
    crash(s)
    with open(log_file(tmp_path), "r+b") as fh:
        fh.seek(res[2].wrote_offset)
        fh.write(struct.pack(">i", res[2].wrote_bytes + 8))
    s = open_store(tmp_path)
    assert s.max_offset == res[2].wrote_offset
    assert "TOTALSIZE" in s.recovery.reason or "CRC" in s.recovery.reason
    s.shutdown()


def test_crash_between_commit_log_and_consume_queue_rebuilds_units(tmp_path):
    s = open_store(tmp_path)
    fill(s, 20, queue_id=1)
    crash(s)
    # The consume queue lost its last 6 units (never written before the crash).
    cq = tmp_path / "consumequeue" / "T" / "1" / f"{0:020d}"
    with open(cq, "r+b") as fh:
        fh.seek(14 * UNIT_SIZE)
        fh.write(bytes(6 * UNIT_SIZE))
    s = open_store(tmp_path)
    assert s.max_queue_offset("T", 1) == 20
    assert [b.split(b":")[0] for b in bodies(s, qid=1)] == [f"m{i}".encode() for i in range(20)]
    s.shutdown()


def test_consume_queue_lost_entirely(tmp_path):
    s = open_store(tmp_path)
    fill(s, 12, queue_id=2)
    crash(s)
    import shutil

    shutil.rmtree(tmp_path / "consumequeue")
    s = open_store(tmp_path)
    assert s.max_queue_offset("T", 2) == 12 and len(bodies(s, qid=2)) == 12
    s.shutdown()


def test_consume_queue_ahead_of_commit_log_is_cut_back(tmp_path):
    s = open_store(tmp_path)
    res = fill(s, 8)
    crash(s)
    with open(log_file(tmp_path), "r+b") as fh:  # the last two records never hit the disk
        fh.seek(res[6].wrote_offset)
        fh.write(bytes(res[7].next_offset - res[6].wrote_offset))
    s = open_store(tmp_path)
    assert s.max_offset == res[6].wrote_offset and s.max_queue_offset("T", 0) == 6
    s.shutdown()


def test_recovery_across_files_with_blank_markers(tmp_path):
    s = open_store(tmp_path)
    res = fill(s, 60, size=250)  # ~4 files
    assert len(os.listdir(tmp_path / "commitlog")) >= 4
    crash(s)
    s = open_store(tmp_path)
    assert s.max_offset == res[-1].next_offset and s.max_queue_offset("T", 0) == 60
    assert len(bodies(s)) == 60
    s.shutdown()


def test_empty_next_file_after_blank_is_dropped(tmp_path):
    s = open_store(tmp_path)
    fill(s, 60, size=250)
    end = s.max_offset
    crash(s)
    nxt = (end // FILE_SIZE + 1) * FILE_SIZE
    with open(tmp_path / "commitlog" / f"{nxt:020d}", "wb") as fh:
        fh.truncate(FILE_SIZE)
    s = open_store(tmp_path)
    assert s.max_offset == end
    assert not os.path.exists(tmp_path / "commitlog" / f"{nxt:020d}")
    s.shutdown()
