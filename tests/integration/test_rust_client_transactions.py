"""Transactional messages and the message index with the second client (crates.io rocketmq-client-rust
through clients/rust: `tx-send` on its TransactionMQProducer, `query` on DefaultMQProducer's
queryMessage / viewMessage), against a local master and slave. The official Python client has neither
API (test_transactions.py and test_message_index.py speak the protocol themselves for that part).

* commit, rollback and check-back: the local transaction commits one message and rolls back another;
  two more are left UNKNOW and the broker asks about them after transactionTimeOut. Each check is
  answered UNKNOW once, so the broker asks again (TRANSACTION_CHECK_TIMES 2), and then COMMIT or
  ROLLBACK. The committed messages, and only they, reach the topic and a consumer, once each; the index
  finds them by key under the real topic and never the rolled-back ones; viewing a half's offsetMsgId
  shows the half record in RMQ_SYS_TRANS_HALF_TOPIC.
* query by key within a time range and view by offsetMsgId, on plain messages.
* HA: the slave's commit log is the master's byte for byte; with the master stopped the client's query
  by key is served by the slave, the same offset viewed at the slave's address gives the same record,
  and a consumer reads the committed message (not the rolled-back one) from the slave.

* a message whose local state stays UNKNOW is asked about transactionCheckMax times, then moved to
  TRANS_CHECK_MAX_TIME_TOPIC and never asked about again nor delivered.

Broker settings: transactionTimeOut=2000, transactionCheckInterval=1000 (a check-back within ~3 s),
transactionCheckMax=3.
"""

from __future__ import annotations

import json
import time

import pytest

from rmqha.broker.remoting.codes import RequestCode
from rmqha.broker.store import record
from rmqha.cluster.standalone import BrokerProcess, rpc
from rmqha.cluster.wait import wait_until

from .processes import master_and_slave, unique_name
from .test_rust_client import create_topic

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

HALF, CID, DISCARDED = "RMQ_SYS_TRANS_HALF_TOPIC", "CID_RMQ_SYS_TRANS", "TRANS_CHECK_MAX_TIME_TOPIC"
TIMEOUT_MS, INTERVAL_MS, CHECK_MAX = 2000, 1000, 3
NO_MESSAGE_CODE, NO_MESSAGE = 208, "query message by key finished, but no message."  # the client's words


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, rc):
    extra = {
        "transactionTimeOut": str(TIMEOUT_MS),
        "transactionCheckInterval": str(INTERVAL_MS),
        "transactionCheckMax": str(CHECK_MAX),
    }
    with master_and_slave(
        tmp_path_factory.mktemp("rust-tx-cluster"), "broker-rtx", extra=extra, slave_extra=extra, wait_connected=True
    ) as pair:
        yield pair


def cid_offsets(broker: BrokerProcess) -> dict:
    reply = rpc(broker.addr, RequestCode.GET_ALL_CONSUMER_OFFSET)
    table = json.loads(reply.body)["offsetTable"] if reply.body else {}
    return {k: v for k, v in table.items() if k.endswith("@" + CID)}


def dispatched(broker: BrokerProcess) -> bool:
    s = broker.status()
    return s["dispatchOffset"] == s["maxPhyOffset"]


def nothing_found(found: list[dict], end: dict) -> bool:
    """The client's answer to a query that found nothing: its NO_MESSAGE (208) error."""
    return (
        found == []
        and end["found"] == 0
        and (end.get("errorCode"), end.get("errorMessage")) == (NO_MESSAGE_CODE, NO_MESSAGE)
    )


def by_body(results: list[dict]) -> dict[str, dict]:
    return {r["body"]: r for r in results}


def test_commit_rollback_and_check_back(cluster, rc):
    ns, master, _ = cluster
    topic = unique_name("RustTx")
    create_topic(ns, [master], topic)
    group = f"PG-rtx-{topic}"
    plan = {
        "commit-me": "commit",
        "roll-me-back": "rollback",
        "ask-then-commit": "check-commit",
        "ask-then-roll-back": "check-rollback",
    }
    sent, checks, done = rc.tx_send(
        ns.addr,
        topic,
        group=group,
        unknown_checks=1,
        wait_s=20,
        messages=[{"body": b, "keys": f"key-{b}", "tags": "tx", "tx": mode} for b, mode in plan.items()],
    )
    sent = by_body(sent)
    assert set(sent) == set(plan), sent
    for body, mode in plan.items():
        r = sent[body]
        want = {"commit": "COMMIT_MESSAGE", "rollback": "ROLLBACK_MESSAGE"}.get(mode, "UNKNOW")
        assert (r["status"], r["localState"], r["brokerName"]) == ("SEND_OK", want, "broker-rtx"), r
    assert done["unresolved"] == [], (done, checks)

    # The broker asked about the two UNKNOW ones only: UNKNOW the first time, so it asked again.
    asked = {sent[b]["msgId"]: b for b in ("ask-then-commit", "ask-then-roll-back")}
    assert {c["msgId"] for c in checks} == set(asked), checks
    for msg_id, body in asked.items():
        mine = sorted((c for c in checks if c["msgId"] == msg_id), key=lambda c: c["check"])
        final = "COMMIT_MESSAGE" if plan[body] == "check-commit" else "ROLLBACK_MESSAGE"
        assert [c["answer"] for c in mine[:2]] == ["UNKNOW", final], mine
        assert [c["checkTimes"] for c in mine[:2]] == ["1", "2"], mine
        for c in mine:
            # the check shows the half with its real topic, body, keys and producer group
            assert (c["topic"], c["body"], c["keys"], c["props"]["PGROUP"]) == (topic, body, f"key-{body}", group), c
            assert c["ms"] >= TIMEOUT_MS - 200, c  # not before transactionTimeOut
        assert mine[1]["ms"] - mine[0]["ms"] >= INTERVAL_MS - 200, mine  # the next run asked again

    committed = {"commit-me", "ask-then-commit"}
    wait_until(lambda: master.total_messages(topic, 4) == 2, 15, "the committed messages in their topic")
    msgs, final = rc.consume(ns.addr, topic, f"GR-rtx-{topic}", mode="push", expect=2, timeout_s=20, linger_ms=1500)
    assert sorted(m["body"] for m in msgs) == sorted(committed), (msgs, final)
    for m in msgs:  # the committed copy keeps the producer's msgId (UNIQ_KEY) and the half's properties
        assert m["msgId"] == sent[m["body"]]["msgId"], m
        assert (m["props"].get("TRAN_MSG"), m["props"].get("PGROUP"), m["tags"]) == ("true", group, "tx"), m

    # The check walked past every half: nothing is left that could still be committed.
    halves = master.max_offset(HALF, 0)
    wait_until(
        lambda: cid_offsets(master).get(f"{HALF}@{CID}") == {"0": halves}, 15, "the check walked past every half"
    )
    assert master.total_messages(topic, 4) == 2

    # The index: a committed message is found by its key under its topic, a rolled-back one is not.
    for body in plan:
        found, end = rc.query(ns.addr, topic, key=f"key-{body}")
        if body in committed:
            assert [(f["body"], f["msgId"], f["topic"]) for f in found] == [(body, sent[body]["msgId"], topic)], found
            assert found[0]["sysFlag"] & 0xC == record.TRANSACTION_COMMIT, found
        else:
            assert nothing_found(found, end), (body, found, end)
    # A send's offsetMsgId names its half record, which keeps the real topic in REAL_TOPIC.
    (half,), _ = rc.query(ns.addr, topic, msg_id=sent["roll-me-back"]["offsetMsgId"])
    assert (half["topic"], half["body"], half["props"]["REAL_TOPIC"]) == (HALF, "roll-me-back", topic), half


def test_unknown_forever_is_asked_check_max_times_then_discarded(cluster, rc):
    ns, master, _ = cluster
    topic = unique_name("RustTxMax")
    create_topic(ns, [master], topic)
    discarded = master.total_messages(DISCARDED, 1)
    # the command waits for CHECK_MAX checks, then 2.5 check intervals more in which no other may come
    sent, checks, done = rc.tx_send(
        ns.addr,
        topic,
        group=f"PG-rtxmax-{topic}",
        tx="unknown",
        prefix="never",
        expect_checks=CHECK_MAX,
        wait_s=20,
        linger_ms=int(2.5 * INTERVAL_MS),
    )
    assert [(r["status"], r["localState"]) for r in sent] == [("SEND_OK", "UNKNOW")], sent
    assert [(c["check"], c["checkTimes"], c["answer"], c["msgId"]) for c in checks] == [
        (n, str(n), "UNKNOW", sent[0]["msgId"]) for n in range(1, CHECK_MAX + 1)
    ], checks
    wait_until(lambda: master.total_messages(DISCARDED, 1) == discarded + 1, 10, f"the half moved to {DISCARDED}")
    assert master.total_messages(topic, 4) == 0


def test_query_by_key_in_a_time_range_and_view_by_id(cluster, rc):
    ns, master, _ = cluster
    topic, other = unique_name("RustIdx"), unique_name("RustIdxOther")
    create_topic(ns, [master], topic)
    create_topic(ns, [master], other)
    t0 = int(time.time() * 1000)
    sent = rc.send(
        ns.addr, topic, messages=[{"body": f"indexed-{i}", "keys": f"order-{i} batch-{i % 2}"} for i in range(6)]
    )
    t1 = int(time.time() * 1000)
    assert [r.get("status") for r in sent] == ["SEND_OK"] * 6, sent
    noise = rc.send(ns.addr, other, messages=[{"body": "other-topic", "keys": "order-3 batch-1"}])
    assert noise[0].get("status") == "SEND_OK", noise
    wait_until(lambda: dispatched(master), 10, "the index holds everything stored")

    found, end = rc.query(ns.addr, topic, key="order-3")
    assert [(f["body"], f["msgId"], f["offsetMsgId"]) for f in found] == [
        ("indexed-3", sent[3]["msgId"], sent[3]["offsetMsgId"])
    ], (found, end)
    assert end["indexLastUpdateTimestamp"] >= t0, end
    found, _ = rc.query(ns.addr, topic, key="batch-1")  # not batch-0's, nor the other topic's
    assert sorted(f["body"] for f in found) == ["indexed-1", "indexed-3", "indexed-5"], found
    assert {f["topic"] for f in found} == {topic}
    found, _ = rc.query(ns.addr, topic, key="batch-0", begin_ms=t0 - 1000, end_ms=t1 + 1000)
    assert sorted(f["body"] for f in found) == ["indexed-0", "indexed-2", "indexed-4"], found
    for begin, end_ms in ((t1 + 3_600_000, t1 + 7_200_000), (0, t0 - 3_600_000)):  # a range around no send
        found, end = rc.query(ns.addr, topic, key="batch-0", begin_ms=begin, end_ms=end_ms)
        assert nothing_found(found, end), (begin, end_ms, found, end)
    found, end = rc.query(ns.addr, topic, key="no-such-key")
    assert nothing_found(found, end), end

    for i in (0, 5):
        (view,), end = rc.query(ns.addr, topic, msg_id=sent[i]["offsetMsgId"])
        assert (view["body"], view["msgId"], view["keys"], view["topic"]) == (
            f"indexed-{i}",
            sent[i]["msgId"],
            f"order-{i} batch-{i % 2}",
            topic,
        ), view
        assert end["host"] == master.addr and view["storeHost"] == master.addr, (view, end)
    (host, port), phys = record.parse_offset_msg_id(sent[5]["offsetMsgId"])
    _, end = rc.query(ns.addr, topic, msg_id=record.offset_msg_id((host, port), phys + 1))  # not a record start
    assert end["found"] == 0 and end.get("error"), end


def test_slave_serves_the_committed_message_and_the_index_with_the_master_down(cluster, rc):
    ns, master, slave = cluster
    topic = unique_name("RustTxHA")
    create_topic(ns, [master], topic)
    sent, checks, done = rc.tx_send(
        ns.addr,
        topic,
        group=f"PG-rtxha-{topic}",
        wait_s=5,
        linger_ms=300,
        messages=[
            {"body": "kept", "keys": "ha-kept", "tx": "commit"},
            {"body": "dropped", "keys": "ha-dropped", "tx": "rollback"},
        ],
    )
    assert [(r["body"], r["status"]) for r in sent] == [("kept", "SEND_OK"), ("dropped", "SEND_OK")], sent
    assert checks == [], checks
    wait_until(
        lambda: master.total_messages(topic, 4) == 1 and dispatched(master), 10, "the commit in its topic and the index"
    )
    (kept,), _ = rc.query(ns.addr, topic, key="ha-kept")

    wait_until(
        lambda: slave.status()["maxPhyOffset"] == master.status()["maxPhyOffset"] and dispatched(slave),
        20,
        "the slave caught up and dispatched",
    )
    end = master.status()["maxPhyOffset"]
    assert slave.commitlog_bytes(end) == master.commitlog_bytes(end)
    master.stop()
    try:
        wait_until(lambda: 0 not in ns.broker_addrs("broker-rtx"), 20, "the name server dropped the master")
        found, qend = rc.query(ns.addr, topic, key="ha-kept")  # the route now names the slave alone
        assert [(f["body"], f["msgId"], f["commitLogOffset"]) for f in found] == [
            ("kept", kept["msgId"], kept["commitLogOffset"])
        ], (found, qend)
        found, qend = rc.query(ns.addr, topic, key="ha-dropped")
        assert nothing_found(found, qend), qend
        at_slave = record.offset_msg_id(("127.0.0.1", slave.port), kept["commitLogOffset"])
        (view,), vend = rc.query(ns.addr, topic, msg_id=at_slave)
        assert vend["host"] == slave.addr and (view["body"], view["msgId"]) == ("kept", kept["msgId"]), view
        msgs, cdone = rc.consume(
            ns.addr, topic, f"GR-rtxha-{topic}", mode="pull", expect=1, timeout_s=15, linger_ms=1000
        )
        assert [m["body"] for m in msgs] == ["kept"], (msgs, cdone)
    finally:
        master.start()
        wait_until(lambda: master.status()["ha"]["connectionCount"] == 1, 30, "the slave reconnected")
