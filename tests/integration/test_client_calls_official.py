"""The broker asking a real client: the official C++ consumer (PyPI rocketmq 0.4.4 = C++ client 1.0.1)
answers GET_CONSUMER_RUNNING_INFO forwarded by the broker, shows in GET_CONSUMER_CONNECTION_LIST as
4.9 shows it, and re-receives its messages after INVOKE_BROKER_TO_RESET_OFFSET to the start (the
broker tells it by RESET_CONSUMER_CLIENT_OFFSET in the list form the C++ client parses; the client
then commits the offsets itself). One name server and one master."""

from __future__ import annotations

import json
import uuid

import pytest

from rmqha.broker.remoting import object_keys
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.cluster.standalone import rpc
from rmqha.cluster.wait import wait_until

from .processes import broker_on_namesrv
from .test_official_client import BackgroundConsumer, produce

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

pytest.importorskip("rocketmq.client")

QUEUES = 4


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("client-calls")
    with broker_on_namesrv(tmp, "broker-a") as (ns, broker):
        yield tmp, ns, broker


def committed_total(broker, group: str, topic: str) -> int:
    total = 0
    for q in range(QUEUES):
        r = rpc(broker.addr, RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": q})
        total += int(r.ext_fields["offset"]) if r.code == ResponseCode.SUCCESS else 0
    return total


def test_running_info_and_reset_by_time_through_the_official_consumer(cluster):
    tmp, ns, broker = cluster
    topic, group = f"CallT{uuid.uuid4().hex[:8]}", f"CallG{uuid.uuid4().hex[:8]}"
    r = rpc(
        broker.addr,
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        {
            "topic": topic,
            "defaultTopic": "TBW102",
            "readQueueNums": QUEUES,
            "writeQueueNums": QUEUES,
            "perm": 6,
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": 0,
            "order": False,
        },
    )
    assert r.code == ResponseCode.SUCCESS, r.remark
    bodies = {f"call-{i}" for i in range(8)}
    results = produce(ns.addr, [{"mode": "sync", "topic": topic, "messages": [{"body": b} for b in sorted(bodies)]}])
    assert [x.get("status") for x in results] == [0] * 8, results

    consumer = BackgroundConsumer(tmp, ns.addr, topic, group, "calls")
    try:
        wait_until(lambda: {m["body"] for m in consumer.messages()} >= bodies, 40, "first delivery")
        wait_until(lambda: committed_total(broker, group, topic) == 8, 20, "offsets committed")

        conn = rpc(broker.addr, RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group})
        assert conn.code == ResponseCode.SUCCESS, conn.remark
        body = json.loads(conn.body)
        [c] = body["connectionSet"]
        assert (c["language"], body["consumeType"], body["messageModel"]) == ("CPP", "CONSUME_PASSIVELY", "CLUSTERING")
        assert body["subscriptionTable"][topic]["subString"] == "*"

        info = rpc(
            broker.addr,
            RequestCode.GET_CONSUMER_RUNNING_INFO,
            {"consumerGroup": group, "clientId": c["clientId"], "jstackEnable": "false"},
            timeout=12,
        )
        assert info.code == ResponseCode.SUCCESS, info.remark
        running = object_keys.loads(info.body)
        assert topic in {s["topic"] for s in running["subscriptionSet"]}
        assert "PROP_CONSUME_TYPE" in running["properties"]

        reset = rpc(
            broker.addr,
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
            {"topic": topic, "group": group, "timestamp": 0, "isForce": "true"},
        )
        assert reset.code == ResponseCode.SUCCESS, reset.remark
        table = object_keys.loads(reset.body)["offsetTable"]
        assert sorted(json.loads(k)["queueId"] for k in table) == list(range(QUEUES)) and set(table.values()) == {0}

        def again():
            seen = [m["body"] for m in consumer.messages()]
            return all(seen.count(b) >= 2 for b in bodies)

        wait_until(again, 40, "every message re-received after the reset")
    finally:
        consumer.stop()
