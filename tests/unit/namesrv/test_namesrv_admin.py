"""The name server's admin requests (issue 24): write permission, topic lists, its config, and a reply
to every request code (4.9.8's DefaultRequestProcessor for the ones it serves, REQUEST_CODE_NOT_SUPPORTED
for the rest)."""

import json
import os

import pytest

from rmqha.broker.namesrv import guard
from rmqha.broker.namesrv.register_body import TopicConfig
from rmqha.broker.namesrv.server import NameServer
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand

from test_namesrv_hardening import SECRET
from test_namesrv_processors import M, Conn, make_ns, register, route

B = "10.0.0.3:10911"  # broker-b's master

# the codes 4.9.8's DefaultRequestProcessor.processRequest switches on (it returns null for any other)
SERVED_BY_49 = {
    RequestCode.PUT_KV_CONFIG,
    RequestCode.GET_KV_CONFIG,
    RequestCode.DELETE_KV_CONFIG,
    RequestCode.QUERY_DATA_VERSION,
    RequestCode.REGISTER_BROKER,
    RequestCode.UNREGISTER_BROKER,
    RequestCode.GET_ROUTEINFO_BY_TOPIC,
    RequestCode.GET_BROKER_CLUSTER_INFO,
    RequestCode.WIPE_WRITE_PERM_OF_BROKER,
    RequestCode.ADD_WRITE_PERM_OF_BROKER,
    RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
    RequestCode.DELETE_TOPIC_IN_NAMESRV,
    RequestCode.GET_KVLIST_BY_NAMESPACE,
    RequestCode.GET_TOPICS_BY_CLUSTER,
    RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS,
    RequestCode.GET_UNIT_TOPIC_LIST,
    RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST,
    RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST,
    RequestCode.UPDATE_NAMESRV_CONFIG,
    RequestCode.GET_NAMESRV_CONFIG,
}

TOPICS = (
    TopicConfig("TopicTest", 4, 4, 6),
    TopicConfig("Unit", 4, 4, 6, topic_sys_flag=1),
    TopicConfig("UnitSub", 4, 4, 6, topic_sys_flag=3),
    TopicConfig("SubOnly", 4, 4, 6, topic_sys_flag=2),
)


def call(c, code, fields=None, body=b""):
    return c.call(RemotingCommand.request(code, fields, body))


def perms(c, topic="TopicTest"):
    return {q["brokerName"]: q["perm"] for q in json.loads(route(c, topic).body)["queueDatas"]}


def two_groups():
    """broker-a (M, with TOPICS) and broker-b (B, TopicTest and its own topic) in DefaultCluster, and
    broker-c in OtherCluster."""
    ns, clock = make_ns()
    a, b = Conn(ns, 1), Conn(ns, 2)
    assert register(a, topics=TOPICS).code == 0
    body_b = (TopicConfig("TopicTest", 8, 8, 6), TopicConfig("OnlyB", 2, 2, 6))
    assert register_as(b, "broker-b", B, body_b).code == 0
    assert (
        register_as(
            Conn(ns, 3), "broker-c", "10.0.0.5:10911", (TopicConfig("OnlyC", 1, 1, 6),), cluster="OtherCluster"
        ).code
        == 0
    )
    return ns, clock, a, b


def register_as(conn, name, addr, topics, cluster="DefaultCluster", counter=1):
    from rmqha.broker.namesrv.register_body import RegisterBrokerBody, body_crc32

    body = RegisterBrokerBody({t.topic_name: t for t in topics}, {"counter": counter, "timestamp": 7}).encode()
    fields = {
        "brokerName": name,
        "brokerAddr": addr,
        "clusterName": cluster,
        "haServerAddr": "",
        "brokerId": 0,
        "compressed": False,
        "bodyCrc32": body_crc32(body),
    }
    return conn.call(RemotingCommand.request(RequestCode.REGISTER_BROKER, fields, body, language="JAVA", version=409))


def test_wipe_and_add_write_perm_count_topics_of_that_broker_only():
    ns, _, a, b = two_groups()
    wiped = call(a, RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
    assert (wiped.code, wiped.ext_fields) == (ResponseCode.SUCCESS, {"wipeTopicCount": "4"})
    assert perms(a) == {"broker-a": 4, "broker-b": 6}
    assert perms(a, "Unit") == {"broker-a": 4}
    # 4.9 counts every topic of the broker again, wiped already or not
    assert call(a, RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}).ext_fields == {
        "wipeTopicCount": "4"
    }
    added = call(a, RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
    assert (added.code, added.ext_fields) == (ResponseCode.SUCCESS, {"addTopicCount": "4"})
    assert perms(a) == {"broker-a": 6, "broker-b": 6}
    assert call(a, RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "nobody"}).ext_fields == {
        "wipeTopicCount": "0"
    }


def test_add_write_perm_sets_read_write_whatever_the_perm_was():
    ns, _ = make_ns()
    c = Conn(ns, 1)
    register(c, topics=(TopicConfig("ReadOnly", 4, 4, 4), TopicConfig("Inherit", 4, 4, 7)))
    assert call(c, RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}).ext_fields == {
        "addTopicCount": "2"
    }
    assert (perms(c, "ReadOnly"), perms(c, "Inherit")) == ({"broker-a": 6}, {"broker-a": 6})


def test_a_wiped_perm_survives_periodic_registration_until_the_topic_config_changes():
    ns, clock, a, _ = two_groups()
    call(a, RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
    clock.advance(30)
    assert register(a, topics=TOPICS).code == 0  # same data version: 4.9 leaves the routes alone
    assert perms(a) == {"broker-a": 4, "broker-b": 6}
    assert register(a, topics=TOPICS, counter=2).code == 0  # a new data version: the broker's perms again
    assert perms(a) == {"broker-a": 6, "broker-b": 6}


def test_a_wiped_perm_is_restored_when_the_broker_registers_anew():
    ns, clock, a, _ = two_groups()
    call(a, RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
    a.close()  # the channel goes: broker-a leaves the routes
    assert route(Conn(ns, 9), "Unit").code == ResponseCode.TOPIC_NOT_EXIST
    again = Conn(ns, 5)
    assert register(again, topics=TOPICS).code == 0  # same data version, but a first registration
    assert perms(again) == {"broker-a": 6, "broker-b": 6}


@pytest.mark.parametrize("code", [RequestCode.WIPE_WRITE_PERM_OF_BROKER, RequestCode.ADD_WRITE_PERM_OF_BROKER])
def test_write_perm_requests_without_broker_name_are_system_error(code):
    ns, _ = make_ns()
    r = call(Conn(ns, 1), code)
    assert r.code == ResponseCode.SYSTEM_ERROR and "brokerName" in r.remark


def topic_list(resp):
    assert resp.code == ResponseCode.SUCCESS
    body = json.loads(resp.body)
    return sorted(body["topicList"]), body.get("brokerAddr")


def test_topics_by_cluster():
    ns, _, a, _ = two_groups()
    assert topic_list(call(a, RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "DefaultCluster"})) == (
        ["OnlyB", "SubOnly", "TopicTest", "Unit", "UnitSub"],
        None,
    )
    assert topic_list(call(a, RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "OtherCluster"})) == (["OnlyC"], None)
    # an unknown cluster: 4.9 answers an empty list (its NullPointerException is caught)
    r = call(a, RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "Nope"})
    assert (r.code, json.loads(r.body)) == (ResponseCode.SUCCESS, {"topicList": []})
    missing = call(a, RequestCode.GET_TOPICS_BY_CLUSTER)
    assert missing.code == ResponseCode.SYSTEM_ERROR and "cluster" in missing.remark


def test_system_topic_list_is_cluster_and_broker_names_with_a_broker_address():
    ns, _, a, _ = two_groups()
    topics, addr = topic_list(call(a, RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS))
    assert topics == ["DefaultCluster", "OtherCluster", "broker-a", "broker-b", "broker-c"]
    assert addr == M
    empty, _ = make_ns()
    r = call(Conn(empty, 1), RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS)
    assert json.loads(r.body) == {"topicList": []}  # no brokerAddr key: fastjson leaves null out


def test_unit_topic_lists_follow_topic_sys_flag_bits():
    ns, _, a, _ = two_groups()
    assert topic_list(call(a, RequestCode.GET_UNIT_TOPIC_LIST))[0] == ["Unit", "UnitSub"]
    assert topic_list(call(a, RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST))[0] == ["SubOnly", "UnitSub"]
    assert topic_list(call(a, RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST))[0] == ["SubOnly"]


def config_props(c) -> dict:
    r = call(c, RequestCode.GET_NAMESRV_CONFIG)
    assert r.code == ResponseCode.SUCCESS
    text = r.body.decode()
    assert text.endswith("\n")
    return dict(line.split("=", 1) for line in text.splitlines())


def test_get_config_has_the_keys_of_namesrv_config_and_netty_server_config(monkeypatch):
    monkeypatch.delenv("ROCKETMQ_HOME", raising=False)
    ns, _ = make_ns()
    props = config_props(Conn(ns, 1))
    # the keys and their order in a 4.9.8 name server's body (mqadmin prints them in a map's order that
    # follows the body's where keys share a bucket: sorted, two pairs came out swapped)
    assert list(props) == [
        "serverSocketBacklog",
        "writeBufferHighWaterMark",
        "serverWorkerThreads",
        "serverSelectorThreads",
        "serverChannelMaxIdleTimeSeconds",
        "configBlackList",
        "writeBufferLowWaterMark",
        "serverSocketRcvBufSize",
        "serverAsyncSemaphoreValue",
        "kvConfigPath",
        "configStorePath",
        "clusterTest",
        "orderMessageEnable",
        "serverSocketSndBufSize",
        "serverOnewaySemaphoreValue",
        "serverCallbackExecutorThreads",
        "listenPort",
        "rocketmqHome",
        "productEnvName",
        "useEpollNativeSelector",
        "serverPooledByteBufAllocatorEnable",
    ]
    assert (
        props["listenPort"],
        props["orderMessageEnable"],
        props["productEnvName"],
        props["serverChannelMaxIdleTimeSeconds"],
        props["configBlackList"],
    ) == ("9876", "false", "center", "120", "configBlackList;configStorePath;kvConfigPath")
    assert props["kvConfigPath"].endswith("/namesrv/kvConfig.json")
    # 4.9.8's name server cannot start without ROCKETMQ_HOME, so its mqadmin getNamesrvConfig always has
    # rocketmqHome (ours left the key out): the working directory stands in, as for the broker
    assert props["rocketmqHome"] == os.getcwd()


def test_update_config_applies_live_keys_at_once():
    ns, clock = make_ns()
    c = Conn(ns, 1)
    body = b"# from mqadmin\norderMessageEnable=true\nproductEnvName = test\nserverChannelMaxIdleTimeSeconds=30\n"
    assert call(c, RequestCode.UPDATE_NAMESRV_CONFIG, body=body).code == ResponseCode.SUCCESS
    props = config_props(c)
    assert (props["orderMessageEnable"], props["productEnvName"], props["serverChannelMaxIdleTimeSeconds"]) == (
        "true",
        "test",
        "30",
    )
    assert ns.factory.idle_timeout == 30.0
    # a connection opened after the change closes after 30 idle seconds; the one before keeps 120
    late = Conn(ns, 2)
    clock.advance(31)
    assert late.transport.disconnecting and not c.transport.disconnecting
    assert call(c, RequestCode.UPDATE_NAMESRV_CONFIG).code == ResponseCode.SUCCESS  # no body: nothing to do


@pytest.mark.parametrize(
    "body, code, remark",
    [
        (b"kvConfigPath=/tmp/x\n", ResponseCode.NO_PERMISSION, "Can not update config in black list."),
        (
            b"configStorePath=/tmp/x\norderMessageEnable=true\n",
            ResponseCode.NO_PERMISSION,
            "Can not update config in black list.",
        ),
        (b"rocketmqHome=/x\n", ResponseCode.NO_PERMISSION, "Can not update config in black list."),
        (b"configBlackList=\n", ResponseCode.NO_PERMISSION, "Can not update config in black list."),
        (
            b"listenPort=9877\norderMessageEnable=true\n",
            ResponseCode.NO_PERMISSION,
            "listenPort: read only at start-up, not changed at run time; keys that change at run time: "
            "orderMessageEnable, productEnvName, serverChannelMaxIdleTimeSeconds",
        ),
        (
            b"noSuchKey=1\norderMessageEnable=true\n",
            ResponseCode.SYSTEM_ERROR,
            "unknown name server config key(s): noSuchKey (GET_NAMESRV_CONFIG lists the keys)",
        ),
        (b"orderMessageEnable=yes\n", ResponseCode.SYSTEM_ERROR, "orderMessageEnable='yes': expected true or false"),
        (
            b"serverChannelMaxIdleTimeSeconds=-5\n",
            ResponseCode.SYSTEM_ERROR,
            "serverChannelMaxIdleTimeSeconds='-5': expected a whole number of seconds",
        ),
        (b"\xff\xfe=1", ResponseCode.SYSTEM_ERROR, "the config body is not UTF-8 properties text"),
    ],
)
def test_update_config_is_refused_whole_with_what_is_wrong(body, code, remark):
    ns, _ = make_ns()
    c = Conn(ns, 1)
    before = config_props(c)
    r = call(c, RequestCode.UPDATE_NAMESRV_CONFIG, body=body)
    assert (r.code, r.remark) == (code, remark)
    assert config_props(c) == before  # nothing applied, the valid keys beside it included


def test_with_a_cluster_secret_perm_and_config_writes_must_be_signed_and_reads_stay_open():
    clock_ns, _ = make_ns()
    ns = NameServer(reactor=None, clock=clock_ns.clock, cluster_secret=SECRET)
    c = Conn(ns, 1)
    for code, fields, body in [
        (RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}, b""),
        (RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}, b""),
        (RequestCode.UPDATE_NAMESRV_CONFIG, {}, b"orderMessageEnable=true\n"),
    ]:
        r = call(c, code, fields, body)
        assert r.code == ResponseCode.NO_PERMISSION and "cluster secret" in r.remark
        signed = call(c, code, guard.sign_cluster(fields, body, SECRET), body)
        assert signed.code == ResponseCode.SUCCESS
    assert config_props(c)["orderMessageEnable"] == "true"
    for code, fields in [
        (RequestCode.GET_NAMESRV_CONFIG, {}),
        (RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "x"}),
        (RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS, {}),
        (RequestCode.GET_UNIT_TOPIC_LIST, {}),
    ]:
        assert call(c, code, fields).code == ResponseCode.SUCCESS
    assert ns.processors.refused_unsigned == 3


def test_every_request_code_is_answered_and_only_4_9_s_are_served():
    ns, _ = make_ns()
    c = Conn(ns, 1)
    register(c)
    served = set()
    for code in RequestCode:
        r = call(c, code, {})
        assert r is not None, f"request code {int(code)} got no answer"
        if r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
            assert r.remark == f" request type {int(code)} not supported"
        else:
            served.add(code)
        c = Conn(ns, 1) if c.transport.disconnecting else c
    assert served == SERVED_BY_49


def test_delete_topic_with_a_cluster_name_drops_only_that_cluster_s_routes():
    ns, _, a, _ = two_groups()
    assert (
        register_as(
            Conn(ns, 4),
            "broker-c",
            "10.0.0.5:10911",
            (TopicConfig("OnlyC", 1, 1, 6), TopicConfig("TopicTest", 2, 2, 6)),
            cluster="OtherCluster",
            counter=2,
        ).code
        == 0
    )
    assert call(a, RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "TopicTest", "clusterName": "OtherCluster"}).code == 0
    assert perms(a) == {"broker-a": 6, "broker-b": 6}
    assert (
        call(a, RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "TopicTest", "clusterName": "DefaultCluster"}).code == 0
    )
    assert route(a).code == ResponseCode.TOPIC_NOT_EXIST
    assert call(a, RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "Unit"}).code == 0  # no cluster: every route
    assert route(a, "Unit").code == ResponseCode.TOPIC_NOT_EXIST and route(a, "OnlyC").code == 0
