"""Target: the HA port's wire (rmqha/broker/ha/wire.py) and the IO-free sessions on both ends.

Input: a mode byte, a few parameters, cut points, then the bytes the peer sends:
  0: ReportReader (master side): None or the last complete 8-byte report so far
  1: FrameReader (slave side): frames or ProtocolError; the same frames however the bytes are cut
  2: MasterSession fed a fake slave's reports over a fake commit log (any max/min offset), with the
     writer asked for frames and heartbeats between reads
  3: SlaveSession fed a fake master's frames into a fake store
  4: SlaveSession.drain (the zero-copy slave) fed the same way from a source that moves bodies in
     short pieces, into fake files with the commit log's rules: the same stored bytes and the same
     outcome however the stream is cut, and the same bytes as on_data when neither fails
  5: SlaveSession.drain over a real pipe into real (memfd) files, with the compiled frame loop
     (rmqha/broker/ha/_frames.c) and without: the same stored bytes, offsets and outcome, cut anywhere
Contract: the documented outcomes only -- a value, or ProtocolError / OffsetMismatch / StoreError,
after which the connection is closed (the harness stops feeding) -- and offsets that stay in range.
"""

from __future__ import annotations

import os

from rmqha.broker.ha import transport, wire
from rmqha.broker.ha.master_session import Ack, MasterSession, SessionState
from rmqha.broker.ha.slave_session import OffsetMismatch, SlaveSession
from rmqha.broker.ha.wire import HEADER, HEADER_SIZE, REPORT, REPORT_SIZE, FrameReader, ProtocolError, ReportReader
from rmqha.broker.store.mapped_file import StoreError
from fuzz.provider import Input, pieces, read_cuts

FILE_SIZES = (64, 4096, 1 << 20, 1 << 30)


class FakeCommitLog:
    """What MasterSession reads: offsets, the last file's start, and bytes (zeros) in range."""

    def __init__(self, min_offset: int, max_offset: int, file_size: int):
        self.min_offset, self.max_offset, self.file_size = min_offset, max_offset, file_size

    def last_file_start(self) -> int:
        return max(0, self.max_offset - self.max_offset % self.file_size)

    def read(self, offset: int, max_bytes: int) -> bytes:
        if offset < self.min_offset or offset >= self.max_offset:
            return b""
        file_end = offset - offset % self.file_size + self.file_size
        return bytes(min(max_bytes, self.max_offset - offset, file_end - offset))


class FakeStore:
    """What SlaveSession writes to: append_replicated with the commit log's continuity rule."""

    def __init__(self, max_offset: int):
        self.max_offset = max_offset
        self.has_files = max_offset > 0

    def append_replicated(self, offset: int, buffers) -> None:
        if self.has_files and offset != self.max_offset:
            raise StoreError(f"replicated bytes at {offset} do not continue the commit log at {self.max_offset}")
        self.max_offset = offset + sum(len(b) for b in buffers)
        self.has_files = True


def reports(inp: Input) -> None:
    cuts = read_cuts(inp)
    stream = inp.rest()
    reader, seen, last = ReportReader(), 0, None
    for chunk in pieces(stream, cuts):
        got = reader.feed(chunk)
        seen += len(chunk)
        complete = seen - seen % REPORT_SIZE
        if got is not None:
            last = got
            assert got == REPORT.unpack_from(stream, complete - REPORT_SIZE)[0], "not the last complete report"
    if len(stream) >= REPORT_SIZE:
        assert last == REPORT.unpack_from(stream, len(stream) - len(stream) % REPORT_SIZE - REPORT_SIZE)[0]


def frames(inp: Input) -> None:
    max_body = inp.pick((wire.MAX_FRAME_BODY, 0, 1, 16, 4096))
    cuts = read_cuts(inp)
    stream = inp.rest()

    def run(chunks):
        reader, out = FrameReader(max_body), []
        for chunk in chunks:
            try:
                got = reader.feed(chunk)
            except ProtocolError:
                return out, True
            for f in got:
                assert 0 <= len(f.body) <= max_body and f.offset >= 0, (f.offset, len(f.body))
                out.append((f.offset, bytes(f.body)))
            assert reader.pending < HEADER_SIZE + max_body, f"{reader.pending} bytes pending"
        return out, False

    split, split_failed = run(pieces(stream, cuts))
    whole, whole_failed = run([stream])
    assert split_failed == whole_failed, "cutting the stream changed whether it is a protocol error"
    if not whole_failed:
        assert split == whole, "cutting the stream changed the frames"


def master(inp: Input) -> None:
    file_size = inp.pick(FILE_SIZES)
    max_offset = inp.uint(5)
    min_offset = inp.uint(5) % (max_offset + 1)
    batch = 1 + inp.uint(2)
    log = FakeCommitLog(min_offset, max_offset, file_size)
    now = 1000.0
    s = MasterSession(log, "fuzz:1", batch_size=batch, heartbeat_s=5.0, housekeeping_s=20.0, now=now)
    cuts = read_cuts(inp)
    for chunk in pieces(inp.rest(), cuts):
        now += 0.5
        try:
            ack = s.on_data(chunk, now)
        except ProtocolError:
            return  # the master closes the connection
        if ack is not None:
            assert isinstance(ack, Ack) and 0 <= ack.offset <= log.max_offset, ack
            assert s.is_slave and s.state in (SessionState.STREAMING, SessionState.OFFSET_UNAVAILABLE)
        out = s.next_frames(now, 4 * batch)
        assert len(out) % 2 == 0
        for head, body in zip(out[::2], out[1::2]):
            offset, size = HEADER.unpack(head)
            assert size == len(body) and 0 < size <= batch and min_offset <= offset < log.max_offset, (offset, size)
        beat = s.heartbeat(now + 6)
        assert beat is None or (len(beat) == HEADER_SIZE and HEADER.unpack(beat)[1] == 0)
        s.expired(now)
        assert s.lag() >= 0


def slave(inp: Input) -> None:
    store = FakeStore(inp.uint(5) if inp.flag() else 0)
    max_body = inp.pick((None, 16, 4096))
    s = SlaveSession(store, heartbeat_s=5.0, housekeeping_s=20.0, now=0.0, max_body=max_body)
    first = s.start(0.0)
    assert REPORT.unpack(first)[0] == store.max_offset
    cuts = read_cuts(inp)
    now = 0.0
    for chunk in pieces(inp.rest(), cuts):
        now += 0.5
        try:
            report = s.on_data(chunk, now)
        except (ProtocolError, OffsetMismatch, StoreError):
            return  # the slave closes the connection and reconnects from its own max offset
        assert report is None or REPORT.unpack(report)[0] == store.max_offset
        assert s.reported == store.max_offset
        s.heartbeat(now)
        s.expired(now)


class _FakeFile:
    def __init__(self, size: int):
        self.size = size
        self.data = bytearray(size)

    def write_at(self, pos: int, data) -> None:
        assert 0 <= pos and pos + len(data) <= self.size, (pos, len(data), self.size)
        self.data[pos : pos + len(data)] = data


class FakeFiles:
    """What drain (and, through the same rules, on_data) writes to: fixed-size files, a log that
    must continue at its max offset, starts at a file's start when empty, and never crosses a file."""

    file_kind = _FakeFile  # MemFiles: _MemFile, a real descriptor

    def __init__(self, max_offset: int, file_size: int):
        self.file_size = file_size
        self.max_offset = max_offset - max_offset % file_size
        self.has_files = self.max_offset > 0
        self.content = bytearray()  # what was counted, from `start`
        self.start = self.max_offset
        self.files: dict[int, _FakeFile] = {}

    def replica_target(self, offset: int, size: int):
        pos = offset % self.file_size
        if (self.has_files and offset != self.max_offset) or (not self.has_files and pos):
            raise StoreError(f"replicated bytes at {offset} do not continue the log at {self.max_offset}")
        if pos + size > self.file_size:
            raise StoreError(f"{size} bytes at {offset} cross the end of a file")
        if not self.has_files:
            self.start = self.max_offset = offset
            self.has_files = True
        base = offset - pos
        if base not in self.files:
            self.files[base] = self.file_kind(self.file_size)
        return self.files[base], pos

    def replica_written(self, offset: int, size: int) -> None:
        f, pos = self.replica_target(offset, size)
        self.content += f.data[pos : pos + size]
        self.max_offset = offset + size

    def append_replicated(self, offset: int, buffers) -> None:
        for b in buffers:
            f, pos = self.replica_target(offset, len(b))
            f.write_at(pos, b)
            self.replica_written(offset, len(b))
            offset += len(b)


class _Source:
    """A pipe's view for drain: headers via take, bodies moved by store in pieces of at most `step`."""

    def __init__(self, data: bytes, step: int):
        self.data, self.pos, self.step = data, 0, step

    @property
    def available(self) -> int:
        return len(self.data) - self.pos

    def take(self, n: int) -> bytes:
        out = self.data[self.pos : self.pos + min(n, self.available)]
        self.pos += len(out)
        return out

    def store(self, file, pos: int, n: int) -> int:
        n = min(n, self.available, self.step)
        assert n > 0
        file.write_at(pos, self.data[self.pos : self.pos + n])
        self.pos += n
        return n


def zero_copy_slave(inp: Input) -> None:
    start = inp.uint(3) if inp.flag() else 0
    file_size = inp.pick((64, 4096, 1 << 16))
    max_body = inp.pick((None, 16, 4096))
    step = 1 + inp.uint(2)
    cuts = read_cuts(inp)
    stream = inp.rest()

    def run(chunks, zero_copy: bool):
        store = FakeFiles(start, file_size)
        s = SlaveSession(store, heartbeat_s=5.0, housekeeping_s=20.0, now=0.0, max_body=max_body)
        s.start(0.0)
        error = None
        for chunk in chunks:
            try:
                if zero_copy:
                    src = _Source(bytes(chunk), step)
                    s.drain(src, 1.0)
                    assert src.available == 0, "drain left bytes behind without an error"
                    report = s.report_if_moved(1.0)
                else:
                    report = s.on_data(chunk, 1.0)
            except (ProtocolError, OffsetMismatch, StoreError) as e:
                error = type(e)
                break  # the slave closes the connection and reconnects from its own max offset
            assert report is None or REPORT.unpack(report)[0] == store.max_offset
            assert s.reported == store.max_offset
        assert store.max_offset == store.start + len(store.content)
        return error, store.max_offset, bytes(store.content)

    split = run(pieces(stream, cuts), True)
    whole = run([stream], True)
    assert split == whole, "cutting the stream changed what the zero-copy slave stored or how it failed"
    copied = run([stream], False)
    if whole[0] is None and copied[0] is None:
        # An empty slave's log starts (at the first frame's file) when drain places that frame's
        # first bytes, and when on_data appends the whole frame: only the counted bytes must agree.
        assert whole[2] == copied[2], "drain and on_data stored different bytes"
        assert not whole[2] or whole[1] == copied[1], "drain and on_data ended at different offsets"


class _MemFile(_FakeFile):
    """A real file (memfd) for the compiled loop, which splices into a descriptor."""

    def __init__(self, size: int):
        self.size = size
        self.path = "memfd:fuzz"
        self.fd = os.memfd_create("fuzz-commitlog")
        os.ftruncate(self.fd, size)

    @property
    def data(self) -> bytes:
        return os.pread(self.fd, self.size, 0)

    def write_at(self, pos: int, data) -> None:
        assert 0 <= pos and pos + len(data) <= self.size, (pos, len(data), self.size)
        os.pwrite(self.fd, data, pos)

    def splice_in(self, pipe_fd: int, pos: int, n: int) -> int:
        assert 0 <= pos and pos + n <= self.size, (pos, n, self.size)
        return os.splice(pipe_fd, self.fd, n, offset_dst=pos)

    def raise_splice_error(self, err: int, pos: int, n: int) -> None:
        raise OSError(err, os.strerror(err))


class MemFiles(FakeFiles):
    """FakeFiles over real descriptors, recording every count it is told about."""

    file_kind = _MemFile

    def __init__(self, max_offset: int, file_size: int):
        super().__init__(max_offset, file_size)
        self.counted = []

    def replica_written(self, offset: int, size: int) -> None:
        self.counted.append((offset, size))
        super().replica_written(offset, size)

    def close(self) -> None:
        for f in self.files.values():
            os.close(f.fd)


def compiled_slave(inp: Input) -> None:
    if not hasattr(os, "splice") or transport._frames is None:
        return
    # anywhere in the (int64) offset space, up to its last file
    start = (inp.uint(8) >> inp.byte() % 64) & wire.MAX_OFFSET if inp.flag() else 0
    file_size = inp.pick((64, 4096, 1 << 16))
    max_body = inp.pick((None, 16, 4096))
    cuts = read_cuts(inp)
    stream = inp.rest()

    def run(compiled: bool):
        store = MemFiles(start, file_size)
        s = SlaveSession(store, heartbeat_s=5.0, housekeeping_s=20.0, now=0.0, max_body=max_body)
        s.start(0.0)
        pipe = transport.SplicePipe(size=1 << 16, compiled=compiled)
        error = None
        try:
            for chunk in pieces(stream, cuts):
                for at in range(0, len(chunk), pipe.capacity):
                    part = chunk[at : at + pipe.capacity]
                    os.write(pipe.w, part)
                    pipe.available += len(part)
                    try:
                        s.drain(pipe, 1.0)
                    except (ProtocolError, OffsetMismatch, StoreError) as e:
                        error = (type(e), str(e))
                        break
                    assert pipe.available == 0, "drain left bytes behind without an error"
                    report = s.report_if_moved(1.0)
                    assert report is None or REPORT.unpack(report)[0] == store.max_offset
                if error:
                    break
            return (
                error,
                store.max_offset,
                bytes(store.content),
                s.bytes_received,
                s.had_data,
                s.master_behind,
                store.counted,
                s._next,
                s._body_left,
            )
        finally:
            pipe.close()
            store.close()

    assert run(True) == run(False), "the compiled frame loop and the Python loop stored or failed differently"


MODES = (reports, frames, master, slave, zero_copy_slave, compiled_slave)


def TestOneInput(data: bytes) -> None:
    inp = Input(data)
    MODES[inp.byte() % len(MODES)](inp)
