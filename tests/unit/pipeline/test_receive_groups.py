"""A receive's broker group is the group whose stored copy is at the receive's own place (UNIQ_KEY, topic,
queue id, queue offset), not an arbitrary group storing its UNIQ_KEY (issue 23). A client's internal retry
can leave one UNIQ_KEY in two groups at different queue offsets; a consumer receives both copies, each
from its own queue. A receive no copy's place matches, or that copies of two groups match and its
commit-log offset does not tell apart, is in no group: it is not judged for order, and it is counted and
named."""

import os

from rmqha.runs.history import HistoryWriter
from rmqha.pipeline import decode, history_check, runfolder
from rmqha.pipeline.verdict import PASS, WARN

T0 = 1_700_000_000_000


def _store(rb, node, broker, puts):
    """A master holding `puts` [(uniq_key, send_id, queue id)] in topic T, in that order; their put results."""
    rb.master(name=node, broker=broker, n=0)
    placed = {}
    for uk, sid, qid in puts:
        placed[uk] = rb.put("T", uk, sid, 100, qid)
    rb.close()
    return placed


def _retried_twice(rb):
    """broker-a and broker-b, each holding R1 and R2 (one send each, stored by both groups at different
    queue offsets of queue 0) and R3 (at queue 1 offset 0 in both); a consumer that receives all of queue
    0 of broker-a, then all of queue 0 of broker-b, in queue order: nothing out of order. Then R3 once with
    no commit-log offset (its place is in both groups: no group), once with broker-b's; R1 at an offset
    no copy has (as a retry topic's receive reports it); and R2 with no queue offset."""
    a = _store(
        rb,
        "broker-a-0",
        "broker-a",
        [
            ("A0", "a0", 0),
            ("A1", "a1", 0),
            ("A2", "a2", 0),
            ("R2", "r2", 0),
            ("A4", "a4", 0),
            ("R1", "r1", 0),
            ("A6", "a6", 0),
            ("R3", "r3", 1),
        ],
    )
    b = _store(
        rb,
        "broker-b-0",
        "broker-b",
        [
            ("B0", "b0", 0),
            ("B1", "b1", 0),
            ("R1", "r1", 0),
            ("B3", "b3", 0),
            ("B4", "b4", 0),
            ("B5", "b5", 0),
            ("B6", "b6", 0),
            ("R2", "r2", 0),
            ("R3", "r3", 1),
        ],
    )
    assert (a["R1"].queue_offset, b["R1"].queue_offset, a["R2"].queue_offset, b["R2"].queue_offset) == (5, 2, 3, 7)
    assert a["R3"].queue_offset == b["R3"].queue_offset == 0
    p = HistoryWriter(os.path.join(rb.root, "history", "producer.jsonl"))
    for i, (uk, sid) in enumerate(sorted({(uk, sid) for uk, sid, _ in rb.sent})):
        p.append(
            {
                "client": "producer",
                "op": "send",
                "topic": "T",
                "send_id": sid,
                "attempt": 1,
                "uniq_key": uk,
                "status": "SEND_OK",
                "start_ms": T0 + i,
                "end_ms": T0 + i + 1,
            }
        )
    p.close()
    c = HistoryWriter(os.path.join(rb.root, "history", "consumer.jsonl"))
    t = T0 + 1000

    def receive(uk, qid, qoff, phys=None):
        nonlocal t
        t += 1
        c.append(
            {
                "client": "consumer",
                "op": "receive",
                "topic": "T",
                "send_id": uk.lower(),
                "uniq_key": uk,
                "status": "RECEIVED",
                "queue_id": qid,
                "queue_offset": qoff,
                "commit_log_offset": phys,
                "ordered": True,
                "start_ms": t,
                "end_ms": t,
            }
        )

    for copies in (a, b):
        for uk, r in sorted(copies.items(), key=lambda kv: kv[1].queue_offset):
            if r.queue_id == 0:
                receive(uk, 0, r.queue_offset)
    receive("R3", 1, 0)
    receive("R3", 1, 0, b["R3"].wrote_offset)
    receive("R1", 0, 99)
    receive("R2", 0, None)
    c.close()


def test_each_copy_is_judged_in_its_own_groups_queue_and_the_rest_are_named(spark, run_builder):
    _retried_twice(run_builder)
    nodes = runfolder.load_nodes(run_builder.root)
    f = history_check.gather(
        spark,
        decode.decode(spark, nodes, 1 << 20),
        history_check.load_histories(spark, runfolder.history_files(run_builder.root)),
        nodes,
    )
    # given the group of an arbitrary copy of R1 (and R2), one of its receives lands in the other group's
    # queue: there a redelivery of an offset received before, or an order violation, that did not happen
    # (the old pick, broker-a for both: R1's broker-b copy at offset 2 counted as a redelivery of A2)
    assert (f.order_violation_count, f.order_violations, f.redeliveries) == (0, [], 0)
    assert f.unplaced == [
        ("consumer", "T", 1, 0, "R3", "stored in broker-a, broker-b at its place"),
        ("consumer", "T", 0, 99, "R1", "no stored copy at its place"),
        ("consumer", "T", 0, None, "R2", "no queue offset"),
    ]
    v = {x.name: x for x in history_check.verdicts(f)}
    assert v["per-queue receive order"].status == PASS
    assert "3 receive(s) in no queue not judged" in v["per-queue receive order"].detail
    named = v["broker group of receives"]
    assert named.status == WARN and named.detail.startswith("3 receive(s) in no broker group's queue")
    assert "R3 on T q1@0 by consumer (stored in broker-a, broker-b at its place)" in named.detail
    assert "R1 on T q0@99" in named.detail and "R2 on T q0@None" in named.detail
