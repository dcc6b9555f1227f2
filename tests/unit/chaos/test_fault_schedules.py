"""rmqha/chaos/nemesis.py's schedules: who each fault kind can hit, make_schedule (warm-up, quiet end, holds and
gaps at the limits of their ranges, max_faults, the overlap rules) and make_sweep, with an RNG whose
draws the test places (fakes.DrawAt) and with seeded Randoms for the properties that hold for any seed."""

from __future__ import annotations

import random

import pytest

from rmqha.chaos.nemesis import groups_of, link_of, make_schedule, make_sweep, sweep_cells
from rmqha.runs.faults import LAST_IN_SWEEP

from .fakes import DrawAt, FakeHandle, topology

A, AS, B, BS = "broker-a", "broker-a-s", "broker-b", "broker-b-s"
# a group with a slave, one without, one with two
MIXED = topology(("broker-a", 1), ("broker-b", 0), ("broker-c", 2))


def rows(schedule):
    return [(f.at, f.hold, f.kind, f.target, f.role, f.id) for f in schedule]


def test_groups_of_the_cluster():
    assert groups_of(FakeHandle()) == {
        "broker-a": {"master": A, "slaves": [AS]},
        "broker-b": {"master": B, "slaves": [BS]},
    }
    assert groups_of(FakeHandle(state_nodes=MIXED)) == {
        "broker-a": {"master": A, "slaves": [AS]},
        "broker-b": {"master": B, "slaves": []},
        "broker-c": {"master": "broker-c", "slaves": ["broker-c-s", "broker-c-s2"]},
    }
    assert groups_of(FakeHandle(state_nodes=[])) == {}


def targets_hit(kind, state_nodes):
    h = FakeHandle("docker", state_nodes)
    hit = set()
    for seed in range(30):
        for f in make_schedule(random.Random(seed), [kind], h, 120):
            assert f.role == ("slave" if "-s" in f.target else "master") and f.group == f.target.split("-s")[0]
            hit.add(f.target)
    return hit


def test_each_kind_hits_its_role_and_a_master_fault_only_a_group_with_a_slave():
    assert targets_hit("kill-master", MIXED) == {A, "broker-c"}  # broker-b has nothing to fail over to
    assert targets_hit("client-cut", MIXED) == {A, "broker-c"}
    assert targets_hit("pause-slave", MIXED) == {AS, "broker-c-s", "broker-c-s2"}
    assert targets_hit("power-loss", MIXED) == {A, AS, B, "broker-c", "broker-c-s", "broker-c-s2"}
    assert targets_hit("partition", topology(("broker-b", 0))) == {B}


def test_sweep_cells_are_the_roles_each_kind_can_hit():
    kinds = ["kill-master", "pause-slave", "power-loss", "latency"]
    assert sweep_cells(kinds, FakeHandle(state_nodes=MIXED)) == [
        ("kill-master", "master"),
        ("pause-slave", "slave"),
        ("power-loss", "master"),
        ("power-loss", "slave"),
        ("latency", "slave"),
    ]
    assert sweep_cells(kinds, FakeHandle(state_nodes=topology(("broker-a", 0), ("broker-b", 0)))) == [
        ("power-loss", "master")
    ]


# -- make_schedule ------------------------------------------------------------------------------------


def test_nothing_to_hit_is_an_empty_schedule():
    masters_only = FakeHandle(state_nodes=topology(("broker-a", 0), ("broker-b", 0)))
    assert make_schedule(random.Random(1), ["pause-slave", "latency", "kill-master"], masters_only, 60) == []
    assert make_sweep(random.Random(1), ["pause-slave", "kill-master"], masters_only) == []


@pytest.mark.parametrize(
    "fraction, at, hold",
    [
        (0.0, [3.0 + 3 * i for i in range(16)], 2.0),  # holds of 2 s, gaps of 1 s: the last ends at 50 s exactly
        (1.0, [3.0 + 7 * i for i in range(7)], 4.0),  # holds of 4 s, gaps of 3 s
    ],
)
def test_a_minute_runs_from_a_3s_warmup_to_a_10s_quiet_end(fraction, at, hold):
    sched = make_schedule(DrawAt(fraction), ["kill-master", "pause-slave"], FakeHandle(), 60)
    assert [(f.at, f.hold) for f in sched] == [(t, hold) for t in at]
    assert [f.id for f in sched] == list(range(1, len(at) + 1))
    assert all((f.kind, f.target, f.role, f.params, f.link) == ("kill-master", A, "master", {}, None) for f in sched)


def test_short_runs_warm_up_for_15_percent_and_stay_quiet_for_at_least_3s():
    h = FakeHandle()
    assert [(f.at, f.hold) for f in make_schedule(DrawAt(0.0), ["kill-master"], h, 10)] == [(1.5, 2.0), (4.5, 2.0)]
    # 11 s: warm-up 1.65 s; times are printed and kept in tenths of a second
    assert [(f.at, f.hold) for f in make_schedule(DrawAt(0.0), ["kill-master"], h, 11)] == [(1.6, 2.0), (4.7, 2.0)]
    # 30 s: warm-up 3 s, quiet 6 s: faults while t + hold <= 24
    assert [f.at for f in make_schedule(DrawAt(0.0), ["kill-master"], h, 30)] == [3.0, 6.0, 9.0, 12.0, 15.0, 18.0, 21.0]


def test_explicit_warmup_and_quiet_and_draws_in_tenths():
    # holds 2.246 -> 2.2 s, gaps 1.246 -> 1.2 s
    sched = make_schedule(DrawAt(0.123), ["kill-master"], FakeHandle(), 30, warmup=0.0, quiet=0.0)
    assert [(f.at, f.hold) for f in sched] == [(t, 2.2) for t in (0.0, 3.4, 6.8, 10.2, 13.6, 17.0, 20.4, 23.8, 27.2)]
    assert make_schedule(DrawAt(0.0), ["kill-master"], FakeHandle(), 30, warmup=20.0, quiet=5.0)[0].at == 20.0


def test_max_faults_bounds_a_schedule():
    assert len(make_schedule(DrawAt(0.0), ["kill-master"], FakeHandle(), 60, max_faults=3)) == 3
    assert len(make_schedule(DrawAt(0.0), ["kill-master"], FakeHandle(), 60, max_faults=1, overlap=True)) == 1


def test_link_faults_carry_their_link_and_parameters_drawn_for_the_sync_wait():
    h = FakeHandle()
    sched = make_schedule(DrawAt(0.0, pick=0), ["latency"], h, 20)
    assert {(f.target, f.link, f.params["ms"]) for f in sched} == {(AS, "broker-a-s-ha", 2500)}  # 1.5 s + 1 s
    sched = make_schedule(DrawAt(0.0, picks=[0, 1, 1]), ["client-latency"], h, 20, sync_wait_ms=3000, max_faults=1)
    assert [(f.target, f.link, f.params["ms"]) for f in sched] == [(B, B, 1000)]
    sched = make_schedule(DrawAt(0.0), ["latency"], h, 20, sync_wait_ms=3000)
    assert sched[0].params == {"ms": 4000}


def test_without_overlap_one_fault_at_a_time_even_when_the_coin_says_overlap():
    h = FakeHandle()
    kinds = ["kill-master", "pause-slave"]
    sched = make_schedule(DrawAt(0.0, coin=0.0), kinds, h, 60)
    assert rows(sched) == rows(make_schedule(DrawAt(0.0, coin=0.9), kinds, h, 60, overlap=True))
    assert all(a.at + a.hold <= b.at for a, b in zip(sched, sched[1:]))


def test_a_schedule_is_reproducible_from_its_seed():
    h = FakeHandle()
    kinds = ["kill-master", "power-loss", "pause-slave", "latency"]
    runs = {
        seed: [f.to_json() for f in make_schedule(random.Random(seed), kinds, h, 60, overlap=True)] for seed in range(5)
    }
    assert all(
        runs[s] == [f.to_json() for f in make_schedule(random.Random(s), kinds, h, 60, overlap=True)] for s in runs
    )
    assert len({str(r) for r in runs.values()}) == 5


# -- overlap ----------------------------------------------------------------------------------------


def overlap_schedule(fractions, max_faults=3, kinds=("kill-master", "latency"), picks=(), coin=0.0, **kw):
    kw.setdefault("duration", 20)
    kw.setdefault("quiet", 5.0)
    return make_schedule(
        DrawAt(0.0, fractions=fractions, picks=picks, coin=coin),
        list(kinds),
        FakeHandle(),
        kw.pop("duration"),
        warmup=3.0,
        max_faults=max_faults,
        overlap=True,
        **kw,
    )


def test_an_overlapping_fault_is_on_another_group_and_role_inside_the_first_ones_hold():
    # hold 2 s; the second at the latest (0.6 of the hold: 4.2 s) for the longest (3 s); gap 1 s
    sched = overlap_schedule([0.0, 1.0, 1.0, 0.0])
    assert rows(sched) == [
        (3.0, 2.0, "kill-master", A, "master", 1),
        (4.2, 3.0, "latency", BS, "slave", 2),
        (8.2, 2.0, "kill-master", A, "master", 3),
    ]  # the next after both are healed, + 1 s
    assert (sched[1].group, sched[1].link, sched[1].params) == (B, "broker-b-s-ha", {"ms": 2500})
    # the earliest (0.3 s in) for the shortest (1.5 s): the next one after the first's heal
    assert rows(overlap_schedule([0.0, 0.0, 0.0, 0.0])) == [
        (3.0, 2.0, "kill-master", A, "master", 1),
        (3.3, 1.5, "latency", BS, "slave", 2),
        (6.0, 2.0, "kill-master", A, "master", 3),
    ]


def test_a_slave_fault_first_then_a_master_fault_of_another_group():
    sched = overlap_schedule([1.0, 0.0, 0.0, 0.0], kinds=("client-cut", "pause-slave"), picks=[1, 1], max_faults=2)
    assert rows(sched) == [(3.0, 4.0, "pause-slave", BS, "slave", 1), (3.3, 1.5, "client-cut", A, "master", 2)]
    assert sched[1].link == A and sched[1].params["mode"] in ("timeout", "disabled")


def test_a_fault_on_a_group_without_a_slave_overlaps_with_another_groups_slave():
    h = FakeHandle(state_nodes=topology(("broker-a", 1), ("broker-b", 0)))
    # power loss of broker-b (candidates: broker-a, broker-a-s, broker-b), then the second kind pause-slave
    sched = make_schedule(
        DrawAt(0.0, picks=[0, 2, 1], coin=0.0),
        ["power-loss", "pause-slave"],
        h,
        20,
        warmup=3.0,
        quiet=5.0,
        max_faults=2,
        overlap=True,
    )
    assert rows(sched) == [(3.0, 2.0, "power-loss", B, "master", 1), (3.3, 1.5, "pause-slave", AS, "slave", 2)]


def test_an_overlap_must_end_before_the_quiet_end():
    # quiet from 7 s: the second fault at 4.2 s for 2.8 s ends exactly then; for 2.9 s it is dropped
    fits = overlap_schedule([0.0, 1.0, 13 / 15, 0.0], duration=10, quiet=3.0)
    assert rows(fits) == [(3.0, 2.0, "kill-master", A, "master", 1), (4.2, 2.8, "latency", BS, "slave", 2)]
    assert rows(overlap_schedule([0.0, 1.0, 14 / 15, 0.0], duration=10, quiet=3.0)) == [
        (3.0, 2.0, "kill-master", A, "master", 1)
    ]


@pytest.mark.parametrize("coin, overlaps", [(0.0, True), (0.4999, True), (0.5, False), (0.9, False)])
def test_the_overlap_coin_is_fair(coin, overlaps):
    sched = overlap_schedule([0.0, 0.0, 0.0, 0.0], max_faults=2, coin=coin)
    assert [f.kind for f in sched] == (["kill-master", "latency"] if overlaps else ["kill-master", "kill-master"])


def test_overlapping_schedules_for_any_seed():
    h = FakeHandle("docker", MIXED)
    kinds = ["kill-master", "power-loss", "pause-slave", "latency", "client-cut", "partition", "disk-full"]
    overlapped = 0
    for seed in range(25):
        sched = make_schedule(random.Random(seed), kinds, h, 120, overlap=True)
        assert [f.id for f in sched] == list(range(1, len(sched) + 1))
        for f in sched:
            assert round(f.at, 1) == f.at and round(f.hold, 1) == f.hold and 3.0 <= f.at and f.at + f.hold <= 110
            assert f.link == link_of(h, f)
        firsts = []
        for f in sched:  # a fault starting inside the previous one's hold is its overlap
            if firsts and f.at < firsts[-1].at + firsts[-1].hold:
                first = firsts[-1]
                overlapped += 1
                assert f.group != first.group and f.role != first.role
                # (the start is rounded to tenths: up to 0.05 s either way)
                assert first.at + 0.25 < f.at < first.at + 0.6 * first.hold + 0.051 and 1.5 <= f.hold <= 3.0
            else:
                assert not firsts or f.at >= max(g.at + g.hold for g in sched if g.id < f.id) + 1.0
                assert 2.0 <= f.hold <= 4.0
                firsts.append(f)
    assert overlapped >= 20


# -- make_sweep -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fraction, at, hold", [(0.0, [3.0, 9.5, 16.0], 2.5), (1.0, [3.0, 11.5, 20.0], 3.5), (0.06, [3.0, 9.7, 16.4], 2.6)]
)  # 2.56 -> 2.6, 4.06 -> 4.1
def test_a_sweep_holds_each_fault_2_5_to_3_5s_with_4_to_5s_between(fraction, at, hold):
    sched = make_sweep(DrawAt(fraction), ["kill-master", "pause-slave", "latency"], FakeHandle())
    assert [(f.at, f.hold) for f in sched] == [(t, hold) for t in at]
    assert [f.id for f in sched] == [1, 2, 3]
    assert sorted((f.kind, f.role, f.target) for f in sched) == [
        ("kill-master", "master", A),
        ("latency", "slave", AS),
        ("pause-slave", "slave", AS),
    ]
    lat = next(f for f in sched if f.kind == "latency")
    assert (lat.link, lat.params) == ("broker-a-s-ha", {"ms": 2500})
    assert all(f.link is None for f in sched if f.kind != "latency")


def test_a_sweep_with_its_own_warmup_sync_wait_and_ranges():
    sched = make_sweep(DrawAt(0.0), ["latency"], FakeHandle(), sync_wait_ms=4000, warmup=1.04, hold=(1.0, 2.0))
    assert [(f.at, f.hold, f.params) for f in sched] == [(1.0, 1.0, {"ms": 5000})]


def test_a_sweep_is_seeded_with_the_master_power_loss_last():
    h = FakeHandle(state_nodes=MIXED)
    kinds = ["power-loss", "kill-master", "pause-slave", "disk-full"]
    orders = set()
    for seed in range(8):
        sched = make_sweep(random.Random(seed), kinds, h)
        cells = [(f.kind, f.role) for f in sched]
        assert sorted(cells) == sorted(sweep_cells(kinds, h)) and cells[-1] == ("power-loss", "master")
        assert [f.to_json() for f in sched] == [f.to_json() for f in make_sweep(random.Random(seed), kinds, h)]
        orders.add(tuple(cells))
    assert len(orders) > 4


def test_the_power_cuts_come_last_in_their_order_on_groups_not_cut_before():
    h = FakeHandle(state_nodes=MIXED)
    kinds = ["cluster-power-loss", "group-power-loss", "slave-then-master-power-loss", "power-loss", "kill-slave"]
    for seed in range(8):
        sched = make_sweep(random.Random(seed), kinds, h)
        assert [(f.kind, f.role) for f in sched][-4:] == list(LAST_IN_SWEEP)
        # MIXED has two groups with a slave: the first two cuts hit both, the third whichever is left
        assert len({f.group for f in sched[-4:-1]}) >= 2


def test_a_group_power_loss_comes_last_and_on_another_group_than_the_master_power_loss():
    h = FakeHandle(state_nodes=MIXED)
    kinds = ["group-power-loss", "power-loss", "kill-slave"]
    for seed in range(8):
        sched = make_sweep(random.Random(seed), kinds, h)
        assert [(f.kind, f.role) for f in sched][-2:] == [("power-loss", "master"), ("group-power-loss", "master")]
        assert sched[-1].group != sched[-2].group  # the first may fork its group: the second would not count


def test_a_later_power_cut_avoids_the_groups_hit_before_by_group_even_when_nodes_are_named_otherwise():
    nodes = [
        {"name": "a1", "brokerName": "broker-a", "master": None},
        {"name": "a2", "brokerName": "broker-a", "master": "a1"},
        {"name": "b1", "brokerName": "broker-b", "master": None},
        {"name": "b2", "brokerName": "broker-b", "master": "b1"},
    ]
    h = FakeHandle(state_nodes=nodes)
    for seed in range(8):
        sched = make_sweep(random.Random(seed), ["group-power-loss", "power-loss", "kill-slave"], h)
        assert [f.target for f in sched[-2:]] in (["a1", "b1"], ["b1", "a1"])
        assert sched[-1].group != sched[-2].group
