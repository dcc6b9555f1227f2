"""The delivery checker on a POP consumer's history (the 5.x client: receive lines carry the delivery
attempt, acks are "ack" lines): a message received again before the group acked it is a redelivery, one
received again after the ack is a duplicate; a push consumer's second receive stays a duplicate."""

import pytest
import os

from rmqha.runs.history import HistoryWriter
from rmqha.pipeline import delivery
from rmqha.pipeline.verdict import PASS, WARN

from .test_delivery import GROUP, T0, _deliver, _histories


def _pop_lines(rb, lines):
    """(index, op, attempt) lines of a POP consumer of GROUP, in order."""
    c = HistoryWriter(os.path.join(rb.root, "history", "consumer5.jsonl"))
    t = T0 + 10_000
    for i, op, attempt in lines:
        uk, sid, r = rb.sent[i]
        t += 1
        base = {
            "client": "consumer5",
            "group": GROUP,
            "topic": "T",
            "send_id": sid,
            "uniq_key": uk,
            "start_ms": t,
            "end_ms": t,
        }
        if op == "receive":
            c.append(
                base
                | {
                    "op": "receive",
                    "status": "RECEIVED",
                    "attempt": attempt,
                    "queue_id": r.queue_id,
                    "queue_offset": r.queue_offset,
                }
            )
        else:
            c.append(base | {"op": "ack", "status": "ACKED" if op == "ack" else "ERROR"})
    c.close()


def test_redelivery_before_the_ack_is_not_a_duplicate(spark, run_builder):
    run_builder.master(n=6)
    run_builder.close()
    _histories(run_builder, [], twice=())  # the sends and the group's subscribe line; no push receives
    _pop_lines(
        run_builder,
        [(0, "receive", 1), (0, "ack", None)]  # received once, acked
        + [(1, "receive", 1), (1, "receive", 2), (1, "receive", 3), (1, "ack", None)]  # came back twice, then acked
        + [(2, "receive", 1), (2, "ack-failed", None), (2, "receive", 2), (2, "ack", None)]  # an ack that failed
        + [(3, "receive", 1), (3, "ack", None), (3, "receive", 2), (3, "ack", None)]  # acked, then seen again
        + [(4, "receive", 1), (5, "receive", 1), (5, "ack", None)],
    )
    v, _, summary, _ = _deliver(spark, run_builder.root)
    d = summary["delivery"][GROUP]
    assert (d["delivered"], d["lost"], d["duplicates"]) == (6, 0, 1), d  # only 3's second receive
    assert v[(delivery.ID_DUPLICATE, GROUP)].status == WARN


@pytest.mark.audit_scenarios
def test_without_a_second_receive_after_an_ack_there_is_no_duplicate(spark, run_builder):
    run_builder.master(n=3)
    run_builder.close()
    _histories(run_builder, [], twice=())
    _pop_lines(
        run_builder,
        [
            (0, "receive", 1),
            (0, "receive", 2),
            (0, "ack", None),
            (1, "receive", 1),
            (1, "ack", None),
            (2, "receive", 1),
            (2, "ack", None),
        ],
    )
    v, _, summary, _ = _deliver(spark, run_builder.root)
    assert summary["delivery"][GROUP]["duplicates"] == 0
    assert v[(delivery.ID_DUPLICATE, GROUP)].status == PASS
