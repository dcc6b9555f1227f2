"""Delay levels on the docker 2m-2s-sync cluster: the official client on the host sends at levels 1
and 2 (1 s, 5 s) to one broker group; each message arrives after its delay, and the slave holds
the master's log (the parked and the delivered copies) once it caught up. The local-backend test
(test_delay_levels.py) covers slaves' delay offsets and failover in detail."""

from __future__ import annotations

import uuid

import pytest

from .docker_cluster import pooled_cluster
from .test_docker_sync import SETS
from .test_delay_levels import assert_delivered_in_level_order
from .test_official_client import consume, produce

pytestmark = pytest.mark.integration
pytest.importorskip("rocketmq.client")


cluster = pooled_cluster("2m-2s-sync", SETS)


def test_delayed_messages_arrive_after_their_delay_and_replicate(cluster):
    topic = f"DelayD{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, ["broker-a"])
    sends = [{"body": f"L{lv}-{i}", "keys": f"k{lv}-{i}", "tags": "t", "delay": lv} for lv in (1, 2) for i in range(2)]
    results = produce(cluster.namesrv, [{"mode": "sync", "topic": topic, "messages": sends}])
    assert all(r["status"] == 0 for r in results), results
    got = consume(cluster.namesrv, topic, f"G{uuid.uuid4().hex[:6]}", expect=len(sends), deadline_s=40)
    by_body = {m["body"]: m for m in got}
    assert set(by_body) == {s["body"] for s in sends} and len(got) == len(sends)
    for s in sends:
        waited = (by_body[s["body"]]["received_ms"] - by_body[s["body"]]["born_ms"]) / 1000.0
        delay = {1: 1.0, 2: 5.0}[s["delay"]]
        assert waited >= delay - 0.05, (s["body"], waited)  # never early; lateness: see below
        assert (by_body[s["body"]]["store_ms"] - by_body[s["body"]]["born_ms"]) / 1000.0 >= delay - 0.05
    assert_delivered_in_level_order(by_body, sends)
    cluster.wait_caught_up(30, masters=["broker-a"])
