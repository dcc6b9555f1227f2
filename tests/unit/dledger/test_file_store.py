"""rmqha/broker/dledger/file_store.py: DLedgerMmapFileStore's files byte for byte, recovery, truncation.

The oracles are packed by hand with struct from DLedgerEntryCoder's field order, not with entry.py.
"""

import os
import shutil
import struct
import tempfile

import pytest

from rmqha.broker.dledger.entry import DLedgerEntry
from rmqha.broker.dledger.file_store import FileStore, StoreError
from rmqha.broker.dledger.protocol import DLedgerError, ResponseCode
from tests.unit.dledger.sim import random_schedule

DATA = 256
INDEX = 32 * 4


def oracle_entry(index, term, pos, body):
    return struct.pack(">iiqqqiiii", 1, 48 + len(body), index, term, pos, 0, 0, 0, len(body)) + body


def oracle_index(pos, size, index, term):
    return struct.pack(">iqiqq", 1, pos, size, index, term)


def store(tmp_path, node="n0", **kw):
    return FileStore(str(tmp_path), node, data_file_size=kw.pop("data", DATA), index_file_size=INDEX, **kw)


def data_file(tmp_path, offset, node="n0"):
    with open(tmp_path / f"dledger-{node}" / "data" / f"{offset:020d}", "rb") as f:
        return f.read()


def index_file(tmp_path, offset, node="n0"):
    with open(tmp_path / f"dledger-{node}" / "index" / f"{offset:020d}", "rb") as f:
        return f.read()


def test_data_and_index_files_byte_for_byte(tmp_path):
    s = store(tmp_path)
    a = s.append_as_leader(b"hello", 1)
    b = s.append_as_leader(b"world!", 2)
    assert (a.index, a.pos, b.index, b.pos) == (0, 0, 1, 53)
    want = oracle_entry(0, 1, 0, b"hello") + oracle_entry(1, 2, 53, b"world!")
    assert data_file(tmp_path, 0) == want + bytes(DATA - len(want))
    want_index = oracle_index(0, 53, 0, 1) + oracle_index(53, 54, 1, 2)
    assert index_file(tmp_path, 0) == want_index + bytes(INDEX - 64)
    assert (s.begin_index, s.end_index, s.end_term) == (0, 1, 2)
    assert s.get(1).body == b"world!" and s.get(1).pos == 53
    with pytest.raises(DLedgerError) as e:
        s.get(2)
    assert e.value.code == ResponseCode.INDEX_OUT_OF_RANGE


def test_an_entry_that_leaves_less_than_a_blank_rolls_to_the_next_file(tmp_path):
    s = store(tmp_path)
    s.append_as_leader(bytes(100), 1)  # 148 bytes, 108 left
    s.append_as_leader(bytes(52), 1)  # 100 + 8 == 108: fits, leaves exactly a blank's 8
    third = s.append_as_leader(b"x", 1)  # 49 + 8 > 8: a blank, then the next file
    assert third.pos == DATA
    first = data_file(tmp_path, 0)
    assert first[248:] == struct.pack(">ii", -1, 8)
    assert data_file(tmp_path, DATA)[:49] == oracle_entry(2, 1, DATA, b"x")
    s.append_as_leader(bytes(152), 1)  # 200 + 8 > 256 - 49: a blank of 207 at 49
    assert data_file(tmp_path, DATA)[49:57] == struct.pack(">ii", -1, 207)
    assert data_file(tmp_path, DATA)[57:] == bytes(DATA - 57)
    assert sorted(os.listdir(tmp_path / "dledger-n0" / "data")) == [f"{o:020d}" for o in (0, 256, 512)]
    # index files roll over without blanks: 4 slots a file
    assert s.append_as_leader(b"y", 1).pos == 768  # 49 + 8 > 56: a blank of 56 at 712
    assert data_file(tmp_path, 512)[200:208] == struct.pack(">ii", -1, 56)
    assert index_file(tmp_path, INDEX)[:32] == oracle_index(768, 49, 4, 1)
    s.close()
    r = store(tmp_path)
    assert [e.body for e in r.entries()] == [bytes(100), bytes(52), b"x", bytes(152), b"y"]
    assert r.append_as_leader(b"z", 2).pos == 768 + 49


def test_an_entry_larger_than_a_file_is_refused(tmp_path):
    s = store(tmp_path)
    with pytest.raises(StoreError):
        s.append_as_leader(bytes(DATA), 1)


def test_restart_keeps_entries_term_vote_and_committed_index(tmp_path):
    s = store(tmp_path)
    for i in range(5):
        s.append_as_leader(b"m%d" % i, 3)
    s.set_committed_index(3)
    s.persist_term(7, "n2")
    s.close()
    assert (tmp_path / "dledger-n0" / "currterm").read_text() == "voteLeader=n2\ncurrTerm=7\n"
    assert (tmp_path / "dledger-n0" / "checkpoint").read_text() == "committedIndex=3\nendIndex=4\n"
    r = store(tmp_path)
    assert (r.begin_index, r.end_index, r.end_term, r.committed_index) == (0, 4, 3, 3)
    assert r.load_term() == (7, "n2")
    r.persist_term(8, None)
    assert r.load_term() == (8, None)
    assert (tmp_path / "dledger-n0" / "currterm.bak").read_text() == "voteLeader=n2\ncurrTerm=7\n"
    assert store(tmp_path, node="n9").load_term() == (0, None)


def test_java8_order_and_a_checkpoint_past_the_end_are_read(tmp_path):
    s = store(tmp_path)
    s.append_as_leader(b"a", 1)
    s.release()
    (tmp_path / "dledger-n0" / "checkpoint").write_text("endIndex=9\ncommittedIndex=9\n")
    (tmp_path / "dledger-n0" / "currterm").write_text("currTerm=4\nvoteLeader=\n")
    r = store(tmp_path)
    assert r.committed_index == 0 and r.load_term() == (4, None)


def write_three(tmp_path):
    s = store(tmp_path)
    for body in (b"one", b"two", b"three"):
        s.append_as_leader(body, 1)
    s.release()  # killed: no checkpoint
    return s


def test_a_tail_whose_index_entry_was_never_written_is_cut(tmp_path):
    write_three(tmp_path)
    path = tmp_path / "dledger-n0" / "index" / f"{0:020d}"
    raw = bytearray(path.read_bytes())
    raw[64:96] = bytes(32)  # the process died between the data write and the index write
    path.write_bytes(bytes(raw))
    r = store(tmp_path)
    assert (r.end_index, r.committed_index) == (1, -1)
    assert data_file(tmp_path, 0)[102:] == bytes(DATA - 102)  # the cut entry is zeroed
    assert r.append_as_leader(b"again", 2).pos == 102


def test_a_half_written_entry_is_cut(tmp_path):
    write_three(tmp_path)
    path = tmp_path / "dledger-n0" / "data" / f"{0:020d}"
    raw = bytearray(path.read_bytes())
    raw[102 + 8 : 102 + 53] = bytes(45)  # the header's index..bodySize never reached the disk
    path.write_bytes(bytes(raw))
    r = store(tmp_path)
    assert r.end_index == 1 and [e.body for e in r.entries()] == [b"one", b"two"]
    assert data_file(tmp_path, 0)[102:] == bytes(DATA - 102)
    assert index_file(tmp_path, 0)[64:] == bytes(INDEX - 64)


def test_a_lost_index_is_rebuilt_from_the_data(tmp_path):
    write_three(tmp_path)
    before = index_file(tmp_path, 0)
    shutil.rmtree(tmp_path / "dledger-n0" / "index")
    r = store(tmp_path)
    assert r.end_index == 2 and index_file(tmp_path, 0) == before


def test_a_differing_index_entry_is_rewritten_from_the_data(tmp_path):
    write_three(tmp_path)
    before = index_file(tmp_path, 0)
    path = tmp_path / "dledger-n0" / "index" / f"{0:020d}"
    raw = bytearray(path.read_bytes())
    raw[32 + 12 : 32 + 16] = struct.pack(">i", 99)  # entry 1's size
    path.write_bytes(bytes(raw))
    assert store(tmp_path).end_index == 2 and index_file(tmp_path, 0) == before


def follower(tmp_path, node, entries):
    s = store(tmp_path, node=node)
    for e in entries:
        s.append_as_follower(e)
    return s


def test_truncate_to_the_leaders_log(tmp_path):
    leader = store(tmp_path, node="n0")
    for body in (b"a", b"b"):
        leader.append_as_leader(body, 1)
    old = [leader.get(0), leader.get(1)]
    f = follower(tmp_path, "n1", old)
    stale = f.append_as_follower(DLedgerEntry(body=b"stale-entry", index=2, term=1, pos=98))
    assert stale.pos == 98
    # the new leader's entry 2 (term 2) differs: the follower cuts its own and writes the leader's
    leader.append_as_leader(b"c", 2)
    assert f.truncate(leader.get(2)) == 2
    assert (f.end_index, f.end_term) == (2, 2)
    assert data_file(tmp_path, 0, "n1") == data_file(tmp_path, 0, "n0")
    assert index_file(tmp_path, 0, "n1") == index_file(tmp_path, 0, "n0")
    # an entry the follower already has: keep it and cut what follows
    f.append_as_follower(DLedgerEntry(body=b"more", index=3, term=2, pos=147))
    f.set_committed_index(3)
    assert f.truncate(leader.get(1)) == 1
    assert f.end_index == 1 and f.committed_index == 1
    assert data_file(tmp_path, 0, "n1")[98:] == bytes(DATA - 98)
    f.release()
    assert store(tmp_path, node="n1").end_index == 1


def test_a_follower_refuses_an_entry_out_of_place(tmp_path):
    f = store(tmp_path, node="n1")
    with pytest.raises(DLedgerError) as e:
        f.append_as_follower(DLedgerEntry(body=b"x", index=1, term=1, pos=0))
    assert e.value.code == ResponseCode.INCONSISTENT_INDEX
    with pytest.raises(StoreError):
        f.append_as_follower(DLedgerEntry(body=b"x", index=0, term=1, pos=8))


def test_a_mapped_file_of_another_size_is_refused(tmp_path):
    store(tmp_path).append_as_leader(b"a", 1)
    with pytest.raises(StoreError):
        store(tmp_path, data=512)


# --- the Raft property test on the file store ----------------------------------------------------------

SCALE = int(os.environ.get("DLEDGER_SCHEDULES", "1"))


def fast_dir(tmp_path):
    """tmpfs when there is one: every PersistTerm fsyncs currterm, which a loaded disk makes the cost
    of the whole run; the files and the code path are the same."""
    return tempfile.mkdtemp(dir="/dev/shm") if os.access("/dev/shm", os.W_OK) else str(tmp_path)


def run_file_seeds(tmp_path, n, seeds):
    totals = {"elections": 0, "commits": 0, "crashes": 0}
    base = fast_dir(tmp_path)
    for seed in seeds:
        d = os.path.join(base, f"s{seed}")
        c = random_schedule(seed, n, store_dir=str(d))
        totals["elections"] += c.checker.elections
        totals["commits"] += c.checker.commits
        totals["crashes"] += sum(b.incarnation - 1 for b in c.boxes.values())
        shutil.rmtree(d)
    shutil.rmtree(base, ignore_errors=True)
    return totals


@pytest.mark.parametrize(
    "n, seeds",
    [
        (3, range(40_000, 40_000 + 100 * SCALE)),
        (3, range(40_000 + 100 * SCALE, 40_000 + 200 * SCALE)),
        (5, range(41_000, 41_000 + 40 * SCALE)),
    ],
)
def test_raft_safety_with_file_stores_reopened_after_every_crash(tmp_path, n, seeds):
    t = run_file_seeds(tmp_path, n, seeds)
    assert t["elections"] > len(seeds) // 2 and t["commits"] > 2 * len(seeds) and t["crashes"] > len(seeds) // 3, t


class ForgetsItsTail(FileStore):
    """Planted: recovery drops the last entry (as a store that acked before writing would)."""

    def _recover(self):
        super()._recover()
        if self.end_index > 0:
            self.truncate(self.get(self.end_index - 1))


def test_a_store_that_loses_acknowledged_entries_on_restart_is_caught(tmp_path, monkeypatch):
    from tests.unit.dledger import sim

    monkeypatch.setattr(sim, "FileStore", ForgetsItsTail)
    base = fast_dir(tmp_path)
    try:
        for seed in range(40_000, 40_200):
            d = os.path.join(base, f"s{seed}")
            try:
                random_schedule(seed, 3, store_dir=d)
            except sim.Violation:
                return
            shutil.rmtree(d)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    raise AssertionError("no schedule caught a store that forgets acknowledged entries")


@pytest.mark.parametrize("pos", [300, 256 + 64, 512])
def test_a_store_rebuilt_at_a_non_zero_offset_keeps_its_entries_after_restart(tmp_path, pos):
    # A follower whose log does not overlap the leader's (empty, or behind the leader's begin) starts
    # again at the leader's entry: data and index files begin mid-file, zeros before the first entry.
    f = store(tmp_path, node="n1")
    first = DLedgerEntry(body=b"first", index=5, term=2, pos=pos)
    f.truncate(first)
    f.append_as_follower(DLedgerEntry(body=b"second", index=6, term=2, pos=pos + 53))
    f.set_committed_index(6)
    f.persist_checkpoint()
    expect = [f.get(5), f.get(6)]
    assert (f.begin_index, f.end_index) == (5, 6)
    f.release()
    again = store(tmp_path, node="n1")
    assert (again.begin_index, again.end_index, again.end_term, again.committed_index) == (5, 6, 2, 6)
    assert [again.get(5), again.get(6)] == expect
    assert again.data.min_offset == pos and again.data.max_wrote == pos + 53 + 54
    # it goes on appending where it stopped, and a second restart still reads it all
    again.append_as_follower(DLedgerEntry(body=b"third", index=7, term=3, pos=pos + 107))
    again.release()
    third = store(tmp_path, node="n1")
    assert [e.body for e in third.entries()] == [b"first", b"second", b"third"]
