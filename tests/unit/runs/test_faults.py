"""rmqha/runs/faults.py: the fault vocabulary. The sets the checkers and the matrix judge by are derived
from each kind's properties; these pin them to the lists the modules spelled out before they were
derived (pipeline faults/delivery/offsets/served, chaos matrix and nemesis), so a property change that
moves a kind in or out of one shows here."""

from __future__ import annotations

import random

import pytest

from rmqha.chaos.nemesis import ACTIONS
from rmqha.runs import faults as v

POWER = {"power-loss", "group-power-loss", "slave-then-master-power-loss", "cluster-power-loss"}


def test_the_derived_sets_are_the_ones_the_modules_spelled_out():
    assert set(v.RESTARTING) == POWER | {"kill-master", "restart-master"}  # pipeline/offsets.py
    assert set(v.DESTRUCTIVE) == POWER | {"kill-master", "restart-master", "partition"}  # pipeline/delivery.py
    assert set(v.LOG_REWRITING) == set(v.DESTRUCTIVE) | {"pause-master"}  # pipeline/faults.py
    # DLedger's power cuts too: a loss acknowledged before one is blamed on it (it was never, before)
    assert set(v.POWER_LOSSES) == POWER | {"power-loss-leader", "power-loss-follower"}
    assert v.CLUSTER_WIDE == ("cluster-power-loss",)
    assert set(v.GROUP_POWER) == POWER - {"power-loss"}
    assert set(v.LEADER_FAULTS) == {"kill-leader", "pause-leader", "partition-leader", "power-loss-leader"}
    # pipeline/served.py listed these without cluster-power-loss, whose fault interval has no group (the
    # outage table skips it either way)
    assert set(v.MASTER_OUT) - {"cluster-power-loss"} == {
        "kill-master",
        "restart-master",
        "pause-master",
        "partition",
        "power-loss",
        "group-power-loss",
        "slave-then-master-power-loss",
    }
    assert set(v.NODE_DOWN) == POWER | {  # the matrix's NODE_DOWN_FAULTS
        "kill-master",
        "kill-slave",
        "restart-master",
        "restart-slave",
        "pause-master",
        "pause-slave",
        "partition",
        "kill-leader",
        "pause-leader",
        "kill-follower",
        "pause-follower",
        "power-loss-leader",
        "power-loss-follower",
    }
    assert v.LAST_IN_SWEEP == (
        ("power-loss", "master"),
        ("slave-then-master-power-loss", "master"),
        ("group-power-loss", "master"),
        ("cluster-power-loss", "master"),
    )


@pytest.mark.parametrize("kind", v.ALL_FAULTS)
def test_a_master_power_cut_is_a_classic_power_loss_that_reaches_the_master(kind):
    for role in ("master", "slave"):
        old = kind in POWER - {"power-loss"} or (kind == "power-loss" and role == "master")
        assert v.master_power_cut(kind, role) == old
    assert not v.master_power_cut("no-such-fault", "master")


def test_evidence_names_what_the_samples_must_show():
    got = {k: v.evidence(k) for k in v.ALL_FAULTS}
    assert {k for k, e in got.items() if e == "down"} == set(v.NODE_DOWN)
    assert {k: e for k, e in got.items() if e not in ("down", None)} == {
        "disk-full": "disk",
        "cut": "behind",
        "latency": "behind",
        "client-cut": "refused",
        "partition-follower": "appending",
    }
    assert v.evidence("no-such-fault") is None


def test_every_kind_has_a_start_and_a_stop_and_draws_its_params_deterministically():
    assert set(ACTIONS) == set(v.FAULTS)
    for name, k in v.FAULTS.items():
        assert k.name == name and k.targets in ("master", "slave", "node") and k.modes in ((v.CLASSIC,), (v.DLEDGER,))
        assert k.params(random.Random(7), 1500) == k.params(random.Random(7), 1500)
        assert (k.min_hold == v.LEADER_FAILOVER_HOLD_S) == (name in v.LEADER_FAULTS)
