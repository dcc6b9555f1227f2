"""The message index end to end: the official client (PyPI rocketmq 0.4.4) sends messages with keys to a
local 2m-2s cluster; QUERY_MESSAGE by key and by UNIQ_KEY on every master and slave finds them, and
VIEW_MESSAGE_BY_ID with the offsetMsgId of a found record returns it, from the master and its slave.

The official client has no query API (rocketmq.client 0.4.4 offers producers and a push consumer), so
the queries go through the project's own remoting client (remoting_query_worker.py, its own process).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.store import record
from rmqha.cluster.wait import wait_until

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("rocketmq.client")

from .processes import two_async_groups, unique_name  # noqa: E402
from .test_official_client import produce  # noqa: E402  (needs rocketmq.client)

FAR = 2**62


def remoting(requests: list[dict]) -> list[dict]:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.integration.remoting_query_worker", json.dumps({"requests": requests})],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    lines = [json.loads(l) for l in proc.stdout.splitlines() if l.startswith("{")]
    assert lines, f"remoting worker printed nothing (rc={proc.returncode})\n{proc.stderr[-3000:]}"
    replies = lines[-1]["replies"]
    assert all("error" not in r for r in replies), replies
    return replies


def query(addr: str, topic: str, key: str, unique: bool = False, begin: int = 0, end: int = FAR) -> dict:
    fields = {"topic": topic, "key": key, "maxNum": 32, "beginTimestamp": begin, "endTimestamp": end}
    if unique:
        fields["_UNIQUE_KEY_QUERY"] = "true"
    return {"addr": addr, "code": RequestCode.QUERY_MESSAGE, "fields": fields}


def records(reply: dict) -> list[tuple[bytes, record.Message]]:
    body, out, pos = bytes.fromhex(reply["body"]), [], 0
    while pos < len(body):
        r = record.scan(body, pos)
        assert r.kind == record.Scan.MESSAGE, r.reason
        out.append((body[pos : pos + r.size], r.message))
        pos += r.size
    return out


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with two_async_groups(tmp_path_factory.mktemp("index-cluster")) as (ns, nodes):
        yield ns, nodes


def test_query_by_key_and_view_by_id_on_masters_and_slaves(cluster):
    ns, nodes = cluster
    topic = unique_name("Idx")
    sent = [{"body": f"indexed-{i}", "keys": f"order-{i} batch-{i % 2}", "tags": "t"} for i in range(10)]
    t_sent = int(time.time() * 1000)
    results = produce(ns.addr, [{"mode": "sync", "topic": topic, "messages": sent}])
    assert all(r.get("status") == 0 for r in results), results
    uniq = [r["msg_id"] for r in results]  # the C++ client's msgId is the UNIQ_KEY it set
    for g in ("broker-a", "broker-b"):
        m, s = nodes[g], nodes[g + "-s"]
        wait_until(
            lambda s=s, m=m: s.status()["dispatchOffset"] == m.status()["maxPhyOffset"],
            20,
            f"{g}-s dispatched what {g} holds",
        )
        assert m.status()["index"]["error"] is None and s.status()["index"]["items"] == m.status()["index"]["items"]

    order = ["broker-a", "broker-a-s", "broker-b", "broker-b-s"]
    asks = [
        query(nodes[n].addr, topic, k, unique=u)
        for n in order
        for k, u in (("order-3", False), ("batch-1", False), (uniq[7], True))
    ]
    asks += [query(nodes[n].addr, topic, "order-3", begin=t_sent + 3_600_000) for n in order]
    replies = remoting(asks)
    by_node = {n: replies[3 * i : 3 * i + 3] for i, n in enumerate(order)}
    for n in order:  # a slave answers exactly as its master
        if n.endswith("-s"):
            assert by_node[n] == by_node[n[:-2]], n
    for r in replies[12:]:
        assert r["code"] == ResponseCode.QUERY_NOT_FOUND and r["remark"].startswith("can not find message")

    def found(i):  # the records of the i-th query across both masters
        out = []
        for n in ("broker-a", "broker-b"):
            r = by_node[n][i]
            assert r["code"] in (ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND), r
            if r["code"] == ResponseCode.SUCCESS:
                assert int(r["ext"]["indexLastUpdatePhyoffset"]) > 0
                out += [(n, raw, msg) for raw, msg in records(r)]
        return out

    assert [m.body for _, _, m in found(0)] == [b"indexed-3"]
    assert sorted(m.body for _, _, m in found(1)) == sorted(f"indexed-{i}".encode() for i in range(1, 10, 2))
    ((node, raw, msg),) = found(2)
    assert msg.body == b"indexed-7" and msg.properties["UNIQ_KEY"] == uniq[7]
    assert msg.properties["KEYS"] == "order-7 batch-1"

    # VIEW_MESSAGE_BY_ID by the record's offsetMsgId: the client decodes it to its store host and offset
    offset_msg_id = record.offset_msg_id(msg.store_host, msg.physical_offset)
    (host, port), phys = record.parse_offset_msg_id(offset_msg_id)
    assert f"{host}:{port}" == nodes[node].addr
    slave = nodes[node + "-s"].addr
    views = remoting(
        [
            {"addr": a, "code": RequestCode.VIEW_MESSAGE_BY_ID, "fields": {"offset": o}}
            for a, o in ((f"{host}:{port}", phys), (slave, phys), (slave, phys + 1))
        ]
    )
    assert views[0]["code"] == views[1]["code"] == ResponseCode.SUCCESS
    assert bytes.fromhex(views[0]["body"]) == bytes.fromhex(views[1]["body"]) == raw
    assert views[2]["code"] == ResponseCode.SYSTEM_ERROR
