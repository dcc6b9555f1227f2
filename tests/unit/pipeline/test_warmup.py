"""The audit's warm-up run (rmqha/pipeline/warmup.py): a valid run folder, checked with the project's own
record scanner rather than a Spark audit (that costs a Spark session's first audit, ~20-90 s here), and
a warm-up that never fails the real audit."""

import os


from rmqha.pipeline import report, runfolder
from rmqha.pipeline.warmup import tiny_run, warm_up

from rmqha.broker.store import record


def test_the_tiny_run_is_a_master_a_byte_identical_slave_and_a_matching_history(tmp_path):
    run = tiny_run(str(tmp_path))
    nodes = {n.name: n for n in runfolder.load_nodes(run)}
    assert (nodes["w-0"].role, nodes["w-1"].role) == ("SYNC_MASTER", "SLAVE")
    logs = {name: b"".join(open(f.path, "rb").read() for f in n.files) for name, n in nodes.items()}
    assert logs["w-0"] == logs["w-1"]
    keys, pos, data = [], 0, logs["w-0"]
    while pos < len(data):
        s = record.scan(data[pos:])
        if s.kind != record.Scan.MESSAGE:
            break
        keys.append(s.message.properties["UNIQ_KEY"])
        pos += s.size
    assert keys == [f"W{i:030d}" for i in range(40)]
    hist = runfolder.history_files(run)
    assert sorted(os.path.basename(h) for h in hist) == ["consumer-w.jsonl", "producer-w.jsonl"]


def test_a_failing_warm_up_is_a_note_not_an_error(tmp_path, monkeypatch, capsys):
    seen = []

    def boom(spark, run_dir, out_dir):
        seen.append(os.path.isdir(os.path.join(run_dir, "nodes")))
        raise RuntimeError("no JVM")

    monkeypatch.setattr(report, "run", boom)
    warm_up(object())
    assert seen == [True]
    assert "the audit warm-up failed (RuntimeError: no JVM); auditing cold" in capsys.readouterr().err
