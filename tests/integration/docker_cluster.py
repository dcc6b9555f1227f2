"""A docker-backend cluster for integration tests: started with the same code as `make cluster-up`.

One cluster per pytest-xdist worker at a time (DockerClusterPool in conftest.py): a test module asks
for a topology and its broker settings; the worker's cluster is reused when they match, else replaced.
Every wait polls with a deadline. Ports: a 50-port block per cluster, picked per worker so workers of
one session never race for the same block (gw0: 20000, 20200, ...; gw1: 20100, 20300, ...).

testcontainers: its DockerCompose runs `docker compose` (the v2 plugin), which this machine does not
have (only the standalone docker-compose 1.29), and its Ryuk reaper image cannot be pulled (no
registry), so the clusters are driven by rmqha/cluster/docker_backend.py (docker-compose + the docker SDK)
and cleaned up here: each cluster at the end of the session, and at start-up any cluster left by a
test process that no longer runs (what Ryuk would have done).
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.request
from pathlib import Path

from rmqha.cluster.docker_backend import sweep_dead_projects
from rmqha.cluster.handle import Cluster
from rmqha.cluster.runfolder import using_run_root
from rmqha.cluster.ports import free_cluster_base
from rmqha.cluster.status import cluster_info
from rmqha.cluster.topology import load_topology

NAME_PREFIX = "it-"
PROJECT_RE = re.compile(r"^rmqha-it-(\d+)-")
PORT_LOW, PORT_HIGH = 20000, 32000


def free_base_port(topology) -> int:
    """A free 50-port block (and its Toxiproxy API port, base+48) in this xdist worker's slice."""
    base = free_cluster_base(topology, low=PORT_LOW, high=PORT_HIGH, extra_offsets=(48,))
    if base is None:
        raise RuntimeError(f"no free 50-port block between {PORT_LOW} and {PORT_HIGH}")
    return base


def sweep_leftovers(client) -> list[str]:
    """Remove the containers and networks of test clusters whose test process is gone."""
    return sweep_dead_projects(client, PROJECT_RE)
    return True


class DockerCluster(Cluster):
    """The cluster handle (rmqha/cluster/handle.py) of a docker-backend test cluster, plus checks on its
    commit logs. Node, link and admin operations are the handle's."""

    def __init__(self, backend, key):
        super().__init__(backend)
        self.key = key

    # -- lifecycle --------------------------------------------------------------------------------
    @classmethod
    def up(cls, run_root: Path, seq: int, topology: str, sets: dict[str, str], key) -> "DockerCluster":
        name = f"{NAME_PREFIX}{os.getpid()}-{seq}"
        with using_run_root(run_root):  # run/current of the developer stays as it is
            c = Cluster.up(
                name,
                topology,
                "docker",
                base_port=free_base_port(load_topology(topology)),
                sets=sets,
                fresh=True,
                timeout=90,
            )
        return cls(c.backend, key)

    def down(self, keep_data: bool = False) -> None:
        super().down(keep_data=keep_data, timeout=5)

    # -- observation ------------------------------------------------------------------------------
    def status(self, name: str, timeout: float = 2.0) -> dict:
        """The node's /status; raises when it does not answer (tests poll through rmqha.cluster.wait.wait_until)."""
        with urllib.request.urlopen(self.node(name)["statusUrl"], timeout=timeout) as r:
            return json.loads(r.read())

    def logs(self, name: str) -> str:
        return self.node_log(name)

    def wait_in_sync(self, slave: str, deadline_s: float = 60) -> int:
        """Until the slave's HA client is CONNECTED and its maxPhyOffset equals its master's; returns it."""
        master = self.node(slave)["master"]

        def synced():
            s, m = self.status(slave), self.status(master)
            ok = (
                s["haClient"]["state"] == "CONNECTED"
                and s["maxPhyOffset"] == m["maxPhyOffset"]
                and m["ha"]["connectionCount"] >= 1
            )
            return (m["maxPhyOffset"],) if ok else None  # a tuple: an empty log (offset 0) is in sync too

        return self.wait_until(
            synced, deadline_s, f"{slave} in sync with {master}", node=[slave, master], interval=0.2
        )[0]

    def wait_all_in_sync(self, deadline_s: float = 60) -> None:
        for n in self.slaves():
            self.wait_in_sync(n, deadline_s)

    def commitlog(self, name: str, upto: int | None = None) -> bytes:
        """The node's commit log bytes [0, upto) read from its store on the host (default: maxPhyOffset)."""
        if upto is None:
            upto = self.max_offset(name)
        size = int(self.node(name)["commitlogFileSize"])
        d = Path(self.node(name)["store"]) / "commitlog"
        out = bytearray()
        start = 0
        while start < upto:
            with open(d / f"{start:020d}", "rb") as fh:
                out += fh.read(min(size, upto - start))
            start += size
        return bytes(out)

    def assert_replica_identical(self, slave: str) -> int:
        master = self.node(slave)["master"]
        upto = self.wait_in_sync(slave)
        m, s = self.commitlog(master, upto), self.commitlog(slave, upto)
        assert len(m) == len(s) == upto
        if m != s:
            first = next(i for i in range(upto) if m[i] != s[i])
            raise AssertionError(f"{slave} differs from {master} at commit-log offset {first} of {upto}")
        return upto

    def registered(self) -> dict:
        return cluster_info(self.namesrv)


# ---- the fixtures a docker test module declares ----------------------------------------------------


def pooled_cluster(topology: str, sets: dict[str, str] | None = None):
    """A module's `cluster` fixture: this worker's pooled cluster (conftest.py's docker_cluster_pool) of
    this topology and settings, for the whole module:  cluster = pooled_cluster("2m-2s-sync", SETS)"""
    import pytest

    @pytest.fixture(scope="module", name="cluster")
    def cluster(docker_cluster_pool):
        return docker_cluster_pool.get(topology, sets)

    return cluster


def topic_on_master(prefix: str, master: str):
    """A fixture (named as the module attribute it is assigned to): a new topic on `master` alone, so
    sends go to that group; its slave's HA link is restored after the test.
    topic_a = topic_on_master("SyncA", "broker-a")"""
    import uuid

    import pytest

    @pytest.fixture
    def topic(cluster):
        t = f"{prefix}{uuid.uuid4().hex[:8]}"
        cluster.create_topic(t, [master])
        yield t
        cluster.toxics.restore(f"{master}-s-ha")

    return topic


def docker_unavailable_reason() -> str | None:
    try:
        import docker

        client = docker.from_env(timeout=10)
        client.ping()
    except Exception as e:
        return f"no Docker engine ({e})"
    import shutil

    if not shutil.which("docker-compose"):
        import subprocess

        if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode != 0:
            return "neither docker-compose nor the docker compose plugin is installed"
    missing = []
    for image in ("rmqha/broker:latest", "rmqha/toxiproxy:latest"):
        try:
            client.images.get(image)
        except Exception:
            missing.append(image)
    if missing:
        return f"images {', '.join(missing)} are not built: run `make images`"
    return None


def now() -> float:
    return time.monotonic()


# ---- the official client (tests/integration/official_client_worker.py in a child process) ---------

WORKER = Path(__file__).with_name("official_client_worker.py")
SEND_OK, FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE = 0, 2, 3


def run_worker(kind: str, job: dict, timeout: float = 120) -> list[dict]:
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, str(WORKER), kind, json.dumps(job)], capture_output=True, timeout=timeout, text=True
    )
    lines = [json.loads(l) for l in proc.stdout.splitlines() if l.startswith("{")]
    assert lines, f"worker {kind} printed nothing (rc={proc.returncode})\nstderr:\n{proc.stderr[-3000:]}"
    return lines


def produce(
    namesrv: str,
    topic: str,
    bodies: list[str],
    mode: str = "sync",
    retries: int = 3,
    timeout_ms: int = 8000,
    group: str = "PG",
) -> list[dict]:
    """Send each body with the official producer; one result per body ({"status", "offset", ...} or
    {"error"}). mode "async" is the one that reports FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE (the
    client's send_sync retries those); `retries` re-sends a send that raised before reaching a broker
    (the 1.0.1 client's "GetTransport timed_mutex" race), 0 for the status tests."""
    job = {
        "namesrv": namesrv,
        "group": group,
        "timeout_ms": timeout_ms,
        "retries": retries,
        "sends": [
            {"mode": mode, "topic": topic, "messages": [{"body": b, "keys": f"k{i}"} for i, b in enumerate(bodies)]}
        ],
    }
    return run_worker("produce", job)[-1]["results"]


def produce_status(namesrv: str, topic: str, body: str, attempts: int = 3) -> dict:
    """One async send, whose status is what the broker answered. A send that failed before it reached
    the broker (client-side transport race: "error" in the result) is tried again, a status never."""
    for _ in range(attempts):
        r = produce(namesrv, topic, [body], mode="async", retries=0)[0]
        if "error" not in r:
            return r
    return r


def consume(namesrv: str, topic: str, group: str, expect: int, deadline_s: float = 40) -> list[dict]:
    lines = run_worker(
        "consume",
        {"namesrv": namesrv, "topic": topic, "group": group, "expect": expect, "deadline_s": deadline_s},
        deadline_s + 30,
    )
    return [l for l in lines if "body" in l]


def random_bodies(prefix: str, n: int, size: int) -> list[str]:
    """Bodies that do not compress (the client compresses bodies over 4 KiB)."""
    import base64

    return [f"{prefix}-{i}-" + base64.b64encode(os.urandom(size * 3 // 4)).decode()[:size] for i in range(n)]
