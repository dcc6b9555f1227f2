"""Transactional messages on the docker 2m-2s-sync cluster: a producer on the host
(tests/integration/tx_producer.py, through Toxiproxy) commits one half message and rolls back another on
broker-a; the official consumer gets the committed one only, and broker-a-s holds broker-a's log byte
for byte. The check-back (60 s apart with the reference's defaults, which this shared cluster keeps) and
the slave's copy of the check's progress are covered by the local-backend test (test_transactions.py)."""

from __future__ import annotations

import uuid

import pytest

from .docker_cluster import pooled_cluster
from .test_docker_sync import SETS
from .test_official_client import consume
from .tx_producer import COMMIT, ROLLBACK, TxProducer

pytestmark = pytest.mark.integration
pytest.importorskip("rocketmq.client")


cluster = pooled_cluster("2m-2s-sync", SETS)


def test_commit_and_rollback_replicate(cluster):
    topic = f"TxD{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, ["broker-a"])
    producer = TxProducer(cluster.addr("broker-a"), f"PG{uuid.uuid4().hex[:6]}")
    try:
        committed = producer.send_half(topic, "commit-me")
        rolled_back = producer.send_half(topic, "roll-me-back")
        assert committed[1].code == 0 and rolled_back[1].code == 0, (committed, rolled_back)
        producer.end(*committed, COMMIT)
        producer.end(*rolled_back, ROLLBACK)
    finally:
        producer.close()
    got = consume(cluster.namesrv, topic, f"G{uuid.uuid4().hex[:6]}", expect=1, deadline_s=40, linger_s=3)
    assert [m["body"] for m in got] == ["commit-me"]
    cluster.assert_replica_identical("broker-a-s")
