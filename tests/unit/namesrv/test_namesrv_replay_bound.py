"""Review 2, findings B1-B4: a timed signature is bound to its request code and header version, to the one
name-server instance it was signed for (so a copy relayed to another name server, or replayed to a restarted
one, is refused), a relayed duplicate cannot unbind the broker's live entry from the broker's own channel, and
one broker's registration rate cannot deny the others. Every clock is a twisted task.Clock; no test sleeps."""
from rmqha.broker.namesrv import guard
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand

from test_namesrv_processors import Conn
from test_namesrv_replay import A, SECRET, body, master_of, name_server, reg_fields


def signed(ns, clock, code=RequestCode.REGISTER_BROKER, addr=A, at_s=None, version=None):
    data = body() if code == RequestCode.REGISTER_BROKER else b""
    fields = reg_fields(addr, 0, data) if data else {"brokerName": "broker-a", "brokerAddr": addr,
                                                     "clusterName": "C", "brokerId": 0}
    at_ms = int((clock.seconds() if at_s is None else at_s) * 1000)
    kw = {"code": code}
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
