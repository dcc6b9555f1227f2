"""RocketMQ's admin plane through an admin client nobody here wrote: `rocketmq-client-rust`'s
DefaultMQAdminExt (feature admin-full) via `rmq-rust-client admin ...` (clients/rust/src/admin.rs),
against a local 2m-2s-sync cluster.

Every expectation is what a 4.9.8 broker and name server answer (AdminBrokerProcessor,
DefaultRequestProcessor, Broker2Client): cluster info with each broker's runtime info, broker and name
server config, topics and subscription groups created, listed and deleted, consume stats whose diff is
the sends not yet consumed, live connections and a consumer's running info, offsets reset by time and
cloned, a message viewed by its offsetMsgId, broker stats, write permission wiped and added, KV config.
Each test uses its own topics and groups; they share one cluster.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from rmqha.broker.remoting import json_body
from rmqha.broker.remoting.codes import RequestCode
from rmqha.cluster.standalone import BrokerProcess, NameServerProcess, rpc, sync_groups
from rmqha.cluster.wait import wait_until

from .processes import unique_name
from .rust_client import RustClient, queue_key

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

CLUSTER = "DefaultCluster"
QUEUES = 4


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, rc):
    # a periodic re-registration restores the perms wipe-write-perm took: keep it rare during the test
    extra = {"registerNameServerPeriod": "30000"}
    with sync_groups(tmp_path_factory.mktemp("rust-admin"), extra=extra) as (ns, nodes):
        yield ns, nodes


def route(ns: NameServerProcess, topic: str) -> dict | None:
    r = rpc(ns.addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    return json_body.loads(r.body) if r.code == 0 else None


def create_topic(rc: RustClient, ns: NameServerProcess, topic: str, **where) -> dict:
    """The topic through the admin API (on every master of the cluster unless broker_addr=...), routed."""
    where = where or {"cluster": CLUSTER}
    out = rc.admin(ns.addr, "topic", "create", topic=topic, read_queues=QUEUES, write_queues=QUEUES, **where)
    # each master registers the new topic with the name server on its own
    names = {addr_name(ns, a) for a in out["brokers"]}
    wait_until(
        lambda: {q["brokerName"] for q in (route(ns, topic) or {}).get("queueDatas", [])} == names,
        10,
        f"{topic} routed to {names}",
    )
    return out


def addr_name(ns: NameServerProcess, addr: str) -> str:
    return next(n for n, d in ns.cluster_info()["brokerAddrTable"].items() if addr in d["brokerAddrs"].values())


def sent_per_queue(results: list[dict]) -> dict[tuple[str, int], int]:
    """(brokerName, queueId) -> messages sent there, from send result lines."""
    assert all(r["status"] == "SEND_OK" for r in results), results
    out: dict[tuple[str, int], int] = {}
    for r in results:
        out[(r["brokerName"], r["queueId"])] = out.get((r["brokerName"], r["queueId"]), 0) + 1
    return out


def offsets_by_queue(table: dict) -> dict[tuple[str, int], dict]:
    return {queue_key(k): v for k, v in table.items()}


def committed(master: BrokerProcess, group: str, topic: str, queue_id: int) -> int | None:
    """The group's committed offset of one queue (QUERY_CONSUMER_OFFSET), None when it has none."""
    r = rpc(
        master.addr, RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": queue_id}
    )
    return int(r.ext_fields["offset"]) if r.code == 0 else None


def consume_stats(rc: RustClient, ns: NameServerProcess, group: str, topic: str) -> dict:
    return rc.admin(ns.addr, "consume-stats", group=group, topic=topic)


# -- cluster and broker ---------------------------------------------------------------------------------


def test_broker_config_get_and_update(rc, cluster):
    ns, nodes = cluster
    a = nodes["broker-a"]
    cfg = rc.admin(ns.addr, "broker-config", "get", broker_addr=a.addr)["config"]
    assert cfg["brokerName"] == "broker-a" and cfg["brokerClusterName"] == CLUSTER
    assert cfg["brokerRole"] == "SYNC_MASTER" and cfg["brokerId"] == "0"
    assert cfg["listenPort"] == str(a.port) and cfg["namesrvAddr"] == ns.addr
    before = cfg["defaultTopicQueueNums"]
    try:
        assert rc.admin(
            ns.addr, "broker-config", "update", broker_addr=a.addr, props={"defaultTopicQueueNums": "6"}
        ) == {"updated": True}
        after = rc.admin(ns.addr, "broker-config", "get", broker_addr=a.addr)["config"]
        assert after["defaultTopicQueueNums"] == "6"
        b = rc.admin(ns.addr, "broker-config", "get", broker_addr=nodes["broker-b"].addr)["config"]
        assert b["defaultTopicQueueNums"] == before  # one broker's, not the cluster's
    finally:
        rc.admin(ns.addr, "broker-config", "update", broker_addr=a.addr, props={"defaultTopicQueueNums": before})


def test_ha_status_of_a_slave_names_its_master(rc, cluster):
    """GET_BROKER_HA_STATUS is 5.x's (mqadmin haStatus); 4.9.8 has no such request. The body is 5.x's
    HARuntimeInfo as fastjson writes it: a null masterAddr (on a master) is left out, and 5.3's
    HAClientRuntimeInfo has no getter for its `isActivated` field. This crate's HAClientRuntimeInfo
    requires both "masterAddr" and "isActivated", so it cannot decode a Java 5.x broker's answer either:
    where it fails, the failure must be that decoding, and the body itself is checked raw."""
    ns, nodes = cluster
    slave, master = nodes["broker-a-s"], nodes["broker-a"]
    raw = rpc(slave.addr, RequestCode.GET_BROKER_HA_STATUS)
    assert raw.code == 0, (raw.code, raw.remark)
    body = json_body.loads(raw.body)
    assert body["master"] is False and body["haConnectionInfo"] == []
    assert body["haClientRuntimeInfo"]["masterAddr"] == f"127.0.0.1:{master.port + 1}"  # the master's HA port
    out = rc.admin(ns.addr, "ha-status", broker_addr=slave.addr, check=False)
    if "error" in out:
        assert out["causes"][-1].startswith("missing field `isActivated`"), out
    else:
        assert out["ha"]["master"] is False
        assert out["ha"]["haClientRuntimeInfo"]["masterAddr"] == f"127.0.0.1:{master.port + 1}"
    on_master = json_body.loads(rpc(master.addr, RequestCode.GET_BROKER_HA_STATUS).body)
    assert on_master["master"] is True and on_master["inSyncSlaveNums"] == 1
    assert [c["addr"].startswith("127.0.0.1:") for c in on_master["haConnectionInfo"]] == [True]


# -- topics -----------------------------------------------------------------------------------------------


def test_topic_created_by_admin_is_routed_counted_listed_and_deleted(rc, cluster):
    ns, nodes = cluster
    topic = unique_name("AdmTopic")
    out = create_topic(rc, ns, topic)
    assert sorted(out["brokers"]) == sorted([nodes["broker-a"].addr, nodes["broker-b"].addr])

    r = rc.admin(ns.addr, "topic", "route", topic=topic)["route"]
    assert sorted((q["brokerName"], q["readQueueNums"], q["writeQueueNums"], q["perm"]) for q in r["queueDatas"]) == [
        ("broker-a", QUEUES, QUEUES, 6),
        ("broker-b", QUEUES, QUEUES, 6),
    ]
    assert {b["brokerName"]: b["brokerAddrs"] for b in r["brokerDatas"]} == {
        b: {"0": nodes[b].addr, "1": nodes[b + "-s"].addr} for b in ("broker-a", "broker-b")
    }

    sent = sent_per_queue(rc.send(ns.addr, topic, count=6))
    stats = rc.admin(ns.addr, "topic", "stats", topic=topic)["stats"]
    table = offsets_by_queue(stats["offsetTable"])
    assert set(table) == {(b, q) for b in ("broker-a", "broker-b") for q in range(QUEUES)}
    for mq, off in table.items():
        assert (off["minOffset"], off["maxOffset"]) == (0, sent.get(mq, 0)), (mq, off)
        assert (off["lastUpdateTimestamp"] > 0) == (mq in sent), (mq, off)

    assert topic in rc.admin(ns.addr, "topic", "list")["topicList"]["topicList"]
    assert topic in rc.admin(ns.addr, "topic", "list", cluster=CLUSTER)["topicList"]["topicList"]
    assert rc.admin(ns.addr, "topic-cluster-list", topic=topic) == {"clusters": [CLUSTER]}

    assert rc.admin(ns.addr, "topic", "delete", topic=topic, cluster=CLUSTER) == {"deleted": True}
    assert route(ns, topic) is None
    assert topic not in rc.admin(ns.addr, "topic", "list")["topicList"]["topicList"]
    for b in ("broker-a", "broker-b"):
        r = rpc(nodes[b].addr, RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": 0})
        assert r.code != 0 or int(r.ext_fields["offset"]) == 0, f"{b} still has {topic}"


def test_view_broker_stats_data_of_a_topic(rc, cluster):
    ns, nodes = cluster
    a = nodes["broker-a"]
    topic = unique_name("AdmStats")
    create_topic(rc, ns, topic, broker_addr=a.addr)
    none = rc.admin(
        ns.addr, "view-broker-stats-data", broker_addr=a.addr, stats_name="TOPIC_PUT_NUMS", stats_key=topic, check=False
    )
    assert none["errorCode"] == 1 and none["errorMessage"] == f"The stats <TOPIC_PUT_NUMS> <{topic}> not exist"
    sent_per_queue(rc.send(ns.addr, topic, count=3))
    data = rc.admin(
        ns.addr, "view-broker-stats-data", broker_addr=a.addr, stats_name="TOPIC_PUT_NUMS", stats_key=topic
    )["statsData"]
    for span in ("statsMinute", "statsHour", "statsDay"):
        assert {"sum", "tps", "avgpt"} <= set(data[span]) and data[span]["sum"] >= 0, data


def test_write_perm_wiped_and_added_at_the_name_server(rc, cluster):
    ns, nodes = cluster
    topic = unique_name("AdmPerm")
    create_topic(rc, ns, topic)
    perms = lambda: {q["brokerName"]: q["perm"] for q in route(ns, topic)["queueDatas"]}  # noqa: E731
    try:
        wiped = rc.admin(ns.addr, "wipe-write-perm", broker_name="broker-b")["topicCount"]
        assert perms() == {"broker-a": 6, "broker-b": 4}  # PERM_READ|PERM_WRITE, PERM_READ
        added = rc.admin(ns.addr, "add-write-perm", broker_name="broker-b")["topicCount"]
        assert perms() == {"broker-a": 6, "broker-b": 6}
        # every topic broker-b serves, this one among them
        assert wiped == added and wiped >= 1
    finally:
        rc.admin(ns.addr, "add-write-perm", broker_name="broker-b", check=False)


# -- subscription groups and consumers --------------------------------------------------------------------


def test_subscription_group_created_listed_and_deleted(rc, cluster):
    ns, nodes = cluster
    group = unique_name("AdmGroup")
    out = rc.admin(
        ns.addr,
        "sub-group",
        "create",
        cluster=CLUSTER,
        group=group,
        config={"retryMaxTimes": 5, "consumeBroadcastEnable": False},
    )
    assert sorted(out["brokers"]) == sorted([nodes["broker-a"].addr, nodes["broker-b"].addr])
    for b in ("broker-a", "broker-b"):
        table = rc.admin(ns.addr, "sub-group", "list", broker_addr=nodes[b].addr)["groups"]["subscriptionGroupTable"]
        cfg = table[group]
        assert (cfg["groupName"], cfg["retryMaxTimes"], cfg["consumeBroadcastEnable"]) == (group, 5, False)
        assert cfg["consumeEnable"] is True and cfg["retryQueueNums"] == 1
    rc.admin(ns.addr, "sub-group", "delete", cluster=CLUSTER, group=group)
    for b in ("broker-a", "broker-b"):
        table = rc.admin(ns.addr, "sub-group", "list", broker_addr=nodes[b].addr)["groups"]["subscriptionGroupTable"]
        assert group not in table


def test_consume_stats_connections_running_info_reset_and_clone(rc, cluster):
    ns, nodes = cluster
    topic, group, clone = unique_name("AdmCs"), unique_name("AdmCsG"), unique_name("AdmCsClone")
    create_topic(rc, ns, topic)
    sent = sent_per_queue(rc.send(ns.addr, topic, count=10))
    got, done = rc.consume(ns.addr, topic, group, expect=10, timeout_s=20)
    assert done["received"] == 10

    stats = consume_stats(rc, ns, group, topic)
    table = offsets_by_queue(stats["stats"]["offsetTable"])
    assert set(table) == {(b, q) for b in ("broker-a", "broker-b") for q in range(QUEUES)}
    assert {mq: (o["brokerOffset"], o["consumerOffset"]) for mq, o in table.items()} == {
        mq: (sent.get(mq, 0), sent.get(mq, 0)) for mq in table
    }
    assert stats["totalDiff"] == 0

    more = sent_per_queue(rc.send(ns.addr, topic, count=3, prefix="more"))
    assert consume_stats(rc, ns, group, topic)["totalDiff"] == 3

    # the broker-wide view (mqadmin brokerConsumeStats): per group, one ConsumeStats per topic it has
    # offsets for on this broker (here the topic and the group's %RETRY% topic)
    a = nodes["broker-a"]
    bcs = rc.admin(ns.addr, "broker-consume-stats", broker_addr=a.addr)["stats"]
    assert bcs["brokerAddr"] == a.addr
    [entries] = [lst for m in bcs["consumeStatsList"] for g, lst in m.items() if g == group]
    by_topic = {json_body.loads(next(iter(s["offsetTable"])))["topic"]: s for s in entries}
    assert set(by_topic) <= {topic, f"%RETRY%{group}"} and topic in by_topic, list(by_topic)
    a_queues = offsets_by_queue(by_topic[topic]["offsetTable"])
    assert set(a_queues) == {("broker-a", q) for q in range(QUEUES)}
    a_diff = sum(more.get(mq, 0) for mq in a_queues)
    assert sum(o["brokerOffset"] - o["consumerOffset"] for o in a_queues.values()) == a_diff
    assert bcs["totalDiff"] >= a_diff

    # a live consumer: its connection, its running info (the broker asks the client), then it drains
    with ThreadPoolExecutor(1) as pool:
        live = pool.submit(rc.consume, ns.addr, topic, group, expect=3, timeout_s=20, linger_ms=6000)

        def connected():
            out = rc.admin(ns.addr, "consumer-connection", group=group, check=False)
            return out if out.get("connection", {}).get("connectionSet") else None

        conn = wait_until(connected, 15, "consumer connection listed")["connection"]
        assert len(conn["connectionSet"]) == 1
        client_id = conn["connectionSet"][0]["clientId"]
        assert conn["consumeType"] == "CONSUME_PASSIVELY" and conn["messageModel"] == "CLUSTERING"
        assert conn["subscriptionTable"][topic]["subString"] == "*"
        info = rc.admin(ns.addr, "consumer-running-info", group=group, client_id=client_id)["info"]
        assert topic in {s["topic"] for s in info["subscriptionSet"]}
        _, live_done = live.result(timeout=40)
    assert live_done["received"] == 3
    wait_until(lambda: consume_stats(rc, ns, group, topic)["totalDiff"] == 0, 10, "drained")

    # clone the (offline) group's offsets, then reset the group to the start (mqadmin resetOffsetByTime)
    assert rc.admin(ns.addr, "clone-group-offset", src=group, dest=clone, topic=topic) == {"cloned": True}
    # (the clone has no %RETRY% topic, which consume-stats routes by: ask the masters for its offsets)
    total = {mq: sent.get(mq, 0) + more.get(mq, 0) for mq in table}
    assert {mq: committed(nodes[mq[0]], clone, topic, mq[1]) for mq in table} == total

    reset = rc.admin(ns.addr, "reset-offset-by-time", group=group, topic=topic, timestamp=0, force=True)
    assert reset.get("notOnline", {}).get("errorCode", 206) == 206, reset
    after = consume_stats(rc, ns, group, topic)
    assert {mq: o["consumerOffset"] for mq, o in offsets_by_queue(after["stats"]["offsetTable"]).items()} == {
        mq: 0 for mq in table
    }
    assert after["totalDiff"] == 13


def test_producer_connection_of_a_live_producer(rc, cluster):
    ns, nodes = cluster
    topic, pgroup = unique_name("AdmPc"), unique_name("AdmPG")
    create_topic(rc, ns, topic)
    with ThreadPoolExecutor(1) as pool:
        live = pool.submit(rc.tx_send, ns.addr, topic, tx="commit", count=1, group=pgroup, linger_ms=6000)

        def listed():
            out = rc.admin(ns.addr, "producer-connection", group=pgroup, topic=topic, check=False)
            return out if out.get("connection", {}).get("connectionSet") else None

        conn = wait_until(listed, 15, "producer connection listed")["connection"]
        assert len(conn["connectionSet"]) == 1
        c = conn["connectionSet"][0]
        assert c["clientId"] and c["clientAddr"].startswith("127.0.0.1:") and c["version"] > 0
        results, _, _ = live.result(timeout=40)
    assert [r["status"] for r in results] == ["SEND_OK"]
    # the producer unregistered on shutdown: its group is gone with its last channel
    gone = wait_until(
        lambda: (lambda o: o if "error" in o else None)(
            rc.admin(ns.addr, "producer-connection", group=pgroup, topic=topic, check=False)
        ),
        10,
        "producer group gone",
    )
    assert gone["errorCode"] == 1, gone  # SYSTEM_ERROR; the crate keeps no remark for it, so ask directly:
    raw = rpc(nodes["broker-a"].addr, RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": pgroup})
    assert (raw.code, raw.remark) == (1, f"the producer group[{pgroup}] not exist")


def test_query_msg_by_offset_msg_id(rc, cluster):
    ns, nodes = cluster
    topic = unique_name("AdmQm")
    create_topic(rc, ns, topic)
    [r] = rc.send(ns.addr, topic, messages=[{"body": "admin-view-me", "tags": "TG", "keys": "k1"}])
    m = rc.admin(ns.addr, "query-msg", topic=topic, id=r["offsetMsgId"])["message"]
    assert (m["body"], m["topic"], m["tags"], m["keys"]) == ("admin-view-me", topic, "TG", "k1")
    assert (m["brokerName"] or r["brokerName"], m["queueId"], m["queueOffset"]) == (
        r["brokerName"],
        r["queueId"],
        r["queueOffset"],
    )
    assert m["msgId"] == r["msgId"] and m["offsetMsgId"] == r["offsetMsgId"]


# -- name server ------------------------------------------------------------------------------------------


def test_namesrv_config_get_update_and_black_list(rc, cluster):
    ns, _ = cluster
    cfg = rc.admin(ns.addr, "namesrv-config", "get")["config"]
    assert set(cfg) == {ns.addr} and cfg[ns.addr]["listenPort"] == str(ns.port)
    before = cfg[ns.addr]["orderMessageEnable"]
    try:
        rc.admin(ns.addr, "namesrv-config", "update", props={"orderMessageEnable": "true"})
        assert rc.admin(ns.addr, "namesrv-config", "get")["config"][ns.addr]["orderMessageEnable"] == "true"
    finally:
        rc.admin(ns.addr, "namesrv-config", "update", props={"orderMessageEnable": before})
    denied = rc.admin(ns.addr, "namesrv-config", "update", props={"kvConfigPath": "/tmp/x"}, check=False)
    assert denied["errorCode"] == 16 and "Can not update config in black list." in str(denied), denied


def test_kv_config_put_get_list_delete(rc, cluster):
    ns, _ = cluster
    space, key = unique_name("AdmNs"), unique_name("k")
    assert rc.admin(ns.addr, "kv", "put", namespace=space, key=key, value="v1") == {"put": True}
    assert rc.admin(ns.addr, "kv", "get", namespace=space, key=key) == {"value": "v1"}
    assert rc.admin(ns.addr, "kv", "list", namespace=space) == {"table": {key: "v1"}}
    assert rc.admin(ns.addr, "kv", "delete", namespace=space, key=key) == {"deleted": True}
    # the namespace is gone with its last key: QUERY_NOT_FOUND (the crate's get_kv_config gives "" for
    # a missing key instead of the 22 the name server answers, so ask for the namespace)
    gone = rc.admin(ns.addr, "kv", "list", namespace=space, check=False)
    assert (gone["errorCode"], gone["errorMessage"]) == (22, f"No config item, Namespace: {space}"), gone
    # mqadmin updateOrderConf -m set: the topic's order conf under the name server's ORDER_TOPIC_CONFIG
    topic = unique_name("AdmOrder")
    try:
        rc.admin(ns.addr, "order-conf", topic=topic, value="broker-a:4;broker-b:4", cluster_wide=True)
        assert rc.admin(ns.addr, "kv", "get", namespace="ORDER_TOPIC_CONFIG", key=topic) == {
            "value": "broker-a:4;broker-b:4"
        }
    finally:
        rc.admin(ns.addr, "kv", "delete", namespace="ORDER_TOPIC_CONFIG", key=topic, check=False)


# -- last, so that the brokers have run long enough to report a put TPS -----------------------------


def test_cluster_list_shows_both_brokers_with_slaves_and_runtime_info(rc, cluster):
    ns, nodes = cluster

    # 4.9 reports putTps/getTotalTps as "<10 s> <1 min> <10 min>", each blank until the store has sampled
    # that long (StoreStatsService.getPutTps): mqadmin clusterList then shows 0. Wait for the first.
    def sampled():
        out = rc.admin(ns.addr, "cluster-list")
        return out if all(len(rt.get("putTps", "").split()) >= 1 for rt in out["runtime"].values()) else None

    out = wait_until(sampled, 20, "every broker's putTps sampled")
    info = out["clusterInfo"]
    assert sorted(info["clusterAddrTable"][CLUSTER]) == ["broker-a", "broker-b"]
    for b in ("broker-a", "broker-b"):
        data = info["brokerAddrTable"][b]
        assert data["cluster"] == CLUSTER and data["brokerName"] == b
        assert data["brokerAddrs"] == {"0": nodes[b].addr, "1": nodes[b + "-s"].addr}
    assert set(out["runtime"]) == {n.addr for n in nodes.values()}
    for key, node in nodes.items():
        rt = out["runtime"][node.addr]
        assert "error" not in rt, (key, rt)
        # mqadmin clusterList reads putTps/getTotalTps as "<10s> <1min> <10min>" and takes the first
        tps = rt["putTps"].split(" ")
        assert len(tps) == 3 and float(tps[0]) >= 0 and all(x == "" or float(x) >= 0 for x in tps), rt["putTps"]
        assert float(rt["getTotalTps"].split()[0]) >= 0
        assert rt["brokerVersionDesc"] == "V4_9_8" and rt["brokerVersion"] == "409"
        assert int(rt["msgPutTotalTodayNow"]) >= 0 and int(rt["msgGetTotalTodayNow"]) >= 0
        assert rt["commitLogDirCapacity"].startswith("Total : ")
