"""One DLedger member, IO-free: DLedgerServer's request routing over the elector, pusher and handler.

Inputs: `handle_request` (a request from a peer or client), `on_response` (the answer to a request
this node sent, or a NETWORK_ERROR one made by the driver), `tick(now)` (at least every few ms; the
Java state maintainer runs every 10 ms), `append(body, token, now)` (a local client append). Each
returns the effects (rmqha.broker.dledger.effects) to carry out, in order: a PersistTerm must be on disk
before a Send or Reply that follows it. `next_deadline(now)` says when tick() next has work; ask it
again after every input, which can bring it forward.
"""

from __future__ import annotations

import random

from .config import DLedgerConfig
from .effects import AppendDone, Reply
from .election import LEADER, Elector, MemberState
from .protocol import (
    AppendEntryRequest,
    AppendEntryResponse,
    BatchAppendEntryRequest,
    DLedgerError,
    HeartBeatRequest,
    HeartBeatResponse,
    LeadershipTransferRequest,
    LeadershipTransferResponse,
    MetadataRequest,
    MetadataResponse,
    PushEntryRequest,
    RequestOrResponse,
    ResponseCode,
    VoteRequest,
    VoteResponse,
    GetEntriesRequest,
    GetEntriesResponse,
    PullEntriesRequest,
    REQUEST_TYPES,
    request_code,
)
from .replication import EntryHandler, EntryPusher, Rules
from rmqha.broker.support.beans import forwarded

# The largest term a request or an answer may carry (ours; review 2, A2). Far beyond any real group's
# (a term is one election round, a few a second at most) and far below 2**63 - 1, so that a node can
# always count up from it and write it into an entry's signed 64-bit field. One heartbeat with a term
# past it would otherwise be adopted and persisted by every member, and the group could never write again.
MAX_TERM = 1 << 62

# DLedgerServer.startup schedules checkPreferredLeader at a fixed rate of 1 s, the first 1 s after start,
# on a single thread that blocks on the transfer it starts (dledger 0.3.1.2 DLedgerServer.java:147).
PREFERRED_CHECK_MS = 1000


class DLedgerNode:
    def __init__(
        self,
        config: DLedgerConfig,
        log,
        *,
        rng: random.Random,
        term: int = 0,
        vote_for: str | None = None,
        rules: Rules | None = None,
        elector_class=Elector,
    ):
        self.config = config
        self.log = log
        self.rules = rules or Rules()
        self.ms = MemberState(config, log, term=term, vote_for=vote_for)
        self.elector = elector_class(config, self.ms, rng, self.rules)
        self.pusher = EntryPusher(config, self.ms, log, self.rules)
        self.handler = EntryHandler(config, self.ms, log, self.rules)
        # take-leadership requests waiting for this node to catch up, each with its deadline: every one is
        # answered (0.3.1.2 waits in each request's own handler thread)
        self.waiting_transfers: list[tuple[LeadershipTransferRequest, float]] = []
        self.next_preferred_check: float | None = None  # set on the first tick
        self.auto_transfer: LeadershipTransferRequest | None = None  # the preferred-leader one under way
        self.auto_transfers = 0  # started by checkPreferredLeader

    self_id: str = forwarded("ms.self_id")
    role: str = forwarded("ms.role")
    term: int = forwarded("ms.term")

    def lease_valid(self, now: float) -> bool:
        """Leader with a quorum's acknowledgement within maxHeartBeatLeak heartbeat intervals
        (election.py, "the leader lease"): what the broker asks before it registers as master."""
        return self.elector.lease_valid(now)

    def _drain(self) -> list:
        out, self.ms.effects = self.ms.effects, []
        return out

    def _work(self, now: float) -> list:
        self._check_waiting_transfer(now)
        self._check_preferred_leader(now)
        self.handler.work(now)
        self.pusher.work(now)
        return self._drain()

    # --- inputs ----------------------------------------------------------------------------------
    def tick(self, now: float) -> list:
        self.elector.tick(now)
        return self._work(now)

    def next_deadline(self, now: float) -> float:
        """When tick() next has work (the driver may tick more often; Java's loops spin every 1-10 ms)."""
        c = self.config
        at = self.elector.next_deadline(now)
        if self.ms.role == "LEADER":  # dispatcher retries, idle COMMITs, ack timeouts, leak checks
            at = min(at, now + min(c.maxPushTimeOutMs, c.commitPushIntervalMs, c.leakCheckIntervalMs) / 4)
        if self.handler.write_requests and self.ms.role == "FOLLOWER":
            at = min(at, self.handler.last_check_fast_forward + c.leakCheckIntervalMs + 1)
        if self.waiting_transfers:
            at = min(at, min(deadline for _, deadline in self.waiting_transfers) + 1)
        if self.ms.role == "LEADER" and self.next_preferred_check is not None and not self._auto_transfer_pending():
            at = min(at, self.next_preferred_check)
        return max(at, now)

    def append(self, body: bytes, token, now: float) -> list:
        try:
            self.pusher.append(body, token, False, now)
        except DLedgerError as e:
            self.ms.effects.append(
                AppendDone(
                    token,
                    AppendEntryResponse(
                        group=self.ms.group, code=e.code, term=self.ms.term, leaderId=self.ms.leader_id
                    ),
                )
            )
        return self._work(now)

    def append_batch(self, bodies: list[bytes], token, now: float) -> tuple[list[int], list]:
        """A batch of entries waited for as one (DLedgerServer.handleAppend of a BatchAppendEntryRequest):
        (their positions, effects); no positions when refused at once (an AppendDone says why)."""
        try:
            positions = self.pusher.append_batch(bodies, token, now)
        except DLedgerError as e:
            positions = []
            self.ms.effects.append(
                AppendDone(
                    token,
                    AppendEntryResponse(
                        group=self.ms.group, code=e.code, term=self.ms.term, leaderId=self.ms.leader_id
                    ),
                )
            )
        return positions, self._work(now)

    def handle_request(self, request: RequestOrResponse, now: float) -> list:
        ms = self.ms
        try:
            if request.remoteId != ms.self_id:
                raise DLedgerError(ResponseCode.UNKNOWN_MEMBER, f"{request.remoteId} != {ms.self_id}")
            if request.group != ms.group:
                raise DLedgerError(ResponseCode.UNKNOWN_GROUP, f"{request.group} != {ms.group}")
            self._check_origin(request)
            if request.term > MAX_TERM:
                raise DLedgerError(
                    ResponseCode.UNEXPECTED_ARGUMENT,
                    f"term {request.term} from {request.localId} is past {MAX_TERM}: refused",
                )
            response = self._route(request, now)
        except DLedgerError as e:
            cls = REQUEST_TYPES[request_code(request)][1]
            response = cls().copy_base_info(request)
            response.code = e.code
            response.leaderId = ms.leader_id
        if response is not None:
            ms.effects.append(Reply(request, response))
        return self._work(now)

    def _check_origin(self, request: RequestOrResponse) -> None:
        """Peer traffic (vote, heartbeat, push) only from the configured peers, each in its own name; a
        remote append only when the config allows it (review 2, A3). Not an authentication: a host that
        can reach this port can still claim a configured id (docs/dledger.md "The DLedger port")."""
        ms = self.ms
        if isinstance(request, AppendEntryRequest):
            if not self.config.acceptRemoteAppend:
                raise DLedgerError(
                    ResponseCode.UNSUPPORTED, "remote append refused: a broker's DLedger group appends only locally"
                )
            return
        if isinstance(request, (VoteRequest, HeartBeatRequest, PushEntryRequest)):
            if request.localId != request.leaderId:  # a candidate or a leader speaks only for itself
                raise DLedgerError(ResponseCode.UNKNOWN_MEMBER, f"{request.localId!r} speaks for {request.leaderId!r}")
            # a vote from an unknown id is the elector's REJECT_UNKNOWN_LEADER; itself: UNEXPECTED_MEMBER
            if not isinstance(request, VoteRequest) and not ms.is_peer_member(request.localId):
                raise DLedgerError(
                    ResponseCode.UNKNOWN_MEMBER, f"{request.localId!r} is not a configured peer of {ms.self_id}"
                )

    def _route(self, request, now):
        if isinstance(request, VoteRequest):
            return self.elector.handle_vote(request, now)
        if isinstance(request, HeartBeatRequest):
            return self.elector.handle_heartbeat(request, now)
        if isinstance(request, PushEntryRequest):
            self.handler.handle_push(request, now)
            return None  # the handler replies
        if isinstance(request, BatchAppendEntryRequest):
            raise DLedgerError(ResponseCode.UNSUPPORTED, "batch append is not modelled yet")
        if isinstance(request, AppendEntryRequest):
            if request.body is None:
                raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, "append without a body")
            self.pusher.append(request.body, request, True, now)
            return None
        if isinstance(request, LeadershipTransferRequest):
            return self._leadership_transfer(request, now)
        if isinstance(request, MetadataRequest):
            return self._metadata()
        if isinstance(request, GetEntriesRequest):
            return self._get(request)
        if isinstance(request, PullEntriesRequest):
            raise DLedgerError(ResponseCode.UNSUPPORTED)  # 0.3.1.2's handlePull answers nothing at all
        raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, type(request).__name__)

    # --- DLedgerClient's requests (DLedgerServer.handleMetadata, handleGet) -----------------------------
    def _metadata(self) -> MetadataResponse:
        """Who the group's members are and who leads: how DLedger's own client finds its leader. Any
        member answers; the answer carries no term (-1), as 0.3.1.2's."""
        ms = self.ms
        return MetadataResponse(group=ms.group, peers=dict(ms.peer_map), leaderId=ms.leader_id)

    def _get(self, request: GetEntriesRequest) -> GetEntriesResponse:
        """The one entry at beginIndex, from the leader only (NOT_LEADER, with the leader's id, elsewhere);
        an index outside the log is INDEX_OUT_OF_RANGE or INDEX_LESS_THAN_LOCAL_BEGIN (the store's check)."""
        if self.ms.role != LEADER:
            raise DLedgerError(ResponseCode.NOT_LEADER)
        if request.beginIndex is None:  # 0.3.1.2 fails with a NullPointerException and sends nothing
            raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, "beginIndex is null")
        return GetEntriesResponse(group=self.ms.group, entries=[self.log.get(request.beginIndex)])

    def on_response(self, peer: str, request: RequestOrResponse, response: RequestOrResponse, now: float) -> list:
        if response.term > MAX_TERM:  # an answer no member can give: as if it never came
            response = self.network_error(request)
        if isinstance(request, VoteRequest):
            self.elector.on_vote_response(peer, request, response, now)
        elif isinstance(request, HeartBeatRequest):
            self.elector.on_heartbeat_response(peer, request, response, now)
        elif isinstance(request, PushEntryRequest):
            self.pusher.on_push_response(peer, request, response, now)
        elif isinstance(request, LeadershipTransferRequest):
            self.elector.on_take_leadership_response(request, response)
        return self._work(now)

    @staticmethod
    def network_error(request: RequestOrResponse) -> RequestOrResponse:
        """The response DLedgerRpcNettyService makes up when a request timed out or failed."""
        if isinstance(request, VoteRequest):
            return VoteResponse()  # voteResult UNKNOWN
        if isinstance(request, HeartBeatRequest):
            return HeartBeatResponse(code=ResponseCode.NETWORK_ERROR)
        cls = REQUEST_TYPES[request_code(request)][1]
        resp = cls().copy_base_info(request)
        resp.code = ResponseCode.NETWORK_ERROR
        return resp

    # --- leadership transfer (DLedgerServer.handleLeadershipTransfer) -----------------------------
    def _leadership_transfer(self, request: LeadershipTransferRequest, now: float):
        ms = self.ms
        if ms.self_id == request.transferId:
            if not ms.is_peer_member(request.transfereeId):
                raise DLedgerError(ResponseCode.UNKNOWN_MEMBER, f"transferee={request.transfereeId}")
            if ms.term != request.term:
                raise DLedgerError(ResponseCode.INCONSISTENT_TERM, f"{ms.term} != {request.term}")
            if ms.role != "LEADER":
                raise DLedgerError(ResponseCode.NOT_LEADER)
            if request.transfereeId == ms.self_id:  # ours: 0.3.1.2 would ask itself and step down
                raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"transferee {ms.self_id} already leads")
            behind = self.log.end_index - self.pusher.watermark(request.term, request.transfereeId)
            if behind >= self.config.maxLeadershipTransferWaitIndex:
                raise DLedgerError(ResponseCode.FALL_BEHIND_TOO_MUCH, f"diff={behind}")
            return self.elector.handle_leadership_transfer(request, now)
        if ms.self_id == request.transfereeId:
            if request.transferId != ms.leader_id:
                raise DLedgerError(ResponseCode.INCONSISTENT_LEADER, f"transfer={request.transferId}")
            if request.localId != request.transferId or request.leaderId != request.transferId:
                # ours: only the leader itself asks a peer to take over (0.3.1.2's leader names itself in
                # all three; an admin tool talks only to the leader)
                raise DLedgerError(
                    ResponseCode.INCONSISTENT_LEADER,
                    f"take-leadership from {request.localId!r} for leader {request.leaderId!r}, not from {ms.leader_id}",
                )
            if request.takeLeadershipLedgerIndex - ms.ledger_end_index > 0:
                # the Java handler sleeps until caught up, at most leadershipTransferWaitTimeout
                self.waiting_transfers.append((request, now + self.config.leadershipTransferWaitTimeout))
                return None
            return self.elector.handle_take_leadership(request, now)
        return LeadershipTransferResponse(code=ResponseCode.UNEXPECTED_ARGUMENT, term=ms.term)

    # --- the automatic transfer to a preferred leader (DLedgerServer.checkPreferredLeader) ---------
    def _auto_transfer_pending(self) -> bool:
        """The transfer checkPreferredLeader started is still waiting for the transferee's answer (or the
        RPC's timeout): Java's check thread is blocked on it, so no check runs meanwhile."""
        if self.auto_transfer is None:
            return False
        if any(origin is self.auto_transfer for _take, origin in self.elector.transfers.values()):
            return True
        self.auto_transfer = None
        return False

    def _check_preferred_leader(self, now: float) -> None:
        if not self.config.preferredLeaderIds:
            return
        if self.next_preferred_check is None:
            self.next_preferred_check = now + PREFERRED_CHECK_MS
            return
        if now < self.next_preferred_check or self._auto_transfer_pending():
            return
        # fixed rate: the next run is the schedule's next slot after now (runs missed while blocked
        # collapse into this one: the ones after it would find the transfer it starts under way)
        slots = (now - self.next_preferred_check) // PREFERRED_CHECK_MS + 1
        self.next_preferred_check += slots * PREFERRED_CHECK_MS
        chosen = self.preferred_transferee()
        if chosen is None:
            return
        ms = self.ms
        # Java's request carries only the term and the transferee; ours names this node too, and has
        # no one to answer (the Reply finds no connection)
        request = LeadershipTransferRequest(
            group=ms.group,
            localId=ms.self_id,
            remoteId=ms.self_id,
            term=ms.term,
            transferId=ms.self_id,
            transfereeId=chosen[0],
        )
        response = self.elector.handle_leadership_transfer(request, now)
        if response is None:
            self.auto_transfer = request
            self.auto_transfers += 1

    def preferred_transferee(self) -> tuple[str, int] | None:
        """(peer, entries behind) checkPreferredLeader would hand leadership to now, or None: only a
        leader that is not itself preferred and is not transferring already; only a preferred peer that
        is a member and answered the last heartbeat (peersLiveTable); the one least behind (this
        leader's end index minus its watermark in this term; the first listed on a tie), if less than
        maxLeadershipTransferWaitIndex behind."""
        ms = self.ms
        preferred = self.config.preferred_leaders()
        if ms.role != "LEADER" or ms.transferee is not None or not preferred or ms.self_id in preferred:
            return None
        best: tuple[str, int] | None = None
        for peer in preferred:
            if not ms.is_peer_member(peer) or not ms.peers_live.get(peer):
                continue
            behind = self.log.end_index - self.pusher.watermark(ms.term, peer)
            if best is None or behind < best[1]:
                best = (peer, behind)
        if best is None or best[1] >= self.config.maxLeadershipTransferWaitIndex:
            return None
        return best

    def _check_waiting_transfer(self, now: float) -> None:
        waiting, self.waiting_transfers = self.waiting_transfers, []
        for request, deadline in waiting:
            if request.takeLeadershipLedgerIndex - self.ms.ledger_end_index <= 0:
                response = self.elector.handle_take_leadership(request, now)
                if response is not None:
                    self.ms.effects.append(Reply(request, response))
            elif now > deadline:
                resp = LeadershipTransferResponse().copy_base_info(request)
                resp.code, resp.leaderId = ResponseCode.TAKE_LEADERSHIP_FAILED, self.ms.leader_id
                self.ms.effects.append(Reply(request, resp))
            else:
                self.waiting_transfers.append((request, deadline))
