"""rmqha/matrix/promises.py: what 4.9 promises for a cell, and the verdict against it."""

from rmqha.matrix.promises import judge, promise


from .fabricate import sample


def test_cell_verdicts():
    sync = promise("2m-2s-sync", "ASYNC_FLUSH", "kill-master", "master")
    weak = promise("2m-2s-async", "ASYNC_FLUSH", "power-loss", "master")
    assert judge(sync, [sample()]) == ("PASS", "")
    assert judge(sync, [sample(), sample(lost=1)])[0] == "FAIL"
    assert judge(sync, [sample(divergent=1)])[0] == "FAIL"
    assert judge(sync, [sample(ok=0)])[0] == "not exercised"
    assert judge(sync, [])[0] == "not exercised"
    assert judge(weak, [sample(lost=3)]) == (
        "WEAK",
        "allowed: 3 acknowledged on no node, 0 undelivered, 0 stranded on a slave, 0 divergent pair(s)",
    )
    assert judge(weak, [sample(ok=0, lost=3)])[0] == "WEAK"  # a loss is a result even with no ack in the window
    assert judge(sync, [sample(error="boom")])[0] == "FAIL"


def test_cells_judge_delivery_and_the_faulted_groups_own_acks():
    sync = promise("2m-2s-sync", "ASYNC_FLUSH", "power-loss", "master")
    weak = promise("2m-2s-async", "ASYNC_FLUSH", "power-loss", "master")
    # stored on a slave, but no consumer can get it: lost to its users, which a SYNC_MASTER excludes
    assert judge(sync, [sample() | {"stranded": 5}])[0] == "FAIL"
    assert "5 stranded" in judge(sync, [sample() | {"stranded": 5}])[1]
    assert judge(sync, [sample() | {"undelivered": 2}])[0] == "FAIL"
    assert judge(weak, [sample() | {"stranded": 5}])[0] == "WEAK"
    # acks elsewhere in the cluster are not coverage of this group's fault
    assert judge(sync, [sample(ok=50) | {"acked_on_group": 0}])[0] == "not exercised"
    assert judge(sync, [sample(ok=50) | {"acked_on_group": 3}])[0] == "PASS"
    idle = sample() | {"acked_on_group": 9, "not_exercised": "group broker-a cannot replicate"}
    assert judge(sync, [idle]) == ("not exercised", "group broker-a cannot replicate")
