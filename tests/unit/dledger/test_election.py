"""The elector's rules one at a time (DLedgerLeaderElector / MemberState, dledger 0.3.1.2)."""

import random

import pytest

from rmqha.broker.dledger.config import DLedgerConfig
from rmqha.broker.dledger.effects import PersistTerm, Reply, RoleChanged, Send
from rmqha.broker.dledger.election import CANDIDATE, FOLLOWER, LEADER, NEVER
from rmqha.broker.dledger.node import DLedgerNode
from rmqha.broker.dledger.protocol import (
    HeartBeatRequest,
    HeartBeatResponse,
    LeadershipTransferRequest,
    ParseResult,
    ResponseCode,
    VoteRequest,
    VoteResponse,
    VoteResult,
)
from rmqha.broker.dledger.replication import MemoryLog

PEERS = "n0-127.0.0.1:40911;n1-127.0.0.1:40912;n2-127.0.0.1:40913"


def make(self_id="n0", *, term=0, vote_for=None, log=None, seed=1, **overrides):
    config = DLedgerConfig(group="g", selfId=self_id, peers=PEERS, **overrides)
    return DLedgerNode(config, log or MemoryLog(), rng=random.Random(seed), term=term, vote_for=vote_for)


def vote(node, candidate="n1", term=1, end_index=-1, end_term=-1, now=0):
    req = VoteRequest(
        group="g",
        remoteId=node.self_id,
        localId=candidate,
        leaderId=candidate,
        term=term,
        ledgerEndIndex=end_index,
        ledgerEndTerm=end_term,
    )
    effects = node.handle_request(req, now)
    replies = [e for e in effects if isinstance(e, Reply)]
    assert len(replies) == 1
    return replies[0].response, effects


def heartbeat(node, leader="n1", term=1, now=0):
    req = HeartBeatRequest(group="g", remoteId=node.self_id, localId=leader, leaderId=leader, term=term)
    effects = node.handle_request(req, now)
    return [e for e in effects if isinstance(e, Reply)][0].response


def log_with(*terms):
    log = MemoryLog()
    for t in terms:
        log.append_as_leader(b"x", t)
    return log


def sends(effects, cls):
    return [e for e in effects if isinstance(e, Send) and isinstance(e.request, cls)]


def answer_votes(node, effects, result, now, term=None):
    out = []
    for s in sends(effects, VoteRequest):
        resp = VoteResponse.for_request(s.request, s.request.term if term is None else term, result)
        out += node.on_response(s.peer, s.request, resp, now)
    return out


# --- handleVote ------------------------------------------------------------------------------------


def test_accept_is_persisted_before_the_answer():
    node = make(term=1)
    resp, effects = vote(node, "n1", term=1)
    assert resp.voteResult == VoteResult.ACCEPT and resp.term == 1
    kinds = [type(e) for e in effects]
    assert kinds.index(PersistTerm) < kinds.index(Reply)
    assert [e for e in effects if isinstance(e, PersistTerm)] == [PersistTerm(1, "n1")]
    assert vote(node, "n1", term=1)[0].voteResult == VoteResult.ACCEPT  # asking again is fine


@pytest.mark.parametrize(
    "kwargs, state, expected",
    [
        ({"candidate": "n9"}, {}, VoteResult.REJECT_UNKNOWN_LEADER),
        ({"candidate": "n0"}, {}, VoteResult.REJECT_UNEXPECTED_LEADER),
        ({"end_term": 1, "end_index": 5}, {"log": (2,)}, VoteResult.REJECT_EXPIRED_LEDGER_TERM),
        ({"end_term": 2, "end_index": 0}, {"log": (2, 2)}, VoteResult.REJECT_SMALL_LEDGER_END_INDEX),
        ({"term": 1}, {"term": 2}, VoteResult.REJECT_EXPIRED_VOTE_TERM),
        ({"term": 2}, {"term": 2, "vote_for": "n2"}, VoteResult.REJECT_ALREADY_VOTED),
        ({"term": 3}, {"term": 2}, VoteResult.REJECT_TERM_NOT_READY),
        (
            {"term": 2, "end_term": 5, "end_index": 0},
            {"term": 2, "log": (5,)},
            VoteResult.REJECT_TERM_SMALL_THAN_LEDGER,
        ),
    ],
)
def test_vote_rejections(kwargs, state, expected):
    log = log_with(*state.pop("log", ()))
    node = make(log=log, **state)
    resp, effects = vote(node, **kwargs)
    assert resp.voteResult == expected
    assert not [e for e in effects if isinstance(e, PersistTerm)]  # nothing granted, nothing written


def test_expired_vote_term_and_term_small_than_ledger_say_which_term():
    assert vote(make(term=4), term=2)[0].term == 4
    assert vote(make(term=2, log=log_with(5)), term=2, end_term=5, end_index=0)[0].term == 5


def test_already_has_leader_when_a_leader_is_known():
    node = make(term=2, vote_for="n2")
    assert heartbeat(node, "n2", term=2).code == ResponseCode.SUCCESS
    assert vote(node, "n1", term=2)[0].voteResult == VoteResult.REJECT_ALREADY_HAS_LEADER


def test_a_larger_term_makes_a_candidate_that_takes_the_term_on_its_next_pass():
    node = make(term=2, vote_for="n2")
    heartbeat(node, "n2", term=2)
    resp, _ = vote(node, "n1", term=7)
    assert resp.voteResult == VoteResult.REJECT_TERM_NOT_READY and resp.term == 2
    assert (node.role, node.term, node.ms.known_max_term) == (CANDIDATE, 2, 7)
    effects = node.tick(10)
    assert node.term == 7 and node.ms.vote_for is None
    assert PersistTerm(7, None) in effects
    assert not sends(effects, VoteRequest)  # it waits a vote interval first
    assert 10 + 300 <= node.elector.next_time_to_request_vote < 10 + 1000
    assert vote(node, "n1", term=7)[0].voteResult == VoteResult.ACCEPT


def test_taking_leadership_rejects_an_equal_ledger():
    node = make(term=3, preferredLeaderIds="n0")
    node.ms.term_to_take_leadership = 3
    assert vote(node, "n1", term=3)[0].voteResult == VoteResult.REJECT_TAKING_LEADERSHIP


# --- handleHeartBeat -------------------------------------------------------------------------------


def test_heartbeat_rules():
    node = make(term=3)
    assert heartbeat(node, "n9", term=3).code == ResponseCode.UNKNOWN_MEMBER
    assert heartbeat(node, "n0", term=3).code == ResponseCode.UNEXPECTED_MEMBER
    r = heartbeat(node, "n1", term=2)
    assert (r.code, r.term) == (ResponseCode.EXPIRED_TERM, 3)
    assert heartbeat(node, "n1", term=3).code == ResponseCode.SUCCESS
    assert (node.role, node.ms.leader_id) == (FOLLOWER, "n1")
    assert heartbeat(node, "n2", term=3).code == ResponseCode.INCONSISTENT_LEADER
    assert heartbeat(node, "n1", term=5).code == ResponseCode.TERM_NOT_READY
    assert (node.role, node.term, node.ms.leader_id) == (CANDIDATE, 3, None)


def test_heartbeat_for_another_member_or_group_is_refused():
    node = make(term=1)
    wrong = HeartBeatRequest(group="g", remoteId="n1", leaderId="n1", term=1)
    assert [e for e in node.handle_request(wrong, 0) if isinstance(e, Reply)][
        0
    ].response.code == ResponseCode.UNKNOWN_MEMBER
    other = HeartBeatRequest(group="h", remoteId="n0", leaderId="n1", term=1)
    assert [e for e in node.handle_request(other, 0) if isinstance(e, Reply)][
        0
    ].response.code == ResponseCode.UNKNOWN_GROUP


def test_follower_turns_candidate_after_max_heartbeat_leak():
    node = make(term=1)
    heartbeat(node, "n1", term=1, now=1000)
    node.tick(1000 + 3 * 2000)  # elapsed must be > maxHeartBeatLeak * heartBeatTimeIntervalMs
    assert node.role == FOLLOWER
    heartbeat(node, "n1", term=1, now=6000)
    node.tick(6000 + 6001)
    assert node.role == CANDIDATE and node.term == 1


# --- a candidate's rounds --------------------------------------------------------------------------


def test_first_round_at_the_persisted_term_then_leader_on_a_quorum():
    node = make(term=4)
    effects = node.tick(0)
    reqs = sends(effects, VoteRequest)
    assert sorted(s.peer for s in reqs) == ["n1", "n2"]
    assert {(s.request.term, s.request.leaderId, s.request.ledgerEndIndex) for s in reqs} == {(4, "n0", -1)}
    assert PersistTerm(4, "n0") in effects  # it votes for itself, through handleVote
    s = reqs[0]
    out = node.on_response(s.peer, s.request, VoteResponse.for_request(s.request, 4, VoteResult.ACCEPT), 5)
    assert node.role == LEADER and RoleChanged(4, LEADER) in out
    assert len(sends(node.tick(6), HeartBeatRequest)) == 2  # a new leader heartbeats on its next pass


def test_term_not_ready_answers_make_the_candidate_ask_again_at_once():
    node = make(term=4)
    effects = node.tick(0)
    answer_votes(node, effects, VoteResult.REJECT_TERM_NOT_READY, 5)
    assert node.elector.last_parse_result == ParseResult.REVOTE_IMMEDIATELY
    again = node.tick(6)
    assert {s.request.term for s in sends(again, VoteRequest)} == {4}


def test_rejections_decide_the_wait():
    node = make(term=4, vote_for="n0")
    effects = node.tick(0)
    answer_votes(node, effects, VoteResult.REJECT_ALREADY_VOTED, 5)
    assert node.elector.last_parse_result == ParseResult.WAIT_TO_VOTE_NEXT
    assert 305 <= node.elector.next_time_to_request_vote < 1005
    effects = node.tick(node.elector.next_time_to_request_vote)
    assert {s.request.term for s in sends(effects, VoteRequest)} == {5}  # the next term

    node = make(term=4)
    answer_votes(node, node.tick(0), VoteResult.REJECT_ALREADY_HAS_LEADER, 5)
    assert node.elector.last_parse_result == ParseResult.WAIT_TO_REVOTE
    assert node.elector.next_time_to_request_vote >= 5 + 300 + 3 * 2000

    node = make(term=4)
    answer_votes(node, node.tick(0), VoteResult.REJECT_SMALL_LEDGER_END_INDEX, 5)
    assert node.elector.last_parse_result == ParseResult.WAIT_TO_REVOTE
    assert node.elector.next_time_to_request_vote >= 5 + 300 + 1000

    node = make(term=4)
    answer_votes(node, node.tick(0), VoteResult.REJECT_EXPIRED_VOTE_TERM, 5, term=9)
    assert node.elector.last_parse_result == ParseResult.WAIT_TO_VOTE_NEXT
    effects = node.tick(node.elector.next_time_to_request_vote)
    assert {s.request.term for s in sends(effects, VoteRequest)} == {9}  # jumps to the largest term seen


def test_a_round_without_answers_ends_at_its_deadline():
    node = make(term=1)
    node.tick(0)
    rnd = node.elector.vote_round
    assert 2000 <= rnd.deadline < 3000  # 2000 + random(maxVoteIntervalMs)
    node.tick(rnd.deadline - 1)
    assert node.elector.vote_round is rnd
    node.tick(rnd.deadline)
    assert node.elector.vote_round is None and node.elector.last_parse_result == ParseResult.WAIT_TO_REVOTE


def test_late_and_duplicate_vote_answers_are_ignored():
    node = make(term=1)
    effects = node.tick(0)
    s = sends(effects, VoteRequest)[0]
    no = VoteResponse.for_request(s.request, 1, VoteResult.REJECT_ALREADY_VOTED)
    node.on_response(s.peer, s.request, no, 1)
    node.on_response(s.peer, s.request, no, 2)
    assert node.elector.vote_round.answered == {s.peer}
    node.tick(5000)
    yes = VoteResponse.for_request(s.request, 1, VoteResult.ACCEPT)
    node.on_response(s.peer, s.request, yes, 5001)  # the round is over
    assert node.role == CANDIDATE


def test_vote_intervals_are_random_within_bounds_and_seeded():
    def waits(seed):
        node = make(term=1, seed=seed)
        out = []
        now = 0
        for _ in range(20):
            answer_votes(node, node.tick(now), VoteResult.REJECT_ALREADY_VOTED, now + 1)
            out.append(node.elector.next_time_to_request_vote - (now + 1))
            now = node.elector.next_time_to_request_vote
        return out

    a = waits(1)
    assert all(300 <= w < 1000 for w in a) and len(set(a)) > 10
    assert waits(1) == a and waits(2) != a


# --- a leader's heartbeats -------------------------------------------------------------------------


def leader(term=2, **kw):
    node = make(term=term, **kw)
    node.elector.change_role_to_leader(term)
    return node


def answer_heartbeats(node, effects, code, now, term=-1):
    for s in sends(effects, HeartBeatRequest):
        node.on_response(s.peer, s.request, HeartBeatResponse(code=code, term=term), now)


def test_leader_heartbeats_every_interval_and_keeps_a_quorum():
    node = leader()
    effects = node.tick(0)
    assert len(sends(effects, HeartBeatRequest)) == 2
    answer_heartbeats(node, effects, ResponseCode.SUCCESS, 3)
    assert node.elector.last_succ_heartbeat == 3
    assert not sends(node.tick(2000), HeartBeatRequest)
    assert len(sends(node.tick(2001), HeartBeatRequest)) == 2


def test_leader_steps_down_when_no_quorum_answers_for_max_heartbeat_leak():
    node = leader()
    answer_heartbeats(node, node.tick(0), ResponseCode.SUCCESS, 1)
    for now in (2002, 4003):
        node.tick(now)  # rounds sent at 2002 and 4003, the first ends unanswered at 4003
        assert node.role == LEADER
    node.tick(6004)  # the second ends unanswered: 6004 - 1 > maxHeartBeatLeak * heartBeatTimeIntervalMs
    assert node.role == CANDIDATE and node.term == 2


def test_a_new_leader_whose_first_heartbeats_fail_steps_down_at_once():
    node = leader()
    node.tick(0)
    node.tick(2000)
    assert node.role == CANDIDATE


def test_leader_steps_down_on_a_larger_term():
    node = leader()
    effects = node.tick(0)
    answer_heartbeats(node, effects, ResponseCode.EXPIRED_TERM, 3, term=5)
    assert node.role == CANDIDATE and node.ms.known_max_term == 5


def test_term_not_ready_answers_resend_heartbeats_at_once():
    node = leader()
    effects = node.tick(0)
    answer_heartbeats(node, effects, ResponseCode.TERM_NOT_READY, 3)
    assert node.role == LEADER and node.elector.last_send_heartbeat == NEVER
    assert len(sends(node.tick(4), HeartBeatRequest)) == 2


# --- leadership transfer ---------------------------------------------------------------------------


def test_transfer_refusals():
    node = leader(term=3)

    def ask(**kw):
        req = LeadershipTransferRequest(group="g", remoteId="n0", transferId="n0", term=3, transfereeId="n1")
        for k, v in kw.items():
            setattr(req, k, v)
        return [e for e in node.handle_request(req, 0) if isinstance(e, Reply)]

    assert ask(term=2)[0].response.code == ResponseCode.INCONSISTENT_TERM
    assert ask(transfereeId="n7")[0].response.code == ResponseCode.UNKNOWN_MEMBER
    assert ask() == []  # under way
    assert node.ms.transferee == "n1"
    assert ask()[0].response.code == ResponseCode.LEADER_TRANSFERRING
    follower = make("n2", term=3)
    heartbeat(follower, "n1", term=3)
    req = LeadershipTransferRequest(group="g", remoteId="n2", transferId="n0", term=3, transfereeId="n2")
    assert [e for e in follower.handle_request(req, 0) if isinstance(e, Reply)][
        0
    ].response.code == ResponseCode.INCONSISTENT_LEADER
