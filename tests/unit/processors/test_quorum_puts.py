"""The master's own puts when the store answers later, as a DLedger leader does (once a quorum has the
entry; 4.9's DLedgerCommitLog.putMessage blocks that long): an END_TRANSACTION COMMIT is answered after
its committed message is stored, the check-back's copy is awaited before the producer is asked, and a
delay level delivers one message at a time, in order. The in-process broker of harness.py with its
put_message wrapped to answer QUORUM_S later on the fake clock; tests/integration/test_dledger_broker.py
runs the same through the 5.x client on a real DLedger group."""

from __future__ import annotations

import pytest
from twisted.internet import defer

from rmqha.broker.remoting.codes import ResponseCode
from rmqha.broker.store import record

from .harness import TOPIC, Broker, FakeContext, send_v1, props
from .test_transactions import (
    COMMIT,
    HALF,
    checks,
    end_after_check,
    end_after_send,
    register_producer,
    send_half,
    visible,
)

QUORUM_S = 0.05


def answered_later(b: Broker, put_message):
    def put(msg, wait_store_ok=True):
        d = defer.Deferred()
        res = put_message(msg, wait_store_ok)
        res.addBoth(lambda r: b.clock.callLater(QUORUM_S, d.callback, r))
        return d

    return put


@pytest.fixture
def quorum(tmp_path):
    b = Broker(tmp_path / "q", transactionCheckInterval="1000")
    b.server.transactions.bridge.put_message = answered_later(b, b.server.transactions.bridge.put_message)
    b.server.schedule.put_message = answered_later(b, b.server.schedule.put_message)
    yield b
    b.stop()


def test_a_commit_is_answered_once_its_message_is_stored(quorum):
    resp = send_half(quorum)
    reply = quorum.call(end_after_send(resp, COMMIT))
    assert isinstance(reply, defer.Deferred) and not reply.called  # not answered before the store did
    got = []
    reply.addCallback(got.append)
    quorum.clock.advance(QUORUM_S)
    assert got[0].code == ResponseCode.SUCCESS
    [m] = visible(quorum)
    assert m.body == b"tx"


def test_the_check_back_waits_for_its_copy_and_a_commit_answering_it_is_visible_once(quorum):
    ctx = FakeContext()
    register_producer(quorum, ctx)
    send_half(quorum)
    stored = quorum.store.max_queue_offset(HALF, 0)
    quorum.clock.pump([0.5] * 11)
    assert checks(ctx) == []  # younger than the 6 s timeout
    for _ in range(200):  # past it the check copies the half and, once that is answered, asks
        quorum.clock.advance(0.01)
        if checks(ctx):
            break
    [check] = checks(ctx)
    assert quorum.store.max_queue_offset(HALF, 0) == stored + 1  # the copy it asks about
    reply = quorum.call(end_after_check(check, COMMIT))
    got = []
    reply.addCallback(got.append)
    quorum.clock.advance(QUORUM_S)
    assert got[0].code == ResponseCode.SUCCESS
    assert [m.body for m in visible(quorum)] == [b"tx"]
    quorum.clock.pump([0.5] * 20)
    assert len(checks(ctx)) == 1 and quorum.server.transactions.backlog() == 0


def test_a_delay_level_delivers_when_the_put_is_answered_later(quorum):
    for body in (b"d1", b"d2"):
        r = quorum.call(send_v1(body=body, queue_id=1, properties=props(UNIQ_KEY=body.decode(), DELAY="1")))
        assert r.code == ResponseCode.SUCCESS
    quorum.clock.pump([0.01] * 130)  # the 1 s level, and the two answers
    res = quorum.store.get_messages(TOPIC, 1, 0, 32)
    assert [record.scan(x).message.body for x in res.records] == [b"d1", b"d2"]
    assert quorum.server.schedule.delivered == 2 and quorum.server.schedule.offsets == {1: 2}


def refused_later(b: Broker, remark: str):
    """A leader that lost its quorum: the put is answered QUORUM_S later, not stored (DLedger's
    WAIT_QUORUM_ACK_TIMEOUT or TERM_CHANGED, as dledger_commitlog.py answers them)."""
    from rmqha.broker.store.message_store import PutResult, PutStatus

    def put(msg, wait_store_ok=True):
        d = defer.Deferred()
        b.clock.callLater(QUORUM_S, d.callback, PutResult(PutStatus.OS_PAGECACHE_BUSY, remark=remark))
        return d

    return put


def test_a_commit_whose_quorum_never_came_is_an_error_and_its_half_stays_unresolved(quorum):
    """The leader changed while the committed message waited for its quorum: the producer is answered an
    error (never SUCCESS), no op message resolves the half, and the check asks about it again."""
    ctx = FakeContext()
    register_producer(quorum, ctx)
    resp = send_half(quorum)
    live = quorum.server.transactions.bridge.put_message
    quorum.server.transactions.bridge.put_message = refused_later(quorum, "(DLedger WAIT_QUORUM_ACK_TIMEOUT)")
    reply = quorum.call(end_after_send(resp, COMMIT))
    got = []
    reply.addCallback(got.append)
    assert got == []  # not answered before the store did
    quorum.clock.advance(QUORUM_S)
    assert got[0].code == ResponseCode.SYSTEM_ERROR and "WAIT_QUORUM_ACK_TIMEOUT" in got[0].remark
    assert visible(quorum) == [] and quorum.server.transactions.backlog() == 1
    quorum.server.transactions.bridge.put_message = live  # a leader again: the check asks the producer
    for _ in range(1000):
        quorum.clock.advance(0.01)
        if checks(ctx):
            break
    assert len(checks(ctx)) == 1
