"""What `make fuzz` (fuzz/dledger_rpc.py, fuzz/dledger_entry.py) found in DLedger, each as a regression test."""

import random

import pytest
from twisted.internet.testing import MemoryReactorClock, StringTransport

from rmqha.broker.dledger.config import DLedgerConfig
from rmqha.broker.dledger.effects import AppendDone, Reply
from rmqha.broker.dledger.entry import DLedgerEntry, encode_blank, encode_entry, set_index_term
from rmqha.broker.dledger.file_store import FileStore, offset_to_file_name
from rmqha.broker.dledger.node import DLedgerNode
from rmqha.broker.dledger.protocol import (
    PushEntryRequest,
    PushType,
    ResponseCode,
    VoteRequest,
    VoteResponse,
    VoteResult,
)
from rmqha.broker.dledger.replication import MemoryLog
from rmqha.broker.dledger.transport import DLedgerService, _Conn
from rmqha.broker.remoting.codec import encode
from rmqha.broker.remoting.command import RemotingCommand

from .test_transport import StubNode, StubStore, connect

PEERS = "n0-127.0.0.1:40911;n1-127.0.0.1:40912;n2-127.0.0.1:40913"


def follower(term=3, entries=3):
    log = MemoryLog()
    for i in range(entries):
        log.append_as_leader(b"e%d" % i, term)
    node = DLedgerNode(DLedgerConfig(group="g", selfId="n0", peers=PEERS), log, rng=random.Random(0), term=term)
    node.elector.change_role_to_follower(term, "n1", 0.0)
    node._drain()
    return node, log


def push(type_, entry, term=3):
    return PushEntryRequest(
        group="g", remoteId="n0", localId="n1", leaderId="n1", term=term, type=type_, entry=entry, commitIndex=-1
    )


def entry(index, body=b"x", magic=1, term=3):
    e = DLedgerEntry(body=body, index=index, term=term, pos=50 * index, magic=magic)
    e.compute_size()
    return e


@pytest.mark.fast
@pytest.mark.parametrize("type_", [PushType.COMPARE, PushType.TRUNCATE, PushType.APPEND])
def test_a_pushed_entry_without_a_body_is_refused_not_raised(type_):
    # Found by fuzz dledger_rpc: a COMPARE whose entry had no "body" raised TypeError in
    # DLedgerEntry.__eq__ (bytes(None)) inside the follower's handler; an APPEND one in the log's copy.
    node, log = follower()
    bad = entry(2 if type_ != PushType.APPEND else 3)
    bad.body = None
    request = push(type_, bad)
    effects = node.handle_request(request, 10.0)
    (reply,) = [e for e in effects if isinstance(e, Reply)]
    assert reply.to is request and reply.response.code == ResponseCode.UNEXPECTED_ARGUMENT
    assert log.end_index == 2


@pytest.mark.fast
def test_a_pushed_entry_with_an_unknown_magic_is_not_stored():
    # Found by fuzz dledger_rpc: an APPEND with magic 0 was stored and acknowledged; the file store's
    # recovery stops at an unknown magic, so a restart would have dropped an acknowledged entry.
    node, log = follower()
    request = push(PushType.APPEND, entry(3, magic=0))
    effects = node.handle_request(request, 10.0)
    (reply,) = [e for e in effects if isinstance(e, Reply)]
    assert reply.response.code == ResponseCode.UNEXPECTED_ARGUMENT
    assert log.end_index == 2
    good = push(PushType.APPEND, entry(3))
    node.handle_request(good, 20.0)
    assert log.end_index == 3 and log.get(3).magic == 1


@pytest.mark.fast
def test_a_leader_that_steps_down_still_times_out_its_appends():
    # Found by fuzz dledger_rpc: an append pending on a leader that lost its quorum and stepped down
    # was never answered (pending acks were checked only as leader), so a broker's put waited for ever.
    log = MemoryLog()
    node = DLedgerNode(DLedgerConfig(group="g", selfId="n0", peers=PEERS), log, rng=random.Random(0), term=3)
    node.elector.change_role_to_leader(3, lease_from=0.0)
    node._drain()
    token = object()
    assert not [e for e in node.append(b"m", token, 0.0) if isinstance(e, AppendDone)]
    node.elector.change_role_to_candidate(3)
    assert node.role == "CANDIDATE"
    assert not [e for e in node.tick(2499.0) if isinstance(e, AppendDone)]  # not before its deadline
    (done,) = [e for e in node.tick(2500.0) if isinstance(e, AppendDone)]
    assert done.token is token and done.response.code == ResponseCode.WAIT_QUORUM_ACK_TIMEOUT
    assert done.response.index == 0 and not [e for e in node.tick(5000.0) if isinstance(e, AppendDone)]


@pytest.mark.fast
def test_a_response_on_the_listening_port_is_not_a_peers_answer():
    # Found by fuzz dledger_rpc: responses were matched by opaque on any connection, so anyone who can
    # reach the DLedger port could answer this node's vote requests (opaques count from 1) with ACCEPT.
    reactor = MemoryReactorClock()
    node = StubNode()
    svc = DLedgerService(node, StubStore([]), reactor=reactor)
    request = VoteRequest(group="g", remoteId="n1", localId="n0", leaderId="n0", term=3)
    svc.send("n1", request)
    proto, _transport = connect(reactor)
    forged = VoteResponse.for_request(request, 3, VoteResult.ACCEPT)
    cmd = RemotingCommand(code=200, opaque=1, flag=1, body=forged.to_json_bytes())
    inbound = _Conn(svc, None)
    inbound.makeConnection(StringTransport())
    inbound.dataReceived(encode(cmd))
    assert node.responses == [] and 1 in svc.pending
    proto.dataReceived(encode(cmd))  # the same answer from n1's own connection counts
    ((peer, req, response, _now),) = node.responses
    assert peer == "n1" and req is request and response.voteResult == VoteResult.ACCEPT


@pytest.mark.fast
def test_recovery_of_a_first_data_file_that_begins_with_a_blank(tmp_path):
    # Found by fuzz dledger_entry: recovery walked over a blank at the log's first byte into the next
    # file, then read the begin index at that first byte with a strict decode, which raised
    # EntryFormatError out of FileStore(): a node with such a file could not start.
    fs = FileStore(str(tmp_path), "n0", data_file_size=512, index_file_size=32 * 16)
    for i in range(4):  # 148-byte entries: three in the first file, the fourth in the second
        fs.append_as_leader(bytes([65 + i]) * 100, 1)
    fs.close()
    first = tmp_path / "dledger-n0" / "data" / offset_to_file_name(0)
    with open(first, "r+b") as f:
        f.write(encode_blank(512)[:8])
    again = FileStore(str(tmp_path), "n0", data_file_size=512, index_file_size=32 * 16)
    assert (again.begin_index, again.end_index) == (3, 3)
    assert again.get(3).body == b"D" * 100
    again.release()


@pytest.mark.fast
@pytest.mark.parametrize("type_", [PushType.APPEND, PushType.TRUNCATE])
def test_a_pushed_entry_from_a_later_term_than_the_push_is_refused(type_):
    # Caught by fuzz dledger_rpc's log oracle (an input with the entry's term edited): a follower in
    # term 3 stored an entry of term 9; once it led term 4 its own entries would follow with a lower
    # term, and the file store's recovery stops where terms fall, cutting acknowledged entries.
    node, log = follower()
    request = push(type_, entry(3 if type_ == PushType.APPEND else 2, term=9))
    effects = node.handle_request(request, 10.0)
    (reply,) = [e for e in effects if isinstance(e, Reply)]
    assert reply.response.code == ResponseCode.UNEXPECTED_ARGUMENT
    assert (log.end_index, log.end_term) == (2, 3)


@pytest.mark.fast
@pytest.mark.parametrize("index", [-(2**48), 2**61])
def test_a_stored_entry_whose_index_is_negative_or_unaddressable_ends_recovery(tmp_path, index):
    # Found by fuzz dledger_entry (2026-11-28): a data file whose first entry claimed index -2**48 made the
    # store's start raise DLedgerError INDEX_OUT_OF_RANGE; one whose index slot lay past a signed 64-bit
    # position raised struct.error writing the durable positions. Both are garbage: the walk stops there.
    data = tmp_path / "dledger-n0" / "data"
    data.mkdir(parents=True)
    (tmp_path / "dledger-n0" / "index").mkdir()
    e = DLedgerEntry(body=b"x", index=0, term=1, pos=0, magic=1)
    e.compute_size()
    raw = bytearray(encode_entry(e))
    set_index_term(raw, index, 1, 1)
    (data / offset_to_file_name(0)).write_bytes(bytes(raw) + bytes(4096 - len(raw)))
    store = FileStore(str(tmp_path), "n0", data_file_size=4096, index_file_size=4096)
    try:
        assert store.end_index == -1  # nothing trustworthy was kept
        assert store.append_as_leader(b"after", 1).index == 0
    finally:
        store.release()
