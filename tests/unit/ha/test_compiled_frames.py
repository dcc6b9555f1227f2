"""The zero-copy slave's frame loop in C (rmqha/broker/ha/_frames.c via SplicePipe.store_frames) against the
Python loop it replaces (SplicePipe(compiled=False)): the same real stream, through a real socket and
pipe into a real store, cut at random, must give the same bytes on disk, the same counted offsets,
the same session state and the same error, whatever the stream holds (heartbeats, gaps, frames for the
next file, bad sizes, a master behind us).
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import resource
import signal
import socket
import struct
import threading

import pytest

from rmqha.broker.ha import transport
from rmqha.broker.ha.slave_session import SlaveSession
from rmqha.broker.ha.transport import SplicePipe
from rmqha.broker.store.mapped_file import DiskFullError, MappedFile
from rmqha.broker.store.message_store import MessageStore

pytestmark = [
    pytest.mark.skipif(not hasattr(os, "splice"), reason="splice(2) is Linux-only"),
    pytest.mark.skipif(transport._frames is None, reason="rmqha/broker/ha/_frames.c is not built here"),
]

FILE = 4096


def frame(offset, body=b"", size=None):
    return struct.pack(">qi", offset, len(body) if size is None else size) + body


class Counting:
    """The store as the session sees it, recording every count it is told about."""

    def __init__(self, store):
        self._store = store
        self.counted = []

    def __getattr__(self, name):
        return getattr(self._store, name)

    def replica_written(self, offset, size):
        self.counted.append((offset, size))
        self._store.replica_written(offset, size)


def run(tmp_path, name, stream, compiled, seed, preload=b"", max_body=None):
    """Feed `stream` through a socket pair in random cuts; drain after each fill. Returns what a
    slave ends up with: (error, disk bytes, counts, session state, report, files)."""
    store = MessageStore(str(tmp_path / name), commitlog_file_size=FILE)
    store.start()
    if preload:
        store.append_replicated(0, preload)
    counting = Counting(store)
    s = SlaveSession(counting, heartbeat_s=5.0, housekeeping_s=20.0, now=0.0, max_body=max_body)
    s.start(0.0)
    rnd = random.Random(seed)
    a, b = socket.socketpair()
    b.setblocking(False)
    pipe = SplicePipe(size=1 << 16, compiled=compiled)
    assert (pipe.store_frames is not None) == compiled
    error = None
    try:
        sent = 0
        while sent < len(stream) and error is None:
            n = rnd.choice([1, 5, 11, 12, 13, 100, 4096, 20000, 70000])
            a.sendall(stream[sent : sent + n])
            sent += n
            while error is None:
                try:
                    pipe.fill(b.fileno())
                except BlockingIOError:
                    break
                try:
                    s.drain(pipe, 1.0)
                except Exception as e:  # noqa: BLE001 - the type and text are compared
                    error = (type(e).__name__, str(e))
        files = [(f.base, f.wrote) for f in store.commitlog.queue.files]
        data = store.commitlog.read(store.min_offset, store.max_offset - store.min_offset) if files else b""
        state = (
            s.bytes_received,
            s.had_data,
            s.last_data,
            s.master_behind,
            s._header,
            s._body_left,
            s._body_size,
            s._next,
            s._pos,
        )
        return error, data, counting.counted, state, s.report_if_moved(1.0), files, store.max_offset
    finally:
        pipe.close()
        a.close()
        b.close()
        store.shutdown()


def stream_of(rnd, start, bodies, extra=()):
    """Frames of the given body sizes from `start`, with heartbeats between some of them."""
    out, at = b"", start
    for n in bodies:
        out += frame(at, os.urandom(n))
        at += n
        if rnd.random() < 0.2:
            out += frame(at)  # a heartbeat at the current offset
    for e in extra:
        out += e
    return out, at


def same(tmp_path, stream, seed, **kw):
    fast = run(tmp_path, "fast", stream, True, seed, **kw)
    slow = run(tmp_path, "slow", stream, False, seed, **kw)
    assert fast == slow
    return fast


@pytest.mark.parametrize("seed", range(12))
def test_bodies_across_files_and_heartbeats_match_the_python_loop(tmp_path, seed):
    rnd = random.Random(seed)
    sizes = []
    left = 5 * FILE
    while left > 0:  # bodies never cross a file end: the master cuts them there
        room = FILE - (5 * FILE - left) % FILE
        n = min(room, rnd.choice([1, 7, 100, 1000, 2048, 4096]))
        sizes.append(n)
        left -= n
    stream, end = stream_of(rnd, 0, sizes)
    error, data, counted, state, rep, files, max_offset = same(tmp_path, stream, seed)
    assert error is None and max_offset == end == 5 * FILE
    assert rep == struct.pack(">q", end) and len(files) == 5


@pytest.mark.parametrize("seed", range(6))
def test_a_gap_is_the_same_offset_mismatch_after_the_same_stored_prefix(tmp_path, seed):
    rnd = random.Random(seed)
    good, at = stream_of(rnd, 0, [1000, 1000, 500])
    stream = good + frame(at + 8, b"x" * 10) + frame(at + 18, b"y" * 10)
    error, data, counted, *_ = same(tmp_path, stream, seed)
    assert error[0] == "OffsetMismatch" and len(data) == at


@pytest.mark.parametrize(
    "bad",
    [
        frame(2500, b"", size=-1),  # a negative size
        frame(2500, b"z" * 300, size=300),  # above max_body (256 here)
        frame(-5, b"z" * 3),  # a negative offset
        frame(2500, b"z" * 1700),  # would cross the file's end (4096)
    ],
)
def test_bad_or_foreign_frames_are_judged_by_the_python_rules(tmp_path, bad):
    rnd = random.Random(3)
    good, at = stream_of(rnd, 0, [250, 250, 250, 250, 250, 250, 250, 250, 250, 250])
    assert at == 2500
    error, data, *_ = same(tmp_path, good + bad + frame(9999, b"after"), 1, max_body=256)
    assert error is not None and len(data) == 2500


@pytest.mark.parametrize("seed", range(3))
def test_one_byte_over_max_body_or_past_the_file_end_is_refused_as_in_python(tmp_path, seed):
    good = frame(0, b"a" * 256) + frame(256, b"b" * 256)
    error, data, *_ = same(tmp_path, good + frame(512, b"z" * 257) + frame(769, b"after"), seed, max_body=256)
    assert error[0] == "ProtocolError" and len(data) == 512
    error, data, *_ = same(tmp_path, frame(0, b"a" * 4000) + frame(4000, b"b" * 97) + frame(4097, b"c"), seed)
    assert error[0] == "StoreError" and len(data) == 4000


def test_the_last_file_below_2_to_the_63(tmp_path):
    """Its end (2^63) is past an int64: the C loop must not fail on it, only hand its edge back; a frame
    ending past the largest long is a protocol error on both paths (it could never be reported)."""
    top = (1 << 63) - FILE
    error, data, counted, *_ = same(tmp_path, frame(top, b"a" * 100) + frame(top + 100, b"b" * 100), 1)
    assert error is None and counted == [(top, 200)]
    edge = frame(top, b"a" * (FILE - 2)) + frame(top + FILE - 2, b"bc")
    error, data, counted, *_ = same(tmp_path, edge, 2)
    assert error[0] == "ProtocolError" and "largest offset" in error[1] and counted == [(top, FILE - 2)]


def _through(compiled, tmp_path, steps):
    """Drain each step (bytes, or a callable on the store) through one pipe; what happened at each."""
    store = MessageStore(str(tmp_path / ("fast" if compiled else "slow")), commitlog_file_size=FILE)
    store.start()
    s = SlaveSession(store, heartbeat_s=5.0, housekeeping_s=20.0, now=0.0)
    s.start(0.0)
    a, b = socket.socketpair()
    b.setblocking(False)
    pipe = SplicePipe(size=1 << 16, compiled=compiled)
    out = []
    try:
        for step in steps:
            if callable(step):
                step(store)
                continue
            a.sendall(step)
            pipe.fill(b.fileno())
            try:
                s.drain(pipe, 1.0)
                out.append("ok")
            except Exception as e:  # noqa: BLE001 - compared
                out.append(f"{type(e).__name__}: {str(e).replace(str(store.root), '')}")
        return out, s.bytes_received, s._pos, s._body_left, pipe.available, store.max_offset
    finally:
        pipe.close()
        a.close()
        b.close()
        try:
            store.shutdown()
        except ValueError:  # a step closed a file under the store: its flush meets fd -1
            pass


@pytest.mark.parametrize("then", [frame(FILE), frame(FILE, b"b" * 10)], ids=["heartbeat", "next-file"])
def test_a_closed_current_file_is_met_as_the_python_loop_meets_it(tmp_path, then):
    """The last file closed between reads (a truncate, a shutdown): nothing goes into it any more, so a
    heartbeat or a frame for the next file must go on exactly as in Python."""
    steps = [frame(0, b"a" * FILE), lambda store: store.commitlog.queue.files[-1].close(), then]
    assert _through(True, tmp_path, steps) == _through(False, tmp_path, steps)


@contextlib.contextmanager
def _file_size_limit(nbytes):
    """Writes past `nbytes` fail with EFBIG (SIGXFSZ ignored) in this process, until the block ends."""
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    old = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, old[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old)
        signal.signal(signal.SIGXFSZ, old_handler)


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signal handlers: main thread")
def test_a_write_refused_mid_body_names_the_bytes_of_that_body_only(tmp_path):
    """In this process (so coverage sees the compiled loop's error path): the pipe holds the refused
    body's rest and a frame after it; the error names only the body's 1010 bytes, as splice_in does."""
    limited = {}

    def limit(store):
        limited["cm"] = _file_size_limit(1000)
        limited["cm"].__enter__()

    def unlimit(store):
        limited.pop("cm").__exit__(None, None, None)

    steps = [frame(0, b"a" * 10), limit, frame(10, b"b" * 2000) + frame(2010, b"c" * 5), unlimit]
    try:
        fast = _through(True, tmp_path, steps)
        slow = _through(False, tmp_path, steps)
    finally:
        if "cm" in limited:
            unlimit(None)
    assert fast == slow
    assert "File too large writing 1010 bytes at 1000" in fast[0][1]


def test_a_log_that_moved_between_reads_is_judged_before_anything_is_written(tmp_path):
    """The store's end moved since the last read (here another append): the next frame continues what
    the session last wrote but not the log, so both loops refuse it before writing over the log."""
    steps = [frame(0, b"a" * 10), lambda store: store.append_replicated(10, b"z" * 10), frame(10, b"b" * 10)]
    fast = _through(True, tmp_path, steps)
    assert fast == _through(False, tmp_path, steps)
    assert fast[0][1].startswith("OffsetMismatch") and fast[-1] == 20


def test_a_frame_for_the_next_file_goes_there(tmp_path):
    stream = frame(0, b"a" * FILE) + frame(FILE, b"b" * 100) + frame(FILE + 100, b"c" * 100)
    error, data, counted, state, rep, files, _ = same(tmp_path, stream, 4)
    assert error is None and files == [(0, FILE), (FILE, 200)]


def test_a_resuming_slave_and_a_master_behind_it(tmp_path):
    """Heartbeats below our offset before any data: MASTER_BEHIND, nothing stored, in both loops."""
    error, data, counted, state, *_ = same(tmp_path, frame(500) + frame(700), 2, preload=b"p" * 1000)
    assert error is None and state[3] == (1000, 700) and counted == []
    rnd = random.Random(9)
    stream, end = stream_of(rnd, 1000, [1000, 2096, 300])
    error, data, counted, state, rep, files, _ = same(tmp_path, stream, 9, preload=b"p" * 1000)
    assert error is None and files == [(0, FILE), (FILE, 300)]


def test_splice_frames_refuses_inconsistent_state_and_returns_errno():
    with pytest.raises(ValueError):
        transport._frames.splice_frames(0, -1, 1, 0, 0, 0, 0, FILE, 10)
    with pytest.raises(ValueError):
        transport._frames.splice_frames(0, 10, 1, 0, 5, 4, 0, FILE, 10)  # more left than the body holds
    r, w = os.pipe()
    try:
        os.write(w, b"x" * 10)
        out = transport._frames.splice_frames(r, 10, 987654, 0, 10, 10, 10, FILE, 10)
        assert out[-1] == errno.EBADF and out[0] == 10 and out[5] == 0  # nothing taken from the pipe
    finally:
        os.close(r)
        os.close(w)


def test_splice_errors_are_raised_as_splice_in_raises(tmp_path):
    f = MappedFile(str(tmp_path), 0, FILE, create=True, preallocate=True)
    try:
        with pytest.raises(DiskFullError, match="No space left on device writing 7 bytes at 10"):
            f.raise_splice_error(errno.ENOSPC, 10, 7)
        with pytest.raises(DiskFullError, match="short write at 10"):
            f.raise_splice_error(-1, 10, 7)
        with pytest.raises(OSError) as e:
            f.raise_splice_error(errno.EIO, 10, 7)
        assert e.value.errno == errno.EIO and not isinstance(e.value, DiskFullError)
    finally:
        f.close()


def test_the_broker_config_switches_the_compiled_loop(tmp_path):
    """haSlaveCompiledFrames=false reaches the pipe: the Python loop, for before/after measurements."""
    from rmqha.broker.config.properties import BrokerConfig

    assert BrokerConfig.from_properties({}).haSlaveCompiledFrames is True
    assert BrokerConfig.from_properties({"haSlaveCompiledFrames": "false"}).haSlaveCompiledFrames is False
    c = transport.HAConnector("127.0.0.1", 1, None, 1, None, None)
    assert c.compiled_frames is True
