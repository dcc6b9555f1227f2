"""rocketmq-client-rust through a DLedger failover (issue 26: independent clients through failovers): a
chaos run on the dledger topology with the Rust client as the workload and one kill-leader fault. The
leader is SIGKILLed and held down past an election, the client follows the new master through the name
server, and the audit finds every acknowledged send delivered after the drain (`make test-checkers`; `make test`
runs it without the audit: the failover, the run's exit status and the drain)."""

import json
import os
import subprocess
import sys

import pytest

from .cluster_cli import REPO, free_base_port
from .test_planted_bugs import AUDITED

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]


@pytest.mark.parametrize("audit", AUDITED)
def test_the_rust_client_follows_a_dledger_failover_and_loses_no_acknowledged_send(tmp_path, rc, audit):
    from rmqha.cluster.topology import load_topology

    base = free_base_port(load_topology("dledger"))
    # rc: the binary the workload execs (the fixture fails saying how to build it)
    env = dict(os.environ, CLUSTER_RUN_ROOT=str(tmp_path / "run"), PYTHONPATH=str(REPO), RUST_CLIENT_BIN=str(rc.binary))
    name = "dl-rust"
    run_dir = tmp_path / "run" / name
    cmd = [
        *(sys.executable, "-m", "rmqha.chaos.run", "--topology", "dledger", "--backend", "local"),
        *("--name", name, "--base-port", str(base), "--client", "rust"),
        *("--duration", "25", "--rate", "50", "--seed", "1", "--nemesis", "kill-leader", "--max-faults", "1"),
        *([] if audit else ["--no-audit"]),
    ]
    try:
        r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=360)
    finally:
        if (run_dir / "state.json").exists():
            subprocess.run(
                [sys.executable, "-m", "rmqha.cluster", "down", "--name", name, "--keep-data"],
                cwd=REPO,
                env=env,
                capture_output=True,
                timeout=60,
            )
    out = r.stdout[-4000:] + r.stderr[-3000:]
    assert r.returncode == 0, out
    faults = [json.loads(x) for p in (run_dir / "faults").glob("*.jsonl") for x in p.read_text().splitlines()]
    injected = [f for f in faults if f["op"] == "inject" and f["kind"] == "kill-leader"]
    assert injected and injected[0]["result"] == "ok", faults
    old_leader = injected[0]["target"]
    # another member led after the kill (the status samples name each member's role and term)
    samples = [
        json.loads(x)
        for p in (run_dir / "metrics").glob("*.jsonl")
        for x in p.read_text().splitlines()
        if x.startswith("{")
    ]
    after = [s for s in samples if s.get("ts", 0) * 1000 > injected[0]["ts_ms"] and s.get("dledger")]
    assert any(s["dledger"].get("role") == "LEADER" and s["node"] != old_leader for s in after), "no failover"
    ending = json.loads(next((run_dir / "chaos").glob("ending-*.json")).read_text())
    assert all(g["drained"] for g in ending["drain"].values()), ending
    if not audit:
        return
    summary = json.loads((run_dir / "report" / "summary.json").read_text())
    assert not summary["failed"], [v for v in summary["verdicts"] if v["status"] == "FAIL"]
    [d] = summary["delivery"].values()
    assert d["acknowledged"] > 100 and d["delivered"] == d["acknowledged"], d
    assert d["lost"] == 0 and d["stranded"] == 0, d
