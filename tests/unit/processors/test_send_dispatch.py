"""A master's send path with dispatch after the append: SEND_OK answers at once with the queue offset
the consume queue will hold; the unit, and a pull's view of it, come on the next reactor turn, which
also wakes the pulls held for that queue."""

from __future__ import annotations

import pytest
from twisted.internet import defer

from rmqha.broker.remoting.codes import ResponseCode

from .harness import TOPIC, Broker, FakeContext, decode_records, props, pull, send_v1, send_v2


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path / "a")
    yield b
    b.stop()


def call_now(b, req, ctx=None):
    """The processor's answer without letting the reactor turn (Broker.call advances the clock)."""
    return b.server.registry.get(req.code)(req, ctx or FakeContext())


def send(b, i, queue_id=0):
    return call_now(
        b, send_v1(queue_id=queue_id, body=f"m{i}".encode(), properties=props(TAGS="t", KEYS=f"k{i}", UNIQ_KEY=f"U{i}"))
    )


def test_a_pull_before_the_dispatch_finds_nothing_and_one_after_finds_it(broker):
    r = send(broker, 0)
    assert r.code == ResponseCode.SUCCESS and r.ext_fields["queueOffset"] == "0"
    early = call_now(broker, pull(offset=0, sys_flag=0x4))
    assert early.code == ResponseCode.PULL_NOT_FOUND and not early.body
    broker.clock.advance(0)
    late = call_now(broker, pull(offset=0, sys_flag=0x4))
    assert late.code == ResponseCode.SUCCESS and [m.body for m in decode_records(late.body)] == [b"m0"]


def test_a_held_pull_is_woken_by_the_dispatch(broker):
    send(broker, 0)
    broker.clock.advance(0)
    d = call_now(broker, pull(offset=1))
    assert isinstance(d, defer.Deferred)
    got = []
    d.addCallback(got.append)
    send(broker, 1)
    assert not got and broker.store.max_queue_offset(TOPIC, 0) == 1  # appended, not dispatched
    broker.clock.advance(0)  # the dispatch, then the wake-up it asks for
    assert got and got[0].code == ResponseCode.SUCCESS
    assert [m.body for m in decode_records(got[0].body)] == [b"m1"]


def test_a_turns_sends_get_the_queue_offsets_their_units_hold(broker):
    replies = []
    for i in range(30):
        req = send_v2(queue_id=i % 3, body=f"m{i}".encode(), properties=props(UNIQ_KEY=f"U{i}"))
        replies.append((i % 3, call_now(broker, req)))
        if i % 11 == 10:
            broker.clock.advance(0)
    broker.clock.advance(0)
    store = broker.store
    for qid, r in replies:
        assert r.code == ResponseCode.SUCCESS
        offset = int(r.ext_fields["queueOffset"])
        from rmqha.broker.store.record import parse_offset_msg_id

        _host, phys = parse_offset_msg_id(r.ext_fields["msgId"])
        assert store.queue(TOPIC, qid).get(offset)[0] == phys
    assert [store.max_queue_offset(TOPIC, q) for q in range(3)] == [10, 10, 10]


def test_the_index_answers_after_the_dispatch(broker):
    send(broker, 0)
    assert broker.store.index.query(TOPIC, "k0", 32, 0, 2**62).phy_offsets == []
    broker.clock.advance(0)
    assert len(broker.store.index.query(TOPIC, "k0", 32, 0, 2**62).phy_offsets) == 1


def test_a_stop_dispatches_what_is_pending(tmp_path):
    b = Broker(tmp_path / "a")
    send(b, 0)
    b.stop()
    b = Broker(tmp_path / "a")
    try:
        assert b.store.recovery is not None and b.store.was_clean_shutdown
        assert b.store.max_queue_offset(TOPIC, 0) == 1
    finally:
        b.stop()
