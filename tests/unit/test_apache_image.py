"""rmqha/cluster/implementations/apache_image.py and images/apache/rmqha-run: Apache's 4.9 in containers,
without a container (tests/integration/test_apache_docker.py runs one)."""

import os
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from rmqha.cluster import docker_backend
from rmqha.cluster.implementations import apache, apache_image
from rmqha.cluster.topology import COMPOSE_DIR, PortPlan, effective_config, load_topology

RUNNER = Path(__file__).resolve().parents[2] / "images" / "apache" / "rmqha-run"


def _distribution(root: Path) -> Path:
    for rel, data in {
        "bin/mqbroker": b"#!/bin/sh\n",
        "conf/broker.conf": b"brokerName=x\n",
        "lib/rocketmq-broker-4.9.8.jar": b"PK\x03\x04broker",
        "lib/netty-common.jar": b"PK\x03\x04netty",
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def test_the_distribution_hash_follows_every_file_it_ships(tmp_path):
    home = _distribution(tmp_path / "d")
    h = apache_image.distribution_hash(home)
    assert re.fullmatch(r"[0-9a-f]{16}", h)
    assert apache_image.distribution_hash(_distribution(tmp_path / "copy")) == h  # content, not location
    (home / "README.md").write_text("not shipped in the image")
    assert apache_image.distribution_hash(home) == h
    (home / "lib/netty-common.jar").write_bytes(b"PK\x03\x04netty-4.1.99")
    assert apache_image.distribution_hash(home) != h  # a rebuilt jar is a new image
    (home / "lib/netty-common.jar").write_bytes(b"PK\x03\x04netty")
    (home / "lib/netty-common.jar").rename(home / "lib/netty.jar")
    assert apache_image.distribution_hash(home) != h  # so is a renamed one


def test_the_hash_command_refuses_what_is_no_distribution(tmp_path, capsys):
    assert apache_image.main(["hash", str(tmp_path)]) == 1
    assert "no bin, conf, lib/" in capsys.readouterr().err
    home = _distribution(tmp_path / "d")
    assert apache_image.main(["hash", str(home)]) == 0
    assert capsys.readouterr().out.strip() == apache_image.distribution_hash(home)


def test_an_apache_broker_container_runs_the_node_folder_properties(tmp_path):
    topo = load_topology("2m-2s-sync")
    plan = PortPlan.make(21000)
    overrides = docker_backend._container_overrides(topo, plan, "127.0.0.1")
    slave = topo.node("broker-a-s")
    o = {**overrides["broker-a-s"], "haMasterAddress": "toxiproxy:21001", "slaveSyncMasterAddress": "broker-a:21000"}
    c = effective_config(slave, o)
    images = {"ours": "rmqha/broker:latest", "apache": "rmqha/apache:abc"}
    home = _distribution(tmp_path / "dist")
    env, keys = docker_backend._broker_service(tmp_path, slave, c, "127.0.0.1", "apache", o, images, str(home))

    assert env["BROKER_A_S_IMAGE"] == "rmqha/apache:abc"
    assert env["BROKER_A_S_OBSERVED"] == str(c.listenPort)  # the published P+2 leads to 4.9's admin port
    assert keys["adminAddr"] == f"127.0.0.1:{c.metrics_port}"
    argv = shlex.split(env["BROKER_A_S_COMMAND"])  # as compose splits it
    assert argv[2:] == [
        apache_image.RUNNER,
        "sh",
        "/opt/rocketmq/bin/mqbroker",
        "-c",
        "/var/lib/rocketmq/node/broker.properties",
    ]
    jopts = argv[1].removeprefix("JAVA_OPT_EXT=")
    assert "-Xmx256m" in jopts and "--add-opens java.base/java.nio=ALL-UNNAMED" in jopts
    assert jopts.endswith("-Drocketmq.home.dir=/var/lib/rocketmq/node/rocketmq-home -Duser.home=/var/lib/rocketmq/node")
    node_conf = tmp_path / "nodes" / "broker-a-s" / "rocketmq-home" / "conf"
    assert (node_conf / "broker.conf").read_bytes() == (home / "conf/broker.conf").read_bytes()
    assert not (node_conf / "plain_acl.yml").exists()  # no ACL: no file (4.9 reads none without aclEnable)

    text = Path(keys["properties"]).read_text()
    assert Path(keys["properties"]) == tmp_path / "nodes" / "broker-a-s" / "broker.properties"
    for line in (
        "haMasterAddress=toxiproxy:21001",
        "storePathRootDir=/var/lib/rocketmq/store",
        "storePathCommitLog=/var/lib/rocketmq/store/commitlog",
        "namesrvAddr=namesrv:9876",
        "brokerIP1=127.0.0.1",
        "brokerIP2=broker-a-s",
        "brokerRole=SLAVE",
    ):
        assert line in text.splitlines(), line
    for ours_only in apache.OURS_ONLY_KEYS:
        assert f"{ours_only}=" not in text


def test_an_apache_broker_container_reads_the_kit_acl_file_in_its_node_folder(tmp_path):
    """4.9.8 reads its ACL file from <rocketmq.home.dir>/conf/plain_acl.yml, not aclConfigFile: the node's
    home (in the mounted node folder) links it to the kit's file in the store, by a path that resolves in
    the container and here alike; the image's /opt/rocketmq is never its home."""
    from rmqha.cluster import acl

    topo = load_topology("2m-noslave")
    n = topo.node("broker-a")
    o = docker_backend._container_overrides(topo, PortPlan.make(21000), "127.0.0.1")["broker-a"]
    creds = acl.new_credentials()
    o.update(acl.broker_sets(docker_backend.CONTAINER_STORE, creds))
    acl.write_file(tmp_path / "nodes" / "broker-a" / "store", creds)
    home = _distribution(tmp_path / "dist")
    (home / "conf" / "plain_acl.yml").write_text("accounts:\n  - accessKey: RocketMQ\n")
    (home / "conf" / "acl").mkdir()
    (home / "conf" / "acl" / "more.yml").write_text("accounts: []\n")
    c = effective_config(n, o)
    env, _ = docker_backend._broker_service(tmp_path, n, c, "127.0.0.1", "apache", o, {"apache": "a"}, str(home))

    jopts = shlex.split(env["BROKER_A_COMMAND"])[1]
    assert "-Drocketmq.home.dir=/var/lib/rocketmq/node/rocketmq-home" in jopts
    link = tmp_path / "nodes" / "broker-a" / "rocketmq-home" / "conf" / "plain_acl.yml"
    assert os.readlink(link) == "../../store/config/plain_acl.yml"  # the node mount holds store/ too
    assert f"accessKey: {creds['accessKey']}" in link.read_text() and creds["secretKey"] in link.read_text()
    assert not (link.parent / "acl").exists()  # the distribution's other ACL files are not the node's
    assert (home / "conf" / "plain_acl.yml").read_text() == "accounts:\n  - accessKey: RocketMQ\n"


def test_our_broker_container_keeps_its_command_and_metrics_port(tmp_path):
    topo = load_topology("2m-2s-sync")
    overrides = docker_backend._container_overrides(topo, PortPlan.make(21000), "127.0.0.1")
    n = topo.node("broker-a")
    c = effective_config(n, overrides["broker-a"])
    env, keys = docker_backend._broker_service(
        tmp_path, n, c, "127.0.0.1", "ours", overrides["broker-a"], {"ours": "o"}
    )
    assert keys == {} and env["BROKER_A_IMAGE"] == "o" and env["BROKER_A_OBSERVED"] == str(c.metrics_port)
    argv = shlex.split(env["BROKER_A_COMMAND"])
    assert argv[:5] == ["python3", "-m", "rmqha.broker", "-c", "/etc/rocketmq/broker.properties"]
    assert f"listenPort={c.listenPort}" in argv
    assert not (tmp_path / "nodes").exists()  # ours runs the repository's conf file with --set


@pytest.mark.parametrize("path", sorted(COMPOSE_DIR.glob("docker-compose.*.yml")), ids=lambda p: p.name)
def test_every_compose_broker_takes_its_image_command_and_observed_port(path):
    services = yaml.safe_load(path.read_text())["services"]
    brokers = {k: v for k, v in services.items() if k.startswith("broker-")}
    assert brokers
    for name, svc in brokers.items():
        v = docker_backend.env_var(name)
        assert svc["image"] == f"${{{v}_IMAGE:?}}" and svc["command"] == f"${{{v}_COMMAND:?}}"
        assert any(p.endswith(f":${{{v}_OBSERVED:?}}") for p in svc["ports"])
        assert f"${{RMQHA_RUN_DIR:?run folder}}/nodes/{name}:{apache_image.CONTAINER_NODE}" in svc["volumes"]
    assert services["namesrv"]["image"].startswith("${RMQHA_NAMESRV_IMAGE")
    assert services["namesrv"]["command"].startswith("${RMQHA_NAMESRV_COMMAND")


def _wait_for(path: Path, proc: subprocess.Popen, deadline_s: float = 30.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not path.exists():
        assert proc.poll() is None, f"the command ended early ({proc.returncode})"
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def test_the_runner_waits_for_the_jvm_a_stop_reaches(tmp_path):
    """As mqbroker: a script that runs a script that runs the long-lived process, without exec. A SIGTERM
    to the runner reaches the innermost process, and the runner ends only after it finished its
    shutdown (a JVM's shutdown hook), not when the scripts around it died."""
    ready, clean = tmp_path / "ready", tmp_path / "clean"
    inner = f'trap "sleep 0.5; echo ok > {clean}; exit 0" TERM; touch {ready}; while :; do sleep 0.05; done'
    outer = f"sh -c {shlex.quote(inner)}; echo the outer script ran on"
    proc = subprocess.Popen(["sh", str(RUNNER), "sh", "-c", outer])
    try:
        _wait_for(ready, proc)
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert clean.read_text() == "ok\n"  # finished its shutdown before the runner returned
