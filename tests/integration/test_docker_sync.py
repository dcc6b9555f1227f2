"""2m-2s-sync in containers, Toxiproxy on the HA links, the official client on the host.

FLUSH_SLAVE_TIMEOUT and SLAVE_NOT_AVAILABLE as a SYNC_MASTER answers them, caused by the network
(not by pausing processes), and SEND_OK again once the links are restored. Each test writes to one
broker group only: its topic exists on that master alone (create_topic), so the route sends there.

Settings: syncFlushTimeout=1500 (the sync wait), haSendHeartbeatInterval=1000 and
haHousekeepingInterval=6000 (a silent HA connection is dropped after 6 s), and for broker-b only
haSlaveFallbehindMax=32768 (a slave 32 KiB behind counts as not available).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rmqha.cluster.wait import wait_until

from . import client5
from .docker_cluster import (
    FLUSH_SLAVE_TIMEOUT,
    SEND_OK,
    SLAVE_NOT_AVAILABLE,
    pooled_cluster,
    produce,
    produce_status,
    random_bodies,
    topic_on_master,
)

pytestmark = pytest.mark.integration
pytest.importorskip("rocketmq.client")

SYNC_WAIT_MS = 1500
FALLBEHIND_MAX = 32768
SETS = {
    "syncFlushTimeout": str(SYNC_WAIT_MS),
    "haSendHeartbeatInterval": "1000",
    "haHousekeepingInterval": "6000",
    "broker-b:haSlaveFallbehindMax": str(FALLBEHIND_MAX),
}


cluster = pooled_cluster("2m-2s-sync", SETS)
topic_a = topic_on_master("SyncA", "broker-a")
topic_b = topic_on_master("SyncB", "broker-b")


def test_a_host_client_gets_send_ok_through_the_proxies(cluster, topic_a):
    results = produce(cluster.namesrv, topic_a, [f"hello-{i}" for i in range(5)])
    assert all(r.get("status") == SEND_OK for r in results), results
    info = cluster.registered()["brokerAddrTable"]
    # what the name server hands out is the host-published client proxy of each broker
    assert info["broker-a"]["brokerAddrs"]["0"] == cluster.addr("broker-a")
    assert cluster.addr("broker-a").startswith("127.0.0.1:")
    cluster.assert_replica_identical("broker-a-s")


def test_the_5x_client_through_the_proxys_link(cluster):
    """The official 5.x client's whole surface (client5.surface) through the 5.x proxy, a compose service
    of its own: the client reaches it through Toxiproxy's "proxy" link, and it reaches each broker
    through that broker's client link."""
    assert "proxy" in {p["name"] for p in cluster.links()}
    client5.surface_on(cluster)


def test_latency_above_the_sync_wait_gives_flush_slave_timeout_and_the_slave_gets_it_later(cluster, topic_a):
    assert produce_status(cluster.namesrv, topic_a, "before")["status"] == SEND_OK
    before = cluster.wait_in_sync("broker-a-s")
    # master -> slave delayed 2.5 s: the slave's ack cannot come within the 1.5 s wait
    cluster.toxics.latency("broker-a-s-ha", 2500)
    t0 = time.monotonic()
    r = produce_status(cluster.namesrv, topic_a, "late-" + "x" * 200)
    assert r.get("status") == FLUSH_SLAVE_TIMEOUT, r
    assert time.monotonic() - t0 >= SYNC_WAIT_MS / 1000
    # the message is on the master ...
    after = cluster.max_offset("broker-a")
    assert after > before
    assert b"late-" + b"x" * 200 in cluster.commitlog("broker-a", after)[before:]
    assert cluster.status("broker-a")["ha"]["connectionCount"] == 1  # slow, not disconnected
    # ... and on the slave once the toxic is gone, byte for byte
    cluster.toxics.restore("broker-a-s-ha")
    assert cluster.assert_replica_identical("broker-a-s") == after
    assert produce_status(cluster.namesrv, topic_a, "after")["status"] == SEND_OK


def test_ha_link_cut_until_the_master_drops_it_gives_slave_not_available(cluster, topic_a):
    assert produce_status(cluster.namesrv, topic_a, "before")["status"] == SEND_OK
    cluster.wait_in_sync("broker-a-s")
    # data swallowed both ways: the master hears nothing and drops the slave (haHousekeepingInterval)
    cluster.toxics.cut("broker-a-s-ha", "timeout")
    wait_until(
        lambda: cluster.status("broker-a")["ha"]["connectionCount"] == 0,
        30,
        "the master dropped its slave",
        interval=0.2,
        on_timeout=lambda: str(cluster.status("broker-a")),
    )
    before = cluster.max_offset("broker-a")
    r = produce_status(cluster.namesrv, topic_a, "nobody-listens")
    assert r.get("status") == SLAVE_NOT_AVAILABLE, r
    assert cluster.max_offset("broker-a") > before  # stored on the master all the same
    # links restored: the slave reconnects, catches up, and sends are SEND_OK again
    cluster.toxics.restore("broker-a-s-ha")
    cluster.assert_replica_identical("broker-a-s")
    assert produce_status(cluster.namesrv, topic_a, "back")["status"] == SEND_OK


def test_a_slave_held_back_beyond_fallbehind_max_is_not_available(cluster, topic_b):
    # 8 KB messages are fine for this broker when the link is healthy ...
    bodies = random_bodies("big", 12, 8_000)
    start = cluster.status("broker-b")["maxPhyOffset"]
    assert produce_status(cluster.namesrv, topic_b, bodies[0])["status"] == SEND_OK
    one = cluster.status("broker-b")["maxPhyOffset"] - start  # the size of one such record
    cluster.wait_in_sync("broker-b-s")
    # ... but with master -> slave at 1 KB/s each waits out the sync wait, the slave falls further
    # behind with each, and once more than 32 KiB behind the master no longer waits for it
    cluster.toxics.bandwidth("broker-b-s-ha", 1)
    before = cluster.status("broker-b")["maxPhyOffset"]
    results = produce(cluster.namesrv, topic_b, bodies[1:], mode="async", retries=0)
    statuses = [r.get("status", r.get("error")) for r in results]
    # The 1.0.1 client's first async send in a new process can fail before it reaches any broker (its
    # transport race; produce_status retries it). Such leading errors are passed over only when the
    # master stored exactly one record per answered send, so none of them reached the broker.
    lead = next((i for i, s in enumerate(statuses) if isinstance(s, int)), len(statuses))
    if lead:
        stored = cluster.status("broker-b")["maxPhyOffset"] - before
        answered = len(statuses) - lead
        assert all(isinstance(s, int) for s in statuses[lead:]), statuses  # only leading ones
        assert abs(stored - one * answered) < one // 2, (statuses, stored, one)  # none of them was stored
        statuses = statuses[lead:]
    assert statuses[0] == FLUSH_SLAVE_TIMEOUT, statuses  # the first one waits, and the wait times out
    assert SLAVE_NOT_AVAILABLE in statuses, statuses  # then the slave is too far behind to wait for
    first_sna = statuses.index(SLAVE_NOT_AVAILABLE)
    assert set(statuses[:first_sna]) == {FLUSH_SLAVE_TIMEOUT}, statuses
    m = cluster.status("broker-b")
    assert m["maxPhyOffset"] - m["ha"]["push2SlaveMaxOffset"] > FALLBEHIND_MAX, m
    assert cluster.status("broker-b")["ha"]["connectionCount"] == 1  # connected all along
    cluster.toxics.restore("broker-b-s-ha")
    cluster.assert_replica_identical("broker-b-s")
    assert produce_status(cluster.namesrv, topic_b, "back")["status"] == SEND_OK


def test_the_outcomes_tool_shows_every_outcome_on_demand(cluster):
    """`make outcomes` (python -m rmqha.chaos.outcomes) on this cluster: SEND_OK, FLUSH_SLAVE_TIMEOUT (slaves
    frozen), SLAVE_NOT_AVAILABLE (slaves stopped), SEND_OK again, each stored on a master."""
    repo = Path(__file__).resolve().parents[2]
    env = dict(os.environ, CLUSTER_RUN_ROOT=str(cluster.run_dir.parent), PYTHONPATH=str(repo))
    p = subprocess.run(
        [sys.executable, "-m", "rmqha.chaos.outcomes", "--name", cluster.name],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    assert "every outcome as expected" in p.stdout
    for line in (
        "ok                    SEND_OK               SEND_OK",
        "flush-slave-timeout   FLUSH_SLAVE_TIMEOUT   FLUSH_SLAVE_TIMEOUT",
        "slave-not-available   SLAVE_NOT_AVAILABLE   SLAVE_NOT_AVAILABLE",
        "ok-again              SEND_OK               SEND_OK",
    ):
        assert line in p.stdout, p.stdout
    for slave in ("broker-a-s", "broker-b-s"):
        cluster.assert_replica_identical(slave)
