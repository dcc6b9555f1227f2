"""The upgrade from a classic commit log to DLedger (4.9's DLedgerCommitLog dividedCommitlogOffset,
docs/dledger.md "Upgrade from a classic commit log"): a classic store restarted as a DLedger member keeps
serving its old messages from the old files below the divide, and new ones after it."""

import fcntl
import os
import random
import shutil
import struct
from types import SimpleNamespace

import pytest
from twisted.internet import task

from rmqha.runs.layout import node_json, write_node_json
from rmqha.broker.config.properties import BrokerConfig, ConfigError
from rmqha.broker.dledger.config import DLedgerConfig
from rmqha.broker.dledger.role_handler import DLedgerRoleChangeHandler
from rmqha.broker.store.dledger_commitlog import DLedgerMessageStore
from rmqha.broker.store import queries, record
from rmqha.broker.store.mapped_file import StoreError
from rmqha.broker.store.message_store import GetStatus, MessageStore, PutResult, PutStatus

from .test_dledger_commitlog import FakeSync, Net, advance

FILE = 1 << 16  # mappedFileSizeCommitLog: the classic files and the DLedger data files
CQ = 20 * 100


def classic(root, n, start=0):
    """A classic master's store with n messages on T/0 (and every third on T/1), shut down cleanly."""
    s = MessageStore(str(root), commitlog_file_size=FILE, cq_file_size=CQ)
    s.start()
    out = []
    for i in range(start, start + n):
        m = record.Message(
            topic="T",
            body=(f"old{i}-".encode() * 60)[:300],
            queue_id=1 if i % 3 == 2 else 0,
            properties={"UNIQ_KEY": f"U{i}", "KEYS": f"k{i}"},
        )
        res = s.put_message(m)
        assert res.status == PutStatus.PUT_OK
        out.append(res)
    s.dispatch_pending()
    s.shutdown()
    return out


def dledger_store(root, clock, self_id="n0", ids=("n0",), vote_ms=None, **props):
    peers = ";".join(f"{i}-127.0.0.1:{40911 + k}" for k, i in enumerate(ids))
    c = BrokerConfig.from_properties(
        {
            "brokerName": "B",
            "enableDLegerCommitLog": "true",
            "dLegerGroup": "B",
            "dLegerPeers": peers,
            "dLegerSelfId": self_id,
            "storePathRootDir": str(root),
            "mappedFileSizeCommitLog": str(FILE),
            "listenPort": str(30911 + 10 * ids.index(self_id)),
            **props,
        }
    )
    s = DLedgerMessageStore(
        c.storePathRootDir,
        c.commitlog_dir,
        commitlog_file_size=FILE,
        cq_file_size=CQ,
        store_host=("127.0.0.1", c.listenPort),
        now_ms=lambda: int(clock.seconds() * 1000),
    )
    lo, hi = vote_ms or (300, 1000)
    s.configure(
        c,
        reactor=None,
        clock=clock,
        rng=random.Random(ids.index(self_id)),
        dledger=DLedgerConfig(group="B", selfId=self_id, peers=peers, minVoteIntervalMs=lo, maxVoteIntervalMs=hi),
    )
    return s, c


def run(s, c, clock, net=None):
    s.start()
    if net is not None:
        net.attach(s)
    s.start_service(listen=False)
    server = SimpleNamespace(
        config=c,
        controller=SimpleNamespace(store=s),
        clock=clock,
        schedule=None,
        transactions=None,
        pop=None,
        registration=None,
        slave_sync=FakeSync(),
    )
    DLedgerRoleChangeHandler(server).start()
    return s


def until(clock, cond, within=20.0):
    for _ in range(int(within / 0.05)):
        if cond():
            return
        advance(clock, 0.05)
    raise AssertionError("condition not reached")


def put(clock, s, i, queue_id=0):
    res = s.put_async(
        record.Message(topic="T", body=f"new{i}".encode(), queue_id=queue_id, properties={"UNIQ_KEY": f"N{i}"})
    )
    if isinstance(res, PutResult):
        return res
    out = []
    res.addCallback(out.append)
    until(clock, lambda: bool(out), 5)
    return out[0]


def pulled(s, queue_id=0, offset=0):
    bodies = []
    while True:
        got = s.get_messages("T", queue_id, offset, 32)
        if got.status != GetStatus.FOUND:
            return bodies, got
        bodies += [record.scan(r, 0, False).message for r in got.records]
        offset = got.next_begin_offset


# -- the divided read path ------------------------------------------------------------------------


@pytest.mark.fast
def test_first_start_seals_the_old_log_and_starts_dledger_at_the_next_file(tmp_path):
    old = classic(tmp_path / "s", 250)  # 250 x ~400 bytes: two files and part of a third
    last_end = old[-1].next_offset
    divided = last_end - last_end % FILE + FILE
    clock = task.Clock()
    s, c = dledger_store(tmp_path / "s", clock)
    run(s, c, clock)
    try:
        assert s.divided == divided and s.upgraded
        # the old last file ends with a blank from the old data's end to the file's end (4.9 writes it)
        raw = open(tmp_path / "s" / "commitlog" / f"{divided - FILE:020d}", "rb").read()
        assert struct.unpack_from(">iI", raw, last_end - (divided - FILE)) == (divided - last_end, record.BLANK_MAGIC)
        assert sorted(os.listdir(tmp_path / "s" / "dledger-n0" / "data")) == [f"{divided:020d}"]
        assert s.min_offset == 0 and s.max_offset == divided  # no entry yet: 4.9's getMaxOffset
        until(clock, lambda: s.writable)
        new = [put(clock, s, i, queue_id=i % 2) for i in range(4)]
        assert all(r.status == PutStatus.PUT_OK for r in new)
        assert new[0].wrote_offset == divided + 48  # the first entry's pos is the divide
        per_queue = {q: [r for i, r in enumerate(old) if (i % 3 == 2) == q] for q in (0, 1)}  # 167 and 83
        assert [r.queue_offset for r in new] == [167, 83, 168, 84]
        for q in (0, 1):
            msgs, end = pulled(s, q)
            assert end.status == GetStatus.OFFSET_OVERFLOW_ONE
            assert [m.queue_offset for m in msgs] == list(range(len(msgs)))  # no gap, no overlap
            olds, news = msgs[: len(per_queue[q])], msgs[len(per_queue[q]) :]
            assert [m.physical_offset for m in olds] == [r.wrote_offset for r in per_queue[q]]
            assert [m.properties["UNIQ_KEY"] for m in news] == [f"N{i}" for i in range(q, 4, 2)]
            assert [m.physical_offset for m in news] == [r.wrote_offset for r in new[q::2]]
        # by offset (msgId) and by key, on both sides of the divide
        raw, m = queries.record_at(s, old[7].wrote_offset)
        assert m.properties["UNIQ_KEY"] == "U7"
        raw, m = queries.record_at(s, new[1].wrote_offset)
        assert m.properties["UNIQ_KEY"] == "N1"
        assert s.message_by_offset(old[249].wrote_offset).properties["UNIQ_KEY"] == "U249"
        found = queries.query_message(s, "T", "k42", 32, 0, 1 << 62)
        assert [record.scan(r, 0, False).message.properties["UNIQ_KEY"] for r in found.records] == ["U42"]
    finally:
        s.shutdown()


@pytest.mark.fast
def test_old_and_new_messages_survive_restarts_with_the_same_divide(tmp_path):
    old = classic(tmp_path / "s", 120)
    clock = task.Clock()
    s, c = dledger_store(tmp_path / "s", clock)
    run(s, c, clock)
    until(clock, lambda: s.writable)
    divided = s.divided
    new = [put(clock, s, i) for i in range(3)]
    s.shutdown()
    for _ in range(2):
        s, c = dledger_store(tmp_path / "s", clock)
        run(s, c, clock)
        try:
            assert s.divided == divided and not s.upgraded  # from the first DLedger file's name
            until(clock, lambda st=s: st.writable)
            msgs, _end = pulled(s, 0)
            keys = [m.properties["UNIQ_KEY"] for m in msgs]
            assert keys[: len(keys) - len(new)] == [f"U{i}" for i in range(120) if i % 3 != 2]
            assert keys[-len(new) :] == [f"N{i}" for i in range(len(new))]
            assert [m.queue_offset for m in msgs] == list(range(len(msgs)))
            r = put(clock, s, len(new))
            assert r.status == PutStatus.PUT_OK and r.queue_offset == len(msgs)
            new.append(r)
        finally:
            s.shutdown()
    assert old[0].wrote_offset == 0


@pytest.mark.fast
def test_a_crashed_classic_store_is_recovered_before_the_divide(tmp_path):
    """No clean shutdown before the upgrade: the old log's torn tail is cut and the consume queues are
    rebuilt from it, as a classic start would (4.9 runs the classic recoverNormally on it)."""
    s = MessageStore(str(tmp_path / "s"), commitlog_file_size=FILE, cq_file_size=CQ)
    s.start()
    for i in range(10):
        s.put_message(record.Message(topic="T", body=b"x" * 100, properties={"UNIQ_KEY": f"U{i}"}))
    s.dispatch_pending()
    s.flush()
    end = s.max_offset
    os.close(s._lock_fd)  # a killed process: no shutdown
    s.commitlog.close()
    with open(tmp_path / "s" / "commitlog" / f"{0:020d}", "r+b") as f:
        f.seek(end)
        f.write(b"\x00\x00\x01\x00garbage")  # a torn record after the last whole one
    clock = task.Clock()
    d, c = dledger_store(tmp_path / "s", clock)
    run(d, c, clock)
    try:
        assert d.divided == FILE and d.max_queue_offset("T", 0) == 10
        until(clock, lambda: d.writable)
        r = put(clock, d, 0)
        assert (r.wrote_offset, r.queue_offset) == (FILE + 48, 10)
    finally:
        d.shutdown()


@pytest.mark.fast
def test_no_classic_log_means_no_divide(tmp_path):
    clock = task.Clock()
    s, c = dledger_store(tmp_path / "s", clock)
    run(s, c, clock)
    try:
        assert s.divided == -1 and not s.upgraded
        until(clock, lambda: s.writable)
        assert put(clock, s, 0).wrote_offset == 48
    finally:
        s.shutdown()


@pytest.mark.fast
def test_a_dledger_log_inside_the_old_log_is_refused(tmp_path):
    """A member whose DLedger log was rebuilt below its old log's end (a leader with a shorter old log):
    4.9 would serve the old bytes for those entries; this store does not start."""
    classic(tmp_path / "s", 250)
    data = tmp_path / "s" / "dledger-n0" / "data"
    os.makedirs(data)
    with open(data / f"{FILE:020d}", "wb") as f:
        f.truncate(FILE)
    clock = task.Clock()
    s, _c = dledger_store(tmp_path / "s", clock)
    with pytest.raises(StoreError, match="overlap"):
        s.start()
    assert s.closed
    fd = os.open(tmp_path / "s" / "lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the lock was released
    os.close(fd)


# -- followers -----------------------------------------------------------------------------------


def group(tmp_path, with_old, n_old=150):
    """Three members; those in with_old start from a copy of one classic store (4.9's deploy guide:
    copy the old commit log to every machine). n0 is made the first candidate (the others' vote
    intervals are long), so it leads."""
    classic(tmp_path / "orig", n_old)
    clock = task.Clock()
    net = Net(clock)
    ids = ("n0", "n1", "n2")
    stores = {}
    for i in ids:
        root = tmp_path / i
        if i in with_old:
            shutil.copytree(tmp_path / "orig", root)
        vote = (300, 400) if i == "n0" else (20000, 30000)
        s, c = dledger_store(root, clock, self_id=i, ids=ids, vote_ms=vote)
        stores[i] = run(s, c, clock, net)
    until(clock, lambda: stores["n0"].writable)
    return clock, stores


def close_all(stores):
    for s in stores.values():
        s.shutdown()


def test_every_member_with_the_same_old_log_serves_old_and_new(tmp_path):
    clock, stores = group(tmp_path, ("n0", "n1", "n2"))
    try:
        new = [put(clock, stores["n0"], i) for i in range(5)]
        assert all(r.status == PutStatus.PUT_OK for r in new)
        until(clock, lambda: all(s.max_queue_offset("T", 0) == 100 + 5 for s in stores.values()))
        divides = {s.divided for s in stores.values()}
        assert len(divides) == 1 and new[0].wrote_offset == divides.pop() + 48
        for s in stores.values():
            msgs, _ = pulled(s, 0)
            assert [m.properties["UNIQ_KEY"] for m in msgs] == [f"U{i}" for i in range(150) if i % 3 != 2] + [
                f"N{i}" for i in range(5)
            ]
    finally:
        close_all(stores)


def test_followers_without_the_old_log_hold_only_the_new_messages(tmp_path):
    """4.9: a member with no old log starts its DLedger log where the leader's entries are (the leader's
    TRUNCATE rebuilds it there); the old messages are only on the member that had them."""
    clock, stores = group(tmp_path, ("n0",))
    try:
        lead = stores["n0"]
        new = [put(clock, lead, i) for i in range(5)]
        assert all(r.status == PutStatus.PUT_OK for r in new)
        until(clock, lambda: all(s.max_queue_offset("T", 0) == 105 for s in stores.values()))
        for i in ("n1", "n2"):
            f = stores[i]
            assert f.divided == -1 and f.fs.data.min_offset == lead.divided
            assert f.min_queue_offset("T", 0) == 100  # consume queue from the first new message's offset
            got = f.get_messages("T", 0, 0, 32)
            assert got.status == GetStatus.OFFSET_TOO_SMALL and got.next_begin_offset == 100
            msgs, _ = pulled(f, 0, 100)
            assert [m.properties["UNIQ_KEY"] for m in msgs] == [f"N{k}" for k in range(5)]
            assert [m.physical_offset for m in msgs] == [r.wrote_offset for r in new]
        msgs, _ = pulled(lead, 0)
        assert len(msgs) == 105
    finally:
        close_all(stores)


def test_a_leader_without_the_old_log_puts_its_entries_below_the_others_divide(tmp_path):
    """The hazard of 4.9's upgrade when the first leader has no old log: its entries start at 0, and a
    member with the old log rebuilds its DLedger log there, inside its old log. 4.9 would serve the old
    bytes at those offsets; here the entries are not dispatched, and that member's next start is refused."""
    clock, stores = group(tmp_path, ("n1",))
    try:
        r = put(clock, stores["n0"], 0)
        assert r.status == PutStatus.PUT_OK and (r.wrote_offset, r.queue_offset) == (48, 0)
        up = stores["n1"]
        until(clock, lambda: up.fs.committed_index >= 0 and up.dispatched_all)
        assert up.divided > 0 and up.fs.data.min_offset == 0
        assert up.entries_below_divide >= 1 and "below the divide" in up.dispatch_error
        msgs, _ = pulled(up, 0)
        assert [m.properties["UNIQ_KEY"] for m in msgs] == [f"U{i}" for i in range(150) if i % 3 != 2]
    finally:
        close_all(stores)
    clock2 = task.Clock()
    again, _c = dledger_store(tmp_path / "n1", clock2, self_id="n1", ids=("n0", "n1", "n2"))
    with pytest.raises(StoreError, match="overlap"):
        again.start()


# -- storePathDLedgerCommitLog -------------------------------------------------------------------


@pytest.mark.fast
def test_store_path_dledger_commit_log_holds_the_data_files(tmp_path):
    classic(tmp_path / "s", 20)
    clock = task.Clock()
    data = tmp_path / "elsewhere" / "dl"
    s, c = dledger_store(tmp_path / "s", clock, storePathDLedgerCommitLog=str(data))
    assert c.dledger_data_dir == str(data)
    run(s, c, clock)
    try:
        until(clock, lambda: s.writable)
        assert put(clock, s, 0).wrote_offset == FILE + 48
        assert os.listdir(data) == [f"{FILE:020d}"]
        assert not os.path.exists(tmp_path / "s" / "dledger-n0" / "data")
        assert os.path.exists(tmp_path / "s" / "dledger-n0" / "index")  # the index stays (as 4.9)
    finally:
        s.shutdown()


@pytest.mark.fast
def test_store_path_dledger_commit_log_default_and_bad_values(tmp_path):
    def cfg(**kw):
        return BrokerConfig.from_properties(
            {
                "enableDLegerCommitLog": "true",
                "dLegerGroup": "B",
                "dLegerPeers": "n0-127.0.0.1:40911",
                "dLegerSelfId": "n0",
                "storePathRootDir": str(tmp_path / "r"),
                **kw,
            }
        )

    assert cfg().dledger_data_dir == str(tmp_path / "r" / "dledger-n0" / "data")
    with pytest.raises(ConfigError, match="several paths"):
        cfg(storePathDLedgerCommitLog=f"{tmp_path}/a,{tmp_path}/b")
    with pytest.raises(ConfigError, match="classic commit log"):
        cfg(storePathDLedgerCommitLog=str(tmp_path / "r" / "commitlog"))
    with pytest.raises(ConfigError, match="classic commit log"):
        cfg(storePathCommitLog=str(tmp_path / "cl"), storePathDLedgerCommitLog=str(tmp_path / "cl"))
    with pytest.raises(ConfigError, match="index directory"):
        cfg(storePathDLedgerCommitLog=str(tmp_path / "r" / "dledger-n0" / "index"))
    with pytest.raises(ConfigError, match="consumequeue"):
        cfg(storePathDLedgerCommitLog=str(tmp_path / "r" / "consumequeue"))
    (tmp_path / "f").write_text("x")
    with pytest.raises(ConfigError, match="not a directory"):
        cfg(storePathDLedgerCommitLog=str(tmp_path / "f"))


# -- the audit -----------------------------------------------------------------------------------


@pytest.mark.fast
def test_the_audit_reads_an_upgraded_members_old_commit_log_too(tmp_path):
    """rmqha/pipeline: a DLedger node's files are its DLedger data files and, below the first of them, the
    classic commit log it was upgraded from; each is decoded in its own format."""
    from rmqha.pipeline import decode, runfolder

    node_dir = tmp_path / "nodes" / "broker-n0"
    old = classic(node_dir / "store", 250)  # two classic files
    clock = task.Clock()
    s, c = dledger_store(node_dir / "store", clock)
    run(s, c, clock)
    until(clock, lambda: s.writable)
    new = [put(clock, s, i) for i in range(5)]
    until(clock, lambda: s.fs.committed_index == s.fs.end_index)
    s.shutdown()
    write_node_json(
        str(node_dir),
        node_json("broker-n0", "B", -1, "SLAVE", commitLog="dledger", dLegerSelfId="n0", commitlogFileSize=FILE),
    )
    node = runfolder.load_node(str(node_dir))
    assert [os.path.basename(os.path.dirname(f.path)) for f in node.files] == ["commitlog", "commitlog", "data"]
    assert [node.is_dledger_file(f) for f in node.files] == [False, False, True]
    phys = decode.COLUMNS.index(("physical_offset", "long"))
    status = decode.COLUMNS.index(("status", "string"))
    rows = [r for f in node.files for r in decode.decode_file(node, f)]
    ok = [r[phys] for r in rows if r[status] == "ok"]
    assert ok == [r.wrote_offset for r in old] + [r.wrote_offset for r in new]
