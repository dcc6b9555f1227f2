"""Issue 24 against real processes: a broker answers on its VIP channel (listenPort - 2, where a 4.9
slave fetches its master's topic config), and the name server answers each admin request it gained
(write perms, topic lists, its config) as 4.9.8 does."""

from __future__ import annotations

import json

import pytest

from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.cluster.standalone import rpc
from rmqha.cluster.wait import wait_until

from .processes import broker_on_namesrv

pytestmark = pytest.mark.integration

TOPIC = "VipTopic"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("admin")
    with broker_on_namesrv(tmp, "broker-a") as (ns, broker):
        created = rpc(
            broker.addr,
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {
                "topic": TOPIC,
                "defaultTopic": "TBW102",
                "readQueueNums": 4,
                "writeQueueNums": 4,
                "perm": 6,
                "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": 0,
                "order": "false",
            },
        )
        assert created.code == ResponseCode.SUCCESS, created.remark
        wait_until(
            lambda: rpc(ns.addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}).code == 0, 20, f"{TOPIC} routed"
        )
        yield ns, broker


def test_the_broker_serves_the_same_requests_on_listen_port_minus_2(cluster):
    _, broker = cluster
    vip = f"127.0.0.1:{broker.port - 2}"
    assert broker.status()["fastListenPort"] == broker.port - 2
    main, fast = (rpc(a, RequestCode.GET_ALL_TOPIC_CONFIG) for a in (broker.addr, vip))
    assert (main.code, fast.code) == (ResponseCode.SUCCESS, ResponseCode.SUCCESS)
    assert TOPIC in json.loads(fast.body)["topicConfigTable"]
    assert json.loads(fast.body) == json.loads(main.body)
    assert rpc(vip, 9999).code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


def perm(ns_addr: str) -> int:
    route = json.loads(rpc(ns_addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}).body)
    return route["queueDatas"][0]["perm"]


def test_the_name_server_answers_each_admin_request(cluster):
    ns, broker = cluster
    wiped = rpc(ns.addr, RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
    assert wiped.code == ResponseCode.SUCCESS and int(wiped.ext_fields["wipeTopicCount"]) >= 2
    assert perm(ns.addr) == 4
    added = rpc(ns.addr, RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
    assert added.ext_fields == {"addTopicCount": wiped.ext_fields["wipeTopicCount"]}
    assert perm(ns.addr) == 6

    by_cluster = json.loads(rpc(ns.addr, RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "DefaultCluster"}).body)
    assert TOPIC in by_cluster["topicList"]
    system = json.loads(rpc(ns.addr, RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS).body)
    assert system == {"topicList": ["DefaultCluster", "broker-a"], "brokerAddr": broker.addr}
    for code in (
        RequestCode.GET_UNIT_TOPIC_LIST,
        RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST,
        RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST,
    ):
        assert json.loads(rpc(ns.addr, code).body) == {"topicList": []}

    def config() -> dict:
        text = rpc(ns.addr, RequestCode.GET_NAMESRV_CONFIG).body.decode()
        return dict(line.split("=", 1) for line in text.splitlines())

    assert config()["listenPort"] == str(ns.port)
    assert rpc(ns.addr, RequestCode.UPDATE_NAMESRV_CONFIG, body=b"productEnvName=vip-test\n").code == 0
    assert config()["productEnvName"] == "vip-test"
    refused = rpc(ns.addr, RequestCode.UPDATE_NAMESRV_CONFIG, body=b"kvConfigPath=/tmp/x\n")
    assert (refused.code, refused.remark) == (ResponseCode.NO_PERMISSION, "Can not update config in black list.")
