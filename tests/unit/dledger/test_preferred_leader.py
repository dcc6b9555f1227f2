"""Leadership transfer to preferredLeaderIds (dledger 0.3.1.2 DLedgerServer.checkPreferredLeader) and the
checks on LeadershipTransferRequest, on single nodes and on simulated groups (tests/unit/dledger/sim.py)."""

from rmqha.broker.dledger.effects import Reply
from rmqha.broker.dledger.election import LEADER
from rmqha.broker.dledger.protocol import (
    HeartBeatRequest,
    HeartBeatResponse,
    LeadershipTransferRequest,
    ResponseCode,
)
from tests.unit.dledger.sim import Cluster, NetworkFaults
from tests.unit.dledger.test_election import heartbeat, leader, log_with, make, sends
from tests.unit.dledger.test_raft_properties import wait_for

# --- the choice, on one leader ----------------------------------------------------------------------


def live(node, *peers, now=0.0, code=ResponseCode.SUCCESS):
    """Answer one heartbeat round: `peers` with `code`, the others with a NETWORK_ERROR."""
    for s in sends(node.tick(now), HeartBeatRequest):
        node.on_response(s.peer, s.request, HeartBeatResponse(code=code if s.peer in peers else 302), now)


def test_the_choice_follows_check_preferred_leader():
    node = leader(term=2, preferredLeaderIds="n1;n2")
    node.next_preferred_check = float("inf")  # no check of its own while the test asks
    for _ in range(5):
        node.log.append_as_leader(b"x", 2)  # end index 4
    assert node.preferred_transferee() is None  # peersLiveTable is empty: no one answered yet
    live(node, "n1", "n2")
    assert node.preferred_transferee() == ("n1", 5)  # a tie: the first listed
    node.pusher.update_watermark(2, "n2", 3)
    assert node.preferred_transferee() == ("n2", 1)  # the one least behind
    live(node, "n1", now=2001)  # n2 did not answer
    assert node.preferred_transferee() == ("n1", 5)
    node.config.maxLeadershipTransferWaitIndex = 5  # 5 behind is not less than 5
    assert node.preferred_transferee() is None
    node.config.maxLeadershipTransferWaitIndex = 6
    assert node.preferred_transferee() == ("n1", 5)


def test_an_answer_other_than_network_error_counts_as_live_and_becoming_leader_forgets():
    node = leader(term=2, preferredLeaderIds="n1")
    live(node, "n1", code=ResponseCode.EXPIRED_TERM)  # any answer at all: the peer is up
    assert node.ms.peers_live == {"n1": True, "n2": False}
    node.elector.change_role_to_candidate(2)
    node.elector.change_role_to_leader(2)
    assert node.ms.peers_live == {} and node.preferred_transferee() is None


def test_no_transfer_from_a_preferred_leader_or_a_follower_or_while_transferring():
    node = leader(term=2, preferredLeaderIds="n0;n1")
    live(node, "n1", "n2")
    assert node.preferred_transferee() is None  # n0 is preferred itself
    follower = make("n0", term=2, preferredLeaderIds="n1")
    heartbeat(follower, "n2", term=2)
    assert follower.preferred_transferee() is None
    node = leader(term=2, preferredLeaderIds="n1")
    live(node, "n1")
    node.ms.transferee = "n2"
    assert node.preferred_transferee() is None


def test_checks_run_once_a_second_and_not_while_a_transfer_waits():
    node = leader(term=2, preferredLeaderIds="n1")
    live(node, "n1", now=0)  # the first tick starts the schedule: the first check at 1000
    assert not sends(node.tick(999), LeadershipTransferRequest)
    (take,) = sends(node.tick(1000), LeadershipTransferRequest)
    assert (take.peer, take.request.localId, take.request.leaderId, take.request.transferId) == ("n1",) + ("n0",) * 3
    assert take.request.term == 2 and take.request.takeLeadershipLedgerIndex == -1
    assert node.ms.transferee == "n1" and node.auto_transfers == 1
    # Java's check thread blocks on the transfer: nothing new for as long as it is under way
    assert not sends(node.tick(5000), LeadershipTransferRequest)
    failed = LeadershipTransferRequest().copy_base_info(take.request)
    failed.code = ResponseCode.TAKE_LEADERSHIP_FAILED
    assert node.elector.transfers
    effects = node.on_response("n1", take.request, failed, 5001)
    assert node.role == LEADER and not node.elector.transfers.get(id(take.request))
    # the transferee was cleared, and the runs missed meanwhile collapse into one at once, which tries
    # again; then the schedule goes on at its slots
    (again,) = sends(effects, LeadershipTransferRequest)
    assert again.request is not take.request and node.ms.transferee == "n1" and node.auto_transfers == 2
    assert node.next_preferred_check == 6000


# --- LeadershipTransferRequest's checks ---------------------------------------------------------------


def test_the_admin_request_cannot_make_the_leader_transfer_to_itself():
    node = leader(term=3)
    req = LeadershipTransferRequest(group="g", remoteId="n0", transferId="n0", term=3, transfereeId="n0")
    (reply,) = [e for e in node.handle_request(req, 0) if isinstance(e, Reply)]
    assert reply.response.code == ResponseCode.UNEXPECTED_ARGUMENT
    assert node.role == LEADER and node.ms.transferee is None and not node.elector.transfers


def test_only_the_leader_itself_can_ask_a_follower_to_take_over():
    def ask(**kw):
        follower = make("n2", term=3)
        heartbeat(follower, "n0", term=3)
        req = LeadershipTransferRequest(
            group="g",
            remoteId="n2",
            localId="n0",
            leaderId="n0",
            transferId="n0",
            term=3,
            transfereeId="n2",
            takeLeadershipLedgerIndex=-1,
        )
        for k, v in kw.items():
            setattr(req, k, v)
        replies = [e for e in follower.handle_request(req, 0) if isinstance(e, Reply)]
        return follower, replies

    # an admin tool's request (no localId, no leaderId) sent to a follower, or a peer speaking for the leader
    for kw in ({"localId": None, "leaderId": None}, {"localId": "n1"}, {"leaderId": "n1"}):
        follower, replies = ask(**kw)
        assert replies[0].response.code == ResponseCode.INCONSISTENT_LEADER, kw
        assert follower.ms.term == 3 and follower.ms.leader_id == "n0"  # no election started
    follower, replies = ask()  # 0.3.1.2's leader names itself in all three: taken
    assert replies == [] and follower.ms.term_to_take_leadership == 4


# --- groups -----------------------------------------------------------------------------------------

LAN = NetworkFaults(max_delay=20.0)


def group_with_n2_down(preferred="n2", **overrides):
    """Three nodes, preferredLeaderIds on each; n2 is down from the start, so n0 or n1 leads first."""
    c = Cluster(3, 3, faults=LAN, config_overrides={"preferredLeaderIds": preferred, **overrides})
    c.crash("n2")
    wait_for(c, lambda: c.leader() is not None, 10_000, "a first leader")
    first = c.leader()
    for _ in range(5):
        c.client_append()
    wait_for(c, lambda: c.boxes[first].log.committed_index == 4, 5_000, "five entries committed")
    return c, first


def one_leader(c):
    lead = c.leader()
    return lead is not None and all(c.boxes[i].node.ms.leader_id == lead for i in c.alive())


def test_a_follower_that_is_preferred_takes_over_once_it_is_back_and_caught_up():
    c, first = group_with_n2_down()
    term = c.boxes[first].node.term
    c.start("n2")
    back = c.now
    wait_for(c, lambda: c.leader() == "n2" and one_leader(c), 10_000, "n2 to lead")
    # NETWORK_ERRORs of heartbeats sent while n2 was down come up to rpcTimeoutMs (3 s) after it is
    # back and mark it down again (as in Java); then a heartbeat it answers (<= 2 s), the next check
    # (<= 1 s) and one election
    assert c.now - back < 6_500
    assert c.boxes["n2"].node.term == term + 1  # one transfer, no contested election
    assert c.boxes[first].node.auto_transfers == 1
    c.client_append()
    wait_for(c, lambda: all(c.boxes[i].log.committed_index == 5 for i in c.ids), 5_000, "an append under n2")
    c.run_until(c.now + 10_000)
    assert c.leader() == "n2" and c.boxes["n2"].node.term == term + 1  # and it stays there
    c.check()


def test_a_preferred_leader_that_is_down_is_not_made_leader():
    c, first = group_with_n2_down()
    term = c.boxes[first].node.term
    c.run_until(c.now + 15_000)
    assert c.leader() == first and c.boxes[first].node.term == term
    assert c.boxes[first].node.auto_transfers == 0
    c.client_append()
    wait_for(c, lambda: c.boxes[first].log.committed_index == 5, 5_000, "an append")


def drop_pushes(node):
    """n2 answers heartbeats (it is live) but takes no entries: it stays as far behind as it was."""
    if node.self_id == "n2":
        node.handler.handle_push = lambda request, now: None


def test_a_preferred_leader_too_far_behind_is_not_made_leader():
    c, first = group_with_n2_down(maxLeadershipTransferWaitIndex=5)
    term = c.boxes[first].node.term
    c.on_start = drop_pushes
    c.start("n2")
    wait_for(c, lambda: c.boxes[first].node.ms.peers_live.get("n2"), 5_000, "n2 to answer a heartbeat")
    c.run_until(c.now + 10_000)
    assert c.boxes["n2"].log.end_index == -1  # 5 entries behind, not less than 5
    assert c.leader() == first and c.boxes[first].node.term == term
    assert c.boxes[first].node.auto_transfers == 0


def test_a_transferee_that_cannot_catch_up_in_time_leaves_the_leader_in_place():
    """Within the index gap but not catching up: n2 waits leadershipTransferWaitTimeout and answers
    TAKE_LEADERSHIP_FAILED; the leader clears its transferee and tries again at its next check."""
    c, first = group_with_n2_down()
    term = c.boxes[first].node.term
    c.on_start = drop_pushes
    c.start("n2")
    wait_for(c, lambda: c.boxes[first].node.auto_transfers >= 3, 10_000, "three attempts")
    assert c.leader() == first and c.boxes[first].node.term == term
    assert c.boxes["n2"].node.role == "FOLLOWER" and c.boxes["n2"].node.term == term


def test_a_transfer_that_times_out_leaves_a_working_leader():
    """n2 is cut off just as the leader asks it to take over: the request times out after rpcTimeoutMs
    and the leader clears its transferee and keeps leading. Its next check comes at once (the runs
    missed while blocked) and still finds n2 live (its last heartbeat answer is the latest word: the
    ones sent since time out later), so one more attempt times out; after that n2 counts as down, and
    the leader commits with n1. Once n2 is back it takes over."""
    c, first = group_with_n2_down()
    term = c.boxes[first].node.term
    lead = c.boxes[first].node
    starts = []
    send = c._send

    def cut_at_the_transfer(src, incarnation, dst, request):
        if isinstance(request, LeadershipTransferRequest) and (src, dst) == (first, "n2"):
            starts.append(c.now)
            if len(starts) == 1:
                c.partition(["n2"], [i for i in c.ids if i != "n2"])
        send(src, incarnation, dst, request)

    c._send = cut_at_the_transfer
    c.start("n2")
    wait_for(c, lambda: starts, 10_000, "the transfer to start")
    wait_for(c, lambda: c.now - starts[0] > 6_100, 7_000, "two RPC timeouts")
    assert starts == [starts[0], starts[0] + 3_000]  # the second at once after the first's timeout
    assert lead.ms.transferee is None and not lead.ms.peers_live["n2"] and lead.auto_transfers == 2
    assert c.leader() == first and lead.term == term
    c.client_append(first)
    wait_for(c, lambda: lead.log.committed_index == 5, 3_000, "an append after the timeouts")
    c.run_until(c.now + 5_000)
    assert lead.auto_transfers == 2 and c.leader() == first
    c.heal()
    wait_for(c, lambda: c.leader() == "n2" and one_leader(c), 10_000, "n2 to lead once the link is back")
    assert len(starts) == 3 and lead.term == term + 1
    assert c.boxes["n2"].log.committed_index == 5
    c.check()


def take_over(index, term=3):
    return LeadershipTransferRequest(
        group="g",
        remoteId="n2",
        localId="n0",
        leaderId="n0",
        transferId="n0",
        term=term,
        transfereeId="n2",
        takeLeadershipLedgerIndex=index,
    )


def answered(effects):
    return {id(e.to): e.response.code for e in effects if isinstance(e, Reply)}


def test_every_take_leadership_request_is_answered_however_many_wait():
    """Found by fuzz/dledger_rpc.py: a second request waiting for the transferee to catch up replaced the
    first, which was never answered."""
    follower = make("n2", term=3)
    heartbeat(follower, "n0", term=3)
    first, second = take_over(5), take_over(4)
    out = follower.handle_request(first, 0) + follower.handle_request(second, 0)
    assert answered(out) == {}
    out = follower.tick(follower.config.leadershipTransferWaitTimeout + 1)  # neither caught up in time
    assert answered(out) == {
        id(first): ResponseCode.TAKE_LEADERSHIP_FAILED,
        id(second): ResponseCode.TAKE_LEADERSHIP_FAILED,
    }


def test_requests_that_catch_up_together_are_all_answered_at_the_role_change():
    """Two waiting requests caught up in one tick are both acted on (0.3.1.2 keeps only the latest one's
    answer); the role change that decides term 4 answers each of them once."""
    log = log_with(1, 1)
    follower = make("n2", term=3, log=log)
    heartbeat(follower, "n0", term=3)
    first, second = take_over(3), take_over(3)
    out = follower.handle_request(first, 0) + follower.handle_request(second, 0)
    log.append_as_leader(b"y", 3)
    log.append_as_leader(b"z", 3)
    out += follower.tick(1)  # caught up before the deadline: both handled
    assert follower.ms.term_to_take_leadership == 4 and not follower.waiting_transfers
    hb = HeartBeatRequest(group="g", remoteId="n2", localId="n0", leaderId="n0", term=4)
    # term 4 went to n0 after all: its heartbeat moves this node to term 4 (TERM_NOT_READY, then the next
    # pass), and the next one makes it n0's follower
    out += follower.handle_request(hb, 2) + follower.tick(3) + follower.handle_request(hb, 4)
    assert follower.ms.term == 4 and follower.ms.leader_id == "n0"
    out = [e for e in out if not (isinstance(e, Reply) and e.to is hb)]
    replies = [e for e in out if isinstance(e, Reply)]
    assert sorted(id(r.to) for r in replies) == sorted([id(first), id(second)]), replies
