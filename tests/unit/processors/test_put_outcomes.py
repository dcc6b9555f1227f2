"""BrokerController.put_message: how the flush and replication waits combine into one PutStatus,
and how stop() and /status treat the disk flush. Fake clock, no sockets, no threads."""

from __future__ import annotations

import pytest
from twisted.internet import defer
from twisted.internet.testing import MemoryReactorClock
from twisted.python.failure import Failure

from rmqha.broker.controller import BrokerController
from rmqha.broker.store import record
from rmqha.broker.store.message_store import PutStatus

from .harness import make_config, now_thread

OK = PutStatus.PUT_OK
DISK, SLAVE, NA = PutStatus.FLUSH_DISK_TIMEOUT, PutStatus.FLUSH_SLAVE_TIMEOUT, PutStatus.SLAVE_NOT_AVAILABLE
BOOM = "boom"  # a wait that errbacks


class ManualThread:
    """run_in_thread whose work runs only when finish() is called."""

    def __init__(self):
        self.pending = []

    def __call__(self, fn):
        d = defer.Deferred()
        self.pending.append((fn, d))
        return d

    def finish(self):
        fn, d = self.pending.pop(0)
        try:
            d.callback(fn())
        except Exception:
            d.errback(Failure())


@pytest.fixture
def make(tmp_path):
    made = []

    def factory(run_in_thread=now_thread, **overrides):
        clock = MemoryReactorClock()
        c = BrokerController(
            make_config(tmp_path / f"b{len(made)}", **overrides), clock, clock=clock, run_in_thread=run_in_thread
        )
        c.start(listen=False)
        made.append(c)
        return c

    yield factory
    for c in made:
        if not c.store.closed:
            c.stop()


def message(i=0):
    return record.Message(topic="T", body=b"x%d" % i, queue_id=0, properties={"UNIQ_KEY": f"U{i}"})


def answer(outcome):
    return lambda offset: defer.fail(RuntimeError("wait broke")) if outcome is BOOM else defer.succeed(outcome)


def put(controller):
    out = []
    controller.put_message(message()).addBoth(out.append)
    assert len(out) == 1
    return out[0]


def test_a_replication_wait_that_errbacks_is_not_put_ok(make):
    c = make(brokerRole="SYNC_MASTER")
    c.ha.wait_for_slave = answer(BOOM)
    res = put(c)
    assert res.status is SLAVE, "a failed wait was answered as success"
    assert "replication wait failed" in res.remark and res.stored


def test_a_flush_wait_that_errbacks_is_not_put_ok(make):
    c = make(flushDiskType="SYNC_FLUSH")
    c.flusher.wait = answer(BOOM)
    assert put(c).status is DISK


@pytest.mark.parametrize("stray", [None, "PUT_OKAY", PutStatus.DISK_FULL])
def test_a_wait_answering_no_stored_outcome_counts_as_failed(make, stray):
    c = make(brokerRole="SYNC_MASTER")
    c.ha.wait_for_slave = answer(stray)
    assert put(c).status is SLAVE


@pytest.mark.parametrize(
    "flush,ha,expected",
    [
        (OK, OK, OK),
        (DISK, OK, DISK),
        (OK, SLAVE, SLAVE),
        (DISK, SLAVE, SLAVE),  # RocketMQ 4.9: the replication failure wins over the flush failure
        (DISK, NA, NA),
        (BOOM, OK, DISK),
        (OK, BOOM, SLAVE),
        (BOOM, BOOM, SLAVE),
    ],
)
def test_flush_and_replication_outcomes_combine(make, flush, ha, expected):
    c = make(brokerRole="SYNC_MASTER", flushDiskType="SYNC_FLUSH")
    c.flusher.wait = answer(flush)
    c.ha.wait_for_slave = answer(ha)
    assert put(c).status is expected


def test_stop_closes_the_store_only_after_the_flush_in_flight(make):
    thread = ManualThread()
    c = make(run_in_thread=thread, flushDiskType="SYNC_FLUSH")
    covered, late = [], []
    c.put_message(message(1)).addBoth(covered.append)
    c.put_message(message(2)).addBoth(late.append)
    assert len(thread.pending) == 1
    stopped = []
    c.stop().addBoth(stopped.append)
    assert not c.store.closed and stopped == [], "the store was closed under a running flush"
    thread.finish()  # the flush began before the stop; here it ends
    assert c.store.closed and len(stopped) == 1
    assert [r.status for r in covered + late] == [OK, OK]  # that flush covered both appends
    assert thread.pending == []


def test_stop_answers_sends_the_last_flush_did_not_cover(make):
    thread = ManualThread()
    c = make(run_in_thread=thread, flushDiskType="SYNC_FLUSH")
    first, late = [], []
    c.put_message(message(1)).addBoth(first.append)
    fn, d = thread.pending.pop()
    durable = fn()  # the flush runs (and ends) before the second send appends...
    c.put_message(message(2)).addBoth(late.append)
    c.stop()
    d.callback(durable)  # ...and is reported after it
    assert first[0].status is OK and late[0].status is DISK and late[0].stored
    assert c.store.closed


@pytest.mark.parametrize("flush_type", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_durable_offset_in_status_and_metrics(make, flush_type):
    thread = ManualThread()
    c = make(run_in_thread=thread, flushDiskType=flush_type)
    assert c.status()["durableOffset"] == 0
    c.put_message(message())
    c.clock.advance(0.5)  # ASYNC_FLUSH: the tick flushes; SYNC_FLUSH: the send asked already
    assert len(thread.pending) == 1
    assert c.status()["durableOffset"] == 0  # not before the fdatasync has returned
    thread.finish()
    end = c.store.max_offset
    assert end > 0 and c.status()["durableOffset"] == end
    assert f"rocketmq_store_durable_offset {end}" in c.metrics.render()
