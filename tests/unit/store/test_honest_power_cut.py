"""What an honest power cut (a crash-consistency filesystem: only fsynced bytes and fsynced directory
entries survive) shows about the store, each simulated on files (tests/unit/store/test_power_loss_offset_reuse.py
has the queue offsets). The filesystem itself is issue 32's crashfs; these pin what the store does so a
cut on it has nothing to take that the store reported durable."""

import os

from rmqha.broker.support.files import atomic_write
from rmqha.broker.store import mapped_file
from rmqha.broker.store.mapped_file import MappedFileQueue

from .conftest import msg, open_store
from .test_power_loss_offset_reuse import crash, power_loss


def spy_dir_fsyncs(monkeypatch, *modules):
    """Record the directories fsynced (the real fsync still runs)."""
    synced = []
    real = mapped_file.fsync_directory

    def spy(path):
        synced.append(os.path.abspath(path))
        real(path)

    for module in modules:
        monkeypatch.setattr(module, "fsync_directory", spy)
    return synced


def spy_dir_listings(monkeypatch, *modules):
    """Record (directory, the names in it) at each directory fsync (the real fsync still runs): what a
    cut after that fsync keeps of the directory."""
    listed = []
    real = mapped_file.fsync_directory

    def spy(path):
        listed.append((os.path.abspath(path), set(os.listdir(path))))
        real(path)

    for module in modules:
        monkeypatch.setattr(module, "fsync_directory", spy, raising=False)
    return listed


def test_a_new_store_file_is_durable_only_with_its_directory_and_flush_makes_it_so(tmp_path, monkeypatch):
    # A file created and fsynced but whose directory entry was not fsynced is gone after the cut: a
    # SYNC_FLUSH send acknowledged in a new commit-log file (or a queue's new file) would be lost.
    synced = spy_dir_fsyncs(monkeypatch, mapped_file)
    q = MappedFileQueue(str(tmp_path / "consumequeue" / "T" / "0"), 100)
    f = q.writable_file()
    f.append(b"x" * 10)
    assert synced == []
    assert q.flush() == 10
    assert set(synced) == {str(tmp_path / d) for d in ("consumequeue/T/0", "consumequeue/T", "consumequeue", "")}
    assert synced[0] == str(tmp_path / "consumequeue" / "T" / "0"), "deepest first"
    synced.clear()
    assert q.flush() == 10 and synced == [], "nothing new: no directory to sync"
    f.wrote = f.size
    q.writable_file()  # the next file
    q.flush()
    assert synced == [str(tmp_path / "consumequeue" / "T" / "0")]


def test_a_store_flush_makes_its_new_commit_log_file_durable(tmp_path, monkeypatch):
    synced = spy_dir_fsyncs(monkeypatch, mapped_file)
    s = open_store(tmp_path)
    try:
        for i in range(25):  # past the first 4 KiB file
            s.put_message(msg(i))
        s.flush()
        assert str(tmp_path / "commitlog") in synced and str(tmp_path / "consumequeue" / "T" / "0") in synced
    finally:
        s.shutdown()


def test_the_abort_file_is_durable_before_the_store_takes_anything(tmp_path, monkeypatch):
    # Without the directory fsync a cut could undo the abort file's creation: the next start would take a
    # crash for a clean shutdown.
    synced = spy_dir_fsyncs(monkeypatch, mapped_file)
    s = open_store(tmp_path / "root")
    try:
        assert str(tmp_path / "root") in synced and str(tmp_path) in synced
    finally:
        s.shutdown()


def test_a_config_file_and_a_config_directory_made_by_its_first_write_are_both_durable(tmp_path, monkeypatch):
    # topics.json or subscriptionGroup.json written for a topic or group created on request: config/ is
    # new, so its entry in the store root must be synced too, or the cut takes the whole directory.
    synced = spy_dir_fsyncs(monkeypatch, mapped_file)
    atomic_write(str(tmp_path / "config" / "topics.json"), b"{}")
    assert synced == [str(tmp_path / "config"), str(tmp_path)]
    synced.clear()
    atomic_write(str(tmp_path / "config" / "topics.json"), b"{}")
    assert synced == [str(tmp_path / "config")]


def test_a_torn_checkpoint_changes_nothing_recovery_does(tmp_path):
    # The checkpoint is written without an fsync (as 4.9's, between flushes); this store's recovery never
    # reads it (it walks from the third-last commit-log file), so garbage there cannot move the log's end.
    s = open_store(tmp_path)
    for i in range(6):
        s.put_message(msg(i))
    durable = s.flush()
    for i in range(6, 9):
        s.put_message(msg(i))
    power_loss(s, tmp_path, durable)
    with open(tmp_path / "checkpoint", "r+b") as fh:
        fh.write(os.urandom(4096))
    s = open_store(tmp_path)
    try:
        assert s.max_offset == durable and s.max_queue_offset("T", 0) == 6
        assert s.read_checkpoint() != (0, 0, 0)  # garbage, read as numbers, used by nothing here
    finally:
        s.shutdown()


def test_a_consumer_offset_ahead_of_the_cut_log_is_within_the_queue_once_the_master_takes_writes(tmp_path):
    # consumerOffset.json is fsynced every 5 s, the commit log maybe later (ASYNC_FLUSH): after a cut a
    # committed offset can be past the queue's end. With the lease the queue is filled up to the bound
    # first, so the consumer's next pull is inside the queue and gets the next new message.
    s = open_store(tmp_path)
    for i in range(4):
        s.put_message(msg(i))
    durable = s.flush()
    for i in range(4, 12):
        s.put_message(msg(i))
    committed = s.get_messages("T", 0, 0, 32).next_begin_offset
    assert committed == 12
    power_loss(s, tmp_path, durable)
    s = open_store(tmp_path)
    try:
        assert s.get_messages("T", 0, committed, 32).status == "OFFSET_OVERFLOW_BADLY", "before: past the end"
        s.pad_leased_queues()
        assert s.max_queue_offset("T", 0) > committed
        new = s.put_message(msg(50))
        got = s.get_messages("T", 0, committed, 32)
        while not got.records and got.next_begin_offset > committed:
            committed = got.next_begin_offset
            got = s.get_messages("T", 0, committed, 32)
        assert got.records and got.next_begin_offset == new.queue_offset + 1
    finally:
        s.shutdown()


def test_recovery_wipes_and_syncs_the_stale_tail_so_a_second_cut_cannot_bring_it_back(tmp_path, monkeypatch):
    synced_files = []
    real = mapped_file.MappedFile.sync

    def spy(self):
        synced_files.append(self.path)
        real(self)

    monkeypatch.setattr(mapped_file.MappedFile, "sync", spy)
    s = open_store(tmp_path)
    for i in range(3):
        s.put_message(msg(i))
    durable = s.flush()
    s.put_message(msg(3))
    crash(s)
    with open(tmp_path / "commitlog" / f"{0:020d}", "r+b") as fh:  # a torn last record
        fh.seek(durable + 150)  # inside its body
        fh.write(b"\0" * 20)
    s = open_store(tmp_path)
    try:
        assert s.max_offset == durable
        assert str(tmp_path / "commitlog" / f"{0:020d}") in synced_files
    finally:
        s.shutdown()


def test_the_ha_peers_record_survives_a_power_cut_after_its_save(tmp_path, monkeypatch):
    # haPeers.json vouches for a slave's history in the master's next life; a rename never made durable
    # by a directory fsync would hand that life the old record (or none) after a power cut.
    from rmqha.broker.ha.peers import PEERS_FILE, ProvenPeers, load_record, save_peers

    synced = spy_dir_fsyncs(monkeypatch, mapped_file)
    path = str(tmp_path / PEERS_FILE)
    peers = ProvenPeers.from_record(({}, None), on_proven=lambda p: None)
    peers.stream_limit = 4096
    save_peers(path, peers)
    assert str(tmp_path) in synced
    assert load_record(path) == ({}, 4096)
    assert not os.path.exists(path + ".tmp")


def test_a_dledger_stores_abort_file_is_durable_before_it_takes_anything(tmp_path, monkeypatch):
    # As the classic store's: a cut that undid the abort file's creation would make the next start take
    # a crash for a clean shutdown. The store root must be fsynced once the abort file is in it.
    from tests.unit.dledger.test_dledger_hardening import Group

    listed = spy_dir_listings(monkeypatch, mapped_file)
    g = Group(tmp_path)
    for s, c in g.nodes.values():
        root = os.path.abspath(c.storePathRootDir)
        assert os.path.exists(os.path.join(root, "abort"))
        assert any(d == root and "abort" in names for d, names in listed), "no fsync of the root after abort"


def test_a_file_created_while_flush_syncs_its_directory_is_synced_by_the_next_flush(tmp_path, monkeypatch):
    # flush runs on a thread while the reactor appends. A file the reactor creates in a directory while
    # the flush is fsyncing that directory may be missed by that fsync; the flush must not then drop the
    # directory from its to-do list, or the next flush reports the new file's data durable with its name
    # never synced, and a cut takes the file (acknowledged SYNC_FLUSH sends in it) away.
    q = MappedFileQueue(str(tmp_path / "commitlog"), 100)
    f = q.writable_file()
    f.append(b"x" * 100)  # full: the next append opens a second file
    listings = []
    real = mapped_file.fsync_directory
    created = []

    def spy(path):
        listings.append((os.path.abspath(path), sorted(os.listdir(path))))
        real(path)
        if not created:  # the reactor, while the fsync is under way: after its snapshot of the entries
            created.append(q.writable_file())
            created[0].append(b"y" * 10)

    monkeypatch.setattr(mapped_file, "fsync_directory", spy)
    assert q.flush() == 100
    second = os.path.basename(created[0].path)
    assert second not in listings[0][1], "the first flush's directory fsync came before the new file"
    listings.clear()
    assert q.flush() == 110  # the second file's data durable...
    assert (str(tmp_path / "commitlog"), sorted(os.listdir(tmp_path / "commitlog"))) in listings, (
        "...and its name: the directory is fsynced after the file was made"
    )


def test_a_cut_while_a_queue_is_truncated_cannot_leave_a_zeroed_unit_inside_it(tmp_path, monkeypatch):
    # truncate_beyond drops units of records a cut took from the log: later files are deleted and the
    # tail of the file that keeps the end is zeroed. Zeroed and synced before the deletions were made
    # durable, a cut between brought the later files back after the zeros: the next start's recovery
    # walked them (from the third-last file), and truncate_beyond stopped at the first zeroed unit and
    # kept it, a unit pointing at commit-log offset 0 with size 0 inside the queue. Deletions go first.
    from rmqha.broker.store.consume_queue import ConsumeQueue

    class Cut(Exception):
        pass

    cq = ConsumeQueue(str(tmp_path), "T", 0, 40)  # two units a file
    for i in range(12):
        cq.put(i, i * 100, 100, 0)
    cq.flush()
    qdir = tmp_path / "T" / "0"
    before = {p.name: p.read_bytes() for p in qdir.iterdir()}

    def cut(path):
        raise Cut(path)  # the power goes before the directory's fsync: its deletions are undone

    monkeypatch.setattr(mapped_file, "fsync_directory", cut)
    try:
        cq.truncate_beyond(300)  # the log ends after unit 2
    except Cut:
        pass
    cq.close()
    for name, data in before.items():  # what the cut brings back
        if not (qdir / name).exists():
            (qdir / name).write_bytes(data)
    monkeypatch.undo()
    cq = ConsumeQueue(str(tmp_path), "T", 0, 40)
    cq.load()
    cq.recover()
    cq.truncate_beyond(300)
    try:
        assert [cq.get(i) for i in range(cq.max_index)] == [(0, 100, 0), (100, 100, 0), (200, 100, 0)]
    finally:
        cq.close()


def test_a_new_dledger_store_root_is_durable_in_its_parent(tmp_path, monkeypatch):
    # The DLedger store made its root with a plain makedirs: the files and directories inside were
    # fsynced, the root's own entry in its parent never, so a cut on a new store could take the whole
    # root, the node's vote (currterm) and its log with it: the node could vote twice in one term.
    from tests.unit.dledger.test_dledger_hardening import Group

    listed = spy_dir_listings(monkeypatch, mapped_file)
    g = Group(tmp_path)
    for s, c in g.nodes.values():
        root = os.path.abspath(c.storePathRootDir)
        parent, name = os.path.split(root)
        assert any(d == parent and name in names for d, names in listed), f"{root} never synced in {parent}"


def test_a_new_store_files_length_is_durable_before_its_name_can_be(tmp_path, monkeypatch):
    # A flush on its thread fsyncs the directory while the reactor may be creating a file in it: if that
    # fsync made the name durable before the file's length (set by ftruncate or fallocate, durable only
    # through the file's own fsync), a cut left a short file and the next start refused the store
    # ("is 0 bytes but the configured file size is ..."). The length is fsynced before the name exists.
    d = tmp_path / "commitlog"
    name = f"{100:020d}"
    seen = []
    real_fsync = os.fsync

    def spy(fd):
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(d / name)):
            seen.append((os.fstat(fd).st_size, (d / name).exists()))
        real_fsync(fd)

    q = MappedFileQueue(str(d), 100)
    q.writable_file().append(b"x" * 100)
    monkeypatch.setattr(os, "fsync", spy)
    q.writable_file()
    assert seen and seen[0] == (100, False), "the length was fsynced before the name was in the directory"


def test_a_flush_between_a_directory_mark_and_the_file_it_is_for_leaves_it_marked(tmp_path, monkeypatch):
    # The directory was marked for the next flush before its new file was created: a flush running
    # between (on its thread) synced the directory without the file and unmarked it, so the file's name
    # was never synced and a cut took the file, its data reported durable by the following flush.
    q = MappedFileQueue(str(tmp_path / "commitlog"), 100)
    q.writable_file().append(b"x" * 100)
    q.flush()
    real = mapped_file.MappedFile.__init__

    def init(self, *args, **kwargs):
        q.flush()  # the flush thread, while the reactor creates the file
        real(self, *args, **kwargs)

    monkeypatch.setattr(mapped_file.MappedFile, "__init__", init)
    q.writable_file()
    assert q.unsynced_dirs == {str(tmp_path / "commitlog")}
