"""A second client, written by no one here: `rocketmq-client-rust` (crates.io, pinned in
clients/rust/Cargo.toml) through the clients/rust CLI, against a local 2m-2s-sync cluster.

Every expectation is what a Java 4.9 broker gives a Java-protocol client: sync, async, oneway and batch
sends come back with SEND_OK and are read back unchanged by push, classic pull and lite pull consumers;
a selector sends in order to one queue and an orderly consumer sees that order; RECONSUME_LATER brings a
message back with reconsumeTimes 1 after delay level 3; max/min/consumer offsets are the broker's; a SYNC_MASTER answers
SEND_OK, FLUSH_SLAVE_TIMEOUT (slave frozen: SIGSTOP) and SLAVE_NOT_AVAILABLE (slave gone) to a plain
sync send (this client, like Java's, does not retry a non-OK status unless retryAnotherBrokerWhenNotStoreOK);
and with a master stopped its slave serves the consumers.

Layout: name server, broker-a and broker-b (SYNC_MASTER, syncFlushTimeout=1500) each with a slave.
The status test uses a topic on broker-a alone, the failover test one on broker-b alone.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from rmqha.broker.remoting import json_body
from rmqha.broker.remoting.codes import RequestCode
from rmqha.cluster.standalone import BrokerProcess, NameServerProcess, rpc, sync_groups
from rmqha.cluster.wait import wait_until

from .processes import unique_name

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

SYNC_WAIT_MS = 1500
DELAY_LEVELS = "1s 1s 2s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
RETRY_DELAY_MS = 2000  # level 3, what a consumer's RECONSUME_LATER asks for the first time


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, rc):
    # the HA housekeeping interval stays at its 20 s default: a slave frozen for a few seconds keeps its
    # connection (FLUSH_SLAVE_TIMEOUT), a stopped one closes it at once (SLAVE_NOT_AVAILABLE)
    # delay level 3 (a RECONSUME_LATER's first retry) is 2 s instead of 10 s, so the retry test is short
    extra = {"syncFlushTimeout": str(SYNC_WAIT_MS), "messageDelayLevel": DELAY_LEVELS}
    with sync_groups(tmp_path_factory.mktemp("rust-cluster"), extra=extra) as (ns, nodes):
        yield ns, nodes


def create_topic(ns: NameServerProcess, masters: list[BrokerProcess], topic: str, queues: int = 4) -> None:
    """The topic on these masters only; wait until the name server routes it to exactly them."""
    for m in masters:
        resp = rpc(
            m.addr,
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {
                "topic": topic,
                "defaultTopic": "TBW102",
                "readQueueNums": queues,
                "writeQueueNums": queues,
                "perm": 6,
                "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": 0,
                "order": "false",
            },
        )
        assert resp.code == 0, f"create {topic} on {m.name}: {resp.code} {resp.remark}"
    want = {m.broker_name for m in masters}

    def routed():
        r = rpc(ns.addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        return r.code == 0 and {q["brokerName"] for q in json_body.loads(r.body)["queueDatas"]} == want

    wait_until(routed, 20, f"route of {topic}")


def bodies_of(msgs: list[dict]) -> set[str]:
    return {m["body"] for m in msgs if m.get("action", "CONSUME_SUCCESS") == "CONSUME_SUCCESS"}


def assert_all_ok(results: list[dict], n: int) -> None:
    assert len(results) == n, results
    bad = [r for r in results if r.get("status") != "SEND_OK"]
    assert not bad, bad


# -- sends and reads ------------------------------------------------------------------------------


def test_every_send_mode_read_back_by_push_pull_and_lite_pull(cluster, rc):
    ns, nodes = cluster
    topic = unique_name("RustModes")
    # made on both masters first: left to auto-creation, the first send made it on one master only and
    # the client's route could name just that one for the next sends (seen once in CI: all 11 on broker-b)
    create_topic(ns, [nodes["broker-a"], nodes["broker-b"]], topic)
    sync = rc.send(ns.addr, topic, mode="sync", count=6, prefix="sync", tags="TagS")
    assert_all_ok(sync, 6)
    asyn = rc.send(ns.addr, topic, mode="async", count=5, prefix="async", tags="TagA")
    assert_all_ok(asyn, 5)
    oneway = rc.send(ns.addr, topic, mode="oneway", count=3, prefix="oneway", tags="TagO")
    assert len(oneway) == 3 and all("error" not in r for r in oneway), oneway
    batch = rc.send(ns.addr, topic, mode="batch", count=4, prefix="batch", tags="TagB")
    assert_all_ok(batch, 1)
    big = rc.send(
        ns.addr,
        topic,
        mode="sync",
        messages=[{"body": "big-" + "B" * 6000, "tags": "TagL", "keys": "big-key", "props": {"up": "v1", "seq": "7"}}],
    )
    assert_all_ok(big, 1)

    sent = {f"{p}-{i}" for p, n in (("sync", 6), ("async", 5), ("oneway", 3), ("batch", 4)) for i in range(n)}
    sent.add("big-" + "B" * 6000)
    # the messages went to both masters
    assert {r["brokerName"] for r in sync + asyn} == {"broker-a", "broker-b"}
    assert nodes["broker-a"].total_messages(topic, 4) + nodes["broker-b"].total_messages(topic, 4) == len(sent)

    with ThreadPoolExecutor(3) as pool:
        futs = {
            mode: pool.submit(
                rc.consume, ns.addr, topic, f"GR-{mode}-{topic}", mode=mode, expect=len(sent), timeout_s=30
            )
            for mode in ("push", "pull", "lite")
        }
        got = {mode: f.result() for mode, f in futs.items()}
    for mode, (msgs, done) in got.items():
        missing = sent - bodies_of(msgs)
        assert not missing, f"{mode}: missing {sorted(missing)[:10]} ({done})"
        by_body = {m["body"]: m for m in msgs}
        for prefix, tag in (("sync", "TagS"), ("async", "TagA"), ("oneway", "TagO"), ("batch", "TagB")):
            m = by_body[f"{prefix}-0"]
            assert (m["topic"], m["tags"], m["keys"]) == (topic, tag, f"{prefix}-key-0"), (mode, m)
        m = by_body["big-" + "B" * 6000]
        assert (m["tags"], m["keys"], m["props"].get("up"), m["props"].get("seq")) == ("TagL", "big-key", "v1", "7")
        ids = {r["msgId"] for r in sync + asyn}
        assert ids <= {x["msgId"] for x in msgs}, f"{mode}: the consumer's msgIds are not the producer's"


def test_send_to_a_chosen_queue_and_orderly_consumption(cluster, rc):
    ns, nodes = cluster
    topic = unique_name("RustOrder")
    create_topic(ns, [nodes["broker-a"], nodes["broker-b"]], topic)
    exact = rc.send(ns.addr, topic, mode="sync", count=3, prefix="exact", queue=2, broker="broker-b")
    assert_all_ok(exact, 3)
    assert {(r["brokerName"], r["queueId"]) for r in exact} == {("broker-b", 2)}
    assert [r["queueOffset"] for r in exact] == [0, 1, 2]
    assert nodes["broker-b"].max_offset(topic, 2) == 3

    ordered = rc.send(ns.addr, topic, mode="orderly", count=12, prefix="ord", queue=1)
    assert_all_ok(ordered, 12)
    assert len({(r["brokerName"], r["queueId"]) for r in ordered}) == 1, ordered  # one queue for all
    offsets = [r["queueOffset"] for r in ordered]
    assert offsets == sorted(offsets) and len(set(offsets)) == 12

    msgs, done = rc.consume(ns.addr, topic, f"GR-orderly-{topic}", mode="orderly", expect=15, timeout_s=30)
    assert {f"ord-{i}" for i in range(12)} | {f"exact-{i}" for i in range(3)} <= bodies_of(msgs), done
    seq = [m["body"] for m in msgs if m["body"].startswith("ord-")]
    assert seq == [f"ord-{i}" for i in range(12)], seq


def test_reconsume_later_brings_each_message_back(cluster, rc):
    ns, _ = cluster
    topic = unique_name("RustRetry")
    sent = rc.send(ns.addr, topic, mode="sync", count=3, prefix="retry")
    assert_all_ok(sent, 3)
    # The broker parks the sent-back message at delay level 3 + reconsumeTimes (here 2 s), then
    # delivers it through %RETRY%<group>.
    msgs, done = rc.consume(
        ns.addr, topic, f"GR-retry-{topic}", mode="push", expect=3, timeout_s=90, reconsume_later=True
    )
    later = {m["body"]: m for m in msgs if m["action"] == "RECONSUME_LATER"}
    ok = [m for m in msgs if m["action"] == "CONSUME_SUCCESS"]
    assert set(later) == {f"retry-{i}" for i in range(3)}, msgs
    assert {m["body"] for m in ok} == {f"retry-{i}" for i in range(3)}, (msgs, done)
    for m in ok:
        assert m["reconsumeTimes"] == 1, m
        assert m["topic"] == topic, m  # the client restores the original topic of a %RETRY% message
        assert m["ms"] - later[m["body"]]["ms"] >= RETRY_DELAY_MS - 300, (m, later[m["body"]])
    assert {m["msgId"] for m in ok} == {r["msgId"] for r in sent}


def test_offset_queries(cluster, rc):
    ns, nodes = cluster
    topic = unique_name("RustOffsets")
    create_topic(ns, [nodes["broker-a"]], topic)
    assert_all_ok(rc.send(ns.addr, topic, mode="sync", count=5, prefix="off", queue=0, broker="broker-a"), 5)
    assert_all_ok(rc.send(ns.addr, topic, mode="sync", count=2, prefix="off3", queue=3, broker="broker-a"), 2)
    group = f"GR-offsets-{topic}"
    before = {(o["brokerName"], o["queueId"]): o for o in rc.offsets(ns.addr, topic, group)}
    assert set(before) == {("broker-a", q) for q in range(4)}, before
    for q, n in ((0, 5), (1, 0), (2, 0), (3, 2)):
        o = before[("broker-a", q)]
        assert (o.get("minOffset"), o.get("maxOffset")) == (0, n), o
        assert o.get("maxOffset") == nodes["broker-a"].max_offset(topic, q)
    msgs, done = rc.consume(ns.addr, topic, group, mode="push", expect=7, timeout_s=30, linger_ms=1500)
    assert len(bodies_of(msgs)) == 7, done
    after = {(o["brokerName"], o["queueId"]): o for o in rc.offsets(ns.addr, topic, group)}
    assert after[("broker-a", 0)].get("consumerOffset") == 5, after
    assert after[("broker-a", 3)].get("consumerOffset") == 2, after


# -- SYNC_MASTER outcomes and failover ------------------------------------------------------------


def test_sync_master_send_ok_flush_slave_timeout_and_slave_not_available(cluster, rc):
    ns, nodes = cluster
    master, slave = nodes["broker-a"], nodes["broker-a-s"]
    topic = unique_name("RustSync")
    create_topic(ns, [master], topic)
    send = dict(mode="sync", timeout_ms=8000, retries=0)  # client timeout above the broker's sync wait

    ok = rc.send(ns.addr, topic, prefix="ok", **send)
    assert [r.get("status") for r in ok] == ["SEND_OK"], ok
    stored = master.total_messages(topic, 4)

    slave.pause()  # HA connection stays up, nothing is acknowledged
    try:
        slow = rc.send(ns.addr, topic, prefix="slow", **send)
        assert [r.get("status") for r in slow] == ["FLUSH_SLAVE_TIMEOUT"], slow
        assert slow[0]["ms"] >= SYNC_WAIT_MS - 50, slow
        assert master.total_messages(topic, 4) == stored + 1  # stored on the master all the same
        slow_async = rc.send(ns.addr, topic, prefix="slowa", **{**send, "mode": "async"})
        assert [r.get("status") for r in slow_async] == ["FLUSH_SLAVE_TIMEOUT"], slow_async
    finally:
        slave.resume()

    slave.stop()
    try:
        wait_until(lambda: master.status()["ha"]["connectionCount"] == 0, 20, "the master dropped its slave")
        gone = rc.send(ns.addr, topic, prefix="gone", **send)
        assert [r.get("status") for r in gone] == ["SLAVE_NOT_AVAILABLE"], gone
        gone_async = rc.send(ns.addr, topic, prefix="gonea", **{**send, "mode": "async"})
        assert [r.get("status") for r in gone_async] == ["SLAVE_NOT_AVAILABLE"], gone_async
        assert master.total_messages(topic, 4) == stored + 4
    finally:
        slave.start()
    wait_until(
        lambda: (
            master.status()["ha"]["connectionCount"] == 1
            and slave.status()["maxPhyOffset"] == master.status()["maxPhyOffset"]
        ),
        30,
        "slave back and caught up",
    )
    again = rc.send(ns.addr, topic, prefix="again", **send)
    assert [r.get("status") for r in again] == ["SEND_OK"], again


def test_consumers_read_from_the_slave_while_the_master_is_down(cluster, rc):
    ns, nodes = cluster
    master, slave = nodes["broker-b"], nodes["broker-b-s"]
    topic = unique_name("RustFailover")
    create_topic(ns, [master], topic)
    sent = rc.send(ns.addr, topic, mode="sync", count=10, prefix="fo")
    assert_all_ok(sent, 10)
    wait_until(
        lambda: (
            slave.status()["maxPhyOffset"] == master.status()["maxPhyOffset"]
            and slave.status()["dispatchOffset"] == slave.status()["maxPhyOffset"]
        ),
        20,
        "slave caught up",
    )
    master.stop()
    try:
        wait_until(lambda: 0 not in ns.broker_addrs("broker-b"), 20, "the name server dropped the master")
        want = {f"fo-{i}" for i in range(10)}
        with ThreadPoolExecutor(2) as pool:
            futs = {
                mode: pool.submit(
                    rc.consume, ns.addr, topic, f"GR-fo-{mode}-{topic}", mode=mode, expect=10, timeout_s=30
                )
                for mode in ("push", "pull")
            }
            got = {mode: f.result() for mode, f in futs.items()}
        for mode, (msgs, done) in got.items():
            assert want <= bodies_of(msgs), (mode, sorted(want - bodies_of(msgs)), done)
            assert {m["brokerName"] for m in msgs} == {"broker-b"}
    finally:
        master.start()
        wait_until(lambda: master.status()["ha"]["connectionCount"] == 1, 30, "slave reconnected")


# -- the chaos workload with this client (CLIENT=rust) ---------------------------------------------


def test_chaos_workload_runs_with_the_rust_client_and_its_history_says_so(cluster, tmp_path, rc):
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from rmqha.runs.history import FIELDS, read_history

    ns, nodes = cluster
    topic = unique_name("RustChaos")
    create_topic(ns, [nodes["broker-a"], nodes["broker-b"]], topic)  # as rmqha.chaos.run does before its workload
    repo = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(repo), RUST_CLIENT_BIN=str(rc.binary))
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "rmqha.chaos.workload",
            str(tmp_path),
            ns.addr,
            "--rate",
            "50",
            "--duration",
            "2",
            "--run-id",
            "rw",
            "--topic",
            topic,
            "--drain",
            "15",
            "--client",
            "rust",
        ],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    final = json.loads(p.stdout.strip().splitlines()[-1])
    assert final["attempts"] >= 90 and final["ok"] == final["attempts"] and final["errors"] == 0, final
    assert final["received_unique"] == final["stored_unique"] == final["ok"], final
    lines = read_history(str(tmp_path / "history" / "producer-rw.jsonl"))
    sends = [r for r in lines if r["op"] == "send"]
    invokes = [r for r in lines if r["op"] == "invoke"]
    cons = read_history(str(tmp_path / "history" / "consumer-rw.jsonl"))
    recvs = [r for r in cons if r["op"] == "receive"]
    assert [r["op"] for r in cons[:1]] == ["subscribe"] and cons[0]["group"] == "ChaosCGrw", cons[:1]
    assert len(sends) == len(invokes) == final["attempts"] and len(recvs) >= final["ok"]
    assert {r["group"] for r in sends} == {"ChaosPGrw"} and {r["group"] for r in recvs} == {"ChaosCGrw"}
    for rec in lines + cons:
        assert set(rec) == set(FIELDS) | {"seq"}, rec
        assert rec["library"] == "rocketmq-client-rust 1.0.0", rec
    assert {r["status"] for r in sends} == {"SEND_OK"}
    assert {r["send_id"] for r in recvs} == {r["send_id"] for r in sends}
    assert json.loads((tmp_path / "chaos" / "progress-rw.json").read_text())["phase"] == "done"
