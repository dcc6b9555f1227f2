"""Commit-log files -> a Spark DataFrame with one row per record (or per unreadable span).

Work is split by mapped file AND byte range (default 64 MiB). The driver only lists files (os.stat);
each task opens its file itself, reads its range with pread and decodes it with
`broker.store.record.scan`, the one decoder of the project.

How a range task finds record boundaries (see README.md, "Splitting"): a task owns the records that
START inside [start, end). The task for the first range of a file starts at the file start; any other
task starts at the first *sync point* at or after its start. A sync point is a position p where
record.scan() decodes a whole valid message whose PHYSICALOFFSET field equals the file base + p (a
record names its own position, so a match is not a coincidence), or an end-of-file blank whose
TOTALSIZE is exactly the rest of the mapped file. From there the task walks TOTALSIZE to TOTALSIZE,
reading past its end to finish its last record, and stops at the first sync point at or after its
end (an unreadable span starting past its end is still its own: no other task can start there). After an unreadable record it resumes at the next sync point, so a flipped byte costs one
row, not the rest of the file, and a whole-file walk and a split walk give the same rows.

Row statuses:
  ok       a valid message
  blank    the end-of-file marker (size = rest of the mapped file)
  invalid  an unreadable span (bad magic, CRC or length mismatch, zeros between records, a record
           whose PHYSICALOFFSET does not match its position); size = bytes up to the next sync point
  torn     an unreadable span with no valid record after it in the file: the torn tail of a crash or
           a truncated copy; size = bytes up to the end of the file's data
Zeros after the last record of a file (the unwritten, preallocated tail) produce no row.
"""
from __future__ import annotations

import errno
import os
import zlib

from broker.store import record
from broker.store.record import Scan

from .runfolder import Node

DEFAULT_RANGE_BYTES = 64 << 20
WINDOW = 8 << 20              # bytes read per pread
MAX_RECORD = 32 << 20         # a larger TOTALSIZE is garbage (RocketMQ's maxMessageSize is 4 MiB)
_MSG_MAGIC = record.MESSAGE_MAGIC.to_bytes(4, "big")
_BLANK_MAGIC = record.BLANK_MAGIC.to_bytes(4, "big")

COLUMNS = [
    ("node", "string"), ("broker_name", "string"), ("broker_id", "int"), ("role", "string"),
    ("file", "string"), ("physical_offset", "long"), ("size", "long"), ("status", "string"),
    ("valid", "boolean"), ("reason", "string"), ("topic", "string"), ("queue_id", "int"),
    ("queue_offset", "long"), ("sys_flag", "int"), ("born_timestamp", "long"),
    ("store_timestamp", "long"), ("body_crc", "int"), ("record_crc", "long"), ("msg_id", "string"),
    ("uniq_key", "string"), ("keys", "string"), ("tags", "string"),
]


def schema():
    from pyspark.sql import types as T
    kinds = {"string": T.StringType(), "int": T.IntegerType(), "long": T.LongType(),
             "boolean": T.BooleanType()}
    return T.StructType([T.StructField(n, kinds[k], True) for n, k in COLUMNS])


# -- planning (driver) ------------------------------------------------------------------------

def plan(nodes: list[Node], range_bytes: int = DEFAULT_RANGE_BYTES) -> list[tuple]:
    """One task per (file, byte range): (node meta, path, base, length, mapped size, start, end)."""
    if range_bytes <= 0:
        raise ValueError("range_bytes must be positive")
    tasks = []
    for node in nodes:
        meta = (node.name, node.broker_name, node.broker_id, node.role)
        for f in node.files:
            for start in range(0, max(f.length, 1), range_bytes):
                tasks.append((meta, f.path, f.base, f.length, f.mapped_size,
                              start, min(start + range_bytes, f.length)))
    return tasks


# -- decoding one range (executor) ------------------------------------------------------------

class _RangeReader:
    """pread windows over one file, plus the sync-point search."""

    def __init__(self, path: str, base: int, length: int, mapped_size: int):
        self.fd = os.open(path, os.O_RDONLY)
        self.base, self.length, self.mapped_size = base, length, mapped_size
        self.buf = b""
        self.buf_start = 0

    def close(self):
        os.close(self.fd)

    def window(self, pos: int, need: int):
        """(buffer, index of pos in it), holding at least `need` bytes from pos unless EOF is sooner."""
        end = self.buf_start + len(self.buf)
        if not (self.buf_start <= pos and (pos + need <= end or end >= self.length)):
            self.buf = os.pread(self.fd, max(need, WINDOW), pos)
            self.buf_start = pos
        return self.buf, pos - self.buf_start

    def scan(self, pos: int):
        buf, i = self.window(pos, 8)
        r = record.scan(buf, i, True, False)
        if (r.kind == Scan.PARTIAL and self.buf_start + len(buf) < self.length
                and r.size <= MAX_RECORD):
            buf, i = self.window(pos, min(max(r.size, 8), self.length - pos))
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
        while pos < hi:
            data = self.next_data(pos)
            if data is None or data >= hi:
                return None
            # A hole's edge is block-aligned; back up so a header straddling it is still seen.
            if data > pos:
                pos = max(pos, data - 8)
            stop = min(hi, pos + WINDOW)
            chunk = os.pread(self.fd, stop - pos + 8, pos)
            limit = stop - pos + 8
            cands = []
            for magic in (_MSG_MAGIC, _BLANK_MAGIC):
                j = chunk.find(magic, 4, limit)
                while j >= 0:
                    if j - 4 < stop - pos:
                        cands.append(j - 4)
                    j = chunk.find(magic, j + 1, limit)
            for c in sorted(cands):
                if self.is_sync(pos + c) is not None:
                    return pos + c
            pos = stop
        return None


_MSG_ID_PREFIX: dict = {}


def _msg_id(m) -> str:
    """record.offset_msg_id, with the store-host part computed once per host (it is the costly part)."""
    prefix = _MSG_ID_PREFIX.get(m.store_host)
    if prefix is None:
        prefix = _MSG_ID_PREFIX[m.store_host] = record.offset_msg_id(m.store_host, 0)[:-16]
    return f"{prefix}{m.physical_offset:016X}"


def _row(meta, fname, phys, size, status, reason="", m=None, rcrc=None):
    if m is None:
        return (*meta, fname, phys, size, status, status == "ok", reason or None,
                None, None, None, None, None, None, None, rcrc, None, None, None, None)
    props = m.properties
    return (*meta, fname, phys, size, status, True, None, m.topic, m.queue_id, m.queue_offset,
            m.sys_flag, m.born_timestamp, m.store_timestamp, m.body_crc, rcrc, _msg_id(m),
            props.get("UNIQ_KEY"), props.get("KEYS"), props.get("TAGS"))


def decode_range(task) -> list[tuple]:
    """Rows for the records starting in [start, end) of one file (runs on an executor)."""
    meta, path, base, length, mapped_size, start, end = task
    fname = os.path.basename(path)
    rows = []
    rd = _RangeReader(path, base, length, mapped_size)
    try:
        p = start if start == 0 else rd.find_sync(start, end)
        while p is not None and p < length:
            r, buf, i = rd.scan(p)
            good = (r.kind == Scan.MESSAGE and r.message.physical_offset == base + p
                    or r.kind == Scan.BLANK and r.size == mapped_size - p)
            if good and p >= end:
                break  # the next range starts here (it is a sync point)
            if r.kind == Scan.MESSAGE and r.message.physical_offset == base + p:
                rows.append(_row(meta, fname, base + p, r.size, "ok", m=r.message,
                                 rcrc=zlib.crc32(memoryview(buf)[i:i + r.size])))
                p += r.size
                continue
            if r.kind == Scan.BLANK and good:
                rows.append(_row(meta, fname, base + p, r.size, "blank",
                                 rcrc=zlib.crc32(memoryview(buf)[i:i + 8])))
                break
            if r.kind == Scan.MESSAGE:
                reason = f"PHYSICALOFFSET {r.message.physical_offset} != position {base + p}"
            elif r.kind == Scan.BLANK:
                reason = f"blank record of {r.size} bytes, {mapped_size - p} left in the file"
            else:
                reason = r.reason
            # Not a sync point, so no other task starts here: the task that walked into it reports it,
            # even past its own end, and stops at the next sync point.
            q = rd.find_sync(p + 1, length)
            if q is None:
                if reason != "zeros":
                    rows.append(_row(meta, fname, base + p, max(rd.data_end(p), p + 1) - p, "torn", reason))
                break
            rows.append(_row(meta, fname, base + p, q - p, "invalid", reason))
            p = q
    finally:
        rd.close()
    return rows


def decode_file(node: Node, f, range_bytes: int | None = None) -> list[tuple]:
    """Decode a whole file (or its ranges in turn) in this process: for tests and small tools."""
    meta = (node.name, node.broker_name, node.broker_id, node.role)
    size = range_bytes or max(f.length, 1)
    rows = []
    for start in range(0, max(f.length, 1), size):
        rows += decode_range((meta, f.path, f.base, f.length, f.mapped_size, start,
                              min(start + size, f.length)))
    return rows


# -- the DataFrame ----------------------------------------------------------------------------

def decode(spark, nodes: list[Node], range_bytes: int = DEFAULT_RANGE_BYTES):
    """A DataFrame of every record of every node (COLUMNS). Lazy: nothing is read until an action."""
    tasks = plan(nodes, range_bytes)
    sc = spark.sparkContext
    rdd = sc.parallelize(tasks, max(1, len(tasks))).flatMap(decode_range)
    return spark.createDataFrame(rdd, schema(), verifySchema=False)
