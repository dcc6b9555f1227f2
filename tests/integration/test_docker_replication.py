"""2m-2s-async in containers: replication through Toxiproxy survives cuts, slicing and restarts.

The slave resumes from the offset it reports (RocketMQ's slaveRequestOffset = the slave's own
maxPhyOffset), never from 0, and the replicas end byte-identical to their masters: the commit-log
files are compared on the host (the stores are bind-mounted under the cluster's run folder).

Settings: haSendHeartbeatInterval=1000, haHousekeepingInterval=4000 (a silent HA connection is
dropped after 4 s).
"""

from __future__ import annotations

import re
import time
import uuid

import pytest

from rmqha.cluster.wait import wait_until

from . import client5
from .docker_cluster import SEND_OK, pooled_cluster, produce, random_bodies, topic_on_master

pytestmark = pytest.mark.integration
pytest.importorskip("rocketmq.client")

SETS = {"haSendHeartbeatInterval": "1000", "haHousekeepingInterval": "4000"}
CONNECTED = re.compile(r"slave \S+ connected: slaveRequestOffset=(-?\d+)")


cluster = pooled_cluster("2m-2s-async", SETS)
topic_a = topic_on_master("ReplA", "broker-a")


def send_ok(cluster, topic, bodies):
    results = produce(cluster.namesrv, topic, bodies)
    assert all(r.get("status") == SEND_OK for r in results), results
    return results


def request_offsets_since(cluster, since: float) -> list[int]:
    """slaveRequestOffset of every HA connection the master logged since `since` (epoch seconds)."""
    logs = cluster.node_log("broker-a", since=since)
    return [int(m.group(1)) for m in CONNECTED.finditer(logs)]


@pytest.mark.parametrize("mode", ["reset_peer", "timeout", "disabled"])
def test_a_cut_ha_link_resumes_from_the_slaves_offset(cluster, topic_a, mode):
    send_ok(cluster, topic_a, random_bodies("pre", 20, 600))
    before_cut = cluster.wait_in_sync("broker-a-s")
    assert before_cut > 0
    connects = cluster.status("broker-a-s")["haClient"]["connects"]
    t_cut = time.time()
    cluster.toxics.cut("broker-a-s-ha", mode)
    wait_until(
        lambda: cluster.status("broker-a")["ha"]["connectionCount"] == 0,
        30,
        "the master lost its slave",
        interval=0.2,
        on_timeout=lambda: str(cluster.status("broker-a")),
    )
    # writes go on at the master while the slave is cut off
    send_ok(cluster, topic_a, random_bodies(f"during-{mode}", 30, 600))
    master_max = cluster.max_offset("broker-a")
    slave_before = cluster.max_offset("broker-a-s")
    assert slave_before == before_cut < master_max  # nothing crossed the cut
    cluster.toxics.restore("broker-a-s-ha")
    assert cluster.assert_replica_identical("broker-a-s") == master_max
    st = cluster.status("broker-a")
    slave = st["ha"]["slaves"][0]
    assert slave["slaveRequestOffset"] == slave_before, slave  # the new connection asked for our offset
    assert cluster.status("broker-a-s")["haClient"]["connects"] > connects
    assert cluster.status("broker-a-s")["haClient"]["offsetMismatches"] == 0
    offsets = request_offsets_since(cluster, t_cut)
    assert slave_before in offsets, offsets
    assert all(o >= slave_before for o in offsets), f"a connection asked for less than {slave_before}: {offsets}"


def test_a_slicer_with_tiny_slices_still_gives_identical_replicas(cluster, topic_a):
    cluster.wait_in_sync("broker-a-s")
    cluster.toxics.slicer("broker-a-s-ha", average_size=7, size_variation=3, delay_us=10)
    cluster.toxics.slicer("broker-a-s-ha", average_size=3, size_variation=2, delay_us=10, stream="upstream")
    send_ok(cluster, topic_a, random_bodies("sliced", 40, 1500))
    upto = cluster.assert_replica_identical("broker-a-s")  # replicated through the slicer
    assert set(cluster.toxics.toxic_names("broker-a-s-ha")) == {"slicer_downstream", "slicer_upstream"}
    assert upto == cluster.max_offset("broker-a")


def test_a_restarted_slave_container_resumes_from_its_own_max_offset(cluster, topic_a):
    send_ok(cluster, topic_a, random_bodies("pre-restart", 10, 800))
    before = cluster.wait_in_sync("broker-a-s")
    pid_before = cluster.status("broker-a-s")["pid"]
    t_stop = time.time()
    cluster.stop("broker-a-s", timeout=10)
    wait_until(
        lambda: cluster.status("broker-a")["ha"]["connectionCount"] == 0, 20, "the master lost its slave", interval=0.2
    )
    send_ok(cluster, topic_a, random_bodies("while-down", 15, 800))
    cluster.start("broker-a-s")  # returns once /status answers
    s = cluster.status("broker-a-s")
    assert s["cleanShutdownBefore"] is True
    cluster.assert_replica_identical("broker-a-s")
    assert cluster.status("broker-a")["ha"]["slaves"][0]["slaveRequestOffset"] == before
    assert request_offsets_since(cluster, t_stop) == [before]
    del pid_before


def test_both_async_slaves_converge(cluster):
    topic = f"Both{uuid.uuid4().hex[:8]}"
    send_ok(cluster, topic, random_bodies("both", 80, 700))
    a = cluster.assert_replica_identical("broker-a-s")
    b = cluster.assert_replica_identical("broker-b-s")
    assert a > 0 and b > 0  # the auto-created topic spread over both masters


def test_the_5x_client_on_async_replication(cluster):
    """The official 5.x client's whole surface (client5.surface) through the cluster's 5.x proxy."""
    client5.surface_on(cluster)
