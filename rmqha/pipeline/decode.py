"""Commit-log files -> a Spark DataFrame with one row per record (or per unreadable span).

Work is split by mapped file AND byte range (auto_range_bytes: ~4 tasks per core, 64 MiB-1 GiB). The driver only lists files (os.stat);
each task opens its file itself, reads its range with pread and decodes it with
`rmqha.broker.store.record.scan_summary` (the fast path of the project's one record module, a tuple in the
record's terms; anything it does not accept goes through `record.scan`). Which summary field feeds which
column, and the columns' order, are this module's (COLUMNS, _ok_row, _ok_batch). Rows reach Spark as
Arrow record batches (mapInArrow), one batch per ~64K messages (pyarrow converts the summary tuples);
without pyarrow, as pickled rows (the old path).

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

import functools
import operator
import os
import zlib

from rmqha.broker.store import record
from rmqha.broker.store.record import Scan

from . import dledger_log
from .runfolder import Node
from .walk import AT as _AT
from .walk import (
    COLUMNS,
    HEAD,
    PHYS,
    SIZE,
    STORE_HOST,
    CompiledSummaries,
    DecodeTask,
    RangeReader,
    Summaries,
    other_row,
)

__all__ = ["COLUMNS", "DecodeTask"]  # COLUMNS and DecodeTask are walk.py's, read through here by callers

DEFAULT_RANGE_BYTES = 64 << 20  # the smallest range auto_range_bytes picks
MAX_AUTO_RANGE_BYTES = 1 << 30
TASKS_PER_CORE = 4
# Where a valid message's columns come from: positions in a record.scan_summary() tuple, by the names in
# record.SUMMARY_FIELDS (a column and the summary field it is made of share a name). _ok_row() lays them out
# in COLUMNS order: physical_offset, size, the status columns, _MIDDLE_COLUMNS, msg_id, _PROPERTY_COLUMNS.
_MIDDLE_COLUMNS = (
    "topic",
    "queue_id",
    "queue_offset",
    "sys_flag",
    "born_timestamp",
    "store_timestamp",
    "body_crc",
    "record_crc",
)
_PROPERTY_COLUMNS = ("uniq_key", "keys", "tags")
_middle = operator.itemgetter(*(_AT[n] for n in _MIDDLE_COLUMNS))
_props = operator.itemgetter(*(_AT[n] for n in _PROPERTY_COLUMNS))


def schema():
    from pyspark.sql import types as T

    kinds = {"string": T.StringType(), "int": T.IntegerType(), "long": T.LongType(), "boolean": T.BooleanType()}
    return T.StructType([T.StructField(n, kinds[k], True) for n, k in COLUMNS])


# -- planning (driver) ------------------------------------------------------------------------


def auto_range_bytes(nodes: list[Node], parallelism: int) -> int:
    """A range size that gives about TASKS_PER_CORE tasks per core over all files, within
    [DEFAULT_RANGE_BYTES, MAX_AUTO_RANGE_BYTES]. Each mapInArrow task costs ~0.3 s of fixed overhead
    here, and preallocated files are mostly zeros in small runs: 64 MiB ranges made a 2-node, 2 GiB
    (nearly empty) audit take 6-16 s to decode instead of 1."""
    total = sum(max(f.length, 1) for n in nodes for f in n.files)
    want = total // max(1, parallelism * TASKS_PER_CORE)
    size = min(max(want, DEFAULT_RANGE_BYTES), MAX_AUTO_RANGE_BYTES)
    return (size + (1 << 20) - 1) >> 20 << 20


def file_tasks(node: Node, f, range_bytes: int) -> list[DecodeTask]:
    """The tasks of one of node's files: one per byte range of range_bytes (a DLedger data file: one, with
    the node's committed index)."""
    meta = (node.name, node.broker_name, node.broker_id, node.role)
    if node.is_dledger_file(f):
        return [DecodeTask(meta, f.path, f.base, f.length, f.mapped_size, 0, f.length, node.dledger.committed_index)]
    return [
        DecodeTask(meta, f.path, f.base, f.length, f.mapped_size, start, min(start + range_bytes, f.length))
        for start in range(0, max(f.length, 1), range_bytes)
    ]


def plan(nodes: list[Node], range_bytes: int = DEFAULT_RANGE_BYTES) -> list[DecodeTask]:
    """One task per (file, byte range)."""
    if range_bytes <= 0:
        raise ValueError("range_bytes must be positive")
    return [t for node in nodes for f in node.files for t in file_tasks(node, f, range_bytes)]


# -- decoding one range (executor) ------------------------------------------------------------

CHUNK_ROWS = 65536  # valid-message rows per Arrow batch (about; a window's worth more at most)


def _msg_id(f) -> str:
    """The offsetMsgId of a record.scan_summary() tuple (offset_msg_id() without ipaddress)."""
    return f"{record.msg_id_prefix(f[STORE_HOST])}{f[PHYS]:016X}"


def _ok_row(meta, fname, f):
    """A valid message's row (COLUMNS) from a record.scan_summary() tuple."""
    return (*meta, fname, f[PHYS], f[SIZE], "ok", True, None, *_middle(f), _msg_id(f), *_props(f))


def decode_chunks(task, chunk_rows: int = CHUNK_ROWS, compiled: bool = False):
    """Yield (ok, other) for the records starting in [start, end) of one file (runs on an executor).

    ok: record.scan_summary() tuples of valid messages, in file order (with compiled: the same rows as
    a summary_columns.Columns); other: full rows (COLUMNS) of blanks and unreadable spans. Several
    chunks for a long range, each about chunk_rows messages.
    """
    if task.is_dledger:
        yield from dledger_log.decode_chunks(task, chunk_rows, compiled)
        return
    meta, path, base, length, mapped_size, start, end = (
        task.meta,
        task.path,
        task.base,
        task.length,
        task.mapped_size,
        task.start,
        task.end,
    )
    fname = os.path.basename(path)
    summary = record.scan_summary
    ok = CompiledSummaries(chunk_rows) if compiled else Summaries(chunk_rows)
    other = []
    rd = RangeReader(path, base, length, mapped_size)
    try:
        p = start if start == 0 else rd.find_sync(start, end)
        while p is not None and p < length:
            # The fast run: valid messages at their own position, inside the window, starting before
            # `end`. Anything else (a window edge, the range end, a blank, damage) is the step below.
            buf, i = rd.window(p, HEAD)
            at = base + rd.buf_start  # the physical offset of buf[0]
            lim = end - rd.buf_start
            while True:
                i = ok.walk(buf, i, lim, at)
                if not ok.full:
                    break
                yield ok.take(), other
                other = []
            p = rd.buf_start + i
            if p >= length:
                break
            r, buf, i = rd.scan(p)
            good = (
                r.kind == Scan.MESSAGE
                and r.message.physical_offset == base + p
                or r.kind == Scan.BLANK
                and r.size == mapped_size - p
            )
            if good and p >= end:
                break  # the next range starts here (it is a sync point)
            if r.kind == Scan.MESSAGE and r.message.physical_offset == base + p:
                ok.append(summary(buf, i)[2])
                p += r.size
                continue
            if r.kind == Scan.BLANK and good:
                other.append(
                    other_row(meta, fname, base + p, r.size, "blank", rcrc=zlib.crc32(memoryview(buf)[i : i + HEAD]))
                )
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
                    other.append(other_row(meta, fname, base + p, max(rd.data_end(p), p + 1) - p, "torn", reason))
                break
            other.append(other_row(meta, fname, base + p, q - p, "invalid", reason))
            p = q
    finally:
        rd.close()
    if len(ok) or other:
        yield ok.take(), other


def decode_range(task: DecodeTask) -> list[tuple]:
    """Rows (COLUMNS) for the records starting in [start, end) of one file, in file order."""
    meta, fname = task.meta, os.path.basename(task.path)
    rows = []
    for ok, other in decode_chunks(task):
        rows += [_ok_row(meta, fname, f) for f in ok]
        rows += other
    rows.sort(key=lambda r: r[5])
    return rows


# -- Arrow batches (executor) -------------------------------------------------------------------


def _arrow_types():
    import pyarrow as pa

    return {"string": pa.string(), "int": pa.int32(), "long": pa.int64(), "boolean": pa.bool_()}


@functools.lru_cache(maxsize=None)  # per range task otherwise: a task of a small range paid more for it than
def arrow_schema():  # for its records (pyarrow schemas are immutable)
    import pyarrow as pa

    kinds = _arrow_types()
    return pa.schema([pa.field(n, kinds[k]) for n, k in COLUMNS])


# What decode() sends to the JVM instead of COLUMNS: the columns that are the same for a whole file (node,
# broker, role, file name) become one file_index, and valid (status == "ok") is left out; decode() puts
# them back as expressions, evaluated only where a query reads them. Spark copies every column of every
# row that mapInArrow returns (an UnsafeProjection of the whole batch): six fewer saved ~1/5 of its CPU.
_PER_FILE_COLUMNS = ("node", "broker_name", "broker_id", "role", "file")
WIRE_COLUMNS = [("file_index", "int")] + [c for c in COLUMNS if c[0] not in _PER_FILE_COLUMNS + ("valid",)]


def spark_wire_schema():
    """wire_schema() as the Spark StructType mapInArrow is given."""
    from pyspark.sql import types as T

    kinds = {f.name: f.dataType for f in schema().fields}
    return T.StructType(
        [T.StructField(name, T.IntegerType() if kind == "int" else kinds[name], True) for name, kind in WIRE_COLUMNS]
    )


@functools.lru_cache(maxsize=None)
def wire_schema():
    import pyarrow as pa

    kinds = _arrow_types()
    return pa.schema([pa.field(n, kinds[k]) for n, k in WIRE_COLUMNS])


@functools.lru_cache(maxsize=None)
def _summary_struct(pa):
    """record.SUMMARY_FIELDS as an Arrow struct (each field typed as the column of that name): pyarrow
    converts the scan_summary tuples itself."""
    kinds = dict(_arrow_types(), binary=pa.binary())
    types = dict(COLUMNS, store_host_raw="binary")
    return pa.struct([pa.field(n, kinds[types[n]]) for n in record.SUMMARY_FIELDS])


_HEX = b"0123456789ABCDEF"


def _msg_ids(pa, hosts, phys, ok):
    """The offsetMsgId column: store host hex + physical offset as 16 hex digits, built with numpy when
    the batch has one store host (the usual case: a node's log holds its master's host)."""
    import pyarrow.compute as pc

    if len(pc.unique(hosts)) != 1:
        return pa.array([_msg_id(f) for f in ok], pa.string())
    import numpy as np

    n = len(phys)
    prefix = record.msg_id_prefix(hosts[0].as_py()).encode()
    width = len(prefix) + 16
    raw = phys.to_numpy().astype(">u8").view(np.uint8).reshape(n, 8)
    out = np.empty((n, width), np.uint8)
    out[:, : len(prefix)] = np.frombuffer(prefix, np.uint8)
    digits = np.frombuffer(_HEX, np.uint8)
    out[:, len(prefix) :: 2] = digits[raw >> 4]
    out[:, len(prefix) + 1 :: 2] = digits[raw & 15]
    offsets = np.arange(0, n * width + 1, width, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(out)])


def _constants(meta, fname, file_index=None) -> dict:
    """The columns that are the same for every valid-message row of a file."""
    return {
        "node": meta[0],
        "broker_name": meta[1],
        "broker_id": meta[2],
        "role": meta[3],
        "file": fname,
        "status": "ok",
        "valid": True,
        "file_index": file_index,
    }


def _ok_batch(pa, schema, struct, const, ok):
    """One RecordBatch of valid-message rows from scan_summary tuples (const: _constants())."""
    n = len(ok)
    fields = pa.array(ok, type=struct)  # tuples -> columns in C++ (no Python-level transpose)
    col = {name: fields.field(k) for k, name in enumerate(record.SUMMARY_FIELDS)}
    col["msg_id"] = _msg_ids(pa, col["store_host_raw"], col["physical_offset"], ok)
    arrays = []
    for f in schema:
        if f.name in col:
            arrays.append(col[f.name])
        elif f.name in const:
            arrays.append(pa.repeat(pa.scalar(const[f.name], f.type), n))
        else:
            arrays.append(pa.nulls(n, f.type))  # reason
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _columns_batch(pa, schema, const, cols):
    """One RecordBatch of valid-message rows from a summary_columns.Columns (no Python per row)."""
    import numpy as np
    from rmqha.broker.store import summary_columns as sc

    n = cols.n
    ints, strs = set(sc.INT_FIELDS), set(sc.STR_FIELDS)
    arrays = []
    for f in schema:
        if f.name in ints:
            v = cols.ints_of(f.name)
            arrays.append(pa.array(v.astype(np.int32) if f.type == pa.int32() else v, f.type))
        elif f.name in strs:
            offs, data, valid = cols.strings(f.name)
            bitmap = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
            arrays.append(pa.Array.from_buffers(pa.string(), n, [bitmap, pa.py_buffer(offs), pa.py_buffer(data)]))
        elif f.name in const:
            arrays.append(pa.repeat(pa.scalar(const[f.name], f.type), n))
        else:
            arrays.append(pa.nulls(n, f.type))  # reason
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


# Which record walk arrow_batches() uses: "python", the reference (record.scan_summary per record); "compiled",
# rmqha.broker.store.summary_columns (numba) when importable; "auto" (the default): the reference until this
# process has decoded COMPILED_AFTER_BYTES of records with it, then the compiled walk. Importing numba costs
# ~0.5 s per Python worker and its first compile ~7 s per checkout: a small audit (a test, a short chaos
# run) is done before that pays back. The rows are the same either way.
DECODER_ENV = "RMQHA_AUDIT_DECODER"
COMPILED_AFTER_BYTES = 256 << 20
_REFERENCE_BYTES = [0]  # record bytes this process decoded with the reference (for "auto")


def compiled_available() -> bool:
    """Whether the compiled decoder (rmqha.broker.store.summary_columns: numba) can run here."""
    try:
        from rmqha.broker.store import summary_columns  # noqa: F401
    except Exception:  # numba missing, or one that cannot compile here: the reference decoder runs
        return False
    return True


def use_compiled(compiled: bool | None = None) -> bool:
    """compiled if given, else the environment's choice (DECODER_ENV); False when numba is not here."""
    if compiled is None:
        choice = os.environ.get(DECODER_ENV, "auto").strip().lower()
        if choice == "python":
            return False
        compiled = choice == "compiled" or _REFERENCE_BYTES[0] >= COMPILED_AFTER_BYTES
    return compiled and compiled_available()


def arrow_batches(task, chunk_rows: int = CHUNK_ROWS, compiled: bool | None = None, file_index: int | None = None):
    """pyarrow.RecordBatch objects (arrow_schema()) for one range task. compiled: the compiled walk
    (None: use_compiled()'s choice) or the reference (scan_summary tuples); the rows are the same.
    With file_index: wire_schema() batches (what decode() sends), the file's columns as that index."""
    import pyarrow as pa

    full = arrow_schema()
    schema, struct = (full if file_index is None else wire_schema()), _summary_struct(pa)
    meta, fname = task.meta, os.path.basename(task.path)
    const = _constants(meta, fname, file_index)
    compiled = use_compiled(compiled)
    for ok, other in decode_chunks(task, chunk_rows, compiled):
        if len(ok) and compiled:
            yield _columns_batch(pa, schema, const, ok)
        elif len(ok):
            _REFERENCE_BYTES[0] += sum(f[SIZE] for f in ok)
            yield _ok_batch(pa, schema, struct, const, ok)
        if other:
            cols = {f.name: pa.array(c, f.type) for f, c in zip(full, zip(*other))}
            cols["file_index"] = pa.repeat(pa.scalar(file_index, pa.int32()), len(other))
            yield pa.RecordBatch.from_arrays([cols[f.name] for f in schema], schema=schema)


def decode_file(node: Node, f, range_bytes: int | None = None) -> list[tuple]:
    """Decode a whole file (or its ranges in turn) in this process: for tests and small tools."""
    return [r for t in file_tasks(node, f, range_bytes or max(f.length, 1)) for r in decode_range(t)]


# -- the DataFrame ----------------------------------------------------------------------------


def _have_pyarrow() -> bool:
    try:
        import pyarrow  # noqa: F401
        from pyspark.sql.pandas.utils import require_minimum_pyarrow_version

        require_minimum_pyarrow_version()
    except ImportError:
        return False
    return True


def _lazy_zip_invalidation():
    """Make importlib.invalidate_caches() cheap for zip archives in this (Python worker) process.

    pyspark's worker calls importlib.invalidate_caches() at the start of every task, and Python 3.10 and
    3.11's zipimport then re-reads the whole directory of every zip on the path, once per importer (13
    of them for pyspark.zip and py4j's zip): 0.1-0.3 s of CPU per task here, more than decoding 64 MiB.
    CPython 3.12 made that lazy (gh-103200); here an archive is re-read only if its size or mtime
    changed since this process last read it."""
    import sys
    import zipimport

    cls = zipimport.zipimporter
    if sys.version_info >= (3, 12) or getattr(cls.invalidate_caches, "_lazy", False):
        return
    eager, cache, seen = cls.invalidate_caches, zipimport._zip_directory_cache, {}

    def invalidate_caches(self):
        try:
            st = os.stat(self.archive)
            key = (st.st_mtime_ns, st.st_size)
        except OSError:
            key = None
        if key is not None and seen.get(self.archive) == key and self.archive in cache:
            self._files = cache[self.archive]  # what the last read of this unchanged archive found
            return
        eager(self)
        seen[self.archive] = key

    invalidate_caches._lazy = True
    cls.invalidate_caches = invalidate_caches


def decode(
    spark,
    nodes: list[Node],
    range_bytes: int | None = None,
    use_arrow: bool | None = None,
    compiled: bool | None = None,
):
    """A DataFrame of every record of every node (COLUMNS). Lazy: nothing is read until an action.

    At most TASKS_PER_CORE partitions per core, each decoding one or more tasks: a store of many small
    files (64 KiB commit-log files in a disk-full run: hundreds per node) must not cost one Spark task,
    ~0.3 s of fixed overhead, per file. With pyarrow (use_arrow None: when importable), each task's rows
    go to the JVM as Arrow record batches through mapInArrow; without it, as pickled rows (createDataFrame).
    compiled: the record walk of the Arrow path (None: DECODER_ENV decides, see use_compiled()).
    """
    parallelism = spark.sparkContext.defaultParallelism
    if range_bytes is None:
        range_bytes = auto_range_bytes(nodes, parallelism)
    tasks = plan(nodes, range_bytes)
    n = max(1, min(len(tasks), parallelism * TASKS_PER_CORE))
    if use_arrow is None:
        use_arrow = _have_pyarrow()
    if use_arrow:
        from pyspark.sql import functions as F

        files = {}  # (node meta, file name) -> file_index
        index = [files.setdefault((t.meta, os.path.basename(t.path)), len(files)) for t in tasks]

        def run(batches, tasks=tasks, index=index, compiled=compiled):
            _lazy_zip_invalidation()
            for b in batches:
                for t in b.column(0).to_pylist():
                    yield from arrow_batches(tasks[t], compiled=compiled, file_index=index[t])

        kinds = {f.name: f.dataType for f in schema().fields}
        per_file = {name: [meta[k] for meta, _ in files] for k, name in enumerate(_PER_FILE_COLUMNS[:-1])}
        per_file["file"] = [fname for _, fname in files]
        wire = spark_wire_schema()
        at = F.col("file_index") + 1

        def column(name):
            if name in per_file:
                return F.element_at(F.array(*[F.lit(v) for v in per_file[name]]), at).cast(kinds[name]).alias(name)
            if name == "valid":
                return (F.col("status") == "ok").alias(name)
            return F.col(name)

        # spark.range over the task ids in n slices: each partition decodes the tasks whose ids it holds
        return spark.range(0, len(tasks), 1, n).mapInArrow(run, wire).select(*[column(c) for c, _ in COLUMNS])
    rdd = spark.sparkContext.parallelize(tasks, n).flatMap(decode_range)
    return spark.createDataFrame(rdd, schema(), verifySchema=False)
