"""Log replication, IO-free: DLedgerEntryPusher of dledger 0.3.1.2 (EntryDispatcher, QuorumAckChecker,
EntryHandler) over a log interface that an in-memory log implements here and a file store later.

The leader keeps one dispatcher per follower, in one of three states (PushEntryRequest.Type):

    COMPARE --> TRUNCATE --> APPEND (--> COMMIT when idle)
       ^                       |
       +------ INCONSISTENT ---+

COMPARE sends the leader's entry at compareIndex (its end index first) and walks back until the
follower has the same entry (DLedgerEntry.equals); then, if the follower has more, TRUNCATE makes
the follower cut its log after that entry; APPEND pushes the entries one a request, each with the
leader's committed index; an idle dispatcher sends a pure COMMIT once a second. A follower's
SUCCESS moves its watermark (per term); the committed index is the quorum's watermark: the
watermarks of the current term sorted descending, element n // 2. Client appends complete when
their index is within it, or time out after maxWaitAckTimeMs (WAIT_QUORUM_ACK_TIMEOUT), or end
with TERM_CHANGED.

The follower buffers APPENDs by index and appends the one at its end + 1 (term and leader must be
the current ones, the index the next one); COMPARE, TRUNCATE and COMMIT go first, in order; a
COMPARE or TRUNCATE drops the buffered APPENDs. Once a second it answers buffered APPENDs it
already has (SUCCESS if equal) and fails the oldest one that has waited over a second for a gap.

`Rules` (rmqha.broker.dledger.config) holds the places where this core is stricter than 0.3.1.2; those of
replication, each unsafe in 0.3.1.2 (tests/unit/dledger/test_raft_properties.py shows the checker
catching each):
* commit_rule "raft": the leader moves its committed index only onto an entry of its own term
  (0.3.1.2, "dledger", commits whatever the quorum watermark reaches, Raft's Figure 8);
* follower_compare_checks_term: a follower answers COMPARE only in the leader's term, following
  that leader (0.3.1.2 compares whatever term it is in, so a later COMMIT can cover entries another
  leader wrote after the compare);
* follower_commit_needs_term: a follower takes a committed index only from its current term's
  leader (0.3.1.2 takes it from any term not below its own);
* fresh_compare_per_term: a new term's dispatcher starts comparing at the leader's end (0.3.1.2
  keeps the compareIndex a dispatcher had reached when it lost an earlier leadership in COMPARE
  state; a SUCCESS there then TRUNCATEs the follower after it, committed entries included).
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import DLedgerConfig, Rules
from .effects import AppendDone, Committed, Reply, Send
from .election import FOLLOWER, LEADER, NEVER, MemberState
from .entry import CURRENT_MAGIC, DLedgerEntry
from .protocol import (
    AppendEntryResponse,
    DLedgerError,
    check_index,
    PushEntryRequest,
    PushEntryResponse,
    PushType,
    ResponseCode,
)


class MemoryLog:
    """The log interface (DLedgerStore's part the protocol needs), in memory.

    A file store implements the same: begin_index, end_index, end_term, committed_index, get,
    append_as_leader, append_as_follower, truncate, set_committed_index. Entries are copied in and
    out, so nothing outside can change what is stored.
    """

    def __init__(self, base_pos: int = 0):
        self.base_pos = base_pos
        self._entries: list[DLedgerEntry] = []
        self.begin_index = -1
        self.committed_index = -1

    @property
    def end_index(self) -> int:
        return self._entries[-1].index if self._entries else -1

    @property
    def end_term(self) -> int:
        return self._entries[-1].term if self._entries else -1

    def _next_pos(self) -> int:
        if not self._entries:
            return self.base_pos
        last = self._entries[-1]
        return last.pos + last.size

    def entries(self) -> list[DLedgerEntry]:
        return [e.copy() for e in self._entries]

    def get(self, index: int) -> DLedgerEntry:
        check_index(index, self.begin_index, self.end_index)
        return self._entries[index - self.begin_index].copy()

    def append_as_leader(self, body: bytes, term: int) -> DLedgerEntry:
        entry = DLedgerEntry(
            body=bytes(body), index=self.end_index + 1, term=term, pos=self._next_pos(), magic=CURRENT_MAGIC
        )
        entry.compute_size()
        self._store(entry)
        return entry.copy()

    def append_as_follower(self, entry: DLedgerEntry) -> DLedgerEntry:
        if entry.index != self.end_index + 1:
            raise DLedgerError(ResponseCode.INCONSISTENT_INDEX, f"{entry.index} != {self.end_index + 1}")
        if self._entries and entry.pos < self._next_pos():
            raise DLedgerError(ResponseCode.DISK_ERROR, f"pos {entry.pos} < {self._next_pos()}")
        if self._entries and entry.term < self.end_term:
            raise DLedgerError(ResponseCode.DISK_ERROR, f"term {entry.term} < {self.end_term}")
        stored = entry.copy()
        stored.compute_size()
        self._store(stored)
        return stored.copy()

    def _store(self, entry: DLedgerEntry) -> None:
        self._entries.append(entry)
        if self.begin_index == -1:
            self.begin_index = entry.index

    def truncate(self, entry: DLedgerEntry) -> int:
        """DLedgerMmapFileStore.truncate: keep the log up to `entry` (writing it if it differs)."""
        try:
            existed = self.get(entry.index) == entry
        except DLedgerError:
            existed = False
        keep = entry.index + 1 if existed else entry.index
        if self._entries:
            del self._entries[max(0, keep - self.begin_index) :]
        if not existed:
            if self._entries and entry.index != self.end_index + 1:
                self._entries.clear()  # no overlap: the log restarts at the leader's entry
            stored = entry.copy()
            stored.compute_size()
            self._entries.append(stored)
            self.begin_index = self._entries[0].index
        if self.committed_index > self.end_index:
            self.committed_index = self.end_index
        return entry.index

    def set_committed_index(self, index: int) -> None:
        self.committed_index = index


def update_committed_index(
    ms: MemberState, log, term: int, new: int, rules: Rules, effects: list, *, as_leader: bool
) -> None:
    """DLedgerMmapFileStore.updateCommittedIndex, with the Raft commit rule for a leader."""
    if new == -1 or log.end_index == -1 or term < ms.term or new == log.committed_index:
        return
    if new < log.committed_index or new < log.begin_index:
        return
    new = min(new, log.end_index)
    if new <= log.committed_index:
        return
    if as_leader and rules.commit_rule == "raft" and log.get(new).term != ms.term:
        return
    old = log.committed_index
    log.set_committed_index(new)
    effects.append(Committed(old, new))


class _Dispatcher:
    """EntryDispatcher: the leader's push state for one follower."""

    def __init__(self, peer: str):
        self.peer = peer
        self.type = PushType.COMPARE
        self.compare_index = -1
        self.write_index = -1
        self.term = -1
        self.leader_id = None
        self.pending: dict[int, float] = {}  # index -> when its APPEND was sent
        self.last_push_commit = NEVER
        self.last_check_leak = NEVER
        self.inflight: PushEntryRequest | None = None  # the COMPARE or TRUNCATE awaiting its answer
        self.inflight_deadline = 0
        self.backoff_until = NEVER


@dataclass
class _PendingAppend:
    to: object  # who to answer: a token (AppendDone) or an AppendEntryRequest (Reply)
    reply: bool
    deadline: float
    pos: int


class EntryPusher:
    """The leader's half: dispatchers, watermarks, the quorum ack checker, pending client appends."""

    def __init__(self, config: DLedgerConfig, ms: MemberState, log, rules: Rules):
        self.config = config
        self.ms = ms
        self.log = log
        self.rules = rules
        self.dispatchers = {p: _Dispatcher(p) for p in ms.other_peers()}
        self.watermarks: dict[int, dict[str, int]] = {}
        self.pending_acks: dict[int, dict[int, _PendingAppend]] = {}
        self.last_check_leak = NEVER

    # --- watermarks ------------------------------------------------------------------------------
    def _marks(self, term: int) -> dict[str, int]:
        marks = self.watermarks.get(term)
        if marks is None:
            marks = self.watermarks[term] = {p: -1 for p in self.ms.peer_map}
        return marks

    def update_watermark(self, term: int, peer: str, index: int) -> None:
        marks = self._marks(term)
        if marks[peer] < index:
            marks[peer] = index

    def watermark(self, term: int, peer: str) -> int:
        return self._marks(term)[peer]

    # --- client appends (DLedgerServer.handleAppend + waitAck) ------------------------------------
    def append(self, body: bytes, to, reply: bool, now: float) -> None:
        ms, effects = self.ms, self.ms.effects
        if ms.role != LEADER:
            raise DLedgerError(ResponseCode.NOT_LEADER)
        if ms.transferee is not None:
            raise DLedgerError(ResponseCode.LEADER_TRANSFERRING)
        term = ms.term
        pending = self.pending_acks.setdefault(term, {})
        if len(pending) > self.config.maxPendingRequestsNum:
            resp = AppendEntryResponse(
                group=ms.group, code=ResponseCode.LEADER_PENDING_FULL, term=term, leaderId=ms.self_id
            )
            effects.append(Reply(to, resp) if reply else AppendDone(to, resp))
            return
        entry = self.log.append_as_leader(body, term)
        self.update_watermark(term, ms.self_id, entry.index)
        pending[entry.index] = _PendingAppend(to, reply, now + self.config.maxWaitAckTimeMs, entry.pos)
        self.work(now)

    def append_batch(self, bodies: list[bytes], to, now: float) -> list[int]:
        """DLedgerServer.handleAppend of a BatchAppendEntryRequest (what 4.9's DLedgerCommitLog sends for a
        batch of messages): one entry per body, one pending ack, on the last entry ("only wait last entry
        ack"); the entries' positions, or [] when it was refused at once (an AppendDone to `to`)."""
        ms, effects = self.ms, self.ms.effects
        if ms.role != LEADER:
            raise DLedgerError(ResponseCode.NOT_LEADER)
        if ms.transferee is not None:
            raise DLedgerError(ResponseCode.LEADER_TRANSFERRING)
        if not bodies:
            raise DLedgerError(ResponseCode.REQUEST_WITH_EMPTY_BODYS, "BatchAppendEntryRequest with empty bodys")
        term = ms.term
        pending = self.pending_acks.setdefault(term, {})
        if len(pending) > self.config.maxPendingRequestsNum:
            effects.append(
                AppendDone(
                    to,
                    AppendEntryResponse(
                        group=ms.group, code=ResponseCode.LEADER_PENDING_FULL, term=term, leaderId=ms.self_id
                    ),
                )
            )
            return []
        positions = []
        for body in bodies:
            entry = self.log.append_as_leader(body, term)
            positions.append(entry.pos)
        self.update_watermark(term, ms.self_id, entry.index)
        pending[entry.index] = _PendingAppend(to, False, now + self.config.maxWaitAckTimeMs, entry.pos)
        self.work(now)
        return positions

    def _complete(self, p: _PendingAppend, resp: AppendEntryResponse) -> None:
        self.ms.effects.append(Reply(p.to, resp) if p.reply else AppendDone(p.to, resp))

    # --- QuorumAckChecker ------------------------------------------------------------------------
    def check_quorum(self, now: float) -> None:
        ms = self.ms
        if ms.role != LEADER:
            self._expire(now)
            return
        term = ms.term
        for t in [t for t in self.pending_acks if t != term]:
            for index, p in sorted(self.pending_acks.pop(t).items()):
                self._complete(
                    p,
                    AppendEntryResponse(
                        group=ms.group, index=index, code=ResponseCode.TERM_CHANGED, leaderId=ms.leader_id
                    ),
                )
        for t in [t for t in self.watermarks if t != term]:
            del self.watermarks[t]
        if now - self.last_check_leak > self.config.leakCheckIntervalMs:
            self.update_watermark(term, ms.self_id, self.log.end_index)
            self.last_check_leak = now
        marks = sorted(self._marks(term).values(), reverse=True)
        quorum_index = marks[len(marks) // 2]
        update_committed_index(ms, self.log, term, quorum_index, self.rules, ms.effects, as_leader=True)
        pending = self.pending_acks.setdefault(term, {})
        if not pending:
            return
        for index in sorted(pending):
            p = pending[index]
            if index <= quorum_index:
                del pending[index]
                self._complete(
                    p, AppendEntryResponse(group=ms.group, term=term, index=index, leaderId=ms.self_id, pos=p.pos)
                )
            elif now >= p.deadline:
                del pending[index]
                self._complete(
                    p,
                    AppendEntryResponse(
                        group=ms.group,
                        code=ResponseCode.WAIT_QUORUM_ACK_TIMEOUT,
                        term=term,
                        index=index,
                        leaderId=ms.self_id,
                    ),
                )
            else:
                break

    def _expire(self, now: float) -> None:
        """Ours: a leader that stepped down still times out its appends at their deadline (0.3.1.2 checks
        them only as leader, so they wait for its next leadership, and a broker's put for ever)."""
        for t, pending in self.pending_acks.items():
            for index in [i for i, p in sorted(pending.items()) if now >= p.deadline]:
                p = pending.pop(index)
                self._complete(
                    p,
                    AppendEntryResponse(
                        group=self.ms.group,
                        code=ResponseCode.WAIT_QUORUM_ACK_TIMEOUT,
                        term=t,
                        index=index,
                        leaderId=self.ms.leader_id,
                    ),
                )

    # --- EntryDispatcher -------------------------------------------------------------------------
    def work(self, now: float) -> None:
        if self.ms.role != LEADER or not self.config.enablePushToFollower:
            self.check_quorum(now)
            return
        for d in self.dispatchers.values():
            self._dispatch(d, now)
        self.check_quorum(now)

    def _fresh(self, d: _Dispatcher) -> bool:
        ms = self.ms
        if ms.role != LEADER:
            return False
        if d.term != ms.term or d.leader_id != ms.leader_id:
            d.term, d.leader_id = ms.term, ms.self_id
            d.inflight = None
            d.backoff_until = NEVER
            self._change_state(d, -1, PushType.COMPARE)
            if self.rules.fresh_compare_per_term:
                d.compare_index = -1
        return True

    def _dispatch(self, d: _Dispatcher, now: float) -> None:
        if not self._fresh(d) or now < d.backoff_until:
            return
        if d.type == PushType.APPEND:
            self._do_append(d, now)
        else:
            self._do_compare(d, now)

    def _push(self, d: _Dispatcher, entry, type_: PushType) -> PushEntryRequest:
        ms = self.ms
        req = PushEntryRequest(
            group=ms.group,
            remoteId=d.peer,
            leaderId=d.leader_id,
            localId=ms.self_id,
            term=d.term,
            entry=entry,
            type=type_,
            commitIndex=self.log.committed_index,
        )
        ms.effects.append(Send(d.peer, req))
        return req

    def _change_state(self, d: _Dispatcher, index: int, target: PushType) -> None:
        if target == PushType.APPEND:
            d.compare_index = -1
            self.update_watermark(d.term, d.peer, index)
            d.write_index = index + 1
        elif target == PushType.COMPARE:
            if d.type == PushType.APPEND:
                d.compare_index = -1
                d.pending.clear()
        elif target == PushType.TRUNCATE:
            d.compare_index = -1
        d.type = target

    def _error(self, d: _Dispatcher, now: float) -> None:
        """The Java dispatcher's catch: back to COMPARE, sleep 500 ms."""
        d.inflight = None
        self._change_state(d, -1, PushType.COMPARE)
        d.backoff_until = now + self.config.errorBackoffMs

    # APPEND
    def _do_append(self, d: _Dispatcher, now: float) -> None:
        c = self.config
        while d.type == PushType.APPEND:
            if d.write_index > self.log.end_index:
                self._do_commit(d, now)
                self._check_append_response(d, now)
                return
            if len(d.pending) >= c.maxPendingSize or now - d.last_check_leak > c.leakCheckIntervalMs:
                mark = self.watermark(d.term, d.peer)
                for index in [i for i in d.pending if i < mark]:
                    del d.pending[index]
                d.last_check_leak = now
            if len(d.pending) >= c.maxPendingSize:
                self._check_append_response(d, now)
                return
            self._append_inner(d, d.write_index, now)
            d.write_index += 1

    def _append_inner(self, d: _Dispatcher, index: int, now: float) -> None:
        try:
            entry = self.log.get(index)
        except DLedgerError as e:
            if e.code == ResponseCode.INDEX_LESS_THAN_LOCAL_BEGIN:
                self._change_state(d, -1, PushType.COMPARE)
                return
            raise
        self._push(d, entry, PushType.APPEND)
        d.pending[index] = now
        d.last_push_commit = now

    def _do_commit(self, d: _Dispatcher, now: float) -> None:
        if now - d.last_push_commit > self.config.commitPushIntervalMs:
            self._push(d, None, PushType.COMMIT)
            d.last_push_commit = now

    def _check_append_response(self, d: _Dispatcher, now: float) -> None:
        nxt = self.watermark(d.term, d.peer) + 1
        sent = d.pending.get(nxt)
        if sent is not None and now - sent > self.config.maxPushTimeOutMs:
            self._append_inner(d, nxt, now)

    # COMPARE / TRUNCATE
    def _do_compare(self, d: _Dispatcher, now: float) -> None:
        if d.inflight is not None:
            if now >= d.inflight_deadline:
                self._error(d, now)  # responseFuture.get(3, SECONDS) threw
            return
        if d.type != PushType.COMPARE:
            return
        log = self.log
        if d.compare_index == -1 and log.end_index == -1:
            return
        if d.compare_index == -1 or d.compare_index > log.end_index or d.compare_index < log.begin_index:
            d.compare_index = log.end_index
        d.inflight = self._push(d, log.get(d.compare_index), PushType.COMPARE)
        d.inflight_deadline = now + self.config.rpcTimeoutMs

    def on_push_response(self, peer: str, request: PushEntryRequest, response: PushEntryResponse, now: float) -> None:
        d = self.dispatchers.get(peer)
        if d is None:
            return
        if request.type == PushType.APPEND:
            if response.code == ResponseCode.SUCCESS:
                if response.index is not None:
                    d.pending.pop(response.index, None)
                    self.update_watermark(response.term, peer, response.index)
            elif response.code == ResponseCode.INCONSISTENT_STATE:
                self._change_state(d, -1, PushType.COMPARE)
        elif request.type in (PushType.COMPARE, PushType.TRUNCATE):
            if request is not d.inflight:
                return  # the Java dispatcher waited for this one and nothing else
            d.inflight = None
            if not self._fresh(d) or d.term != request.term:
                return
            if request.type == PushType.COMPARE:
                self._on_compare(d, request, response, now)
            else:
                self._on_truncate(d, request, response, now)
        # COMMIT answers are ignored, as in Java
        self.work(now)

    def _on_compare(self, d: _Dispatcher, request, response: PushEntryResponse, now: float) -> None:
        log = self.log
        if response.code not in (ResponseCode.SUCCESS, ResponseCode.INCONSISTENT_STATE):
            self._error(d, now)
            return
        truncate_index = -1
        if response.code == ResponseCode.SUCCESS:
            if d.compare_index == response.endIndex:
                self._change_state(d, d.compare_index, PushType.APPEND)
                return
            truncate_index = d.compare_index
        elif response.endIndex < log.begin_index or response.beginIndex > log.end_index:
            truncate_index = log.begin_index  # no overlap at all
        elif d.compare_index < response.beginIndex:
            truncate_index = log.begin_index
        elif d.compare_index > response.endIndex:
            d.compare_index = response.endIndex
        else:
            d.compare_index -= 1
        if d.compare_index < log.begin_index:
            truncate_index = log.begin_index
        if truncate_index != -1:
            self._change_state(d, truncate_index, PushType.TRUNCATE)
            d.inflight = self._push(d, log.get(truncate_index), PushType.TRUNCATE)
            d.inflight_deadline = now + self.config.rpcTimeoutMs

    def _on_truncate(self, d: _Dispatcher, request, response: PushEntryResponse, now: float) -> None:
        if response.code != ResponseCode.SUCCESS:
            self._error(d, now)
            return
        d.last_push_commit = now
        self._change_state(d, request.entry.index, PushType.APPEND)


class _Buffered:
    __slots__ = ("request", "arrived", "replied")

    def __init__(self, request, arrived):
        self.request, self.arrived, self.replied = request, arrived, False


class EntryHandler:
    """The follower's half: takes pushes in, appends in index order, answers."""

    QUEUE_CAPACITY = 1024

    def __init__(self, config: DLedgerConfig, ms: MemberState, log, rules: Rules):
        self.config = config
        self.ms = ms
        self.log = log
        self.rules = rules
        self.write_requests: dict[int, _Buffered] = {}
        self.queue: list[PushEntryRequest] = []  # COMPARE, TRUNCATE, COMMIT, in arrival order
        self.last_check_fast_forward = NEVER

    def _reply(self, request: PushEntryRequest, code: ResponseCode) -> None:
        log = self.log
        resp = PushEntryResponse(
            group=request.group, code=code, term=request.term, beginIndex=log.begin_index, endIndex=log.end_index
        )
        if request.type != PushType.COMMIT:
            resp.index = request.first_entry_index
            resp.count = request.count
        self.ms.effects.append(Reply(request, resp))

    def handle_push(self, request: PushEntryRequest, now: float) -> None:
        t = request.type
        for e in [request.entry, *request.batchEntry]:
            # ours: entries the store could not read back (recovery stops at an unknown magic, and at a
            # term that falls: an entry from a term after the leader's own would be followed by lower ones)
            if e is not None and (e.body is None or e.magic != CURRENT_MAGIC or e.term > request.term):
                raise DLedgerError(
                    ResponseCode.UNEXPECTED_ARGUMENT,
                    f"{t.name}: entry {e.index} has no body, its magic or a later term",
                )
        if t == PushType.APPEND:
            if request.entry is None and not request.batchEntry:
                raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, "APPEND without an entry")
            index = request.first_entry_index
            if index in self.write_requests:
                self._reply(request, ResponseCode.REPEATED_PUSH)
            else:
                self.write_requests[index] = _Buffered(request, now)
        elif t in (PushType.COMPARE, PushType.TRUNCATE, PushType.COMMIT):
            if t != PushType.COMMIT:
                if request.entry is None:
                    raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"{t.name} without an entry")
                self.write_requests.clear()
            if len(self.queue) >= self.QUEUE_CAPACITY:
                self._reply(request, ResponseCode.PUSH_REQUEST_IS_FULL)
            else:
                self.queue.append(request)
        self.work(now)

    def work(self, now: float) -> None:
        if self.ms.role != FOLLOWER:
            queued, self.queue = self.queue, []
            for request in queued:
                self._reply(request, ResponseCode.NOT_FOLLOWER)
            return
        while self.queue:
            request = self.queue.pop(0)
            if request.type == PushType.TRUNCATE:
                self._do_truncate(request)
            elif request.type == PushType.COMPARE:
                self._do_compare(request)
            else:
                self._do_commit(request)
        while True:
            buffered = self.write_requests.pop(self.log.end_index + 1, None)
            if buffered is None:
                break
            self._do_append(buffered)
        if now - self.last_check_fast_forward >= self.config.leakCheckIntervalMs:
            self.last_check_fast_forward = now
            self._check_append_future(now)

    def _check_leader(self, request: PushEntryRequest) -> None:
        ms = self.ms
        if ms.role != FOLLOWER:
            raise DLedgerError(ResponseCode.NOT_FOLLOWER)
        if request.term != ms.term:
            raise DLedgerError(ResponseCode.INCONSISTENT_TERM, f"term {request.term} != {ms.term}")
        if request.leaderId != ms.leader_id:
            raise DLedgerError(ResponseCode.INCONSISTENT_LEADER, f"leader {request.leaderId} != {ms.leader_id}")

    def _commit(self, request: PushEntryRequest) -> None:
        if self.rules.follower_commit_needs_term:
            if request.term != self.ms.term or request.leaderId != self.ms.leader_id:
                return
        update_committed_index(
            self.ms, self.log, request.term, request.commitIndex, self.rules, self.ms.effects, as_leader=False
        )

    def _do_append(self, buffered: _Buffered) -> None:
        request = buffered.request
        try:
            self._check_leader(request)
            self.log.append_as_follower(request.entry)
        except DLedgerError:
            if not buffered.replied:
                self._reply(request, ResponseCode.INCONSISTENT_STATE)
            return
        if not buffered.replied:
            self._reply(request, ResponseCode.SUCCESS)
        self._commit(request)

    def _do_compare(self, request: PushEntryRequest) -> None:
        if self.rules.follower_compare_checks_term:
            try:
                self._check_leader(request)
            except DLedgerError as e:
                self._reply(request, e.code)
                return
        try:
            equal = request.entry == self.log.get(request.entry.index)
        except DLedgerError:
            equal = False
        self._reply(request, ResponseCode.SUCCESS if equal else ResponseCode.INCONSISTENT_STATE)

    def _do_commit(self, request: PushEntryRequest) -> None:
        self._commit(request)
        self._reply(request, ResponseCode.SUCCESS)

    def _do_truncate(self, request: PushEntryRequest) -> None:
        try:
            self._check_leader(request)
            if self.rules.follower_truncate_keeps_own_term and self._cuts_own_term(request):
                raise DLedgerError(ResponseCode.INCONSISTENT_STATE, "a stale TRUNCATE")
            index = self.log.truncate(request.entry)
            if index != request.entry.index:
                raise DLedgerError(ResponseCode.INCONSISTENT_STATE)
        except DLedgerError:
            self._reply(request, ResponseCode.INCONSISTENT_STATE)
            return
        self._reply(request, ResponseCode.SUCCESS)
        self._commit(request)

    def _cuts_own_term(self, request: PushEntryRequest) -> bool:
        log, entry = self.log, request.entry
        try:
            keep = entry.index + 1 if log.get(entry.index) == entry else entry.index
        except DLedgerError:
            keep = entry.index
        # terms never fall along a log: the last entry is the newest term the cut would reach
        return keep <= log.end_index and log.end_term == request.term

    def _check_append_future(self, now: float) -> None:
        """checkAbnormalFuture: answer pushes we already have; fail the oldest stuck behind a gap."""
        end = self.log.end_index
        oldest = None
        for index in sorted(self.write_requests):
            buffered = self.write_requests[index]
            request = buffered.request
            if request.last_entry_index <= end:
                try:
                    same = request.entry == self.log.get(request.entry.index)
                except DLedgerError:
                    same = False
                if not buffered.replied:
                    self._reply(request, ResponseCode.SUCCESS if same else ResponseCode.INCONSISTENT_STATE)
                del self.write_requests[index]
                continue
            if request.first_entry_index == end + 1:
                return
            if now - buffered.arrived < self.config.pushFutureTimeoutMs:
                continue
            if oldest is None:
                oldest = buffered
        if oldest is not None and not oldest.replied:
            oldest.replied = True
            self._reply(oldest.request, ResponseCode.INCONSISTENT_STATE)
