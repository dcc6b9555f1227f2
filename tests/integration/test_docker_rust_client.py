"""The Rust client (clients/rust, crates.io rocketmq-client-rust) on the host against 2m-2s-sync in
containers, through the Toxiproxy client proxies, as test_docker_sync.py drives the official client:
SEND_OK, FLUSH_SLAVE_TIMEOUT under a latency toxic on the HA link, SLAVE_NOT_AVAILABLE once a cut
link made the master drop its slave, SEND_OK again, and every message read back by push and lite-pull
consumers. The settings are test_docker_sync.py's, so one xdist worker reuses its cluster.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from rmqha.cluster.wait import wait_until

from .docker_cluster import pooled_cluster, topic_on_master
from .test_docker_sync import SETS, SYNC_WAIT_MS

pytestmark = pytest.mark.integration


cluster = pooled_cluster("2m-2s-sync", SETS)
topic = topic_on_master("RustDock", "broker-a")


def test_rust_client_sends_every_sync_master_outcome_and_reads_back_through_the_proxies(cluster, rc, topic):
    ns = cluster.namesrv
    one = dict(mode="sync", count=1, timeout_ms=8000, retries=0)
    try:
        ok = rc.send(ns, topic, mode="sync", count=5, prefix="dock", timeout_ms=8000)
        assert [r.get("status") for r in ok] == ["SEND_OK"] * 5, ok
        cluster.wait_in_sync("broker-a-s")

        cluster.toxics.latency("broker-a-s-ha", 2500)  # the slave's ack cannot come within the sync wait
        late = rc.send(ns, topic, prefix="late", **one)
        assert [r.get("status") for r in late] == ["FLUSH_SLAVE_TIMEOUT"], late
        assert late[0]["ms"] >= SYNC_WAIT_MS - 50, late
        cluster.toxics.restore("broker-a-s-ha")
        cluster.wait_in_sync("broker-a-s")

        cluster.toxics.cut("broker-a-s-ha", "timeout")  # silent link: dropped after haHousekeepingInterval
        wait_until(
            lambda: cluster.status("broker-a")["ha"]["connectionCount"] == 0,
            30,
            "the master dropped its slave",
            interval=0.2,
            on_timeout=lambda: str(cluster.status("broker-a")),
        )
        gone = rc.send(ns, topic, prefix="gone", **one)
        assert [r.get("status") for r in gone] == ["SLAVE_NOT_AVAILABLE"], gone
        cluster.toxics.restore("broker-a-s-ha")
        cluster.assert_replica_identical("broker-a-s")
        back = rc.send(ns, topic, prefix="back", **one)
        assert [r.get("status") for r in back] == ["SEND_OK"], back
    finally:
        cluster.toxics.restore("broker-a-s-ha")

    want = {f"dock-{i}" for i in range(5)} | {"late-0", "gone-0", "back-0"}
    with ThreadPoolExecutor(2) as pool:
        futs = {
            mode: pool.submit(
                rc.consume, ns, topic, f"GR-dock-{mode}-{topic}", mode=mode, expect=len(want), timeout_s=30
            )
            for mode in ("push", "lite")
        }
        got = {mode: f.result() for mode, f in futs.items()}
    for mode, (msgs, done) in got.items():
        bodies = {m["body"] for m in msgs}
        assert want <= bodies, (mode, sorted(want - bodies), done)
        assert {m["brokerName"] for m in msgs} == {"broker-a"}
