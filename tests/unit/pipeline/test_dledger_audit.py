"""The audit on DLedger nodes (rmqha/pipeline/dledger_log.py): a run folder fabricated with the project's own
DLedger file store (rmqha.broker.dledger.file_store.FileStore, the leader's append hook of
rmqha.broker.store.dledger_commitlog) and classic consume queues, audited whole.

The group RaftNode00 (64 KiB data files, 4 KiB index files: records cross data files, blanks, and index files):
  broker-n1  the leader at the end (term 2, voted for by n1 and n2): noop, 150 messages (term 1), noop,
             150 messages (term 2), committed up to index 301, then 2 uncommitted entries
  broker-n2  a follower with all of 0..301, a checkpoint that trails (296) and one divergent uncommitted
             entry at 302 (another message at the leader's position)
  broker-n0  a follower cut off in term 1: 0..150, then three stale term-1 entries at 151..153, checkpoint 150
The histories acknowledge every committed message and the leader's uncommitted entry 302.
"""

import os
import shutil
from types import SimpleNamespace

import pytest

from rmqha.runs.layout import node_json, write_node_json
from rmqha.broker.dledger.entry import BODY_OFFSET, INDEX_UNIT_SIZE, DLedgerEntry
from rmqha.broker.dledger.file_store import FileStore
from rmqha.broker.store.dledger_commitlog import NOOP_TOPIC, noop_body, patch_physical_offset
from rmqha.broker.store import record
from rmqha.broker.store.consume_queue import ConsumeQueue
from rmqha.broker.store.record import Message
from rmqha.pipeline import audit, decode, dledger_log, report, runfolder
from rmqha.pipeline.verdict import FAIL, INFO, PASS, WARN

from .conftest import RunBuilder, audit_only, flip_byte

DATA_FILE = 64 << 10
INDEX_FILE = INDEX_UNIT_SIZE * 128
GROUP = "RaftNode00"
COMMITTED = 301


def _message(uk: str, send_id: str, queue_id: int, queue_offset: int, ts: int) -> bytes:
    m = Message(
        topic="T",
        body=(uk * 20).encode()[:200],
        queue_id=queue_id,
        born_timestamp=ts,
        store_timestamp=ts + 1,
        store_host=("127.0.0.1", 10911),
        properties={"UNIQ_KEY": uk, "KEYS": send_id, "TAGS": "tg"},
    )
    return bytes(record.encode(m).finish(queue_offset, 0))


class DLedgerRun:
    """The run folder of the module docstring; `entries` are the leader's (index -> DLedgerEntry)."""

    def __init__(self, root):
        self.root = str(root)
        self.rb = RunBuilder(self.root)
        self.keys = {}  # entry index -> (uniq key, send id, queue id, queue offset) of the leader's messages
        leader = self._store("broker-n1", "n1")
        leader.append_hook = patch_physical_offset
        qoff = [0, 0, 0, 0]
        ts = 1_700_000_000_000
        for term, count in ((1, 150), (2, 150), (2, 2)):
            if count == 150:
                leader.append_as_leader(noop_body(), term)
            for _ in range(count):
                i = leader.end_index + 1
                q = i % 4
                uk, sid = f"U{i:05d}", f"S{i:05d}"
                leader.append_as_leader(_message(uk, sid, q, qoff[q], ts), term)
                self.keys[i] = (uk, sid, q, qoff[q])
                qoff[q] += 1
                ts += 3
        self.entries = {e.index: e for e in leader.entries()}
        assert leader.end_index == COMMITTED + 2
        leader.set_committed_index(COMMITTED)
        leader.persist_term(2, "n1")
        leader.close()
        self._node("broker-n1", "n1", COMMITTED)

        n2 = self._store("broker-n2", "n2")
        for i in range(COMMITTED + 1):
            n2.append_as_follower(self.entries[i])
        lead = self.entries[COMMITTED + 1]  # the same size and position, another message
        other = patch_physical_offset(_message("X99999", "Z99999", 0, 0, ts), lead.pos)
        assert len(other) == len(lead.body)
        n2.append_as_follower(DLedgerEntry(body=other, index=lead.index, term=2, pos=lead.pos))
        n2.set_committed_index(COMMITTED - 5)
        n2.persist_term(2, "n1")
        n2.close()
        self._node("broker-n2", "n2", COMMITTED)

        n0 = self._store("broker-n0", "n0")
        for i in range(151):
            n0.append_as_follower(self.entries[i])
        for i in range(151, 154):  # an old leader's term-1 entries that n2 and n1 never took
            body = _message(f"O{i:05d}", f"Q{i:05d}", 0, 0, ts)
            pos = n0.data.pre_append(BODY_OFFSET + len(body))  # where the append will go (pads a file end)
            n0.append_as_follower(DLedgerEntry(body=patch_physical_offset(body, pos), index=i, term=1, pos=pos))
        n0.set_committed_index(150)
        n0.persist_term(1, "n0")
        n0.close()
        self._node("broker-n0", "n0", 150)

        # every committed message acknowledged and received; the leader's uncommitted 302 acknowledged too
        for i in sorted(self.keys):
            uk, sid, q, qo = self.keys[i]
            if i <= COMMITTED:
                self.rb.sent.append((uk, sid, SimpleNamespace(queue_id=q, queue_offset=qo)))
        self.lost_key = self.keys[COMMITTED + 1][:2]
        self.rb.history(lost=[self.lost_key])

    def store_dir(self, name):
        return os.path.join(self.rb.node_dir(name), "store")

    def _store(self, name, sid):
        return FileStore(self.store_dir(name), sid, data_file_size=DATA_FILE, index_file_size=INDEX_FILE)

    def _node(self, name, sid, dispatched):
        """node.json as rmqha.cluster writes it for a DLedger broker, and the classic consume queues of the
        messages it dispatched (entries up to `dispatched`)."""
        write_node_json(
            self.rb.node_dir(name),
            node_json(
                name,
                GROUP,
                -1,
                "ASYNC_MASTER",
                "RaftCluster",
                f"{name}:10911",
                commitLog="dledger",
                dLegerSelfId=sid,
                dLegerGroup=GROUP,
                commitlogFileSize=DATA_FILE,
            ),
        )
        cqs = {}
        for i, e in sorted(self.entries.items()):
            if i > dispatched or i not in self.keys:
                continue
            _, _, q, qo = self.keys[i]
            if q not in cqs:
                cqs[q] = ConsumeQueue(os.path.join(self.store_dir(name), "consumequeue"), "T", q, 20 * 1000)
                cqs[q].load()
            cqs[q].put(qo, e.pos + BODY_OFFSET, len(e.body), 0)
        for cq in cqs.values():
            cq.flush()
            cq.close()


@pytest.fixture(scope="module")
def dl_run(tmp_path_factory):
    return DLedgerRun(tmp_path_factory.mktemp("dledger") / "run")


def _by_name(nodes):
    return {n.name: n for n in nodes}


def test_noop_topic_is_the_brokers():
    assert dledger_log.NOOP_TOPIC == NOOP_TOPIC


def test_nodes_roles_and_committed_indexes(dl_run):
    nodes = _by_name(runfolder.load_nodes(dl_run.root))
    n0, n1, n2 = nodes["broker-n0"], nodes["broker-n1"], nodes["broker-n2"]
    assert (n1.role, n1.broker_id) == ("ASYNC_MASTER", 0)  # elected in term 2 by n1 and n2
    assert [(n.role, n.broker_id) for n in (n0, n2)] == [("SLAVE", 1), ("SLAVE", 3)]
    assert n1.is_master and not n0.is_master and not n2.is_master
    # (checkpoint, read up to, end, uncommitted): n2's trailing checkpoint is raised by log matching; n0's
    # stale term-1 entries are not the leader's, so they stay unread
    got = {
        n.name: (n.dledger.checkpoint_index, n.dledger.committed_index, n.dledger.end_index, n.dledger.uncommitted)
        for n in (n0, n1, n2)
    }
    assert got == {"broker-n0": (150, 150, 153, 3), "broker-n1": (301, 301, 303, 2), "broker-n2": (296, 301, 302, 1)}
    assert all(len(n.files) == len(n1.files) >= 2 for n in (n1, n2))  # records cross data files
    assert all(
        f.path.startswith(os.path.join(n.store_dir, f"dledger-{n.dledger.self_id}", "data"))
        for n in (n0, n1, n2)
        for f in n.files
    )
    (v,) = dledger_log.verdicts(list(nodes.values()))
    assert (
        v.status == INFO
        and "broker-n1 (ASYNC_MASTER, selfId n1): committed index 301 (checkpoint 301), 2 uncommitted entries not read"
        in v.detail
    )


def test_a_member_without_its_log_is_still_a_follower(dl_run, tmp_path):
    root = str(tmp_path / "run")
    shutil.copytree(dl_run.root, root)
    shutil.rmtree(os.path.join(root, "nodes", "broker-n0", "store", "dledger-n0"))
    nodes = _by_name(runfolder.load_nodes(root))
    n0 = nodes["broker-n0"]
    assert (n0.role, n0.broker_id, n0.files, n0.dledger.committed_index) == ("SLAVE", 1, [], -1)
    assert audit.groups(list(nodes.values()))[GROUP][0].name == "broker-n1"


def test_decoded_rows_are_the_committed_messages_at_pos_plus_48(dl_run):
    nodes = _by_name(runfolder.load_nodes(dl_run.root))
    for name, committed in (("broker-n1", 301), ("broker-n2", 301), ("broker-n0", 150)):
        n = nodes[name]
        rows = [r for f in n.files for r in decode.decode_file(n, f)]
        want = [
            (e.pos + BODY_OFFSET, dl_run.keys[i][0])
            for i, e in sorted(dl_run.entries.items())
            if i <= committed and i in dl_run.keys
        ]
        assert {r[7] for r in rows} == {"ok"}, name
        assert [(r[5], r[19]) for r in rows] == want, name
        assert all(r[6] == len(dl_run.entries[i].body) for r, i in zip(rows, sorted(dl_run.keys)))
        assert NOOP_TOPIC not in {r[10] for r in rows}
    # the classic walk of the same files calls every entry header an unreadable span, and reads the no-ops
    # and the uncommitted entries
    n1 = nodes["broker-n1"]
    n1.dledger = None
    classic = [r for f in n1.files for r in decode.decode_file(n1, f)]
    assert {r[7] for r in classic} >= {"ok", "invalid"}
    assert len([r for r in classic if r[7] == "ok"]) == 304


def test_node_json_written_by_the_cluster_tool_marks_dledger():
    from rmqha.broker.config.properties import BrokerConfig
    from rmqha.runs.layout import node_record

    c = BrokerConfig(
        brokerName=GROUP,
        enableDLegerCommitLog=True,
        dLegerGroup=GROUP,
        dLegerSelfId="n2",
        dLegerPeers="n0-127.0.0.1:1;n1-127.0.0.1:2;n2-127.0.0.1:3",
    )
    rec = node_record("broker-n2", c, "127.0.0.1", "local")
    assert (rec["commitLog"], rec["dLegerSelfId"], rec["dLegerGroup"]) == ("dledger", "n2", GROUP)
    assert "commitLog" not in node_record("broker-a-0", BrokerConfig(brokerName="broker-a"), "127.0.0.1", "local")


def test_whole_audit_of_a_dledger_group(spark, dl_run):
    rep = report.run(spark, dl_run.root, os.path.join(os.path.dirname(dl_run.root), "out"), range_bytes=16384)
    v = {x.name: x for x in rep.verdicts}
    for n in ("broker-n0", "broker-n1", "broker-n2"):
        assert v[f"log integrity {n}"].status == PASS, v[f"log integrity {n}"].line()
        assert v[f"consume queues match the log on {n}"].status == PASS, v[f"consume queues match the log on {n}"]
    assert v["log integrity broker-n1"].detail.startswith("300 records")
    assert v["log integrity broker-n0"].detail.startswith("150 records")
    # n2 holds what n1 committed (its divergent uncommitted entry is not read); n0 lags (its stale tail unread)
    same = v[f"replica {GROUP}: broker-n1 vs broker-n2"]
    assert same.status == PASS and "identical" in same.detail, same.line()
    lag = v[f"replica {GROUP}: broker-n1 vs broker-n0"]
    assert lag.status == WARN and lag.detail.startswith("slave behind by "), lag.line()
    # the one acknowledged send whose entry never committed is lost; every committed one is stored
    lost = v["no acknowledged send lost"]
    assert lost.status == FAIL and lost.detail.startswith("1 SEND_OK message(s) on no node"), lost.line()
    assert f"send {dl_run.lost_key[1]} " in lost.detail
    assert v["no UNIQ_KEY stored twice"].status == PASS
    assert v["per-queue receive order"].status == PASS
    assert v["nothing received that was never sent"].status == PASS


def test_a_flipped_committed_byte_on_a_follower_is_a_divergence(spark, dl_run, tmp_path):
    root = str(tmp_path / "run")
    shutil.copytree(dl_run.root, root)
    e = dl_run.entries[200]
    data = os.path.join(root, "nodes", "broker-n2", "store", "dledger-n2", "data")
    f = sorted(os.listdir(data))[e.pos // DATA_FILE]
    flip_byte(os.path.join(data, f), e.pos % DATA_FILE + BODY_OFFSET + 16)  # the record's FLAG field
    verdicts, pairs = audit_only(spark, root)
    v = verdicts[f"replica {GROUP}: broker-n1 vs broker-n2"]
    assert v.status == FAIL, v.line()
    assert pairs["broker-n2"].first_divergent_offset == e.pos + BODY_OFFSET
    assert audit.groups(runfolder.load_nodes(root))[GROUP][0].name == "broker-n1"
