"""The name server's request handling end to end over in-memory transports and a fake clock."""

import json
import logging
import struct

from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from rmqha.broker.namesrv.register_body import RegisterBrokerBody, TopicConfig, body_crc32
from rmqha.broker.namesrv.server import NameServer
from rmqha.broker.remoting.codec import FrameDecoder, encode
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand

M, S = "10.0.0.1:10911", "10.0.0.2:10911"

CPP_ROUTE_HEADER = (
    b'{"code":105,"extFields":{"AccessKey":"","OnsChannel":"","Signature":"","topic":"TopicTest"},'
    b'"flag":0,"language":"CPP","opaque":1,"remark":"","version":333}\n'
)


class Conn:
    def __init__(self, ns: NameServer, peer_port: int):
        self.proto = ns.factory.buildProtocol(None)
        self.transport = StringTransport(peerAddress=IPv4Address("TCP", "10.0.0.99", peer_port))
        self.proto.makeConnection(self.transport)
        self.decoder = FrameDecoder()

    def call(self, cmd: RemotingCommand) -> RemotingCommand | None:
        self.proto.dataReceived(encode(cmd))
        return self.replies()

    def raw(self, data: bytes) -> RemotingCommand | None:
        self.proto.dataReceived(data)
        return self.replies()

    def replies(self):
        out = list(self.decoder.feed(self.transport.value()))
        self.transport.clear()
        assert len(out) <= 1
        return out[0] if out else None

    def close(self):
        self.proto.connectionLost(None)


def make_ns():
    clock = Clock()
    clock.advance(1_700_000_000)
    ns = NameServer(reactor=None, clock=clock)
    ns.start_scanning()
    return ns, clock


TOPIC_TEST = TopicConfig("TopicTest", 4, 4, 6)


def register(conn, addr=M, broker_id=0, topics=(TOPIC_TEST,), compressed=False, counter=1, crc=True, version=409):
    body = RegisterBrokerBody({t.topic_name: t for t in topics}, {"counter": counter, "timestamp": 7})
    data = body.encode(compressed)
    fields = {
        "brokerName": "broker-a",
        "brokerAddr": addr,
        "clusterName": "DefaultCluster",
        "haServerAddr": addr.replace("10911", "10912"),
        "brokerId": broker_id,
        "compressed": compressed,
        "bodyCrc32": body_crc32(data) if crc else 0,
    }
    return conn.call(
        RemotingCommand.request(RequestCode.REGISTER_BROKER, fields, data, language="JAVA", version=version)
    )


def route(conn, topic="TopicTest"):
    return conn.call(RemotingCommand.request(105, {"topic": topic}, language="CPP", version=333))


def test_register_then_cpp_route_request():
    ns, _ = make_ns()
    broker = Conn(ns, 1)
    resp = register(broker)
    assert resp.code == ResponseCode.SUCCESS and resp.ext_fields == {} and resp.body == b""
    client = Conn(ns, 2)
    header = CPP_ROUTE_HEADER
    resp = client.raw(struct.pack(">II", 4 + len(header), len(header)) + header)
    assert resp.code == 0 and resp.opaque == 1 and resp.is_response
    raw = encode(resp)
    assert raw[4] == 0  # JSON type byte: the C++ client does not mask it
    data = json.loads(resp.body)  # standard JSON, quoted keys
    assert data["brokerDatas"] == [
        {"brokerAddrs": {"0": M}, "brokerName": "broker-a", "cluster": "DefaultCluster", "enableActingMaster": False}
    ]
    assert data["queueDatas"][0]["writeQueueNums"] == 4 and "topicSysFlag" in data["queueDatas"][0]
    assert "orderTopicConf" not in data


def test_compressed_registration_and_slave_reply_fields():
    ns, _ = make_ns()
    master, slave = Conn(ns, 1), Conn(ns, 2)
    assert register(master, compressed=True).code == 0
    resp = register(slave, addr=S, broker_id=1)
    assert resp.ext_fields == {"haServerAddr": "10.0.0.1:10912", "masterAddr": M}
    assert b'"masterAddr":"10.0.0.1:10911"' in encode(resp)  # strings, as C++ needs
    assert json.loads(route(Conn(ns, 3)).body)["brokerDatas"][0]["brokerAddrs"] == {"0": M, "1": S}


def test_crc_mismatch_is_rejected():
    ns, _ = make_ns()
    c = Conn(ns, 1)
    body = RegisterBrokerBody({"T": TopicConfig("T")}).encode()
    resp = c.call(
        RemotingCommand.request(
            103,
            {
                "brokerName": "b",
                "brokerAddr": M,
                "clusterName": "c",
                "haServerAddr": "x:1",
                "brokerId": 0,
                "bodyCrc32": (body_crc32(body) + 1) & 0x7FFFFFFF,
            },
            body,
        )
    )
    assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR, "crc32 not match")
    assert ns.routes.pickup_topic_route("T") is None


def test_old_version_broker_sends_bare_wrapper():
    ns, _ = make_ns()
    wrapper = RegisterBrokerBody({"T": TopicConfig("T", 2, 2, 6)}).to_json()["topicConfigSerializeWrapper"]
    resp = Conn(ns, 1).call(
        RemotingCommand.request(
            103,
            {"brokerName": "b", "brokerAddr": M, "clusterName": "c", "haServerAddr": "x:1", "brokerId": 0},
            json.dumps(wrapper).encode(),
            version=30,
        )
    )
    assert resp.code == 0 and ns.routes.pickup_topic_route("T") is not None


def test_unknown_topic_is_topic_not_exist_without_body():
    ns, _ = make_ns()
    resp = route(Conn(ns, 1), "Nope")
    assert resp.code == ResponseCode.TOPIC_NOT_EXIST and resp.body == b"" and "Nope" in resp.remark


def test_cluster_info_and_topic_list():
    ns, _ = make_ns()
    c = Conn(ns, 1)
    register(c, topics=(TopicConfig("A"), TopicConfig("B")))
    info = json.loads(c.call(RemotingCommand.request(106)).body)
    assert info["clusterAddrTable"] == {"DefaultCluster": ["broker-a"]}
    assert info["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {"0": M}
    topics = json.loads(c.call(RemotingCommand.request(206)).body)
    assert topics == {"topicList": ["A", "B"]}


def test_unregister():
    ns, _ = make_ns()
    c = Conn(ns, 1)
    register(c)
    resp = c.call(
        RemotingCommand.request(
            104, {"brokerName": "broker-a", "brokerAddr": M, "clusterName": "DefaultCluster", "brokerId": 0}
        )
    )
    assert resp.code == 0
    assert route(c).code == ResponseCode.TOPIC_NOT_EXIST


def test_channel_close_drops_broker():
    ns, _ = make_ns()
    broker, client = Conn(ns, 1), Conn(ns, 2)
    register(broker)
    client.close()  # a client going away changes nothing
    assert route(Conn(ns, 3)).code == 0
    broker.close()
    assert route(Conn(ns, 4)).code == ResponseCode.TOPIC_NOT_EXIST


def test_expiry_scan_on_the_clock_closes_silent_broker():
    ns, clock = make_ns()
    ns.factory.idle_timeout = 0  # the idle reaper (below) would close it at 120 s: test the scan alone
    broker = Conn(ns, 1)
    register(broker)
    for _ in range(12):  # 120 s: still alive (expiry needs strictly more than 120 s)
        clock.advance(10)
    assert route(Conn(ns, 2)).code == 0 and not broker.transport.disconnecting
    clock.advance(10)
    assert broker.transport.disconnecting
    assert route(Conn(ns, 3)).code == ResponseCode.TOPIC_NOT_EXIST


def test_idle_connections_close_after_120_s_as_in_java():
    ns, clock = make_ns()
    silent, busy = Conn(ns, 1), Conn(ns, 2)
    for _ in range(4):
        clock.advance(40)
        route(busy)
    assert silent.transport.disconnecting and not busy.transport.disconnecting


def test_periodic_registration_keeps_broker_alive():
    ns, clock = make_ns()
    broker = Conn(ns, 1)
    for _ in range(10):
        register(broker)
        clock.advance(30)
    assert route(Conn(ns, 2)).code == 0


def test_query_data_version():
    ns, _ = make_ns()
    c = Conn(ns, 1)
    register(c, counter=5)
    same = c.call(RemotingCommand.request(322, {"brokerAddr": M}, b'{"counter":5,"timestamp":7}'))
    assert same.ext_fields == {"changed": "false"} and json.loads(same.body) == {"counter": 5, "timestamp": 7}
    other = c.call(RemotingCommand.request(322, {"brokerAddr": M}, b'{"counter":6,"timestamp":7}'))
    assert other.ext_fields == {"changed": "true"}


def test_kv_config_and_order_topic_conf():
    ns, _ = make_ns()
    c = Conn(ns, 1)
    kv = {"namespace": "ORDER_TOPIC_CONFIG", "key": "TopicTest"}
    assert c.call(RemotingCommand.request(101, kv)).code == ResponseCode.QUERY_NOT_FOUND
    assert c.call(RemotingCommand.request(100, {**kv, "value": "broker-a:4"})).code == 0
    assert c.call(RemotingCommand.request(101, kv)).ext_fields == {"value": "broker-a:4"}
    resp = register(c)
    assert json.loads(resp.body) == {"table": {"TopicTest": "broker-a:4"}}
    assert "orderTopicConf" not in json.loads(route(c).body)  # 4.9: orderMessageEnable=false by default
    on = c.call(RemotingCommand.request(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=true\n"))
    assert on.code == ResponseCode.SUCCESS
    assert json.loads(route(c).body)["orderTopicConf"] == "broker-a:4"
    listing = c.call(RemotingCommand.request(219, {"namespace": "ORDER_TOPIC_CONFIG"}))
    assert json.loads(listing.body) == {"table": {"TopicTest": "broker-a:4"}}
    assert c.call(RemotingCommand.request(102, kv)).code == 0
    assert c.call(RemotingCommand.request(101, kv)).code == ResponseCode.QUERY_NOT_FOUND
    assert "orderTopicConf" not in json.loads(route(c).body)


def test_an_unknown_code_is_answered_not_supported(caplog):
    # (the Java name server never answers one, and the tool waits for its timeout: issue 25)
    ns, _ = make_ns()
    c = Conn(ns, 1)
    with caplog.at_level(logging.INFO):
        r = c.call(RemotingCommand.request(RequestCode.SEND_MESSAGE_V2))
    assert (r.code, r.remark) == (ResponseCode.REQUEST_CODE_NOT_SUPPORTED, " request type 310 not supported")
    assert "310" in caplog.text
    assert route(c).code == ResponseCode.TOPIC_NOT_EXIST  # connection still fine


def test_missing_header_field_is_system_error():
    ns, _ = make_ns()
    resp = Conn(ns, 1).call(RemotingCommand.request(105))
    assert resp.code == ResponseCode.SYSTEM_ERROR and "topic" in resp.remark


def test_kv_config_is_bounded_and_accounts_deletes():
    from rmqha.broker.support.errors import BadRequest
    from rmqha.broker.namesrv.kv_config import KVConfigManager

    kv = KVConfigManager(max_bytes=100)
    kv.put("NS", "k", "v" * 50)
    kv.put("NS", "k", "v" * 60)  # a replacement counts its new size only
    assert kv.size == 2 + 1 + 60
    try:
        kv.put("NS", "k2", "x" * 40)
        raise AssertionError("over the limit")
    except BadRequest as e:
        assert "limit" in str(e)
    kv.delete("NS", "k")
    assert kv.size == 0 and kv.table == {}
    kv.put("NS", "k2", "x" * 40)
