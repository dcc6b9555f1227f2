"""SYNC_MASTER outcomes (docs/ha-protocol.md §5) on a fake clock: PUT_OK, FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE."""

from twisted.internet.task import Clock

from rmqha.broker.ha.group_transfer import GroupTransfer

from .harness import Cluster, put


def results(d):
    out = []
    d.addCallback(out.append)
    return out


def test_ack_before_deadline_succeeds_at_once():
    clock = Clock()
    gt = GroupTransfer(clock, 5.0)
    r = results(gt.wait(100))
    clock.advance(4.99)
    assert r == []
    gt.notify_transfer(100)
    assert r == ["PUT_OK"]


def test_deadline_not_a_wakeup_count():
    """#1244: many unrelated wake-ups must not use up the wait; only the deadline ends it."""
    clock = Clock()
    gt = GroupTransfer(clock, 5.0)
    r = results(gt.wait(1000))
    for i in range(1, 50):  # acks that do not cover the offset
        clock.advance(0.1)
        gt.notify_transfer(i)
    assert r == []
    clock.advance(0.09)
    gt.notify_transfer(1000)
    assert r == ["PUT_OK"]


def test_timeout_exactly_at_deadline_and_order_kept():
    clock = Clock()
    gt = GroupTransfer(clock, 2.0)
    a = results(gt.wait(10))
    clock.advance(1.0)
    b = results(gt.wait(20))
    clock.advance(0.999)
    assert a == [] and b == []
    clock.advance(0.001)
    assert a == ["FLUSH_SLAVE_TIMEOUT"] and b == []
    gt.notify_transfer(20)
    assert b == ["PUT_OK"]


def test_already_acked_offset_succeeds_immediately():
    clock = Clock()
    gt = GroupTransfer(clock, 2.0)
    gt.notify_transfer(500)
    assert results(gt.wait(400)) == ["PUT_OK"]


def test_sync_master_end_to_end_outcomes(tmp_path):
    c = Cluster(tmp_path, sync_wait_ms=3000, fallbehind_max=20_000)
    # No slave connected: SLAVE_NOT_AVAILABLE at once.
    res = put(c.master, 1)[0]
    assert results(c.ha.wait_for_slave(res.next_offset)) == ["SLAVE_NOT_AVAILABLE"]
    c.connect()
    # Slave connected and keeping up: PUT_OK as soon as its ack arrives.
    res = put(c.master, 1, start=1)[0]
    r = results(c.ha.wait_for_slave(res.next_offset))
    c.flush()
    assert r == ["PUT_OK"]
    # Slave stalls (reports never arrive): FLUSH_SLAVE_TIMEOUT after the wait, data still on master.
    c.pump.clientIO.write = lambda data: None
    res = put(c.master, 1, start=2)[0]
    r = results(c.ha.wait_for_slave(res.next_offset))
    c.advance(2.9)
    assert r == []
    c.advance(0.2)
    assert r == ["FLUSH_SLAVE_TIMEOUT"]
    assert c.master.max_offset == res.next_offset
    # It falls further behind than haSlaveFallbehindMax: SLAVE_NOT_AVAILABLE without waiting.
    res = put(c.master, 50, start=3)[-1]
    assert c.master.max_offset - c.ha.push2slave_max_offset >= 20_000
    assert results(c.ha.wait_for_slave(res.next_offset)) == ["SLAVE_NOT_AVAILABLE"]
    outcomes = c.ha.metrics.render()
    assert 'sync_wait_outcomes_total{outcome="FLUSH_SLAVE_TIMEOUT"} 1' in outcomes
    assert 'sync_wait_outcomes_total{outcome="SLAVE_NOT_AVAILABLE"} 2' in outcomes
    assert 'rocketmq_sync_wait_seconds_count{outcome="PUT_OK"} 1' in outcomes
    c.close()
