"""The local backend's process and run-folder handling, with stand-in processes (no brokers)."""

import json
import socket
import sys
import time

import pytest

from rmqha.cluster import ClusterError
from rmqha.cluster import runfolder as rf
from rmqha.runs.layout import NODE_JSON_KEYS, write_node_json
from rmqha.cluster.local_backend import LocalBackend, child_env, check_ports, is_running, port_in_use, spawn
from rmqha.cluster.ports import free_block
from rmqha.cluster.topology import PortPlan, load_topology
from rmqha.cluster.wait import wait_until

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]
STUBBORN = [
    sys.executable,
    "-c",
    "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('ready', flush=True); time.sleep(60)",
]


@pytest.fixture
def run_root(tmp_path, monkeypatch):
    monkeypatch.setenv("CLUSTER_RUN_ROOT", str(tmp_path / "run"))
    return tmp_path / "run"


def backend_with(run_root, procs: dict) -> LocalBackend:
    rd = rf.run_dir("t")
    state = {
        "name": "t",
        "backend": "local",
        "runDir": str(rd),
        "stoppedAt": None,
        "namesrv": {"process": procs.pop("namesrv", None)},
        "nodes": [{"name": n, "process": rec, "store": str(rf.store_dir(rd, n))} for n, rec in procs.items()],
    }
    rf.write_state(rd, state)
    return LocalBackend("t", rd, state)


def test_spawn_detaches_and_stop_terminates(run_root):
    rec = spawn(SLEEPER, run_root / "x.log", child_env())
    assert rec["pgid"] == rec["pid"] and rec["startTime"] is not None
    assert is_running(rec)
    assert (run_root / "x.log").read_text().startswith("==== ")
    b = backend_with(run_root, {"broker-a": rec})
    (rf.store_dir(b.run_dir, "broker-a") / "commitlog").mkdir(parents=True)
    assert b.process_state("broker-a").running
    t0 = time.monotonic()
    assert b.stop(keep_data=False, timeout=5) == []
    assert time.monotonic() - t0 < 3
    assert not is_running(rec)
    assert not rf.store_dir(b.run_dir, "broker-a").exists()
    assert rf.read_state(b.run_dir)["stoppedAt"] and b.process_state("broker-a").detail == "stopped"


def test_stop_escalates_to_sigkill_and_keeps_data(run_root):
    rec = spawn(STUBBORN, run_root / "s.log", child_env())
    wait_until(
        lambda: "ready" in (run_root / "s.log").read_text().splitlines(), 10, "the child's ready line", interval=0.05
    )
    b = backend_with(run_root, {"namesrv": rec})
    store = rf.store_dir(b.run_dir, "broker-a")
    b.state["nodes"] = [{"name": "broker-a", "process": None, "store": str(store)}]
    store.mkdir(parents=True)
    notes = b.stop(keep_data=True, timeout=0.5)
    assert len(notes) == 1 and "SIGKILL" in notes[0]
    assert not is_running(rec)
    assert store.exists()


def test_a_recycled_pid_is_not_ours(run_root):
    rec = spawn(SLEEPER, run_root / "x.log", child_env())
    try:
        assert not is_running({**rec, "startTime": rec["startTime"] - 1})
    finally:
        backend_with(run_root, {"broker-a": rec}).stop(timeout=2)


def test_unknown_node_is_an_error_listing_the_nodes(run_root):
    b = backend_with(run_root, {"broker-a": None})
    with pytest.raises(ClusterError, match="namesrv, broker-a"):
        b.process_state("broker-z")
    assert b.process_state("broker-a").detail == "not started"
    assert b.log_path("broker-a") == b.run_dir / "nodes" / "broker-a" / "broker.log"


def test_port_check_names_the_port_and_suggests_a_base(run_root):
    topo = load_topology("2m-noslave")
    with socket.socket() as s:
        s.bind(("0.0.0.0", free_block(1, 20000, 32000)))  # below the ephemeral range, which PortPlan refuses
        s.listen()
        busy = s.getsockname()[1]
        assert port_in_use(busy)
        plan = PortPlan.make(busy - 10, 9)  # broker-b's listenPort is busy
        with pytest.raises(ClusterError) as e:
            check_ports("t", topo, plan)
    msg = str(e.value)
    assert f"port {busy} (broker-b listenPort)" in msg and "--base-port" in msg


def test_current_and_resolve(run_root):
    with pytest.raises(ClusterError, match="no current cluster"):
        rf.resolve(None)
    rf.set_current("t")
    with pytest.raises(ClusterError, match="up --name t"):
        rf.resolve(None)
    rf.write_state(rf.run_dir("t"), {"name": "t"})
    assert rf.resolve(None)[0] == "t" and rf.list_clusters() == ["t"]
    with pytest.raises(ClusterError, match="bad cluster name"):
        rf.run_dir("../etc")


def test_node_json_schema(run_root):
    rd = rf.run_dir("t")
    node = {
        "name": "broker-a",
        "brokerName": "broker-a",
        "brokerId": 0,
        "role": "SYNC_MASTER",
        "clusterName": "DefaultCluster",
        "addr": "127.0.0.1:1",
        "haAddr": "127.0.0.1:2",
        "metricsUrl": "http://127.0.0.1:3/metrics",
        "backend": "local",
    }
    path = write_node_json(rf.node_dir(rd, node["name"]), node, NODE_JSON_KEYS)
    assert json.loads(path.read_text()) == node
    with pytest.raises(ValueError, match="haAddr"):
        write_node_json(rf.node_dir(rd, node["name"]), {k: v for k, v in node.items() if k != "haAddr"}, NODE_JSON_KEYS)


def test_tail(tmp_path):
    p = tmp_path / "log"
    p.write_text("".join(f"line {i}\n" for i in range(100)))
    assert rf.tail(p, 3) == ["line 97", "line 98", "line 99"]
    assert rf.tail(tmp_path / "missing", 3) == []


def test_backends_by_name():
    from rmqha.cluster.backend import backend_class
    from rmqha.cluster.docker_backend import DockerBackend

    assert backend_class("local") is LocalBackend
    assert backend_class("docker") is DockerBackend
    with pytest.raises(ClusterError, match="unknown backend"):
        backend_class("k8s")
