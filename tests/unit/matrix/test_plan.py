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
