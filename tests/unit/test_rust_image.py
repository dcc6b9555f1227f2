"""rmqha/cluster/implementations/rust_image.py, images/rust/rmqha-rust-broker and the docker backend's rust
containers, without a container or the binary (tests/integration/test_rust_docker.py runs them)."""

import os
import shlex
import socket
import subprocess
import time
import tomllib
from pathlib import Path

import pytest

from rmqha.cluster import ClusterError, docker_backend
from rmqha.cluster.docker_links import proxies_and_configs
from rmqha.cluster.implementations import apache, parse_choice, rust, rust_image
from rmqha.cluster.topology import PortPlan, load_topology

RUNNER = Path(__file__).resolve().parents[2] / "images" / "rust" / "rmqha-rust-broker"


def _containers(tmp_path, topology: str):
    """What the docker backend gives each rust node of the topology: (node, config, overrides)."""
    topo = load_topology(topology)
    plan = PortPlan.make(21000)
    overrides = docker_backend._container_overrides(topo, plan, "127.0.0.1")
    _, configs = proxies_and_configs(tmp_path, topo, plan, "127.0.0.1", overrides, {}, {})
    return [(n, configs[n.name], overrides[n.name]) for n in topo.nodes]


def test_a_rust_broker_container_runs_its_toml_from_the_node_folder(tmp_path):
    images = {"ours": "rmqha/broker:latest", "rust": "rmqha/rust:abc"}
    by = {n.name: (n, c, o) for n, c, o in _containers(tmp_path, "2m-2s-sync")}
    n, c, o = by["broker-a-s"]
    env, keys = docker_backend._broker_service(tmp_path, n, c, "127.0.0.1", "rust", o, images)

    assert env["BROKER_A_S_IMAGE"] == "rmqha/rust:abc"
    assert env["BROKER_A_S_OBSERVED"] == str(c.listenPort)  # the published P+2 leads to its admin port
    assert keys == {
        "properties": str(tmp_path / "nodes/broker-a-s/broker.toml"),
        "adminAddr": f"127.0.0.1:{c.metrics_port}",
    }
    argv = shlex.split(env["BROKER_A_S_COMMAND"])  # as compose splits it
    assert argv == [rust_image.RUNNER, "/var/lib/rocketmq/node/broker.toml", "namesrv:9876"]
    doc = tomllib.loads((tmp_path / "nodes/broker-a-s/broker.toml").read_text())
    master_ha = by["broker-a"][1].ha_port
    assert doc["store"]["haMasterAddress"] == f"toxiproxy:{master_ha}"  # its HA link crosses Toxiproxy
    assert doc["broker"]["brokerRole"] == doc["store"]["brokerRole"] == "SLAVE"
    assert doc["broker"]["storePathRootDir"] == doc["store"]["storePathRootDir"] == "/var/lib/rocketmq/store"
    assert doc["store"]["storePathCommitLog"] == "/var/lib/rocketmq/store/commitlog"
    assert doc["store"]["mappedFileSizeCommitLog"] == 64 << 20
    assert doc["broker"]["brokerIp1"] == "127.0.0.1" and doc["broker"]["brokerIp2"] == "broker-a-s"
    assert doc["broker"]["namesrvAddr"] == "namesrv:9876" and doc["broker"]["listenPort"] == c.listenPort


@pytest.mark.parametrize("topology", ["2m-2s-sync", "2m-2s-async", "2m-noslave"])
def test_every_node_the_docker_backend_addresses_renders_for_rust(tmp_path, topology):
    """No deployment key of the docker backend is one rocketmq-rust refuses (its config denies unknown
    fields, and canonical_config refuses what it cannot place): each node's TOML is written."""
    for n, c, o in _containers(tmp_path, topology):
        docker_backend._broker_service(tmp_path, n, c, "127.0.0.1", "rust", o, {"rust": "r"})
        doc = tomllib.loads((tmp_path / "nodes" / n.name / "broker.toml").read_text())
        assert doc["broker"]["brokerIdentity"]["brokerName"] == n.name.removesuffix("-s")
        if n.name.endswith("-s"):
            assert doc["store"]["haMasterAddress"].startswith("toxiproxy:")
        text = (tmp_path / "nodes" / n.name / "broker.toml").read_text()
        for ours_only in apache.OURS_ONLY_KEYS:
            assert ours_only not in text


class _Image:
    def __init__(self, tags):
        self.tags = tags


class _Images:
    def __init__(self, by_label):
        self.by_label = by_label

    def list(self, filters):
        return [_Image(t) for t in self.by_label.get(filters["label"], [])]


class _Client:
    def __init__(self, by_label):
        self.images = _Images(by_label)


def test_the_rust_image_is_the_one_built_from_the_binary_found(tmp_path, monkeypatch):
    binary = tmp_path / "bin" / rust_image.BINARY
    binary.parent.mkdir()
    binary.write_bytes(b"\x7fELF one build")
    monkeypatch.setattr(rust, "find_binary", lambda: str(binary))
    label = f"{rust_image.LABEL}={rust_image.binary_hash(str(binary))}"
    client = _Client({label: [["rmqha/rust:1234"]]})
    images = docker_backend.implementation_images(client, parse_choice("rust"))
    assert images == {"ours": docker_backend.BROKER_IMAGE, "rust": "rmqha/rust:1234"}

    binary.write_bytes(b"\x7fELF rebuilt")  # a new binary is never run from the old image
    with pytest.raises(ClusterError, match=r"make images BROKER=rust"):
        docker_backend.implementation_images(client, parse_choice("rust"))


def test_no_rust_image_without_the_binary_says_how_to_build_it(tmp_path, monkeypatch):
    monkeypatch.setattr(rust, "find_binary", lambda: None)
    with pytest.raises(ClusterError, match="make peer-broker"):
        docker_backend.implementation_images(_Client({}), parse_choice("ours,broker-a-s=rust"))


def test_the_binary_command_finds_it_on_path_then_in_the_cache(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    monkeypatch.setattr(rust_image, "CACHE", str(tmp_path))
    assert rust_image.main(["binary"]) == 1 and "make peer-broker" in capsys.readouterr().err
    for version in ("0.9.0", "1.0.0"):
        b = tmp_path / f"rocketmq-rust-{version}" / "bin" / rust_image.BINARY
        b.parent.mkdir(parents=True)
        b.write_bytes(version.encode())
    assert rust_image.main(["binary"]) == 0
    found = capsys.readouterr().out.strip()
    assert found == str(tmp_path / "rocketmq-rust-1.0.0" / "bin" / rust_image.BINARY)
    assert rust_image.main(["hash", found]) == 0
    assert capsys.readouterr().out.strip() == rust_image.binary_hash(found)
    older = str(tmp_path / "rocketmq-rust-0.9.0" / "bin" / rust_image.BINARY)
    assert rust_image.binary_hash(older) != rust_image.binary_hash(found)


def _fake_broker(tmp_path: Path) -> tuple[Path, Path]:
    out = tmp_path / "argv"
    fake = tmp_path / "rocketmq-broker-rust"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$0" "$@" > {out}\n')
    fake.chmod(0o755)
    return fake, out


def test_the_start_script_starts_the_broker_once_the_name_server_accepts(tmp_path):
    fake, out = _fake_broker(tmp_path)
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    addr = f"127.0.0.1:{srv.getsockname()[1]}"
    try:
        env = {**os.environ, "RMQHA_RUST_BROKER": str(fake)}
        proc = subprocess.run([str(RUNNER), "/n/broker.toml", addr], env=env, capture_output=True, timeout=60)
        srv.settimeout(0)
        probe, _ = srv.accept()  # it asked the name server first
        probe.close()
    finally:
        srv.close()
    assert proc.returncode == 0 and proc.stderr == b"", proc.stderr
    assert out.read_text().splitlines() == [str(fake), "-c", "/n/broker.toml", "-n", addr]


def test_the_start_script_starts_the_broker_anyway_when_no_name_server_ever_listens(tmp_path):
    fake, out = _fake_broker(tmp_path)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))  # bound, never listening: every connection is refused
    addr = f"127.0.0.1:{s.getsockname()[1]}"
    try:
        env = {**os.environ, "RMQHA_RUST_BROKER": str(fake), "RMQHA_NAMESRV_WAIT_S": "0"}
        proc = subprocess.run([str(RUNNER), "/n/broker.toml", addr], env=env, capture_output=True, timeout=60)
    finally:
        s.close()
    assert proc.returncode == 0 and b"did not accept a connection" in proc.stderr
    assert out.read_text().splitlines()[1:] == ["-c", "/n/broker.toml", "-n", addr]


def test_the_rust_process_is_told_from_others_by_its_binary():
    others = subprocess.Popen(["/bin/sleep", "60"])
    broker = subprocess.Popen(["/usr/local/bin/" + rust_image.BINARY, "60"], executable="/bin/sleep")  # its argv[0]
    try:
        # the kernel sets a new program's arguments after the exec Popen waits for: until then cmdline is empty
        deadline = time.monotonic() + 30
        while not Path(f"/proc/{broker.pid}/cmdline").read_bytes() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert rust.is_broker_process(broker.pid)
        assert not rust.is_broker_process(others.pid) and not rust.is_broker_process(os.getpid())
    finally:
        for p in (others, broker):
            p.kill()
            p.wait()
    assert not rust.is_broker_process(broker.pid)  # gone
