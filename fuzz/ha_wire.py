"""Target: the HA port's wire (broker/ha/wire.py) and the IO-free sessions on both ends.

Input: a mode byte, a few parameters, cut points, then the bytes the peer sends:
  0: ReportReader (master side): None or the last complete 8-byte report so far
  1: FrameReader (slave side): frames or ProtocolError; the same frames however the bytes are cut
  2: MasterSession fed a fake slave's reports over a fake commit log (any max/min offset), with the
     writer asked for frames and heartbeats between reads
  3: SlaveSession fed a fake master's frames into a fake store
Contract: the documented outcomes only -- a value, or ProtocolError / OffsetMismatch / StoreError,
after which the connection is closed (the harness stops feeding) -- and offsets that stay in range.
"""
from __future__ import annotations

from broker.ha import wire
from broker.ha.master_session import Ack, MasterSession, SessionState
from broker.ha.slave_session import OffsetMismatch, SlaveSession
from broker.ha.wire import HEADER, HEADER_SIZE, REPORT, REPORT_SIZE, FrameReader, ProtocolError, ReportReader
from broker.store.mapped_file import StoreError
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


MODES = (reports, frames, master, slave)


def TestOneInput(data: bytes) -> None:
    inp = Input(data)
    MODES[inp.byte() % len(MODES)](inp)
