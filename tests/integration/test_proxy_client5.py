"""The official 5.x Python client (rocketmq-python-client 5.1.2, unmodified, in .venv-client5) through
the 5.x gRPC proxy (rmqha/proxy) of a local 2m-2s-sync cluster: the proxy is one of the cluster's
processes and `cluster status` names it. Producer: sync, async, FIFO (one message group lands on one
queue), delay (a delivery timestamp) and transactions (commit, rollback, and one left open that the
broker's check resolves through the Telemetry stream). Consumers are in test_proxy_consume.py."""

from __future__ import annotations

import os
import uuid

import pytest

from rmqha.cluster.handle import Cluster
from rmqha.cluster.ports import free_cluster_base
from rmqha.cluster.topology import load_topology

from . import client5

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def cluster():
    client5.require()
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    base = free_cluster_base(load_topology("2m-2s-sync"))
    assert base is not None, "no free port block for a local cluster"
    # a half message is checked 1 s after its birth, every second (4.9's defaults: 6 s, 60 s)
    sets = {"transactionTimeOut": "1000", "transactionCheckInterval": "1000"}
    c = Cluster.up(f"proxy5-{worker}", "2m-2s-sync", "local", base_port=base, sets=sets, timeout=90)
    try:
        yield c
    finally:
        c.down()


def _topic(c) -> str:
    t = f"P5{uuid.uuid4().hex[:8]}"
    c.create_topic(t)
    return t


def test_status_names_the_proxy(cluster):
    assert cluster.proxy and cluster.proxy.endswith(f":{cluster.state['basePort'] + 45}")
    assert cluster.backend.process_state("proxy").detail == "running"


def test_producer_sync_async_fifo_delay(cluster):
    topic = _topic(cluster)
    sends = [{"body": f"s{i}"} for i in range(4)] + [{"body": f"a{i}", "mode": "async"} for i in range(4)]
    sends += [{"body": f"f{i}", "group": "order-7"} for i in range(4)] + [{"body": "d0", "delay_s": 2}]
    got = client5.produce(cluster.proxy, topic, sends)
    assert [x.get("error") for x in got] == [None] * len(sends), got
    assert len({x["message_id"] for x in got}) == len(sends)
    # FIFO: one group, one queue, so its offsets count up one by one
    fifo = [x["offset"] for x in got if x["body"].startswith("f")]
    assert fifo == list(range(fifo[0], fifo[0] + 4)), fifo


def test_transactions_commit_rollback_and_server_check(cluster):
    topic = _topic(cluster)
    sends = [
        {"body": "t-commit", "transaction": "commit"},
        {"body": "t-rollback", "transaction": "rollback"},
        {"body": "t-open", "transaction": "none"},
    ]
    got = client5.run(
        {
            "op": "produce",
            "endpoint": cluster.proxy,
            "topic": topic,
            "sends": sends,
            "checker": "commit",
            "linger_s": 6,
        },
        timeout=120,
    )
    entries = {x["body"]: x for x in got if "i" in x}
    assert [x.get("error") for x in entries.values()] == [None] * 3, got
    # the open one: the broker's check reached the producer over Telemetry (RecoverOrphanedTransactionCommand),
    # and only that one (the others were ended by the client)
    checked = [x["checked"] for x in got if "checked" in x]
    assert set(checked) == {entries["t-open"]["message_id"]}, got
