"""The nemesis' process faults on a real local 2m-2s-sync cluster, each through the fault table and the
cluster handle, each checked from outside: kill-master, pause-master, restart-master, power-loss on a
slave and on a master. (Link, partition and client faults need Toxiproxy: test_faults_docker.py.)

broker-*-s flush every 60 s and broker-b every 60 s (flushIntervalCommitLog), so a power loss always
has unsynced bytes to drop; broker-a flushes as usual."""

from __future__ import annotations

import time
import uuid

import pytest

from rmqha.runs.faultlog import read_faults
from rmqha.chaos.nemesis import Fault

from .docker_cluster import SEND_OK, SLAVE_NOT_AVAILABLE, produce

SETS = {
    "syncFlushTimeout": "1500",
    "haSendHeartbeatInterval": "1000",
    "haHousekeepingInterval": "4000",
    "mappedFileSizeCommitLog": str(4 << 20),
    "broker-a-s:flushIntervalCommitLog": "60000",
    "broker-b:flushIntervalCommitLog": "60000",
    "broker-b-s:flushIntervalCommitLog": "60000",
}

# One cluster for the module, from the project's pytest plugin (rmqha/rmqkit/pytest_plugin.py).
pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(240),
    pytest.mark.rocketmq(topology="2m-2s-sync", backend="local", scope="module", sets=SETS),
]
pytest.importorskip("rocketmq.client")


@pytest.fixture
def cluster(rocketmq_cluster):
    """The cluster handle (rmqha/cluster/handle.py) of the module's plugin cluster."""
    return rocketmq_cluster.handle


def send(cluster, master, n=5):
    topic = f"F{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, [master])
    results = produce(cluster.namesrv, topic, [f"m{i}-" + "x" * 300 for i in range(n)])
    assert all(r.get("status") == SEND_OK for r in results), results
    return topic


def fault(kind, cluster, target):
    return Fault(
        0, 0, kind, cluster.node(target)["brokerName"], target, role="slave" if cluster.master_of(target) else "master"
    )


@pytest.mark.parametrize("kind", ["kill-master", "restart-master", "pause-master"])
def test_a_master_fault_takes_the_master_away_and_its_heal_brings_it_back(cluster, nemesis, kind):
    send(cluster, "broker-a")
    cluster.wait_caught_up(30)
    pid = cluster.status("broker-a")["pid"]
    f = fault(kind, cluster, "broker-a")
    nemesis.inject(f)
    assert cluster.status("broker-a", timeout=0.5) is None  # killed, stopped or frozen: no answer
    assert cluster.running("broker-a") == (kind == "pause-master")
    nemesis.heal(f)
    st = cluster.wait_up("broker-a")
    assert (st["pid"] == pid) == (kind == "pause-master")
    if kind != "pause-master":
        assert st["cleanShutdownBefore"] is (kind == "restart-master")
    cluster.wait_caught_up(30)
    send(cluster, "broker-a")
    recs = [r for r in read_faults(cluster.run_dir) if r["id"] == f.id and r["kind"] == kind]
    assert [r["op"] for r in recs] == ["inject", "heal"] and all(r["result"] == "ok" for r in recs)


def test_power_loss_on_a_slave_drops_its_unsynced_tail_and_it_refetches_it(cluster, nemesis):
    cluster.power_model = "reported"  # the cut at the reported offset; crashfs: test_power_crashfs.py
    send(cluster, "broker-a", 20)
    cluster.wait_caught_up(30)
    end = cluster.max_offset("broker-a-s")
    f = fault("power-loss", cluster, "broker-a-s")
    info = nemesis.inject(f)
    assert info["maxPhyOffsetBefore"] == end
    assert info["durableOffset"] < end and info["droppedBytes"] > 0, info  # it flushes every 60 s
    assert info["durableOffset"] >= info["polledDurableOffset"]
    nemesis.heal(f)
    cluster.wait_caught_up(30)
    # it reconnected from what survived, not from where it had been
    slaves = cluster.status("broker-a")["ha"]["slaves"]
    assert slaves[0]["slaveRequestOffset"] <= info["durableOffset"], (slaves, info)
    assert cluster.status("broker-a-s")["cleanShutdownBefore"] is False


def test_power_loss_on_a_master_leaves_it_at_its_durable_offset(cluster, nemesis):
    """The master restarts holding only what it had fsynced; its slave holds more (see docs/ha-protocol.md:
    a master that comes back behind its slave)."""
    cluster.power_model = "reported"  # the cut at the reported offset; crashfs: test_power_crashfs.py
    send(cluster, "broker-b", 20)
    cluster.wait_caught_up(30)
    end = cluster.max_offset("broker-b")
    f = fault("power-loss", cluster, "broker-b")
    info = nemesis.inject(f)
    assert info["maxPhyOffsetBefore"] == end and info["durableOffset"] < end and info["droppedBytes"] > 0
    nemesis.heal(f)
    st = cluster.status("broker-b")
    start = st["maxPhyOffset"]
    assert start <= info["durableOffset"] < cluster.max_offset("broker-b-s") == end
    # SLAVE_AHEAD on the master, MASTER_BEHIND on the slave, both with both offsets; no loop
    ahead = cluster.wait_until(
        lambda: cluster.slaves_ahead().get("broker-b"), 15, "broker-b sees SLAVE_AHEAD", node="broker-b"
    )
    assert ahead[0]["slaveAckOffset"] == end and cluster.status("broker-b")["ha"]["masterStartOffset"] == start
    hc = cluster.wait_until(
        lambda: (cluster.status("broker-b-s") or {}).get("haClient", {}).get("masterBehind"),
        15,
        "broker-b-s reports MASTER_BEHIND",
        node="broker-b-s",
    )
    assert hc == {"slave": end, "master": start}
    connects = cluster.status("broker-b-s")["haClient"]["connects"]
    topic = f"F{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, ["broker-b"])
    r = produce(cluster.namesrv, topic, ["after-" + "x" * 300], mode="async", retries=2)[0]
    assert r.get("status") == SLAVE_NOT_AVAILABLE, r  # stored on the master, not a false SEND_OK
    # over more than one haHousekeepingInterval (4 s): the same connection, nothing truncated
    until = time.monotonic() + 5
    while time.monotonic() < until:
        st = cluster.status("broker-b-s")
        assert st["maxPhyOffset"] == end and st["haClient"]["connects"] == connects, st
        time.sleep(0.25)
    assert any(f"SLAVE: {end} MASTER: {start}" in line for line in cluster.log_tail("broker-b-s", 200))
