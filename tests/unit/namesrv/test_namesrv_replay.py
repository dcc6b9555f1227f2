"""Signed registration against replay (issue 25, beyond 4.9): with a cluster secret, REGISTER_BROKER and
UNREGISTER_BROKER are signed with a time and a nonce; the name server refuses one signed outside its
window, one whose nonce it took, and one whose time is not after the last from the same brokerAddr.
Every clock here is a twisted task.Clock; no test sleeps."""

import logging

import pytest
from twisted.internet import defer
from twisted.internet.task import Clock

from rmqha.broker.config.properties import BrokerConfig
from rmqha.broker.namesrv import guard
from rmqha.broker.namesrv.__main__ import parse_args
from rmqha.broker.namesrv.register_body import RegisterBrokerBody, TopicConfig, body_crc32
from rmqha.broker.namesrv.server import NameServer
from rmqha.broker.managers.topics import TopicConfigManager
from rmqha.broker.managers.registration import BrokerRegistration
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand

from test_namesrv_processors import Conn, route

SECRET = "0123456789abcdef-secret"
A, B = "10.0.0.1:10911", "10.0.0.2:10911"  # the old master of broker-a, and the one that took over
T0 = 1_700_000_000
AUD = "00000000000000aa"  # the name server's clusterSignAudience in these tests (drawn at start otherwise)


def name_server(window_s=guard.SIGNED_WINDOW_S, secret=SECRET, clock=None, audience=AUD):
    clock = clock or Clock()
    if clock.seconds() == 0:
        clock.advance(T0)
    return NameServer(
        reactor=None, clock=clock, cluster_secret=secret, signed_window_s=window_s, signed_audience=audience
    ), clock


def reg_fields(addr=A, broker_id=0, body=b""):
    return {
        "brokerName": "broker-a",
        "brokerAddr": addr,
        "clusterName": "C",
        "haServerAddr": addr.replace("10911", "10912"),
        "brokerId": broker_id,
        "compressed": False,
        "bodyCrc32": body_crc32(body),
    }


def body(*names):
    return RegisterBrokerBody({n: TopicConfig(n, 4, 4, 6) for n in names or ("T",)}).encode()


def signed_register(at_s, addr=A, broker_id=0, nonce=None, audience=AUD):
    data = body()
    fields = guard.sign_cluster_timed(
        reg_fields(addr, broker_id, data),
        data,
        SECRET,
        int(at_s * 1000),
        nonce,
        code=RequestCode.REGISTER_BROKER,
        audience=audience,
    )
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, fields, data)


def master_of(ns):
    data = ns.routes.broker_addr_table.get("broker-a")
    return data.broker_addrs.get(0) if data else None


def test_an_exact_replay_is_refused_and_the_route_stays():
    """Once the broker registered anew (or left): the exact replay of its latest registration while it is
    live is answered and applies nothing (test_namesrv_replay_bound.py)."""
    ns, clock = name_server()
    c = Conn(ns, 1)
    captured = signed_register(clock.seconds())
    assert c.call(captured).code == ResponseCode.SUCCESS
    c.close()
    clock.advance(5)
    r = Conn(ns, 2).call(captured)
    assert r.code == ResponseCode.NO_PERMISSION and "were taken already (a replayed request)" in r.remark, r.remark
    assert ns.processors.refused_replayed == 1 and ns.processors.refused_unsigned == 0
    assert master_of(ns) is None


def test_the_stale_master_replay_is_refused():
    """The attack: capture master A's signed registration; A stops (signed UNREGISTER) and B takes over as
    broker-a's master; replaying A's registration would point broker-a's slaves back at A."""
    ns, clock = name_server()
    a, b = Conn(ns, 1), Conn(ns, 2)
    captured = signed_register(clock.seconds(), A)
    assert a.call(captured).code == ResponseCode.SUCCESS and master_of(ns) == A
    clock.advance(1)
    unreg = guard.sign_cluster_timed(
        {"brokerName": "broker-a", "brokerAddr": A, "clusterName": "C", "brokerId": 0},
        None,
        SECRET,
        int(clock.seconds() * 1000),
        code=RequestCode.UNREGISTER_BROKER,
        audience=AUD,
    )
    assert a.call(RemotingCommand.request(RequestCode.UNREGISTER_BROKER, unreg)).code == ResponseCode.SUCCESS
    a.close()
    clock.advance(2)
    assert b.call(signed_register(clock.seconds(), B)).code == ResponseCode.SUCCESS and master_of(ns) == B
    for wait in (10, 200):  # inside the window: its nonce was taken; past it: stale
        clock.advance(wait)
        r = Conn(ns, 9).call(captured)
        assert r.code == ResponseCode.NO_PERMISSION and master_of(ns) == B, r.remark
    assert ns.processors.refused_replayed == 1 and ns.processors.refused_stale == 1


def test_a_reordered_request_from_the_same_broker_is_refused():
    """A fresh nonce does not help a request older than the last taken from that brokerAddr (one held back
    by whoever sits on the path and delivered after a newer one)."""
    ns, clock = name_server()
    c = Conn(ns, 1)
    held_back = signed_register(clock.seconds())
    assert c.call(signed_register(clock.seconds() + 0.001)).code == ResponseCode.SUCCESS
    r = c.call(held_back)
    assert r.code == ResponseCode.NO_PERMISSION and "is not after the last taken" in r.remark, r.remark
    assert c.call(signed_register(clock.seconds() + 0.002)).code == ResponseCode.SUCCESS


@pytest.mark.parametrize(
    "skew_s, taken", [(0, True), (119.9, True), (-119.9, True), (120.001, False), (-120.001, False), (-3600, False)]
)
def test_the_window_is_the_same_either_way_of_the_name_server_clock(skew_s, taken):
    """Hosts whose clocks differ by less than the window register; beyond it every registration is refused
    with how far off the signer was (an operator fixes NTP; nothing is taken meanwhile)."""
    ns, clock = name_server()
    r = Conn(ns, 1).call(signed_register(clock.seconds() + skew_s))
    assert (r.code == ResponseCode.SUCCESS) is taken, r.remark
    if not taken:
        where = "ahead of" if skew_s > 0 else "behind"
        assert (
            r.code == ResponseCode.NO_PERMISSION
            and f"s {where} this name server's clock, outside its window of 120 s" in r.remark
        ), r.remark
        assert ns.processors.refused_stale == 1 and master_of(ns) is None


def test_the_window_is_configurable():
    ns, clock = name_server(window_s=5)
    captured = signed_register(clock.seconds())
    clock.advance(6)
    r = Conn(ns, 1).call(captured)
    assert r.code == ResponseCode.NO_PERMISSION and "6.0 s behind" in r.remark and "window of 5 s" in r.remark
    assert parse_args([]).signed_request_window_seconds == 120
    assert parse_args(["--signed-request-window-seconds", "30"]).signed_request_window_seconds == 30
    for bad in ("0", "3601", "1.5", "x"):
        with pytest.raises(SystemExit):
            parse_args(["--signed-request-window-seconds", bad])


def test_moving_characters_between_fields_breaks_a_timed_signature():
    """The ACL's content is the bare concatenation of the values, so brokerAddr "h:10911" + brokerId "0"
    and "h:1091" + "10" sign alike; the timed content prefixes every key and value with its length."""
    fields = {k: str(v) for k, v in reg_fields().items()}
    moved = dict(fields, brokerAddr=A[:-1], brokerId=A[-1] + "0")
    acl_sig = guard.sign_cluster(fields, b"", SECRET)["Signature"]
    assert guard.sign_cluster(moved, b"", SECRET)["Signature"] == acl_sig  # the ambiguity, shown
    ns, clock = name_server()
    signed = guard.sign_cluster_timed(
        fields, b"", SECRET, int(clock.seconds() * 1000), code=RequestCode.REGISTER_BROKER, audience=AUD
    )
    forged = dict(signed, brokerAddr=moved["brokerAddr"], brokerId=moved["brokerId"])
    r = Conn(ns, 1).call(RemotingCommand.request(RequestCode.REGISTER_BROKER, forged))
    assert r.code == ResponseCode.NO_PERMISSION and "signature of the timed request does not match" in r.remark
    assert ns.routes.broker_live_table == {}


@pytest.mark.parametrize(
    "change, why",
    [
        ({guard.SIGN_TIME: "soon"}, "is not ms since the epoch"),
        ({guard.SIGN_NONCE: "x"}, "must be 8..64 characters"),
    ],
)
def test_a_malformed_time_or_nonce_is_refused_even_when_signed(change, why):
    ns, clock = name_server()
    data = body()
    fields = {
        **{k: str(v) for k, v in reg_fields(body=data).items()},
        "AccessKey": guard.CLUSTER_KEY,
        guard.SIGN_TIME: str(int(T0 * 1000)),
        guard.SIGN_NONCE: "0123456789abcdef",
        guard.SIGN_AUDIENCE: AUD,
        **change,
    }
    fields["Signature"] = guard._timed_signature(
        guard.timed_content(RequestCode.REGISTER_BROKER, 409, fields, data), SECRET
    )
    r = Conn(ns, 1).call(RemotingCommand.request(RequestCode.REGISTER_BROKER, fields, data))
    assert r.code == ResponseCode.NO_PERMISSION and why in r.remark, r.remark
    assert ns.routes.broker_live_table == {}


def test_refusals_are_logged_once_a_minute_per_kind_and_all_counted(caplog):
    ns, clock = name_server()
    captured = signed_register(clock.seconds())
    broker = Conn(ns, 1)
    assert broker.call(captured).code == ResponseCode.SUCCESS
    broker.close()  # else an exact copy of its latest registration is answered (and applies nothing)
    with caplog.at_level(logging.WARNING, logger="rmqha.broker.namesrv.processors"):
        for _ in range(50):
            Conn(ns, 2).call(captured)
        clock.advance(61)
        Conn(ns, 2).call(captured)
        clock.advance(200)
        Conn(ns, 2).call(captured)
    lines = [x.getMessage() for x in caplog.records]
    assert len(lines) == 3, lines
    assert "replayed" in lines[0] and "50 more like this" not in lines[0]
    assert "49 more like this" in lines[1] and "outside its window" in lines[2]
    assert (ns.processors.refused_replayed, ns.processors.refused_stale) == (51, 1)


def test_what_is_remembered_is_bounded_by_the_window():
    """Broker times (and the nonces of timed requests without a brokerAddr) are forgotten once no request
    carrying them can pass the window; a full memory refuses with SYSTEM_BUSY instead of growing (only
    holders of the secret fill it)."""
    ns, clock = name_server()
    g = ns.processors.replay_guard
    for i in range(100):
        assert Conn(ns, 1).call(signed_register(clock.seconds(), f"10.0.2.{i}:10911")).code == 0
        clock.advance(1)
    assert len(g.last_by_broker) == 100 and len(g._broker_times) == 100 and g.nonces == {}
    clock.advance(200)
    assert Conn(ns, 1).call(signed_register(clock.seconds())).code == 0
    assert len(g.last_by_broker) == 1 and len(g._broker_times) == 1
    g.max_brokers = 1
    r = Conn(ns, 1).call(signed_register(clock.seconds(), B))
    assert r.code == ResponseCode.SYSTEM_BUSY and "try again later" in r.remark


def test_without_a_secret_nothing_changes_as_4_9():
    ns, clock = name_server(secret=None)
    captured = signed_register(clock.seconds() - 3600)  # stale and then replayed: no secret, no checks
    data = body()
    unsigned = RemotingCommand.request(RequestCode.REGISTER_BROKER, reg_fields(body=data), data)
    assert [Conn(ns, 1).call(x).code for x in (captured, captured, unsigned, unsigned)] == [0, 0, 0, 0]
    assert ns.processors.refused_replayed == ns.processors.refused_stale == 0


def test_admin_writes_take_mqadmin_s_untimed_signature_or_a_timed_one_checked_alike():
    ns, clock = name_server()
    c = Conn(ns, 1)
    kv = {"namespace": "NS", "key": "k", "value": "v"}
    untimed = guard.sign_cluster(kv, b"", SECRET)
    assert [c.call(RemotingCommand.request(RequestCode.PUT_KV_CONFIG, untimed)).code for _ in range(2)] == [0, 0]
    timed = guard.sign_cluster_timed(
        kv, b"", SECRET, int(clock.seconds() * 1000), code=RequestCode.PUT_KV_CONFIG, audience=AUD
    )
    assert [c.call(RemotingCommand.request(RequestCode.PUT_KV_CONFIG, timed)).code for _ in range(2)] == [
        0,
        ResponseCode.NO_PERMISSION,
    ]


def test_a_signed_query_keeps_a_broker_alive_only_when_fresh():
    ns, clock = name_server()
    ns.start_scanning()
    assert Conn(ns, 1).call(signed_register(clock.seconds())).code == 0
    data = b'{"counter":0,"timestamp":0}'
    q = {"brokerAddr": A, "brokerName": "broker-a", "clusterName": "C", "brokerId": "0"}
    captured = guard.sign_cluster_timed(
        q, data, SECRET, int(clock.seconds() * 1000) + 1, code=RequestCode.QUERY_DATA_VERSION, audience=AUD
    )
    for _ in range(3):  # a captured query, delivered once and then replayed every 50 s by a stranger
        clock.advance(50)
        assert Conn(ns, 9).call(RemotingCommand.request(RequestCode.QUERY_DATA_VERSION, captured, data)).code == 0
    clock.advance(30)
    assert A not in ns.routes.broker_live_table and route(Conn(ns, 3), "T").code == ResponseCode.TOPIC_NOT_EXIST


class InMemoryClient:
    """RemotingClient stand-in: each name server address answers through its own in-memory connection."""

    def __init__(self, conns):
        self.conns = conns
        self.seen = []

    def invoke(self, addr, cmd, timeout=3.0):
        self.seen.append((addr, cmd))
        return defer.succeed(self.conns[addr].call(cmd))

    def close(self, address=None):
        pass


def test_a_broker_signs_each_name_server_s_copy_for_that_instance_and_follows_a_restart(tmp_path):
    """Its own time, nonce and audience per name server: a copy taken on the way to ns2 is refused at ns1.
    First contact costs one refused round trip per name server (it names its instance); so does a restart."""
    clock = Clock()
    clock.advance(T0)
    (tmp_path / "secret").write_text(SECRET)
    ns1, _ = name_server(clock=clock, audience="00000000000000a1")
    ns2, _ = name_server(clock=clock, audience="00000000000000a2")
    cfg = BrokerConfig.from_properties(
        {
            "brokerClusterName": "C",
            "brokerName": "broker-a",
            "brokerId": "0",
            "brokerRole": "ASYNC_MASTER",
            "storePathRootDir": str(tmp_path),
            "brokerIP1": "10.0.0.1",
            "listenPort": "10911",
            "namesrvAddr": "ns1:9876;ns2:9876",
            "registerNameServerPeriod": "10000",
            "clusterSecretFile": str(tmp_path / "secret"),
        }
    )
    client = InMemoryClient({"ns1:9876": Conn(ns1, 1), "ns2:9876": Conn(ns2, 1)})
    reg = BrokerRegistration(cfg, TopicConfigManager(cfg, clock), clock, clock, client=client)
    reg.start()
    assert reg.registrations == 2 and reg.last_error == {}
    assert reg.audience == {"ns1:9876": "00000000000000a1", "ns2:9876": "00000000000000a2"}
    assert [cmd.ext_fields[guard.SIGN_AUDIENCE] for _, cmd in client.seen] == [
        "",
        "00000000000000a1",
        "",
        "00000000000000a2",
    ]  # (ns1 answered before ns2 was asked)
    assert ns1.processors.refused_audience == ns2.processors.refused_audience == 1
    clock.advance(10)
    assert reg.registrations == 4 and len(client.seen) == 6
    (a1, c1), (a2, c2) = client.seen[-2:]
    assert (a1, a2) == ("ns1:9876", "ns2:9876")
    assert int(c1.ext_fields[guard.SIGN_TIME]) < int(c2.ext_fields[guard.SIGN_TIME])
    assert c1.ext_fields[guard.SIGN_NONCE] != c2.ext_fields[guard.SIGN_NONCE]
    r = Conn(ns1, 7).call(c2)  # the copy taken on the way to ns2
    assert r.code == ResponseCode.NO_PERMISSION and "signed for name server instance" in r.remark, r.remark

    ns2b, _ = name_server(clock=clock, audience="00000000000000b2")  # ns2 restarts
    client.conns["ns2:9876"] = Conn(ns2b, 1)
    clock.advance(10)
    assert reg.registrations == 6 and reg.last_error == {} and reg.audience["ns2:9876"] == "00000000000000b2"
    assert ns2b.routes.broker_live_table.keys() == {A}
    reg.stop()
    assert [cmd.code for _, cmd in client.seen[-2:]] == [RequestCode.UNREGISTER_BROKER] * 2
    assert all(ns.routes.broker_live_table == {} for ns in (ns1, ns2b))


def test_a_broker_s_sign_time_never_goes_back():
    now = [100.0]
    sc = guard.SignClock(lambda: now[0])
    first = sc.next_ms()
    now[0] = 40.0  # NTP steps the clock back a minute
    assert [sc.next_ms() - first for _ in range(3)] == [1, 2, 3]
    now[0] = 100.5
    assert sc.next_ms() == 100_500
