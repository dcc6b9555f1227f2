"""The nemesis' docker-only faults on a 2m-2s-sync cluster in containers, through the fault table and the
cluster handle: a partitioned master (off its network: no name server, no slave, no client), a cut and a
slowed client link, and kill-master / power-loss as the local tests do them, on containers."""

from __future__ import annotations

import time
import uuid

import pytest

from rmqha.runs.faultlog import read_faults
from rmqha.chaos.nemesis import Fault

from .docker_cluster import SEND_OK, pooled_cluster, produce, produce_status
from .test_docker_sync import SETS

pytestmark = pytest.mark.integration
pytest.importorskip("rocketmq.client")


cluster = pooled_cluster("2m-2s-sync", SETS)


def topic_on(cluster, master):
    t = f"FD{uuid.uuid4().hex[:8]}"
    cluster.create_topic(t, [master])
    return t


def fault(kind, cluster, target, **params):
    # A unique id: the pooled cluster's fault log is shared by every test that used the cluster.
    return Fault(
        0,
        0,
        kind,
        cluster.node(target)["brokerName"],
        target,
        params,
        role="slave" if cluster.master_of(target) else "master",
        id=uuid.uuid4().int % (1 << 31),
    )


def test_a_partitioned_master_is_cut_from_everyone_and_rejoins(cluster, nemesis):
    t = topic_on(cluster, "broker-a")
    assert produce_status(cluster.namesrv, t, "before")["status"] == SEND_OK
    f = fault("partition", cluster, "broker-a")
    nemesis.inject(f)
    assert cluster.running("broker-a")  # the process runs ...
    cluster.wait_until(
        lambda: (cluster.status("broker-a-s") or {}).get("haClient", {}).get("state") != "CONNECTED",
        20,
        "the slave lost its master",
        node="broker-a-s",
    )  # ... but nobody reaches it
    r = produce(cluster.namesrv, t, ["during"], mode="async", retries=0, timeout_ms=3000)[0]
    assert r.get("status") != SEND_OK, r
    nemesis.heal(f)
    cluster.assert_replica_identical("broker-a-s")
    assert produce_status(cluster.namesrv, t, "after")["status"] == SEND_OK
    assert [r["op"] for r in read_faults(cluster.run_dir) if r["id"] == f.id] == ["inject", "heal"]


@pytest.mark.parametrize("kind,params", [("client-cut", {"mode": "timeout"}), ("client-latency", {"ms": 1000})])
def test_a_client_link_fault_hits_only_the_host_clients(cluster, nemesis, kind, params):
    t = topic_on(cluster, "broker-b")
    assert produce_status(cluster.namesrv, t, "before")["status"] == SEND_OK
    f = fault(kind, cluster, "broker-b", **params)
    nemesis.inject(f)
    assert f.link == "broker-b"
    t0 = time.monotonic()
    # a cut must fail inside the timeout; a 1 s latency must not: connect, send and answer each cross the
    # slow link, so it gets room for several crossings (2.5 s failed twice on a loaded machine)
    timeout_ms = 2500 if kind == "client-cut" else 8000
    r = produce(cluster.namesrv, t, ["during"], mode="async", retries=0, timeout_ms=timeout_ms)[0]
    if kind == "client-cut":
        assert r.get("status") != SEND_OK, r
    else:
        assert r.get("status") == SEND_OK and time.monotonic() - t0 >= 1.0, r
    assert cluster.status("broker-b")["ha"]["connectionCount"] == 1  # replication untouched
    nemesis.heal(f)
    assert produce_status(cluster.namesrv, t, "after")["status"] == SEND_OK


@pytest.mark.parametrize("kind,target", [("kill-master", "broker-a"), ("power-loss", "broker-b-s")])
def test_container_kill_and_power_loss(cluster, nemesis, kind, target):
    master = cluster.master_of(target) or target
    t = topic_on(cluster, master)
    results = produce(cluster.namesrv, t, [f"m{i}" for i in range(10)])
    assert all(r.get("status") == SEND_OK for r in results), results
    cluster.wait_caught_up(30)
    f = fault(kind, cluster, target)
    cluster.power_model = "reported"  # the cut at the reported offset; crashfs: test_power_crashfs.py
    info = nemesis.inject(f)
    assert not cluster.running(target)
    if kind == "power-loss":
        assert info["durableOffset"] <= info["maxPhyOffsetBefore"]
    nemesis.heal(f)
    cluster.assert_replica_identical(cluster.slaves_of(master)[0])
    assert produce_status(cluster.namesrv, t, "after")["status"] == SEND_OK
