"""A real local 2m-2s-async cluster through the CLI: up, wait, status, down. No messages are produced."""

import json
import time

import pytest

from rmqha.cluster.ports import port_in_use
from rmqha.cluster.process import is_running
from rmqha.cluster.topology import PortPlan

from .cluster_cli import cli, cli_cluster
from .cluster_cli import free_base_port  # noqa: F401  (test_planted_bugs.py imports it from here)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


def test_local_2m_2s_async_cluster(tmp_path):
    topo, base, env, run_dir = cli_cluster(tmp_path, "2m-2s-async", "it")
    t0 = time.monotonic()
    up = cli(
        env,
        "up",
        "--topology",
        "2m-2s-async",
        "--backend",
        "local",
        "--name",
        "it",
        "--base-port",
        str(base),
        "--timeout",
        "40",
    )
    try:
        assert up.returncode == 0, up.stderr + up.stdout
        assert time.monotonic() - t0 < 45
        assert "is ready" in up.stderr
        assert (tmp_path / "run" / "current").read_text().strip() == "it"

        st = cli(env, "status", "--format", "json")
        assert st.returncode == 0, st.stderr
        nodes = {o["name"]: o for o in map(json.loads, st.stdout.splitlines())}
        assert sorted(nodes) == ["broker-a", "broker-a-s", "broker-b", "broker-b-s"]
        for name, o in nodes.items():
            master = not name.endswith("-s")
            assert o["role"] == ("ASYNC_MASTER" if master else "SLAVE")
            assert o["brokerId"] == (0 if master else 1)
            assert o["brokerName"] == name.removesuffix("-s")
            assert o["up"] and o["process"] == "running"
            assert o["maxPhyOffset"] == 0
            assert o["metricsUrl"].startswith("http://127.0.0.1:")
            if master:
                assert len(o["slaves"]) == 1 and o["slaves"][0]["ackOffset"] == 0
            else:
                assert o["haClient"]["state"] == "CONNECTED" and o["haClient"]["reportedOffset"] == 0
                assert o["haClient"]["haMasterAddress"] == nodes[o["master"]]["haAddr"]
        assert nodes["broker-a"]["addr"] == f"127.0.0.1:{base}"

        table = cli(env, "status")
        assert table.returncode == 0 and "broker-b-s" in table.stdout and "ASYNC_MASTER" in table.stdout

        # The run folder the audit pipeline reads.
        from rmqha.pipeline.runfolder import load_nodes

        audit_nodes = {n.name: n for n in load_nodes(str(run_dir))}
        assert sorted(audit_nodes) == sorted(nodes)
        assert audit_nodes["broker-b-s"].role == "SLAVE" and not audit_nodes["broker-b-s"].is_master
        assert audit_nodes["broker-a"].store_dir == str(run_dir / "nodes" / "broker-a" / "store")
        assert (run_dir / "nodes" / "broker-a" / "store").is_dir()
        for n in nodes:
            meta = json.loads((run_dir / "nodes" / n / "node.json").read_text())
            assert meta["backend"] == "local" and meta["haAddr"] == nodes[n]["haAddr"]
            assert (run_dir / "nodes" / n / "broker.log").stat().st_size > 0
        assert (run_dir / "metrics").is_dir()

        logs = cli(env, "logs", "broker-a-s", "-n", "5")
        assert logs.returncode == 0 and logs.stdout.strip()
    finally:
        state = json.loads((run_dir / "state.json").read_text()) if (run_dir / "state.json").exists() else {}
        down = cli(env, "down")
    assert down.returncode == 0, down.stderr
    procs = [state["namesrv"]["process"]] + [n["process"] for n in state["nodes"]]
    assert all(p and p["pid"] for p in procs)
    assert not [p["pid"] for p in procs if is_running(p)]
    assert not (run_dir / "nodes" / "broker-a" / "store").exists()  # no --keep-data
    assert (run_dir / "nodes" / "broker-a" / "broker.log").exists()
    assert not any(port_in_use(p) for _, _, p in PortPlan.make(base).all_ports(topo))
    st = cli(env, "status", "--format", "json")
    assert st.returncode == 1 and not any(json.loads(line)["up"] for line in st.stdout.splitlines())
