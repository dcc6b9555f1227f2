"""Message traces on a DLedger node (issue 26): rmqha/pipeline/trace.py finds the trace topic's records in
dledger-<id>/data, and on an upgraded node those written before the upgrade in commitlog/ too."""

from __future__ import annotations

import pytest
from twisted.internet import task

from rmqha.broker.store import record
from rmqha.broker.store.message_store import MessageStore, PutStatus
from rmqha.pipeline import trace

from .test_dledger_upgrade import CQ, FILE, dledger_store, put, run, until

C, F = "\x01", "\x02"


def pub_body(msg_id: str) -> bytes:
    fields = ["Pub", "1700000000000", "DefaultRegion", "PG", "T", msg_id, "", "", "127.0.0.1:10911"]
    return (C.join(fields + ["12", "3", "0", "", "true"]) + F).encode()


def trace_msg(msg_id: str) -> record.Message:
    return record.Message(topic=trace.TRACE_TOPIC, body=pub_body(msg_id), queue_id=0)


@pytest.mark.fast
def test_trace_records_are_read_from_both_sides_of_the_divide(tmp_path):
    root = tmp_path / "s"
    s = MessageStore(str(root), commitlog_file_size=FILE, cq_file_size=CQ)
    s.start()
    for i in range(3):
        assert s.put_message(trace_msg(f"OLD{i}")).status == PutStatus.PUT_OK
    s.dispatch_pending()
    s.shutdown()

    clock = task.Clock()
    d, c = dledger_store(root, clock)
    run(d, c, clock)
    try:
        until(clock, lambda: d.writable)
        for i in range(2):
            res = d.put_async(trace_msg(f"NEW{i}"))
            if not hasattr(res, "status"):
                got = []
                res.addCallback(got.append)
                until(clock, lambda got=got: bool(got), 5)
                res = got[0]
            assert res.status == PutStatus.PUT_OK
        put(clock, d, 0)  # an ordinary message between them: only the trace topic's queue is read
        until(clock, lambda: len(trace.read_store(root)) >= 5)  # committed entries are dispatched
        ids = [r.msg_id for r in trace.read_store(root)]
    finally:
        d.shutdown()
    assert ids == ["OLD0", "OLD1", "OLD2", "NEW0", "NEW1"]


@pytest.mark.fast
def test_a_store_without_the_trace_topic_reads_nothing(tmp_path):
    clock = task.Clock()
    d, c = dledger_store(tmp_path / "s", clock)
    run(d, c, clock)
    try:
        until(clock, lambda: d.writable)
        put(clock, d, 0)
    finally:
        d.shutdown()
    assert trace.read_store(tmp_path / "s") == []
