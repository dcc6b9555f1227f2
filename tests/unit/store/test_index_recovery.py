"""The message index after a restart: it ends exactly where the recovered commit log ends, and a rebuild
gives the bytes an uninterrupted build gives (file names aside: a file made by the rebuild is named by
the time it was made, as in the reference)."""

from __future__ import annotations

import shutil

import pytest

from rmqha.broker.store.mapped_file import list_files

from .index_oracle import Clock, crash, fail_index_write, index_files, message, open_store

T0 = 1_700_000_000_000
STEP = 700
SLOTS, ITEMS = 7, 5  # 4 items per file: records with three keys straddle files
FAR = 2**62


def records(n, start=0, tag="a"):
    return [message(i, keys=f"{tag}{i % 3} common") for i in range(start, start + n)]


def put(store, clock, msgs, t_from):
    """Put msgs at store times t_from + STEP, + 2*STEP, ...; returns the results."""
    out = []
    for k, m in enumerate(msgs):
        clock.t = t_from + STEP * (k + 1)
        r = store.put_message(m)
        assert r.status == "PUT_OK"
        out.append(r)
    return out


def reference(tmp_path, msgs_before, msgs_after=(), name="ref"):
    """An uninterrupted build: msgs_before then msgs_after, at the times the tests use."""
    clock = Clock(T0)
    s = open_store(tmp_path / name, clock, SLOTS, ITEMS)
    put(s, clock, msgs_before, T0)
    put(s, clock, list(msgs_after), T0 + STEP * len(msgs_before))
    s.shutdown()
    return list(index_files(tmp_path / name).values())


def test_index_behind_the_log_is_rebuilt_to_the_same_bytes(tmp_path):
    msgs = records(12)
    want = reference(tmp_path, msgs)
    clock = Clock(T0)
    root = tmp_path / "crashed"
    s = open_store(root, clock, SLOTS, ITEMS)
    res = put(s, clock, msgs[:5], T0)
    shutil.copytree(root / "index", tmp_path / "saved")  # the index as it was after 5 records
    put(s, clock, msgs[5:], T0 + 5 * STEP)
    crash(s)
    shutil.rmtree(root / "index")
    shutil.copytree(tmp_path / "saved", root / "index")  # ... and the log 7 records further
    clock.t += 60_000
    s = open_store(root, clock, SLOTS, ITEMS)
    rec = s.index.recovery
    assert (rec.repaired, rec.undone, rec.start) == (False, 0, res[4].wrote_offset)
    assert rec.records == 8 and rec.keys == 7 * 3
    assert s.index.query("T", "common", 64, 0, FAR).phy_offsets[0] == s.max_offset - res[0].wrote_bytes
    s.shutdown()
    assert list(index_files(root).values()) == want
    saved = sorted(p.name for p in (tmp_path / "saved").iterdir())
    assert list(index_files(root))[: len(saved)] == saved  # the files it had are kept, under their names


@pytest.mark.parametrize("at_record", range(4))
@pytest.mark.parametrize("nth_write", range(7))
def test_a_record_half_put_is_undone_and_the_rest_rebuilt(tmp_path, monkeypatch, at_record, nth_write):
    """A write fails part way through a record's keys (a disk full; a crash there leaves the same bytes):
    its items, some of its slots, written; the header not. Building stops, sends go on. After a restart
    the slots are put back from the items' prevIndex, the items zeroed, and the index rebuilt from the
    last whole record on: the same bytes as an uninterrupted build. Each record puts its items (one
    write), its slots, its header; records 1 and 2 straddle two files (the new file's header is written
    when it is made), so the failing write is sometimes a new file's first."""
    msgs = records(8)
    want = reference(tmp_path, msgs)
    clock = Clock(T0)
    root = tmp_path / "crashed"
    s = open_store(root, clock, SLOTS, ITEMS)
    put(s, clock, msgs[:at_record], T0)
    heal = fail_index_write(monkeypatch, nth_write)
    put(s, clock, msgs[at_record:], T0 + at_record * STEP)  # every send stored all the same
    assert s.index.error.startswith("index build stopped at commit-log offset")
    crash(s)
    heal()
    s = open_store(root, clock, SLOTS, ITEMS)
    rec = s.index.recovery
    assert rec.undone == 0 and not s.index.error
    s.shutdown()
    assert list(index_files(root).values()) == want


def cut_log(root, offset, file_size=1 << 20):
    """What the chaos kit's power loss leaves: the commit log holds nothing from `offset` on."""
    for base, path in list_files(str(root / "commitlog")):
        if base + file_size <= offset:
            continue
        with open(path, "r+b") as fh:
            start = max(0, offset - base)
            fh.seek(start)
            fh.write(bytes(file_size - start))


def test_items_past_the_log_end_are_undone(tmp_path):
    """A power loss cut the commit log under the index: the items pointing at or past the log's new end
    are undone, newest first (files left without an item deleted), so the records written next are
    indexed as if the lost ones had never been."""
    before, lost, after = records(5), records(7, 5, tag="lost"), records(6, 5, tag="b")
    want = reference(tmp_path, before, after)
    clock = Clock(T0)
    root = tmp_path / "crashed"
    s = open_store(root, clock, SLOTS, ITEMS)
    res = put(s, clock, before + lost, T0)
    files_before = len(s.index.files)
    crash(s)
    cut_log(root, res[5].wrote_offset)
    s = open_store(root, clock, SLOTS, ITEMS)
    assert s.max_offset == res[5].wrote_offset
    rec = s.index.recovery
    assert rec.undone == 7 * 3 and len(rec.deleted) == files_before - len(s.index.files) >= 2
    assert s.index.files[-1].end_phy == res[4].wrote_offset
    assert s.index.files[-1].end_ts == res[4].store_timestamp  # read back from the record
    assert s.index.query("T", "lost5", 64, 0, FAR).phy_offsets == []
    put(s, clock, after, T0 + 5 * STEP)
    s.shutdown()
    assert list(index_files(root).values()) == want


def test_a_clean_restart_changes_nothing(tmp_path):
    clock = Clock(T0)
    s = open_store(tmp_path, clock, SLOTS, ITEMS)
    put(s, clock, records(9) + [message(99, uniq=False)], T0)  # the last record has no key
    s.shutdown()
    before = index_files(tmp_path)
    clock.t += 10_000
    s = open_store(tmp_path, clock, SLOTS, ITEMS)
    assert s.index.recovery.keys == 0 and s.index.recovery.records == 2
    s.shutdown()
    assert index_files(tmp_path) == before


def test_a_deleted_index_is_rebuilt_from_the_whole_log(tmp_path):
    msgs = records(10)
    want = reference(tmp_path, msgs)
    clock = Clock(T0)
    root = tmp_path / "store"
    s = open_store(root, clock, SLOTS, ITEMS)
    put(s, clock, msgs, T0)
    s.shutdown()
    shutil.rmtree(root / "index")
    s = open_store(root, clock, SLOTS, ITEMS)
    assert s.index.recovery.start == 0 and s.index.recovery.keys == 30
    s.shutdown()
    assert list(index_files(root).values()) == want


def test_an_empty_file_left_by_a_crash_is_made_again(tmp_path):
    """A crash right after a file was created (header never written: all zeros) must not restart the
    index from offset 0: the empty file goes, the next record creates it again."""
    msgs = records(4)
    want = reference(tmp_path, msgs)
    clock = Clock(T0)
    root = tmp_path / "crashed"
    s = open_store(root, clock, SLOTS, ITEMS)
    put(s, clock, msgs, T0)
    crash(s)
    (root / "index" / "29991231235959999").write_bytes(bytes(40 + SLOTS * 4 + ITEMS * 20))
    s = open_store(root, clock, SLOTS, ITEMS)
    assert s.index.recovery.deleted == ["29991231235959999"] and s.index.recovery.keys == 0
    s.shutdown()
    assert list(index_files(root).values()) == want


def test_keyless_records_are_not_indexed_twice(tmp_path):
    clock = Clock(T0)
    s = open_store(tmp_path, clock, SLOTS, ITEMS)
    put(s, clock, [message(i, uniq=False) for i in range(5)], T0)
    crash(s)
    s = open_store(tmp_path, clock, SLOTS, ITEMS)
    assert s.index.recovery.keys == 0 and all(f.items == 0 for f in s.index.files)
    s.shutdown()
