"""Name-server limits nobody can get around (issue 25, gaps G1, G2, G5, G7, G11 of its audit): filter
servers capped and validated, a route reply bounded below the frame, a process-wide bound on topic
routes, removal of a broker in its own topics' work, topic configs validated, refusals logged at a
rate, and liveness refreshed only by the broker itself. Each test failed before its fix; they count
bytes, entries and lines, never wall time."""

import json
import logging

import pytest

from rmqha.broker.namesrv import guard
from rmqha.broker.namesrv.register_body import RegisterBrokerBody, TopicConfig, body_crc32
from rmqha.broker.namesrv.route_info import RouteInfoManager
from rmqha.broker.namesrv.server import NameServer
from rmqha.broker.remoting.codes import DEFAULT_MAX_FRAME_LENGTH, RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand

from test_namesrv_processors import M, Conn, make_ns, register, route

SECRET = "0123456789abcdef-secret"
AUDIENCE = "00000000000000aa"  # the name servers' clusterSignAudience here


def register_body(
    conn, body: RegisterBrokerBody, name="broker-a", addr=M, compressed=False, crc=None, secret=None, at_ms=0
):
    data = body.encode(compressed)
    fields = {
        "brokerName": name,
        "brokerAddr": addr,
        "clusterName": "C",
        "haServerAddr": "",
        "brokerId": "0",
        "compressed": str(compressed).lower(),
        "bodyCrc32": str(body_crc32(data) if crc is None else crc),
    }
    if secret:
        fields = guard.sign_cluster_timed(
            fields, data, secret, at_ms, code=RequestCode.REGISTER_BROKER, audience=AUDIENCE
        )
    return conn.call(RemotingCommand.request(RequestCode.REGISTER_BROKER, fields, data))


def topics(*names, rq=4, wq=4, perm=6):
    return {n: TopicConfig(n, rq, wq, perm) for n in names}


# ---- G1: filter servers -------------------------------------------------------------------------------


def test_the_filter_server_bomb_is_refused_and_the_route_stays_small():
    """The audit's probe: three fake brokers naming a real topic with 16,000 filter servers of 1 KB each
    (34 KB compressed) made its route reply 48,144,865 bytes, past the 16 MiB frame."""
    ns, _ = make_ns()
    c = Conn(ns, 1)
    assert register_body(c, RegisterBrokerBody(topics("TopicReal"))).code == ResponseCode.SUCCESS
    for k in range(3):
        bomb = RegisterBrokerBody(topics("TopicReal"), filter_servers=["x" * 1000] * 16_000)
        r = register_body(Conn(ns, 10 + k), bomb, name=f"evil{k}", addr=f"10.0.9.{k}:10911", compressed=True)
        assert r.code == ResponseCode.SYSTEM_ERROR and "16000 filter servers" in r.remark, r.remark
    reply = route(Conn(ns, 2), "TopicReal")
    assert reply.code == ResponseCode.SUCCESS and len(reply.body) < 1024
    assert [b["brokerName"] for b in json.loads(reply.body)["brokerDatas"]] == ["broker-a"]


@pytest.mark.parametrize(
    "servers, why",
    [
        ([f"10.0.0.{i}:7000" for i in range(9)], "9 filter servers"),  # guard.MAX_FILTER_SERVERS + 1
        (["not an address\n<script>"], "is not host:port"),
        (["10.0.0.1:0"], "is not host:port"),
    ],
)
def test_filter_servers_are_capped_and_validated(servers, why):
    ns, _ = make_ns()
    r = register_body(Conn(ns, 1), RegisterBrokerBody(topics("T"), filter_servers=servers))
    assert r.code == ResponseCode.SYSTEM_ERROR and why in r.remark, r.remark
    assert ns.routes.filter_server_table == {}


def test_a_few_filter_servers_are_served():
    ns, _ = make_ns()
    servers = [f"10.0.0.{i}:7000" for i in range(guard.MAX_FILTER_SERVERS)]
    assert register_body(Conn(ns, 1), RegisterBrokerBody(topics("T"), filter_servers=servers)).code == 0
    assert json.loads(route(Conn(ns, 2), "T").body)["filterServerTable"] == {M: servers}


def test_a_route_reply_never_grows_past_its_bound_and_says_so_once(caplog):
    """Defence in depth: whatever gets stored, a route is an answer within the frame."""
    r = RouteInfoManager(max_route_bytes=12_000)  # the 40 groups take ~8 KB, their filter servers ~6 KB
    for k in range(40):
        b = RegisterBrokerBody(topics("T"), filter_servers=[f"10.1.{k}.{i}:7000" for i in range(8)])
        r.register_broker("C", f"10.0.{k}.1:10911", f"broker-{k:02d}", 0, "", b, object(), 0)
    with caplog.at_level(logging.WARNING, logger="rmqha.broker.namesrv.route_info"):
        replies = [r.pickup_topic_route("T") for _ in range(3)]
    for reply in replies:
        size = len(json.dumps(reply, separators=(",", ":")))
        assert 10_000 < size <= 12_000, size
        assert len(reply["queueDatas"]) == len(reply["brokerDatas"]) == 40  # the groups fit
        assert 0 < len(reply["filterServerTable"]) < 40  # filter servers with what is left
        assert reply["brokerDatas"][0]["brokerName"] == "broker-00"
    lines = [x.getMessage() for x in caplog.records if "would pass" in x.getMessage()]
    assert len(lines) == 1 and "topic T" in lines[0], lines
    assert RouteInfoManager().max_route_bytes < DEFAULT_MAX_FRAME_LENGTH


# ---- G2: topic routes in all, and removal in a broker's own work ------------------------------------


def test_topic_routes_are_bounded_in_all():
    clock_ns, _ = make_ns()
    ns = NameServer(reactor=None, clock=clock_ns.clock, max_topic_routes=10)
    a, b = Conn(ns, 1), Conn(ns, 2)
    assert register_body(a, RegisterBrokerBody(topics(*(f"A{i}" for i in range(6))))).code == 0
    r = register_body(
        b, RegisterBrokerBody(topics(*(f"B{i}" for i in range(5)))), name="broker-b", addr="10.0.0.2:10911"
    )
    assert r.code == ResponseCode.SYSTEM_ERROR and "at most 10 topic routes" in r.remark, r.remark
    assert "--max-topic-routes" in r.remark and "broker-b" not in ns.routes.broker_addr_table
    # the same topics again with a new data version add nothing: accepted
    again = RegisterBrokerBody(topics(*(f"A{i}" for i in range(6))), {"counter": 2, "timestamp": 9})
    assert register_body(a, again).code == 0 and ns.routes.route_entries == 6
    a.close()  # broker-a leaves: its routes go, and broker-b fits
    assert ns.routes.route_entries == 0
    assert (
        register_body(
            b, RegisterBrokerBody(topics(*(f"B{i}" for i in range(5)))), name="broker-b", addr="10.0.0.2:10911"
        ).code
        == 0
    )


class CountingDict(dict):
    """A dict that counts the keys a caller reads or walks over."""

    touched = 0

    def __iter__(self):
        for k in super().__iter__():
            CountingDict.touched += 1
            yield k

    def __getitem__(self, k):
        CountingDict.touched += 1
        return super().__getitem__(k)

    def get(self, k, default=None):
        CountingDict.touched += 1
        return super().get(k, default)

    def items(self):
        return [(k, self[k]) for k in self]

    def values(self):
        return [self[k] for k in self]

    def keys(self):
        return list(iter(self))


def test_removing_a_broker_touches_only_its_own_topics():
    """Closing 16 fake brokers of 65,536 topics took 5.2 s: each removal walked every topic."""
    ns, _ = make_ns()
    big, small = Conn(ns, 1), Conn(ns, 2)
    assert register_body(big, RegisterBrokerBody(topics(*(f"T{i}" for i in range(2000))))).code == 0
    assert (
        register_body(small, RegisterBrokerBody(topics("S0", "S1", "T7")), name="broker-b", addr="10.0.0.2:10911").code
        == 0
    )
    routes = ns.routes
    routes.topic_queue_table = CountingDict(routes.topic_queue_table)
    CountingDict.touched = 0
    small.close()
    assert CountingDict.touched <= 3 * 3, CountingDict.touched  # its 3 topics, not 2,003
    assert "S0" not in routes.topic_queue_table and list(dict.get(routes.topic_queue_table, "T7")) == ["broker-a"]
    assert routes.route_entries == 2000 and "broker-b" not in routes.broker_topics
    # deleting a topic keeps the index right: broker-a's removal then misses nothing
    ns.routes.delete_topic("T3")
    assert routes.route_entries == 1999 and "T3" not in routes.broker_topics["broker-a"]
    assert routes.wipe_write_perm("broker-a") == 1999
    big.close()
    assert dict(routes.topic_queue_table) == {} and routes.route_entries == 0 and routes.broker_topics == {}


# ---- G5: queue numbers and perm ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field, cfg",
    [
        ("readQueueNums -5", dict(rq=-5)),
        ("writeQueueNums 100000", dict(wq=100_000)),
        ("perm 999", dict(perm=999)),
        ("perm -1", dict(perm=-1)),
    ],
)
def test_queue_numbers_and_perm_of_topic_configs_are_validated(field, cfg):
    ns, _ = make_ns()
    for compressed in (False, True):
        r = register_body(Conn(ns, 1), RegisterBrokerBody(topics("T", **cfg)), compressed=compressed)
        assert r.code == ResponseCode.SYSTEM_ERROR and field in r.remark, r.remark
    assert ns.routes.topic_queue_table == {}
    assert register_body(Conn(ns, 1), RegisterBrokerBody(topics("T", rq=1024, wq=0, perm=7))).code == 0


# ---- G7: refusals logged at a rate ---------------------------------------------------------------------


def test_unsigned_refusals_and_crc_mismatches_are_logged_at_a_rate(caplog):
    clock_ns, clock = make_ns()
    ns = NameServer(reactor=None, clock=clock, cluster_secret=SECRET)
    plain, _ = make_ns()
    c, p = Conn(ns, 1), Conn(plain, 1)
    with caplog.at_level(logging.WARNING, logger="rmqha.broker.namesrv"):
        for _ in range(50):
            assert register(c).code == ResponseCode.NO_PERMISSION
            assert register_body(p, RegisterBrokerBody(topics("T")), crc=12345).remark == "crc32 not match"
        clock.advance(61)
        register(c)
    refused = [x.getMessage() for x in caplog.records if "refused request code" in x.getMessage()]
    crc = [x for x in caplog.records if "does not match header" in x.getMessage()]
    assert len(refused) == 2 and "49 more like this" in refused[1], refused
    assert len(crc) == 1
    assert ns.processors.refused_unsigned == 51  # still counted, every one


# ---- G11: liveness only from the broker itself, with a secret -----------------------------------------


def query_data_version(conn, addr=M, secret=None, at_ms=0):
    body = json.dumps({"counter": 0, "timestamp": 0}).encode()
    fields = {"brokerAddr": addr, "brokerName": "broker-a", "clusterName": "C", "brokerId": "0"}
    if secret:
        fields = guard.sign_cluster_timed(
            fields, body, secret, at_ms, code=RequestCode.QUERY_DATA_VERSION, audience=AUDIENCE
        )
    return conn.call(RemotingCommand.request(RequestCode.QUERY_DATA_VERSION, fields, body))


@pytest.mark.parametrize("who, stays", [("stranger", False), ("own channel", True), ("signed", True)])
def test_with_a_secret_only_the_broker_keeps_itself_alive(who, stays):
    clock_ns, clock = make_ns()
    ns = NameServer(reactor=None, clock=clock, cluster_secret=SECRET, signed_audience=AUDIENCE)
    ns.start_scanning()
    broker = Conn(ns, 1)
    body = RegisterBrokerBody(topics("T"), {"counter": 0, "timestamp": 0})
    assert register_body(broker, body, secret=SECRET, at_ms=int(clock.seconds() * 1000)).code == 0
    for _ in range(3):  # a partitioned broker: only the query keeps it, every 50 s
        clock.advance(50)
        conn = broker if who == "own channel" else Conn(ns, 9)
        assert (
            query_data_version(conn, secret=SECRET if who == "signed" else None, at_ms=int(clock.seconds() * 1000)).code
            == ResponseCode.SUCCESS
        )
    clock.advance(30)  # 180 s since the registration, 30 s since the last query
    assert (M in ns.routes.broker_live_table) is stays
    assert (route(Conn(ns, 3), "T").code == ResponseCode.SUCCESS) is stays
