"""The Rust client (crates.io rocketmq-client-rust, unmodified) on each classic topology through the
cluster handle: 2m-2s-sync, 2m-2s-async and 2m-noslave on the local backend and in containers (sharing the clusters
of test_docker_sync.py, test_docker_replication.py and test_docker_noslave.py when a worker has them). Each: sync and batch sends to both masters
come back SEND_OK and are read back by a push and a lite-pull consumer; then the crate's admin API
(clients/rust admin, DefaultMQAdminExt; the whole admin plane is test_rust_admin.py) sees the
topology's brokers with their runtime info, the topic's route, and the push group's consume stats
with nothing left to consume.

The local clusters are module-scoped, one per topology, so the official 5.x client's whole surface
(client5.surface, through each cluster's 5.x proxy) runs on the local 2m-2s-async and 2m-noslave ones
without starting another (local 2m-2s-sync has test_proxy_client5.py)."""

from __future__ import annotations

import os
import uuid

import pytest

from rmqha.cluster.handle import Cluster
from rmqha.cluster.ports import free_cluster_base
from rmqha.cluster.topology import load_topology
from rmqha.cluster.wait import wait_until

from . import client5
from .rust_client import RustClient
from .test_docker_replication import SETS as ASYNC_SETS
from .test_docker_sync import SETS as SYNC_SETS

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def exercise(rc: RustClient, namesrv: str, create_topic, topology: str) -> None:
    topic = f"RustTopo{uuid.uuid4().hex[:8]}"
    create_topic(topic)
    sent = rc.send(namesrv, topic, mode="sync", count=8, prefix="s", timeout_ms=8000)
    sent += rc.send(namesrv, topic, mode="batch", count=4, prefix="b", timeout_ms=8000)
    assert [r.get("status") for r in sent] == ["SEND_OK"] * 9, sent  # a batch answers once
    assert len({r.get("brokerName") for r in sent}) == 2, "sends did not reach both masters"
    want = {f"s-{i}" for i in range(8)} | {f"b-{i}" for i in range(4)}
    for mode in ("push", "lite"):
        got, _ = rc.consume(namesrv, topic, f"GT-{mode}-{topic}", mode=mode, expect=len(want), timeout_s=40)
        assert {m["body"] for m in got} >= want, (mode, sorted(want - {m["body"] for m in got}))
    admin_sees(rc, namesrv, topic, f"GT-push-{topic}", topology)


def admin_sees(rc: RustClient, namesrv: str, topic: str, group: str, topology: str) -> None:
    expected: dict[str, set[str]] = {}
    for n in load_topology(topology).nodes:
        expected.setdefault(n.broker_name, set()).add(str(n.broker_id))
    out = rc.admin(namesrv, "cluster-list")
    table = out["clusterInfo"]["brokerAddrTable"]
    assert {b: set(d["brokerAddrs"]) for b, d in table.items()} == expected, table
    addrs = {a for d in table.values() for a in d["brokerAddrs"].values()}
    assert set(out["runtime"]) == addrs and not any("error" in rt for rt in out["runtime"].values()), out
    route = rc.admin(namesrv, "topic", "route", topic=topic)["route"]
    assert {q["brokerName"] for q in route["queueDatas"]} == set(expected), route

    # the push consumer committed what it read (it persists offsets every 5 s: wait for it)
    def drained():
        stats = rc.admin(namesrv, "consume-stats", group=group, topic=topic, check=False)
        table = stats.get("stats", {}).get("offsetTable", {})
        return stats if table and all(v["brokerOffset"] == v["consumerOffset"] for v in table.values()) else None

    wait_until(drained, 30, f"consume stats of {group} with nothing left to consume")


@pytest.fixture(scope="module")
def local_cluster(request):
    """A local cluster of the topology the test names (indirect parametrization), kept for the module:
    pytest runs every test of one topology before starting the next."""
    topology = request.param
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    base = free_cluster_base(load_topology(topology))
    assert base is not None, "no free port block for a local cluster"
    c = Cluster.up(f"clients-{topology}-{worker}", topology, "local", base_port=base, timeout=90)
    try:
        yield c
    finally:
        c.down()


@pytest.mark.parametrize("local_cluster", ["2m-2s-sync", "2m-2s-async", "2m-noslave"], indirect=True)
def test_local_topology(local_cluster, rc):
    c = local_cluster
    exercise(rc, c.namesrv, lambda t: c.create_topic(t), c.state["topology"])


@pytest.mark.parametrize("local_cluster", ["2m-2s-async", "2m-noslave"], indirect=True)
def test_local_topology_5x_client(local_cluster):
    client5.surface_on(local_cluster)


@pytest.mark.parametrize(
    "topology,sets", [("2m-2s-sync", SYNC_SETS), ("2m-2s-async", ASYNC_SETS), ("2m-noslave", None)]
)
def test_docker_topology(docker_cluster_pool, topology, sets, rc):
    c = docker_cluster_pool.get(topology, sets)
    exercise(rc, c.namesrv, lambda t: c.create_topic(t), topology)
