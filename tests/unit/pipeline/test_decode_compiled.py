"""The compiled decoder (rmqha.broker.store.summary_columns through rmqha.pipeline.decode.arrow_batches) gives exactly
the rows of the pure-Python reference (decode_range: record.scan_summary per record) over the same files:
damaged logs (flipped bytes, zeroed holes, torn tails, blanks), odd properties, topics and keys that are
not ASCII, IPv6 hosts, several files, any split into ranges and any batch size."""

import os
import random

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("numba")
pytestmark = pytest.mark.compiles  # numba compiles the walk on first use (about 25 s on a fresh checkout)

from rmqha.runs.layout import node_json, write_node_json  # noqa: E402
from rmqha.broker.store import record  # noqa: E402
from rmqha.pipeline import decode, runfolder  # noqa: E402

from .conftest import flip_byte  # noqa: E402
from .test_decode import _damaged  # noqa: E402

NAMES = [c for c, _ in decode.COLUMNS]
FILE = 1 << 16


def _batch_rows(task, compiled, chunk_rows=decode.CHUNK_ROWS):
    batches = list(decode.arrow_batches(task, chunk_rows, compiled=compiled))
    assert all(b.schema == decode.arrow_schema() for b in batches)
    return sorted(tuple(r[c] for c in NAMES) for b in batches for r in b.to_pylist())


def _tasks(node, range_bytes=None):
    meta = (node.name, node.broker_name, node.broker_id, node.role)
    for f in node.files:
        size = range_bytes or max(f.length, 1)
        for start in range(0, max(f.length, 1), size):
            yield decode.DecodeTask(meta, f.path, f.base, f.length, f.mapped_size, start, min(start + size, f.length))


def _assert_same(node, range_bytes=None, chunk_rows=decode.CHUNK_ROWS, want=None):
    """want: the reference rows of these tasks when already known (they do not depend on chunk_rows)."""
    tasks = list(_tasks(node, range_bytes))
    if want is None:
        want = sorted(r for t in tasks for r in decode.decode_range(t))
    got = sorted(r for t in tasks for r in _batch_rows(t, True, chunk_rows))
    assert got == want
    assert sorted(r for t in tasks for r in _batch_rows(t, False, chunk_rows)) == want
    return want


def _odd_message(rnd, k):
    v6 = rnd.randrange(4)
    props = rnd.choice(
        [
            {"UNIQ_KEY": f"U{k}", "KEYS": f"k{k} \u00e9t\u00e9", "TAGS": "t"},
            {"KEYS": "\u4e2d\u6587 key", "TAGS": "\U0001f600", "a\u0001b": "c"},
            {"UNIQ_KEY": "", "TAGS": ""},
            {"TAGS": "x\u0001y", "KEYS": "a\u0002KEYS\u0001b"},
            {},
            {"XTAGS": "no", "TAGSX": "no", "UNIQ_KEY": "u" * 3000},
        ]
    )
    return record.Message(
        topic=rnd.choice(["T", "T\u00f6pic", "\u4e3b\u9898", "x" * 40]),
        body=rnd.randbytes(rnd.randrange(0, 2000)),
        queue_id=rnd.randrange(8),
        sys_flag=rnd.choice([0, 4, 8, 12]),
        born_timestamp=rnd.randrange(1 << 42),
        store_timestamp=rnd.randrange(1 << 42),
        born_host=("::1" if v6 & 1 else "10.0.0.1", 1),
        store_host=("fe80::7" if v6 & 2 else "10.0.0.2", 10911),
        properties=props,
        queue_offset=k,
    )


def _write_log(root, name, messages, file_size=FILE, tail_bytes=None):
    """A node whose commit log holds these records back to back, a blank at each file end."""
    d = os.path.join(root, "nodes", name, "store", "commitlog")
    os.makedirs(d)
    write_node_json(
        os.path.join(root, "nodes", name), node_json(name, "broker-a", 0, "SYNC_MASTER", addr="127.0.0.1:10911")
    )
    files, cur, base = {}, bytearray(), 0
    for k, m in enumerate(messages):
        enc = record.encode(m)
        if len(cur) + enc.size + 8 > file_size:
            cur += record.blank(file_size - len(cur))
            files[base], cur, base = bytes(cur), bytearray(), base + file_size
        cur += enc.finish(k, base + len(cur))
    files[base] = bytes(cur) if tail_bytes is None else bytes(cur) + bytes(tail_bytes)
    for b, data in files.items():
        with open(os.path.join(d, f"{b:020d}"), "wb") as fh:
            fh.write(data)
    return runfolder.load_node(os.path.join(root, "nodes", name))


def test_damaged_store_files_give_the_reference_rows_in_any_split_and_batch_size(run_builder):
    node = _damaged(run_builder)
    for range_bytes in (None, 7, 4096, 20000):
        want = None
        for chunk_rows in (1, 50, decode.CHUNK_ROWS):
            want = _assert_same(node, range_bytes, chunk_rows, want)


def test_odd_properties_non_ascii_and_ipv6_over_several_files(tmp_path):
    rnd = random.Random(11)
    node = _write_log(str(tmp_path), "n0", [_odd_message(rnd, k) for k in range(300)], tail_bytes=5000)
    assert len(node.files) >= 3
    rows = _assert_same(node)
    assert sum(r[7] == "ok" for r in rows) == 300
    for range_bytes in (3000, 8192):
        _assert_same(node, range_bytes, 37)


@pytest.mark.parametrize("seed", range(4))
def test_randomly_damaged_logs(tmp_path, seed):
    rnd = random.Random(seed)
    node = _write_log(str(tmp_path), "n0", [_odd_message(rnd, k) for k in range(120)])
    for f in node.files:
        for _ in range(3):
            what = rnd.randrange(4)
            pos = rnd.randrange(f.length)
            if what == 0:
                flip_byte(f.path, pos)
            elif what == 1:
                with open(f.path, "r+b") as fh:
                    fh.seek(pos)
                    fh.write(bytes(rnd.randrange(1, 300)))
            elif what == 2:
                with open(f.path, "r+b") as fh:  # a blank where it does not belong
                    fh.seek(pos)
                    fh.write(record.blank(rnd.randrange(8, 1 << 16)))
            else:
                with open(f.path, "r+b") as fh:  # bytes that are not UTF-8
                    fh.seek(pos)
                    fh.write(b"\xff\xfe\xc3")
    os.truncate(node.files[-1].path, node.files[-1].length * 2 // 3)
    node = runfolder.load_node(os.path.dirname(os.path.dirname(os.path.dirname(node.files[0].path))))
    rows = _assert_same(node)
    assert any(r[7] != "ok" for r in rows)
    _assert_same(node, 5000, 9)


def test_the_environment_chooses_the_walk_and_auto_switches_after_enough_records(monkeypatch):
    monkeypatch.setenv(decode.DECODER_ENV, "python")
    assert decode.use_compiled() is False
    assert decode.use_compiled(True) is True
    monkeypatch.setenv(decode.DECODER_ENV, "compiled")
    assert decode.use_compiled() is True
    monkeypatch.delenv(decode.DECODER_ENV)  # auto: the reference first
    monkeypatch.setattr(decode, "_REFERENCE_BYTES", [0])
    assert decode.use_compiled() is False and decode.use_compiled(True) is True
    monkeypatch.setattr(decode, "_REFERENCE_BYTES", [decode.COMPILED_AFTER_BYTES])
    assert decode.use_compiled() is True and decode.use_compiled(False) is False


def test_auto_counts_the_records_the_reference_decoded(monkeypatch, run_builder):
    node = _damaged(run_builder)
    monkeypatch.delenv(decode.DECODER_ENV, raising=False)
    monkeypatch.setattr(decode, "_REFERENCE_BYTES", [0])
    task = next(_tasks(node))
    rows = _batch_rows(task, None)
    assert decode._REFERENCE_BYTES[0] == sum(r[6] for r in rows if r[7] == "ok") > 0


def test_spark_decode_with_the_compiled_walk_matches_the_reference(spark, run_builder):
    node = _damaged(run_builder)
    want = sorted(r for t in _tasks(node) for r in decode.decode_range(t))
    for range_bytes in (8192, None):
        df = decode.decode(spark, [node], range_bytes, compiled=True)
        assert df.columns == NAMES
        assert sorted(tuple(r) for r in df.collect()) == want
