"""Committed offsets that move back: explained by a restart of their master (WARN), or not (FAIL)."""

from rmqha.pipeline.faults import FaultInterval
from rmqha.pipeline.offsets import ID_REGRESSION, regressions, verdicts


def row(ts, off, node="broker-a", key="T@CG1"):
    return {"ts": ts, "node": node, "consumerOffsets": {key: {"0": off, "1": 5}}}


def test_a_regression_no_fault_explains_fails_and_one_after_a_restart_warns():
    samples = [row(1000, 10), row(1500, 12), row(2000, 7), row(2500, 9), row(3000, 14), row(3500, 14)]
    regs = regressions(samples)
    assert [(r.before, r.after, r.faults) for r in regs] == [(12, 7, [])]  # one step down, counted once
    [v] = verdicts(regs, True)
    assert (v.id, v.subject, v.status) == (ID_REGRESSION, "CG1", "FAIL") and "12 -> 7 (no fault)" in v.detail
    kill = FaultInterval(1, "kill-master", "broker-a", "broker-a", "master", None, {}, 1600, 1900)
    [v] = verdicts(regressions(samples, [kill]), True)
    assert v.status == "WARN" and "#1 kill-master broker-a" in v.detail
    other = FaultInterval(2, "kill-master", "broker-b", "broker-b", "master", None, {}, 1600, 1900)
    late = FaultInterval(3, "kill-master", "broker-a", "broker-a", "master", None, {}, 2100, 2200)
    assert verdicts(regressions(samples, [late]), True)[0].status == "FAIL"  # after the drop: not its cause
    assert verdicts(regressions(samples, [other]), True)[0].status == "FAIL"


def test_steady_offsets_pass_and_no_samples_say_nothing():
    [v] = verdicts(regressions([row(1000, 1), row(2000, 1), row(3000, 4)]), True)
    assert v.status == "PASS"
    assert verdicts([], False) == []


def dl_row(ts, off, node):
    return {"ts": ts, "node": node, "brokerName": "RaftNode00", "consumerOffsets": {"T@CG1": {"0": off}}}


def test_a_dledger_group_is_followed_across_its_leaders_and_a_leader_change_explains_a_step_back():
    # n1 leads to 600, is killed; n0 leads with the offsets it copied as a follower (a step back)
    samples = [dl_row(1000, 500, "broker-n1"), dl_row(1500, 600, "broker-n1"), dl_row(9000, 369, "broker-n0")]
    [reg] = regressions(samples)
    assert (reg.node, reg.before, reg.after, reg.faults) == ("broker-n0", 600, 369, [])
    assert verdicts([reg], True)[0].status == "FAIL"  # nothing explains it
    kill = FaultInterval(1, "kill-leader", "broker-n1", "RaftNode00", "master", None, {}, 2000, 14000)
    [v] = verdicts(regressions(samples, [kill]), True)
    assert v.status == "WARN" and "#1 kill-leader broker-n1" in v.detail and "leader changed" in v.detail
    # a follower fault does not move leadership; a leader fault of another group explains nothing here
    follower = FaultInterval(2, "kill-follower", "broker-n2", "RaftNode00", "slave", None, {}, 2000, 14000)
    other = FaultInterval(3, "kill-leader", "broker-x1", "RaftNode01", "master", None, {}, 2000, 14000)
    assert verdicts(regressions(samples, [follower, other]), True)[0].status == "FAIL"


def test_a_restart_of_a_slave_does_not_explain_its_masters_step_back():
    samples = [row(1000, 10), row(1500, 12), row(2000, 7)]
    slave_power = FaultInterval(1, "power-loss", "broker-a-s", "broker-a", "slave", None, {}, 1600, 1900)
    assert verdicts(regressions(samples, [slave_power]), True)[0].status == "FAIL"


def test_a_dledger_member_that_does_not_lead_is_not_its_groups_master_whatever_role_its_file_says():
    """mx-dl-l3 (2026-11-29): broker-n0, back from a power cut as a CANDIDATE with its file's ASYNC_MASTER
    role and brokerId -1, answered the sampler with the offsets it had persisted as a follower."""
    lead = {"role": "LEADER", "term": 2}
    samples = [
        dict(dl_row(1000, 1000, "broker-n1"), dledger=lead),
        dict(dl_row(1500, 1088, "broker-n1"), dledger=lead),
        dict(dl_row(2000, 433, "broker-n0"), dledger={"role": "CANDIDATE", "term": 2}),
        dict(dl_row(2500, 1118, "broker-n1"), dledger=lead),
    ]
    assert regressions(samples) == []
    # the same step back from a member that leads is still one
    samples[2]["dledger"] = dict(lead, term=3)
    [reg] = regressions(samples)
    assert (reg.node, reg.before, reg.after) == ("broker-n0", 1088, 433)


def test_dledger_samples_that_name_no_role_are_said_unjudged_never_passed():
    """A member whose sample has a DLedger section but no role cannot be placed (leader or not): its offsets
    are left out, and the verdict says so. With nothing else sampled it is a WARN, not a PASS over nothing."""
    from rmqha.pipeline.offsets import roleless

    samples = [
        dict(dl_row(1000, 500, "broker-n0"), dledger={"term": 2}),
        dict(dl_row(2000, 40, "broker-n0"), dledger={}),
    ]
    assert roleless(samples) == 2 and regressions(samples) == []
    [v] = verdicts(regressions(samples), True, roleless(samples))
    assert v.status == "WARN" and "2 sample(s) of DLedger members that named no role not judged" in v.detail
    lead = {"role": "LEADER", "term": 2}
    judged = [dict(dl_row(1000, 500, "broker-n1"), dledger=lead), dict(dl_row(1500, 600, "broker-n1"), dledger=lead)]
    [v] = verdicts(regressions(judged), True, roleless(judged))
    assert v.status == "PASS" and "not judged" not in v.detail
