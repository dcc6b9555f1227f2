"""Who is blamed for an acknowledged loss (faults.loss_blame): the fault that destroyed it, the first fault
after its acknowledgement that can destroy a record its group stored (a power cut of a node holding it
first); a fault that merely happened when it was acknowledged only when no later fault could have destroyed
it. The audit's lostByFault and deliveryByFault and the matrix's cells (tests/unit/matrix/test_cells.py)
all count by it."""

from rmqha.pipeline import delivery, delivery_gather
from rmqha.pipeline import faults as pf


def interval(id_, kind, target, start, end, group=None):
    return pf.FaultInterval(
        id_,
        kind,
        target,
        group if group is not None else target.removesuffix("-s"),
        "slave" if target.endswith("-s") else "master",
        None,
        {},
        start,
        end,
    )


KILL_SLAVE = "#1 kill-slave broker-a-s"
GROUP_CUT = "#2 group-power-loss broker-a"
FAULTS = [
    interval(1, "kill-slave", "broker-a-s", 2_000, 7_000),
    interval(2, "group-power-loss", "broker-a", 10_000, 12_000),
    interval(3, "pause-slave", "broker-b-s", 40_000, 42_000),
]


def lost(at, group=None):
    return [("U1", "s", "c", "T", at) + ((group,) if group else ())]


def test_a_loss_acknowledged_during_a_kill_slave_is_the_later_group_power_losss_not_the_kills():
    """Issue 32: acknowledged while the slave was killed, destroyed by the group's power cut 5 s later: the
    kill-slave's cell must not count it."""
    assert pf.attribute(FAULTS, [], lost(3_000), []).lost == {GROUP_CUT: ["U1"]}
    assert pf.attribute(FAULTS, [], lost(3_000, "broker-a"), []).lost == {GROUP_CUT: ["U1"]}


def test_a_loss_acknowledged_with_no_fault_active_is_the_later_cuts():
    # acknowledged at 1 s, before the kill-slave (from 2 s), or after its heal: the cut destroyed it
    assert pf.attribute(FAULTS, [], lost(1_000), []).lost == {GROUP_CUT: ["U1"]}
    assert pf.attribute(FAULTS, [], lost(8_500), []).lost == {GROUP_CUT: ["U1"]}


def test_a_loss_no_later_fault_could_destroy_stays_with_the_fault_at_its_acknowledgement():
    a = pf.attribute(FAULTS, [], [("U1", "s", "c", "T", 20_000), ("U2", "s", "c", "T", 41_000)], [])
    assert a.lost == {pf.NO_FAULT: ["U1"], "#3 pause-slave broker-b-s": ["U2"]}
    # a kill-slave then a pause-slave: neither can destroy what the master holds
    faults = [
        interval(1, "kill-slave", "broker-a-s", 2_000, 7_000),
        interval(2, "pause-slave", "broker-a-s", 9_000, 9_500),
    ]
    assert pf.attribute(faults, [], lost(3_000), []).lost == {KILL_SLAVE: ["U1"]}


def test_a_loss_is_blamed_on_the_first_cut_after_it_not_every_later_one():
    faults = FAULTS + [interval(4, "cluster-power-loss", "broker-a", 50_000, 52_000, group="")]
    faults[-1].group = None  # cluster-wide: every group's (faults.load)
    assert pf.loss_blame(faults, 3_000, "broker-a") == [GROUP_CUT]
    # after the group cut, the cluster cut is broker-a's first destroyer
    assert pf.loss_blame(faults, 20_000, "broker-a") == ["#4 cluster-power-loss broker-a"]


def test_a_power_cut_comes_before_a_kill_that_strands_nothing_by_itself():
    faults = [
        interval(1, "kill-slave", "broker-a-s", 2_000, 7_000),
        interval(2, "kill-master", "broker-a", 8_000, 9_000),
        interval(3, "power-loss", "broker-a", 10_000, 11_000),
    ]
    assert pf.loss_blame(faults, 3_000, "broker-a") == ["#3 power-loss broker-a"]
    # no power cut after it: the kill of the master can take its tail
    assert pf.loss_blame(faults[:2], 3_000, "broker-a") == ["#2 kill-master broker-a"]


def test_a_cut_of_another_group_or_of_a_slave_destroys_nothing_of_this_group():
    faults = [
        interval(1, "kill-slave", "broker-a-s", 2_000, 7_000),
        interval(2, "group-power-loss", "broker-b", 10_000, 12_000),
        interval(3, "power-loss", "broker-a-s", 14_000, 15_000),
    ]
    assert pf.loss_blame(faults, 3_000, "broker-a") == [KILL_SLAVE]
    # the group unknown (a send on no node whose answer named none): broker-b's cut is a suspect
    assert pf.loss_blame(faults, 3_000) == ["#2 group-power-loss broker-b"]


def test_the_group_unknown_each_groups_first_destroyer_is_blamed():
    faults = [
        interval(1, "group-power-loss", "broker-a", 10_000, 12_000),
        interval(2, "group-power-loss", "broker-b", 20_000, 22_000),
        interval(3, "group-power-loss", "broker-a", 30_000, 32_000),
    ]
    assert pf.loss_blame(faults, 3_000) == ["#1 group-power-loss broker-a", "#2 group-power-loss broker-b"]


def test_a_cut_already_under_way_at_the_acknowledgement_is_blamed():
    # slave-then-master: the slaves are cut at its start, the master gap_s later; a send its master
    # acknowledged in between is destroyed by that same fault
    faults = [
        interval(1, "kill-slave", "broker-b-s", 9_000, 15_000),
        interval(2, "slave-then-master-power-loss", "broker-a", 10_000, 13_000),
    ]
    assert pf.loss_blame(faults, 10_500, "broker-a") == ["#2 slave-then-master-power-loss broker-a"]
    # healed before it (and more than faults.GRACE_MS before): not
    assert pf.loss_blame(faults, 19_000, "broker-a") == ["#1 kill-slave broker-b-s"]


def test_a_fault_whose_inject_failed_destroys_nothing():
    faults = [
        interval(1, "kill-slave", "broker-a-s", 2_000, 7_000),
        interval(2, "power-loss", "broker-a", 10_000, 11_000),
    ]
    faults[1].inject_error = "no such container"
    assert pf.loss_blame(faults, 3_000, "broker-a") == [KILL_SLAVE]


def test_a_record_still_on_its_master_is_blamed_on_the_fault_at_its_acknowledgement_and_the_next_one():
    """Lost "queued", "backlog" or "unqueued": the record is on its master, no cut destroyed it; whether the
    broker that took it or a later restart of its master made it unservable cannot be told: both count."""
    assert pf.loss_blame(FAULTS, 3_000, "broker-a", destroyed=False) == [KILL_SLAVE, GROUP_CUT]
    assert pf.loss_blame(FAULTS, 1_000, "broker-a", destroyed=False) == [GROUP_CUT]
    assert pf.loss_blame(FAULTS, 20_000, "broker-a", destroyed=False) == [pf.NO_FAULT]
    assert pf.loss_blame(FAULTS, 41_000, "broker-b", destroyed=False) == ["#3 pause-slave broker-b-s"]
    assert delivery.destroyed(delivery.ID_LOST, "nowhere") and delivery.destroyed(delivery.ID_STRANDED, None)
    assert delivery.destroyed(delivery.ID_LOST_AFTER, None)
    assert not any(delivery.destroyed(delivery.ID_LOST, r) for r in ("queued", "backlog", "unqueued"))


def test_a_loss_acknowledged_before_a_dledger_power_cut_is_blamed_on_it():
    # a DLedger group's cut node drops its unsynced entries like a classic master does; when an
    # acknowledged send is gone, the later cut is blamed, not "no fault" nor the follower fault before it
    faults = [
        interval(1, "kill-follower", "broker-a-n2", 500, 2_000, group="broker-a"),
        interval(2, "power-loss-follower", "broker-a-n1", 4_000, 5_500, group="broker-a"),
        interval(3, "power-loss-leader", "broker-a-n0", 8_000, 9_500, group="broker-a"),
    ]
    a = pf.attribute(faults, [], [("U1", "s", "c", "T", 1_000)], [])
    assert a.lost == {"#2 power-loss-follower broker-a-n1": ["U1"]}


def test_summary_faults_read_back():
    back = pf.from_summary([{"id": 1, "kind": "power-loss", "target": "broker-a", "group": "broker-a", "start_ms": 5}])
    assert back[0].label == "#1 power-loss broker-a" and back[0].end_ms is None and back[0].role is None


class _Rows:
    """Stands for the Spark frame _problem_lines reads (select, orderBy, toLocalIterator)."""

    def __init__(self, rows):
        self.rows = rows

    def select(self, *cols):
        return self

    def orderBy(self, *cols):
        return self

    def toLocalIterator(self):
        return iter(self.rows)


def problem(send_id, state, reason, ack_ms, broker="broker-a", gone_after=False):
    return {
        "grp": "CG1",
        "send_id": send_id,
        "s_topic": "T",
        "producer": "p1",
        "state": state,
        "reason": reason,
        "gone_after": gone_after,
        "ack_ms": ack_ms,
        "where": [],
        "broker": broker,
    }


def test_the_audits_delivery_by_fault_counts_a_loss_on_the_cut_that_destroyed_it():
    """deliveryByFault (the matrix's undelivered and stranded): d1 acknowledged during the kill-slave and
    gone from every node after the group's cut: the cut's; d2 the same with no fault active; d3 on its
    master, never received (the consumer passed it by): the kill-slave's, during which it was acknowledged,
    and the cut's (either could have made it unservable);
    d4 stranded on the slave: the cut's; d5 on its master, acknowledged after the cut with no fault after
    it: no fault."""
    f = delivery.DeliveryFindings()
    rows = [
        problem("d1", "lost", "nowhere", 3_000),
        problem("d2", "lost", "nowhere", 1_000),
        problem("d3", "lost", "queued", 3_000),
        problem("d4", "stranded", None, 3_000),
        problem("d5", "lost", "unqueued", 20_000),
    ]
    by_group = {"CG1": delivery.GroupDelivery("CG1", ["T"])}
    seen = delivery_gather._problem_lines(_Rows(rows), FAULTS, by_group, f, None)
    assert {k: {v: sorted(x) for v, x in d.items()} for k, d in seen.items()} == {
        GROUP_CUT: {delivery.ID_LOST: ["d1", "d2", "d3"], delivery.ID_STRANDED: ["d4"]},
        KILL_SLAVE: {delivery.ID_LOST: ["d3"]},
        pf.NO_FAULT: {delivery.ID_LOST: ["d5"]},
    }
    assert f.detail_lines == 5


def test_a_dledger_leader_fault_at_the_acknowledgement_comes_before_a_later_cut():
    """A DLedger leadership change truncates what the new leader's log lacks: as sure a destroyer as a cut,
    so the first of them is blamed (a leader paused while the send was acknowledged, then a cut)."""
    faults = [
        interval(1, "pause-leader", "broker-a-n0", 2_000, 14_000, group="broker-a"),
        interval(2, "power-loss-leader", "broker-a-n1", 20_000, 32_000, group="broker-a"),
    ]
    assert pf.loss_blame(faults, 3_000, "broker-a") == ["#1 pause-leader broker-a-n0"]
    assert pf.loss_blame(faults, 15_000, "broker-a") == ["#2 power-loss-leader broker-a-n1"]
    # a follower fault destroys nothing: the send acknowledged during it goes to the next leader fault
    faults[0] = interval(1, "kill-follower", "broker-a-n2", 2_000, 14_000, group="broker-a")
    assert pf.loss_blame(faults, 3_000, "broker-a") == ["#2 power-loss-leader broker-a-n1"]


def test_a_send_on_no_node_whose_answer_named_its_group_is_that_groups_cuts():
    """The history's lost sends carry the group the answer named (the Rust client's broker_name): only that
    group's cut can have destroyed it; with none named, each group's first cut is."""
    faults = FAULTS[:2] + [interval(4, "group-power-loss", "broker-b", 20_000, 22_000)]
    assert pf.attribute(faults, [], lost(3_000, "broker-b"), []).lost == {"#4 group-power-loss broker-b": ["U1"]}
    assert pf.attribute(faults, [], lost(3_000), []).lost == {GROUP_CUT: ["U1"], "#4 group-power-loss broker-b": ["U1"]}
