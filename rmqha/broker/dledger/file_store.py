"""DLedgerMmapFileStore's files (dledger 0.3.1.2), behind the log interface replication.MemoryLog has.

Layout under `<storeBaseDir>/dledger-<selfId>/` (DLedgerConfig.getDefaultPath):

* `data/`  fixed-size files (mappedFileSizeForEntryData, 1 GiB by default) named by their first byte's
  offset in 20 digits; entries as entry.encode_entry, back to back; an entry that does not fit in
  what is left of a file *plus* MIN_BLANK_LEN goes to the next file and the tail becomes a blank
  (magic -1, int length of the tail, zeros).
* `index/` fixed-size files (mappedFileSizeForEntryIndex, 32 * 5 Mi), the 32-byte index entry of
  entry i at i * 32, never padded.
* `checkpoint`  java.util.Properties text, `committedIndex=..` and `endIndex=..` (Java 17's order;
  Java 8 writes endIndex first; either is read).
* `currterm`    `voteLeader=..` and `currTerm=..` (MemberState.persistTerm).

Files are created at full length (sparse) and written with pwrite rather than mapped: the bytes on
disk are the same, and a process that dies after a write leaves it in the page cache, as an mmap
store does.

Durability (what a crash keeps):

* A process crash (kill -9) loses nothing written: every append is in the page cache before it is
  acknowledged (the data entry first, then its index entry, then the ack). This is the property
  test's crash model (tests/unit/dledger/sim.py reopens the store in place of a kept log).
* Power loss: as in 0.3.1.2 the data and index files are fsynced every flushFileInterval (10 ms) by
  `flush()`, which the driver calls on a timer, not per append, so a power loss on a majority can
  lose the last ~10 ms of acknowledged appends. `sync_every_append=True` fsyncs data then index
  before an append returns (and so before its ack): then an acknowledged append survives power loss.
* `currterm` is written to a temp file, fsynced, renamed and its directory fsynced before the driver
  sends anything that depends on it (0.3.1.2 renames without fsync): a vote must not be forgotten, or a
  node could vote twice in one term.
* Names (not in 0.3.1.2, which never fsyncs a directory): a data or index file is created at full
  length, fsynced, and its directory fsynced before anything is written into it, and a directory
  is fsynced after files in it are removed (truncate, rebuild). On POSIX a new file's name survives
  a power cut only through an fsync of its directory: without it a cut took the whole log with it,
  every entry in a file created since the store was last made durable (crashfs, --fs-semantics posix;
  ext4's journal commits the name with the file's own fsync, so 0.3.1.2 gets away with it there).
  A removed file whose removal is not durable comes back after a cut, with entries that were cut.
* Durable positions (not in 0.3.1.2): each file list's `durable` is the offset before which every
  byte was on disk when its last fsync returned; a cut lowers it first. `durable` (a 16-byte file:
  data and index positions, big-endian longs) is rewritten after each change and read, after a
  SIGKILL, by the power-loss simulation (rmqha/cluster/handle.py power_loss, docs/chaos.md). Opening a
  store fsyncs what recovery kept, so the positions start true.

Recovery (DLedgerMmapFileStore.recover): start at the third-to-last data file (going back while its
first entry does not match its index entry), walk the entries checking magic, size, pos, index
continuity and term order against the index; stop at the first entry that fails, or whose index
slot was never written (a torn tail: the index entry is written after the data, and the append was
not acknowledged before both). An index entry that is present but differs, or an index file that is
missing, is rebuilt from the data, as 0.3.1.2 does. Data and index are cut at the last good entry and
the cut-off bytes zeroed. The committed index comes back from `checkpoint` (never past the end).

Departures from 0.3.1.2, each to keep a restart from reading stale bytes: truncation zeroes what it
cuts (0.3.1.2 only moves the write position, so a later recovery can read a cut entry back if the new
entries happen to line up with the old), an unwritten index slot ends recovery instead of being
rebuilt from possibly torn data, and `currterm` is fsynced.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable

from .entry import (
    BLANK_MAGIC_CODE,
    BODY_OFFSET,
    CURRENT_MAGIC,
    HEADER_SIZE,
    INDEX_UNIT_SIZE,
    MAGIC_1,
    MIN_BLANK_LEN,
    DLedgerEntry,
    EntryFormatError,
    decode_entry,
    decode_index,
    encode_entry,
    encode_index,
)
from .protocol import DLedgerError, ResponseCode, check_index
from rmqha.broker.store.mapped_file import fsync_directory, make_dirs

DEFAULT_DATA_FILE_SIZE = 1024 * 1024 * 1024
DEFAULT_INDEX_FILE_SIZE = INDEX_UNIT_SIZE * 5 * 1024 * 1024
CHECK_POINT_FILE = "checkpoint"
TERM_PERSIST_FILE = "currterm"
DURABLE_FILE = "durable"  # not DLedger's: (data, index) durable positions, for power-loss simulation
DURABLE_RECORD = struct.Struct(">qq")
# The largest entry index whose index-file position (index * INDEX_UNIT_SIZE) is a signed 64-bit offset, as
# DLedger's long positions are: a header claiming more (or a negative index) is garbage, and the walk of a
# recovery stops there (the fuzzer's dledger_entry found both crashing the store's start).
MAX_RECOVERED_INDEX = (2**63 - 1) // INDEX_UNIT_SIZE - 1
_ZERO_CHUNK = 64 * 1024


class StoreError(DLedgerError):
    def __init__(self, message: str):
        super().__init__(ResponseCode.DISK_ERROR, message)


def offset_to_file_name(offset: int) -> str:
    """DLedgerUtils.offset2FileName."""
    return f"{offset:020d}"


class _File:
    def __init__(self, path: str, start: int, size: int, create: bool):
        self.path, self.start, self.size = path, start, size
        self.fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
        if create:
            os.ftruncate(self.fd, size)
            os.fsync(self.fd)  # its length durable: a cut must not leave a short file that load() refuses
            fsync_directory(os.path.dirname(path))  # and its name (POSIX: only through its directory)
        self.wrote = size if not create else 0  # a loaded file counts as full until recovery cuts it

    def close(self) -> None:
        os.close(self.fd)


class FileList:
    """MmapFileList: one directory of equal-size files that together hold one byte sequence."""

    def __init__(self, path: str, file_size: int):
        self.path, self.file_size = path, file_size
        self.files: list[_File] = []
        self.start_offset = 0  # MmapFile.startPosition of the first file, moved by rebuild_with_pos
        # Bytes before this offset were on disk when the last fsync returned (what a power cut keeps);
        # cuts lower it, since the zeros and new bytes they leave are not on disk until the next sync.
        self.durable = 0

    def load(self) -> None:
        make_dirs(self.path, sync=True)
        for name in sorted(os.listdir(self.path)):
            full = os.path.join(self.path, name)
            if not name.isdigit() or not os.path.isfile(full):
                continue
            length = os.path.getsize(full)
            if length != self.file_size:
                raise StoreError(f"{full} is {length} bytes, the configured file size is {self.file_size}")
            f = _File(full, int(name), self.file_size, create=False)
            if self.files and f.start - self.files[-1].start != self.file_size:
                raise StoreError(f"{full} does not follow {self.files[-1].path}")
            self.files.append(f)

    def close(self) -> None:
        for f in self.files:
            f.close()
        self.files = []

    @property
    def max_wrote(self) -> int:
        return self.files[-1].start + self.files[-1].wrote if self.files else 0

    @property
    def min_offset(self) -> int:
        return self.files[0].start + self.start_offset if self.files else 0

    def _new_file(self, start: int) -> _File:
        f = _File(os.path.join(self.path, offset_to_file_name(start)), start, self.file_size, create=True)
        self.files.append(f)
        return f

    def pre_append(self, length: int, use_blank: bool = True) -> int:
        """Where an append of `length` bytes will go; pads the last file with a blank if it must."""
        last = self.files[-1] if self.files else None
        if last is None or last.wrote == last.size:
            last = self._new_file(last.start + self.file_size if last else 0)
        blank = MIN_BLANK_LEN if use_blank else 0
        if length + blank > last.size - last.wrote:
            if not use_blank:
                raise StoreError(f"{length} bytes do not fit the {last.size - last.wrote} left in {last.path}")
            tail = last.size - last.wrote
            os.pwrite(last.fd, BLANK_MAGIC_CODE.to_bytes(4, "big", signed=True) + tail.to_bytes(4, "big"), last.wrote)
            last.wrote = last.size
            last = self._new_file(last.start + self.file_size)
            if length + blank > last.size:
                raise StoreError(f"an entry of {length} bytes does not fit a {last.size}-byte file")
        return last.start + last.wrote

    def append(self, data: bytes, use_blank: bool = True) -> int:
        pos = self.pre_append(len(data), use_blank)
        last = self.files[-1]
        os.pwrite(last.fd, data, last.wrote)
        last.wrote += len(data)
        return pos

    def _file_at(self, offset: int) -> _File | None:
        if not self.files or offset < self.files[0].start:
            return None
        i = (offset - self.files[0].start) // self.file_size
        return self.files[i] if i < len(self.files) else None

    def read(self, offset: int, size: int) -> bytes | None:
        f = self._file_at(offset)
        rel = offset - f.start if f else 0
        if f is None or rel + size > f.wrote:
            return None
        return os.pread(f.fd, size, rel)

    def read_raw(self, offset: int, size: int) -> bytes:
        """Bytes at `offset` whatever the write position (recovery reads loaded files)."""
        f = self._file_at(offset)
        if f is None:
            return b""
        rel = offset - f.start
        return os.pread(f.fd, max(0, min(size, f.size - rel)), rel)

    def truncate(self, offset: int) -> None:
        """MmapFileList.truncateOffset, zeroing the bytes it cuts (see the module docstring). A negative
        offset removes every file (rebuild_with_pos, which then sets start_offset)."""
        keep = []
        removed = False
        for f in self.files:
            if offset < f.start:  # the file starts past the cut (so it ends past it too)
                f.close()
                os.unlink(f.path)
                removed = True
                continue
            if f.start <= offset < f.start + self.file_size:
                _zero(f, offset - f.start, f.wrote)
                f.wrote = offset - f.start
            keep.append(f)
        self.files = keep
        if removed:  # else a cut brings the removed files back, with the entries they held
            fsync_directory(self.path)
        self.durable = max(0, min(self.durable, offset))

    def rebuild_with_pos(self, pos: int) -> None:
        """MmapFileList.rebuildWithPos: nothing overlaps, the list starts again at `pos`."""
        self.truncate(-1)
        f = self._new_file(pos - pos % self.file_size)
        f.wrote = self.start_offset = pos - f.start
        self.durable = pos  # the old files are gone; nothing of the new log is on disk yet

    def sync(self, files: list[_File] | None = None) -> None:
        """fsync every file written since the last sync (`files`: these instead); `durable` moves to
        where the writes ended before the first fsync began, and only once the last one returned."""
        end = self.max_wrote
        todo = files if files is not None else [f for f in self.files if f.start + f.size > self.durable]
        for f in todo:
            os.fsync(f.fd)
        self.durable = end


def _zero(f: _File, start: int, end: int) -> None:
    """Zero [start, end); with end past what this session wrote (a loaded file), zero 64 KiB chunks
    until one already reads as zeros."""
    loaded = end >= f.size
    pos = start
    while pos < min(end, f.size):
        n = min(_ZERO_CHUNK, f.size - pos, end - pos)
        if loaded and os.pread(f.fd, n, pos) == bytes(n):
            break
        os.pwrite(f.fd, bytes(n), pos)
        pos += n


def _properties(text: str) -> dict[str, str]:
    """The subset of java.util.Properties.load that IOUtils.properties2String writes."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        key, value = (line[:sep], line[sep + 1 :]) if sep >= 0 else (line, "")
        out[key.strip()] = value.strip()
    return out


def _write_file(path: str, text: str, sync: bool) -> None:
    """IOUtils.string2File: the old content to .bak, the new through .tmp and a rename. sync (ours): the
    new content fsynced before the rename, and the directory after it (the rename itself is durable
    only then: a power cut would otherwise bring the old file back)."""
    if os.path.exists(path):
        with open(path, "rb") as old, open(path + ".bak", "wb") as bak:
            bak.write(old.read())
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        if sync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if sync:
        fsync_directory(os.path.dirname(path) or ".")


class FileStore:
    """DLedgerMmapFileStore with MemoryLog's interface (begin_index, end_index, end_term,
    committed_index, get, append_as_leader, append_as_follower, truncate, set_committed_index)."""

    def __init__(
        self,
        store_base_dir: str,
        self_id: str,
        *,
        data_file_size: int = DEFAULT_DATA_FILE_SIZE,
        index_file_size: int = DEFAULT_INDEX_FILE_SIZE,
        sync_every_append: bool = False,
        data_path: str | None = None,  # storePathDLedgerCommitLog (DLedgerConfig.dataStorePath)
    ):
        if index_file_size % INDEX_UNIT_SIZE:
            raise ValueError(f"index file size {index_file_size} is not a multiple of {INDEX_UNIT_SIZE}")
        self.path = os.path.join(store_base_dir, f"dledger-{self_id}")
        self.data = FileList(data_path or os.path.join(self.path, "data"), data_file_size)
        self.index = FileList(os.path.join(self.path, "index"), index_file_size)
        self.sync_every_append = sync_every_append
        self.begin_index = -1
        self.end_index = -1
        self.end_term = -1
        self.committed_index = -1
        self.dirty = False  # written since the last flush()
        self.recovered_from: dict[str, int] = {}  # what recovery found, for logs and tests
        # DLedgerMmapFileStore's AppendHook: (body, pos) -> body of the same length, run on the leader
        # after the entry's pos is chosen and before its bytes are written (4.9 patches the message's
        # PHYSICALOFFSET, pos + 48, into the body); followers store the leader's bytes as they are.
        self.append_hook: Callable[[bytes, int], bytes] | None = None
        # called with the position a TRUNCATE cut the data at (the leader's entry is written from there):
        # what was built from the cut entries (the broker's consume queues) must follow the log down
        self.truncate_hook: Callable[[int], object] | None = None
        self.data.load()
        self.index.load()
        self._durable_fd = -1
        self._recover()
        # What recovery kept (and the zeros it wrote) goes to disk now, so the durable positions start
        # true: a crash leaves its last writes in the page cache only.
        self.data.sync(self.data.files)
        self.index.sync(self.index.files)  # self.path exists: index.load() made it, durably
        self._durable_fd = os.open(os.path.join(self.path, DURABLE_FILE), os.O_RDWR | os.O_CREAT, 0o644)
        self._record_durable()

    # --- the log interface ----------------------------------------------------------------------
    def _pos_size(self, index: int) -> tuple[int, int]:
        check_index(index, self.begin_index, self.end_index)
        raw = self.index.read(index * INDEX_UNIT_SIZE, INDEX_UNIT_SIZE)
        if raw is None:
            raise StoreError(f"Get null index for {index}")
        ie = decode_index(raw)
        return ie.pos, ie.size

    def get(self, index: int) -> DLedgerEntry:
        pos, size = self._pos_size(index)
        raw = self.data.read(pos, size)
        if raw is None:
            raise StoreError(f"Get null data for {index}")
        entry = decode_entry(raw)
        if entry.pos != pos:
            raise StoreError(f"{pos} != {entry.pos}")
        return entry

    def entries(self) -> list[DLedgerEntry]:
        return [self.get(i) for i in range(self.begin_index, self.end_index + 1)] if self.end_index >= 0 else []

    def _write(self, entry: DLedgerEntry, data: bytes) -> None:
        index_pos = self.index.append(
            encode_index(entry.pos, len(data), entry.magic, entry.index, entry.term), use_blank=False
        )
        if index_pos != entry.index * INDEX_UNIT_SIZE:
            raise StoreError(f"index {entry.index} written at {index_pos}")
        self.dirty = True
        if self.sync_every_append:
            self.flush()
        self.end_index, self.end_term = entry.index, entry.term
        if self.begin_index == -1:
            self.begin_index = entry.index

    def append_as_leader(self, body: bytes, term: int) -> DLedgerEntry:
        entry = DLedgerEntry(body=bytes(body), index=self.end_index + 1, term=term, magic=CURRENT_MAGIC, pos=0)
        size = entry.compute_size()
        entry.pos = self.data.pre_append(size)
        if self.append_hook is not None:
            body = self.append_hook(entry.body, entry.pos)
            if len(body) != len(entry.body):
                raise StoreError(f"the append hook changed the body's length ({len(entry.body)} -> {len(body)})")
            entry.body = body
        data = encode_entry(entry)
        pos = self.data.append(data)
        if pos != entry.pos:
            raise StoreError(f"{pos} != {entry.pos}")
        self._write(entry, data)
        return entry.copy()

    def append_as_follower(self, entry: DLedgerEntry) -> DLedgerEntry:
        if entry.index != self.end_index + 1:
            raise DLedgerError(ResponseCode.INCONSISTENT_INDEX, f"{entry.index} != {self.end_index + 1}")
        if self.end_index >= 0 and entry.term < self.end_term:
            raise StoreError(f"term {entry.term} < {self.end_term}")
        stored = entry.copy()
        data = encode_entry(stored)
        if self.data.pre_append(len(data)) != stored.pos:  # checked before writing, unlike 0.3.1.2
            raise StoreError(f"pos {stored.pos} != {self.data.pre_append(len(data))}")
        self.data.append(data)
        self._write(stored, data)
        return stored.copy()

    def truncate(self, entry: DLedgerEntry) -> int:
        """DLedgerMmapFileStore.truncate: keep the log up to `entry`, writing it if it differs."""
        try:
            existed = self.get(entry.index) == entry
        except (DLedgerError, EntryFormatError):
            existed = False
        stored = entry.copy()
        data = encode_entry(stored)
        cut = stored.pos + stored.size if existed else stored.pos
        # at or before this log's start nothing of it is kept: the log begins again at the leader's entry,
        # whatever its index (a begin index kept from the old log would name entries that are gone)
        rebuilt = cut > self.data.max_wrote or cut <= self.data.min_offset
        # lowered on disk before anything is cut: a kill in the middle must not leave a record past the cut
        self._record_durable(min(self.data.durable, cut), min(self.index.durable, stored.index * INDEX_UNIT_SIZE))
        # an entry kept has its index slot cut and rewritten with the same bytes: still durable once written
        kept_index = min(self.index.durable, (stored.index + 1) * INDEX_UNIT_SIZE) if existed else 0
        if rebuilt:  # no overlap with the leader's log: start again at its entry
            self.data.rebuild_with_pos(cut)
        else:
            self.data.truncate(cut)
        if not existed and self.data.append(data) != stored.pos:
            raise StoreError(f"truncate wrote {entry.index} away from {stored.pos}")
        self._cut_index(stored.index * INDEX_UNIT_SIZE)
        self.end_index = stored.index - 1
        if rebuilt or self.begin_index == -1 or self.begin_index > stored.index:
            self.begin_index = -1
        self._write(stored, data)
        self.index.durable = max(self.index.durable, kept_index)
        self.committed_index = min(self.committed_index, self.end_index)
        self._record_durable()
        if self.truncate_hook is not None:
            self.truncate_hook(cut)
        return stored.index

    def set_committed_index(self, index: int) -> None:
        self.committed_index = index

    # --- term, checkpoint, flush ----------------------------------------------------------------
    def load_term(self) -> tuple[int, str | None]:
        """MemberState.loadTerm: (currTerm, voteLeader), (0, None) for a new node."""
        try:
            with open(os.path.join(self.path, TERM_PERSIST_FILE), encoding="utf-8") as f:
                props = _properties(f.read())
        except FileNotFoundError:
            return 0, None
        vote = props.get("voteLeader") or None
        return int(props.get("currTerm", "0")), vote

    def persist_term(self, term: int, vote_for: str | None) -> None:
        _write_file(
            os.path.join(self.path, TERM_PERSIST_FILE), f"voteLeader={vote_for or ''}\ncurrTerm={term}\n", sync=True
        )

    def persist_checkpoint(self) -> None:
        _write_file(
            os.path.join(self.path, CHECK_POINT_FILE),
            f"committedIndex={self.committed_index}\nendIndex={self.end_index}\n",
            sync=False,
        )

    def flush(self) -> None:
        """FlushDataService's work (every flushFileInterval, 10 ms). Data is synced before the index, so
        every durable index entry's data is durable."""
        self.data.sync()
        self.index.sync()
        self.dirty = False
        self._record_durable()

    @property
    def durable_positions(self) -> tuple[int, int]:
        """(data, index) offsets before which every byte was on disk when the last fsync returned."""
        return self.data.durable, self.index.durable

    def _record_durable(self, data: int | None = None, index: int | None = None) -> None:
        """Write the durable positions to `durable` (not fsynced: it is read after a SIGKILL, from the
        page cache, by the power-loss simulation: rmqha/cluster/handle.py power_loss)."""
        if self._durable_fd < 0:
            return
        d, i = self.durable_positions
        rec = DURABLE_RECORD.pack(d if data is None else data, i if index is None else index)
        os.pwrite(self._durable_fd, rec, 0)

    def _close_durable(self) -> None:
        if self._durable_fd >= 0:
            os.close(self._durable_fd)
            self._durable_fd = -1

    def close(self) -> None:
        """DLedgerMmapFileStore.shutdown: flush, checkpoint, close."""
        self.flush()
        self.persist_checkpoint()
        self._close_durable()
        self.data.close()
        self.index.close()

    def release(self) -> None:
        """Close the files without the shutdown's flush and checkpoint, as a killed process does."""
        self._close_durable()
        self.data.close()
        self.index.close()

    # --- recovery -------------------------------------------------------------------------------
    def _index_slot(self, entry_index: int) -> bytes | None:
        raw = self.index.read_raw(entry_index * INDEX_UNIT_SIZE, INDEX_UNIT_SIZE)
        return raw if len(raw) == INDEX_UNIT_SIZE else None

    def _first_entry_matches(self, f: _File) -> bool:
        try:
            e = decode_entry(self.data.read_raw(f.start, BODY_OFFSET), read_body=False)
            raw = self._index_slot(e.index)
            if e.pos != f.start or raw is None:
                return False
            ie = decode_index(raw)
            return (ie.magic, ie.pos, ie.size, ie.index, ie.term) == (e.magic, e.pos, e.size, e.index, e.term)
        except EntryFormatError:
            return False

    def _recover(self) -> None:
        files = self.data.files
        if not files:
            self.index.truncate(0)
            return
        start = max(0, len(files) - 3)
        while start > 0 and not self._first_entry_matches(files[start]):
            start -= 1
        f_i = start
        offset = files[f_i].start
        if start == 0:  # a log rebuilt at a pos inside its first file (rebuild_with_pos) starts past zeros
            offset = self._first_entry_offset(files[0])
            self.data.start_offset = offset - files[0].start
        last_index, last_term, first_walked = -1, -1, -1
        rewrite_index = False
        while True:
            f = files[f_i]
            rel = offset - f.start
            head = self.data.read_raw(offset, BODY_OFFSET)
            if len(head) >= 4 and int.from_bytes(head[:4], "big", signed=True) == BLANK_MAGIC_CODE:
                if f_i + 1 >= len(files):
                    offset = f.start + f.size
                    break
                f_i += 1
                offset = files[f_i].start
                continue
            try:
                e = decode_entry(head, read_body=False, strict=False)
            except EntryFormatError:
                break
            if e.size == 0:
                break
            if (
                e.pos != offset
                or e.size <= HEADER_SIZE
                or rel + e.size > f.size
                or not MAGIC_1 <= e.magic <= CURRENT_MAGIC
                or (last_index != -1 and e.index != last_index + 1)
                or not 0 <= e.index <= MAX_RECOVERED_INDEX  # garbage: its index slot would not be addressable
                or e.term < last_term
                or int.from_bytes(head[44:48], "big", signed=True) + BODY_OFFSET != e.size
            ):
                break
            if not rewrite_index:
                raw = self._index_slot(e.index)
                if raw is not None and raw == bytes(INDEX_UNIT_SIZE):
                    break  # the index entry was never written: a torn tail, never acknowledged
                ie = decode_index(raw) if raw is not None else None
                if ie is None or (ie.magic, ie.pos, ie.size, ie.index, ie.term) != (
                    e.magic,
                    e.pos,
                    e.size,
                    e.index,
                    e.term,
                ):
                    self._cut_index(e.index * INDEX_UNIT_SIZE)
                    rewrite_index = True
            if rewrite_index:
                self.index.append(encode_index(e.pos, e.size, e.magic, e.index, e.term), use_blank=False)
            last_index, last_term = e.index, e.term
            if first_walked == -1:
                first_walked = e.index
            offset += e.size
        self.recovered_from = {"file": start, "end_offset": offset, "end_index": last_index}
        self.data.truncate(offset)
        self._cut_index((last_index + 1) * INDEX_UNIT_SIZE)
        self.end_index, self.end_term = last_index, last_term
        self.begin_index = -1
        if last_index != -1:
            try:
                first = decode_entry(self.data.read_raw(self.data.min_offset, BODY_OFFSET), read_body=False).index
            except EntryFormatError:  # a blank or garbage where the log begins: it begins where the walk did
                first = first_walked
            if not 0 <= first <= first_walked:
                first = first_walked
            self.begin_index = first
            if self.index.files:
                self.index.start_offset = max(0, first * INDEX_UNIT_SIZE - self.index.files[0].start)
            self.get(last_index)  # the recheck recover() makes
        self.committed_index = -1
        try:
            with open(os.path.join(self.path, CHECK_POINT_FILE), encoding="utf-8") as fh:
                committed = int(_properties(fh.read()).get("committedIndex", "-1") or -1)
        except (FileNotFoundError, ValueError):
            committed = -1
        if committed >= 0 and self.end_index >= 0:
            self.committed_index = max(-1, min(committed, self.end_index))

    def _first_entry_offset(self, f: _File) -> int:
        """Where the first entry of the first data file starts. rebuild_with_pos (a follower whose log
        did not overlap the leader's) starts a log inside a new, zeroed file, and nothing on disk records
        where (MmapFile.startPosition lives in memory only): the first entry is the first non-zero
        byte's entry whose own pos field says it starts there. A file with no such entry starts at 0."""
        try:
            if decode_entry(self.data.read_raw(f.start, BODY_OFFSET), read_body=False).pos == f.start:
                return f.start
        except EntryFormatError:
            pass
        rel = 0
        while rel < f.size:
            chunk = os.pread(f.fd, min(_ZERO_CHUNK, f.size - rel), rel)
            stripped = chunk.lstrip(b"\0")
            if stripped:
                nz = rel + len(chunk) - len(stripped)
                for cand in range(max(0, nz - 3), nz + 1):  # the magic (1) is a big-endian int
                    try:
                        e = decode_entry(self.data.read_raw(f.start + cand, BODY_OFFSET), read_body=False)
                    except EntryFormatError:
                        continue
                    if e.pos == f.start + cand:
                        return f.start + cand
                return f.start
            rel += len(chunk)
        return f.start

    def _cut_index(self, offset: int) -> None:
        if offset > self.index.max_wrote or offset < self.index.min_offset or (not self.index.files and offset):
            self.index.rebuild_with_pos(offset)
        else:
            self.index.truncate(offset)
