"""The delivery checker on what the histories say: unanswered sends, duplicates, phantoms, order per
sharding key, the window a group listened in, and where a stalled group stopped (split from
test_delivery.py so the two files run on different test workers)."""

import pytest
import json
import os

from rmqha.pipeline import delivery
from rmqha.pipeline.verdict import FAIL, PASS, WARN

from .test_delivery import GROUP, T0, _deliver, _histories


def test_unexpected_duplicates_and_indeterminate(spark, run_builder):
    run_builder.master(n=60)
    orphan = run_builder.put("T", "ORPHAN-UK", "orphan-send", queue_id=1)  # invoked, never answered
    run_builder.close()
    run_builder.sent.pop()
    _histories(
        run_builder,
        range(60),
        twice=(3, 4, 5),
        extra_sends=[
            {"op": "invoke", "send_id": "orphan-send", "attempt": 1},
            {"op": "invoke", "send_id": "never-stored", "attempt": 1},
            {"op": "send", "send_id": "never-stored", "attempt": 1, "status": "ERROR", "error": "timeout"},
        ],
        extra_receives=[
            {"send_id": "orphan-send", "uniq_key": "ORPHAN-UK", "queue_id": 1, "queue_offset": orphan.queue_offset},
            {"send_id": "nobody", "uniq_key": "PHANTOM-UK", "queue_id": 0, "queue_offset": 999},
        ],
    )
    v, rep, summary, _ = _deliver(spark, run_builder.root)
    assert v[(delivery.ID_UNEXPECTED, GROUP)].status == FAIL
    assert "PHANTOM-UK" in v[(delivery.ID_UNEXPECTED, GROUP)].detail
    assert "ORPHAN-UK" not in v[(delivery.ID_UNEXPECTED, GROUP)].detail
    assert v[(delivery.ID_DUPLICATE, GROUP)].status == WARN
    d = summary["delivery"][GROUP]
    assert (d["duplicates"], d["unexpected"], d["indeterminate"], d["indeterminateDelivered"]) == (3, 1, 2, 1)
    assert d["lost"] == 0  # an unanswered send is never lost


@pytest.mark.audit_scenarios
def test_a_group_that_received_nothing_is_owed_everything(spark, run_builder):
    run_builder.master(n=30)
    run_builder.close()
    _histories(run_builder, [])
    v, rep, summary, _ = _deliver(spark, run_builder.root)
    assert v[(delivery.ID_LOST, GROUP)].status == FAIL
    assert summary["delivery"][GROUP]["lost"] == 30


@pytest.mark.audit_scenarios
def test_order_per_sharding_key(spark, run_builder):
    run_builder.master(n=40)
    run_builder.close()
    order = list(range(40))
    order[10], order[12] = order[12], order[10]  # shard 0: messages 10 and 12 swapped
    _histories(run_builder, order, shard=lambda i: i % 2, ordered=True)
    v, rep, summary, _ = _deliver(spark, run_builder.root)
    assert v[(delivery.ID_REORDERED, GROUP)].status == FAIL
    assert summary["delivery"][GROUP]["reordered"] == 1

    # swapping messages of two different keys breaks no key's order
    run_builder2_order = list(range(40))
    run_builder2_order[10], run_builder2_order[11] = 11, 10
    os.remove(os.path.join(run_builder.root, "history", "consumer.jsonl"))
    os.remove(os.path.join(run_builder.root, "history", "producer.jsonl"))
    _histories(run_builder, run_builder2_order, shard=lambda i: i % 2, ordered=True)
    v, rep, summary, _ = _deliver(spark, run_builder.root)
    assert v[(delivery.ID_REORDERED, GROUP)].status == PASS


@pytest.mark.audit_scenarios
def test_a_group_is_owed_only_what_was_acknowledged_while_it_listened(spark, run_builder):
    run_builder.master(n=100)
    run_builder.close()
    listened = range(48, 79)  # send i is acknowledged at T0+i+2: these fall in [T0+50, T0+80]
    _histories(run_builder, listened, subscribe=False)
    with open(os.path.join(run_builder.root, "history", "consumer.jsonl"), "a") as fh:
        for op, t, extra in (
            ("subscribe", T0 + 50, {"topic": "T", "status": "FROM_NOW"}),
            ("unsubscribe", T0 + 80, {}),
        ):
            fh.write(
                json.dumps({"client": "consumer", "op": op, "group": GROUP, "start_ms": t, "end_ms": t, **extra}) + "\n"
            )
    v, rep, summary, _ = _deliver(spark, run_builder.root)
    d = summary["delivery"][GROUP]
    assert (d["acknowledged"], d["delivered"], d["lost"]) == (31, 31, 0), d
    assert v[(delivery.ID_LOST, GROUP)].status == PASS


@pytest.mark.audit_scenarios
def test_what_a_stalled_group_never_reached_is_backlog_not_passed_by(spark, run_builder):
    run_builder.master(n=40)  # 10 per queue: queue offsets 0..9
    run_builder.close()
    _histories(run_builder, [])
    os.makedirs(os.path.join(run_builder.root, "chaos"))
    with open(os.path.join(run_builder.root, "chaos", "ending-1.json"), "w") as fh:
        json.dump(
            {"drain": {GROUP: {"drained": False, "committed": {"broker-a-0": {str(q): 6 for q in range(4)}}}}}, fh
        )
    v, rep, summary, _ = _deliver(spark, run_builder.root)
    assert summary["delivery"][GROUP]["lostByReason"] == {"backlog": 16, "queued": 24}
    assert v[(delivery.ID_LOST, GROUP)].status == FAIL
