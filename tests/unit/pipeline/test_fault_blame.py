"""Who is blamed for an acknowledged loss: the faults active when it was acknowledged, and every power
loss after it (a power cut destroys bytes acknowledged before it; the history does not name the group)."""

from rmqha.pipeline import faults as pf


def interval(id_, kind, target, start, end):
    return pf.FaultInterval(
        id_,
        kind,
        target,
        target.removesuffix("-s"),
        "slave" if target.endswith("-s") else "master",
        None,
        {},
        start,
        end,
    )


FAULTS = [
    interval(1, "kill-slave", "broker-a-s", 2_000, 7_000),
    interval(2, "power-loss", "broker-a", 4_000, 5_500),
    interval(3, "pause-slave", "broker-b-s", 40_000, 42_000),
]


def test_a_loss_acknowledged_during_a_fault_is_blamed_on_it_and_on_the_later_power_loss():
    a = pf.attribute(FAULTS, [], [("U1", "s", "c", "T", 3_000)], [])
    assert a.lost == {"#1 kill-slave broker-a-s": ["U1"], "#2 power-loss broker-a": ["U1"]}


def test_a_loss_acknowledged_before_any_fault_is_the_power_loss_not_no_fault():
    a = pf.attribute(FAULTS, [], [("U1", "s", "c", "T", 1_000)], [])
    assert a.lost == {"#2 power-loss broker-a": ["U1"]}


def test_a_loss_after_the_last_power_loss_with_no_fault_active_is_no_fault():
    a = pf.attribute(FAULTS, [], [("U1", "s", "c", "T", 20_000), ("U2", "s", "c", "T", 41_000)], [])
    assert a.lost == {pf.NO_FAULT: ["U1"], "#3 pause-slave broker-b-s": ["U2"]}


def test_a_power_loss_that_started_at_the_acknowledgement_is_blamed_once():
    a = pf.attribute(FAULTS, [], [("U1", "s", "c", "T", 4_000)], [])
    assert a.lost == {"#1 kill-slave broker-a-s": ["U1"], "#2 power-loss broker-a": ["U1"]}


def test_a_loss_acknowledged_before_a_dledger_power_cut_is_blamed_on_it():
    # a DLedger group's cut node drops its unsynced entries like a classic master does; when an
    # acknowledged send is gone, the later cut is a suspect, not "no fault"
    faults = [interval(1, "power-loss-leader", "broker-a-n0", 4_000, 5_500)]
    a = pf.attribute(faults, [], [("U1", "s", "c", "T", 1_000)], [])
    assert a.lost == {"#1 power-loss-leader broker-a-n0": ["U1"]}
