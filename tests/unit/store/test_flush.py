"""FlushService (SYNC_FLUSH / ASYNC_FLUSH) and the offset a flush reports, on a fake clock.

The worker thread is played by ManualThread: the flush starts (reads the store's positions) when the
service asks for it, and "finishes" (its Deferred fires) only when the test says so, so the test can
append, wait, fail or stop while a flush is in flight, deterministically.
"""

from __future__ import annotations

import errno
import logging
import os

from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.python.failure import Failure

from rmqha.broker.store.flush import FlushService
from rmqha.broker.store.mapped_file import MappedFileQueue
from rmqha.broker.store.message_store import PutStatus

from .conftest import msg

OK, DISK_TIMEOUT = PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT


class ManualThread:
    """run_in_thread: runs fn when finish() is called, then fires the Deferred with its result."""

    def __init__(self):
        self.pending: list[tuple] = []
        self.started = 0

    def __call__(self, fn):
        d = defer.Deferred()
        self.pending.append((fn, d))
        self.started += 1
        return d

    def finish(self):
        fn, d = self.pending.pop(0)
        try:
            result = fn()
        except Exception:
            d.errback(Failure())
        else:
            d.callback(result)


class FakeStore:
    """What FlushService needs of a store. flush() reports the end as it is when the flush runs,
    or raises `error` as a failed fdatasync does."""

    def __init__(self, max_offset=0, min_offset=0, clean=True):
        self.max_offset = max_offset
        self.min_offset = min_offset
        self.was_clean_shutdown = clean
        self.error: OSError | None = None

    def flush(self) -> int:
        if self.error is not None:
            raise self.error
        return self.max_offset


def results(d):
    out = []
    d.addBoth(out.append)
    return out


def service(store, sync=True, timeout_ms=5000, interval_ms=500, clock=None):
    clock = clock or Clock()
    thread = ManualThread()
    fs = FlushService(
        store, clock=clock, run_in_thread=thread, sync=sync, interval_ms=interval_ms, timeout_ms=timeout_ms
    )
    fs.start()
    return fs, thread, clock


# -- the offset a flush reports is the one it synced ----------------------------------------------
def test_queue_flush_returns_the_offset_captured_before_fdatasync(tmp_path, monkeypatch):
    q = MappedFileQueue(str(tmp_path / "log"), 4096)
    q.writable_file().append(b"a" * 100)
    real = os.fdatasync
    appended = []

    def fdatasync_while_the_reactor_appends(fd):
        if not appended:
            q.writable_file().append(b"b" * 50)  # lands while the sync runs: not covered by it
            appended.append(q.max_offset)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync_while_the_reactor_appends)
    assert q.flush() == 100, "the flush must report what it synced, not max_offset read afterwards"
    assert appended == [150]
    assert q.flush() == 150  # the next flush covers the late bytes
    q.close()


def test_appends_during_a_flush_are_not_released_by_it(store_factory, monkeypatch):
    """Real store: a send appended while fdatasync runs waits for the next flush (fails on the old code,
    whose flush reported max_offset read after its fdatasync and released it)."""
    store = store_factory()
    fs, thread, _clock = service(store)
    first = store.put_message(msg(1))
    d1 = results(fs.wait(first.next_offset))
    assert thread.started == 1 and d1 == []
    late = []
    real = os.fdatasync

    def fdatasync_while_the_reactor_appends(fd):
        if not late:
            res = store.put_message(msg(2))
            late.append((res, results(fs.wait(res.next_offset))))
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync_while_the_reactor_appends)
    thread.finish()
    second, d2 = late[0]
    assert d1 == [OK]
    assert d2 == [], "released by a flush that did not cover its bytes"
    assert fs.durable_offset == first.next_offset < second.next_offset
    # Group commit goes on at once for the sends that arrived meanwhile.
    assert len(thread.pending) == 1
    thread.finish()
    assert d2 == [OK] and fs.durable_offset == second.next_offset


# -- group commit, errors, stop, timeouts (fake store) ----------------------------------------------
def test_one_flush_serves_every_waiter_it_covers():
    store = FakeStore()
    fs, thread, _ = service(store)
    outs = []
    for end in (100, 200, 300):
        store.max_offset = end
        outs.append(results(fs.wait(end)))
    assert thread.started == 1  # the first asked; the others joined the queue
    store.max_offset = 300
    thread.finish()
    assert outs == [[OK], [OK], [OK]] and thread.pending == []
    assert results(fs.wait(250)) == [OK]  # already durable: no flush needed
    assert thread.started == 1


def test_fdatasync_error_answers_flush_disk_timeout_and_is_sticky_until_restart(caplog):
    caplog.set_level(logging.WARNING, logger="rmqha.broker.store.flush")
    store = FakeStore()
    fs, thread, clock = service(store, interval_ms=500)
    store.max_offset = 100
    d1 = results(fs.wait(100))
    store.error = OSError(errno.EIO, os.strerror(errno.EIO))
    thread.finish()
    assert d1 == [DISK_TIMEOUT], "a failed fdatasync must not be answered PUT_OK (nor left hanging)"
    assert fs.errors == 1 and fs.durable_offset == 0 and fs.poisoned
    # The next tick retries; it fails again: counted, not logged again.
    store.max_offset = 150
    clock.advance(0.5)
    assert len(thread.pending) == 1
    thread.finish()
    assert fs.errors == 2 and fs.durable_offset == 0
    failures = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(failures) == 1 and "Input/output error" in failures[0].getMessage()
    # The disk answers again, but the kernel may have dropped the pages it failed to write: a good
    # fdatasync now proves nothing about bytes before it, so nothing becomes durable until a restart.
    store.error = None
    store.max_offset = 200
    clock.advance(0.5)
    thread.finish()
    assert fs.durable_offset == 0
    assert any("works again" in r.getMessage() and "restarted" in r.getMessage() for r in caplog.records)
    assert results(fs.wait(200)) == [DISK_TIMEOUT] and thread.pending == []
    assert d1 == [DISK_TIMEOUT]  # answered once


def test_stop_waits_for_the_flush_in_flight_and_answers_the_waiters_left():
    store = FakeStore()
    fs, thread, _ = service(store)
    store.max_offset = 100
    d1 = results(fs.wait(100))
    store.max_offset = 150
    d2 = results(fs.wait(150))  # arrived during the flush; the flush will not cover it
    stopped = results(fs.stop())
    assert stopped == [] and d1 == [] and d2 == [], "stop must wait for the flush in flight"
    store.max_offset = 100  # what the flush in flight captured when it began
    thread.finish()
    assert stopped == [None]
    assert d1 == [OK] and d2 == [DISK_TIMEOUT]
    assert thread.pending == []  # no new flush after stop: the store is about to close
    assert results(fs.wait(100)) == [OK] and results(fs.wait(400)) == [DISK_TIMEOUT]


def test_stop_with_nothing_in_flight_fires_at_once():
    fs, thread, _ = service(FakeStore())
    assert results(fs.stop()) == [None] and thread.pending == []


def test_timeout_counts_from_when_the_send_waited():
    store = FakeStore()
    fs, thread, clock = service(store, timeout_ms=2000, interval_ms=500)
    clock.advance(7.25)
    store.max_offset = 100
    d = results(fs.wait(100))  # the flush hangs: it finishes only after the deadline, below
    clock.advance(1.75)
    assert d == [], "timed out before its deadline (7.25 + 2.0)"
    clock.advance(0.25)
    assert d == [DISK_TIMEOUT]
    thread.finish()  # the slow flush ends after all: no second answer, the offset still moves
    assert d == [DISK_TIMEOUT] and fs.durable_offset == 100


def test_async_flush_ticks_advance_the_durable_offset():
    store = FakeStore()
    fs, thread, clock = service(store, sync=False, interval_ms=500)
    clock.advance(0.5)
    assert thread.pending == []  # nothing to flush
    store.max_offset = 4096
    clock.advance(0.5)
    thread.finish()
    assert fs.durable_offset == 4096
    clock.advance(0.5)
    assert thread.pending == []


def test_durable_offset_at_start():
    assert service(FakeStore(max_offset=900, min_offset=0))[0].durable_offset == 900
    # After a crash the recovered bytes may be only in the page cache: not claimed until flushed.
    assert service(FakeStore(max_offset=900, min_offset=0, clean=False))[0].durable_offset == 0


def test_a_thread_pool_that_refuses_the_flush_does_not_wedge_the_service():
    store = FakeStore(max_offset=0)
    refuse = [True]

    def run_in_thread(fn):
        if refuse[0]:
            raise RuntimeError("thread pool stopped")
        return defer.maybeDeferred(fn)

    fs = FlushService(store, clock=Clock(), run_in_thread=run_in_thread, sync=True)
    store.max_offset = 100
    assert results(fs.wait(100)) == [DISK_TIMEOUT] and fs.errors == 1
    refuse[0] = False
    store.max_offset = 200
    assert results(fs.wait(200)) == [OK] and fs.durable_offset == 200
