"""`python -m rmqha.chaos.run` end to end: a tiny chaos run on a docker cluster (2 faults, 15 s). `make test` runs
it without the Spark audit (the run's own checks: its exit status, the schedule, the histories, the samples);
`make test-checkers` audits it too (the verdicts, the report, which node served each receive). The audit of a
real run stays in `make test` through the orders example's teardown audit."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rmqha.cluster.topology import load_topology

from .docker_cluster import docker_unavailable_reason, free_base_port
from .test_planted_bugs import AUDITED

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]


@pytest.mark.parametrize("audit", AUDITED)
def test_tiny_chaos_run_passes_its_audit(tmp_path, audit):
    reason = docker_unavailable_reason()
    if reason:
        pytest.skip(f"chaos run on the docker backend: {reason}")
    base = free_base_port(load_topology("2m-2s-sync"))
    env = dict(os.environ, CLUSTER_RUN_ROOT=str(tmp_path / "run"), PYTHONPATH=str(REPO))
    run_dir = tmp_path / "run" / "chaos-it"
    cmd = [
        sys.executable,
        "-m",
        "rmqha.chaos.run",
        "--backend",
        "docker",
        "--name",
        "chaos-it",
        "--base-port",
        str(base),
        "--duration",
        "15",
        "--rate",
        "100",
        "--seed",
        "7",
        "--max-faults",
        "2",
        "--nemesis",
        "cut,pause-slave",
        "--catchup-timeout",
        "30",
    ] + ([] if audit else ["--no-audit"])
    try:
        r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=360)
    finally:
        if (run_dir / "state.json").exists():  # a run that died half-way must not leave containers
            subprocess.run(
                [sys.executable, "-m", "rmqha.cluster", "down", "--name", "chaos-it", "--keep-data"],
                cwd=REPO,
                env=env,
                capture_output=True,
                timeout=60,
            )
    out = r.stdout + r.stderr[-3000:]
    assert "nemesis schedule (2 faults" in r.stdout, out
    assert r.returncode == 0, out
    producers = list((run_dir / "history").glob("producer-*.jsonl"))
    consumers = list((run_dir / "history").glob("consumer-*.jsonl"))
    assert producers and consumers, out
    sends = [json.loads(line) for line in producers[0].read_text().splitlines()]
    assert sum(s["status"] == "SEND_OK" for s in sends) > 100, out
    assert (run_dir / "metrics" / "samples.jsonl").exists(), out
    if not audit:
        return
    assert "PASS  SYNC_MASTER SEND_OK is on the slave" in r.stdout, out
    assert "FAIL" not in r.stdout, out
    assert (run_dir / "report" / "report.md").exists(), out
    assert (run_dir / "metrics" / "samples.jsonl").exists(), out
    # which node served each receive: through the proxies, from the containers' served-pull logs
    summary = json.loads((run_dir / "report" / "summary.json").read_text())
    served_by = summary["servedBy"]
    masters = {"broker-a", "broker-b"}
    received = sum(served_by.values())
    assert received > 100 and set(served_by) <= masters | {"broker-a-s", "broker-b-s", "unattributed"}, served_by
    assert sum(served_by.get(m, 0) for m in masters) >= 0.95 * received, served_by  # no master was out
