"""The official 5.x Python client (rocketmq-python-client 5.1.2, unmodified, in .venv-client5) through
the 5.x gRPC proxy (rmqha/proxy) of a local 2m-2s-sync cluster: the proxy is one of the cluster's
processes and `cluster status` names it. Producer: sync, async, FIFO (one message group lands on one
queue), delay (a delivery timestamp) and transactions (commit, rollback, and one left open that the
broker's check resolves through the Telemetry stream). SimpleConsumer: receive, ack, change invisible
duration, redelivery, the DLQ after the maximum attempts; PushConsumer with a failed consumption.

Every other topology and backend runs the whole surface once (client5.surface_on) on a cluster another
test module starts anyway: test_docker_sync.py, test_docker_replication.py, test_docker_noslave.py,
test_dledger_docker.py, test_dledger_broker.py (with POP's revive across a leader change) and
test_rust_client_topologies.py (local 2m-2s-async and 2m-noslave)."""

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
    # a consumer sees the committed one and the one the check committed, never the rolled back one
    seen = client5.simple(cluster.proxy, f"GT{topic}", topic, 2, deadline_s=30)
    assert sorted(_bodies(seen)) == ["t-commit", "t-open"], seen


def _bodies(lines):
    return [x["body"] for x in lines if "body" in x]


def test_delay_is_delivered_after_its_timestamp(cluster):
    topic = _topic(cluster)
    [sent] = client5.produce(cluster.proxy, topic, [{"body": "later", "delay_s": 3}])
    assert sent.get("error") is None, sent
    got = client5.simple(cluster.proxy, f"GD{topic}", topic, 1, deadline_s=40)
    [line] = [x for x in got if "body" in x]
    # the delivery timestamp rounds up to a delay level (5 s here): never early
    assert line["body"] == "later" and line["t"] >= sent["sent_ms"] + 3000, (line, sent)


def test_simple_consumer_receive_ack_change_and_redelivery(cluster):
    topic = _topic(cluster)
    bodies = [f"m{i}" for i in range(6)]
    assert [x.get("error") for x in client5.produce(cluster.proxy, topic, [{"body": b} for b in bodies])] == [None] * 6
    group = f"GS{topic}"
    plan = {"m1": ["skip"], "m2": ["change:1"], "m3": ["change:1", "skip"]}
    got = client5.simple(cluster.proxy, group, topic, 6, deadline_s=60, plan=plan)
    seen = {}
    for x in got:
        assert "error" not in x, got
        seen.setdefault(x["body"], []).append((x["attempt"], x["action"]))
    assert set(seen) == set(bodies)
    for b in ("m0", "m4", "m5"):
        assert seen[b] == [(1, "ack")], seen  # acked at once: delivered once
    assert seen["m1"] == [(1, "skip"), (2, "ack")]  # not acked: back after its invisible time
    assert seen["m2"] == [(1, "change:1"), (2, "ack")]  # invisible for 1 s more, then back
    assert seen["m3"] == [(1, "change:1"), (2, "skip"), (3, "ack")]
    # everything was acked: nothing comes back to the group
    again = client5.simple(cluster.proxy, group, topic, 1, deadline_s=13)
    assert _bodies(again) == [], again


def test_dead_letter_queue_after_max_attempts(cluster):
    from rmqha.broker.remoting.codes import RequestCode, ResponseCode
    from rmqha.cluster.standalone import rpc

    topic = _topic(cluster)
    group = f"GQ{topic}"
    masters = [n["addr"] for n in cluster.state["nodes"] if n["brokerId"] == 0]
    for addr in masters:  # retryMaxTimes 1: two deliveries, then the DLQ
        body = ('{"groupName":"%s","retryMaxTimes":1}' % group).encode()
        assert rpc(addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body).code == ResponseCode.SUCCESS
    assert client5.produce(cluster.proxy, topic, [{"body": "doomed"}, {"body": "fine"}])[0].get("error") is None
    # long polls of 1 s: the client visits the 8 queues of the route in turn, so a retried message is seen soon
    plan = {"doomed": ["skip", "skip", "skip"]}
    got = client5.simple(cluster.proxy, group, topic, 99, deadline_s=45, await_s=1, plan=plan)
    doomed = [x["attempt"] for x in got if x.get("body") == "doomed"]
    assert doomed == [1, 2], got  # the third pop found it over the limit: the proxy moved it to the DLQ

    def dlq_size():
        return sum(
            int(
                rpc(a, RequestCode.GET_MAX_OFFSET, {"topic": f"%DLQ%{group}", "queueId": "0"}).ext_fields.get(
                    "offset", 0
                )
            )
            for a in masters
        )

    assert dlq_size() == 1


def test_push_consumer_with_a_failure(cluster):
    topic = _topic(cluster)
    assert [x.get("error") for x in client5.produce(cluster.proxy, topic, [{"body": f"p{i}"} for i in range(5)])] == [
        None
    ] * 5
    got = client5.push(cluster.proxy, f"GP{topic}", topic, 5, deadline_s=60, fail=["p3"])
    attempts = {}
    for x in got:
        attempts.setdefault(x["body"], []).append(x["attempt"])
    assert attempts == {"p0": [1], "p1": [1], "p2": [1], "p3": [1, 2], "p4": [1]}, got
