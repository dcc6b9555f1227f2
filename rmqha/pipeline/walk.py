"""The pieces a commit-log walk is made of, shared by decode.py (classic logs) and dledger_log.py (DLedger
entries): the decode task, the row layout (COLUMNS) and the row of a span that is not a message, the pread
window reader with its sync-point search, and the collectors of valid-message summaries.

Tests: tests/unit/pipeline/test_decode.py, test_decode_compiled.py, test_dledger_audit.py (through decode).
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass

from rmqha.broker.store import record
from rmqha.broker.store.record import Scan

WINDOW = 8 << 20  # bytes read per pread
FIRST_SEARCH = 64 << 10  # bytes the sync-point search reads first
MAX_RECORD = 32 << 20  # a larger TOTALSIZE is garbage (RocketMQ's maxMessageSize is 4 MiB)
HEAD = record.HEAD_SIZE  # bytes that tell a message, a blank and garbage apart
MAGIC_AT = record.MAGIC_AT  # where a record's magic sits, for the sync-point search
MAGICS = (record.MESSAGE_MAGIC_BYTES, record.BLANK_MAGIC_BYTES)


@dataclass(frozen=True)
class DecodeTask:
    """One file's byte range to decode (decode.plan()). A task owns the records that start in [start, end).
    A DLedger data file is one task for the whole file, with `committed`: the node's committed index
    (entries past it are not read)."""

    meta: tuple  # (node, broker name, broker id, role): the columns the same for the whole file
    path: str
    base: int  # the file's first global offset (its name)
    length: int  # bytes on disk
    mapped_size: int
    start: int
    end: int
    committed: int | None = None  # a DLedger data file's committed index; None: a classic commit-log file

    @property
    def is_dledger(self) -> bool:
        return self.committed is not None


COLUMNS = [
    ("node", "string"),
    ("broker_name", "string"),
    ("broker_id", "int"),
    ("role", "string"),
    ("file", "string"),
    ("physical_offset", "long"),
    ("size", "long"),
    ("status", "string"),
    ("valid", "boolean"),
    ("reason", "string"),
    ("topic", "string"),
    ("queue_id", "int"),
    ("queue_offset", "long"),
    ("sys_flag", "int"),
    ("born_timestamp", "long"),
    ("store_timestamp", "long"),
    ("body_crc", "int"),
    ("record_crc", "long"),
    ("msg_id", "string"),
    ("uniq_key", "string"),
    ("keys", "string"),
    ("tags", "string"),
]


# Where a valid message's columns come from: positions in a record.scan_summary() tuple, by the names in
# record.SUMMARY_FIELDS (a column and the summary field it is made of share a name).
AT = {name: k for k, name in enumerate(record.SUMMARY_FIELDS)}
PHYS, SIZE, STORE_HOST = AT["physical_offset"], AT["size"], AT["store_host_raw"]


_ZEROS_CACHE = [b""]


def zeros(n: int) -> bytes:
    """n zero bytes (the last length asked for is kept: windows are nearly always the same length)."""
    if len(_ZEROS_CACHE[0]) != n:
        _ZEROS_CACHE[0] = bytes(n)
    return _ZEROS_CACHE[0]


class RangeReader:
    """pread windows over one file, plus the sync-point search.

    Windows are read into one reused buffer (a fresh 8 MiB bytes object per read cost as much as the
    decoding: its pages are new memory); a window (a memoryview) is valid until the next window() call."""

    def __init__(self, path: str, base: int, length: int, mapped_size: int, window: int = WINDOW):
        self.fd = os.open(path, os.O_RDONLY)
        self.base, self.length, self.mapped_size = base, length, mapped_size
        self.size = window
        self.store = bytearray(0)
        self.buf = memoryview(self.store)
        self.buf_start = 0

    def close(self):
        os.close(self.fd)

    def window(self, pos: int, need: int):
        """(buffer, index of pos in it), holding at least `need` bytes from pos unless EOF is sooner."""
        end = self.buf_start + len(self.buf)
        if not (self.buf_start <= pos and (pos + need <= end or end >= self.length)):
            n = max(need, self.size)
            if len(self.store) < n:
                self.store = bytearray(n)  # a new one: views of the old one stay as they were
            got = os.preadv(self.fd, [memoryview(self.store)[:n]], pos)
            self.buf = memoryview(self.store)[:got]
            self.buf_start = pos
        return self.buf, pos - self.buf_start

    def scan(self, pos: int):
        buf, i = self.window(pos, HEAD)
        r = record.scan(buf, i, True, False)
        if r.kind == Scan.PARTIAL and self.buf_start + len(buf) < self.length and r.size <= MAX_RECORD:
            buf, i = self.window(pos, min(max(r.size, HEAD), self.length - pos))
            r = record.scan(buf, i, True, False)
        return r, buf, i

    def is_sync(self, pos: int):
        """The scan result at pos if pos is a sync point, else None."""
        r, buf, i = self.scan(pos)
        if r.kind == Scan.MESSAGE and r.message.physical_offset == self.base + pos:
            return r, buf, i
        if r.kind == Scan.BLANK and r.size == self.mapped_size - pos:
            return r, buf, i
        return None

    def next_data(self, pos: int) -> int | None:
        """Skip holes of a sparse file (the unwritten tail costs nothing to search)."""
        try:
            return os.lseek(self.fd, pos, os.SEEK_DATA)
        except OSError as e:
            if e.errno == errno.ENXIO:
                return None
            return pos  # SEEK_DATA unsupported here: search every byte

    def data_end(self, pos: int) -> int:
        try:
            return min(os.lseek(self.fd, pos, os.SEEK_HOLE), self.length)
        except OSError:
            return self.length

    def find_sync(self, lo: int, hi: int) -> int | None:
        """The first sync point p with lo <= p < hi."""
        pos = lo
        step = FIRST_SEARCH  # doubled up to WINDOW: the first sync point is usually a record away
        while pos < hi:
            data = self.next_data(pos)
            if data is None or data >= hi:
                return None
            # A hole's edge is block-aligned; back up so a header straddling it is still seen.
            if data > pos:
                pos = max(pos, data - HEAD)
            stop = min(hi, pos + step)
            step = min(2 * step, WINDOW)
            chunk = os.pread(self.fd, stop - pos + HEAD, pos)  # the head of a record starting before stop
            limit = stop - pos + HEAD
            if chunk == zeros(len(chunk)):
                # The preallocated tail: page-cached, so SEEK_DATA calls it data. One memcmp instead
                # of two magic searches (8 vs 0.6 GB/s).
                pos = stop
                continue
            # Candidates in position order, found lazily (the first one usually is a sync point).
            nxt = {m: chunk.find(m, MAGIC_AT, limit) for m in MAGICS}
            while True:
                live = [(j, m) for m, j in nxt.items() if j >= 0]
                if not live:
                    break
                j, m = min(live)
                nxt[m] = chunk.find(m, j + 1, limit)
                if j - MAGIC_AT < stop - pos and self.is_sync(pos + j - MAGIC_AT) is not None:
                    return pos + j - MAGIC_AT
            pos = stop
        return None


def other_row(meta, fname, phys, size, status, reason="", rcrc=None):
    """A row that is not a valid message: blank, invalid or torn."""
    return (
        *meta,
        fname,
        phys,
        size,
        status,
        False,
        reason or None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        rcrc,
        None,
        None,
        None,
        None,
    )


class Summaries:
    """The reference: record.scan_summary() tuples, one Python call per record."""

    def __init__(self, rows: int):
        self.rows = rows
        self.ok = []

    def __len__(self):
        return len(self.ok)

    @property
    def full(self) -> bool:
        return len(self.ok) >= self.rows  # checked between windows: a window's worth more at most

    def walk(self, buf, i: int, lim: int, at: int) -> int:
        """Take the valid messages at their own position (at + index) from buf[i] while they start
        before lim; return where it stopped."""
        summary, phys_at, size_at, append = record.scan_summary, PHYS, SIZE, self.ok.append
        while i < lim:
            f = summary(buf, i)[2]
            if f is None or f[phys_at] != at + i:
                break
            append(f)
            i += f[size_at]
        return i

    def append(self, f):
        self.ok.append(f)

    def take(self):
        ok, self.ok = self.ok, []
        return ok


class CompiledSummaries:
    """The same rows as Summaries, as columns (rmqha.broker.store.summary_columns): the compiled walk takes
    runs of valid messages and hands back any record it is not sure of, which the caller judges with
    record.scan() and appends as a scan_summary() tuple."""

    def __init__(self, rows: int):
        from rmqha.broker.store import summary_columns

        self.sc, self.rows = summary_columns, rows
        self.cols = self._new()

    def _new(self):
        return self.sc.Columns(self.rows, max(4096, 32 * self.rows))

    def __len__(self):
        return self.cols.n

    @property
    def full(self) -> bool:
        return self.cols.full

    def walk(self, buf, i: int, lim: int, at: int) -> int:
        return self.cols.walk(buf, i, lim, at)[0]

    def append(self, f):
        self.cols.append(f)

    def take(self):
        cols, self.cols = self.cols, self._new()
        return cols
