"""The message index on the docker 2m-2s-sync cluster: the official client on the host sends keyed
messages to one broker group; QUERY_MESSAGE by key and by UNIQ_KEY through the client proxies finds them
on the master and on its slave (same answers), VIEW_MESSAGE_BY_ID serves the found record on both, and
the containers' index files have the sizes the tooling sets (maxHashSlotNum=50000, maxIndexNum=200000).
The local-backend test (test_message_index.py) covers both groups."""

from __future__ import annotations

import os
import uuid

import pytest

from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.store import record

from .docker_cluster import pooled_cluster
from .test_docker_sync import SETS

pytestmark = pytest.mark.integration
pytest.importorskip("rocketmq.client")

from .test_message_index import query, records, remoting  # noqa: E402
from .test_official_client import produce  # noqa: E402

INDEX_FILE_SIZE = 40 + 50_000 * 4 + 200_000 * 20


cluster = pooled_cluster("2m-2s-sync", SETS)


def test_query_by_key_and_view_by_id_on_containers(cluster):
    topic = f"IdxD{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, ["broker-a"])
    sends = [{"body": f"d-{i}", "keys": f"dk-{i} dall", "tags": "t"} for i in range(6)]
    results = produce(cluster.namesrv, [{"mode": "sync", "topic": topic, "messages": sends}])
    assert all(r["status"] == 0 for r in results), results
    cluster.wait_caught_up(30, masters=["broker-a"])
    cluster.wait_until(
        lambda: cluster.status("broker-a-s")["dispatchOffset"] == cluster.status("broker-a")["maxPhyOffset"],
        20,
        "the slave dispatched everything",
        node="broker-a-s",
    )
    nodes = ("broker-a", "broker-a-s")
    asks = [
        query(cluster.addr(n), topic, k, unique=u)
        for n in nodes
        for k, u in (("dk-2", False), ("dall", False), (results[4]["msg_id"], True))
    ]
    replies = remoting(asks)
    assert replies[:3] == replies[3:]  # the slave answers as its master
    assert [m.body for _, m in records(replies[0])] == [b"d-2"]
    assert [m.body for _, m in records(replies[1])] == [f"d-{i}".encode() for i in range(6)]
    ((raw, msg),) = records(replies[2])
    assert msg.body == b"d-4"
    (host, port), phys = record.parse_offset_msg_id(record.offset_msg_id(msg.store_host, msg.physical_offset))
    assert f"{host}:{port}" == cluster.addr("broker-a")
    views = remoting(
        [{"addr": cluster.addr(n), "code": RequestCode.VIEW_MESSAGE_BY_ID, "fields": {"offset": phys}} for n in nodes]
    )
    assert all(v["code"] == ResponseCode.SUCCESS and bytes.fromhex(v["body"]) == raw for v in views)
    for n in nodes:
        d = cluster.store_path(n) / "index"
        sizes = {os.path.getsize(d / f) for f in os.listdir(d)}
        assert sizes == {INDEX_FILE_SIZE}, (n, sizes)
