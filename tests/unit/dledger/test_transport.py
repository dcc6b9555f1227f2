"""rmqha/broker/dledger/transport.py on a memory reactor and task-style clock: framing, answers, NETWORK_ERROR
on timeout and on a failed connection, PersistTerm before what follows, the tick loop."""

import json
import random

from twisted.internet.error import ConnectionRefusedError
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure

from rmqha.broker.dledger.config import DLedgerConfig
from rmqha.broker.dledger.effects import PersistTerm, Reply, Send
from rmqha.broker.dledger.file_store import FileStore
from rmqha.broker.dledger.node import DLedgerNode
from rmqha.broker.dledger.protocol import (
    HeartBeatRequest,
    HeartBeatResponse,
    ResponseCode,
    VoteRequest,
    VoteResponse,
    VoteResult,
)
from rmqha.broker.dledger.transport import DLedgerService
from rmqha.broker.remoting.codec import FrameDecoder, encode
from rmqha.broker.remoting.codes import ResponseCode as RemotingCode
from rmqha.broker.remoting.command import RemotingCommand

PEERS = "n0-127.0.0.1:40911;n1-127.0.0.1:40912;n2-127.0.0.1:40913"


class StubNode:
    """Records inputs; returns the effects a test queues."""

    def __init__(self):
        self.config = DLedgerConfig(group="g", selfId="n0", peers=PEERS)
        self.self_id = "n0"
        self.responses, self.requests, self.ticks, self.next = [], [], [], []

    def _out(self):
        out, self.next = self.next, []
        return out

    def tick(self, now):
        self.ticks.append(now)
        return self._out()

    def on_response(self, peer, request, response, now):
        self.responses.append((peer, request, response, now))
        return self._out()

    def handle_request(self, request, now):
        self.requests.append(request)
        return self._out()


class StubStore:
    def __init__(self, events):
        self.events, self.dirty, self.committed_index = events, False, -1

    def persist_term(self, term, vote_for):
        self.events.append(("persist", term, vote_for))

    def persist_checkpoint(self):
        pass

    def flush(self):
        self.events.append(("flush",))
        self.dirty = False

    def close(self):
        pass


def service(events=None):
    reactor = MemoryReactorClock()
    node = StubNode()
    svc = DLedgerService(node, StubStore(events if events is not None else []), reactor=reactor)
    return reactor, node, svc


def connect(reactor, which=-1):
    """Complete the outgoing connection the service asked the reactor for."""
    factory = reactor.tcpClients[which][2]
    proto = factory.buildProtocol(None)
    transport = StringTransport()
    proto.makeConnection(transport)
    return proto, transport


def frames(transport):
    return list(FrameDecoder().feed(transport.value()))


def vote(term=3):
    return VoteRequest(
        group="g", remoteId="n1", localId="n0", leaderId="n0", term=term, ledgerEndIndex=-1, ledgerEndTerm=-1
    )


def test_a_request_goes_out_as_a_remoting_command_and_its_answer_comes_back():
    reactor, node, svc = service()
    svc.send("n1", vote())
    assert reactor.tcpClients[0][:2] == ("127.0.0.1", 40912)
    proto, transport = connect(reactor)
    (cmd,) = frames(transport)
    assert cmd.code == 51001 and not cmd.is_response
    assert json.loads(cmd.body) == vote().to_json()
    answer = VoteResponse.for_request(vote(), 3, VoteResult.ACCEPT)
    reply = RemotingCommand(code=200, opaque=cmd.opaque, flag=1, body=answer.to_json_bytes())
    proto.dataReceived(encode(reply))
    ((peer, request, response, _now),) = node.responses
    assert peer == "n1" and response.voteResult == VoteResult.ACCEPT
    reactor.advance(10)  # the timeout was cancelled: no second answer
    assert len(node.responses) == 1 and not reactor.getDelayedCalls()


def test_no_answer_within_the_rpc_timeout_is_a_network_error():
    reactor, node, svc = service()
    svc.send("n1", HeartBeatRequest(group="g", remoteId="n1", localId="n0", leaderId="n0", term=2))
    connect(reactor)
    reactor.advance(2.999)
    assert node.responses == []
    reactor.advance(0.002)
    ((_peer, _req, response, now),) = node.responses
    assert isinstance(response, HeartBeatResponse) and response.code == ResponseCode.NETWORK_ERROR
    assert now == 3001.0


def test_a_refused_connection_answers_every_queued_request_at_once():
    reactor, node, svc = service()
    svc.send("n2", vote())
    svc.send("n2", vote(4))
    assert len(reactor.tcpClients) == 1  # one connection for both
    reactor.tcpClients[0][2].clientConnectionFailed(None, Failure(ConnectionRefusedError()))
    reactor.advance(0)  # ClientCreator's errback runs on the next turn
    assert [r[2].voteResult for r in node.responses] == [VoteResult.UNKNOWN, VoteResult.UNKNOWN]
    assert not reactor.getDelayedCalls()
    svc.send("n2", vote())  # and the next send connects again
    assert len(reactor.tcpClients) == 2


def test_a_dropped_connection_fails_its_requests():
    reactor, node, svc = service()
    svc.send("n1", vote())
    proto, _t = connect(reactor)
    proto.connectionLost(None)
    assert node.responses[0][2].voteResult == VoteResult.UNKNOWN and "n1" not in svc.conns


def test_persist_term_is_written_before_the_sends_after_it():
    events = []
    reactor, node, svc = service(events)
    svc.send("n1", vote(1))
    proto, transport = connect(reactor)
    real_send = proto.send
    proto.send = lambda cmd: (events.append(("send", cmd.code)), real_send(cmd))
    svc.run([PersistTerm(5, "n0"), Send("n1", vote(5)), Send("n1", vote(5))])
    assert events == [("persist", 5, "n0"), ("send", 51001), ("send", 51001)]


def test_requests_in_are_answered_with_their_opaque_or_refused():
    reactor, node, svc = service()
    svc.start()
    assert reactor.tcpServers[0][0] == 40911 and reactor.tcpServers[0][3] == "127.0.0.1"
    proto = reactor.tcpServers[0][1].buildProtocol(None)
    transport = StringTransport()
    proto.makeConnection(transport)
    req = vote()
    answer = VoteResponse.for_request(req, 3, VoteResult.REJECT_ALREADY_VOTED)
    node.next = [Reply(None, answer)]  # a reply to someone else's request goes nowhere

    def handle(request, now):
        node.requests.append(request)
        return [Reply(request, answer)]

    node.handle_request = handle
    proto.dataReceived(
        encode(RemotingCommand.request(51001, body=req.to_json_bytes(), opaque=77))
        + encode(RemotingCommand.request(12345, opaque=78))
        + encode(RemotingCommand.request(51001, body=b"{not json", opaque=79))
    )
    got = frames(transport)
    assert [(c.opaque, c.code, c.is_response) for c in got] == [
        (77, 200, True),
        (78, RemotingCode.REQUEST_CODE_NOT_SUPPORTED, True),
        (79, RemotingCode.SYSTEM_ERROR, True),
    ]
    assert json.loads(got[0].body)["voteResult"] == answer.to_json()["voteResult"]
    assert node.requests[0].term == 3
    svc.stop()


def test_ticks_and_flushes_run_on_the_clock():
    events = []
    reactor, node, svc = service(events)
    svc.start(listen=False)
    reactor.advance(0.01)
    reactor.advance(0.01)
    assert node.ticks == [10.0, 20.0] and events == []  # nothing written: no fsync
    svc.store.dirty = True
    reactor.advance(0.01)
    assert events == [("flush",)]
    svc.stop()


def test_a_real_node_on_a_file_store_asks_for_votes_after_its_timeout(tmp_path):
    reactor = MemoryReactorClock()
    config = DLedgerConfig(group="g", selfId="n0", peers=PEERS)
    store = FileStore(str(tmp_path), "n0", data_file_size=4096, index_file_size=320)
    node = DLedgerNode(config, store, rng=random.Random(1))
    svc = DLedgerService(node, store, reactor=reactor)
    svc.start(listen=False)
    for _ in range(300):  # 3 s of 10 ms ticks
        reactor.advance(0.01)
    assert node.role == "CANDIDATE" and store.load_term() == (node.term, "n0")  # its own vote, on disk
    assert sorted(c[1] for c in reactor.tcpClients) == [40912, 40913]
    svc.stop()
