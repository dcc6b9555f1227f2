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
