"""Review 2, findings B1-B4: a timed signature is bound to its request code and header version, to the one
name-server instance it was signed for (so a copy relayed to another name server, or replayed to a restarted
one, is refused), a relayed duplicate cannot unbind the broker's live entry from the broker's own channel, and
one broker's registration rate cannot deny the others. Every clock is a twisted task.Clock; no test sleeps."""

from rmqha.broker.namesrv import guard
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand

from test_namesrv_processors import Conn
from test_namesrv_replay import A, B, SECRET, body, master_of, reg_fields
from test_namesrv_replay import name_server as fixed_name_server


def name_server(clock=None):
    """A name server drawing its own audience at start, as a real one does."""
    return fixed_name_server(clock=clock, audience=None)


def audience_of(ns):
    return getattr(ns.processors, "audience", None)


def signed(ns, clock, code=RequestCode.REGISTER_BROKER, addr=A, at_s=None, version=None, broker_id=0):
    data = body() if code == RequestCode.REGISTER_BROKER else b""
    fields = (
        reg_fields(addr, broker_id, data)
        if data
        else {"brokerName": "broker-a", "brokerAddr": addr, "clusterName": "C", "brokerId": broker_id}
    )
    at_ms = int((clock.seconds() if at_s is None else at_s) * 1000)
    kw = {"code": code}
    if audience_of(ns) is not None:
        kw["audience"] = audience_of(ns)
    if version is not None:
        kw["version"] = version
    out = guard.sign_cluster_timed(fields, data, SECRET, at_ms, **kw)
    cmd = RemotingCommand.request(code, out, data)
    if version is not None:
        cmd.version = version
    return cmd


def test_a_register_sent_as_an_unregister_does_not_verify():
    """B1: REGISTER_BROKER (103) re-sent as UNREGISTER_BROKER (104) carries every field an unregister needs."""
    ns, clock = name_server()
    assert Conn(ns, 1).call(signed(ns, clock)).code == ResponseCode.SUCCESS and master_of(ns) == A
    clock.advance(30)
    captured = signed(ns, clock)
    flipped = RemotingCommand.request(RequestCode.UNREGISTER_BROKER, dict(captured.ext_fields), captured.body)
    r = Conn(ns, 7).call(flipped)
    assert r.code == ResponseCode.NO_PERMISSION and "does not match" in r.remark, r.remark
    assert master_of(ns) == A
    assert Conn(ns, 1).call(captured).code == ResponseCode.SUCCESS  # the broker's own copy still passes


def test_the_header_version_is_signed_too():
    """The version picks how the register body is decoded (wrapper JSON before V3_0_11)."""
    ns, clock = name_server()
    captured = signed(ns, clock)
    captured.version = 100
    r = Conn(ns, 7).call(captured)
    assert r.code == ResponseCode.NO_PERMISSION and "does not match" in r.remark, r.remark
    assert master_of(ns) is None


# ---- B2: each name server's copy is its own ----------------------------------------------------------


def test_a_copy_relayed_to_another_name_server_is_refused_and_the_broker_s_own_copy_passes():
    """The reviewer's attack: an observer of broker -> NS1 relays that copy to NS2 ahead of the broker's own,
    then closes its connection. The copy was signed for NS1's instance: NS2 refuses it (and says which
    instance it is), takes the broker's copy, and the attacker's close removes nothing."""
    ns1, clock = name_server()
    ns2, _ = name_server(clock=clock)
    assert audience_of(ns1) != audience_of(ns2)
    for_ns1, for_ns2 = signed(ns1, clock), signed(ns2, clock)
    attacker = Conn(ns2, 7)
    r = attacker.call(for_ns1)
    assert r.code == ResponseCode.NO_PERMISSION and "signed for name server instance" in r.remark, r.remark
    assert r.ext_fields[guard.SIGN_AUDIENCE] == audience_of(ns2)
    assert Conn(ns2, 1).call(for_ns2).code == ResponseCode.SUCCESS and master_of(ns2) == A
    attacker.close()
    assert master_of(ns2) == A
    assert ns2.processors.refused_audience == 1


def test_a_duplicate_raced_on_the_same_path_cannot_unbind_the_broker():
    """An observer of broker -> NS2 itself delivers the same copy over its own connection, first or second,
    and closes: the entry stays bound to a connection that presented the broker's latest registration."""
    for attacker_first in (True, False):
        ns, clock = name_server()
        copy = signed(ns, clock)
        broker, attacker = Conn(ns, 1), Conn(ns, 7)
        order = (attacker, broker) if attacker_first else (broker, attacker)
        replies = [c.call(copy) for c in order]
        assert [r.code for r in replies] == [ResponseCode.SUCCESS] * 2, [r.remark for r in replies]
        attacker.close()
        assert master_of(ns) == A and ns.routes.broker_live_table[A].channel is broker.proto.context
        broker.close()  # the broker goes: the entry goes with its own connection
        assert master_of(ns) is None


def test_a_duplicate_changes_no_route():
    """A duplicate of A's latest registration, after B took id 0 of broker-a, does not give id 0 back to A
    (it is answered, not applied); a duplicate of anything but the broker's latest is a replay."""
    ns, clock = name_server()
    first = signed(ns, clock)
    assert Conn(ns, 1).call(first).code == ResponseCode.SUCCESS
    clock.advance(1)
    latest = signed(ns, clock)
    assert Conn(ns, 1).call(latest).code == ResponseCode.SUCCESS
    clock.advance(1)
    assert Conn(ns, 2).call(signed(ns, clock, addr=B)).code == ResponseCode.SUCCESS and master_of(ns) == B
    assert Conn(ns, 7).call(latest).code == ResponseCode.SUCCESS and master_of(ns) == B
    r = Conn(ns, 7).call(first)
    assert r.code == ResponseCode.NO_PERMISSION and "not after the last taken" in r.remark, r.remark


def test_a_duplicate_of_a_broker_no_longer_live_is_a_replay():
    ns, clock = name_server()
    copy = signed(ns, clock)
    broker = Conn(ns, 1)
    assert broker.call(copy).code == ResponseCode.SUCCESS
    broker.close()
    r = Conn(ns, 7).call(copy)
    assert r.code == ResponseCode.NO_PERMISSION and master_of(ns) is None, r.remark


# ---- B3: a restart forgets nothing that matters ------------------------------------------------------


def test_a_restarted_name_server_refuses_what_was_signed_for_its_previous_run():
    """The reviewer's restart case: A's registration captured, failover to B, the name server restarts (its
    memory lost); the capture was signed for the previous instance and is refused."""
    ns, clock = name_server()
    old = signed(ns, clock)
    assert Conn(ns, 1).call(old).code == ResponseCode.SUCCESS
    clock.advance(10)
    assert Conn(ns, 2).call(signed(ns, clock, addr=B)).code == ResponseCode.SUCCESS
    restarted, _ = name_server(clock=clock)
    assert Conn(restarted, 2).call(signed(restarted, clock, addr=B)).code == ResponseCode.SUCCESS
    clock.advance(1)
    r = Conn(restarted, 9).call(old)
    assert r.code == ResponseCode.NO_PERMISSION and "signed for name server instance" in r.remark, r.remark
    assert master_of(restarted) == B


# ---- B4: one broker's rate denies no other -----------------------------------------------------------


def test_a_flood_of_registrations_from_one_broker_denies_no_other():
    """A client auto-creating topics makes broker X re-register at round-trip rate. What the guard keeps is
    per broker (its latest time), so X's flood neither fills a shared memory nor costs Y its registration."""
    ns, clock = name_server()
    g = ns.processors.replay_guard
    g.max_nonces = 100  # the old global memory, shrunk: the flood below is 5 x its size
    x = Conn(ns, 1)
    for _ in range(500):
        clock.advance(0.002)
        r = x.call(signed(ns, clock))
        assert r.code == ResponseCode.SUCCESS, r.remark
    r = Conn(ns, 2).call(signed(ns, clock, addr=B, broker_id=1))
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert len(g.last_by_broker) == 2 and len(g.nonces) == 0


def test_new_broker_addresses_are_bounded_and_known_ones_still_pass():
    ns, clock = name_server()
    g = ns.processors.replay_guard
    g.max_brokers = 3
    for i in range(3):
        assert Conn(ns, 1).call(signed(ns, clock, addr=f"10.0.3.{i}:10911", broker_id=i + 1)).code == 0
    r = Conn(ns, 1).call(signed(ns, clock, addr="10.0.3.9:10911", broker_id=9))
    assert r.code == ResponseCode.SYSTEM_BUSY and "brokerAddr" in r.remark, r.remark
    clock.advance(0.01)
    assert Conn(ns, 1).call(signed(ns, clock, addr="10.0.3.0:10911", broker_id=1)).code == 0
