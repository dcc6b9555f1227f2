"""rmqha/broker/dledger/file_store.py at its edges: what a restart reads from files it did not write
(gaps, stray names, comments in Properties text), the append and truncate hooks, the refusals, the
durable record, and recovery stopping at each kind of damage. The oracles are packed by hand with
struct (DLedgerEntryCoder's field order), as in test_file_store.py."""

import os
import struct

import pytest

from rmqha.broker.dledger.entry import DLedgerEntry
from rmqha.broker.dledger.file_store import FileStore, StoreError, _properties, offset_to_file_name
from rmqha.broker.dledger.protocol import DLedgerError, ResponseCode

DATA = 256
INDEX = 32 * 4


def store(tmp_path, node="n0", **kw):
    return FileStore(str(tmp_path), node, data_file_size=kw.pop("data", DATA), index_file_size=INDEX, **kw)


def path_of(tmp_path, kind, offset, node="n0"):
    return tmp_path / f"dledger-{node}" / kind / f"{offset:020d}"


def durable_record(tmp_path, node="n0"):
    return struct.unpack(">qq", (tmp_path / f"dledger-{node}" / "durable").read_bytes())


def patch(path, at, raw):
    b = bytearray(path.read_bytes())
    b[at : at + len(raw)] = raw
    path.write_bytes(bytes(b))


def test_file_names_are_twenty_digit_offsets():
    assert offset_to_file_name(0) == "0" * 20
    assert offset_to_file_name(1073741824) == "00000000001073741824"


def test_an_index_file_size_off_the_unit_is_refused(tmp_path):
    with pytest.raises(ValueError):
        FileStore(str(tmp_path), "n0", data_file_size=DATA, index_file_size=INDEX + 1)
    assert FileStore(str(tmp_path), "n0", data_file_size=DATA, index_file_size=32).end_index == -1


def test_a_gap_between_data_files_is_refused_and_stray_names_are_ignored(tmp_path):
    s = store(tmp_path)
    for _ in range(5):
        s.append_as_leader(bytes(100), 1)  # 148 bytes each: one a file, so five files
    s.close()
    data = tmp_path / "dledger-n0" / "data"
    (data / "-notes").write_text("not a data file")  # sorts before the data files
    os.mkdir(data / "0")  # digits, but a directory (sorts first too)
    assert store(tmp_path).end_index == 4
    os.remove(path_of(tmp_path, "data", 2 * DATA))
    with pytest.raises(StoreError):
        store(tmp_path)


def test_properties_text_as_java_writes_and_reads_it():
    text = "# a comment\n! another\n\n  committedIndex = 7 \nendIndex:9\nflag\nk=v=w\nurl=a:b\n"
    assert _properties(text) == {"committedIndex": "7", "endIndex": "9", "flag": "", "k": "v=w", "url": "a:b"}
    assert _properties("a:b=c") == {"a": "b=c"}
    assert _properties("=v\n:w") == {"": "w"}  # an empty key, as Java reads it (the later line wins)


def test_a_checkpoint_without_a_number_leaves_nothing_committed(tmp_path):
    s = store(tmp_path)
    s.append_as_leader(b"a", 1)
    s.release()
    cp = tmp_path / "dledger-n0" / "checkpoint"
    for text in ("committedIndex=\n", "committedIndex=x\n", "endIndex=0\n"):
        cp.write_text(text)
        assert store(tmp_path).committed_index == -1, text
    cp.write_text("committedIndex=0\n")
    assert store(tmp_path).committed_index == 0


def test_a_committed_index_on_an_empty_log_is_not_kept(tmp_path):
    store(tmp_path).release()
    (tmp_path / "dledger-n0" / "checkpoint").write_text("committedIndex=3\n")
    s = store(tmp_path)
    assert (s.end_index, s.committed_index, s.entries()) == (-1, -1, [])


def test_the_term_file_without_a_term_is_term_zero(tmp_path):
    s = store(tmp_path)
    (tmp_path / "dledger-n0" / "currterm").write_text("voteLeader=n1\n")
    assert s.load_term() == (0, "n1")


def test_the_append_hook_sees_the_chosen_pos_and_may_not_change_the_length(tmp_path):
    s = store(tmp_path)
    s.append_as_leader(b"first", 1)
    seen = []

    def hook(body, pos):
        seen.append((body, pos))
        return body[:-8] + pos.to_bytes(8, "big")

    s.append_hook = hook
    e = s.append_as_leader(b"body+" + bytes(8), 1)
    assert seen == [(b"body+" + bytes(8), 53)] and e.pos == 53
    assert s.get(1).body == b"body+" + (53).to_bytes(8, "big")
    s.append_hook = lambda body, pos: body + b"!"
    with pytest.raises(StoreError):
        s.append_as_leader(b"x", 1)
    s.append_hook = lambda body, pos: body[1:]
    with pytest.raises(StoreError):
        s.append_as_leader(b"xy", 1)


def test_a_follower_refuses_an_older_term_and_a_pos_of_its_own(tmp_path):
    f = store(tmp_path, node="n1")
    f.append_as_follower(DLedgerEntry(body=b"a", index=0, term=3, pos=0))
    with pytest.raises(StoreError):
        f.append_as_follower(DLedgerEntry(body=b"b", index=1, term=2, pos=49))
    with pytest.raises(StoreError):
        f.append_as_follower(DLedgerEntry(body=b"b", index=1, term=3, pos=48))
    # nothing was written by the refusals: the right entry goes where the log ends
    assert f.append_as_follower(DLedgerEntry(body=b"b", index=1, term=3, pos=49)).pos == 49
    assert [e.body for e in f.entries()] == [b"a", b"b"] and (f.end_index, f.end_term) == (1, 3)


def test_sync_every_append_makes_each_append_durable_before_it_returns(tmp_path):
    s = store(tmp_path, sync_every_append=True)
    s.append_as_leader(b"a", 1)
    assert s.durable_positions == (49, 32) and durable_record(tmp_path) == (49, 32) and not s.dirty
    lazy = store(tmp_path, node="n1")
    lazy.append_as_leader(b"a", 1)
    assert lazy.durable_positions == (0, 0) and lazy.dirty
    lazy.flush()
    assert lazy.durable_positions == (49, 32) and durable_record(tmp_path, "n1") == (49, 32) and not lazy.dirty


def test_a_flush_covers_every_file_written_since_the_last_one(tmp_path):
    s = store(tmp_path)
    s.append_as_leader(bytes(100), 1)
    s.flush()
    synced = []
    real = os.fsync
    for _ in range(4):
        s.append_as_leader(bytes(100), 1)  # one data file each; the fifth index entry opens a second index file
    fds = {f.fd: f.start for f in s.data.files + s.index.files}

    def spy(fd):
        synced.append(fds.get(fd))
        return real(fd)

    os.fsync = spy
    try:
        s.flush()
    finally:
        os.fsync = real
    # the first data file again (written past its durable end), not the index file it filled before
    assert synced == [0, DATA, 2 * DATA, 3 * DATA, 4 * DATA, 0, INDEX]
    assert s.durable_positions == (4 * DATA + 148, 5 * 32)
    synced.clear()
    s.append_as_leader(bytes(100), 1)
    os.fsync = spy
    try:
        s.flush()
    finally:
        os.fsync = real
    # the last file again (its blank written since), the new one (unknown to the spy), the second index file
    assert synced == [4 * DATA, None, INDEX]


def test_truncate_calls_its_hook_with_the_cut_and_lowers_the_committed_index(tmp_path):
    leader = store(tmp_path, node="n0")
    for body in (b"a", b"b", b"c"):
        leader.append_as_leader(body, 1)
    f = store(tmp_path, node="n1")
    for i in range(3):
        f.append_as_follower(leader.get(i))
    f.set_committed_index(2)
    f.flush()
    cuts = []
    f.truncate_hook = cuts.append
    assert f.truncate(leader.get(1)) == 1  # kept: cut after it
    assert cuts == [98] and f.committed_index == 1 and f.end_index == 1
    # the kept entry's index slot was rewritten with the same bytes: still durable; the data past the cut is not
    assert f.durable_positions == (98, 64) and durable_record(tmp_path, "n1") == (98, 64)
    other = DLedgerEntry(body=b"B", index=1, term=2, pos=49)
    assert f.truncate(other) == 1  # differs: cut at its pos, written there
    assert cuts == [98, 49] and f.get(1).body == b"B" and f.durable_positions == (49, 32)
    assert f.committed_index == 1 and f.begin_index == 0
    f.truncate(DLedgerEntry(body=b"A", index=0, term=2, pos=0))  # the first entry differs too
    assert f.durable_positions == (0, 0) and [e.body for e in f.entries()] == [b"A"]


def test_a_truncate_at_the_followers_end_keeps_its_log(tmp_path):
    leader = store(tmp_path, node="n0")
    for body in (b"a", b"b", b"c"):
        leader.append_as_leader(body, 1)
    f = store(tmp_path, node="n1")
    for i in range(2):
        f.append_as_follower(leader.get(i))
    assert f.truncate(leader.get(2)) == 2  # the leader's next entry, where the follower's log ends
    assert (f.begin_index, f.end_index) == (0, 2) and [e.body for e in f.entries()] == [b"a", b"b", b"c"]


def test_a_truncate_behind_the_log_starts_it_again_there(tmp_path):
    f = store(tmp_path, node="n1")
    f.truncate(DLedgerEntry(body=b"x", index=9, term=2, pos=3 * DATA + 10))
    assert (f.begin_index, f.end_index, f.end_term) == (9, 9, 2)
    assert f.data.min_offset == 3 * DATA + 10 and f.get(9).body == b"x"
    # a leader entry before this log's start: rebuilt again, at the earlier pos
    f.truncate(DLedgerEntry(body=b"y", index=4, term=1, pos=DATA + 5))
    assert (f.begin_index, f.end_index) == (4, 4) and f.data.min_offset == DATA + 5
    assert [os.path.basename(x.path) for x in f.data.files] == [offset_to_file_name(DATA)]
    with pytest.raises(DLedgerError):
        f.get(9)


def test_a_truncate_inside_a_log_that_begins_past_index_zero_keeps_its_beginning(tmp_path):
    f = store(tmp_path, node="n1")
    f.truncate(DLedgerEntry(body=b"x", index=1, term=1, pos=10))  # no overlap: the log begins at entry 1
    f.append_as_follower(DLedgerEntry(body=b"y", index=2, term=1, pos=59))
    f.append_as_follower(DLedgerEntry(body=b"z", index=3, term=1, pos=108))
    assert f.truncate(DLedgerEntry(body=b"Z", index=3, term=2, pos=108)) == 3  # differs: cut at its pos
    assert (f.begin_index, f.end_index) == (1, 3) and [e.body for e in f.entries()] == [b"x", b"y", b"Z"]


def test_a_leader_entry_at_the_start_of_the_followers_log_begins_it_whatever_its_index(tmp_path):
    """The follower's log begins at entry 1 at pos 10; the leader's entry 3 is at pos 10 too (its log
    before entry 3 is smaller). Nothing of the follower's log is kept: it begins at entry 3, and entries
    1 and 2 are gone rather than served from the leader's bytes."""
    f = store(tmp_path, node="n1")
    f.truncate(DLedgerEntry(body=b"x", index=1, term=1, pos=10))
    f.append_as_follower(DLedgerEntry(body=b"y", index=2, term=1, pos=59))
    assert f.truncate(DLedgerEntry(body=b"W", index=3, term=2, pos=10)) == 3
    assert (f.begin_index, f.end_index) == (3, 3) and [e.body for e in f.entries()] == [b"W"]
    with pytest.raises(DLedgerError):
        f.get(1)
    f.release()
    r = store(tmp_path, node="n1")
    assert (r.begin_index, r.end_index) == (3, 3) and [e.body for e in r.entries()] == [b"W"]


@pytest.mark.parametrize(
    "index, pos",
    [
        (None, None),  # a log written from entry 0: both lists begin at 0
        (5, 10),  # rebuilt at entry 5 inside the first data file and the first index file
        (6, DATA + 10),  # rebuilt at entry 6: its index list's first file starts at entry 4, 2 slots in
    ],
)
def test_a_restart_begins_both_file_lists_where_they_began_before_it(tmp_path, index, pos):
    """Where each list begins (MmapFile.startPosition) lives in memory only; recovery finds it again, so
    a truncate after a restart decides between cutting and rebuilding as it would have before it."""
    f = store(tmp_path, node="n1")
    if index is None:
        for body in (b"a", b"b", b"c"):
            f.append_as_leader(body, 1)
    else:
        f.truncate(DLedgerEntry(body=b"x", index=index, term=1, pos=pos))
        f.append_as_follower(DLedgerEntry(body=b"y", index=index + 1, term=1, pos=pos + 49))
    before = (f.begin_index, f.end_index, f.data.min_offset, f.index.min_offset)
    assert before[3] == before[0] * 32  # the index list begins at the log's first entry's slot
    f.close()
    r = store(tmp_path, node="n1")
    assert (r.begin_index, r.end_index, r.data.min_offset, r.index.min_offset) == before


def test_close_flushes_and_checkpoints_release_does_neither(tmp_path):
    s = store(tmp_path)
    s.append_as_leader(b"a", 1)
    s.set_committed_index(0)
    s.release()
    assert not (tmp_path / "dledger-n0" / "checkpoint").exists()
    assert durable_record(tmp_path) == (0, 0)
    s = store(tmp_path)
    assert durable_record(tmp_path) == (49, 32)  # opening fsyncs what recovery kept
    s.set_committed_index(0)
    s.append_as_leader(b"b", 1)
    s.close()
    assert durable_record(tmp_path) == (98, 64)
    assert (tmp_path / "dledger-n0" / "checkpoint").read_text() == "committedIndex=0\nendIndex=1\n"


# --- recovery at each kind of damage ------------------------------------------------------------------


def three_files(tmp_path, n=3, term=1):
    """n entries of 148 bytes, one a data file (blanks fill the rest), all in the index."""
    s = store(tmp_path)
    for i in range(n):
        s.append_as_leader(bytes([i]) * 100, term)
    s.release()


def test_recovery_walks_across_blanks_and_ends_at_the_last_file(tmp_path):
    three_files(tmp_path, 5)
    r = store(tmp_path)
    assert (r.begin_index, r.end_index) == (0, 4) and r.recovered_from["file"] == 2
    assert r.recovered_from["end_offset"] == 4 * DATA + 148
    # a blank ending the last file: the log ends where the file does and the next append opens a new one
    s = store(tmp_path, node="n2")
    s.append_as_leader(bytes(100), 1)
    s.append_as_leader(bytes(100), 1)  # the first file ends in a blank
    s.release()
    os.remove(path_of(tmp_path, "data", DATA, "n2"))
    r2 = store(tmp_path, node="n2")
    assert r2.end_index == 0 and r2.recovered_from["end_offset"] == DATA
    assert r2.append_as_leader(b"z", 2).pos == DATA


def test_recovery_goes_back_while_a_files_first_entry_does_not_match_its_index(tmp_path):
    three_files(tmp_path, 5)
    # the third-to-last file's first entry has a different size in the index: start a file earlier
    patch(path_of(tmp_path, "index", 0), 2 * 32 + 12, struct.pack(">i", 99))
    r = store(tmp_path)
    assert r.recovered_from["file"] == 1 and r.end_index == 4
    assert [e.body[0] for e in r.entries()] == [0, 1, 2, 3, 4]
    three_files(tmp_path / "b", 5)
    patch(path_of(tmp_path / "b", "data", 2 * DATA), 24, struct.pack(">q", 7))  # its pos field lies
    rb = store(tmp_path / "b")
    assert rb.recovered_from["file"] == 1 and rb.end_index == 1


@pytest.mark.parametrize(
    "at, raw, why",
    [
        (4, struct.pack(">i", 48), "a size of only the header"),
        (4, struct.pack(">i", 300), "a size past the file"),
        (0, struct.pack(">i", 3), "a magic past the current one"),
        (0, struct.pack(">i", 0), "magic 0"),
        (8, struct.pack(">q", 5), "an index out of sequence"),
        (16, struct.pack(">q", 0), "a term older than the last"),
        (44, struct.pack(">i", 99), "a body size that disagrees with the size"),
        (44, b"\x01", "a body size with a stray high byte"),
        (24, struct.pack(">q", 0), "a pos that is not where it lies"),
    ],
)
def test_recovery_ends_before_a_damaged_entry(tmp_path, at, raw, why):
    s = store(tmp_path)
    for term in (1, 2, 2):
        s.append_as_leader(b"e", term)  # 49 bytes each: 0, 49, 98
    s.release()
    patch(path_of(tmp_path, "data", 0), 49 + at, raw)
    r = store(tmp_path)
    assert (r.end_index, r.end_term) == (0, 1) and [e.body for e in r.entries()] == [b"e"], why
    assert path_of(tmp_path, "data", 0).read_bytes()[49:] == bytes(DATA - 49), why
    assert path_of(tmp_path, "index", 0).read_bytes()[32:] == bytes(INDEX - 32), why


@pytest.mark.parametrize("size, why", [(44, "no longer than its header"), (300, "past the end of its file")])
def test_recovery_ends_before_an_entry_whose_body_size_agrees_with_a_size_it_cannot_have(tmp_path, size, why):
    s = store(tmp_path)
    for term in (1, 2, 2):
        s.append_as_leader(b"e", term)
    s.release()
    patch(path_of(tmp_path, "data", 0), 49 + 4, struct.pack(">i", size))
    patch(path_of(tmp_path, "data", 0), 49 + 44, struct.pack(">i", size - 48))  # the body size agrees
    r = store(tmp_path)
    assert (r.end_index, r.end_term) == (0, 1) and [e.body for e in r.entries()] == [b"e"], why


def test_recovery_takes_every_magic_from_the_first_to_the_current(tmp_path):
    s = store(tmp_path)
    for _ in range(2):
        s.append_as_leader(b"e", 1)
    s.release()
    patch(path_of(tmp_path, "data", 0), 0, struct.pack(">i", 1))  # MAGIC_1 == CURRENT_MAGIC here
    assert store(tmp_path).end_index == 1


def test_recovery_refuses_a_first_index_that_could_not_be_addressed(tmp_path):
    s = store(tmp_path)
    s.append_as_leader(b"e", 1)
    s.release()
    patch(path_of(tmp_path, "data", 0), 8, struct.pack(">q", -1))
    r = store(tmp_path)
    assert r.end_index == -1 and r.entries() == []
    patch(path_of(tmp_path, "data", 0), 0, struct.pack(">iiqqq", 1, 49, (2**63 - 1) // 32, 1, 0))
    assert store(tmp_path).end_index == -1


def test_a_term_that_stays_the_same_is_in_order(tmp_path):
    s = store(tmp_path)
    for term in (0, 0, 5, 5):
        s.append_as_leader(b"e", term)
    s.release()
    r = store(tmp_path)
    assert (r.end_index, r.end_term) == (3, 5)


def test_a_log_rebuilt_at_an_odd_offset_finds_its_first_entry(tmp_path):
    for pos in (1, 2, 3, 4, 130):
        d = tmp_path / f"p{pos}"
        f = store(d, node="n1")
        f.truncate(DLedgerEntry(body=b"first", index=2, term=1, pos=pos))
        f.release()
        r = store(d, node="n1")
        assert (r.begin_index, r.end_index, r.data.min_offset) == (2, 2, pos), pos
        assert r.get(2).body == b"first"


def test_the_first_entry_is_found_past_a_whole_zero_chunk(tmp_path):
    big = 3 * 64 * 1024
    f = FileStore(str(tmp_path), "n1", data_file_size=big, index_file_size=INDEX)
    pos = 64 * 1024 + 70
    f.truncate(DLedgerEntry(body=b"far", index=0, term=1, pos=pos))
    f.release()
    r = FileStore(str(tmp_path), "n1", data_file_size=big, index_file_size=INDEX)
    assert (r.begin_index, r.end_index, r.data.min_offset) == (0, 0, pos)


def test_a_data_file_of_zeros_holds_no_log(tmp_path):
    f = store(tmp_path)
    f.append_as_leader(b"a", 1)
    f.release()
    path_of(tmp_path, "data", 0).write_bytes(bytes(DATA))
    r = store(tmp_path)
    assert (r.begin_index, r.end_index, r.end_term, r.data.min_offset) == (-1, -1, -1, 0)
    assert r.append_as_leader(b"b", 1).pos == 0 and r.get(0).body == b"b"


def test_an_unreadable_first_entry_after_a_restart_begins_the_log_where_the_walk_did(tmp_path):
    s = store(tmp_path)
    for i in range(4):
        s.append_as_leader(bytes([i]) * 100, 1)  # one a file: 0, 256, 512, 768
    s.release()
    os.remove(path_of(tmp_path, "data", 0))  # the oldest file deleted (retention): the walk starts later
    r = store(tmp_path)
    assert (r.begin_index, r.end_index) == (1, 3)
    assert [e.body[0] for e in r.entries()] == [1, 2, 3]


def test_garbage_at_the_end_of_a_loaded_log_is_zeroed(tmp_path):
    big = 3 * 64 * 1024
    s = FileStore(str(tmp_path), "n0", data_file_size=big, index_file_size=INDEX)
    s.append_as_leader(bytes(1000), 1)
    s.release()
    # garbage where the log ends (a torn write): recovery cuts there and zeroes it
    p = path_of(tmp_path, "data", 0)
    patch(p, 1048, b"\x07" * 10)
    r = FileStore(str(tmp_path), "n0", data_file_size=big, index_file_size=INDEX)
    assert r.end_index == 0
    assert p.read_bytes()[1048:1058] == bytes(10)


def test_default_files_have_dledgers_lengths(tmp_path):
    # DLedgerConfig's mappedFileSizeForEntryData (1 GiB) and mappedFileSizeForEntryIndex (32 * 5 Mi): a
    # store of 0.3.1.2 opening these files, or this one opening its, refuses any other length
    s = FileStore(str(tmp_path), "n0")
    s.append_as_leader(b"a", 1)
    s.close()
    assert os.path.getsize(path_of(tmp_path, "data", 0)) == 1024**3
    assert os.path.getsize(path_of(tmp_path, "index", 0)) == 32 * 5 * 1024 * 1024
    assert FileStore(str(tmp_path), "n0").get(0).body == b"a"


def test_a_disk_failure_answers_disk_error(tmp_path):
    s = store(tmp_path)
    with pytest.raises(StoreError) as e:
        s.append_as_leader(bytes(DATA), 1)
    assert isinstance(e.value, DLedgerError) and e.value.code == ResponseCode.DISK_ERROR
    assert "does not fit" in str(e.value)


def test_files_are_created_readable_by_all_and_writable_by_the_owner_only(tmp_path):
    old = os.umask(0o022)
    try:
        s = store(tmp_path)
        s.append_as_leader(b"a", 1)
        s.close()
    finally:
        os.umask(old)
    for kind in ("data", "index"):
        assert os.stat(path_of(tmp_path, kind, 0)).st_mode & 0o777 == 0o644, kind
    assert os.stat(tmp_path / "dledger-n0" / "durable").st_mode & 0o777 == 0o644


@pytest.fixture
def disk_log(monkeypatch):
    """The store's fsyncs, writes, removals and renames in order, each with the path it touched."""
    from rmqha.broker.dledger import file_store

    log = []

    def named(fd):
        return os.readlink(f"/proc/self/fd/{fd}")

    def spy(name, real, fd_arg):
        def call(*a, **kw):
            log.append((name, named(a[0]) if fd_arg else str(a[0])))
            return real(*a, **kw)

        return call

    monkeypatch.setattr(os, "fsync", spy("fsync", os.fsync, True))
    monkeypatch.setattr(os, "pwrite", spy("write", os.pwrite, True))
    monkeypatch.setattr(os, "unlink", spy("unlink", os.unlink, False))
    monkeypatch.setattr(os, "replace", spy("replace", os.replace, False))
    monkeypatch.setattr(file_store, "fsync_directory", spy("dirsync", file_store.fsync_directory, False))
    return log


def test_a_new_files_length_and_name_are_durable_before_anything_is_written_into_it(tmp_path, disk_log):
    s = store(tmp_path)
    disk_log.clear()
    s.append_as_leader(b"a", 1)
    data, index = str(path_of(tmp_path, "data", 0)), str(path_of(tmp_path, "index", 0))
    for f in (data, index):
        first_write = disk_log.index(("write", f))
        assert ("fsync", f) in disk_log[:first_write], f
        assert ("dirsync", os.path.dirname(f)) in disk_log[:first_write], f


def test_files_a_truncate_removes_stay_removed_and_the_term_is_renamed_durably(tmp_path, disk_log, monkeypatch):
    leader = store(tmp_path, node="n0")
    for _ in range(3):
        leader.append_as_leader(bytes(100), 1)  # one data file each
    f = store(tmp_path, node="n1")
    for i in range(3):
        f.append_as_follower(leader.get(i))
    disk_log.clear()
    f.truncate(leader.get(0))
    data_dir = str(tmp_path / "dledger-n1" / "data")
    removed = [i for i, e in enumerate(disk_log) if e[0] == "unlink" and e[1].startswith(data_dir)]
    assert len(removed) == 2 and ("dirsync", data_dir) in disk_log[removed[-1] :]
    disk_log.clear()
    sizes = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: sizes.append(os.fstat(fd).st_size) or real_fsync(fd))
    f.persist_term(3, "n0")
    assert len("voteLeader=n0\ncurrTerm=3\n") in sizes  # the new text was in the file when it was fsynced
    monkeypatch.setattr(os, "fsync", real_fsync)
    disk_log.clear()
    f.persist_term(3, "n0")
    cur = str(tmp_path / "dledger-n1" / "currterm")
    renamed = disk_log.index(("replace", cur + ".tmp"))
    assert ("fsync", cur + ".tmp") in disk_log[:renamed]
    assert ("dirsync", str(tmp_path / "dledger-n1")) in disk_log[renamed:]
    disk_log.clear()
    f.persist_checkpoint()  # 0.3.1.2's: not fsynced (the committed index may come back lower)
    assert [e for e in disk_log if e[0] in ("fsync", "dirsync")] == []


def test_close_and_release_give_the_files_back(tmp_path):
    for end in ("close", "release"):
        s = store(tmp_path)
        s.append_as_leader(b"a", 1)
        fds = [f.fd for f in s.data.files + s.index.files] + [s._durable_fd]
        getattr(s, end)()
        for fd in fds:
            with pytest.raises(OSError):
                os.fstat(fd)


def test_a_new_stores_directories_are_durable_before_its_first_write(tmp_path, disk_log):
    s = store(tmp_path / "base")
    s.append_as_leader(b"a", 1)
    first_write = next(i for i, e in enumerate(disk_log) if e[0] == "write")
    synced = {e[1] for e in disk_log[:first_write] if e[0] == "fsync"}
    # each directory created, through its parent: base, dledger-n0, data and index
    for d in ("", "/base", "/base/dledger-n0"):
        assert str(tmp_path) + d in synced, d


def test_a_new_store_starts_and_ends_at_zero(tmp_path):
    # what the broker's DLedger commit log reports as its min and max offset before the first entry
    s = store(tmp_path)
    assert (s.data.min_offset, s.data.max_wrote, s.index.min_offset, s.index.max_wrote) == (0, 0, 0, 0)
    assert (s.begin_index, s.end_index, s.end_term, s.committed_index) == (-1, -1, -1, -1)
    assert s.entries() == [] and not s.dirty


def test_closing_twice_closes_nothing_twice(tmp_path):
    # a descriptor closed twice may by then be another file's, opened in between
    for first, second in (("release", "release"), ("close", "release"), ("release", "close")):
        s = store(tmp_path)
        s.append_as_leader(b"a", 1)
        had = len(s.data.files) + len(s.index.files) + 1  # and the durable record's
        getattr(s, first)()
        others = [os.open(os.devnull, os.O_RDONLY) for _ in range(had)]  # the lowest free: the store's
        try:
            try:
                getattr(s, second)()
            except OSError:
                pass  # it may fail; it must not close another file's descriptor
            for fd in others:
                os.fstat(fd)
        finally:
            for fd in others:
                os.close(fd)


def test_an_entry_fits_a_new_file_with_room_for_a_blank_and_not_without(tmp_path):
    s = store(tmp_path)
    s.append_as_leader(b"a", 1)  # 49 bytes: what follows does not fit the first file
    assert s.append_as_leader(bytes(DATA - 8 - 48), 1).pos == DATA  # 248 + a blank's 8 == a whole file
    t = store(tmp_path, node="n1")
    t.append_as_leader(b"a", 1)
    with pytest.raises(StoreError):
        t.append_as_leader(bytes(DATA - 8 - 48 + 2), 1)  # 250 + 8 > 256
    # refused before anything was written in the new file: the next entry starts it
    assert t.append_as_leader(b"b", 1).pos == DATA and [e.body for e in t.entries()] == [b"a", b"b"]


def test_a_cut_inside_a_file_that_ended_in_a_blank_zeroes_the_blank_too(tmp_path):
    leader = store(tmp_path, node="n0")
    for body in (bytes(100), bytes(100)):  # the second rolls to the next file: a blank at 148
        leader.append_as_leader(body, 1)
    f = store(tmp_path, node="n1")
    for i in range(2):
        f.append_as_follower(leader.get(i))
    assert path_of(tmp_path, "data", 0, "n1").read_bytes()[148:156] == struct.pack(">ii", -1, 108)
    f.truncate(leader.get(0))
    assert path_of(tmp_path, "data", 0, "n1").read_bytes()[148:] == bytes(DATA - 148)
    f.release()
    r = store(tmp_path, node="n1")
    assert r.end_index == 0 and r.append_as_leader(b"x", 2).pos == 148


def test_a_lost_last_index_file_is_rebuilt_from_the_data(tmp_path):
    three_files(tmp_path, 5)  # index slots 0..3 in the first index file, 4 in the second
    before = path_of(tmp_path, "index", INDEX).read_bytes()
    os.remove(path_of(tmp_path, "index", INDEX))
    r = store(tmp_path)
    assert (r.begin_index, r.end_index) == (0, 4) and [e.body[0] for e in r.entries()] == [0, 1, 2, 3, 4]
    assert path_of(tmp_path, "index", INDEX).read_bytes() == before


def test_a_read_returns_only_bytes_that_were_written(tmp_path):
    s = store(tmp_path)
    s.append_as_leader(b"a", 1)
    assert s.data.read(0, 49) == s.data.read_raw(0, 49) and len(s.data.read(0, 49)) == 49
    assert s.data.read(0, 50) is None and s.data.read(48, 2) is None  # past the write position
    assert s.data.read(DATA, 1) is None and s.data.read(-1, 1) is None  # no file there
    assert s.data.read_raw(DATA, 1) == b"" and s.data.read_raw(250, 10) == bytes(6)  # raw: to the file's end


def open_deleted_files():
    fds = os.listdir("/proc/self/fd")
    out = []
    for fd in fds:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.endswith(" (deleted)"):
            out.append(target)
    return out


def test_files_a_truncate_removes_give_their_space_back(tmp_path):
    # an open descriptor keeps a removed file's blocks: a long-lived follower would fill its disk
    before = open_deleted_files()
    leader = store(tmp_path, node="n0")
    for _ in range(3):
        leader.append_as_leader(bytes(100), 1)  # one data file each
    f = store(tmp_path, node="n1")
    for i in range(3):
        f.append_as_follower(leader.get(i))
    f.truncate(leader.get(0))
    assert sorted(os.listdir(tmp_path / "dledger-n1" / "data")) == [offset_to_file_name(0)]
    assert open_deleted_files() == before
    f.truncate(DLedgerEntry(body=b"far", index=9, term=2, pos=5 * DATA))  # rebuilt: every old file removed
    assert sorted(os.listdir(tmp_path / "dledger-n1" / "data")) == [offset_to_file_name(5 * DATA)]
    assert open_deleted_files() == before


def test_a_cut_inside_a_later_file_zeroes_what_it_cut_there(tmp_path):
    leader = store(tmp_path, node="n0")
    leader.append_as_leader(bytes(200), 1)  # 248 bytes: the first file is full (a blank of 8)
    leader.append_as_leader(b"b", 1)  # at 256
    leader.append_as_leader(b"c", 1)  # at 305
    f = store(tmp_path, node="n1")
    for i in range(3):
        f.append_as_follower(leader.get(i))
    f.truncate(leader.get(1))
    assert path_of(tmp_path, "data", DATA, "n1").read_bytes()[49:] == bytes(DATA - 49)
    assert path_of(tmp_path, "data", 0, "n1").read_bytes() == path_of(tmp_path, "data", 0, "n0").read_bytes()
    f.release()
    assert [e.body for e in store(tmp_path, node="n1").entries()] == [bytes(200), b"b"]


def test_a_power_cut_after_a_rebuild_counts_only_the_new_entrys_bytes_as_lost(tmp_path):
    from rmqha.cluster.store_cut import drop_after, read_dledger_durable

    f = store(tmp_path, node="n1")
    f.append_as_leader(b"old", 1)
    f.flush()
    pos = 2 * DATA + 100
    f.truncate(DLedgerEntry(body=b"new", index=7, term=2, pos=pos))  # no overlap: rebuilt at pos, not flushed
    assert f.durable_positions[0] == pos
    f.release()
    base = tmp_path / "dledger-n1"
    durable = read_dledger_durable(base)
    assert durable[0] == pos
    assert drop_after(base / "data", durable[0]) == 51  # the new entry, not the zeros before it
    assert store(tmp_path, node="n1").end_index == -1


def test_a_restart_does_not_rewrite_the_unused_part_of_a_full_size_file(tmp_path, monkeypatch):
    # a loaded file counts as written to its end: recovery zeroes past the log's end only until the
    # zeros begin, not the rest of a 1 GiB file at every restart
    s = FileStore(str(tmp_path), "n0")
    s.append_as_leader(b"a", 1)
    s.release()
    written = []
    real = os.pwrite
    monkeypatch.setattr(os, "pwrite", lambda fd, data, off: written.append(len(data)) or real(fd, data, off))
    r = FileStore(str(tmp_path), "n0")
    assert r.end_index == 0 and sum(written) < 1024


def test_a_cut_zeroes_every_entry_after_it_past_a_chunk_of_zero_bytes(tmp_path):
    # an entry whose body is zeros spans a whole 64 KiB step: the entry after it must be zeroed too
    big = 3 * 64 * 1024
    leader = FileStore(str(tmp_path), "n0", data_file_size=big, index_file_size=INDEX)
    for body in (b"a", bytes(140_000), b"c"):
        leader.append_as_leader(body, 1)
    f = FileStore(str(tmp_path), "n1", data_file_size=big, index_file_size=INDEX)
    for i in range(3):
        f.append_as_follower(leader.get(i))
    f.truncate(leader.get(0))
    assert path_of(tmp_path, "data", 0, "n1").read_bytes()[49:] == bytes(big - 49)


class CutsInRecovery(FileStore):
    """A store whose recovery truncates (as test_file_store.py's planted ForgetsItsTail does)."""

    def _recover(self):
        super()._recover()
        if self.end_index > 0:
            self.truncate(self.get(self.end_index - 1))


def test_a_truncate_during_recovery_writes_no_record_before_the_record_file_is_open(tmp_path, capfd):
    s = store(tmp_path)
    for body in (b"a", b"b"):
        s.append_as_leader(body, 1)
    s.release()
    r = CutsInRecovery(str(tmp_path), "n0", data_file_size=DATA, index_file_size=INDEX)
    assert capfd.readouterr() == ("", "")
    assert r.end_index == 0 and durable_record(tmp_path) == (49, 32)


def test_the_durable_record_is_kept_on_descriptor_zero(tmp_path):
    # a daemon started with stdin closed: the record's file may get descriptor 0
    saved = os.dup(0)
    os.close(0)
    try:
        s = store(tmp_path)
        assert s._durable_fd == 0
        s.append_as_leader(b"a", 1)
        s.flush()
        assert durable_record(tmp_path) == (49, 32)
        s.release()
        with pytest.raises(OSError):
            os.fstat(0)  # released with the rest
    finally:
        os.dup2(saved, 0)
        os.close(saved)


def test_releasing_twice_leaves_the_standard_descriptors_alone(tmp_path):
    s = store(tmp_path)
    s.release()
    s.release()
    for fd in (0, 1, 2):
        os.fstat(fd)


def test_a_lost_index_under_many_data_files_is_rebuilt_from_the_first(tmp_path):
    three_files(tmp_path, 5)
    before = [path_of(tmp_path, "index", o).read_bytes() for o in (0, INDEX)]
    for o in (0, INDEX):
        os.remove(path_of(tmp_path, "index", o))
    r = store(tmp_path)
    assert r.recovered_from["file"] == 0 and (r.begin_index, r.end_index) == (0, 4)
    assert [path_of(tmp_path, "index", o).read_bytes() for o in (0, INDEX)] == before


def test_a_garbage_first_entry_sends_recovery_a_file_further_back(tmp_path):
    three_files(tmp_path, 5)
    patch(path_of(tmp_path, "data", 2 * DATA), 0, b"\x07" * 48)
    r = store(tmp_path)
    assert r.recovered_from["file"] == 1 and (r.begin_index, r.end_index) == (0, 1)


def test_an_index_without_data_is_cut_to_nothing(tmp_path):
    three_files(tmp_path, 2)
    for name in os.listdir(tmp_path / "dledger-n0" / "data"):
        os.remove(tmp_path / "dledger-n0" / "data" / name)
    r = store(tmp_path)
    assert (r.begin_index, r.end_index, r.end_term) == (-1, -1, -1)
    assert r.append_as_leader(b"x", 1).index == 0 and r.get(0).body == b"x"
    assert path_of(tmp_path, "index", 0).read_bytes()[:32] == struct.pack(">iqiqq", 1, 0, 49, 0, 1)


def test_an_unreadable_oldest_file_starts_the_log_where_the_walk_did(tmp_path):
    three_files(tmp_path, 5)
    patch(path_of(tmp_path, "data", 0), 0, b"\x07" * 48)  # the oldest entry's header is garbage
    r = store(tmp_path)
    assert r.recovered_from["file"] == 2 and (r.begin_index, r.end_index) == (2, 4)
    assert [e.body[0] for e in r.entries()] == [2, 3, 4]


def test_the_largest_addressable_index_is_recovered_and_one_more_is_not(tmp_path):
    from rmqha.broker.dledger.file_store import MAX_RECOVERED_INDEX

    for index, kept in ((MAX_RECOVERED_INDEX, 0), (MAX_RECOVERED_INDEX + 1, -1)):
        d = tmp_path / str(index)
        s = store(d)
        s.append_as_leader(b"e", 1)
        s.release()
        patch(path_of(d, "data", 0), 8, struct.pack(">q", index))
        r = store(d)
        assert (r.end_index, r.begin_index) == ((index, index) if kept == 0 else (-1, -1)), index


def test_a_single_data_file_starting_with_garbage_holds_no_log(tmp_path):
    s = store(tmp_path)
    s.append_as_leader(b"e", 1)
    s.release()
    patch(path_of(tmp_path, "data", 0), 0, b"\x07" * 48)
    r = store(tmp_path)
    assert (r.begin_index, r.end_index, r.data.min_offset) == (-1, -1, 0)
    assert path_of(tmp_path, "data", 0).read_bytes() == bytes(DATA)
