"""The DLedger file store under a real power cut: the store on a crashfs mount (images/crashfs), which drops
every change the store did not make durable, names included. What the store flushed (its 10 ms fsync) and
the vote it persisted must survive the cut (rmqha/broker/dledger/file_store.py, "Durability").

Regression: the store fsynced its data and index files but never their directory, so a data file created
after the store was last made durable vanished at a cut, entries and all: every power cut of the
2026-11-28 DLedger sweep (run mx-dl-l2: 211 acknowledged sends on no node) emptied the node's log."""

from __future__ import annotations

import os

import pytest

from rmqha.broker.dledger.file_store import FileStore

# builds images/crashfs (cargo, cached per content): not in the fast tier
pytestmark = pytest.mark.compiles

DATA = 1024  # a few entries a file: the test rolls over into new files
INDEX = 32 * 64


def open_store(root) -> FileStore:
    return FileStore(str(root), "n0", data_file_size=DATA, index_file_size=INDEX)


def bodies(s: FileStore) -> list[bytes]:
    return [e.body for e in s.entries()]


def cut_and_reopen(mount, s: FileStore) -> FileStore:
    """The process dies (no shutdown flush, no checkpoint), the power goes, the store starts again."""
    s.release()
    report = mount.cut("lose-unsynced", 1)
    assert report["mode"] == "lose-unsynced"
    return open_store(mount.store)


def test_flushed_entries_survive_a_cut_in_files_created_after_the_store_started(cfs):
    s = open_store(cfs.store)
    cfs.sync()  # the empty store (its directories) durable, as a store is when the kit mounts it
    want = [f"entry {i}".encode() * 8 for i in range(30)]  # ~13 files of 1 KiB: several new files
    for i, body in enumerate(want):
        s.append_as_leader(body, 1 + i // 10)
        if i % 4 == 3:
            s.flush()  # the 10 ms flush, now and then
    s.flush()
    assert len(s.data.files) > 3
    s = cut_and_reopen(cfs, s)
    try:
        assert bodies(s) == want, f"{len(bodies(s))} of {len(want)} flushed entries after the cut"
        assert (s.end_index, s.end_term) == (29, 3)
    finally:
        s.release()


def test_unflushed_tail_is_lost_but_the_flushed_prefix_stays(cfs):
    s = open_store(cfs.store)
    cfs.sync()
    for i in range(6):
        s.append_as_leader(f"kept {i}".encode() * 8, 1)
    s.flush()
    for i in range(6):
        s.append_as_leader(f"lost {i}".encode() * 8, 1)  # page cache only, some in files made since
    s = cut_and_reopen(cfs, s)
    try:
        assert bodies(s) == [f"kept {i}".encode() * 8 for i in range(6)]
        s.append_as_leader(b"after", 2)  # the recovered store takes appends where it ended
        s.flush()
        assert s.end_index == 6
    finally:
        s.release()


def test_a_persisted_vote_survives_a_cut(cfs):
    s = open_store(cfs.store)
    s.persist_term(1, "n1")
    cfs.sync()
    s.persist_term(7, "n2")  # the driver sends the vote's answer only after this returns
    s = cut_and_reopen(cfs, s)
    try:
        assert s.load_term() == (7, "n2")
    finally:
        s.release()


def test_files_a_truncate_removed_stay_removed_after_a_cut(cfs):
    s = open_store(cfs.store)
    for i in range(20):
        s.append_as_leader(f"old {i}".encode() * 8, 1)
    s.flush()
    cfs.sync()
    names = sorted(os.listdir(cfs.store / "dledger-n0" / "data"))
    keep = s.get(3)
    s.truncate(keep)  # a new leader's TRUNCATE: entries 4.. and the files past entry 3's go
    s.flush()
    s = cut_and_reopen(cfs, s)
    try:
        assert s.end_index == 3
        left = sorted(os.listdir(cfs.store / "dledger-n0" / "data"))
        assert len(left) < len(names), "the files the truncate removed came back"
    finally:
        s.release()
