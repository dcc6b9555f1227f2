"""rmqha/matrix/facts.py: which broker group acknowledged a send."""

from rmqha.matrix import facts, figures


from .fabricate import TOPIC, audited_summary, cell_samples_by_id, fabricate, fault


def test_a_send_belongs_to_the_group_that_acknowledged_it(tmp_path):
    """review-1 M2: the first try timed out on broker-a, which stored it anyway; the retry was acknowledged
    by broker-b. The send, its availability and its fault are broker-b's, whatever copy the audit picked."""
    ok = [("SEND_OK", 500, 510)]
    # our own retry: a new UNIQ_KEY per try
    fabricate(
        tmp_path,
        [
            ("a0", "broker-a", ok),
            (
                "x1",
                None,
                [("ERROR", 10100, 10200, {"group": "broker-a"}), ("SEND_OK", 10300, 10310, {"group": "broker-b"})],
            ),
        ],
        receives=[("a0", None, 3000), ("x1", None, 13000)],
    )
    got = facts.run_facts(tmp_path)
    assert got.group("x1") == "broker-b"
    f = [fault(1, "kill-master", start=10000, end=11000)]
    # the audit gives it broker-b too (rmqha/pipeline/delivery.py _placed): counting it on broker-a (the copy
    # of its first try, the audit's old choice) is a mismatch, named
    got = cell_samples_by_id(tmp_path, audited_summary(f, {"#1 kill-master broker-a": 0}, 2))[1]
    assert got["acked_recounted"] == 0 and got["excluded"] == {}
    got = cell_samples_by_id(tmp_path, audited_summary(f, {"#1 kill-master broker-a": 1}, 2))[1]
    assert got["excluded"] == {"acknowledged the audit counted 1, the histories and stores 0": 1}
    assert got["group_availability"]["broker-b"]["accepted"] == 1
    # the client's internal retry: one try in the history, one UNIQ_KEY, a copy in each group; the answer's
    # queue offset is that of broker-b's copy (its first message; broker-a's copy is its second)
    fabricate(
        tmp_path,
        [
            ("a0", "broker-a", ok),
            ("x1", "broker-b", [("SEND_OK", 10300, 10310, {"uniq": "U-x1", "line": {"queue_offset": 0}})]),
        ],
        receives=[("a0", None, 3000), ("x1", None, 13000)],
        extra_copies=[("broker-a", "x1", "U-x1", TOPIC)],
    )
    got = facts.run_facts(tmp_path)
    assert got.group("x1") == "broker-b"
    ga = figures.group_availability(got, 10000, 11000)
    assert ga["broker-b"]["accepted"] == 1 and ga["broker-a"]["answered"] == 0
    got = cell_samples_by_id(tmp_path, audited_summary(f, {"#1 kill-master broker-a": 0}, 2))[1]
    assert got["acked_recounted"] == 0 and got["excluded"] == {}
    # the Rust client's answer names its broker: that decides
    fabricate(
        tmp_path,
        [
            (
                "x1",
                "broker-b",
                [("SEND_OK", 10300, 10310, {"uniq": "U-x1", "line": {"broker_name": "broker-a", "queue_offset": 0}})],
            )
        ],
        receives=[("x1", None, 13000)],
        extra_copies=[("broker-a", "x1", "U-x1", TOPIC)],
    )
    assert facts.run_facts(tmp_path).group("x1") == "broker-a"
    # nothing tells the copies apart (both first in their log): no group is picked, and the cell says why
    fabricate(
        tmp_path,
        [("x1", "broker-b", [("SEND_OK", 10300, 10310, {"uniq": "U-x1"})])],
        receives=[("x1", None, 13000)],
        extra_copies=[("broker-a", "x1", "U-x1", TOPIC)],
    )
    got = facts.run_facts(tmp_path)
    assert got.group("x1") is None
    got = cell_samples_by_id(tmp_path, audited_summary(f, {"#1 kill-master broker-a": 0}, 1))[1]
    assert got["excluded"] == {"acknowledged, stored in two groups, the answer names neither (broker-a, broker-b)": 1}
