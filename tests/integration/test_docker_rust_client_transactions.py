"""The Rust client's transactions and index queries (clients/rust `tx-send` and `query`) against 2m-2s-sync
in containers, through the Toxiproxy client proxies: a committed message reaches a consumer and a
rolled-back one does not, the index finds the committed one by key and viewing its offsetMsgId returns
it, and broker-a-s holds broker-a's commit log byte for byte. The cluster and its settings are
test_docker_sync.py's (the pooled cluster is shared); there the check-back comes only every 60 s (the
reference's default), so it is tested on the local backend (test_rust_client_transactions.py).
"""

from __future__ import annotations


import pytest

from .docker_cluster import pooled_cluster, topic_on_master
from .test_docker_sync import SETS
from .test_rust_client_transactions import nothing_found

pytestmark = pytest.mark.integration


cluster = pooled_cluster("2m-2s-sync", SETS)
topic = topic_on_master("RustTxD", "broker-a")


def test_rust_client_commits_rolls_back_and_queries_through_the_proxies(cluster, rc, topic):
    ns = cluster.namesrv
    sent, checks, done = rc.tx_send(
        ns,
        topic,
        group=f"PG-rtxd-{topic}",
        wait_s=5,
        linger_ms=300,
        timeout_ms=8000,
        messages=[
            {"body": "commit-me", "keys": "dk-commit", "tx": "commit"},
            {"body": "roll-me-back", "keys": "dk-roll", "tx": "rollback"},
        ],
    )
    assert [(r.get("body"), r.get("status"), r.get("brokerName")) for r in sent] == [  # an error row names its error
        ("commit-me", "SEND_OK", "broker-a"),
        ("roll-me-back", "SEND_OK", "broker-a"),
    ], sent
    assert checks == [] and done["unresolved"] == [], (checks, done)

    msgs, final = rc.consume(ns, topic, f"GR-rtxd-{topic}", mode="push", expect=1, timeout_s=30, linger_ms=1500)
    assert [m["body"] for m in msgs] == ["commit-me"], (msgs, final)
    assert msgs[0]["msgId"] == sent[0]["msgId"], msgs
    cluster.wait_until(
        lambda: cluster.status("broker-a")["dispatchOffset"] == cluster.status("broker-a")["maxPhyOffset"],
        20,
        "broker-a dispatched everything",
        node="broker-a",
    )

    (found,), _ = rc.query(ns, topic, key="dk-commit")
    assert (found["body"], found["msgId"], found["storeHost"]) == (
        "commit-me",
        sent[0]["msgId"],
        cluster.addr("broker-a"),
    ), found
    assert nothing_found(*rc.query(ns, topic, key="dk-roll"))
    offset_msg_id = found["offsetMsgId"]
    (view,), end = rc.query(ns, topic, msg_id=offset_msg_id)
    assert end["host"] == cluster.addr("broker-a") and (view["body"], view["commitLogOffset"]) == (
        "commit-me",
        found["commitLogOffset"],
    ), (view, end)
    cluster.assert_replica_identical("broker-a-s")
