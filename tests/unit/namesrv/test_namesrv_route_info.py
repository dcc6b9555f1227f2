from rmqha.broker.namesrv.register_body import RegisterBrokerBody, TopicConfig
from rmqha.broker.namesrv.route_info import RouteInfoManager

M, S = "10.0.0.1:10911", "10.0.0.2:10911"
M_HA, S_HA = "10.0.0.1:10912", "10.0.0.2:10912"


def body(*topics, counter=1, timestamp=100):
    return RegisterBrokerBody({t.topic_name: t for t in topics}, {"counter": counter, "timestamp": timestamp})


def master(r, now=0, ch="ch-m", b=None, name="broker-a"):
    return r.register_broker("c1", M, name, 0, M_HA, b or body(TopicConfig("T", 4, 4, 6)), ch, now)


def slave(r, now=0, ch="ch-s", b=None, name="broker-a"):
    return r.register_broker("c1", S, name, 1, S_HA, b or body(TopicConfig("T", 4, 4, 6)), ch, now)


def test_master_registration_builds_route():
    r = RouteInfoManager()
    res = master(r)
    assert res.master_addr is None and res.ha_server_addr is None
    assert r.pickup_topic_route("T") == {
        "brokerDatas": [
            {"brokerAddrs": {"0": M}, "brokerName": "broker-a", "cluster": "c1", "enableActingMaster": False}
        ],
        "filterServerTable": {},
        "queueDatas": [
            {"brokerName": "broker-a", "perm": 6, "readQueueNums": 4, "topicSysFlag": 0, "writeQueueNums": 4}
        ],
    }
    assert r.pickup_topic_route("nope") is None


def test_slave_learns_master_and_does_not_feed_queue_data():
    r = RouteInfoManager()
    res = slave(r, b=body(TopicConfig("OnlySlave", 8, 8, 6)))
    assert res.master_addr is None  # master not known yet
    assert r.pickup_topic_route("OnlySlave") is None
    master(r)
    res = slave(r)
    assert (res.master_addr, res.ha_server_addr) == (M, M_HA)
    route = r.pickup_topic_route("T")
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": M, "1": S}
    assert r.all_topics() == ["T"]


def test_queue_data_updates_only_when_data_version_changes():
    r = RouteInfoManager()
    master(r)
    master(r, b=body(TopicConfig("T", 8, 8, 6)))  # same data version: ignored, like Java
    assert r.pickup_topic_route("T")["queueDatas"][0]["writeQueueNums"] == 4
    master(r, b=body(TopicConfig("T", 8, 8, 6), counter=2))
    assert r.pickup_topic_route("T")["queueDatas"][0]["writeQueueNums"] == 8


def test_master_gone_keeps_route_through_slave():
    r = RouteInfoManager()
    master(r)
    slave(r)
    r.on_channel_closed("ch-m")
    route = r.pickup_topic_route("T")
    assert route["brokerDatas"][0]["brokerAddrs"] == {"1": S}
    assert slave(r).master_addr is None
    r.on_channel_closed("ch-s")
    assert r.pickup_topic_route("T") is None
    assert r.cluster_info() == {"brokerAddrTable": {}, "clusterAddrTable": {}}
    assert r.all_topics() == []


def test_unknown_channel_close_is_ignored():
    r = RouteInfoManager()
    master(r)
    r.on_channel_closed("someone-else")
    assert r.pickup_topic_route("T") is not None


def test_reregistration_over_new_channel_survives_old_channel_close():
    r = RouteInfoManager()
    master(r, ch="old")
    master(r, ch="new", now=1000)
    r.on_channel_closed("old")
    assert r.pickup_topic_route("T") is not None


def test_expiry_after_120s():
    r = RouteInfoManager()
    master(r, now=0)
    slave(r, now=60_000)
    assert r.scan_not_active_brokers(120_000) == []
    assert r.scan_not_active_brokers(120_001) == ["ch-m"]
    assert r.pickup_topic_route("T")["brokerDatas"][0]["brokerAddrs"] == {"1": S}
    slave(r, now=170_000)  # re-registration refreshes
    assert r.scan_not_active_brokers(290_000) == []
    assert r.scan_not_active_brokers(290_001) == ["ch-s"]
    assert r.pickup_topic_route("T") is None


def test_unregister():
    r = RouteInfoManager()
    master(r)
    slave(r)
    r.unregister_broker("c1", S, "broker-a", 1)
    assert r.pickup_topic_route("T")["brokerDatas"][0]["brokerAddrs"] == {"0": M}
    r.unregister_broker("c1", M, "broker-a", 0)
    assert r.pickup_topic_route("T") is None and r.broker_live_table == {}


def test_slave_promoted_to_master_at_same_address():
    r = RouteInfoManager()
    slave(r)
    r.register_broker("c1", S, "broker-a", 0, S_HA, body(TopicConfig("T", 4, 4, 6)), "ch-s", 10)
    assert r.pickup_topic_route("T")["brokerDatas"][0]["brokerAddrs"] == {"0": S}


def test_two_groups_and_cluster_info():
    r = RouteInfoManager()
    master(r)
    r.register_broker(
        "c1",
        "10.0.0.3:10911",
        "broker-b",
        0,
        "10.0.0.3:10912",
        body(TopicConfig("T", 2, 2, 6), TopicConfig("U", 1, 1, 6)),
        "ch-b",
        0,
    )
    route = r.pickup_topic_route("T")
    assert [q["brokerName"] for q in route["queueDatas"]] == ["broker-a", "broker-b"]
    assert [b["brokerName"] for b in route["brokerDatas"]] == ["broker-a", "broker-b"]
    assert r.cluster_info()["clusterAddrTable"] == {"c1": ["broker-a", "broker-b"]}
    assert r.all_topics() == ["T", "U"]


def test_filter_servers_in_route():
    r = RouteInfoManager()
    b = body(TopicConfig("T", 4, 4, 6))
    b.filter_servers = ["10.9.9.9:1"]
    master(r, b=b)
    assert r.pickup_topic_route("T")["filterServerTable"] == {M: ["10.9.9.9:1"]}
