"""2m-noslave in containers: no HA link at all, and both masters take writes from a host client."""

from __future__ import annotations

import uuid

import pytest

from . import client5
from .docker_cluster import SEND_OK, consume, pooled_cluster, produce

pytestmark = pytest.mark.integration
pytest.importorskip("rocketmq.client")


cluster = pooled_cluster("2m-noslave")


def test_no_ha_connection_and_no_ha_proxy(cluster):
    # the brokers' links (the 5.x proxy's own client link, "proxy", is not a broker's)
    brokers = [p for p in cluster.state["proxies"] if p["node"] != "proxy"]
    assert [p["kind"] for p in brokers] == ["client", "vip", "client", "vip"]
    assert cluster.toxics.names() == ["broker-a", "broker-a-vip", "broker-b", "broker-b-vip", "proxy"]
    for name in ("broker-a", "broker-b"):
        s = cluster.status(name)
        assert s["role"] == "ASYNC_MASTER"
        assert "haClient" not in s
        assert s["ha"]["connectionCount"] == 0 and s["ha"]["slaves"] == []


def test_both_masters_take_writes_and_a_consumer_reads_them(cluster):
    topic = f"NoSlave{uuid.uuid4().hex[:8]}"
    before = {b: cluster.max_offset(b) for b in ("broker-a", "broker-b")}
    bodies = [f"ns-{i}" for i in range(40)]
    results = produce(cluster.namesrv, topic, bodies)
    assert all(r.get("status") == SEND_OK for r in results), results
    for b in ("broker-a", "broker-b"):
        assert cluster.max_offset(b) > before[b], f"{b} took no write"
    got = consume(cluster.namesrv, topic, "G-noslave", expect=len(bodies))
    assert set(bodies) <= {m["body"] for m in got}


def test_the_5x_client_without_slaves(cluster):
    """The official 5.x client's whole surface (client5.surface) through the cluster's 5.x proxy."""
    client5.surface_on(cluster)
