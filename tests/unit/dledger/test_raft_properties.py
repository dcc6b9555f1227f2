"""Raft's safety properties on simulated DLedger groups (tests/unit/dledger/sim.py).

Thousands of seeded schedules of 3 and 5 nodes: a network that drops, delays, duplicates and
reorders; partitions; crashes and restarts from the persisted log and term/vote; client appends and
leadership transfers. The checker holds election safety, log matching, leader completeness and
state-machine safety throughout. Planted bugs show it can fail; directed schedules show what it
makes of the places where dledger 0.3.1.2 itself is unsafe (replication.Rules).

DLEDGER_SCHEDULES=10 multiplies the seeded schedules (a longer run than the unit suite's).
"""

import os

import pytest

from rmqha.broker.dledger.effects import AppendDone
from rmqha.broker.dledger.election import LEADER, Elector
from rmqha.broker.dledger.protocol import LeadershipTransferRequest, ResponseCode, VoteResponse, VoteResult
from rmqha.broker.dledger.replication import Rules, update_committed_index
from tests.unit.dledger.sim import Cluster, NetworkFaults, Violation, random_schedule

SCALE = int(os.environ.get("DLEDGER_SCHEDULES", "1"))


def run_seeds(n, seeds, **kw):
    totals = {"elections": 0, "commits": 0, "crashes": 0}
    for seed in seeds:
        try:
            c = random_schedule(seed, n, **kw)
        except Violation as e:
            raise AssertionError(f"seed {seed} ({n} nodes): {e}") from None
        totals["elections"] += c.checker.elections
        totals["commits"] += c.checker.commits
        totals["crashes"] += sum(b.incarnation - 1 for b in c.boxes.values())
    return totals


@pytest.mark.parametrize("chunk", range(6))
def test_safety_3_nodes(chunk):
    seeds = range(chunk * 250 * SCALE, (chunk + 1) * 250 * SCALE)
    t = run_seeds(3, seeds)
    # the schedules are not idle: many leaders, commits and crashes
    assert t["elections"] > 250 * SCALE and t["commits"] > 900 * SCALE and t["crashes"] > 100 * SCALE, t


@pytest.mark.parametrize("chunk", range(4))
def test_safety_5_nodes(chunk):
    seeds = range(10_000 + chunk * 125 * SCALE, 10_000 + (chunk + 1) * 125 * SCALE)
    t = run_seeds(5, seeds)
    assert t["elections"] > 100 * SCALE and t["commits"] > 400 * SCALE, t


def test_safety_with_every_message_through_its_json():
    run_seeds(3, range(20_000, 20_000 + 40 * SCALE), wire=True)


# --- the checker can fail ----------------------------------------------------------------------------


class DoubleVote(Elector):
    """Planted: grants a second vote in a term it has already voted in."""

    def handle_vote(self, request, now, self_vote=False):
        if (
            not self_vote
            and request.term == self.ms.term
            and self.ms.vote_for not in (None, request.leaderId)
            and request.ledgerEndTerm >= self.ms.ledger_end_term
        ):
            self.grant_vote(request.leaderId)
            return VoteResponse.for_request(request, self.ms.term, VoteResult.ACCEPT)
        return super().handle_vote(request, now, self_vote)


class IgnoresLedger(Elector):
    """Planted: votes for a candidate whose log is behind its own."""

    def handle_vote(self, request, now, self_vote=False):
        request.ledgerEndTerm = max(request.ledgerEndTerm, self.ms.ledger_end_term)
        request.ledgerEndIndex = max(request.ledgerEndIndex, self.ms.ledger_end_index)
        return super().handle_vote(request, now, self_vote)


def eager_commit(node):
    """Planted: a leader that counts its own append as committed."""
    pusher, check = node.pusher, node.pusher.check_quorum

    def check_quorum(now):
        ms = node.ms
        if ms.role == LEADER:
            update_committed_index(ms, node.log, ms.term, node.log.end_index, pusher.rules, ms.effects, as_leader=True)
        check(now)

    pusher.check_quorum = check_quorum


def first_violation(n, seeds, **kw):
    for seed in seeds:
        try:
            random_schedule(seed, n, **kw)
        except Violation as e:
            return seed, str(e)
    return None, None


@pytest.mark.parametrize(
    "plant, property_",
    [
        ({"elector_classes": {"n2": DoubleVote}}, "election safety"),
        ({"elector_classes": {"n1": IgnoresLedger, "n2": IgnoresLedger}}, "leader completeness"),
        ({"on_start": eager_commit}, "leader completeness"),
    ],
)
def test_planted_bugs_are_caught(plant, property_):
    seed, message = first_violation(3, range(300), **plant)
    assert seed is not None, "the planted bug went unnoticed for 300 schedules"
    assert property_ in message


def test_a_double_vote_is_caught_in_5_node_groups_too():
    seed, message = first_violation(5, range(50, 300), elector_classes={"n2": DoubleVote, "n3": DoubleVote})
    assert seed is not None, "the planted bug went unnoticed"  # as two leaders, or as what they then do
    assert message.split(":")[0] in ("election safety", "leader completeness", "state machine safety")


# --- where dledger 0.3.1.2 is unsafe -----------------------------------------------------------------


def wait_for(c, pred, limit, what):
    end = c.now + limit
    while c.now < end:
        if pred():
            return
        c.run_until(c.now + 20)
    raise AssertionError(f"not within {limit} ms: {what}")


def figure8(rules):
    """Raft's Figure 8 on three nodes: an entry of an old term counted onto a quorum, then overwritten."""
    c = Cluster(1, 3, rules=rules)
    wait_for(c, lambda: c.leader() is not None, 10_000, "a first leader")
    l1 = c.leader()
    c.partition([l1], [i for i in c.ids if i != l1])
    c.client_append(l1)  # (0, t1) on l1 alone
    wait_for(c, lambda: c.leader() not in (None, l1), 30_000, "a second leader")
    l2 = c.leader()
    x = next(i for i in c.ids if i not in (l1, l2))
    c.partition([l1], [l2], [x])
    c.client_append(l2)  # (0, t2) on l2 alone, t2 > t1
    c.crash(l2)
    c.partition([l1, x], [l2])
    wait_for(c, lambda: c.leader() == l1 and c.boxes[l1].node.term > c.boxes[l2].term, 40_000, "l1 leads again")
    wait_for(c, lambda: c.boxes[x].log.end_index == 0, 10_000, "(0, t1) copied to x")
    c.run_until(c.now + 3000)
    committed_old_entry = c.boxes[l1].log.committed_index == 0
    c.crash(l1)
    c.start(l2)
    c.heal()
    wait_for(c, lambda: c.leader() == l2, 60_000, "l2 leads with (0, t2)")  # x votes: t2 > t1
    c.client_append(l2)
    wait_for(c, lambda: c.boxes[x].log.committed_index >= 1, 10_000, "a new entry committed")
    return committed_old_entry


def test_figure8_counting_an_old_terms_entry_loses_it_in_0312():
    with pytest.raises(Violation, match="leader completeness"):
        figure8(Rules(commit_rule="dledger"))


def test_figure8_the_raft_rule_waits_for_an_entry_of_its_own_term():
    assert figure8(Rules()) is False


# --- liveness and leadership transfer ----------------------------------------------------------------


@pytest.mark.parametrize("n, seeds", [(3, range(30_000, 30_000 + 60 * SCALE)), (5, range(31_000, 31_000 + 20 * SCALE))])
def test_a_healed_group_elects_and_commits_within_bounded_time(n, seeds):
    """After a chaotic run, restart the dead and heal the network: within a bounded time one leader is
    followed by all, and a client that retries once a second gets an entry acknowledged and committed
    on every node."""
    worst_leader = worst_commit = 0
    for seed in seeds:
        c = random_schedule(seed, n, duration=8000)
        for i in c.ids:
            if c.boxes[i].node is None:
                c.start(i)
        c.heal()
        c.faults = NetworkFaults(max_delay=20.0)  # no loss, LAN delays (well under the vote intervals)
        healed = c.now

        def one_leader(c=c):
            leader = c.leader()
            return leader is not None and all(c.boxes[i].node.ms.leader_id == leader for i in c.ids)

        wait_for(c, one_leader, 20_000, f"seed {seed}: one leader")
        worst_leader = max(worst_leader, c.now - healed)
        acked_before = set(c.acked)
        last_try = float("-inf")
        while True:
            new = set(c.acked) - acked_before
            if new and all(c.boxes[i].log.committed_index >= max(new) for i in c.ids):
                break
            assert c.now - healed < 30_000, f"seed {seed}: no entry committed everywhere 30 s after healing"
            if c.now - last_try >= 1000:
                c.client_append()
                last_try = c.now
            c.run_until(c.now + 20)
        worst_commit = max(worst_commit, c.now - healed)
        c.check()
    print(
        f"\n{n} nodes, worst after healing: one leader {worst_leader:.0f} ms, "
        f"an entry committed everywhere {worst_commit:.0f} ms"
    )


@pytest.mark.parametrize("rules, stuck", [(Rules(leader_steps_down_on_larger_term=False), True), (Rules(), False)])
def test_a_follower_that_raised_its_term_while_cut_off_rejoins(rules, stuck):
    """Seed 30019: n2 raised its term to 2 while cut off and is behind. 0.3.1.2's leader keeps its quorum
    and ignores n2's EXPIRED_TERM; n2's votes are refused for its short log and it never raises its term
    again: a candidate for as long as the leader lives (dledger issue #325). 0.3.2's fix (#247) lets
    the leader step down, and n2 follows the next term's leader."""
    c = random_schedule(30019, 3, duration=8000, rules=rules, preferred=None)
    for i in c.ids:
        if c.boxes[i].node is None:
            c.start(i)
    c.heal()
    c.faults = NetworkFaults(max_delay=20.0)
    c.run_until(c.now + 60_000)
    n2 = c.boxes["n2"]
    assert (n2.node.role == "CANDIDATE" and n2.log.end_index < c.boxes["n0"].log.end_index) is stuck


def test_leadership_transfer_hands_over_within_one_term():
    c = Cluster(7, 3)
    wait_for(c, lambda: c.leader() is not None, 10_000, "a leader")
    old = c.leader()
    node = c.boxes[old].node
    for _ in range(3):
        c.client_append()
    c.run_until(c.now + 500)
    target = next(i for i in c.ids if i != old)
    term = node.term
    req = LeadershipTransferRequest(
        group="g", remoteId=old, localId="admin", term=term, transferId=old, transfereeId=target
    )
    answers = []
    real_apply = c._apply

    def apply(node_id, effects):
        answers.extend(e.response for e in effects if getattr(e, "to", None) is req)
        real_apply(node_id, effects)

    c._apply = apply
    c._apply(old, node.handle_request(req, c.now))
    assert node.ms.transferee == target
    done = [e for e in node.append(b"during", "t", c.now) if isinstance(e, AppendDone)]
    assert done[0].response.code == ResponseCode.LEADER_TRANSFERRING
    wait_for(c, lambda: answers, 5_000, "the transfer's answer")
    assert answers[0].code == ResponseCode.SUCCESS and answers[0].term == term + 1
    assert c.leader() == target and c.boxes[target].node.term == term + 1
    assert c.boxes[target].log.end_index == c.boxes[old].log.end_index
