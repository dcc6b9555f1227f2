"""Signed DLedger peer traffic (rmqha/broker/dledger/signing.py) and the driver's use of it: requests and
answers signed with the cluster secret, unsigned, wrongly signed, stale and replayed requests refused
with NO_PERMISSION and counted, and without a secret 0.3.1.2's bytes."""

import json

import pytest
from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport

from rmqha.broker.config.properties import BrokerConfig
from rmqha.broker.dledger import signing
from rmqha.broker.dledger.config import DLedgerConfig
from rmqha.broker.dledger.effects import Reply
from rmqha.broker.dledger.protocol import (
    HeartBeatRequest,
    HeartBeatResponse,
    LeadershipTransferRequest,
    VoteResponse,
    VoteResult,
)
from rmqha.broker.dledger.transport import _ServerFactory
from rmqha.broker.remoting.codec import encode
from rmqha.broker.remoting.codes import ResponseCode as RemotingCode
from rmqha.broker.remoting.command import RemotingCommand
from tests.unit.dledger.test_transport import connect, frames, service, vote

SECRET = "s3cret-s3cret-s3cret"
PEERS = ("n1", "n2")

# --- signing.py ------------------------------------------------------------------------------------


def signed(code=51002, body=b'{"term":1}', time_us=5_000_000, nonce="ab", secret=SECRET):
    return signing.sign_request(secret, code, body, time_us, nonce)


def test_a_signature_covers_the_code_the_time_the_nonce_and_the_body():
    guard = signing.Guard(SECRET, PEERS)
    ext = signed()
    assert guard.check_signature(51002, ext, b'{"term":1}') == (5_000_000, "ab")
    for code, fields, body in (
        (51001, ext, b'{"term":1}'),  # a heartbeat's signature on a vote
        (51002, ext, b'{"term":2}'),
        (51002, {**ext, signing.SIGN_TIME: "5000001"}, b'{"term":1}'),
        (51002, {**ext, signing.SIGN_NONCE: "ac"}, b'{"term":1}'),
        (51002, signed(secret="another-secret-of-16"), b'{"term":1}'),
        (51002, {**ext, signing.SIGN_TIME: "-1"}, b'{"term":1}'),
    ):
        with pytest.raises(signing.Refused) as e:
            guard.check_signature(code, fields, body)
        assert e.value.reason == signing.BAD_SIGNATURE
    for fields in (None, {}, {"other": "x"}):
        with pytest.raises(signing.Refused) as e:
            guard.check_signature(51002, fields, b'{"term":1}')
        assert e.value.reason == signing.UNSIGNED and "clusterSecretFile" in str(e.value)


def test_a_peers_requests_must_be_newer_than_its_last_and_within_the_window():
    guard = signing.Guard(SECRET, PEERS, window_ms=30_000)
    guard.check_fresh("n1", 5_000_000, "a", now_s=5.0)
    for t in (5_000_000, 4_999_999):  # the same request again, or an older one held back
        with pytest.raises(signing.Refused) as e:
            guard.check_fresh("n1", t, "b", now_s=5.0)
        assert e.value.reason == signing.REPLAYED
    guard.check_fresh("n2", 4_000_000, "c", now_s=5.0)  # each peer has its own order
    guard.check_fresh("n1", 5_000_001, "d", now_s=5.0)
    for t in (5_000_000 + 30_000_001, 5_000_000 - 30_000_001):
        with pytest.raises(signing.Refused) as e:
            guard.check_fresh("n2", t, "e", now_s=5.0)
        assert e.value.reason == signing.STALE and "window 30 s" in str(e.value)
    guard.check_fresh("n2", 5_000_000 + 30_000_000, "f", now_s=5.0)  # the window's edge is in


def test_other_senders_are_told_apart_by_nonce_in_a_bounded_memory():
    guard = signing.Guard(SECRET, PEERS, window_ms=1000, max_nonces=2)
    guard.check_fresh(None, 1_000_000, "x", now_s=1.0)
    with pytest.raises(signing.Refused) as e:
        guard.check_fresh("admin", 1_000_001, "x", now_s=1.0)
    assert e.value.reason == signing.REPLAYED
    guard.check_fresh(None, 1_000_000, "y", now_s=1.0)  # an admin's time need not increase
    with pytest.raises(signing.Refused) as e:
        guard.check_fresh(None, 1_000_000, "z", now_s=1.0)
    assert e.value.reason == signing.STALE and "too many" in str(e.value)
    guard.check_fresh(None, 2_100_000, "z", now_s=2.1)  # x and y expired with the window
    assert set(guard.nonces) == {"z"}


def test_an_answer_is_bound_to_its_request():
    ext = signing.sign_response(SECRET, 200, b"{}", "n1")
    assert signing.response_ok(SECRET, 200, b"{}", "n1", ext)
    assert not signing.response_ok(SECRET, 200, b"{}", "n2", ext)  # another request's answer
    assert not signing.response_ok(SECRET, 200, b'{"a":1}', "n1", ext)
    assert not signing.response_ok(SECRET, 200, b"{}", "n1", {})
    assert not signing.response_ok("another-secret-of-16", 200, b"{}", "n1", ext)


def test_the_sign_clock_never_repeats_a_time():
    now = [1.0]
    clock = signing.SignClock(lambda: now[0])
    assert [clock.next_us(), clock.next_us()] == [1_000_000, 1_000_001]
    now[0] = 0.5  # stepped back
    assert clock.next_us() == 1_000_002


def test_the_broker_config_reads_the_secret_file_and_preferred_leader(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text(SECRET + "\n")
    c = BrokerConfig()
    c.dLegerGroup, c.dLegerSelfId, c.dLegerPeers = "g", "n0", "n0-127.0.0.1:40911;n1-127.0.0.1:40912"
    c.preferredLeaderId = "n1"
    dl = DLedgerConfig.from_broker(c)
    assert (dl.group, dl.selfId, dl.preferredLeaderIds, dl.clusterSecret) == ("g", "n0", "n1", None)
    c.clusterSecretFile = str(secret)
    assert DLedgerConfig.from_broker(c).clusterSecret == SECRET
    assert SECRET not in repr(DLedgerConfig.from_broker(c))
    secret.write_text("short\n")
    with pytest.raises(ValueError, match="shorter than 16"):
        DLedgerConfig.from_broker(c)


# --- the driver ------------------------------------------------------------------------------------


def _signed_service():
    from twisted.internet.testing import MemoryReactorClock

    from rmqha.broker.dledger.transport import DLedgerService
    from tests.unit.dledger.test_transport import StubNode, StubStore

    reactor = MemoryReactorClock()
    reactor.advance(1000)  # the clock the signatures' times come from
    node = StubNode()
    node.config.clusterSecret = SECRET
    return reactor, node, DLedgerService(node, StubStore([]), reactor=reactor)


def test_without_a_secret_the_request_bytes_are_0312s():
    reactor, node, svc = service()
    svc.send("n1", vote())
    _proto, transport = connect(reactor)
    expected = encode(RemotingCommand.request(51001, body=vote().to_json_bytes(), opaque=1))
    assert transport.value() == expected
    assert svc.secret is None and svc.guard is None


def test_requests_go_out_signed_and_only_signed_answers_are_taken():
    reactor, node, svc = _signed_service()
    svc.send("n1", vote())
    svc.send("n1", vote(term=4))
    proto, transport = connect(reactor)
    first, second = frames(transport)
    guard = signing.Guard(SECRET, ["n0"])
    t1, nonce1 = guard.check_signature(51001, first.ext_fields, first.body)
    t2, _nonce2 = guard.check_signature(51001, second.ext_fields, second.body)
    assert t2 > t1 and json.loads(first.body) == vote().to_json()  # the body is 0.3.1.2's JSON
    answer = VoteResponse.for_request(vote(), 3, VoteResult.ACCEPT).to_json_bytes()
    unsigned = RemotingCommand(code=200, opaque=first.opaque, flag=1, body=answer)
    proto.dataReceived(encode(unsigned))  # forged on the path: a network error, not a vote
    ext = signing.sign_response(SECRET, 200, answer, second.ext_fields[signing.SIGN_NONCE])
    good = RemotingCommand(code=200, opaque=second.opaque, flag=1, body=answer, ext_fields=ext)
    proto.dataReceived(encode(good))
    (_p, _r, r1, _), (_p2, _r2, r2, _) = node.responses
    assert r1.voteResult == VoteResult.UNKNOWN and r2.voteResult == VoteResult.ACCEPT
    assert svc.stats["bad_answer_signatures"] == 1


def incoming(svc, host="10.0.0.7"):
    proto = _ServerFactory(svc).buildProtocol(None)
    transport = StringTransport(peerAddress=IPv4Address("TCP", host, 50000))
    proto.makeConnection(transport)
    return proto, transport


def heartbeat_cmd(ext=None, opaque=7, term=2):
    body = HeartBeatRequest(group="g", remoteId="n0", localId="n1", leaderId="n1", term=term).to_json_bytes()
    return RemotingCommand.request(51002, ext, body=body, opaque=opaque)


def answering(node):
    def handle_request(request, now):
        node.requests.append(request)
        return [Reply(request, HeartBeatResponse(code=200, term=2))]

    node.handle_request = handle_request


def test_unsigned_wrong_stale_and_replayed_requests_are_refused_and_counted():
    reactor, node, svc = _signed_service()
    answering(node)
    proto, transport = incoming(svc)
    body = heartbeat_cmd().body
    now_us = 1000 * 1_000_000
    cases = [
        (heartbeat_cmd(opaque=1), "unsigned"),
        (heartbeat_cmd(signing.sign_request("another-secret-of-16", 51002, body, now_us), 2), "bad_signature"),
        (heartbeat_cmd(signing.sign_request(SECRET, 51002, body, now_us - 31_000_000), 3), "stale"),
    ]
    good = heartbeat_cmd(signing.sign_request(SECRET, 51002, body, now_us), 4)
    cases += [(good, None), (good, "replayed")]
    for cmd, reason in cases:
        transport.clear()
        proto.dataReceived(encode(cmd))
        (reply,) = frames(transport)
        assert reply.opaque == cmd.opaque
        if reason is None:
            assert reply.code == 200
            nonce = cmd.ext_fields[signing.SIGN_NONCE]
            assert signing.response_ok(SECRET, 200, reply.body, nonce, reply.ext_fields)
        else:
            assert reply.code == RemotingCode.NO_PERMISSION and reply.remark.startswith("DLedger request refused")
    assert len(node.requests) == 1
    status = svc.stats  # what /status shows
    assert {k: status[f"refused_{k}"] for k in ("unsigned", "bad_signature", "stale", "replayed")} == dict.fromkeys(
        ("unsigned", "bad_signature", "stale", "replayed"), 1
    )


def test_a_refused_request_counts_as_refused_by_peer_on_the_sender():
    reactor, node, svc = _signed_service()
    svc.send("n1", vote())
    proto, transport = connect(reactor)
    (cmd,) = frames(transport)
    proto.dataReceived(encode(cmd.make_response(RemotingCode.NO_PERMISSION, "DLedger request refused: x")))
    assert node.responses[0][2].voteResult == VoteResult.UNKNOWN and svc.stats["refused_by_peer"] == 1


def transfer_cmd(**kw):
    fields = dict(group="g", remoteId="n0", transferId="n0", transfereeId="n1", term=2)
    fields.update(kw)
    return RemotingCommand.request(51005, body=LeadershipTransferRequest(**fields).to_json_bytes(), opaque=9)


@pytest.mark.parametrize(
    "host, kw, taken",
    [
        ("127.0.0.1", {}, True),  # DLedger's admin tool on this host
        ("10.0.0.7", {}, False),
        ("127.0.0.1", {"transferId": "n1", "transfereeId": "n0", "localId": "n1", "leaderId": "n1"}, False),
    ],
)
def test_only_a_local_admin_transfer_may_come_unsigned(host, kw, taken):
    reactor, node, svc = _signed_service()
    answering(node)
    proto, transport = incoming(svc, host)
    proto.dataReceived(encode(transfer_cmd(**kw)))
    (reply,) = frames(transport)
    assert (reply.code == 200) is taken and len(node.requests) == int(taken)
    assert not reply.ext_fields.get(signing.SIGNATURE)  # nothing to bind an answer to


@pytest.mark.parametrize("bad", ["签名", "é" * 44, "\udc80"])
def test_a_signature_that_is_not_ascii_is_a_bad_signature_not_an_error(bad):
    # hmac.compare_digest raises TypeError on a str that is not ASCII: a peer chose it
    guard = signing.Guard(SECRET, PEERS)
    with pytest.raises(signing.Refused) as e:
        guard.check_signature(51002, {**signed(), signing.SIGNATURE: bad}, b'{"term":1}')
    assert e.value.reason == signing.BAD_SIGNATURE
    assert not signing.response_ok(SECRET, 200, b"{}", "n1", {signing.SIGNATURE: bad})


@pytest.mark.parametrize("when", ["²", "٣٣٣", "5000000\u00b2"])
def test_a_sign_time_of_non_ascii_digits_is_a_bad_signature_not_an_error(when):
    # "²".isdigit() is true and int("²") raises ValueError
    with pytest.raises(signing.Refused) as e:
        signing.Guard(SECRET, PEERS).check_signature(51002, {**signed(), signing.SIGN_TIME: when}, b'{"term":1}')
    assert e.value.reason == signing.BAD_SIGNATURE
