"""The HA port's wire format (HA-PROTOCOL §2), as IO-free decoders.

slave -> master: an 8-byte big-endian long, the slave's commit-log max offset. Nothing else.
master -> slave: fromPhyOffset (i8) + size (i4) + size bytes of raw commit log; size 0 = heartbeat.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

HEADER = struct.Struct(">qi")
HEADER_SIZE = HEADER.size  # 12
REPORT = struct.Struct(">q")
REPORT_SIZE = REPORT.size  # 8

# The reference slave reads into a 4 MiB buffer and cannot take a frame larger than that.
MAX_FRAME_BODY = 4 * 1024 * 1024
MAX_OFFSET = (1 << 63) - 1  # offsets are Java longs


class ProtocolError(Exception):
    """The peer sent something no conforming peer sends; the connection must be closed."""


def encode_report(offset: int) -> bytes:
    return REPORT.pack(offset)


def encode_header(offset: int, size: int) -> bytes:
    return HEADER.pack(offset, size)


def check_header(offset: int, size: int, max_body: int = MAX_FRAME_BODY) -> tuple[int, int]:
    """A frame header's (fromPhyOffset, size), or ProtocolError if no conforming master sends it."""
    if size < 0 or size > max_body:
        raise ProtocolError(f"frame at fromPhyOffset={offset} declares body size {size}; allowed 0..{max_body}")
    if offset < 0:
        raise ProtocolError(f"frame declares negative fromPhyOffset={offset}")
    if offset + size > MAX_OFFSET:
        # The log would end past what a long holds: the slave could not even report that offset.
        raise ProtocolError(
            f"frame at fromPhyOffset={offset} with {size} bytes ends past the largest "
            f"offset a report can carry ({MAX_OFFSET})"
        )
    return offset, size


class ReportReader:
    """Master side. Only the last complete report in what has arrived counts (several may coalesce)."""

    __slots__ = ("_tail",)

    def __init__(self) -> None:
        self._tail = b""

    def feed(self, data: bytes) -> int | None:
        if self._tail:
            data = self._tail + data
        n = len(data) - len(data) % REPORT_SIZE
        self._tail = bytes(data[n:])
        if n == 0:
            return None
        offset: int = REPORT.unpack_from(data, n - REPORT_SIZE)[0]
        return offset


@dataclass
class Frame:
    offset: int
    body: memoryview  # valid until the next feed(); copy it to keep it

    @property
    def is_heartbeat(self) -> bool:
        return len(self.body) == 0


class FrameReader:
    """Slave side. Frames may arrive in any number of pieces, many in one read."""

    def __init__(self, max_body: int = MAX_FRAME_BODY):
        self.max_body = max_body
        self._buf = bytearray()

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        frames: list[Frame] = []
        src = memoryview(data)
        if self._buf:
            # Complete the frame left over from the last read, copying only what it still needs.
            need = HEADER_SIZE - len(self._buf)
            if need > 0:
                self._buf += src[:need]
                src = src[need:]
                if len(self._buf) < HEADER_SIZE:
                    return frames
            offset, size = self._check(*HEADER.unpack_from(self._buf, 0))
            need = HEADER_SIZE + size - len(self._buf)
            self._buf += src[:need]
            src = src[need:]
            if len(self._buf) < HEADER_SIZE + size:
                return frames
            done = memoryview(bytes(self._buf))
            self._buf.clear()
            frames.append(Frame(offset, done[HEADER_SIZE:]))
        pos, end = 0, len(src)
        while end - pos >= HEADER_SIZE:
            offset, size = self._check(*HEADER.unpack_from(src, pos))
            if end - pos < HEADER_SIZE + size:
                break
            frames.append(Frame(offset, src[pos + HEADER_SIZE : pos + HEADER_SIZE + size]))
            pos += HEADER_SIZE + size
        if pos < end:
            self._buf += src[pos:]
        return frames

    def _check(self, offset: int, size: int) -> tuple[int, int]:
        return check_header(offset, size, self.max_body)

    @property
    def pending(self) -> int:
        return len(self._buf)
