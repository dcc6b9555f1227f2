"""GroupTransfer's deadlines on a fake clock: exact limits, waits that start after t=0, shutdown."""

from twisted.internet.task import Clock

from rmqha.broker.ha.group_transfer import GroupTransfer

OK, TIMEOUT = "PUT_OK", "FLUSH_SLAVE_TIMEOUT"


def results(d):
    out = []
    d.addCallback(out.append)
    return out


def transfer(now=0.0, timeout=5.0):
    clock = Clock()
    clock.advance(now)
    seen = []
    gt = GroupTransfer(clock, timeout, on_outcome=lambda outcome, waited: seen.append((outcome, waited)))
    return clock, gt, seen


def test_a_wait_for_exactly_the_acked_offset_succeeds_at_once():
    clock, gt, seen = transfer(now=3.0)
    gt.notify_transfer(1000)
    assert results(gt.wait(1000)) == [OK]
    assert seen == [(OK, 0.0)] and len(gt) == 0 and clock.getDelayedCalls() == []
    assert results(gt.wait(999)) == [OK]
    pending = results(gt.wait(1001))
    assert pending == [] and len(gt) == 1


def test_nothing_is_acked_at_first():
    clock, gt, _ = transfer()
    assert gt.acked == 0
    r = results(gt.wait(1))
    assert r == [] and len(gt) == 1
    gt.notify_transfer(1)
    assert r == [OK]


def test_an_ack_of_exactly_the_offset_releases_it_and_only_what_it_covers():
    clock, gt, seen = transfer(now=100.0)
    a, b, c = results(gt.wait(10)), results(gt.wait(20)), results(gt.wait(30))
    clock.advance(0.25)
    gt.notify_transfer(20)
    assert (a, b, c) == ([OK], [OK], []) and len(gt) == 1
    assert seen == [(OK, 0.25), (OK, 0.25)]
    gt.notify_transfer(20)  # the same ack again changes nothing
    assert c == [] and len(gt) == 1


def test_a_wait_that_starts_late_times_out_at_its_own_deadline():
    clock, gt, seen = transfer(now=1000.0, timeout=2.0)
    r = results(gt.wait(50))
    [call] = clock.getDelayedCalls()
    assert call.getTime() == 1002.0
    clock.advance(1.999)
    assert r == [] and len(gt) == 1
    clock.advance(0.001)
    assert r == [TIMEOUT] and len(gt) == 0
    assert seen == [(TIMEOUT, 2.0)]
    assert clock.getDelayedCalls() == []


def test_each_waiter_gets_its_own_deadline_and_the_timer_follows_the_head():
    clock, gt, seen = transfer(now=10.0, timeout=3.0)
    first = results(gt.wait(100))
    clock.advance(1.0)
    second = results(gt.wait(200))
    clock.advance(1.0)
    third = results(gt.wait(300))
    gt.notify_transfer(100)  # the head is released; the timer armed for it is still there
    assert first == [OK]
    clock.advance(1.0)  # t=13: the old head's deadline; nobody is due yet
    assert second == [] and third == []
    clock.advance(0.999)
    assert second == []
    clock.advance(0.001)  # t=14: the second's deadline
    assert second == [TIMEOUT] and third == []
    clock.advance(1.0)  # t=15: the third's
    assert third == [TIMEOUT]
    assert seen == [(OK, 2.0), (TIMEOUT, 3.0), (TIMEOUT, 3.0)]
    assert clock.getDelayedCalls() == [] and len(gt) == 0


def test_a_short_timeout_is_kept_exactly():
    clock, gt, _ = transfer(now=7.0, timeout=0.25)
    r = results(gt.wait(1))
    clock.advance(0.2499)
    assert r == []
    clock.advance(0.0001)
    assert r == [TIMEOUT]


def test_waiters_that_expire_together_and_a_later_one():
    clock, gt, seen = transfer(now=5.0, timeout=1.0)
    a, b = results(gt.wait(1)), results(gt.wait(2))
    clock.advance(0.5)
    c = results(gt.wait(3))
    clock.advance(0.5)
    assert (a, b, c) == ([TIMEOUT], [TIMEOUT], [])
    clock.advance(0.5)
    assert c == [TIMEOUT]
    assert [w for _, w in seen] == [1.0, 1.0, 1.0]


def test_shutdown_fails_every_pending_waiter_and_cancels_the_timer():
    clock, gt, seen = transfer(now=50.0, timeout=5.0)
    a = results(gt.wait(10))
    clock.advance(1.0)
    b = results(gt.wait(20))
    clock.advance(2.0)
    assert len(clock.getDelayedCalls()) == 1
    gt.shutdown()
    assert (a, b) == ([TIMEOUT], [TIMEOUT])
    assert seen == [(TIMEOUT, 3.0), (TIMEOUT, 2.0)]
    assert len(gt) == 0 and clock.getDelayedCalls() == []
    # A wait after shutdown arms a new timer and keeps its own deadline.
    c = results(gt.wait(30))
    assert len(clock.getDelayedCalls()) == 1
    clock.advance(5.0)
    assert c == [TIMEOUT]


def test_shutdown_with_nothing_pending_and_twice():
    clock, gt, seen = transfer()
    gt.shutdown()
    gt.shutdown()
    assert seen == [] and clock.getDelayedCalls() == []
    r = results(gt.wait(5))
    gt.notify_transfer(5)
    assert r == [OK]
    gt.shutdown()  # its timer (for the released waiter) is cancelled
    assert clock.getDelayedCalls() == []


def test_without_an_outcome_hook():
    clock = Clock()
    gt = GroupTransfer(clock, 1.0)
    a, b = results(gt.wait(1)), results(gt.wait(2))
    gt.notify_transfer(1)
    clock.advance(1.0)
    assert (a, b) == ([OK], [TIMEOUT])
    c = results(gt.wait(3))
    gt.shutdown()
    assert c == [TIMEOUT]
