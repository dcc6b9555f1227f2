"""On a SYNC_MASTER the fast path waits once per run, for the offset of the run's last send that asked
to wait: those that did not ask are answered at once, those that did with the wait's outcome, exactly
as the Python path answers each of them for the same outcome."""

from __future__ import annotations

import pytest
from twisted.internet import defer
from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport

from rmqha.broker import fastpath
from rmqha.broker.remoting.codec import encode
from rmqha.broker.remoting.codes import ResponseCode
from rmqha.broker.remoting.protocol import RemotingProtocol
from rmqha.broker.store.message_store import PutStatus
from tests.unit.fastpath.test_send_equivalence import by_opaque
from tests.unit.processors.harness import Broker, props, send_v2

pytestmark = pytest.mark.skipif(not fastpath.available(), reason="the compiled accelerator is not built here")

WAITS = [True, False, True, True, False, False]  # WAIT of each send in the run; the last waiting one is #3


def frames() -> bytes:
    out = []
    for i, wait in enumerate(WAITS):
        cmd = send_v2(
            topic="TopicTest",
            queue_id=i % 2,
            body=b"m%d" % i,
            properties=props(KEYS=f"k{i}", WAIT="true" if wait else "false"),
        )
        cmd.opaque = 100 + i
        out.append(encode(cmd))
    return b"".join(out)


def serve(tmp_path, fast: bool):
    """Feed the run; returns (replies before any wait fired, the waits asked for, release, replies)."""
    b = Broker(tmp_path, brokerRole="SYNC_MASTER", sendFastPath=str(fast).lower())
    b.server.topics.create_in_send("TopicTest", "TBW102", 4)  # so the first send is plain too
    asked: list[tuple[int, defer.Deferred]] = []

    def wait_for_slave(offset):
        d = defer.Deferred()
        asked.append((offset, d))
        return d

    b.server.controller.ha.wait_for_slave = wait_for_slave
    proto = RemotingProtocol(b.server.registry, b.clock)
    transport = StringTransport(peerAddress=IPv4Address("TCP", "10.1.2.3", 40000))
    proto.makeConnection(transport)
    proto.dataReceived(frames())
    early = by_opaque(transport.value())

    def release(outcome):
        for _offset, d in asked:
            if isinstance(outcome, Exception):
                d.errback(outcome)
            else:
                d.callback(outcome)
        b.clock.advance(0)
        return by_opaque(transport.value())

    return b, early, asked, release


@pytest.mark.parametrize(
    "outcome",
    [PutStatus.PUT_OK, PutStatus.FLUSH_SLAVE_TIMEOUT, PutStatus.SLAVE_NOT_AVAILABLE, RuntimeError("the wait broke")],
    ids=["ok", "timeout", "na", "errback"],
)
def test_one_wait_per_run_and_the_same_answers_as_the_python_path(tmp_path, outcome):
    b, early, asked, release = serve(tmp_path / "fast", True)
    assert b.server.send.fast_messages.get() == len(WAITS), "the run did not take the fast path"
    # the sends that did not ask to wait are answered before any wait ends, the others are not
    assert sorted(early) == [100 + i for i, w in enumerate(WAITS) if not w]
    assert all(r.code == ResponseCode.SUCCESS for r in early.values())
    # one wait, for the end of the last send that waits (#3): it covers #0 and #2
    assert len(asked) == 1
    fast_replies = release(outcome)
    b.stop()

    slow, slow_early, slow_asked, slow_release = serve(tmp_path / "slow", False)
    assert len(slow_asked) == WAITS.count(True)  # the Python path waits once per waiting send
    assert asked[0][0] == slow_asked[-1][0], "the run's wait is not for its last waiting send's end"
    slow_replies = slow_release(outcome)
    slow.stop()
    assert fast_replies == slow_replies
    waited = [fast_replies[100 + i] for i, w in enumerate(WAITS) if w]
    expected = (
        ResponseCode.SUCCESS
        if outcome is PutStatus.PUT_OK
        else PutStatus.SLAVE_NOT_AVAILABLE.response_code
        if outcome is PutStatus.SLAVE_NOT_AVAILABLE
        else PutStatus.FLUSH_SLAVE_TIMEOUT.response_code
    )
    assert {r.code for r in waited} == {expected}
    assert all(r.ext_fields.get("msgId") for r in fast_replies.values())  # stored: every reply names it


def test_a_run_that_fails_after_storing_is_answered_system_error_not_retried(tmp_path):
    """put_sends does not raise; if anything after it does, some of the run may be stored, so no send
    of it goes down the Python path again (that could store one twice): each gets SYSTEM_ERROR."""
    b = Broker(tmp_path, sendFastPath="true")
    b.server.topics.create_in_send("TopicTest", "TBW102", 4)
    real = b.server.controller.put_sends

    def stores_then_breaks(buf, sends, born):
        real(buf, sends, born)
        raise RuntimeError("a bug after the store (test)")

    b.server.controller.put_sends = stores_then_breaks
    proto = RemotingProtocol(b.server.registry, b.clock)
    transport = StringTransport(peerAddress=IPv4Address("TCP", "10.1.2.3", 40000))
    proto.makeConnection(transport)
    proto.dataReceived(frames())
    b.clock.advance(0)
    replies = by_opaque(transport.value())
    taken = sum(v for (topic, _q), v in b.store.queue_offsets.items() if topic == "TopicTest")
    b.stop()
    assert sorted(replies) == [100 + i for i in range(len(WAITS))]
    assert {r.code for r in replies.values()} == {ResponseCode.SYSTEM_ERROR}
    assert taken == len(WAITS)  # each stored once, by the fast path, none again by the Python path
