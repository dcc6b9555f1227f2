import os
import struct

import pytest

from rmqha.broker.store import record
from rmqha.broker.store.mapped_file import StoreError
from rmqha.broker.store.message_store import GetStatus, PutStatus
from rmqha.broker.store.record import Scan

from .conftest import FILE_SIZE, msg, open_store


def test_files_named_by_offset_and_blank_at_file_end(store_factory, tmp_path):
    s = store_factory()
    results = [s.put_message(msg(i, size=300)) for i in range(30)]
    assert all(r.status == PutStatus.PUT_OK for r in results)
    files = sorted(os.listdir(tmp_path / "s" / "commitlog"))
    assert files[:2] == ["00000000000000000000", f"{FILE_SIZE:020d}"]
    for name in files:
        assert os.path.getsize(tmp_path / "s" / "commitlog" / name) == FILE_SIZE
    # No record spans two files; each full file ends with a blank whose TOTALSIZE is the rest of it.
    for r in results:
        assert r.wrote_offset // FILE_SIZE == (r.next_offset - 1) // FILE_SIZE
    first = open(tmp_path / "s" / "commitlog" / files[0], "rb").read()
    ends = [r.next_offset for r in results if r.next_offset < FILE_SIZE]
    last_end = max(ends)
    length, magic = struct.unpack_from(">iI", first, last_end)
    assert magic == record.BLANK_MAGIC and length == FILE_SIZE - last_end
    assert results[len(ends)].wrote_offset == FILE_SIZE
    # Queue offsets count messages; physical offsets are byte positions; msgId encodes them.
    assert [r.queue_offset for r in results] == list(range(30))
    assert record.parse_offset_msg_id(results[5].msg_id)[1] == results[5].wrote_offset


def test_read_and_pull(store_factory):
    s = store_factory()
    for i in range(10):
        s.put_message(msg(i, tags="A" if i % 2 else "B"))
    got = s.get_messages("T", 0, 0, 32)
    assert got.status == GetStatus.FOUND and len(got.records) == 10 and got.next_begin_offset == 10
    m = record.scan(got.records[3]).message
    assert m.body.startswith(b"m3:") and m.queue_offset == 3
    only_a = s.get_messages("T", 0, 0, 32, tag_codes={record.java_string_hash("A")})
    assert [record.scan(b).message.queue_offset for b in only_a.records] == [1, 3, 5, 7, 9]
    assert s.get_messages("T", 0, 10, 32).status == GetStatus.OFFSET_OVERFLOW_ONE
    assert s.get_messages("T", 0, 11, 32).status == GetStatus.OFFSET_OVERFLOW_BADLY
    assert s.get_messages("T", 9, 0, 32).status == GetStatus.NO_MATCHED_LOGIC_QUEUE
    none = s.get_messages("T", 0, 0, 32, tag_codes={12345})
    assert none.status == GetStatus.NO_MATCHED_MESSAGE and none.next_begin_offset == 10


def test_clean_restart_keeps_everything(tmp_path):
    s = open_store(tmp_path)
    for i in range(40):
        s.put_message(msg(i, queue_id=i % 3, size=150))
    end = s.max_offset
    s.shutdown()
    assert not os.path.exists(tmp_path / "abort")
    s = open_store(tmp_path)
    assert s.was_clean_shutdown and s.max_offset == end
    assert [s.max_queue_offset("T", q) for q in range(3)] == [14, 13, 13]
    r = s.put_message(msg(99, queue_id=0))
    assert r.queue_offset == 14 and r.wrote_offset == end
    s.shutdown()


def test_wrong_file_size_refuses_to_load(tmp_path):
    s = open_store(tmp_path)
    s.put_message(msg(1))
    s.shutdown()
    with pytest.raises(StoreError, match="mappedFileSize"):
        open_store(tmp_path, file_size=FILE_SIZE * 2)


def test_second_broker_on_same_store_is_refused(store_factory, tmp_path):
    store_factory("x")
    with pytest.raises(StoreError, match="another broker"):
        open_store(tmp_path / "x")


def test_full_disk_fails_cleanly_and_loses_nothing(store_factory, monkeypatch):
    import errno
    from rmqha.broker.store import mapped_file

    s = store_factory()
    good = [s.put_message(msg(i)) for i in range(5)]
    end = s.max_offset
    real = os.pwritev

    def full(fd, buffers, pos):
        # Write part of it first, as a real full disk can, then fail.
        real(fd, [bytes(buffers[0])[:7]], pos)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(mapped_file.os, "pwritev", full)
    r = s.put_message(msg(100))
    assert r.status == PutStatus.DISK_FULL and "disk full" in r.remark and not r.stored
    assert s.max_offset == end and s.max_queue_offset("T", 0) == 5
    monkeypatch.setattr(mapped_file.os, "pwritev", real)
    r = s.put_message(msg(101))
    assert r.status == PutStatus.PUT_OK and r.wrote_offset == end and r.queue_offset == 5
    got = s.get_messages("T", 0, 0, 32)
    bodies = [record.scan(b).message.body[:5] for b in got.records]
    assert bodies == [b"m0:m0", b"m1:m1", b"m2:m2", b"m3:m3", b"m4:m4", b"m101:"]
    assert [g.wrote_offset for g in good] == [record.scan(b).message.physical_offset for b in got.records[:5]]


def test_walk_reports_why_it_stopped(store_factory):
    s = store_factory()
    res = [s.put_message(msg(i)) for i in range(3)]
    kinds = [kind for _, kind, *_ in s.commitlog.walk(0)]
    assert kinds == [Scan.MESSAGE] * 3  # the end of the data: no stop record
    # a damaged body: the walk yields the record that stopped it, with the reason
    f = s.commitlog.queue.files[0]
    f.write_at(res[1].wrote_offset + res[1].wrote_bytes - 30, b"\xff")
    walked = list(s.commitlog.walk(0))
    assert [(off, kind) for off, kind, *_ in walked] == [(0, Scan.MESSAGE), (res[1].wrote_offset, Scan.INVALID)]
    assert walked[-1][4].startswith("body CRC ") and " != stored " in walked[-1][4]
    assert [kind for _, kind, *_ in s.commitlog.walk(0, check_crc=False)] == [Scan.MESSAGE] * 3
    # a walk bounded inside a record: the partial record it ends on
    walked = list(s.commitlog.walk(0, end=res[0].wrote_bytes + 20, check_crc=False))
    assert [kind for _, kind, *_ in walked] == [Scan.MESSAGE, Scan.PARTIAL]
    assert walked[-1][4] == f"record of {res[1].wrote_bytes} bytes, 20 present"


@pytest.mark.parametrize("read_size", [1, 150, 333, 1000, 1 << 20])
def test_walk_gives_the_same_records_whatever_it_reads_at_once(store_factory, read_size):
    """Dispatch walks with small reads (one slice); records that straddle a read, records larger
    than a read, blanks at a file's end and the next file come out exactly as with the default."""
    s = store_factory()
    for i in range(40):
        s.put_message(msg(i, size=(50, 700, 2500)[i % 3]))
    whole = [(off, kind, size) for off, kind, size, *_ in s.commitlog.walk(0, check_crc=False)]
    assert len([k for _, k, _ in whole if k == Scan.MESSAGE]) == 40 and any(k == Scan.BLANK for _, k, _ in whole)
    small = [(off, kind, size) for off, kind, size, *_ in s.commitlog.walk(0, check_crc=False, read_size=read_size)]
    assert small == whole


def test_dispatch_reads_about_one_slice_at_a_time(store_factory, monkeypatch):
    """A dispatch slice reads its slice (plus a margin for the straddling record), not 4 MiB."""
    s = store_factory()
    for i in range(60):
        s.put_message(msg(i, size=700))
    s.dispatch_pending()
    s.reput_offset = 0  # as a slave that has everything still to dispatch
    reads = []
    real = type(s.commitlog.queue.files[0]).read
    monkeypatch.setattr(
        type(s.commitlog.queue.files[0]), "read", lambda self, pos, n: reads.append(n) or real(self, pos, n)
    )
    s.dispatch(max_bytes=4096)
    from rmqha.broker.store.message_store import DISPATCH_READ_MARGIN

    assert reads and max(reads) <= 4096 + DISPATCH_READ_MARGIN
