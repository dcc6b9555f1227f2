"""rmqha/matrix/plan.py and the sweep a matrix run asks the nemesis for."""

import random


from rmqha.chaos.nemesis import make_sweep, sweep_cells

from ..chaos.test_nemesis_and_faults import fake_cluster


def test_a_sweep_hits_every_kind_once_per_role_with_the_master_power_loss_last():
    c, _ = fake_cluster()
    kinds = ["kill-master", "power-loss", "pause-slave", "disk-full"]
    sched = make_sweep(random.Random(7), kinds, c)
    assert (
        sorted((f.kind, f.role) for f in sched)
        == sorted(sweep_cells(kinds, c))
        == sorted(
            [
                ("kill-master", "master"),
                ("power-loss", "master"),
                ("power-loss", "slave"),
                ("pause-slave", "slave"),
                ("disk-full", "master"),
                ("disk-full", "slave"),
            ]
        )
    )
    assert (sched[-1].kind, sched[-1].role) == ("power-loss", "master")
    assert all(b.at >= a.at + a.hold + 4.0 for a, b in zip(sched, sched[1:]))  # one at a time, with a gap
    assert [f.to_json() for f in sched] == [f.to_json() for f in make_sweep(random.Random(7), kinds, c)]


def test_apache_mode_plans_every_power_fault_ours_does_on_the_local_backend():
    from rmqha.matrix.plan import ALL_CONFIGS, DISK_FAULTS, make_plan
    from rmqha.runs.faults import FAULTS

    power = {k for k, v in FAULTS.items() if v.action == "power"}
    assert power >= {"power-loss", "group-power-loss", "slave-then-master-power-loss", "cluster-power-loss"}
    assert power >= {"power-loss-leader", "power-loss-follower"}

    def planned(mode):
        return {
            (topology, flush): [f for f in faults if f in power]
            for topology, flush, _backend, faults, _seed, _mode in make_plan(ALL_CONFIGS, ["local"], [mode], seeds=1)
            if list(faults) != DISK_FAULTS  # disk-full's own sweep: its tmpfs stores cannot be on crashfs
        }

    ours, apache = planned("ours"), planned("apache")
    assert apache == ours  # the same power faults, configuration by configuration (DLedger's included)
    assert set(apache[("2m-2s-sync", "ASYNC_FLUSH")]) == power - {"power-loss-leader", "power-loss-follower"}
    assert set(apache[("dledger", "ASYNC_FLUSH")]) == {"power-loss-leader", "power-loss-follower"}


def test_apache_mode_runs_in_the_docker_lane_with_the_faults_ours_gets_there():
    from rmqha.matrix.plan import ALL_CONFIGS, DLEDGER_DOCKER_FAULTS, DOCKER_FAULTS, make_plan, run_name

    plan = make_plan(ALL_CONFIGS, ["docker"], ["ours", "4.9", "apache"], seeds=1)

    def faults_of(mode):
        return {(t, f): list(faults) for t, f, b, faults, _s, m in plan if m == mode and b == "docker"}

    apache = faults_of("apache")
    assert apache == faults_of("ours")  # every configuration ours runs there, DLedger's included
    assert apache[("2m-2s-sync", "ASYNC_FLUSH")] == DOCKER_FAULTS
    assert apache[("dledger", "ASYNC_FLUSH")] == DLEDGER_DOCKER_FAULTS
    assert ("dledger", "ASYNC_FLUSH") not in faults_of("4.9")
    names = [run_name(t, f, b, s, m, faults) for t, f, b, faults, s, m in plan]
    assert len(names) == len(set(names))  # apache's runs have folders of their own (-ap)
    assert "mx-ss-d1-ap" in names and "mx-dl-d1-ap" in names
