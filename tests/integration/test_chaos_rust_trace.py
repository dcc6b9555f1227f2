"""A chaos run with the Rust client and its trace dispatcher on (`make chaos CLIENT=rust TRACE=1`): the
workload waits for the run's drain signal like the Python one (its consumer stays until every group is
at the end of every queue), and the audit checks the trace records against the real sends (the Rust 1.0 push consumer writes no
consume records).
A long run (make test-checkers)."""

import json
import os
import subprocess
import sys

import pytest

from .cluster_cli import REPO, free_base_port

pytestmark = [pytest.mark.integration, pytest.mark.checkers, pytest.mark.timeout(400)]


def test_rust_chaos_run_drains_and_its_trace_is_audited(tmp_path, rc):
    from rmqha.cluster.topology import load_topology

    base = free_base_port(load_topology("2m-2s-sync"))
    # rc: the binary the workload execs (the fixture fails saying how to build it)
    env = dict(os.environ, CLUSTER_RUN_ROOT=str(tmp_path / "run"), PYTHONPATH=str(REPO), RUST_CLIENT_BIN=str(rc.binary))
    run_dir = tmp_path / "run" / "rust-trace"
    cmd = [
        sys.executable,
        "-m",
        "rmqha.chaos.run",
        "--backend",
        "local",
        "--name",
        "rust-trace",
        "--base-port",
        str(base),
        "--client",
        "rust",
        "--trace",
        "--duration",
        "20",
        "--rate",
        "50",
        "--seed",
        "3",
        "--nemesis",
        "kill-slave",
        "--max-faults",
        "1",
        "--catchup-timeout",
        "30",
    ]
    try:
        r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=360)
    finally:
        if (run_dir / "state.json").exists():
            subprocess.run(
                [sys.executable, "-m", "rmqha.cluster", "down", "--name", "rust-trace", "--keep-data"],
                cwd=REPO,
                env=env,
                capture_output=True,
                timeout=60,
            )
    out = r.stdout + r.stderr[-3000:]
    assert r.returncode == 0, out
    progress = [json.loads(p.read_text()) for p in (run_dir / "chaos").glob("progress-*.json")]
    assert progress and progress[0]["phase"] == "done", out
    ending = json.loads(next((run_dir / "chaos").glob("ending-*.json")).read_text())
    assert ending["drain"] and all(g["drained"] for g in ending["drain"].values()), ending["drain"]
    # the workload sat in 'awaiting drain' until the run said so (the workload's log shows the phase)
    summary = json.loads((run_dir / "report" / "summary.json").read_text())
    t = summary["trace"]
    assert t is not None, "the audit saw no trace records"
    sends = [
        json.loads(line) for p in (run_dir / "history").glob("producer-*.jsonl") for line in p.read_text().splitlines()
    ]
    answered = [x for x in sends if x.get("op") == "send" and x.get("status")]
    oks = sum(x["status"] == "SEND_OK" for x in answered)
    # one Pub record per answered send, each found stored; the failed ones (SLAVE_NOT_AVAILABLE while the
    # slave was down) traced as failed
    assert oks > 100 and t["pub"] == len(answered) and t["matched"] >= oks, (t, oks, len(answered))
    assert t["failedSends"] == len(answered) - oks, (t, oks)
    assert t["produceToStoreMs"]["p50"] is not None, t
    # rocketmq-client-rust 1.0's push consumer sends no SubBefore/SubAfter records (tests/integration/
    # test_message_trace.py), so the consume side stays tested on planted records (tests/unit/pipeline)
