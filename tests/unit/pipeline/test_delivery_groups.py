"""A send's broker group is the group that acknowledged it: its SEND_OK try's copy, not an arbitrary stored
copy of any try. A first try that timed out on broker-a, which stored it anyway, and a retry acknowledged
by broker-b make the send broker-b's: its loss and its place in ackedOnGroupByFault go to broker-b's faults.
Copies of one UNIQ_KEY in two groups (a client's internal retry) are told apart by the queue offset or the
offsetMsgId of the answer; when nothing tells them apart the send has no group and the verdicts name it."""

import pytest
import json
import os

from rmqha.broker.store.record import Message
from rmqha.runs.history import HistoryWriter
from rmqha.pipeline import delivery, delivery_table
from rmqha.pipeline.verdict import FAIL, WARN

from .test_delivery import GROUP, T0, _deliver, _histories

A_FAULT, B_FAULT = "#1 power-loss broker-a-0", "#2 kill-master broker-b-0"


def _msg_id(phys: int) -> str:
    """An offsetMsgId (store host 127.0.0.1:10911, then the commit-log offset)."""
    return f"7F000001{10911:08X}{phys:016X}"


def _two_groups(rb):
    """broker-a-0 and broker-b-0 (10 and 6 plain sends), the extra copies the cases need, the histories and
    two faults (one per group) after every acknowledgement; every send received but x1.
    x1  try 1 stored on broker-a, answered ERROR (a timeout); try 2 (a new UNIQ_KEY) SEND_OK on broker-b
    y1  one try, one UNIQ_KEY stored in both groups, the answer names no copy: ambiguous
    z1  as y1, the answer's queue offset is broker-b's copy's
    w1  as y1, the answer's offsetMsgId is broker-b's copy's (no queue offset)
    d1  a delayed send acknowledged by broker-b, parked there only (not due): broker-b's"""
    placed = {}
    for broker, n, extra in (
        ("broker-a", 10, [("x1", "X1-1", 0), ("y1", "Y1", 0), ("z1", "Z1", 0), ("w1", "W1", 1)]),
        ("broker-b", 6, [("x1", "X1-2", 0), ("y1", "Y1", 0), ("z1", "Z1", 0), ("w1", "W1", 1)]),
    ):
        rb.master(name=f"{broker}-0", broker=broker, n=n)
        for sid, uk, qid in extra:
            placed[(broker, sid)] = rb.put("T", uk, sid, 100, qid)
            rb.sent.pop()
        if broker == "broker-b":
            m = Message(topic="T", body=os.urandom(100), properties={"UNIQ_KEY": "D1", "KEYS": "d1", "DELAY": "3"})
            assert rb.store.put_message(m).status == "PUT_OK" and m.topic == "SCHEDULE_TOPIC_XXXX"
        rb.close()
    # the cases rely on these places: z1's queue offsets differ, w1's do not matter
    assert placed[("broker-a", "z1")].queue_offset != placed[("broker-b", "z1")].queue_offset
    p = HistoryWriter(os.path.join(rb.root, "history", "producer.jsonl"))
    t = T0

    def send(sid, *answers):
        nonlocal t
        for attempt, ans in enumerate(answers, 1):
            base = {
                "client": "producer",
                "group": "PG",
                "topic": "T",
                "send_id": sid,
                "attempt": attempt,
                "start_ms": t,
            }
            p.append(base | {"op": "invoke", "end_ms": t})
            p.append(base | {"op": "send", "end_ms": t + 2} | ans)
            t += 3

    for uk, sid, r in rb.sent:
        send(sid, {"uniq_key": uk, "status": "SEND_OK", "queue_offset": r.queue_offset})
    send(
        "x1",
        {"status": "ERROR", "error": "RemotingTimeoutException"},
        {"uniq_key": "X1-2", "status": "SEND_OK", "queue_offset": placed[("broker-b", "x1")].queue_offset},
    )
    send("y1", {"uniq_key": "Y1", "status": "SEND_OK"})
    send("z1", {"uniq_key": "Z1", "status": "SEND_OK", "queue_offset": placed[("broker-b", "z1")].queue_offset})
    send(
        "w1", {"uniq_key": "W1", "status": "SEND_OK", "offset_msg_id": _msg_id(placed[("broker-b", "w1")].wrote_offset)}
    )
    send("d1", {"uniq_key": "D1", "status": "SEND_OK"})
    p.close()
    c = HistoryWriter(os.path.join(rb.root, "history", "consumer.jsonl"))
    c.append({"client": "consumer", "op": "subscribe", "group": GROUP, "topic": "T", "start_ms": T0, "end_ms": T0})
    got = [(uk, sid) for uk, sid, _ in rb.sent] + [("Y1", "y1"), ("Z1", "z1"), ("W1", "w1")]
    for uk, sid in got:
        t += 1
        c.append(
            {
                "client": "consumer",
                "op": "receive",
                "group": GROUP,
                "topic": "T",
                "send_id": sid,
                "uniq_key": uk,
                "status": "RECEIVED",
                "start_ms": t,
                "end_ms": t,
            }
        )
    c.close()
    os.makedirs(os.path.join(rb.root, "faults"))
    with open(os.path.join(rb.root, "faults", "f.jsonl"), "w") as fh:
        for fid, kind, node, group in (
            (1, "power-loss", "broker-a-0", "broker-a"),
            (2, "kill-master", "broker-b-0", "broker-b"),
        ):
            for op, ts in (("inject", t + 100), ("heal", t + 200)):
                fh.write(
                    json.dumps(
                        {
                            "op": op,
                            "id": fid,
                            "kind": kind,
                            "target": node,
                            "group": group,
                            "role": "master",
                            "link": None,
                            "start_ms": ts,
                            "ts_ms": ts,
                        }
                    )
                    + "\n"
                )


def test_a_send_is_the_group_that_acknowledged_it_and_an_ambiguous_one_is_named(spark, run_builder):
    _two_groups(run_builder)
    v, rep, summary, out = _deliver(spark, run_builder.root)
    d = summary["delivery"][GROUP]
    # 16 plain + x1, y1, z1, w1 + d1 (parked); x1 never received
    assert (d["acknowledged"], d["delivered"], d["lost"], d["parked"], d["ambiguousGroup"]) == (21, 19, 1, 1, 1), d
    # broker-a acknowledged its 10 plain sends only: x1 (its first try's copy is there) is broker-b's, with
    # z1 and w1 (their answers name broker-b's copy) and d1 (parked there); y1 is in neither
    assert summary["ackedOnGroupByFault"] == {A_FAULT: 10, B_FAULT: 6 + 4}
    # x1's loss goes to broker-b's fault; broker-a's power loss is blamed for nothing
    assert summary["deliveryByFault"] == {B_FAULT: {delivery.ID_LOST: 1}}
    with open(os.path.join(out, delivery.DETAIL_FILE)) as fh:
        items = [json.loads(x) for x in fh]
    assert [(x["send_id"], x["faults"]) for x in items] == [("x1", [B_FAULT])]
    assert v[(delivery.ID_LOST, GROUP)].status == FAIL
    amb = v[(delivery.ID_AMBIGUOUS, GROUP)]
    assert amb.status == WARN and amb.detail.startswith("1 acknowledged send(s)")
    assert "y1 (broker-a, broker-b)" in amb.detail and "z1" not in amb.detail and "w1" not in amb.detail
    # the per-send and per-try tables the matrix slices (delivery_table.py) place every send and try the same way
    sends = {x["send_id"]: x for x in _jsonl(out, delivery_table.SENDS_FILE)}
    assert len(sends) == 21 and {x["state"] for x in sends.values()} == {"acked"}
    assert [(sid, sends[sid]["group"], sends[sid]["ambiguous"]) for sid in ("x1", "y1", "z1", "w1", "d1")] == [
        ("x1", "broker-b", None),
        ("y1", None, ["broker-a", "broker-b"]),
        ("z1", "broker-b", None),
        ("w1", "broker-b", None),
        ("d1", "broker-b", None),
    ]
    assert sum(x["group"] == "broker-a" for x in sends.values()) == 10
    assert sends["d1"]["parked"] and not sends["x1"]["parked"] and all(x["stored"] for x in sends.values())
    assert (sends["x1"]["owed"], sends["x1"]["received"]) == ([GROUP], [])
    assert (sends["y1"]["received"], sends["y1"]["duplicates"]) == ([GROUP], 0)
    tries = [(x["send_id"], x["status"], x["group"]) for x in _jsonl(out, delivery_table.TRIES_FILE)]
    assert [t for t in tries if t[0] in ("x1", "y1", "z1", "w1")] == [
        ("w1", "SEND_OK", "broker-b"),
        ("x1", "ERROR", None),  # a timeout names no broker
        ("x1", "SEND_OK", "broker-b"),
        ("y1", "SEND_OK", None),
        ("z1", "SEND_OK", "broker-b"),
    ]
    assert len(tries) == 22 and sum(t[2] == "broker-a" for t in tries) == 10
    # the matrix reads the same sends and answers in the histories as the tables hold: its cross-check
    # (rmqha/matrix/table.py _exclude_unaudited) names nothing on a real audit's tables
    from pathlib import Path

    from rmqha.matrix import table

    os.makedirs(os.path.join(run_builder.root, "report"), exist_ok=True)
    for name in (delivery_table.SENDS_FILE, delivery_table.TRIES_FILE):
        with open(os.path.join(out, name)) as src, open(os.path.join(run_builder.root, "report", name), "w") as dst:
            dst.write(src.read())
    t = table.run_table(Path(run_builder.root))
    assert t.audited and len(t.sends) == 21 and len(t.tries) == 22
    assert [x for x in t.excluded if x[0] in ("unaudited-send", "table-only-send", "answers-differ")] == []


def _jsonl(out, name):
    with open(os.path.join(out, name)) as fh:
        return [json.loads(x) for x in fh]


@pytest.mark.audit_scenarios
def test_a_lost_send_in_no_group_is_backlog_when_some_groups_queue_never_reached_it(spark, run_builder):
    """v1 is stored in both groups' queue 0 and its answer names no copy: no group. The group's consumers
    passed broker-a's copy by but never reached broker-b's: the loss is backlog, not a consumer passing it
    by in whichever group's queue comes first by name."""
    rb = run_builder
    for broker, before in (("broker-a", 4), ("broker-b", 0)):
        rb.master(name=f"{broker}-0", broker=broker, n=before)
        rb.put("T", "V1", "v1", 100, 0)
        rb.sent.pop()
        for i in range(4 - before):
            rb.put("T", f"{broker}-L{i}", f"{broker}-l{i}", 100, 0)
        rb.close()
    _histories(
        rb, range(len(rb.sent)), extra_sends=[{"op": "send", "send_id": "v1", "uniq_key": "V1", "status": "SEND_OK"}]
    )
    os.makedirs(os.path.join(rb.root, "chaos"))
    with open(os.path.join(rb.root, "chaos", "ending-1.json"), "w") as fh:
        # broker-a-0's copy is at queue 0 offset 1 (after master()'s first put), before the committed 5: passed
        # by; broker-b-0's at offset 0, where the group's consumers committed nothing: never reached
        json.dump(
            {"drain": {GROUP: {"drained": True, "committed": {"broker-a-0": {"0": 5}, "broker-b-0": {"0": 0}}}}}, fh
        )
    v, rep, summary, _ = _deliver(spark, rb.root)
    d = summary["delivery"][GROUP]
    assert (d["lost"], d["ambiguousGroup"], d["lostByReason"]) == (1, 1, {"backlog": 1}), d
    assert "v1 (broker-a, broker-b)" in v[(delivery.ID_AMBIGUOUS, GROUP)].detail
