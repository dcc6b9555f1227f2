"""rmqha/broker/support/log_limit.py: one line per key per interval, exact at the interval, with the count left out."""

import logging

from rmqha.broker.support import log_limit
from rmqha.broker.support.log_limit import LogLimiter


class Clock:
    def __init__(self, t=1000.0):
        self.t = t

    def __call__(self):
        return self.t


def limiter(caplog, interval=60.0, t=1000.0):
    clock = Clock(t)
    caplog.set_level(logging.INFO, logger="test.limit")
    return LogLimiter(logging.getLogger("test.limit"), interval, now=clock), clock


def lines(caplog):
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "test.limit"]


def test_once_per_interval_exactly_with_the_count_left_out(caplog):
    lim, clock = limiter(caplog)
    assert lim.log(logging.WARNING, ("bad", 10), "bad request %s", "a") is True
    clock.t += 59.999
    assert lim.log(logging.WARNING, ("bad", 10), "bad request %s", "b") is False
    assert lim.log(logging.WARNING, ("bad", 10), "bad request %s", "c") is False
    clock.t += 0.001  # exactly one interval after the last line
    assert lim.log(logging.WARNING, ("bad", 10), "bad request %s", "d") is True
    clock.t += 60.0
    assert lim.log(logging.WARNING, ("bad", 10), "bad request %s", "e") is True
    assert lines(caplog) == [
        (logging.WARNING, "bad request a"),
        (logging.WARNING, "bad request d (2 more like this in the last 60 s not logged)"),
        (logging.WARNING, "bad request e"),
    ]
    assert lim.total == {"bad": 5}


def test_keys_are_independent_and_totals_count_by_kind(caplog):
    lim, clock = limiter(caplog, interval=10.0)
    assert lim.log(logging.INFO, ("bad", 1), "one")
    assert lim.log(logging.INFO, ("bad", 2), "two")
    assert not lim.log(logging.INFO, ("bad", 1), "one again")
    assert lim.log(logging.ERROR, "plain", "a string key")
    assert lim.log(logging.ERROR, (), "an empty tuple key")
    assert lim.total == {"bad": 3, "plain": 1, "()": 1}
    assert [m for _, m in lines(caplog)] == ["one", "two", "a string key", "an empty tuple key"]


def test_a_clock_starting_at_zero_still_logs_the_first_time(caplog):
    lim, clock = limiter(caplog, t=0.0)
    assert lim.log(logging.INFO, "k", "first") and not lim.log(logging.INFO, "k", "second")


def test_the_oldest_half_of_the_keys_is_forgotten_past_max_keys(caplog):
    lim, clock = limiter(caplog)
    n = log_limit.MAX_KEYS
    assert n == 1024
    for i in range(n):
        assert lim.log(logging.INFO, ("k", i), "x %d", i)
    assert not lim.log(logging.INFO, ("k", 0), "x %d", 0)  # suppressed: counted for key 0
    assert not lim.log(logging.INFO, ("k", n - 1), "x %d", n - 1)  # and for key n-1
    assert lim.log(logging.INFO, ("k", n), "x %d", n)  # one more key: keys 0..511 are forgotten
    assert len(lim._last) == n // 2 + 1
    caplog.clear()
    assert lim.log(logging.INFO, ("k", 0), "x %d", 0)  # forgotten with its count: logged at once, plainly
    assert lines(caplog) == [(logging.INFO, "x 0")]
    assert not lim.log(logging.INFO, ("k", n // 2), "x")  # remembered
    assert lim._suppressed == {("k", n - 1): 1, ("k", n // 2): 1}


def test_the_default_interval_is_a_minute(caplog):
    lim = LogLimiter(logging.getLogger("test.limit"))
    assert lim.interval == 60.0


def test_exc_info_is_passed_on(caplog):
    lim, _ = limiter(caplog)
    try:
        raise ValueError("boom")
    except ValueError as e:
        lim.log(logging.ERROR, "e", "failed", exc_info=e)
    [rec] = [r for r in caplog.records if r.name == "test.limit"]
    assert rec.exc_info[1].args == ("boom",)
