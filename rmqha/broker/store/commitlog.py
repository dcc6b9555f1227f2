"""The commit log: append a record, append raw replicated bytes, read from an offset, recover.

A record never spans two files: when one does not fit (with room for the 8-byte end marker), the rest
of the file is closed with a blank record and the record goes to the next file (WIRE-FACTS §6.3).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal, Protocol, overload

from . import record
from .mapped_file import MappedFile, MappedFileQueue, StoreError
from .record import BytesLike, Scan
from rmqha.broker.support.beans import forwarded

log = logging.getLogger("rmqha.broker.store.commitlog")

READ_CHUNK = 4 * 1024 * 1024

# What walk() yields: (offset, kind, size, info, reason); info is None unless kind is Scan.MESSAGE.
Walked = tuple[int, str, int, record.IndexInfo | None, str]
WalkedFull = tuple[int, str, int, record.Message | None, str]
_Info = record.IndexInfo | record.Message | None


@dataclass
class AppendResult:
    wrote_offset: int  # physical offset where the record starts
    wrote_bytes: int


@dataclass
class RecoveryReport:
    end_offset: int
    records: int
    discarded_bytes: int
    reason: str  # why the walk stopped ("" = clean end)
    start_offset: int


class RecordReader(Protocol):
    def read(self, offset: int, max_bytes: int) -> bytes: ...

    def read_record(self, offset: int, size: int) -> bytes: ...


def message_at(log: RecordReader, offset: int, size: int | None = None) -> record.Message | None:
    """The message at a commit-log offset (its size read from its head when not given), or None, for any
    log with read(offset, n) and read_record(offset, size): this one and the DLedger one."""
    if size is None:
        size = record.message_size(log.read(offset, record.HEAD_SIZE))
        if size <= 0:
            return None
    r = record.scan(log.read_record(offset, size), 0, check_crc=False)
    return r.message if r.kind == Scan.MESSAGE else None


class CommitLog:
    def __init__(self, directory: str, file_size: int, preallocate: bool = True):
        self.queue = MappedFileQueue(directory, file_size, preallocate=preallocate)
        self.file_size = file_size

    # -- state ------------------------------------------------------------------------------------
    def load(self) -> None:
        self.queue.load()

    min_offset: int = forwarded("queue.min_offset")
    max_offset: int = forwarded("queue.max_offset")

    def last_file_start(self) -> int:
        """Start of the last mapped file, where the HA writer begins for an empty slave."""
        m = self.max_offset
        return max(0, m - m % self.file_size)

    # -- writing ----------------------------------------------------------------------------------
    def append_record(self, rec: record.EncodedRecord, queue_offset: int) -> AppendResult:
        """Append one encoded record, rolling to the next file when it does not fit."""
        size = rec.size
        if size + record.END_FILE_MIN_BLANK_LENGTH > self.file_size:
            raise record.RecordError(f"a {size}-byte record cannot fit in a {self.file_size}-byte file")
        f = self.queue.writable_file()
        if size + record.END_FILE_MIN_BLANK_LENGTH > f.free:
            free = f.free
            f.write_at(f.wrote, record.blank(free))
            f.wrote = f.size
            f = self.queue.writable_file()
        offset = f.base + f.wrote
        f.append(rec.finish(queue_offset, offset))
        return AppendResult(offset, size)

    def append_raw(self, offset: int, buffers: BytesLike | list[BytesLike]) -> None:
        """Append bytes replicated from a master at exactly `offset` (the slave side).

        buffers: one bytes-like or a list of them, contiguous. They must continue this log, and no
        single buffer may cross a file boundary (a master never sends such a batch unless its
        mappedFileSizeCommitLog differs from ours).
        """
        if not isinstance(buffers, list):
            buffers = [buffers]
        i = 0
        while i < len(buffers):
            f = self.replica_file(offset, len(buffers[i]))
            group: list[BytesLike] = []
            size = 0
            while i < len(buffers) and size + len(buffers[i]) <= f.free:
                group.append(buffers[i])
                size += len(buffers[i])
                i += 1
            f.append_many(group, size)
            offset += size

    def replica_file(self, offset: int, size: int) -> MappedFile:
        """The file that replicated bytes [offset, offset+size) go into, at its write position
        (`wrote`): they must continue this log and fit in one file. Raises StoreError otherwise.

        The zero-copy slave moves the bytes there itself (MappedFile.splice_in) and then calls
        replica_written; append_raw writes them from Python buffers."""
        if self.queue.files and offset != self.max_offset:
            raise StoreError(f"replicated bytes at {offset} do not continue the commit log at {self.max_offset}")
        f = self.queue.writable_file(at=offset)
        if f.base + f.wrote != offset:
            raise StoreError(
                f"replicated bytes at {offset} cannot start a log whose files are "
                f"{self.file_size} bytes (file starts at {f.base})"
            )
        if size > f.free:
            raise StoreError(
                f"replicated batch of {size} bytes at {offset} crosses the end "
                f"of a {self.file_size}-byte file: do master and slave use the same "
                "mappedFileSizeCommitLog?"
            )
        return f

    # -- reading ----------------------------------------------------------------------------------
    def read(self, offset: int, max_bytes: int) -> bytes:
        """Up to max_bytes of stored data from offset, never crossing a file boundary."""
        f = self.queue.find(offset)
        if f is None:
            return b""
        pos = offset - f.base
        n = min(max_bytes, f.wrote - pos)
        return f.read(pos, n) if n > 0 else b""

    def region(self, offset: int, max_bytes: int) -> tuple[MappedFile, int, int] | None:
        """(file, file position, length) of up to max_bytes stored from offset, never crossing a file
        boundary, for a sender that hands the file to the kernel (os.sendfile); None if there is none."""
        f = self.queue.find(offset)
        if f is None:
            return None
        pos = offset - f.base
        n = min(max_bytes, f.wrote - pos)
        return (f, pos, n) if n > 0 else None

    def read_record(self, offset: int, size: int) -> bytes:
        f = self.queue.find(offset)
        if f is None or offset - f.base + size > f.wrote:
            return b""
        return f.read(offset - f.base, size)

    def message_at(self, offset: int, size: int | None = None) -> record.Message | None:
        return message_at(self, offset, size)

    @overload
    def walk(
        self,
        start: int,
        end: int | None = None,
        check_crc: bool = True,
        full: Literal[False] = False,
        read_size: int = READ_CHUNK,
    ) -> Iterator[Walked]: ...

    @overload
    def walk(
        self,
        start: int,
        end: int | None = None,
        check_crc: bool = True,
        *,
        full: Literal[True],
        read_size: int = READ_CHUNK,
    ) -> Iterator[WalkedFull]: ...

    def walk(
        self,
        start: int,
        end: int | None = None,
        check_crc: bool = True,
        full: bool = False,
        read_size: int = READ_CHUNK,
    ) -> Iterator[tuple[int, str, int, _Info, str]]:
        """Yield (offset, kind, size, info, reason) for records from start (a record boundary) on.

        info is a record.IndexInfo, or a full record.Message with full=True. Ends after a blank at
        the last file, an invalid record, or a partial one (yielded so the caller can see why);
        `end` (exclusive) bounds the walk to data known to be complete.
        """
        scanner: Callable[[BytesLike, int, bool], tuple[str, int, _Info, str]]
        scanner = _full_scan if full else record.scan_index
        read_size = max(read_size, 64)  # enough for any record's TOTALSIZE, so a long record is read whole
        offset = start
        limit = self.max_offset if end is None else end
        while offset < limit:
            f = self.queue.find(offset)
            if f is None:
                return
            pos = offset - f.base
            stop = min(f.wrote, limit - f.base)
            chunk = f.read(pos, min(read_size, stop - pos))
            if not chunk:
                return  # nothing stored at offset (below limit, but past what its file holds)
            p = 0
            size = 0
            while p < len(chunk):
                kind, size, info, reason = scanner(chunk, p, check_crc)
                if kind == Scan.PARTIAL and pos + len(chunk) < stop:
                    break  # the record continues past this chunk: read again from it
                yield offset + p, kind, size, info, reason
                if kind == Scan.BLANK:
                    p = f.size - pos  # the rest of this file
                    break
                if kind != Scan.MESSAGE:
                    return
                p += size
            if p == 0:
                # A single record larger than read_size: read it whole.
                data = f.read(pos, size)
                kind, size, info, reason = scanner(data, 0, check_crc)
                yield offset, kind, size, info, reason
                if kind != Scan.MESSAGE:
                    return
                p = size
            offset += p

    # -- recovery ---------------------------------------------------------------------------------
    def recover(
        self, check_crc: bool, on_record: Callable[[int, record.IndexInfo], object] | None = None
    ) -> RecoveryReport:
        """Find the end of valid data, walking from the third-last file (as RocketMQ does).

        Each file is assumed full of data up to its end (files are preallocated; nothing tells where
        data stops but the records themselves). on_record(offset, IndexInfo) sees every valid record.
        """
        files = self.queue.files
        if not files:
            return RecoveryReport(0, 0, 0, "", 0)
        for f in files:
            f.wrote = f.size  # let walk() read whole files
        start = files[max(0, len(files) - 3)].base
        end, count, reason = start, 0, ""
        for offset, kind, size, info, why in self.walk(start, check_crc=check_crc):
            if kind == Scan.MESSAGE:
                count += 1
                end = offset + size
                if on_record is not None:
                    assert info is not None  # a MESSAGE carries its IndexInfo
                    on_record(offset, info)
            elif kind == Scan.BLANK:
                blank_in = self.queue.find(offset)
                assert blank_in is not None  # walk read the blank from this file
                end = blank_in.end
            else:
                reason = "" if why == "zeros" else f"{kind} record at {offset}: {why}"
                break
        deleted, wiped = self.queue.truncate(end)
        if reason or wiped or deleted:
            log.warning(
                "commitlog recovery: valid data ends at %d (%s); wiped %d stale bytes after "
                "it and deleted %d later files",
                end,
                reason or "torn tail",
                wiped,
                deleted,
            )
        return RecoveryReport(end, count, wiped, reason, start)

    def truncate(self, offset: int) -> tuple[int, int]:
        return self.queue.truncate(offset)

    def flush(self) -> int:
        """fdatasync; returns the offset synced through (captured before the sync, see MappedFileQueue)."""
        return self.queue.flush()

    def close(self) -> None:
        self.queue.close()


def _full_scan(buf: BytesLike, pos: int, check_crc: bool) -> tuple[str, int, record.Message | None, str]:
    r = record.scan(buf, pos, check_crc)
    return r.kind, r.size, r.message, r.reason
