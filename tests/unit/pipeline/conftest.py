"""Run folders made with the real MessageStore, and one small Spark session per pytest-xdist worker, kept
warm for the worker's life: a package-scoped session (stopped when the worker moved on) paid Spark's JVM
start and JIT warm-up again for every file, measured slower overall (tests/conftest.py)."""

import os
import shutil

import pytest

from rmqha.runs.layout import node_json, write_node_json
from rmqha.broker.store.message_store import MessageStore
from rmqha.broker.store.record import Message
from rmqha.runs.history import HistoryWriter
from rmqha.pipeline import runfolder

FILE_SIZE = 64 << 10


@pytest.fixture(scope="session")
def spark():
    pytest.importorskip("pyspark")
    from rmqha.pipeline.spark import get_spark

    # One shuffle partition and no automatic broadcast joins: on these few hundred rows a second task per
    # stage and a broadcast job per join cost more than they parallelise. No generated code: compiling it
    # (Janino, then the JIT) costs far more than it saves on so few rows. Alternating configurations in one
    # JVM, CPU per 300-message report.run: 8.2 s with 2 partitions and broadcasts, 7.4 s with 1 and none,
    # 5.8 s with no generated code either (wall 9.3 -> 6.2 s).
    s = get_spark(
        "pipeline-unit-tests",
        "local[2]",
        {
            "spark.sql.shuffle.partitions": "1",
            "spark.default.parallelism": "1",
            "spark.sql.adaptive.enabled": "false",
            "spark.sql.autoBroadcastJoinThreshold": "-1",
            "spark.sql.codegen.wholeStage": "false",
            "spark.sql.codegen.factoryMode": "NO_CODEGEN",
            "spark.ui.enabled": "false",
            "spark.driver.memory": "1g",
        },
        quick_jvm=True,
    )
    yield s
    s.stop()


class RunBuilder:
    """Builds RUN/nodes/<node>/{node.json,store/commitlog} and RUN/history/*.jsonl."""

    def __init__(self, root):
        self.root = str(root)
        self.clock = 1_700_000_000_000
        self.sent = []  # (uniq_key, send_id, put result)

    def node_dir(self, name):
        return os.path.join(self.root, "nodes", name)

    def master(
        self, name="broker-a-0", broker="broker-a", role="SYNC_MASTER", n=300, body=200, topic="T", file_size=FILE_SIZE
    ):
        write_node_json(self.node_dir(name), node_json(name, broker, 0, role, addr=f"{name}:10911"))
        store = MessageStore(
            os.path.join(self.node_dir(name), "store"),
            commitlog_file_size=file_size,
            cq_file_size=20 * 1000,
            now_ms=self._tick,
        )
        store.start()
        self.store = store
        for i in range(n):
            self.put(topic, f"{broker}-U{i:05d}", f"{broker}-S{i:05d}", body, i % 4)
        return store

    def _tick(self):
        self.clock += 3
        return self.clock

    def put(self, topic, uniq_key, send_id, body=200, queue_id=0):
        m = Message(
            topic=topic,
            body=os.urandom(body),
            queue_id=queue_id,
            born_timestamp=self.clock,
            properties={"UNIQ_KEY": uniq_key, "KEYS": send_id, "TAGS": "tg"},
        )
        r = self.store.put_message(m)
        assert r.status == "PUT_OK"
        r.queue_id = queue_id
        self.sent.append((uniq_key, send_id, r))
        return r

    def close(self):
        self.store.shutdown()

    def slave(self, master="broker-a-0", name="broker-a-1", broker="broker-a", from_file=0):
        """A byte copy of the master's commit log, optionally starting at its from_file-th file."""
        src = os.path.join(self.node_dir(master), "store", "commitlog")
        dst = os.path.join(self.node_dir(name), "store", "commitlog")
        os.makedirs(dst)
        for fname in sorted(os.listdir(src))[from_file:]:
            shutil.copyfile(os.path.join(src, fname), os.path.join(dst, fname))
        write_node_json(self.node_dir(name), node_json(name, broker, 1, "SLAVE", addr=f"{name}:10911"))
        return dst

    def history(self, client="p1", lost=(), extra=()):
        """SEND_OK for every stored message plus `lost` (uniq_key, send_id) never stored, and a receive
        of each stored one, in order."""
        w = HistoryWriter(os.path.join(self.root, "history", f"{client}.jsonl"))
        t = 1_700_000_000_000
        for uk, sid, r in self.sent:
            w.append(
                {
                    "client": client,
                    "op": "send",
                    "topic": "T",
                    "send_id": sid,
                    "attempt": 1,
                    "uniq_key": uk,
                    "status": "SEND_OK",
                    "queue_offset": r.queue_offset,
                    "start_ms": t,
                    "end_ms": t + 2,
                }
            )
            t += 1
        for uk, sid in lost:
            w.append(
                {
                    "client": client,
                    "op": "send",
                    "topic": "T",
                    "send_id": sid,
                    "attempt": 1,
                    "uniq_key": uk,
                    "status": "SEND_OK",
                    "start_ms": t,
                    "end_ms": t + 5,
                }
            )
        for rec in extra:
            w.append({"client": client, **rec})
        w.close()
        c = HistoryWriter(os.path.join(self.root, "history", f"{client}-consumer.jsonl"))
        for uk, sid, r in self.sent:
            c.append(
                {
                    "client": f"{client}-consumer",
                    "op": "receive",
                    "topic": "T",
                    "send_id": sid,
                    "uniq_key": uk,
                    "status": "RECEIVED",
                    "queue_id": r.queue_id,
                    "queue_offset": r.queue_offset,
                    "ordered": True,
                    "start_ms": t + 10,
                    "end_ms": t + 10,
                }
            )
            t += 1
        c.close()


def flip_byte(path, pos):
    with open(path, "r+b") as fh:
        fh.seek(pos)
        b = fh.read(1)
        fh.seek(pos)
        fh.write(bytes([b[0] ^ 0xFF]))


@pytest.fixture
def run_builder(tmp_path):
    return RunBuilder(tmp_path / "run")


def audit_only(spark, run_root, allowed_forks=None, final_ack=None):
    """The replica audit alone (decode, node_integrity, audit_pairs, verdicts): verdicts by name, and the
    pairs by slave name."""
    from rmqha.pipeline import audit, decode

    nodes = runfolder.load_nodes(run_root)
    df = decode.decode(spark, nodes, 16384).cache()
    integrity = audit.node_integrity(df, nodes)
    pairs = audit.audit_pairs(spark, df, nodes, integrity)
    df.unpersist()
    vs = audit.verdicts(pairs, integrity, nodes, final_ack, allowed_forks)
    return {v.name: v for v in vs}, {p.slave: p for p in pairs}


class Slaves:
    """One master of 300 messages over two files and three slaves, each a case of its own, audited once
    (each verdict is per node or per master/slave pair: the cases do not see each other):
    broker-a-1  a byte copy with one body byte flipped at the 151st message (flipped, below)
    broker-a-2  a copy of the master's last file only (a new slave that starts there)
    broker-a-3  a byte copy with the FLAG header field of the 41st message flipped (header)"""

    def __init__(self, spark, root):
        rb = self.rb = RunBuilder(root)
        rb.master(n=300)
        rb.close()
        d = rb.slave(name="broker-a-1")
        self.flipped = rb.sent[150][2]
        f = sorted(os.listdir(d))[self.flipped.wrote_offset // FILE_SIZE]
        flip_byte(os.path.join(d, f), self.flipped.wrote_offset % FILE_SIZE + 120)  # inside the body
        rb.slave(name="broker-a-2", from_file=1)
        d = rb.slave(name="broker-a-3")
        self.header = rb.sent[40][2]
        f = sorted(os.listdir(d))[self.header.wrote_offset // FILE_SIZE]
        flip_byte(os.path.join(d, f), self.header.wrote_offset % FILE_SIZE + 16)  # FLAG field
        self.verdicts, self.pairs = audit_only(spark, rb.root)


@pytest.fixture(scope="session")
def slaves(spark, tmp_path_factory):
    """Slaves, built and audited once per test worker; tests only read it."""
    return Slaves(spark, tmp_path_factory.mktemp("slaves") / "run")


VERDICT_DUMP_ENV = "RMQHA_VERDICT_DUMP"


@pytest.fixture(autouse=True)
def _dump_verdicts(request, monkeypatch):
    """With $RMQHA_VERDICT_DUMP set to a directory: every verdict line each test's audits produce, per
    producer (report.run and each module's verdicts()), one file per test: a golden record to compare
    the audit's output before and after a change to the pipeline."""
    out = os.environ.get(VERDICT_DUMP_ENV)
    if not out:
        yield
        return
    from rmqha.pipeline import audit, checkers, delivery, faults, history_check, offsets, report

    lines = []

    def wrap(mod, name, pick):
        f = getattr(mod, name)

        def g(*a, **k):
            r = f(*a, **k)
            lines.extend(f"{mod.__name__.rsplit('.', 1)[-1]}.{name}: {v.line()}" for v in pick(r))
            return r

        monkeypatch.setattr(mod, name, g)

    for mod in (audit, delivery, faults, history_check, offsets):
        wrap(mod, "verdicts", lambda r: r)
    wrap(report, "run", lambda r: r.verdicts)
    wrap(checkers, "trace_verdict", lambda r: [r])
    if "slaves" in request.fixturenames:  # audited once, before this fixture: its verdicts are the test's
        lines.extend(f"audit.verdicts: {v.line()}" for v in request.getfixturevalue("slaves").verdicts.values())
    yield
    if lines:
        os.makedirs(out, exist_ok=True)
        name = "".join(c if c.isalnum() or c in "-_." else "_" for c in request.node.nodeid)
        with open(os.path.join(out, name + ".txt"), "a") as fh:
            fh.write("\n".join(lines) + "\n")
