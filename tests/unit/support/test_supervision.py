"""PeriodicService: a LoopingCall that keeps running when its function fails, on a fake clock."""

import json
import logging

from twisted.internet import defer, task

from rmqha.broker.support import supervision
from rmqha.broker.observability.metrics import Registry, metrics_site
from rmqha.broker.support.supervision import PeriodicService


class Job:
    """A periodic function whose runs fail as told: `plan` holds one outcome per run, then successes."""

    def __init__(self, plan=()):
        self.plan = list(plan)
        self.runs = []
        self.pending: list[defer.Deferred] = []

    def __call__(self):
        self.runs.append(len(self.runs))
        outcome = self.plan.pop(0) if self.plan else "ok"
        if outcome == "raise":
            raise OSError(5, "Input/output error")
        if outcome == "errback":
            return defer.fail(RuntimeError("the far side said no"))
        if outcome == "slow":
            d = defer.Deferred()
            self.pending.append(d)
            return d
        return None


def make(plan=(), interval=1.0, **kw):
    clock, reg, job = task.Clock(), Registry(), Job(plan)
    svc = PeriodicService("job", job, interval, clock, reg, **kw)
    return svc, job, clock, reg


def failures_metric(reg, name="job"):
    return reg.metrics["rocketmq_service_failures_total"].get(service=name)


def test_a_function_that_raises_on_its_first_tick_keeps_being_called():
    # A bare LoopingCall stops for good here: its second run never comes.
    svc, job, clock, reg = make(["raise"])
    svc.start()
    clock.advance(1)  # run 1 raises: restart after one interval
    assert len(job.runs) == 1 and not svc.running
    clock.advance(1)  # the restarted loop runs at once
    assert len(job.runs) == 2 and svc.running
    clock.pump([1, 1, 1])
    assert len(job.runs) == 5
    assert failures_metric(reg) == 1
    h = svc.health()
    assert h["lastFailure"] == 1.0 and h["lastError"] == "OSError: [Errno 5] Input/output error"
    assert h["lastSuccess"] == 5.0 and h["consecutiveFailures"] == 0 and h["running"] and h["restarts"] == 1


def test_back_off_doubles_up_to_the_cap_and_resets_on_success():
    svc, job, clock, reg = make(["raise"] * 5, max_backoff=4.0)
    svc.start()
    times = []
    for _ in range(40):
        clock.advance(0.5)
        if len(job.runs) > len(times):
            times.append(clock.seconds())
    # failures at 1, then restarts after 1, 2, 4, 4 (capped); the 6th run succeeds, then every second
    assert times[:8] == [1.0, 2.0, 4.0, 8.0, 12.0, 16.0, 17.0, 18.0]
    assert failures_metric(reg) == 5 and svc.consecutive_failures == 0


def test_a_long_streak_keeps_the_capped_back_off():
    svc, job, clock, reg = make(["raise"] * 2000, interval=0.5, max_backoff=0.5)
    svc.start()
    clock.pump([0.5] * 2100)
    assert failures_metric(reg) == 2000 and svc.running and svc.consecutive_failures == 0


def test_a_deferred_that_errbacks_is_handled_like_an_exception():
    svc, job, clock, reg = make(["errback", "errback"])
    svc.start()
    clock.advance(1)
    assert failures_metric(reg) == 1 and svc.health()["lastError"] == "RuntimeError: the far side said no"
    assert svc.consecutive_failures == 1
    clock.advance(1)
    assert failures_metric(reg) == 2 and svc.consecutive_failures == 2
    clock.advance(2)
    assert svc.consecutive_failures == 0 and svc.last_success == 4.0 and svc.running


def test_a_slow_run_is_not_overlapped_and_its_late_failure_is_counted():
    svc, job, clock, reg = make(["slow"])
    svc.start()
    clock.advance(1)
    clock.advance(5)  # still in flight: no second run
    assert len(job.runs) == 1
    job.pending[0].errback(ValueError("late"))
    assert failures_metric(reg) == 1 and svc.last_failure == 6.0
    clock.advance(1)
    assert len(job.runs) == 2 and svc.running


def test_stop_stops_it_and_a_pending_restart():
    svc, job, clock, reg = make()
    svc.start()
    clock.pump([1, 1])
    svc.stop()
    clock.pump([1] * 10)
    assert len(job.runs) == 2 and not svc.running
    svc2, job2, clock2, _ = make(["raise"])
    svc2.start()
    clock2.advance(1)
    svc2.stop()  # while waiting to restart
    clock2.advance(10)
    assert len(job2.runs) == 1 and not svc2.running and not clock2.getDelayedCalls()


def test_a_failure_after_stop_is_recorded_but_not_restarted():
    svc, job, clock, reg = make(["slow"])
    svc.start()
    clock.advance(1)
    svc.stop()
    job.pending[0].errback(ValueError("late"))
    clock.advance(10)
    assert failures_metric(reg) == 1 and len(job.runs) == 1 and not svc.running


def test_trigger_runs_now_and_handles_failures_without_touching_the_loop():
    svc, job, clock, reg = make(["ok", "raise"])
    svc.start()
    svc.trigger()
    assert len(job.runs) == 1 and svc.last_success == 0.0
    result = []
    svc.trigger().addBoth(result.append)
    assert result == [None] and failures_metric(reg) == 1 and svc.running
    clock.advance(1)
    assert len(job.runs) == 3 and svc.consecutive_failures == 0


def test_logs_one_traceback_then_a_line_a_minute(caplog):
    svc, job, clock, reg = make(["raise"] * 1000, max_backoff=1.0)
    caplog.set_level(logging.DEBUG, logger="rmqha.broker.support.supervision")
    svc.start()
    clock.advance(1)
    for _ in range(150):
        clock.advance(1)
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(errors) == 1 and "Traceback" in errors[0].getMessage() and "OSError" in errors[0].getMessage()
    assert len(warnings) == 2 and "Traceback" not in warnings[0].getMessage()
    assert "consecutive failure(s)" in warnings[0].getMessage()
    assert failures_metric(reg) == 151


def test_on_fatal_gets_the_failure_instead_of_a_restart(caplog):
    fatal = []
    svc, job, clock, reg = make(["raise"], on_fatal=fatal.append)
    svc.start()
    clock.advance(1)
    clock.advance(10)
    assert len(job.runs) == 1 and len(fatal) == 1 and fatal[0].check(OSError)
    assert any(r.levelno == logging.CRITICAL for r in caplog.records)


def test_health_in_metrics_and_status():
    reg = Registry()
    clock = task.Clock()
    ok = PeriodicService("good", lambda: None, 1.0, clock, reg)
    bad = PeriodicService("bad", Job(["raise"] * 3), 1.0, clock, reg)
    ok.start()
    bad.start()
    clock.advance(1)
    text = reg.render()
    assert 'rocketmq_service_failures_total{service="bad"} 1' in text
    assert 'rocketmq_service_up{service="good"} 1' in text and 'rocketmq_service_up{service="bad"} 0' in text
    assert 'rocketmq_service_consecutive_failures{service="bad"} 1' in text
    assert 'rocketmq_service_last_success_seconds{service="good"} 1.0' in text
    assert 'rocketmq_service_last_success_seconds{service="bad"} -1.0' in text
    status = supervision.services(reg).status()
    assert set(status) == {"good", "bad"}
    assert status["bad"]["lastError"].startswith("OSError") and status["bad"]["lastFailure"] == 1.0
    # and it is JSON for /status
    site = metrics_site(reg, lambda: {"services": supervision.services(reg).status()})
    assert site.resource.children[b"status"].fn()
    assert json.loads(site.resource.children[b"status"].fn())["services"]["good"]["running"] is True


def test_two_running_services_cannot_share_a_name():
    reg, clock = Registry(), task.Clock()
    PeriodicService("x", lambda: None, 1.0, clock, reg).start()
    try:
        PeriodicService("x", lambda: None, 1.0, clock, reg)
    except ValueError as e:
        assert "already running" in str(e)
    else:
        raise AssertionError("a second running service named x was accepted")
