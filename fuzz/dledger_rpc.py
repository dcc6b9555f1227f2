"""Target: what a peer sends to the DLedger port, through the same path a real connection takes.

One DLedgerService (rmqha/broker/dledger/transport.py) on a memory reactor whose clock is the only time,
its node n0 of group g set up by the first input bytes (role, term, a short log, a memory or a file
store, a few config switches), then its listening connection fed chunks of bytes with the clock moved
between them: frames (requests of every DLedger code, and responses), cut anywhere. Afterwards the
clock runs on until every timer that can answer has fired.

Input: role byte (candidate, follower of n1, leader), flags byte (file store, acceptRemoteAppend,
preferredLeaderIds=n0, 0.3.1.2's rules), term byte, log-length byte, committed byte, then up to 16
chunks of (clock step byte in 20 ms units, 2-byte length, bytes).

Contract:
* nothing but the declared decode errors: a FrameError drops the connection, a body that is not the
  request's JSON is answered SYSTEM_ERROR "bad DLedger request"; the core never raises (the driver
  would answer SYSTEM_ERROR with the exception and log it), no effect or timer loop fails;
* every request is answered once with its opaque: code 200 and a body that decodes as that request's
  response (its `code` may be any int: DLedger's copyBaseInfo echoes the request's), or REQUEST_CODE_NOT_SUPPORTED for a code DLedger does not have, or the bad-request
  refusal. A push APPEND may stay unanswered, as in 0.3.1.2: the follower drops buffered appends on a
  COMPARE or TRUNCATE and holds them while it is not a follower, and the leader resends after
  maxPushTimeOutMs. A take-leadership request the node acted on is answered on its next role change,
  which may not come with no peers. No request is answered twice;
* a response arriving on the listening connection is not taken as a peer's answer (in Java it lands
  in the server's own response table, where nothing waits);
* the persisted state stays writable and readable: every currterm write has a term in [0, 2^63) that
  never goes down and a vote that is a configured peer and never changes within a term; the log's
  entries encode, decode back equal, have consecutive indexes and terms that never fall or pass the
  node's term; a file store reopened (recovered) afterwards holds the same entries, term and vote.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import tempfile
from collections import Counter

from twisted.internet.testing import MemoryReactorClock, StringTransport

from rmqha.broker.dledger.config import DLedgerConfig, Rules
from rmqha.broker.dledger.effects import PersistTerm
from rmqha.broker.dledger.entry import decode_entry, encode_entry
from rmqha.broker.dledger.file_store import FileStore
from rmqha.broker.dledger.node import DLedgerNode
from rmqha.broker.dledger.protocol import (
    ProtocolError,
    PushType,
    RequestCode,
    ResponseCode,
    decode_response,
)
from rmqha.broker.dledger.replication import MemoryLog
from rmqha.broker.dledger.transport import DLedgerService, _Conn
from rmqha.broker.remoting.codec import FrameDecoder
from rmqha.broker.remoting.codes import ResponseCode as RemotingCode
from fuzz.provider import Input

GROUP = "g"
PEERS = "n0-127.0.0.1:40911;n1-127.0.0.1:40912;n2-127.0.0.1:40913"
IDS = ("n0", "n1", "n2")
DATA_FILE, INDEX_FILE = 1024, 32 * 16
ROLES = ("CANDIDATE", "FOLLOWER", "LEADER")
MAX_CHUNKS = 16
SMOKE_INPUTS = 200  # tests/unit/test_fuzz_smoke.py: each input runs a node for seconds of fake time
SHM = "/dev/shm" if os.path.isdir("/dev/shm") else None


class MemStore(MemoryLog):
    """MemoryLog with the store calls the driver makes."""

    dirty = False

    def persist_term(self, term, vote_for) -> None:
        pass

    def persist_checkpoint(self) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


class _Errors(logging.Handler):
    """Collects the exceptions the driver logs and swallows (a failed request, effect or loop)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.found: list[BaseException] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and record.exc_info[1] is not None:
            self.found.append(record.exc_info[1])


_log = logging.getLogger("rmqha.broker.dledger")
_log.propagate = False
_log.setLevel(logging.ERROR)
_errors = _Errors()
_log.addHandler(_errors)


def check_log(log, term: int) -> list:
    entries = log.entries()
    for i, e in enumerate(entries):
        again = decode_entry(encode_entry(e.copy()))
        assert again == e, f"entry {e.index} does not read back as written"
        if i:
            prev = entries[i - 1]
            assert e.index == prev.index + 1, f"indexes {prev.index} then {e.index}"
            assert e.term >= prev.term, f"terms fall: {prev.term} then {e.term} at {e.index}"
    if entries:
        assert entries[0].index == log.begin_index and entries[-1].index == log.end_index
        assert log.end_term <= term, f"an entry of term {log.end_term} in a node of term {term}"
    assert log.committed_index <= log.end_index
    return entries


def TestOneInput(data: bytes) -> None:
    inp = Input(data)
    role = ROLES[inp.byte() % 3]
    flags = inp.byte()
    term = inp.byte()
    n_log = inp.byte() % 8
    committed = inp.byte()
    config = DLedgerConfig(
        group=GROUP,
        selfId="n0",
        peers=PEERS,
        acceptRemoteAppend=bool(flags & 2),
        preferredLeaderIds="n0" if flags & 4 else None,
    )
    rules = Rules.dledger_0312() if flags & 8 else Rules()
    folder = tempfile.mkdtemp(prefix="fuzz-dledger-", dir=SHM) if flags & 1 else None
    try:
        if folder:
            store = FileStore(folder, "n0", data_file_size=DATA_FILE, index_file_size=INDEX_FILE)
        else:
            store = MemStore()
        for i in range(n_log):
            store.append_as_leader(b"e%d" % i, max(0, term - (n_log - i) // 2))
        store.set_committed_index(min(committed % 9 - 1, store.end_index))
        run(inp, config, rules, store, role, term, folder)
    finally:
        _errors.found.clear()
        if folder:
            shutil.rmtree(folder, ignore_errors=True)


def run(inp: Input, config, rules, store, role: str, term: int, folder) -> None:
    node = DLedgerNode(config, store, rng=random.Random(0), term=term, rules=rules)
    if role == "FOLLOWER":
        node.elector.change_role_to_follower(term, "n1", 0.0)
    elif role == "LEADER":
        node.elector.change_role_to_leader(term, lease_from=0.0)
    node._drain()
    reactor = MemoryReactorClock()
    writes: list[PersistTerm] = []

    def on_effect(eff) -> None:
        if isinstance(eff, PersistTerm):
            writes.append(eff)

    service = DLedgerService(node, store, reactor=reactor, on_effect=on_effect)
    requests: list = []  # [opaque, code, the decoded request the node was given]
    feeding = [False]
    on_request, handle_request, on_response = service._on_request, node.handle_request, node.on_response

    def record_request(conn, cmd) -> None:
        requests.append([cmd.opaque, cmd.code, None])
        on_request(conn, cmd)

    def record_handled(request, now):
        requests[-1][2] = request
        return handle_request(request, now)

    def guarded_response(peer, request, response, now):
        assert not feeding[0], "a response on the listening connection was taken as a peer's answer"
        return on_response(peer, request, response, now)

    service._on_request = record_request
    node.handle_request = record_handled
    node.on_response = guarded_response
    service.start(listen=False)
    conn = _Conn(service, None)
    tr = StringTransport()
    conn.makeConnection(tr)
    for _ in range(MAX_CHUNKS):
        if not inp.remaining or tr.disconnecting:
            break
        reactor.advance(inp.byte() * 0.02)
        chunk = inp.take(inp.uint(2))
        feeding[0] = True
        try:
            conn.dataReceived(chunk)
        finally:
            feeding[0] = False
    for step in (1.1, 2.0, 3.1):  # past leadershipTransferWaitTimeout, maxWaitAckTimeMs, rpcTimeoutMs
        reactor.advance(step)
    if _errors.found:
        raise _errors.found[0]
    assert service.stats["effect_errors"] == 0 and service.stats["loop_errors"] == 0, service.stats
    check_answers([(op, code, may_wait(r, node)) for op, code, r in requests], tr.value())
    check_persisted(writes, node)
    entries = check_log(store, node.term)
    if folder:
        service.stop()  # flushes, checkpoints, closes
        again = FileStore(folder, "n0", data_file_size=DATA_FILE, index_file_size=INDEX_FILE)
        try:
            assert again.entries() == entries, "the reopened store does not hold the same entries"
            if writes:
                assert again.load_term() == (writes[-1].term, writes[-1].vote_for), "currterm reads back different"
        finally:
            again.release()
    else:
        service.stop()


def may_wait(request, node: DLedgerNode) -> bool:
    """Requests whose answer may not come (module docstring): a push APPEND, and the take-leadership
    request a transferee acted on, which is answered on its next role change (as in 0.3.1.2)."""
    if request is None:
        return False
    if getattr(request, "type", None) == PushType.APPEND:
        return True
    return any(request is r for r in node.elector.taking_leadership)


def check_answers(requests: list, written: bytes) -> None:
    codes: dict[int, list[int]] = {}  # a peer may reuse an opaque: each answer must fit one of its requests
    for op, code, _ in requests:
        codes.setdefault(op, []).append(code)
    asked = Counter(op for op, _, _ in requests)
    must = Counter(op for op, _, exempt in requests if not exempt)
    answered: Counter = Counter()
    for cmd in FrameDecoder().feed(written):
        if not cmd.is_response:
            continue  # the driver's own requests go out on other connections
        op = cmd.opaque
        answered[op] += 1
        assert op in codes, f"an answer with opaque {op} that no request had"
        asked_codes = codes[op]
        if cmd.code == ResponseCode.SUCCESS:
            readable = []
            for code in asked_codes:
                try:
                    decode_response(code, cmd.body)
                    readable.append(code)
                except ProtocolError:
                    pass
            assert readable, f"an answer to {asked_codes} that no peer can read"
        elif cmd.code == RemotingCode.REQUEST_CODE_NOT_SUPPORTED:
            known = RequestCode.__members__.values()
            assert any(c not in known for c in asked_codes), f"{asked_codes} refused as unsupported"
        else:
            assert cmd.code == RemotingCode.SYSTEM_ERROR and (cmd.remark or "").startswith("bad DLedger request"), (
                f"request {asked_codes} answered {cmd.code} {cmd.remark!r}"
            )
    for op, n in asked.items():
        assert answered[op] <= n, f"opaque {op}: {answered[op]} answers to {n} requests"
        assert answered[op] >= must[op], f"opaque {op}: {must[op]} requests, {answered[op]} answers"


def check_persisted(writes: list[PersistTerm], node: DLedgerNode) -> None:
    last_term, votes = 0, {}
    for w in writes:
        assert isinstance(w.term, int) and 0 <= w.term < 1 << 63, f"term {w.term!r} written"
        assert w.term >= last_term, f"term went down: {last_term} -> {w.term}"
        assert w.vote_for is None or w.vote_for in IDS, f"a vote for {w.vote_for!r}"
        if w.vote_for is not None:
            assert votes.setdefault(w.term, w.vote_for) == w.vote_for, f"two votes in term {w.term}"
        last_term = w.term
    assert node.term >= last_term
