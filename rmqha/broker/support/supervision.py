"""Periodic work that cannot die silently: PeriodicService, a supervised task.LoopingCall.

A LoopingCall stops for good the first time its function raises or returns a Deferred that fails, and
says so only through the Deferred that start() returned. PeriodicService keeps that Deferred and, when
the loop dies:

* records the failure in the service's health (last failure time and message, consecutive failures)
  and counts it in `service_failures_total{service=...}`;
* logs it: at ERROR with its traceback the first time that exception type is seen (again when it
  starts a new streak LOG_EVERY_S later), otherwise one WARNING line per LOG_EVERY_S saying how many
  were not logged, and DEBUG in between: never a traceback per tick; the first success after a streak
  at INFO;
* restarts the loop after a back-off: the interval, doubled for each consecutive failure, capped at
  max_backoff (never below the interval); the restarted loop runs the function at once.

A function returning a Deferred is waited for before the next run is scheduled (LoopingCall's own
rule), so a slow run never overlaps the next one; its errback is handled like an exception. Work a
service also runs outside its schedule (a topic change re-registers at once, a new master address
syncs at once) goes through trigger(), which handles failures the same way without touching the loop.

Restart or exit. Every periodic service in this broker today recomputes its work from current state on
each run (re-register, heartbeat, scan, persist what is dirty, copy from the master), so a restart is a
full recovery and they all restart. A service whose failure breaks a promise the broker has made, so
that limping on would be worse than stopping, passes `on_fatal`: its first failure is then logged at
CRITICAL and handed to on_fatal (typically: stop the process loudly) instead of being retried.

Health is kept per service and, when a metrics Registry is given, published through the registry's
ServiceBoard (services(registry)): gauges service_up, service_consecutive_failures,
service_last_success_seconds and service_last_failure_seconds, the counter service_failures_total,
and status() for the "services" key of /status.
"""

from __future__ import annotations

import logging
import weakref

from twisted.internet import defer, task

from rmqha.broker.support.beans import bean_json

log = logging.getLogger("rmqha.broker.supervision")

MAX_BACKOFF_S = 30.0
LOG_EVERY_S = 60.0


class ServiceBoard:
    """The services registered with one metrics Registry, their metrics and their /status view."""

    def __init__(self, registry):
        self.services: dict[str, PeriodicService] = {}
        self.failures = registry.counter(
            "service_failures_total", "failures of a periodic service (each one restarts it after a back-off)"
        )
        registry.gauge(
            "service_up", "1 while a periodic service's loop is running", self._each(lambda s: int(s.running))
        )
        registry.gauge(
            "service_consecutive_failures",
            "failures of a periodic service since its last success",
            self._each(lambda s: s.consecutive_failures),
        )
        registry.gauge(
            "service_last_success_seconds",
            "clock time of a periodic service's last good run; -1 if none",
            self._each(lambda s: -1.0 if s.last_success is None else s.last_success),
        )
        registry.gauge(
            "service_last_failure_seconds",
            "clock time of a periodic service's last failure; -1 if none",
            self._each(lambda s: -1.0 if s.last_failure is None else s.last_failure),
        )

    def _each(self, value):
        return lambda: [({"service": name}, value(s)) for name, s in sorted(self.services.items())]

    def add(self, service: "PeriodicService") -> None:
        old = self.services.get(service.name)
        if old is not None and old is not service and old.started:
            raise ValueError(f"a periodic service named {service.name!r} is already running")
        self.services[service.name] = service

    def status(self) -> dict:
        return {name: s.health() for name, s in sorted(self.services.items())}


_BOARDS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def services(registry) -> ServiceBoard:
    """The ServiceBoard of a metrics Registry (made, and its metrics registered, on first use)."""
    board = _BOARDS.get(registry)
    if board is None:
        board = _BOARDS[registry] = ServiceBoard(registry)
    return board


class PeriodicService:
    """Runs fn() every `interval` seconds on `clock`, and keeps running it when it fails (see above)."""

    def __init__(
        self,
        name: str,
        fn,
        interval: float,
        clock,
        metrics=None,
        *,
        max_backoff: float = MAX_BACKOFF_S,
        on_fatal=None,
        logger: logging.Logger | None = None,
    ):
        self.name = name
        self.fn = fn
        self.interval = interval
        self.clock = clock
        self.max_backoff = max(interval, max_backoff)
        self.on_fatal = on_fatal
        self.log = logger or log
        self.started = False  # between start() and stop(), whether or not the loop is up right now
        self.last_success: float | None = None
        self.last_failure: float | None = None
        self.last_error: str | None = None
        self.consecutive_failures = 0
        self.failures = 0
        self.restarts = 0
        self._loop = task.LoopingCall(self._run)
        self._loop.clock = clock
        self._restart = None
        self._traced: dict = {}  # exception type -> clock time its traceback was last logged
        self._last_logged = 0.0
        self._not_logged = 0
        self._board = services(metrics) if metrics is not None else None
        if self._board is not None:
            self._board.add(self)

    @property
    def running(self) -> bool:
        return self._loop.running

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self, now: bool = False) -> None:
        """Run fn every interval from now on (the first run now, or after one interval)."""
        if self.started:
            return
        self.started = True
        self._start_loop(now)

    def stop(self) -> None:
        """No more runs (a run in flight finishes; its failure is still recorded)."""
        self.started = False
        if self._restart is not None and self._restart.active():
            self._restart.cancel()
        self._restart = None
        if self._loop.running:
            self._loop.stop()

    def trigger(self) -> defer.Deferred:
        """Run fn once now, outside the schedule; a failure is recorded and logged as in the loop (the
        loop itself is not affected). The Deferred fires with None when the run ends, never fails."""
        return defer.maybeDeferred(self.fn).addCallbacks(self._succeeded, self._triggered_run_failed)

    def _start_loop(self, now: bool) -> None:
        self._restart = None
        if self._loop.running or not self.started:
            return
        self._loop.start(self.interval, now=now).addErrback(self._loop_died)

    # -- runs -------------------------------------------------------------------------------------
    def _run(self):
        result = self.fn()
        if isinstance(result, defer.Deferred):
            return result.addCallback(self._succeeded)
        self._succeeded(None)
        return None

    def _succeeded(self, _result) -> None:
        if self.consecutive_failures:
            self.log.info("%s works again after %d consecutive failure(s)", self.name, self.consecutive_failures)
        self.consecutive_failures = 0
        self.last_success = self.clock.seconds()

    def _loop_died(self, failure) -> None:
        self._record(failure)
        if not self.started:
            self._log(failure, "the service was stopping")
            return
        if self.on_fatal is not None:
            self.log.critical(
                "%s failed and cannot recover: %s\n%s", self.name, self.last_error, failure.getTraceback()
            )
            self.started = False
            self.on_fatal(failure)
            return
        delay = min(self.interval * 2 ** min(self.consecutive_failures - 1, 30), self.max_backoff)
        self.restarts += 1
        self._restart = self.clock.callLater(delay, self._start_loop, True)
        self._log(failure, f"restarting in {delay:g}s")

    def _triggered_run_failed(self, failure) -> None:
        self._record(failure)
        self._log(failure, "run outside the schedule; the loop goes on")

    def _record(self, failure) -> None:
        self.failures += 1
        self.consecutive_failures += 1
        self.last_failure = self.clock.seconds()
        self.last_error = f"{failure.type.__name__}: {failure.getErrorMessage()}"
        if self._board is not None:
            self._board.failures.inc(service=self.name)

    def _log(self, failure, what: str) -> None:
        """A traceback for an error type not seen before, or starting a streak and not traced within
        LOG_EVERY_S; otherwise one WARNING line per LOG_EVERY_S, and DEBUG in between."""
        now = self.clock.seconds()
        traced = self._traced.get(failure.type)
        if traced is None or (self.consecutive_failures == 1 and now - traced >= LOG_EVERY_S):
            if len(self._traced) >= 32:
                self._traced.clear()
            self._traced[failure.type] = now
            self.log.error("%s failed: %s; %s\n%s", self.name, self.last_error, what, failure.getTraceback())
        elif now - self._last_logged >= LOG_EVERY_S:
            self.log.warning(
                "%s failed: %s (%d consecutive failure(s), %d not logged since the last line); %s",
                self.name,
                self.last_error,
                self.consecutive_failures,
                self._not_logged,
                what,
            )
        else:
            self._not_logged += 1
            self.log.debug(
                "%s failed again: %s (%d consecutive failure(s)); %s",
                self.name,
                self.last_error,
                self.consecutive_failures,
                what,
            )
            return
        self._last_logged = now
        self._not_logged = 0

    # -- observability ----------------------------------------------------------------------------
    def health(self) -> dict:
        return bean_json(
            self,
            "running intervalSeconds=interval last_success last_failure last_error consecutive_failures failures restarts",
        )
