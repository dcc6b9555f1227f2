"""A power loss on a DLedger store, simulated as rmqha/cluster/handle.py's power_loss does it: the store's
durable positions (advanced only after an fsync returns, lowered before a cut) are read from its
`durable` record after the process is gone, the data and index files are cut there, and the store
recovers. The recovered log must be exactly the entries that were on disk at the last fsync."""

import os
import random

import pytest

from rmqha.broker.dledger.entry import DLedgerEntry
from rmqha.broker.dledger.file_store import FileStore
from rmqha.cluster.store_cut import drop_after, read_dledger_durable

pytestmark = pytest.mark.fast

DATA = 256
INDEX = 32 * 4


def store(tmp_path, node="n0"):
    return FileStore(str(tmp_path), node, data_file_size=DATA, index_file_size=INDEX)


def power_cut(tmp_path, s, node="n0"):
    """The store's process dies (no flush, no checkpoint), then everything not fsynced is lost."""
    s.release()
    base = tmp_path / f"dledger-{node}"
    durable = read_dledger_durable(base)
    assert durable is not None
    dropped = drop_after(base / "data", durable[0]), drop_after(base / "index", durable[1])
    return durable, dropped


def bodies(s):
    return [e.body for e in s.entries()]


def test_positions_move_only_when_an_fsync_returned(tmp_path, monkeypatch):
    s = store(tmp_path)
    assert s.durable_positions == (0, 0)
    s.append_as_leader(b"one", 1)
    assert s.durable_positions == (0, 0)  # written, in the page cache only
    synced = []
    real_fsync = os.fsync

    def fsync(fd):
        synced.append(s.durable_positions)  # what is reported while the fsync runs
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    s.flush()
    assert synced and all(p == (0, 0) for p in synced[:1])
    assert s.durable_positions == (s.data.max_wrote, s.index.max_wrote) == (51, 32)
    assert read_dledger_durable(tmp_path / "dledger-n0") == (51, 32)


def test_the_recovered_log_is_exactly_the_fsynced_entries(tmp_path):
    s = store(tmp_path)
    for body in (b"one", b"two", b"three"):
        s.append_as_leader(body, 1)
    s.flush()
    for body in (b"four", b"five"):  # acknowledged maybe, never fsynced
        s.append_as_leader(body, 1)
    (data_pos, index_pos), (dropped_data, dropped_index) = power_cut(tmp_path, s)
    assert (data_pos, index_pos) == (51 + 51 + 53, 3 * 32)
    # four, the blank header that closed the first file when five did not fit, five in the second file
    assert dropped_data == 52 + 8 + 52 and dropped_index == 2 * 32
    r = store(tmp_path)
    assert bodies(r) == [b"one", b"two", b"three"] and r.end_index == 2
    assert r.durable_positions == (r.data.max_wrote, r.index.max_wrote)  # recovery synced what it kept
    assert r.append_as_leader(b"again", 2).index == 3


def test_a_cut_across_files_removes_the_later_ones(tmp_path):
    s = store(tmp_path)
    for i in range(4):  # 4 x 58 bytes: the fifth entry no longer fits the first 256-byte file
        s.append_as_leader(b"x" * 10 + bytes([i]), 1)
    s.flush()
    for i in range(4, 8):
        s.append_as_leader(b"x" * 10 + bytes([i]), 1)
    assert len(s.data.files) == 2 and len(s.index.files) == 2
    power_cut(tmp_path, s)
    assert sorted(os.listdir(tmp_path / "dledger-n0" / "data")) == [f"{0:020d}"]
    assert sorted(os.listdir(tmp_path / "dledger-n0" / "index")) == [f"{0:020d}"]
    assert [b[-1] for b in bodies(store(tmp_path))] == [0, 1, 2, 3]


def test_data_synced_but_not_its_index_ends_the_log_before_that_entry(tmp_path):
    """The data files are fsynced before the index: a cut between the two keeps data whose index slot is
    zeros, a torn tail that recovery drops."""
    s = store(tmp_path)
    for body in (b"one", b"two", b"three"):
        s.append_as_leader(body, 1)
    s.data.sync()
    s.release()
    base = tmp_path / "dledger-n0"
    drop_after(base / "data", s.data.durable)
    drop_after(base / "index", 32)
    assert bodies(store(tmp_path)) == [b"one"]


def leader_and_follower_with_a_stale_entry(tmp_path):
    """A leader with entries 0-1 in term 1, and a follower that holds them plus a stale entry 2, fsynced."""
    leader = store(tmp_path, node="n0")
    for body in (b"a", b"b"):
        leader.append_as_leader(body, 1)
    f = store(tmp_path, node="n1")
    for e in (leader.get(0), leader.get(1)):
        f.append_as_follower(e)
    f.append_as_follower(DLedgerEntry(body=b"stale-entry", index=2, term=1, pos=98))
    f.flush()
    return leader, f


def test_a_follower_truncation_lowers_the_record_before_it_cuts(tmp_path):
    leader, f = leader_and_follower_with_a_stale_entry(tmp_path)
    assert f.durable_positions == (98 + 59, 3 * 32)
    leader.append_as_leader(b"c", 2)
    f.truncate(leader.get(2))  # the leader's entry 2 replaces the stale one, in the page cache only
    assert f.durable_positions == (98, 2 * 32)
    power_cut(tmp_path, f, node="n1")
    r = store(tmp_path, node="n1")
    assert bodies(r) == [b"a", b"b"]  # neither the stale entry nor its unsynced replacement


class _Killed(Exception):
    """The process dies here (SIGKILL): nothing after this step of a truncation runs."""


@pytest.mark.parametrize("step", ["_cut_index", "_write"])
def test_a_truncation_stopped_midway_leaves_the_record_lowered_and_serves_no_cut_entry(tmp_path, monkeypatch, step):
    """The durable record is lowered before truncate cuts or writes anything: a process killed in the
    middle (the leader's entry already in the data file, the index not cut yet, or not yet written) leaves
    a record that claims neither the cut entry nor its unsynced replacement; and the log it still serves
    ends before the entry it was cutting at."""
    leader, f = leader_and_follower_with_a_stale_entry(tmp_path)
    leader.append_as_leader(b"c", 2)

    def killed(*_a):
        raise _Killed

    monkeypatch.setattr(f, step, killed)
    with pytest.raises(_Killed):
        f.truncate(leader.get(2))
    monkeypatch.undo()
    assert read_dledger_durable(tmp_path / "dledger-n1") == (98, 2 * 32)
    if step == "_write":  # the data and index were cut: the entries before the cut only
        assert f.end_index == 1 and bodies(f) == [b"a", b"b"]
    power_cut(tmp_path, f, node="n1")
    assert bodies(store(tmp_path, node="n1")) == [b"a", b"b"]


@pytest.mark.parametrize("seed", range(8))
def test_random_appends_flushes_and_truncations_recover_the_last_fsynced_log(tmp_path, seed):
    rng = random.Random(seed)
    s = store(tmp_path)
    on_disk: list[bytes] = []
    for step in range(40):
        roll = rng.random()
        if roll < 0.6:
            s.append_as_leader(bytes([step]) * rng.randint(1, 40), 1 + step // 10)
        elif roll < 0.8:
            s.flush()
            on_disk = bodies(s)
        elif s.end_index > 0:
            # a follower's cut to an earlier entry it keeps; what was synced before it stays durable
            keep = rng.randint(0, s.end_index)
            s.truncate(s.get(keep))
            on_disk = on_disk[: keep + 1]
    power_cut(tmp_path, s)
    assert bodies(store(tmp_path)) == on_disk
