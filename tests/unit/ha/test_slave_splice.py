"""The zero-copy slave (SlaveSession.drain + SplicePipe): headers into Python, bodies spliced to disk.

drain() must make exactly the decisions on_data makes (offsets, MASTER_BEHIND, limits, one report
per read), whatever way the stream is cut; SplicePipe must move the real bytes socket -> pipe -> file.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import struct

import pytest

from rmqha.controls import planted
from rmqha.broker.ha.slave_session import OffsetMismatch, SlaveSession
from rmqha.broker.ha.transport import SplicePipe
from rmqha.broker.ha.wire import ProtocolError
from rmqha.broker.store.mapped_file import StoreError
from rmqha.broker.store.message_store import MessageStore

pytestmark = pytest.mark.skipif(not hasattr(os, "splice"), reason="splice(2) is Linux-only")


def frame(offset, body=b""):
    return struct.pack(">qi", offset, len(body)) + body


def report(offset):
    return struct.pack(">q", offset)


class FakeFile:
    def __init__(self):
        self.data = bytearray(1 << 16)
        self.size = len(self.data)

    def write_at(self, pos, data):
        self.data[pos : pos + len(data)] = data


class FakeStore:
    """replica_target/replica_written over one in-memory file; records what counted and when."""

    def __init__(self, max_offset=0):
        self.max_offset = max_offset
        self.file = FakeFile()
        self.base = max_offset
        self.counted = []

    def replica_target(self, offset, size):
        if self.max_offset and offset != self.max_offset:
            raise StoreError(f"{offset} does not continue {self.max_offset}")
        if not self.counted and self.max_offset == 0:
            self.base = offset
        return self.file, offset - self.base

    def replica_written(self, offset, size):
        self.counted.append((offset, size))
        self.max_offset = offset + size

    def stored(self):
        return bytes(self.file.data[: self.max_offset - self.base])

    def append_replicated(self, offset, chunks):  # on_data's way in, with the same rules
        for c in chunks:
            f, pos = self.replica_target(offset, len(c))
            f.write_at(pos, bytes(c))
            self.replica_written(offset, len(c))
            offset += len(c)


class BytesSource:
    """A source over bytes that moves at most `step` bytes per store call, as a short splice does."""

    def __init__(self, data, step=1 << 30):
        self.data, self.pos, self.step = bytes(data), 0, step

    @property
    def available(self):
        return len(self.data) - self.pos

    def take(self, n):
        out = self.data[self.pos : self.pos + min(n, self.available)]
        self.pos += len(out)
        return out

    def store(self, file, pos, n):
        n = min(n, self.available, self.step)
        file.write_at(pos, self.data[self.pos : self.pos + n])
        self.pos += n
        return n


@contextlib.contextmanager
def real_store(tmp_path, file_size=1 << 20):
    store = MessageStore(str(tmp_path / "slave"), commitlog_file_size=file_size)
    store.start()
    try:
        yield store
    finally:
        store.shutdown()


def session(store, **kw):
    s = SlaveSession(store, heartbeat_s=5.0, housekeeping_s=20.0, now=0.0, **kw)
    s.start(0.0)
    return s


def test_a_read_of_several_drains_stores_whole_bodies_and_reports_once():
    store = FakeStore(100)
    s = session(store)
    data = frame(100, b"abc") + frame(103) + frame(103, b"defg")
    s.drain(BytesSource(data[:14]), 1.0)  # the first frame's body is only partly there
    assert store.counted == [] and s.last_data is None
    s.drain(BytesSource(data[14:], step=2), 2.0)
    assert store.counted == [(100, 7)] and store.stored() == b"abcdefg"  # counted once per drain
    assert s.report_if_moved(2.0) == report(107)
    assert (s.bytes_received, s.last_read, s.last_data, s.reported) == (len(data), 2.0, 2.0, 107)
    assert s.report_if_moved(2.5) is None  # nothing new


@pytest.mark.parametrize("seed", range(6))
def test_any_cut_of_the_stream_stores_the_same_bytes(seed):
    rnd = random.Random(seed)
    bodies = [os.urandom(rnd.randrange(0, 3000)) for _ in range(40)]
    stream, at = b"", 4096
    for b in bodies:
        stream += frame(at, b)
        at += len(b)
    store = FakeStore(0)
    s = session(store)
    pos = 0
    while pos < len(stream):
        n = rnd.randrange(1, 5000)
        s.drain(BytesSource(stream[pos : pos + n], step=rnd.randrange(1, 4000)), 1.0)
        pos += n
    assert store.stored() == b"".join(bodies) and store.max_offset == at
    assert sum(size for _, size in store.counted) == at - 4096
    assert all(o2 == o1 + n1 for (o1, n1), (o2, _) in zip(store.counted, store.counted[1:]))
    assert s.bytes_received == len(stream)


def test_an_empty_slave_takes_the_first_frame_wherever_it_starts():
    store = FakeStore(0)
    s = session(store)
    s.drain(BytesSource(frame(4096, b"xy")), 1.0)
    assert store.counted == [(4096, 2)] and s.report_if_moved(1.0) == report(4098)


def test_a_mismatch_raises_after_storing_what_matched_before_it():
    store = FakeStore(100)
    s = session(store)
    with pytest.raises(OffsetMismatch) as e:
        s.drain(BytesSource(frame(100, b"ab") + frame(999, b"zz")), 1.0)
    assert (e.value.slave_offset, e.value.master_offset) == (102, 999)
    assert store.counted == [(100, 2)]


def test_heartbeats_below_our_offset_are_master_behind_until_the_connection_brought_data():
    store = FakeStore(100)
    s = session(store)
    s.drain(BytesSource(frame(40)), 1.0)
    assert s.master_behind == (100, 40) and store.counted == []
    assert s.report_if_moved(1.0) is None
    s.drain(BytesSource(frame(100)), 2.0)  # at our offset: an ordinary heartbeat
    s.drain(BytesSource(frame(100, b"abc")), 3.0)
    assert s.report_if_moved(3.0) == report(103)
    # A master that sent data is not behind us: a lower heartbeat after it, in any later read, is a gap.
    with pytest.raises(OffsetMismatch):
        s.drain(BytesSource(frame(50)), 4.0)
    copy = session(FakeStore(100))
    copy.on_data(frame(100, b"abc"), 1.0)
    with pytest.raises(OffsetMismatch):
        copy.on_data(frame(50), 2.0)  # on_data decides the same, however the reads were cut


def test_frame_limits_and_store_refusals_are_errors():
    with pytest.raises(ProtocolError):
        session(FakeStore(0), max_body=4).drain(BytesSource(frame(0, b"12345")), 1.0)
    with pytest.raises(ProtocolError):
        session(FakeStore(0)).drain(BytesSource(struct.pack(">qi", -1, 0)), 1.0)

    class Refusing(FakeStore):
        def replica_target(self, offset, size):
            raise StoreError("disk full")

    with pytest.raises(StoreError):
        session(Refusing(100)).drain(BytesSource(frame(100, b"a")), 1.0)


def test_the_pipe_moves_socket_bytes_into_the_commit_log(tmp_path):
    """Real splice: a master's frames through a socket pair, cut anywhere, into a real store."""
    store = MessageStore(str(tmp_path / "slave"), commitlog_file_size=1 << 20)
    store.start()
    s = session(store)
    rnd = random.Random(7)
    body = os.urandom(300_000)
    stream, pos = b"", 0
    while pos < len(body):
        n = min(32768, len(body) - pos)
        stream += frame(pos, body[pos : pos + n]) + frame(pos + n)  # a heartbeat after each frame
        pos += n
    a, b = socket.socketpair()
    b.setblocking(False)
    pipe = SplicePipe(size=1 << 16)
    try:
        sent = 0
        while sent < len(stream):
            n = rnd.randrange(1, 70_000)
            a.sendall(stream[sent : sent + n])
            sent += n
            while True:
                try:
                    pipe.fill(b.fileno())
                except BlockingIOError:
                    break
                s.drain(pipe, 1.0)
        assert pipe.available == 0
        assert s.report_if_moved(1.0) == report(len(body))
        assert store.max_offset == len(body) and store.commitlog.read(0, len(body)) == body
        a.close()
        assert pipe.fill(b.fileno()) == 0  # end of stream
    finally:
        pipe.close()
        b.close()
        store.shutdown()


def test_a_body_that_would_cross_the_end_of_a_file_is_refused(tmp_path):
    with real_store(tmp_path, 4096) as store:
        with pytest.raises(StoreError, match="cannot start a log"):
            store.replica_target(100, 10)  # an empty slave starts at a file's start, as the master sends
        f, pos = store.replica_target(0, 4096)
        assert (f.base, pos) == (0, 0)
        with pytest.raises(StoreError, match="crosses the end"):
            store.replica_target(0, 4097)
        store.append_replicated(0, b"x" * 10)
        with pytest.raises(StoreError, match="do not continue"):
            store.replica_target(11, 1)
        with pytest.raises(StoreError, match="do not fit"):
            f.splice_in(0, 4090, 10)


def test_corrupt_replication_flips_a_bit_of_each_spliced_chunk(tmp_path):
    """A chunk is what one drain counts at once (on_data: what one read appends at once)."""
    with real_store(tmp_path) as store:
        bad = planted.CorruptingStore(store)
        s = session(bad)
        s.drain(BytesSource(frame(0, b"\x00" * 10) + frame(10, b"\x00" * 4)), 1.0)
        s.drain(BytesSource(frame(14, b"\x00" * 4)), 1.0)
        assert store.commitlog.read(0, 18) == b"\x00" * 7 + b"\x01" + b"\x00" * 8 + b"\x01\x00"
        assert store.max_offset == 18


def test_bodies_fill_a_file_and_go_on_in_the_next(tmp_path):
    """Consecutive bodies go straight after each other until a file is full, then into a new file."""
    with real_store(tmp_path, 4096) as store:
        s = session(store)
        bodies = [os.urandom(1024) for _ in range(10)]
        stream = b"".join(frame(i * 1024, b) for i, b in enumerate(bodies))
        s.drain(BytesSource(stream[:5000]), 1.0)
        s.drain(BytesSource(stream[5000:]), 1.0)
        assert s.report_if_moved(1.0) == report(10 * 1024)
        assert [f.base for f in store.commitlog.queue.files] == [0, 4096, 8192]
        assert b"".join(store.commitlog.read(base, 4096) for base in (0, 4096, 8192)) == b"".join(bodies)
        # a body that would cross the end of a file is refused, whatever was cached
        with pytest.raises(StoreError, match="crosses the end"):
            s.drain(BytesSource(frame(10 * 1024, os.urandom(3000))), 2.0)
        assert store.max_offset == 10 * 1024


def test_nothing_counts_after_a_bad_frame_even_what_the_same_read_still_holds(tmp_path):
    """The transport may hand the protocol more of the pipe after it aborted the link; none of it is stored."""
    from twisted.internet.task import Clock
    from twisted.internet.testing import MemoryReactor, StringTransport

    from rmqha.broker.ha.slave import HAClient, SlaveHAProtocol

    class Transport(StringTransport):
        aborted = 0

        def abortConnection(self):
            self.aborted += 1

    with real_store(tmp_path) as store:
        store.append_replicated(0, b"x" * 100)
        client = HAClient(store, "127.0.0.1:1", clock=Clock(), reactor=MemoryReactor())
        proto, t = SlaveHAProtocol(client), Transport()
        proto.makeConnection(t)
        proto.pipeReceived(BytesSource(frame(100, b"ab") + frame(7, b"zz") + frame(102, b"cd")))
        assert t.aborted == 1 and store.max_offset == 102  # what came before the gap is kept
        proto.pipeReceived(BytesSource(frame(102, b"cd")))
        proto.readDone()
        assert t.aborted == 1 and store.max_offset == 102
        assert client.status()["lastMismatch"] == {"slave": 102, "master": 7}
        assert t.value() == report(100)  # the report on connect only: nothing after the failure


def test_a_write_refused_for_size_is_a_disk_full_error_and_moves_nothing(tmp_path):
    """EFBIG (as ENOSPC and EDQUOT) from the pipe -> file splice is DiskFullError, as from pwritev.
    RLIMIT_FSIZE makes the kernel refuse the write; run in a child so the limit stays there."""
    code = f"""
import os, resource, signal, sys
sys.path.insert(0, {os.getcwd()!r})
from rmqha.broker.store.mapped_file import DiskFullError, MappedFile
from rmqha.broker.ha.transport import SplicePipe
f = MappedFile({str(tmp_path)!r}, 0, 1 << 16, create=True, preallocate=True)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192))
p = SplicePipe()
os.write(p.w, b"x" * 100); p.available = 100
assert p.store(f, 4096, 100) == 100          # below the limit: moved
os.write(p.w, b"y" * 100); p.available = 100
try:
    p.store(f, 16384, 100)
except DiskFullError as e:
    print("full:", e)
assert f.wrote == 0 and p.available == 100   # nothing counted, the bytes are still in the pipe
"""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "full:" in out.stdout and "File too large" in out.stdout and "at 16384" in out.stdout


@pytest.mark.parametrize("cut", range(1, 12))
def test_a_header_cut_anywhere_is_completed_by_the_next_drain(cut):
    """The next drain takes only what the header still lacks, then the body and the frames after it."""
    store = FakeStore(100)
    s = session(store)
    stream = frame(100, b"abc") + frame(103, b"defg")
    s.drain(BytesSource(stream[:cut]), 1.0)
    assert store.counted == [] and s.bytes_received == cut
    s.drain(BytesSource(stream[cut:]), 2.0)
    assert store.stored() == b"abcdefg" and s.bytes_received == len(stream)


def test_a_heartbeat_never_starts_an_empty_slaves_log(tmp_path):
    with real_store(tmp_path, 4096) as store:
        s = session(store)
        s.drain(BytesSource(frame(8192)), 1.0)  # where the master would start: nothing to store yet
        assert store.commitlog.queue.files == [] and s.report_if_moved(1.0) is None
        s.drain(BytesSource(frame(8192, b"xy")), 2.0)
        assert [f.base for f in store.commitlog.queue.files] == [8192] and s.report_if_moved(2.0) == report(8194)


def test_a_slave_resuming_inside_a_file_fills_it_and_goes_on_in_the_next(tmp_path):
    """The first body of a connection may land mid-file; where that file ends is still where it ends."""
    with real_store(tmp_path, 4096) as store:
        store.append_replicated(0, b"p" * 1000)  # what an earlier connection stored
        s = session(store)
        bodies = [os.urandom(n) for n in (1000, 1000, 1096, 500)]  # 1000..4096, then the next file
        stream, at = b"", 1000
        for b in bodies:
            stream += frame(at, b)
            at += len(b)
        s.drain(BytesSource(stream), 1.0)
        assert s.report_if_moved(1.0) == report(at)
        assert [f.base for f in store.commitlog.queue.files] == [0, 4096]
        assert store.commitlog.read(1000, 3096) + store.commitlog.read(4096, 500) == b"".join(bodies)


def test_drain_measures_the_receive_rate_as_on_data_does():
    s = session(FakeStore(0))
    s.drain(BytesSource(frame(0, bytes(988))), 0.05)
    s.drain(BytesSource(frame(988)), 0.1)
    assert s.recent_rate == 1000 / 0.1
