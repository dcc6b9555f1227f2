"""The name server against strangers (issue 25): KV config bounded in bytes, registrations validated
and bounded, brokers gone with their connection, one log line per registration, and (opt-in) signed
registration. Each test here failed before its fix."""

import logging
import struct
import zlib

import pytest

from rmqha.broker.namesrv import guard
from rmqha.broker.namesrv.kv_config import MAX_KV_BYTES, ORDER_TOPIC_CONFIG
from rmqha.broker.namesrv.register_body import RegisterBrokerBody, TopicConfig, body_crc32
from rmqha.broker.namesrv.server import NameServer
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand

from test_namesrv_processors import M, Conn, make_ns, register, route

SECRET = "0123456789abcdef-secret"


def put_kv(c, ns, key, value, sign=None):
    fields = {"namespace": ns, "key": key, "value": value}
    if sign:
        fields = guard.sign_cluster(fields, b"", sign)
    return c.call(RemotingCommand.request(RequestCode.PUT_KV_CONFIG, fields))


def test_kv_config_is_counted_in_bytes_so_replies_stay_far_below_a_frame():
    ns, _ = make_ns()
    c = Conn(ns, 1)
    cjk = "\u4e2d" * 20_000  # 20,000 characters, 60,000 bytes
    accepted = sum(put_kv(c, ORDER_TOPIC_CONFIG, f"k{i}", cjk).code == ResponseCode.SUCCESS for i in range(40))
    assert accepted == MAX_KV_BYTES // 60_000  # 17, not the 279 a character count let in
    r = put_kv(c, ORDER_TOPIC_CONFIG, "big", "\u4e2d" * 30_000)  # 90,000 bytes: over the per-value limit
    assert r.code == ResponseCode.SYSTEM_ERROR and "at most 65536 bytes" in r.remark
    reply = register(c)
    assert reply.code == ResponseCode.SUCCESS and len(reply.body) < 2 * MAX_KV_BYTES  # the REGISTER reply


@pytest.mark.parametrize(
    "field, value, why",
    [
        ("brokerName", "a/b", "brokerName"),
        ("brokerAddr", "not-an-address", "brokerAddr"),
        ("brokerAddr", "10.0.0.1:0", "brokerAddr"),
        ("brokerId", "-1", "brokerId -1"),
        ("haServerAddr", "x" * 300 + ":1", "haServerAddr"),
    ],
)
def test_registrations_are_validated(field, value, why):
    ns, _ = make_ns()
    c = Conn(ns, 1)
    body = RegisterBrokerBody({"T": TopicConfig("T", 4, 4, 6)}).encode()
    fields = {
        "brokerName": "broker-a",
        "brokerAddr": M,
        "clusterName": "C",
        "haServerAddr": "10.0.0.1:10912",
        "brokerId": "0",
        "compressed": "false",
        "bodyCrc32": str(body_crc32(body)),
        field: value,
    }
    r = c.call(RemotingCommand.request(RequestCode.REGISTER_BROKER, fields, body))
    assert r.code == ResponseCode.SYSTEM_ERROR and why in r.remark, r.remark
    assert ns.routes.broker_live_table == {}


def test_an_invalid_topic_in_a_register_body_is_refused():
    ns, _ = make_ns()
    r = register(Conn(ns, 1), topics=(TopicConfig("bad topic!", 4, 4, 6),))
    assert r.code == ResponseCode.SYSTEM_ERROR and "invalid topic" in r.remark
    assert route(Conn(ns, 2), "bad topic!").code == ResponseCode.TOPIC_NOT_EXIST


def test_a_malformed_body_is_answered_with_what_is_wrong_not_an_exception_name():
    ns, _ = make_ns()
    c = Conn(ns, 1)
    fields = {
        "brokerName": "broker-a",
        "brokerAddr": M,
        "clusterName": "C",
        "haServerAddr": "10.0.0.1:10912",
        "brokerId": "0",
        "compressed": "true",
        "bodyCrc32": "0",
    }
    raw = zlib.compress(struct.pack(">i", 2) + b"{}" + struct.pack(">i", 10**8))
    r = c.call(RemotingCommand.request(RequestCode.REGISTER_BROKER, fields, raw))
    assert r.code == ResponseCode.SYSTEM_ERROR and "declares 100000000 topic configs" in r.remark
    assert "Error" not in r.remark and "see the broker's log" not in r.remark


def test_a_huge_registration_is_refused_and_a_big_one_logs_one_line(caplog):
    clock_ns, _ = make_ns()
    ns = NameServer(reactor=None, clock=clock_ns.clock, max_topics_per_broker=5000)
    topics = tuple(TopicConfig(f"T{i}", 4, 4, 6) for i in range(5001))
    r = register(Conn(ns, 1), topics=topics, compressed=True)
    assert r.code == ResponseCode.SYSTEM_ERROR and "at most 5000" in r.remark
    with caplog.at_level(logging.INFO, logger="rmqha.broker.namesrv.route_info"):
        assert register(Conn(ns, 1), topics=topics[:5000], compressed=True).code == ResponseCode.SUCCESS
    lines = [r for r in caplog.records if r.name == "rmqha.broker.namesrv.route_info"]
    assert len(lines) <= 2 and any("5000 new" in r.getMessage() for r in lines)


def test_every_broker_a_connection_registered_leaves_with_it():
    ns, _ = make_ns()
    c = Conn(ns, 1)
    for i in range(50):
        assert register(c, addr=f"10.0.1.{i}:10911").code == ResponseCode.SUCCESS
    assert len(ns.routes.broker_live_table) == 50
    c.proto.connectionLost(None)
    assert ns.routes.broker_live_table == {} and ns.routes.broker_addr_table == {}


def test_live_brokers_are_bounded():
    clock_ns, _ = make_ns()
    ns = NameServer(reactor=None, clock=clock_ns.clock, max_brokers=3)
    c = Conn(ns, 1)
    assert [register(c, addr=f"10.0.1.{i}:10911").code for i in range(4)] == [0, 0, 0, ResponseCode.SYSTEM_ERROR]
    assert register(c, addr="10.0.1.0:10911").code == 0  # a known one re-registers


def test_with_a_cluster_secret_only_signed_writes_change_routes_and_config():
    clock_ns, _ = make_ns()
    ns = NameServer(reactor=None, clock=clock_ns.clock, cluster_secret=SECRET)
    c = Conn(ns, 1)
    r = register(c)  # a forged (unsigned) registration
    assert r.code == ResponseCode.NO_PERMISSION and "cluster secret" in r.remark
    assert put_kv(c, "NS", "k", "v").code == ResponseCode.NO_PERMISSION
    assert put_kv(c, "NS", "k", "v", sign="a-wrong-secret-of-16+").code == ResponseCode.NO_PERMISSION
    assert put_kv(c, "NS", "k", "v", sign=SECRET).code == ResponseCode.SUCCESS
    body = RegisterBrokerBody({"T": TopicConfig("T", 4, 4, 6)}).encode()
    fields = {
        "brokerName": "broker-a",
        "brokerAddr": M,
        "clusterName": "C",
        "haServerAddr": "10.0.0.1:10912",
        "brokerId": "0",
        "compressed": "false",
        "bodyCrc32": str(body_crc32(body)),
    }
    untimed = guard.sign_cluster(fields, body, SECRET)  # brokers sign timed: untimed would replay for ever
    assert (
        c.call(RemotingCommand.request(RequestCode.REGISTER_BROKER, untimed, body)).code == ResponseCode.NO_PERMISSION
    )
    signed = guard.sign_cluster_timed(
        fields,
        body,
        SECRET,
        int(clock_ns.clock.seconds() * 1000),
        code=RequestCode.REGISTER_BROKER,
        audience=ns.processors.audience,
    )
    assert c.call(RemotingCommand.request(RequestCode.REGISTER_BROKER, signed, body)).code == ResponseCode.SUCCESS
    tampered = dict(signed, haServerAddr="6.6.6.6:10912")
    assert (
        c.call(RemotingCommand.request(RequestCode.REGISTER_BROKER, tampered, body)).code == ResponseCode.NO_PERMISSION
    )
    assert route(c, "T").code == ResponseCode.SUCCESS  # reads stay open, as in 4.9
    assert ns.processors.refused_unsigned == 5
