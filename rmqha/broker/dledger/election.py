"""Leader election, IO-free: MemberState and DLedgerLeaderElector of dledger 0.3.1.2.

Roles CANDIDATE (the initial one), FOLLOWER and LEADER. What is DLedger's own, not textbook Raft:

* A vote or heartbeat with a larger term does not make the receiver adopt the term at once: it
  turns candidate, remembers the term (knownMaxTermInGroup) and answers REJECT_TERM_NOT_READY /
  TERM_NOT_READY; on its next pass it moves to that term (`next_term`, clearing its vote) without
  voting. The sender counts these answers as "almost accepted" and asks again at once
  (REVOTE_IMMEDIATELY), or re-sends its heartbeat at once.
* A vote is checked against the ledger first (REJECT_EXPIRED_LEDGER_TERM, REJECT_SMALL_LEDGER_END_INDEX),
  then the term (REJECT_EXPIRED_VOTE_TERM, REJECT_ALREADY_VOTED / REJECT_ALREADY_HAS_LEADER), then
  REJECT_TERM_SMALL_THAN_LEDGER and REJECT_TAKING_LEADERSHIP. A grant is persisted before the answer.
* Only a candidate raises its term (`next_term`), and only after a round that ended in
  WAIT_TO_VOTE_NEXT or when told to (needIncreaseTermImmediately). Its vote rounds wait up to
  2000 + random(maxVoteIntervalMs) ms; between rounds it waits minVoteIntervalMs +
  random(maxVoteIntervalMs - minVoteIntervalMs) (plus a heartbeat leak if someone has a leader).
* A follower turns candidate when it has heard no heartbeat for maxHeartBeatLeak *
  heartBeatTimeIntervalMs; a leader heartbeats every heartBeatTimeIntervalMs and steps down when a
  quorum has not answered SUCCESS for maxHeartBeatLeak intervals, or a peer shows a larger term or
  another leader.

Ours, not DLedger's: the leader lease (`lease_start`, `lease_valid`). `lease_start` is when a majority
last acknowledged this leader in its term, taken conservatively as the *send* time of the latest
heartbeat round a quorum answered SUCCESS (or the start of the vote round that made it leader), never
the time the answers were read: answers that sat in a socket buffer while the process was stopped do
not renew it. The lease holds while `now - lease_start <= maxHeartBeatLeak * heartBeatTimeIntervalMs`
(6 s with the defaults), DLedger's own bound for a leader to step down and for a follower to stop
waiting for heartbeats. The broker registers as master only while it holds (review 2, A4).

The Java elector's thread blocks while it waits for a round of votes or heartbeats; here a round is
an object with a deadline, completed by responses (`on_vote_response`, `on_heartbeat_response`) or by
`tick(now)`. Time is milliseconds, passed in; randomness comes from the random.Random passed in.
"""

from __future__ import annotations

import random

from rmqha.broker.support.beans import forwarded

from .config import DLedgerConfig, Rules
from .effects import PersistTerm, Reply, RoleChanged, Send
from .protocol import (
    DLedgerError,
    HeartBeatRequest,
    HeartBeatResponse,
    LeadershipTransferRequest,
    LeadershipTransferResponse,
    ParseResult,
    ResponseCode,
    VoteRequest,
    VoteResponse,
    VoteResult,
)

CANDIDATE, FOLLOWER, LEADER = "CANDIDATE", "FOLLOWER", "LEADER"
NEVER = float("-inf")  # Java's -1 timestamps: "long ago" against currentTimeMillis


class MemberState:
    """Role, term, vote and leader of one member; the ledger end comes from its log."""

    def __init__(self, config: DLedgerConfig, log, *, term: int = 0, vote_for: str | None = None):
        self.config = config
        self.group = config.group
        self.self_id = config.selfId
        self.peer_map = config.peer_map()
        if self.self_id not in self.peer_map:
            raise ValueError(f"selfId {self.self_id} is not in peers {config.peers}")
        self.log = log
        self.role = CANDIDATE
        self.leader_id: str | None = None
        self.term = term  # currTerm, loaded from the currterm file
        self.vote_for = vote_for  # currVoteFor ("voteLeader")
        self.known_max_term = -1
        self.transferee: str | None = None
        self.term_to_take_leadership = -1
        # peersLiveTable: what the last answer to each heartbeat said (a made-up NETWORK_ERROR: not
        # live), cleared when this node becomes leader; the automatic transfer only picks a live peer
        self.peers_live: dict[str, bool] = {}
        self.effects: list = []

    # --- the ledger end, from the log ------------------------------------------------------------
    ledger_end_index: int = forwarded("log.end_index")
    ledger_end_term: int = forwarded("log.end_term")

    def peer_size(self) -> int:
        return len(self.peer_map)

    def is_quorum(self, num: int) -> bool:
        return num >= self.peer_size() // 2 + 1

    def is_peer_member(self, peer_id) -> bool:
        return peer_id is not None and peer_id in self.peer_map

    def other_peers(self) -> list[str]:
        return sorted(p for p in self.peer_map if p != self.self_id)

    def _persist(self) -> None:
        self.effects.append(PersistTerm(self.term, self.vote_for))

    def set_vote_for(self, vote_for: str | None) -> None:
        self.vote_for = vote_for
        self._persist()

    def next_term(self) -> int:
        if self.role != CANDIDATE:
            raise DLedgerError(ResponseCode.ILLEGAL_MEMBER_STATE, f"{self.role} != {CANDIDATE}")
        if self.known_max_term > self.term:
            self.term = self.known_max_term
        else:
            self.term += 1
        self.vote_for = None
        self._persist()
        return self.term

    def change_to_leader(self, term: int) -> None:
        if self.term != term:
            raise DLedgerError(ResponseCode.ILLEGAL_MEMBER_STATE, f"{self.term} != {term}")
        self.role, self.leader_id = LEADER, self.self_id
        self.peers_live.clear()

    def change_to_follower(self, term: int, leader_id: str) -> None:
        if self.term != term:
            raise DLedgerError(ResponseCode.ILLEGAL_MEMBER_STATE, f"{self.term} != {term}")
        self.role, self.leader_id, self.transferee = FOLLOWER, leader_id, None

    def change_to_candidate(self, term: int) -> None:
        if term < self.term:
            raise DLedgerError(ResponseCode.ILLEGAL_MEMBER_STATE, f"should {term} >= {self.term}")
        if term > self.known_max_term:
            self.known_max_term = term
        # the term itself moves in next_term, on the candidate's own pass
        self.role, self.leader_id, self.transferee = CANDIDATE, None, None

    def set_transferee(self, transferee: str | None) -> None:
        if self.role != LEADER:
            raise DLedgerError(ResponseCode.ILLEGAL_MEMBER_STATE, f"{self.self_id} is not leader")
        self.transferee = transferee


class _Round:
    """One round of votes or heartbeats in flight: who was asked, what came back, until when."""

    def __init__(self, term: int, deadline: float, requests: dict):
        self.term = term
        self.deadline = deadline
        self.requests = requests  # peer -> the request object sent
        self.answered: set[str] = set()


class Elector:
    def __init__(self, config: DLedgerConfig, state: MemberState, rng: random.Random, rules: Rules | None = None):
        self.config = config
        self.ms = state
        self.rng = rng
        self.rules = rules or Rules()
        self.last_leader_heartbeat = NEVER
        self.last_send_heartbeat = NEVER
        self.last_succ_heartbeat = NEVER
        self.lease_start = NEVER  # when a quorum last acknowledged this leader (its round's send time)
        self.next_time_to_request_vote = NEVER
        self.need_increase_term_immediately = False
        self.last_parse_result = ParseResult.WAIT_TO_REVOTE
        self.vote_round: _Round | None = None
        self.heartbeat_round: _Round | None = None
        self.last_heartbeat_round: _Round | None = None  # for answers that come after it ended
        # leadership transfer: the take-leadership requests this leader sent, by id, each with the
        # request that asked for it (answered once the transferee answers), and the transferee's own
        self.transfers: dict[int, tuple[LeadershipTransferRequest, LeadershipTransferRequest]] = {}
        # the take-leadership requests acted on, each answered at the role change that decides them (0.3.1.2
        # keeps only the latest, and the one it replaces is never answered: its sender waits out its timeout)
        self.taking_leadership: list[LeadershipTransferRequest] = []

    # --- helpers ---------------------------------------------------------------------------------
    def _elapsed(self, since: float, now: float) -> float:
        return now - since

    def _handle_role_change(self, term: int, role: str) -> None:
        self._check_take_leadership(term, role)
        self.ms.effects.append(RoleChanged(term, role))

    def change_role_to_leader(self, term: int, lease_from: float = NEVER) -> None:
        """lease_from: when the vote round that won began (a quorum granted its votes after it)."""
        if self.ms.term == term:
            self.ms.change_to_leader(term)
            self.last_send_heartbeat = NEVER
            self.lease_start = lease_from
            self._handle_role_change(term, LEADER)

    def change_role_to_candidate(self, term: int) -> None:
        if term >= self.ms.term:
            self.ms.change_to_candidate(term)
            self.lease_start = NEVER
            self._handle_role_change(term, CANDIDATE)

    def change_role_to_follower(self, term: int, leader_id: str, now: float) -> None:
        self.last_parse_result = ParseResult.WAIT_TO_REVOTE
        self.lease_start = NEVER
        self.ms.change_to_follower(term, leader_id)
        self.last_leader_heartbeat = now
        self._handle_role_change(term, FOLLOWER)

    @property
    def lease_ms(self) -> int:
        """DLedger's step-down bound: maxHeartBeatLeak heartbeat intervals without a quorum."""
        return self.config.maxHeartBeatLeak * self.config.heartBeatTimeIntervalMs

    def lease_valid(self, now: float) -> bool:
        """This node leads and a quorum acknowledged it (a heartbeat round sent, or the vote round
        begun) at most lease_ms ago. A leader that was stopped for longer, or cut from its peers, does
        not hold it, whatever role it still believes it has."""
        return self.ms.role == LEADER and now - self.lease_start <= self.lease_ms

    def is_taking_leadership(self) -> bool:
        return (
            bool(self.config.preferredLeaderIds)
            and self.ms.term_to_take_leadership == self.ms.term
            and self.ms.self_id in self.config.preferred_leaders()
        )

    def _next_time_to_request_vote(self, now: float) -> float:
        c = self.config
        if self.is_taking_leadership():
            return (
                now
                + c.minTakeLeadershipVoteIntervalMs
                + self.rng.randrange(c.maxTakeLeadershipVoteIntervalMs - c.minTakeLeadershipVoteIntervalMs)
            )
        return now + c.minVoteIntervalMs + self.rng.randrange(c.maxVoteIntervalMs - c.minVoteIntervalMs)

    # --- heartbeats (handleHeartBeat) -------------------------------------------------------------
    def handle_heartbeat(self, request: HeartBeatRequest, now: float) -> HeartBeatResponse:
        ms = self.ms

        def resp(code=ResponseCode.SUCCESS, term=None):
            r = HeartBeatResponse(code=code)
            if term is not None:
                r.term = term
            return r

        if not ms.is_peer_member(request.leaderId):
            return resp(ResponseCode.UNKNOWN_MEMBER, ms.term)
        if ms.self_id == request.leaderId:
            return resp(ResponseCode.UNEXPECTED_MEMBER, ms.term)
        if request.term < ms.term:
            return resp(ResponseCode.EXPIRED_TERM, ms.term)
        if request.term == ms.term:
            if ms.leader_id is None:
                self.change_role_to_follower(request.term, request.leaderId, now)
                return resp()
            if request.leaderId == ms.leader_id:
                self.last_leader_heartbeat = now
                return resp()
            return resp(ResponseCode.INCONSISTENT_LEADER)  # "[BUG]": two leaders in one term
        # a larger term: become a candidate first, take the term on the next pass
        self.change_role_to_candidate(request.term)
        self.need_increase_term_immediately = True
        return resp(ResponseCode.TERM_NOT_READY)

    # --- votes (handleVote) ----------------------------------------------------------------------
    def handle_vote(self, request: VoteRequest, now: float, self_vote: bool = False) -> VoteResponse:
        ms = self.ms

        def answer(result: VoteResult, term=None):
            return VoteResponse.for_request(request, ms.term if term is None else term, result)

        if not ms.is_peer_member(request.leaderId):
            return answer(VoteResult.REJECT_UNKNOWN_LEADER)
        if not self_vote and ms.self_id == request.leaderId:
            return answer(VoteResult.REJECT_UNEXPECTED_LEADER)
        if request.ledgerEndTerm < ms.ledger_end_term:
            return answer(VoteResult.REJECT_EXPIRED_LEDGER_TERM)
        if request.ledgerEndTerm == ms.ledger_end_term and request.ledgerEndIndex < ms.ledger_end_index:
            return answer(VoteResult.REJECT_SMALL_LEDGER_END_INDEX)
        if request.term < ms.term:
            return answer(VoteResult.REJECT_EXPIRED_VOTE_TERM)
        if request.term == ms.term:
            if ms.vote_for is not None and ms.vote_for != request.leaderId:
                if ms.leader_id is not None:
                    return answer(VoteResult.REJECT_ALREADY_HAS_LEADER)
                return answer(VoteResult.REJECT_ALREADY_VOTED)
        else:
            # stepped down by a larger term; vote only once the terms agree
            self.change_role_to_candidate(request.term)
            self.need_increase_term_immediately = True
            return answer(VoteResult.REJECT_TERM_NOT_READY)
        if request.term < ms.ledger_end_term:
            return answer(VoteResult.REJECT_TERM_SMALL_THAN_LEDGER, ms.ledger_end_term)
        if (
            not self_vote
            and self.is_taking_leadership()
            and request.ledgerEndTerm == ms.ledger_end_term
            and ms.ledger_end_index >= request.ledgerEndIndex
        ):
            return answer(VoteResult.REJECT_TAKING_LEADERSHIP)
        self.grant_vote(request.leaderId)
        return answer(VoteResult.ACCEPT)

    def grant_vote(self, candidate: str) -> None:
        self.ms.set_vote_for(candidate)

    # --- the state maintainer (maintainState, every 10 ms in Java) -------------------------------
    def tick(self, now: float) -> None:
        if self.vote_round is not None and now >= self.vote_round.deadline:
            self._finish_vote_round(now)
        if self.heartbeat_round is not None and now >= self.heartbeat_round.deadline:
            self._finish_heartbeat_round(now)
        if not self.config.enableLeaderElector:
            return
        if self.ms.role == LEADER:
            self._maintain_as_leader(now)
        elif self.ms.role == FOLLOWER:
            self._maintain_as_follower(now)
        else:
            self._maintain_as_candidate(now)

    def next_deadline(self, now: float) -> float:
        """The earliest time at which tick() has something to do (an upper bound is fine)."""
        times = []
        for rnd in (self.vote_round, self.heartbeat_round):
            if rnd is not None:
                times.append(rnd.deadline)
        c = self.config
        if self.ms.role == LEADER and self.heartbeat_round is None:
            times.append(self.last_send_heartbeat + c.heartBeatTimeIntervalMs + 1)
        elif self.ms.role == FOLLOWER:
            times.append(self.last_leader_heartbeat + c.maxHeartBeatLeak * c.heartBeatTimeIntervalMs + 1)
        elif self.ms.role == CANDIDATE and self.vote_round is None:
            times.append(now if self.need_increase_term_immediately else self.next_time_to_request_vote)
        return max(now, min(times)) if times else now + c.heartBeatTimeIntervalMs

    def _maintain_as_leader(self, now: float) -> None:
        if self.heartbeat_round is not None:
            return  # the Java thread is still waiting on the last round
        if self._elapsed(self.last_send_heartbeat, now) > self.config.heartBeatTimeIntervalMs:
            self.last_send_heartbeat = now
            self._send_heartbeats(self.ms.term, self.ms.leader_id, now)

    def _maintain_as_follower(self, now: float) -> None:
        c = self.config
        elapsed = self._elapsed(self.last_leader_heartbeat, now)
        if elapsed > 2 * c.heartBeatTimeIntervalMs and elapsed > c.maxHeartBeatLeak * c.heartBeatTimeIntervalMs:
            self.change_role_to_candidate(self.ms.term)

    def _maintain_as_candidate(self, now: float) -> None:
        if self.vote_round is not None:
            return
        if now < self.next_time_to_request_vote and not self.need_increase_term_immediately:
            return
        ms = self.ms
        if ms.role != CANDIDATE:
            return
        if self.last_parse_result == ParseResult.WAIT_TO_VOTE_NEXT or self.need_increase_term_immediately:
            term = ms.next_term()
            self.last_parse_result = ParseResult.WAIT_TO_REVOTE
        else:
            term = ms.term
        if self.need_increase_term_immediately:
            self.next_time_to_request_vote = self._next_time_to_request_vote(now)
            self.need_increase_term_immediately = False
            return
        self._start_vote_round(term, ms.ledger_end_term, ms.ledger_end_index, now)

    # --- a round of votes ------------------------------------------------------------------------
    def _vote_request(self, peer: str, term: int, end_term: int, end_index: int) -> VoteRequest:
        ms = self.ms
        return VoteRequest(
            group=ms.group,
            ledgerEndIndex=end_index,
            ledgerEndTerm=end_term,
            leaderId=ms.self_id,
            term=term,
            remoteId=peer,
            localId=ms.self_id,
        )

    def _start_vote_round(self, term, end_term, end_index, now) -> None:
        ms = self.ms
        deadline = now + self.config.voteWaitBaseMs + self.rng.randrange(self.config.maxVoteIntervalMs)
        requests = {p: self._vote_request(p, term, end_term, end_index) for p in ms.other_peers()}
        rnd = _Round(term, deadline, requests)
        rnd.known_max_term = term
        rnd.all = rnd.valid = rnd.accepted = rnd.not_ready = rnd.bigger_ledger = 0
        rnd.already_has_leader = False
        rnd.started = now
        self.vote_round = rnd
        mine = self.handle_vote(self._vote_request(ms.self_id, term, end_term, end_index), now, self_vote=True)
        for peer, req in requests.items():
            ms.effects.append(Send(peer, req))
        self._count_vote(rnd, mine, now)

    def on_vote_response(self, peer: str, request: VoteRequest, response: VoteResponse, now: float) -> None:
        rnd = self.vote_round
        if rnd is None or rnd.requests.get(peer) is not request or peer in rnd.answered:
            return  # a late answer to a round that is over
        rnd.answered.add(peer)
        self._count_vote(rnd, response, now)

    def _count_vote(self, rnd: _Round, x: VoteResponse, now: float) -> None:
        if x.voteResult != VoteResult.UNKNOWN:
            rnd.valid += 1
        r = x.voteResult
        if r == VoteResult.ACCEPT:
            rnd.accepted += 1
        elif r == VoteResult.REJECT_ALREADY_HAS_LEADER:
            rnd.already_has_leader = True
        elif r in (VoteResult.REJECT_TERM_SMALL_THAN_LEDGER, VoteResult.REJECT_EXPIRED_VOTE_TERM):
            if x.term > rnd.known_max_term:
                rnd.known_max_term = x.term
        elif r in (VoteResult.REJECT_EXPIRED_LEDGER_TERM, VoteResult.REJECT_SMALL_LEDGER_END_INDEX):
            rnd.bigger_ledger += 1
        elif r == VoteResult.REJECT_TERM_NOT_READY:
            rnd.not_ready += 1
        rnd.all += 1
        q = self.ms.is_quorum
        if (
            rnd.already_has_leader
            or q(rnd.accepted)
            or q(rnd.accepted + rnd.not_ready)
            or rnd.all == self.ms.peer_size()
        ):
            self._finish_vote_round(now)

    def _finish_vote_round(self, now: float) -> None:
        rnd, self.vote_round = self.vote_round, None
        c, q = self.config, self.ms.is_quorum
        term = rnd.term
        if rnd.known_max_term > term:
            result = ParseResult.WAIT_TO_VOTE_NEXT
            self.next_time_to_request_vote = self._next_time_to_request_vote(now)
            self.change_role_to_candidate(rnd.known_max_term)
        elif rnd.already_has_leader:
            result = ParseResult.WAIT_TO_REVOTE
            self.next_time_to_request_vote = (
                self._next_time_to_request_vote(now) + c.heartBeatTimeIntervalMs * c.maxHeartBeatLeak
            )
        elif not q(rnd.valid):
            result = ParseResult.WAIT_TO_REVOTE
            self.next_time_to_request_vote = self._next_time_to_request_vote(now)
        elif not q(rnd.valid - rnd.bigger_ledger):
            result = ParseResult.WAIT_TO_REVOTE
            self.next_time_to_request_vote = self._next_time_to_request_vote(now) + c.maxVoteIntervalMs
        elif q(rnd.accepted):
            result = ParseResult.PASSED
        elif q(rnd.accepted + rnd.not_ready):
            result = ParseResult.REVOTE_IMMEDIATELY
        else:
            result = ParseResult.WAIT_TO_VOTE_NEXT
            self.next_time_to_request_vote = self._next_time_to_request_vote(now)
        self.last_parse_result = result
        self.last_round = (term, result, rnd.accepted, rnd.not_ready, rnd.bigger_ledger)
        if result == ParseResult.PASSED:
            self.change_role_to_leader(term, lease_from=rnd.started)
        elif result == ParseResult.REVOTE_IMMEDIATELY:
            pass  # next_time_to_request_vote is unchanged, so the next pass votes again at once

    # --- a round of heartbeats (sendHeartbeats) ---------------------------------------------------
    def _send_heartbeats(self, term: int, leader_id: str, now: float) -> None:
        ms = self.ms
        requests = {
            p: HeartBeatRequest(group=ms.group, localId=ms.self_id, remoteId=p, leaderId=leader_id, term=term)
            for p in ms.other_peers()
        }
        rnd = _Round(term, now + self.config.heartBeatTimeIntervalMs, requests)
        rnd.started = now
        rnd.all, rnd.succ, rnd.not_ready, rnd.max_term, rnd.inconsistent_leader = 1, 1, 0, -1, False
        self.heartbeat_round = rnd
        for peer, req in requests.items():
            ms.effects.append(Send(peer, req))
        if rnd.all == ms.peer_size():
            self._finish_heartbeat_round(now)

    def on_heartbeat_response(
        self, peer: str, request: HeartBeatRequest, response: HeartBeatResponse, now: float
    ) -> None:
        # every answer counts for liveness, late ones too (sendHeartbeats' whenComplete)
        self.ms.peers_live[peer] = response.code != ResponseCode.NETWORK_ERROR
        rnd = self.heartbeat_round
        if rnd is None or rnd.requests.get(peer) is not request or peer in rnd.answered:
            late = self.last_heartbeat_round
            if (
                self.rules.leader_steps_down_on_larger_term
                and late is not None
                and late.requests.get(peer) is request
                and response.code == ResponseCode.EXPIRED_TERM
                and response.term > late.term
                and self.ms.role == LEADER
                and self.ms.term == late.term
            ):
                self.change_role_to_candidate(response.term)  # 0.3.2 (#247): a larger term exists
            return
        rnd.answered.add(peer)
        code = response.code
        if code == ResponseCode.SUCCESS:
            rnd.succ += 1
        elif code == ResponseCode.EXPIRED_TERM:
            rnd.max_term = response.term
        elif code == ResponseCode.INCONSISTENT_LEADER:
            rnd.inconsistent_leader = True
        elif code == ResponseCode.TERM_NOT_READY:
            rnd.not_ready += 1
        rnd.all += 1
        q = self.ms.is_quorum
        if q(rnd.succ) or q(rnd.succ + rnd.not_ready) or rnd.all == self.ms.peer_size():
            self._finish_heartbeat_round(now)

    def _finish_heartbeat_round(self, now: float) -> None:
        rnd, self.heartbeat_round = self.heartbeat_round, None
        self.last_heartbeat_round = rnd
        q, c = self.ms.is_quorum, self.config
        if self.rules.leader_steps_down_on_larger_term and rnd.max_term > rnd.term:
            self.change_role_to_candidate(rnd.max_term)  # 0.3.2 (#247), before counting successes
        elif q(rnd.succ):
            self.last_succ_heartbeat = now
            if self.ms.role == LEADER and self.ms.term == rnd.term:
                self.lease_start = max(self.lease_start, rnd.started)
        elif q(rnd.succ + rnd.not_ready):
            self.last_send_heartbeat = NEVER
        elif rnd.max_term > rnd.term:
            self.change_role_to_candidate(rnd.max_term)
        elif rnd.inconsistent_leader:
            self.change_role_to_candidate(rnd.term)
        elif self._elapsed(self.last_succ_heartbeat, now) > c.maxHeartBeatLeak * c.heartBeatTimeIntervalMs:
            self.change_role_to_candidate(rnd.term)

    # --- leadership transfer ---------------------------------------------------------------------
    def handle_leadership_transfer(self, request: LeadershipTransferRequest, now: float):
        """On the leader (transferId == self): ask the transferee to take over. Returns the response,
        or None when it will come later (a Reply effect once the transferee has answered)."""
        ms = self.ms
        if ms.term != request.term:
            return LeadershipTransferResponse(code=ResponseCode.INCONSISTENT_TERM, term=ms.term)
        if ms.role != LEADER:
            return LeadershipTransferResponse(code=ResponseCode.NOT_LEADER, term=ms.term)
        if ms.transferee is not None:
            return LeadershipTransferResponse(code=ResponseCode.LEADER_TRANSFERRING, term=ms.term)
        ms.set_transferee(request.transfereeId)
        take = LeadershipTransferRequest(
            group=ms.group,
            leaderId=ms.leader_id,
            localId=ms.self_id,
            remoteId=request.transfereeId,
            term=request.term,
            takeLeadershipLedgerIndex=ms.ledger_end_index,
            transferId=ms.self_id,
            transfereeId=request.transfereeId,
        )
        self.transfers[id(take)] = (take, request)
        ms.effects.append(Send(request.transfereeId, take))
        return None

    def on_take_leadership_response(
        self, request: LeadershipTransferRequest, response: LeadershipTransferResponse
    ) -> None:
        sent = self.transfers.pop(id(request), None)
        if sent is None or sent[0] is not request:
            return  # not one this node sent (or answered already)
        admin = sent[1]
        ms = self.ms
        if response.code != ResponseCode.SUCCESS or (ms.term == request.term and ms.transferee is not None):
            if ms.role == LEADER:
                ms.set_transferee(None)
        ms.effects.append(Reply(admin, response))

    def handle_take_leadership(self, request: LeadershipTransferRequest, now: float):
        """On the transferee, once caught up: stand for term + 1. The answer comes with the role change."""
        ms = self.ms
        if ms.term != request.term:
            return LeadershipTransferResponse(code=ResponseCode.INCONSISTENT_TERM, term=ms.term)
        ms.term_to_take_leadership = request.term + 1
        self.taking_leadership.append(request)
        self.change_role_to_candidate(request.term + 1)
        self.need_increase_term_immediately = True
        return None

    def _check_take_leadership(self, term: int, role: str) -> None:
        ms = self.ms
        if ms.term_to_take_leadership == -1 or not self.taking_leadership:
            return
        target = ms.term_to_take_leadership
        if term > target:
            code = ResponseCode.EXPIRED_TERM
        elif term == target:
            if role == LEADER:
                code = ResponseCode.SUCCESS
            elif role == FOLLOWER:
                code = ResponseCode.TAKE_LEADERSHIP_FAILED
            else:
                return
        else:
            code = ResponseCode.TAKE_LEADERSHIP_FAILED if role == FOLLOWER else ResponseCode.INTERNAL_ERROR
        requests, self.taking_leadership = self.taking_leadership, []
        ms.term_to_take_leadership = -1
        for request in requests:
            ms.effects.append(Reply(request, LeadershipTransferResponse(code=code, term=term)))
