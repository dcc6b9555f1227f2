"""rmqha/chaos/nemesis.py's DLedger faults, against tests/unit/chaos/fakes.py's recording handle taught who
leads: each fault's start and stop (the target resolved when it is injected, not when it was drawn), the
fault log, the partition's proxies, what happens with no leader, and the mode rules: a classic fault is not
applicable to a DLedger group (refused before anything is done) and the other way round."""

from __future__ import annotations

import inspect
import random

import pytest

from rmqha.chaos import nemesis
from rmqha.runs.faultlog import FaultLog, read_faults
from rmqha.chaos.nemesis import Fault, Nemesis, groups_of, make_schedule, make_sweep
from rmqha.runs import faults as vocabulary
from rmqha.runs.faults import CLASSIC, DLEDGER, FAULTS, applicable_faults, why_not_applicable
from rmqha.cluster.handle import Cluster
from rmqha.cluster.wait import WaitTimeout

from .fakes import FakeHandle, topology

N0, N1, N2 = "broker-n0", "broker-n1", "broker-n2"
G = "RaftNode00"
DL_NODES = [
    {"name": n, "brokerName": G, "master": None, "overrides": {"dLegerPeers": "n0-h:1;n1-h:2;n2-h:3"}}
    for n in (N0, N1, N2)
]
# docker: one proxy per direction of each peer link, <src>-dl-<dst>
PROXIES = [
    {"name": f"{a}-dl-{b}", "kind": "dledger", "node": a, "peer": b}
    for a in (N0, N1, N2)
    for b in (N0, N1, N2)
    if a != b
] + [{"name": n, "kind": "client", "node": n} for n in (N0, N1, N2)]
DL_KINDS = (
    "kill-leader",
    "pause-leader",
    "partition-leader",
    "kill-follower",
    "pause-follower",
    "partition-follower",
    "power-loss-leader",
    "power-loss-follower",
)


class DLHandle(FakeHandle):
    """FakeHandle of a DLedger cluster: `leaders` is who /status says leads at each successive question
    (the last one stays); wait_until polls up to `polls` times, then raises WaitTimeout as the real one."""

    def __init__(self, kind="docker", leaders=(N1,), polls=3):
        super().__init__(kind, DL_NODES)
        self.state["proxies"] = PROXIES if kind == "docker" else []
        self.leaders, self.polls, self.asked = list(leaders), polls, 0
        self.waits = []  # (timeout, node, interval) of each wait_until

    def dledger_leader(self, group, statuses=None):
        assert group == G
        self.asked += 1
        return self.leaders.pop(0) if len(self.leaders) > 1 else self.leaders[0]

    def status(self, node, timeout=1.0):
        return self.statuses.get(node) if hasattr(self, "statuses") else None

    def wait_until(self, predicate, timeout, what, *, node=None, interval=0.1):
        self.waits.append((timeout, node, interval))
        for _ in range(self.polls):
            got = predicate()
            if got:
                return got
        raise WaitTimeout(f"timed out after {timeout:g}s waiting for {what}")

    def links(self):
        return list(self.state.get("proxies") or [])


def _params(fn):
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


for _name in ("dledger_leader", "wait_until", "links", "status"):  # the queries as the real handle takes them
    assert _params(getattr(DLHandle, _name)) == _params(getattr(Cluster, _name)), _name


def dl_links(node):
    return [p["name"] for p in PROXIES if p["kind"] == "dledger" and node in (p["node"], p["peer"])]


def fault(kind, target, params=None, **kw):
    role = "master" if FAULTS[kind].targets == "master" else "slave"
    return Fault(kw.pop("at", 0.0), kw.pop("hold", 1.0), kind, G, target, dict(params or {}), role, **kw)


# kind -> (targets, backends, planned target, params, leader now, resolved target, [start ops], [stop ops])
def started(node):
    return ("start", {"node": node, "wait": True, "timeout": 60})


TABLE = {
    "kill-leader": ("master", "both", N0, {}, N1, N1, [("kill", {"node": N1})], [started(N1)]),
    "pause-leader": ("master", "both", N0, {}, N2, N2, [("pause", {"node": N2})], [("resume", {"node": N2})]),
    "partition-leader": (
        "master",
        "docker",
        N0,
        {"mode": "timeout"},
        N1,
        N1,
        [("cut_link", {"link": link, "mode": "timeout"}) for link in dl_links(N1)],
        [("heal_link", {"link": link}) for link in dl_links(N1)],
    ),
    # the planned follower is the leader now: the first other follower instead
    "kill-follower": ("slave", "both", N1, {}, N1, N0, [("kill", {"node": N0})], [started(N0)]),
    # the planned follower still follows: kept
    "pause-follower": ("slave", "both", N2, {}, N0, N2, [("pause", {"node": N2})], [("resume", {"node": N2})]),
    "partition-follower": (
        "slave",
        "docker",
        N2,
        {"mode": "disabled"},
        N0,
        N2,
        [("cut_link", {"link": link, "mode": "disabled"}) for link in dl_links(N2)],
        [("heal_link", {"link": link}) for link in dl_links(N2)],
    ),
    "power-loss-leader": ("master", "both", N0, {}, N2, N2, [("power_loss", {"node": N2})], [started(N2)]),
    "power-loss-follower": ("slave", "both", N1, {}, N1, N0, [("power_loss", {"node": N0})], [started(N0)]),
}


def test_the_dledger_rows_of_the_table():
    assert {k for k, v in FAULTS.items() if DLEDGER in v.modes} == set(TABLE) == set(DL_KINDS)
    for name, (targets, backends, *_rest) in TABLE.items():
        k = FAULTS[name]
        assert (k.targets, k.backends, k.modes, k.link) == (
            targets,
            {"both": ("local", "docker"), "docker": ("docker",)}[backends],
            (DLEDGER,),
            None,
        )
    # every fault of the table is one mode's or the other's, never both
    assert all(v.modes in ((CLASSIC,), (DLEDGER,)) for v in FAULTS.values())
    for kind in ("partition-leader", "partition-follower"):
        assert {FAULTS[kind].params(random.Random(s), 1500)["mode"] for s in range(40)} == {"timeout", "disabled"}


@pytest.mark.parametrize("kind", sorted(TABLE))
def test_every_dledger_fault_hits_who_leads_or_follows_when_injected(kind, tmp_path):
    _, _, planned, params, leader, target, start_ops, stop_ops = TABLE[kind]
    h = DLHandle("docker", leaders=[leader])
    nem = Nemesis(h, fault_log=FaultLog(tmp_path / "faults" / "f.jsonl"))
    f = fault(kind, planned, params)
    info = nem.inject(f)
    assert h.calls == start_ops and f.target == target
    nem.heal(f)
    assert h.calls == start_ops + stop_ops and nem.active == {}
    recs = read_faults(tmp_path)
    assert [(r["op"], r["kind"], r["target"], r["group"], r["role"], r["result"]) for r in recs] == [
        (op, kind, target, G, f.role, "ok") for op in ("inject", "heal")
    ]
    want = {"leader": leader}
    if target != planned:
        want["plannedTarget"] = planned
    if "partition" in kind:
        want["links"] = dl_links(target)
        assert recs[0]["params"] == dict(params, links=dl_links(target))
    assert info == want and recs[0]["info"] == want


@pytest.mark.parametrize("kind", ["power-loss-leader", "power-loss-follower"])
def test_a_power_loss_logs_what_the_handle_cut_and_leader_ones_are_held_for_a_failover(kind, tmp_path):
    h = DLHandle("local", leaders=[N1])
    h.returns["power_loss"] = {"durableDataPos": 530, "durableIndexPos": 320, "droppedDataBytes": 106}
    nem = Nemesis(h, fault_log=FaultLog(tmp_path / "faults" / "f.jsonl"))
    f = fault(kind, N1)
    info = nem.inject(f)
    assert h.calls == [("power_loss", {"node": N1 if kind == "power-loss-leader" else N0})]
    assert info == read_faults(tmp_path)[0]["info"]
    assert info["durableDataPos"] == 530 and info["droppedDataBytes"] == 106 and info["leader"] == N1
    assert FAULTS[kind].min_hold == (vocabulary.LEADER_FAILOVER_HOLD_S if kind == "power-loss-leader" else 0.0)


@pytest.mark.parametrize("kind", [k for k in DL_KINDS if FAULTS[k].backends == ("local", "docker")])
def test_node_faults_work_on_the_local_backend(kind):
    _, _, planned, params, leader, target, start_ops, stop_ops = TABLE[kind]
    h = DLHandle("local", leaders=[leader])
    nem = Nemesis(h)
    f = fault(kind, planned, params)
    nem.inject(f)
    nem.heal(f)
    assert h.calls == start_ops + stop_ops


@pytest.mark.parametrize("kind", ["partition-leader", "partition-follower"])
def test_a_partition_needs_the_proxies_of_the_docker_backend(kind, tmp_path):
    h = DLHandle("local")
    nem = Nemesis(h, fault_log=FaultLog(tmp_path / "faults" / "f.jsonl"))
    with pytest.raises(ValueError, match="needs the docker backend"):
        nem.inject(fault(kind, N0, {"mode": "timeout"}))
    assert h.calls == [] and h.asked == 0 and read_faults(tmp_path) == []
    assert "needs the docker backend" in why_not_applicable(kind, "local", "dledger")


def test_a_docker_cluster_without_dledger_proxies_is_an_error_not_a_no_op(tmp_path):
    h = DLHandle("docker", leaders=[N1])
    h.state["proxies"] = [p for p in PROXIES if p["kind"] != "dledger"]
    nem = Nemesis(h, fault_log=FaultLog(tmp_path / "faults" / "f.jsonl"))
    with pytest.raises(Exception, match="no DLedger peer proxies"):
        nem.inject(fault("partition-leader", N0, {"mode": "timeout"}))
    assert h.calls == [] and [r["result"] for r in read_faults(tmp_path)] == ["error"]


def test_the_leader_is_waited_for_while_an_election_is_under_way():
    h = DLHandle("docker", leaders=[None, None, N2], polls=3)
    f = fault("kill-leader", N0)
    Nemesis(h).inject(f)
    assert h.calls == [("kill", {"node": N2})] and f.target == N2


def test_no_leader_at_all_is_a_failed_inject_written_to_the_log(tmp_path):
    h = DLHandle("docker", leaders=[None], polls=3)
    nem = Nemesis(h, fault_log=FaultLog(tmp_path / "faults" / "f.jsonl"))
    with pytest.raises(WaitTimeout, match="after 30s waiting for a DLedger leader in RaftNode00"):
        nem.inject(fault("kill-follower", N0))
    assert h.calls == [] and h.asked == 3
    # up to 30 s (an election takes ~5 s), asking every 0.2 s; a timeout names the group's nodes
    assert h.waits == [(30.0, [N0, N1, N2], 0.2)]
    (rec,) = read_faults(tmp_path)
    assert rec["result"] == "error" and "WaitTimeout" in rec["error"]


CLASSIC_KINDS = sorted(k for k, v in FAULTS.items() if v.modes == (CLASSIC,))


@pytest.mark.parametrize("kind", CLASSIC_KINDS)
def test_a_classic_fault_is_refused_on_a_dledger_group_before_anything_is_done(kind, tmp_path):
    h = DLHandle("docker")
    nem = Nemesis(h, fault_log=FaultLog(tmp_path / "faults" / "f.jsonl"))
    f = Fault(0.0, 1.0, kind, G, N1, {}, "slave" if FAULTS[kind].targets == "slave" else "master")
    with pytest.raises(
        ValueError, match=f"{kind} does not apply to group RaftNode00: it is a classic fault.*kill-leader"
    ):
        nem.inject(f)
    assert h.calls == [] and h.asked == 0 and nem.active == {} and read_faults(tmp_path) == []
    assert applicable_faults([kind], "docker", "dledger") == ([], [kind])
    assert "topology dledger has DLedger groups" in why_not_applicable(kind, "docker", "dledger")


@pytest.mark.parametrize("kind", DL_KINDS)
def test_a_dledger_fault_is_refused_on_a_classic_group(kind):
    h = FakeHandle("docker")
    with pytest.raises(ValueError, match="is a dledger fault, and broker-a is a classic group"):
        Nemesis(h).inject(Fault(0.0, 1.0, kind, "broker-a", "broker-a", {"mode": "timeout"}, "master"))
    assert h.calls == []
    assert applicable_faults([kind], "docker", "2m-2s-sync") == ([], [kind])


def test_applicable_faults_on_dledger_keeps_the_order_and_the_backend_rule():
    kinds = ["kill-master", "partition-leader", "kill-leader", "kill-slave", "kill-follower"]
    assert applicable_faults(kinds, "local", "dledger") == (
        ["kill-leader", "kill-follower"],
        ["kill-master", "partition-leader", "kill-slave"],
    )
    assert applicable_faults(kinds, "docker", "dledger") == (
        ["partition-leader", "kill-leader", "kill-follower"],
        ["kill-master", "kill-slave"],
    )
    assert why_not_applicable("kill-leader", "local", "dledger") is None


def test_groups_of_a_dledger_cluster_names_the_leader_of_the_moment():
    assert groups_of(DLHandle(leaders=[N1])) == {G: {"master": N1, "slaves": [N0, N2], "dledger": True}}
    # no leader now: the first node stands in (the fault finds the real one when injected)
    assert groups_of(DLHandle(leaders=[None])) == {G: {"master": N0, "slaves": [N1, N2], "dledger": True}}


def test_a_schedule_on_dledger_uses_only_dledger_faults_and_is_reproducible():
    kinds = ["kill-master", "kill-slave", "kill-leader", "kill-follower", "partition-leader"]
    a = make_schedule(random.Random(1), kinds, DLHandle(leaders=[N1]), 120)
    b = make_schedule(random.Random(1), kinds, DLHandle(leaders=[N1]), 120)
    assert [f.to_json() for f in a] == [f.to_json() for f in b] and len(a) >= 8
    assert {f.kind for f in a} == {"kill-leader", "kill-follower", "partition-leader"}
    for f in a:
        assert f.group == G and f.link is None
        # a leader fault lasts long enough for the followers to elect another leader; the others as drawn
        assert (vocabulary.LEADER_FAILOVER_HOLD_S <= f.hold) if f.role == "master" else (2.0 <= f.hold <= 4.0), f
        assert (f.role, f.target in (N0, N2)) == (("slave", True) if f.kind == "kill-follower" else ("master", False))
    # who led when it was drawn only names the planned target: the draws are the same
    c = make_schedule(random.Random(1), kinds, DLHandle(leaders=[N2]), 120)
    assert [(f.at, f.hold, f.kind, f.role) for f in c] == [(f.at, f.hold, f.kind, f.role) for f in a]
    # a classic cluster has nothing for the DLedger faults, and the other way round
    assert make_schedule(random.Random(1), ["kill-leader"], FakeHandle(), 120) == []
    assert make_schedule(random.Random(1), ["kill-master", "pause-slave"], DLHandle(), 120) == []


def test_a_sweep_on_dledger_has_one_cell_per_dledger_kind_and_role():
    sw = make_sweep(random.Random(3), ["kill-leader", "kill-follower", "kill-master"], DLHandle(leaders=[N0]))
    assert sorted((f.kind, f.role) for f in sw) == [("kill-follower", "slave"), ("kill-leader", "master")]
    assert {f.kind: f.hold >= vocabulary.LEADER_FAILOVER_HOLD_S for f in sw} == {
        "kill-leader": True,
        "kill-follower": False,
    }


def test_a_leader_fault_that_cannot_be_held_long_enough_before_the_quiet_end_is_not_scheduled():
    # 20 s: warm-up 3 s, quiet from 16 s: one 12 s hold fits (3..15), a second (from 16 s) does not;
    # 12 s: warm-up 1.8 s, quiet from 9 s: none fits, and none is cut short to fit
    assert vocabulary.LEADER_FAILOVER_HOLD_S == 12.0
    sched = make_schedule(random.Random(2), ["kill-leader"], DLHandle(leaders=[N1]), 20)
    assert [f.hold for f in sched] == [12.0] and sched[0].at + sched[0].hold <= 20 - 4.0
    assert make_schedule(random.Random(2), ["kill-leader"], DLHandle(leaders=[N1]), 12) == []
    # a raised hold that ends exactly where the quiet end begins still fits (3 + 12 = 15 = 20 - 5)
    exact = make_schedule(random.Random(2), ["kill-leader"], DLHandle(leaders=[N1]), 20, warmup=3.0, quiet=5.0)
    assert [(f.at, f.hold) for f in exact] == [(3.0, 12.0)]


def test_mixed_clusters_judge_each_group_by_its_own_mode():
    h = DLHandle("docker", leaders=[N1])
    h.state["nodes"] = DL_NODES + topology(("broker-a", 1))
    sched = make_schedule(random.Random(5), ["kill-leader", "kill-slave"], h, 200)
    assert {(f.kind, f.group) for f in sched} == {("kill-leader", G), ("kill-slave", "broker-a")}
    assert nemesis.group_mode(h, G) == DLEDGER and nemesis.group_mode(h, "broker-a") == CLASSIC


def test_a_leader_that_does_not_answer_is_found_by_its_followers():
    h = DLHandle("local", leaders=[None])
    h.state["nodes"] = [dict(n, dLegerSelfId=f"n{i}") for i, n in enumerate(DL_NODES)]
    # n1 leads term 3 but its /status is too slow to answer; n2 still names the term-2 leader n0
    h.statuses = {
        N0: {"dledger": {"role": "FOLLOWER", "term": 3, "leaderId": "n1"}},
        N1: None,
        N2: {"dledger": {"role": "FOLLOWER", "term": 2, "leaderId": "n0"}},
    }
    assert nemesis._leader_now(h, G) == N1
    h.statuses = {N0: {"dledger": {"role": "CANDIDATE", "term": 4, "leaderId": None}}, N1: None, N2: None}
    assert nemesis._leader_now(h, G) is None  # an election: nobody to fault yet
    # a follower that reports no term counts as term 0: the one that names the term-1 leader wins
    h.statuses = {
        N0: {"dledger": {"role": "FOLLOWER", "term": 1, "leaderId": "n0"}},
        N1: None,
        N2: {"dledger": {"role": "FOLLOWER", "leaderId": "n2"}},
    }
    assert nemesis._leader_now(h, G) == N0


def _run_on_clock(handle_cls, clock, faults):
    """A DLedger group led by N1, under `handle_cls`, through the nemesis on `clock`: one fault per
    (kind, node, at, hold), ids from 1. Returns the handle (its timeline)."""
    from .fakes import FakeStop

    h = handle_cls("local", leaders=[N1])
    h.clock = clock
    sched = [fault(kind, node, at=at, hold=hold, id=k) for k, (kind, node, at, hold) in enumerate(faults, 1)]
    Nemesis(h).run(sched, clock.now, FakeStop(clock))
    return h


def test_a_leader_fault_is_held_from_when_it_took_effect_and_the_rest_moves_with_it(monkeypatch):
    from .fakes import Clock, FakeStop

    clock = Clock(100.0)
    monkeypatch.setattr(nemesis, "time", clock)

    class SlowLeader(DLHandle):
        def dledger_leader(self, group, statuses=None):
            self.clock.now += 5.0  # the busy leader takes 5 s to say it leads
            return super().dledger_leader(group, statuses)

    h = _run_on_clock(SlowLeader, clock, [("kill-leader", N1, 2.0, 12.0), ("pause-follower", N0, 18.0, 3.0)])
    # killed at 107 (due at 102), healed 12 s later (not at 114); the next fault keeps its 4 s gap (due
    # at 123), and is held its 3 s from 128, when its inject ended (not healed when due, at 126)
    assert h.timeline() == [(107.0, "kill", N1), (119.0, "start", N1), (128.0, "pause", N0), (131.0, "resume", N0)]
    # a classic fault too: injected 2 s late, it is held its 3 s from then (tests/unit/chaos/test_fault_table.py)
    h = FakeHandle("local", clock=clock)
    t0 = clock.now
    Nemesis(h).run([fault("kill-slave", "broker-a-s", at=2.0, hold=3.0, id=1)], t0 - 4.0, FakeStop(clock))
    assert h.timeline() == [(t0, "kill", "broker-a-s"), (t0 + 3.0, "start", "broker-a-s")]


def test_a_dledger_fault_after_a_slow_heal_keeps_its_gap_from_when_the_node_was_back(monkeypatch):
    """mx-dl-l2 (2026-11-29): the leader's power cut was healed by a restart that took 6.6 s, and the
    follower's cut, due 4.4 s after the heal was due, began 1.4 s after the restarted node was back."""
    from .fakes import Clock

    clock = Clock(100.0)
    monkeypatch.setattr(nemesis, "time", clock)

    class SlowRestart(DLHandle):
        def start(self, node, *args, **kwargs):
            out = super().start(node, *args, **kwargs)
            self.clock.now += 8.0  # the restarted node takes 8 s to answer
            return out

    h = _run_on_clock(
        SlowRestart, clock, [("power-loss-leader", N1, 2.0, 12.0), ("power-loss-follower", N0, 18.0, 3.0)]
    )
    # cut at 102, restarted from 114 until 122; the follower's cut keeps its 4 s gap: 126, not 122
    assert h.timeline() == [
        (102.0, "power_loss", N1),
        (114.0, "start", N1),
        (126.0, "power_loss", N0),
        (129.0, "start", N0),
    ]
