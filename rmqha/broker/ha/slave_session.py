"""The slave's side of one HA connection (HAClient, HA-PROTOCOL §4), IO-free.

It checks every frame's fromPhyOffset against its own max offset, appends bodies to the commit log,
and says what to report. Reports are coalesced per read: after all frames of one read are stored
the slave reports once, which the master treats exactly like several reports in a row.

Two ways in, one set of decisions (`_check`): `on_data` takes bytes that are already in Python;
`drain` takes a source of frame bytes (the zero-copy transport's pipe) from which it reads only the
12-byte headers and has each body moved into its commit-log file by the source itself.
"""

from __future__ import annotations

import logging
from typing import Protocol

from rmqha.broker.store.mapped_file import MappedFile
from rmqha.broker.store.record import BytesLike

from .wire import HEADER, HEADER_SIZE, MAX_FRAME_BODY, MAX_OFFSET, FrameReader, check_header, encode_report

log = logging.getLogger("rmqha.broker.ha.slave")

RATE_WINDOW = 0.1  # seconds over which recent_rate is measured


class ReplicaStore(Protocol):
    """What a slave session writes to (rmqha.broker.store.message_store.MessageStore)."""

    @property
    def max_offset(self) -> int: ...

    def append_replicated(self, offset: int, data: list[BytesLike]) -> None: ...

    def replica_target(self, offset: int, size: int) -> tuple[MappedFile, int]: ...

    def replica_written(self, offset: int, size: int) -> None: ...


class FrameSource(Protocol):
    """drain()'s source of frame bytes (rmqha.broker.ha.transport.SplicePipe); see drain."""

    @property
    def available(self) -> int: ...

    def take(self, n: int) -> bytes: ...

    def store(self, file: MappedFile, pos: int, n: int) -> int: ...


class OffsetMismatch(Exception):
    def __init__(self, slave_offset: int, master_offset: int):
        super().__init__(
            f"master pushed offset not equal the max phy offset in slave, SLAVE: {slave_offset} MASTER: {master_offset}"
        )
        self.slave_offset = slave_offset
        self.master_offset = master_offset


class SlaveSession:
    def __init__(
        self, store: ReplicaStore, *, heartbeat_s: float, housekeeping_s: float, now: float, max_body: int | None = None
    ):
        self.store = store
        self.max_body = max_body or MAX_FRAME_BODY
        self.frames = FrameReader(self.max_body)
        self.heartbeat_s = heartbeat_s
        self.housekeeping_s = housekeeping_s
        self.last_read = now
        self.last_write = now
        self.reported = -1  # currentReportedOffset
        self.bytes_received = 0
        self.last_data: float | None = None  # when the last frame with a body arrived
        # bytes/s received over the last full RATE_WINDOW: tells a catch-up (hundreds of MiB/s) from a
        # master that streams its new sends as they come (tens of MiB/s at most)
        self.recent_rate = 0.0
        self._rate_since, self._rate_base = now, 0
        # (slave max offset, master offset) once the master said it is behind us: a heartbeat below
        # our max offset. Our bytes past its offset are not on the master; we keep them (no silent
        # truncation), stay connected and keep reporting; the master sends nothing (SLAVE_AHEAD).
        self.master_behind: tuple[int, int] | None = None
        self.had_data = False  # a frame with a body was accepted on this connection

    def start(self, now: float) -> bytes:
        """On connect: report our max offset at once (the reference waits one heartbeat interval)."""
        return self._report(now)

    def _report(self, now: float) -> bytes:
        self.reported = self.store.max_offset
        self.last_write = now
        return encode_report(self.reported)

    def on_data(self, data: bytes | bytearray | memoryview, now: float) -> bytes | None:
        """Store what arrived; return the report to send, if the offset moved.

        Raises ProtocolError (bad frame), OffsetMismatch (close and reconnect), or a StoreError
        (the bytes could not be stored: close, reconnect, and report the true offset).
        """
        self._rate(now)
        self.last_read = now
        self.bytes_received += len(data)
        # Bodies of consecutive frames are stored with one write per read, not one per frame.
        pending: list[BytesLike] = []
        start, expected = -1, self.store.max_offset
        try:
            for frame in self.frames.feed(data):
                self._check(frame.offset, len(frame.body), expected)
                if frame.body:
                    if not pending:
                        start = frame.offset
                    pending.append(frame.body)
                    expected = frame.offset + len(frame.body)
        finally:
            if pending:  # what matched is stored even when a later frame did not
                self.store.append_replicated(start, pending)
                self.last_data = now
        return self.report_if_moved(now)

    def drain(self, source: FrameSource, now: float) -> None:
        """Take every byte `source` holds now. Several drains make one read: report_if_moved then says
        what to report, once for all of them.

        source: `available` (bytes it holds), `take(n)` (up to n bytes into Python, for headers) and
        `store(file, pos, n)` (move up to n bytes into a commit-log file at pos; returns how many);
        optionally `store_frames` (transport.SplicePipe: the same loop in C for frames that continue
        the log in the current file, handing any other header back to be judged here).
        A frame may end in a later drain: its header or body is continued there. Whole bodies count
        (store.replica_written) once per drain, as on_data appends once per read; the next body of
        the same file goes right after the last without asking the store again. Raises as on_data.
        """
        self._rate(now)
        self.last_read = now
        store = self.store
        frames = getattr(source, "store_frames", None)  # the compiled loop (transport.SplicePipe), if any
        start = count = 0  # whole bodies moved in this drain and not yet counted: [start, start+count)
        try:
            while source.available:
                header: bytes | None = None
                if (
                    frames is not None
                    and self._file is not None
                    and not self._header
                    and (self._body_left or self._next == (start + count if count else store.max_offset))
                ):
                    # The common case in C: bodies that continue the log in this file. It stops at any
                    # other header and hands it back, to be judged below as if it had been read here. (The
                    # last file below 2^63 ends past an int64: the clamp only hands its last frame back.)
                    (
                        _,
                        self._pos,
                        self._body_left,
                        self._body_size,
                        self._next,
                        consumed,
                        completed,
                        first,
                        header,
                        err,
                    ) = frames(
                        self._file,
                        self._pos,
                        self._body_left,
                        self._body_size,
                        self._next,
                        min(self._file_end, MAX_OFFSET),
                        self.max_body,
                    )
                    self.bytes_received += consumed  # (had_data is already set: _file came from a judged body)
                    if completed:
                        if not count:
                            start = first
                        count += completed
                        self.last_data = now
                    if err:  # the state is as it was before the failed splice: the same n as splice_in's
                        self._file.raise_splice_error(err, self._pos, min(self._body_left, source.available))
                    if header is None and (self._body_left or not source.available):
                        continue  # only with the pipe empty: the while test ends the drain
                    # else a header it handed back, or one cut by the read (fewer than 12 bytes left)
                if header is None and self._body_left:
                    assert self._file is not None  # a body is being moved: into the file it was judged for
                    n = source.store(self._file, self._pos, self._body_left)
                    self.bytes_received += n
                    self._pos += n
                    self._body_left -= n
                    if not self._body_left:
                        if not count:
                            start = self._next - self._body_size
                        count += self._body_size
                        self.last_data = now
                    continue
                if header is None:
                    part = source.take(HEADER_SIZE - len(self._header))
                    self.bytes_received += len(part)
                    self._header += part
                    if len(self._header) < HEADER_SIZE:
                        break
                    header, self._header = self._header, b""
                from_offset, body_size = HEADER.unpack(header)
                offset, size = check_header(from_offset, body_size, self.max_body)
                self._check(offset, size, start + count if count else store.max_offset)
                if not size:
                    continue
                if self._file is None or offset != self._next or offset + size > self._file_end:
                    if count:  # the store checks the next body against what it holds
                        store.replica_written(start, count)
                        count = 0
                    self._file, self._pos = store.replica_target(offset, size)
                    self._file_end = offset - self._pos + self._file.size
                self._body_size = self._body_left = size
                self._next = offset + size
        finally:
            if count:  # what matched is stored even when a later frame did not
                store.replica_written(start, count)

    # frame state of drain(): a header not yet complete, or the body being moved; where bodies go
    _header = b""
    _body_left = _body_size = 0
    _file: MappedFile | None = None
    _pos = _next = _file_end = 0  # file position for the next body byte; log offsets after the last body

    def _check(self, offset: int, size: int, expected: int) -> None:
        """Raise OffsetMismatch unless a frame continues this slave's log (`expected`; 0: an empty log
        takes any start). A heartbeat below our offset is MASTER_BEHIND instead (recorded; a
        heartbeat stores nothing either way) until this connection brought data: a master that is
        behind sends none, so after data it is a gap. Per connection, so how reads cut the stream
        never changes the decision."""
        if not size and not self.had_data and 0 <= offset < expected:
            self.master_behind = (expected, offset)
            return
        if expected != 0 and expected != offset:
            raise OffsetMismatch(expected, offset)
        if size:
            self.had_data = True

    def _rate(self, now: float) -> None:
        if now - self._rate_since >= RATE_WINDOW:
            self.recent_rate = (self.bytes_received - self._rate_base) / (now - self._rate_since)
            self._rate_since, self._rate_base = now, self.bytes_received

    def report_if_moved(self, now: float) -> bytes | None:
        """The report to send after a read, if the offset moved."""
        if self.store.max_offset != self.reported:
            return self._report(now)
        return None

    def heartbeat(self, now: float) -> bytes | None:
        if now - self.last_write >= self.heartbeat_s:
            return self._report(now)
        return None

    def expired(self, now: float) -> bool:
        return now - self.last_read > self.housekeeping_s
