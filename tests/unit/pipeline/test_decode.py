import os
from collections import Counter

import pytest

from rmqha.pipeline import decode, runfolder

from .conftest import flip_byte


def _rows(node, range_bytes=None):
    return sorted(r for f in node.files for r in decode.decode_file(node, f, range_bytes))


def _damaged(run_builder):
    run_builder.master(n=400)
    run_builder.close()
    d = run_builder.slave()
    files = sorted(os.listdir(d))
    flip_byte(os.path.join(d, files[1]), 5000)  # header/properties or body byte
    with open(os.path.join(d, files[1]), "r+b") as fh:  # a zeroed hole inside a record
        fh.seek(20000)
        fh.write(bytes(40))
    os.truncate(os.path.join(d, files[-1]), 3000)  # torn tail, short file
    return runfolder.load_node(run_builder.node_dir("broker-a-1"))


def test_whole_file_rows_are_the_messages_stored(run_builder):
    run_builder.master(n=400)
    run_builder.close()
    node = runfolder.load_node(run_builder.node_dir("broker-a-0"))
    rows = _rows(node)
    ok = [r for r in rows if r[7] == "ok"]
    assert len(node.files) >= 3
    assert [r[5] for r in ok] == [res.wrote_offset for _, _, res in run_builder.sent]
    assert [r[19] for r in ok] == [uk for uk, _, _ in run_builder.sent]
    assert Counter(r[7] for r in rows) == {"ok": 400, "blank": len(node.files) - 1}
    first = dict(zip([c for c, _ in decode.COLUMNS], ok[0]))
    assert first["topic"] == "T" and first["keys"] == "broker-a-S00000" and first["tags"] == "tg"
    assert first["msg_id"].endswith(f"{0:016X}") and first["valid"] is True


@pytest.mark.parametrize("range_bytes", [1, 7, 512, 4096, 20000])
def test_byte_range_split_gives_the_whole_file_rows_even_when_damaged(run_builder, range_bytes):
    node = _damaged(run_builder)
    whole = _rows(node)
    assert _rows(node, range_bytes) == whole
    kinds = Counter(r[7] for r in whole)
    assert kinds["invalid"] >= 1 and kinds["torn"] == 1


def test_spark_decode_matches_local_decode_and_spreads_over_tasks(spark, run_builder):
    node = _damaged(run_builder)
    assert len(decode.plan([node], 8192)) > len(node.files)
    df = decode.decode(spark, [node], 8192)
    assert df.rdd.getNumPartitions() == min(
        len(decode.plan([node], 8192)), spark.sparkContext.defaultParallelism * decode.TASKS_PER_CORE
    )
    assert sorted(tuple(r) for r in df.collect()) == _rows(node)
    assert df.columns == [c for c, _ in decode.COLUMNS]


def test_slave_starting_at_a_later_file_and_sparse_tail(run_builder):
    run_builder.master(n=400)
    run_builder.close()
    run_builder.slave(from_file=2)
    node = runfolder.load_node(run_builder.node_dir("broker-a-1"))
    master = runfolder.load_node(run_builder.node_dir("broker-a-0"))
    assert node.start_offset == 2 * (64 << 10)
    assert _rows(node) == [
        r[:4] and (node.name, "broker-a", 1, "SLAVE") + r[4:] for r in _rows(master) if r[5] >= node.start_offset
    ]


def test_arrow_batches_give_the_rows_of_decode_range_in_any_chunking(run_builder):
    pytest.importorskip("pyarrow")
    node = _damaged(run_builder)
    names = [c for c, _ in decode.COLUMNS]
    meta = (node.name, node.broker_name, node.broker_id, node.role)
    for f in node.files:
        task = decode.DecodeTask(meta, f.path, f.base, f.length, f.mapped_size, 0, f.length)
        want = decode.decode_range(task)
        for chunk_rows in (1, 50, decode.CHUNK_ROWS):
            batches = list(decode.arrow_batches(task, chunk_rows))
            assert all(b.schema == decode.arrow_schema() for b in batches)
            got = sorted(tuple(r[c] for c in names) for b in batches for r in b.to_pylist())
            assert got == want


def test_row_fallback_without_arrow_gives_the_same_dataframe(spark, run_builder):
    node = _damaged(run_builder)
    df = decode.decode(spark, [node], 8192, use_arrow=False)
    assert df.rdd.getNumPartitions() == min(
        len(decode.plan([node], 8192)), spark.sparkContext.defaultParallelism * decode.TASKS_PER_CORE
    )
    assert sorted(tuple(r) for r in df.collect()) == _rows(node)


def test_lag_series_reads_the_cluster_samplers_own_format(tmp_path):
    """`python -m rmqha.cluster sample` writes ts in seconds, slaves as a list, and down rows; the report
    reads that file as it is."""
    import json
    from rmqha.pipeline import report, runfolder

    nodes = [
        runfolder.Node(
            name="broker-a",
            broker_name="broker-a",
            broker_id=0,
            role="SYNC_MASTER",
            cluster_name="C",
            addr="127.0.0.1:10911",
            store_dir=str(tmp_path),
        ),
        runfolder.Node(
            name="broker-a-s",
            broker_name="broker-a",
            broker_id=1,
            role="SLAVE",
            cluster_name="C",
            addr="127.0.0.1:10921",
            store_dir=str(tmp_path),
        ),
    ]
    rows = [
        {
            "ts": 1763770000.0,
            "node": "broker-a",
            "role": "SYNC_MASTER",
            "up": True,
            "maxPhyOffset": 500,
            "slaves": [{"addr": "192.168.1.5:40000", "ackOffset": 300}],
        },
        {"ts": 1763770000.0, "node": "broker-a-s", "role": "SLAVE", "up": True, "maxPhyOffset": 300},
        {"ts": 1763770000.5, "node": "broker-a", "role": "SYNC_MASTER", "up": False, "maxPhyOffset": None},
        {
            "ts": 1763770001.0,
            "node": "broker-a",
            "role": "SYNC_MASTER",
            "up": True,
            "maxPhyOffset": 900,
            "slaves": [{"addr": "192.168.1.5:40000", "ackOffset": 900}],
        },
    ]
    path = tmp_path / "samples.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    samples = report.load_metrics([str(path)])
    assert [s["ts"] for s in samples] == [1763770000000, 1763770000000, 1763770001000]
    assert report.lag_series(samples, nodes) == {"broker-a-s": [(1763770000000, 200), (1763770001000, 0)]}
    assert report.final_acks(samples, nodes) == {"broker-a-s": 900}


def test_auto_range_size_gives_a_few_tasks_per_core_within_bounds():
    def nodes(*lengths):
        return [
            runfolder.Node(f"n{i}", "b", i, "SLAVE", files=[runfolder.CommitLogFile("p", 0, n, n)])
            for i, n in enumerate(lengths)
        ]

    gib = 1 << 30
    # 2 GiB on 2 cores: 8 tasks of 256 MiB, not 32 of 64 MiB
    assert decode.auto_range_bytes(nodes(gib, gib), 2) == 256 << 20
    assert len(decode.plan(nodes(gib, gib), decode.auto_range_bytes(nodes(gib, gib), 2))) == 8
    # tiny logs: never below 64 MiB; huge logs on few cores: never above 1 GiB
    assert decode.auto_range_bytes(nodes(4096), 2) == 64 << 20
    assert decode.auto_range_bytes(nodes(*[64 * gib] * 4), 2) == gib
    # a big cluster spreads even a small log
    assert decode.auto_range_bytes(nodes(gib, gib), 200) == 64 << 20


def test_a_preallocated_zero_tail_gives_no_rows_in_any_range(run_builder):
    run_builder.master(n=50)
    run_builder.close()
    node = runfolder.load_node(run_builder.node_dir("broker-a-0"))
    whole = _rows(node)
    last = node.files[-1]
    end = max(r[5] + r[6] for r in whole if r[7] == "ok") - last.base
    assert 0 < end < last.mapped_size
    with open(last.path, "r+b") as fh:  # written zeros (data, not a hole) up to the mapped size
        fh.seek(end)
        fh.write(bytes(last.mapped_size - end))
    node = runfolder.load_node(run_builder.node_dir("broker-a-0"))
    assert node.files[-1].length == last.mapped_size
    fd = os.open(last.path, os.O_RDONLY)
    try:
        assert os.lseek(fd, end, os.SEEK_DATA) == end  # so the decoder must read and judge these zeros
    finally:
        os.close(fd)
    for range_bytes in (None, 4096, 65536):
        assert _rows(node, range_bytes) == whole
