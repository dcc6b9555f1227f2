"""Push, compare, truncate, commit (DLedgerEntryPusher, dledger 0.3.1.2) and the in-memory log."""

import random

import pytest

from rmqha.broker.dledger.config import DLedgerConfig
from rmqha.broker.dledger.effects import AppendDone, Committed, Reply, Send
from rmqha.broker.dledger.entry import BODY_OFFSET, DLedgerEntry
from rmqha.broker.dledger.node import DLedgerNode
from rmqha.broker.dledger.protocol import (
    AppendEntryRequest,
    DLedgerError,
    HeartBeatRequest,
    PushEntryRequest,
    PushEntryResponse,
    PushType,
    ResponseCode,
)
from rmqha.broker.dledger.replication import MemoryLog, Rules

PEERS3 = "n0-h:1;n1-h:2;n2-h:3"
PEERS5 = "n0-h:1;n1-h:2;n2-h:3;n3-h:4;n4-h:5"


def make(self_id="n0", peers=PEERS3, *, term=1, log=None, rules=None, **overrides):
    config = DLedgerConfig(group="g", selfId=self_id, peers=peers, **overrides)
    return DLedgerNode(config, log if log is not None else MemoryLog(), rng=random.Random(0), term=term, rules=rules)


def leader(term=1, **kw):
    node = make(term=term, **kw)
    node.elector.change_role_to_leader(term)
    node.elector.last_send_heartbeat = float("inf")  # keep heartbeats out of the effects
    return node


def follower(self_id="n1", leader_id="n0", term=1, **kw):
    node = make(self_id, term=term, **kw)
    req = HeartBeatRequest(group="g", remoteId=self_id, localId=leader_id, leaderId=leader_id, term=term)
    node.handle_request(req, 0)
    assert node.role == "FOLLOWER"
    return node


def pushes(effects, peer=None, type_=None):
    return [
        e
        for e in effects
        if isinstance(e, Send)
        and isinstance(e.request, PushEntryRequest)
        and (peer is None or e.peer == peer)
        and (type_ is None or e.request.type == type_)
    ]


def replies(effects):
    return [e.response for e in effects if isinstance(e, Reply)]


def answer(req, code=ResponseCode.SUCCESS, begin=0, end=-1):
    return PushEntryResponse(
        group="g",
        code=code,
        term=req.term,
        index=req.first_entry_index,
        count=req.count,
        beginIndex=begin,
        endIndex=end,
    )


def log_of(*terms, bodies=None):
    log = MemoryLog()
    for i, t in enumerate(terms):
        log.append_as_leader(bodies[i] if bodies else f"e{i}".encode(), t)
    return log


# --- the in-memory log -----------------------------------------------------------------------------


def test_memory_log_assigns_index_term_and_pos():
    log = MemoryLog(base_pos=4096)
    a = log.append_as_leader(b"abc", 2)
    b = log.append_as_leader(b"de", 3)
    assert (a.index, a.term, a.pos, a.size) == (0, 2, 4096, BODY_OFFSET + 3)
    assert (b.index, b.term, b.pos) == (1, 3, 4096 + BODY_OFFSET + 3)
    assert (log.begin_index, log.end_index, log.end_term) == (0, 1, 3)
    with pytest.raises(DLedgerError) as e:
        log.get(2)
    assert e.value.code == ResponseCode.INDEX_OUT_OF_RANGE


def test_memory_log_follower_append_checks_the_index():
    leader_log = log_of(1, 1)
    log = MemoryLog()
    log.append_as_follower(leader_log.get(0))
    with pytest.raises(DLedgerError) as e:
        log.append_as_follower(DLedgerEntry(body=b"x", index=5, term=1, pos=999))
    assert e.value.code == ResponseCode.INCONSISTENT_INDEX
    log.append_as_follower(leader_log.get(1))
    assert log.entries() == leader_log.entries()


def test_memory_log_truncate_keeps_an_equal_entry_and_replaces_a_different_one():
    log = log_of(1, 1, 1)
    kept = log.get(1)
    assert log.truncate(kept) == 1 and log.end_index == 1  # equal: cut after it
    other = log_of(1, 2, bodies=[b"e0", b"new"]).get(1)
    assert log.truncate(other) == 1
    assert (log.end_index, log.end_term, log.get(1).body) == (1, 2, b"new")  # different: replaced


# --- leader: compare, truncate, append, commit -----------------------------------------------------


def test_new_leader_compares_at_its_end_then_appends():
    node = leader(term=2, log=log_of(1, 1))
    effects = node.tick(0)
    cmp = pushes(effects, "n1", PushType.COMPARE)
    assert len(cmp) == 1 and cmp[0].request.entry.index == 1 and cmp[0].request.term == 2
    node.on_response("n1", cmp[0].request, answer(cmp[0].request, end=1), 1)
    assert node.pusher.dispatchers["n1"].type == PushType.APPEND
    assert node.pusher.watermark(2, "n1") == 1
    ap = pushes(node.append(b"new", "t1", 2), "n1", PushType.APPEND)
    assert [p.request.entry.index for p in ap] == [2] and ap[0].request.entry.term == 2
    done = node.on_response("n1", ap[0].request, answer(ap[0].request), 4)
    assert Committed(-1, 2) in done  # the raft rule: an entry of term 2 is on a quorum
    acks = [e for e in done if isinstance(e, AppendDone)]
    assert acks[0].token == "t1" and acks[0].response.code == ResponseCode.SUCCESS and acks[0].response.index == 2
    assert acks[0].response.pos == node.log.get(2).pos


def test_compare_walks_back_then_truncates_a_longer_follower():
    node = leader(term=3, log=log_of(1, 1, 2, 2))
    cmp = pushes(node.tick(0), "n1", PushType.COMPARE)[0].request
    assert cmp.entry.index == 3
    # the follower ends at 1: compare there
    nxt = pushes(node.on_response("n1", cmp, answer(cmp, ResponseCode.INCONSISTENT_STATE, end=1), 1), "n1")
    assert nxt[0].request.type == PushType.COMPARE and nxt[0].request.entry.index == 1
    # differs at 1 and has it: step back one
    cmp = nxt[0].request
    nxt = pushes(node.on_response("n1", cmp, answer(cmp, ResponseCode.INCONSISTENT_STATE, end=1), 2), "n1")
    assert nxt[0].request.entry.index == 0
    # same at 0 but the follower has more: truncate after 0
    cmp = nxt[0].request
    trunc = pushes(node.on_response("n1", cmp, answer(cmp, end=1), 3), "n1")
    assert trunc[0].request.type == PushType.TRUNCATE and trunc[0].request.entry.index == 0
    out = node.on_response("n1", trunc[0].request, answer(trunc[0].request, end=0), 4)
    ap = pushes(out, "n1", PushType.APPEND)
    assert [p.request.entry.index for p in ap] == [1, 2, 3]


def test_a_compare_that_is_not_answered_is_retried_after_a_backoff():
    node = leader(term=2, log=log_of(1))
    first = pushes(node.tick(0), "n1", PushType.COMPARE)
    assert not pushes(node.tick(2999), "n1", PushType.COMPARE)
    node.tick(3000)  # the 3 s wait throws: back to COMPARE, sleep 500 ms
    assert not pushes(node.tick(3499), "n1", PushType.COMPARE)
    again = pushes(node.tick(3500), "n1", PushType.COMPARE)
    assert again and again[0].request is not first[0].request
    late = node.on_response("n1", first[0].request, answer(first[0].request, end=0), 3501)
    assert node.pusher.dispatchers["n1"].type == PushType.COMPARE and not pushes(late, "n1")


@pytest.mark.parametrize("rules, first_compare", [(Rules(), 2), (Rules(fresh_compare_per_term=False), 0)])
def test_a_new_term_compares_from_the_leaders_end(rules, first_compare):
    """0.3.1.2 keeps the compareIndex a dispatcher reached when it lost an earlier leadership mid-COMPARE;
    a follower that has that entry and more then answers SUCCESS and is TRUNCATEd after it, committed
    entries included."""
    node = leader(term=2, log=log_of(1, 1, 1), rules=rules)
    cmp = pushes(node.tick(0), "n1", PushType.COMPARE)[0].request
    nxt = pushes(node.on_response("n1", cmp, answer(cmp, ResponseCode.INCONSISTENT_STATE, end=0), 1), "n1")
    assert nxt[0].request.entry.index == 0  # walked back to the follower's end
    node.elector.change_role_to_candidate(3)  # leadership lost before the answer
    node.ms.term = 3
    node.elector.change_role_to_leader(3)
    again = pushes(node.tick(10), "n1", PushType.COMPARE)
    assert again[0].request.entry.index == first_compare
    out = node.on_response("n1", again[0].request, answer(again[0].request, end=2), 11)
    truncates = pushes(out, "n1", PushType.TRUNCATE)
    assert bool(truncates) == (first_compare == 0)  # the follower caught up meanwhile: cut after 0


def test_an_unacknowledged_append_is_pushed_again_after_max_push_timeout():
    node = leader(term=1)
    cmp = pushes(node.append(b"a", 1, 0), "n1", PushType.COMPARE)[0].request
    first = pushes(node.on_response("n1", cmp, answer(cmp, end=0), 1), "n1", PushType.APPEND)
    # the follower had entry 0 already (end 0 == compareIndex): nothing to push until something new
    assert not first
    node.append(b"b", 2, 2)
    assert not pushes(node.tick(1002), "n1", PushType.APPEND)
    again = pushes(node.tick(1003), "n1", PushType.APPEND)
    assert [p.request.entry.index for p in again] == [1]


def test_an_idle_dispatcher_sends_commit_once_a_second():
    node = leader(term=1, log=log_of(1))
    cmp = pushes(node.tick(0), "n1", PushType.COMPARE)[0].request
    node.on_response("n1", cmp, answer(cmp, end=0), 1)
    commits = pushes(node.tick(1002), "n1", PushType.COMMIT)
    assert len(commits) == 1 and commits[0].request.entry is None
    assert not pushes(node.tick(1500), "n1", PushType.COMMIT)


def test_quorum_index_is_the_median_watermark_of_the_current_term():
    node = leader(term=3, peers=PEERS5, log=log_of(3, 3, 3, 3, 3))
    p = node.pusher
    for peer, mark in {"n1": 4, "n2": 2, "n3": -1, "n4": -1}.items():
        p.update_watermark(3, peer, mark)
    p.update_watermark(3, "n0", 4)
    p.check_quorum(0)
    assert node.log.committed_index == 2  # sorted desc [4, 4, 2, -1, -1][5 // 2]
    p.update_watermark(2, "n3", 4)  # another term's watermarks do not count
    p.check_quorum(1)
    assert node.log.committed_index == 2


@pytest.mark.parametrize("rules, committed", [(Rules(), -1), (Rules(commit_rule="dledger"), 1)])
def test_raft_rule_does_not_commit_an_older_terms_entry_by_counting(rules, committed):
    node = leader(term=5, log=log_of(1, 2), rules=rules)
    node.pusher.update_watermark(5, "n1", 1)
    node.tick(0)  # the leader's own watermark moves to its end on the once-a-second check
    assert node.log.committed_index == committed


def test_pending_appends_time_out_or_end_with_the_term():
    node = leader(term=1)
    out = node.append(b"a", "t1", 0)
    out += node.tick(2499)
    assert not [e for e in out if isinstance(e, AppendDone)]
    done = [e for e in node.tick(2500) if isinstance(e, AppendDone)]
    assert done[0].response.code == ResponseCode.WAIT_QUORUM_ACK_TIMEOUT
    node.append(b"b", "t2", 2600)
    node.ms.term = 2  # a new term as leader (as after a re-election)
    node.elector.change_role_to_leader(2)
    done = [e for e in node.tick(2601) if isinstance(e, AppendDone)]
    assert done[0].token == "t2" and done[0].response.code == ResponseCode.TERM_CHANGED


def test_appends_are_refused_off_the_leader_and_while_transferring():
    node = make(term=1)
    done = [e for e in node.append(b"a", "t", 0) if isinstance(e, AppendDone)]
    assert done[0].response.code == ResponseCode.NOT_LEADER
    node = leader(term=1, acceptRemoteAppend=True)  # the standalone server's setting
    node.ms.transferee = "n1"
    req = AppendEntryRequest(group="g", remoteId="n0", body=b"a")
    assert replies(node.handle_request(req, 0))[0].code == ResponseCode.LEADER_TRANSFERRING


def test_a_remote_append_is_refused_by_default_and_forged_peer_traffic_too():
    """Review 2, A3: a broker's group never appends remotely; peer traffic only from configured peers."""
    node = leader(term=1)
    [resp] = replies(node.handle_request(AppendEntryRequest(group="g", remoteId="n0", body=b"evil"), 0))
    assert resp.code == ResponseCode.UNSUPPORTED and node.log.end_index == -1
    f = follower()
    for req in (
        HeartBeatRequest(group="g", remoteId="n1", localId="n9", leaderId="n9", term=5),
        HeartBeatRequest(group="g", remoteId="n1", localId="n2", leaderId="n0", term=5),
        PushEntryRequest(
            group="g", remoteId="n1", localId="evil", leaderId="n0", term=1, type=PushType.COMMIT, commitIndex=7
        ),
    ):
        [resp] = replies(f.handle_request(req, 0))
        assert resp.code == ResponseCode.UNKNOWN_MEMBER
    assert (f.term, f.ms.leader_id, f.role) == (1, "n0", "FOLLOWER")


# --- follower --------------------------------------------------------------------------------------


def push(node, type_, entry=None, term=1, leader_id="n0", commit=-1, now=0):
    req = PushEntryRequest(
        group="g",
        remoteId=node.self_id,
        localId=leader_id,
        leaderId=leader_id,
        term=term,
        type=type_,
        entry=entry,
        commitIndex=commit,
    )
    return req, node.handle_request(req, now)


def test_follower_appends_in_index_order_whatever_the_arrival_order():
    src = log_of(1, 1, 1)
    node = follower()
    _, out2 = push(node, PushType.APPEND, src.get(2))
    _, out1 = push(node, PushType.APPEND, src.get(1))
    assert not replies(out2 + out1) and node.log.end_index == -1
    _, out0 = push(node, PushType.APPEND, src.get(0), commit=1)
    rs = replies(out0)
    assert [(r.code, r.index) for r in rs] == [(200, 0), (200, 1), (200, 2)]
    assert node.log.entries() == src.entries()
    assert Committed(-1, 0) in out0  # each push's commitIndex counts once its own entry is in


def test_follower_refuses_duplicates_and_other_terms_or_leaders():
    src = log_of(1, 1)
    node = follower()
    push(node, PushType.APPEND, src.get(1))
    _, out = push(node, PushType.APPEND, src.get(1))
    assert replies(out)[0].code == ResponseCode.REPEATED_PUSH
    node = follower(term=2)
    _, out = push(node, PushType.APPEND, src.get(0), term=1)
    assert replies(out)[0].code == ResponseCode.INCONSISTENT_STATE
    _, out = push(node, PushType.APPEND, src.get(0), term=2, leader_id="n2")
    assert replies(out)[0].code == ResponseCode.INCONSISTENT_STATE
    assert node.log.end_index == -1


def test_follower_compare_truncate_commit():
    mine = log_of(1, 1, 1)
    node = follower(term=2, log=mine)
    theirs = log_of(1, 2, bodies=[b"e0", b"x"])
    _, out = push(node, PushType.COMPARE, theirs.get(1), term=2)
    r = replies(out)[0]
    assert (r.code, r.beginIndex, r.endIndex) == (ResponseCode.INCONSISTENT_STATE, 0, 2)
    _, out = push(node, PushType.COMPARE, theirs.get(0), term=2)
    assert replies(out)[0].code == ResponseCode.SUCCESS
    _, out = push(node, PushType.TRUNCATE, theirs.get(0), term=2, commit=0)
    assert replies(out)[0].code == ResponseCode.SUCCESS and node.log.end_index == 0
    assert Committed(-1, 0) in out
    _, out = push(node, PushType.APPEND, theirs.get(1), term=2)
    _, out = push(node, PushType.COMMIT, None, term=2, commit=5)
    r = replies(out)[0]
    assert r.code == ResponseCode.SUCCESS and r.index is None
    assert node.log.committed_index == 1  # never past its own end


@pytest.mark.parametrize("rules, kept", [(Rules(), 3), (Rules(follower_truncate_keeps_own_term=False), 0)])
def test_a_stale_truncate_does_not_cut_the_leaders_own_entries(rules, kept):
    """The property test found this (a 5-node schedule of an earlier generator): a TRUNCATE delayed past
    the appends that followed it cut entries the leader had counted, and a later leader lacked a
    committed entry. DLedger relies on TCP order here; the core refuses such a TRUNCATE."""
    node = follower(term=2, log=log_of(1), rules=rules)
    theirs = log_of(1, 2, 2, 2)
    stale, _ = push(node, PushType.TRUNCATE, theirs.get(0), term=2)  # processed: the log is [e0]
    for i in (1, 2, 3):
        push(node, PushType.APPEND, theirs.get(i), term=2)
    assert node.log.end_index == 3
    out = node.handle_request(stale, 10)  # the same TRUNCATE again, delayed or duplicated
    assert node.log.end_index == kept
    assert replies(out)[0].code == (ResponseCode.INCONSISTENT_STATE if kept == 3 else ResponseCode.SUCCESS)


@pytest.mark.parametrize(
    "rules, code", [(Rules(), ResponseCode.INCONSISTENT_TERM), (Rules.dledger_0312(), ResponseCode.SUCCESS)]
)
def test_compare_from_another_term(rules, code):
    node = follower(term=2, log=log_of(1), rules=rules)
    _, out = push(node, PushType.COMPARE, log_of(1).get(0), term=3, leader_id="n2")
    assert replies(out)[0].code == code


@pytest.mark.parametrize("rules, committed", [(Rules(), -1), (Rules.dledger_0312(), 0)])
def test_commit_index_from_a_later_term(rules, committed):
    node = follower(term=2, log=log_of(1), rules=rules)
    push(node, PushType.COMMIT, None, term=3, leader_id="n2", commit=0)
    assert node.log.committed_index == committed


def test_not_a_follower_answers_compare_with_not_follower():
    node = leader(term=1)
    _, out = push(node, PushType.COMPARE, log_of(1).get(0), leader_id="n1")
    assert replies(out)[0].code == ResponseCode.NOT_FOLLOWER


def test_follower_answers_a_push_it_already_has_and_fails_one_stuck_behind_a_gap():
    src = log_of(1, 1, 1, 1)
    node = follower()
    push(node, PushType.APPEND, src.get(0))
    push(node, PushType.APPEND, src.get(3), now=10)  # index 1 and 2 never come
    out = node.tick(1500)
    assert [(r.code, r.index) for r in replies(out)] == [(ResponseCode.INCONSISTENT_STATE, 3)]
    # a re-sent push it already has: answered SUCCESS on the next check
    req, out = push(node, PushType.APPEND, src.get(0), now=1600)
    assert not replies(out)  # buffered: it is not at end + 1
    late = node.tick(2600)
    assert (ResponseCode.SUCCESS, 0) in [(r.code, r.index) for r in replies(late)]
