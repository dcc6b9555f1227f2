"""The message index (RocketMQ 4.9's IndexService): messages by key and store time, on master and slave.

Every stored record's UNIQ_KEY and each of its KEYS (split on a space) is indexed as "topic#key",
whether the record was written here (master) or replicated and dispatched (slave), so both build the
same files from the same commit log. Records whose sysflag says transaction ROLLBACK are skipped, as
the reference's buildIndex does (it indexes PREPARED ones).

Files: <storePathRootDir>/index/<yyyyMMddHHmmssSSS>, named by the local time of their creation (the
reference's UtilAll.timeMillisToHumanString) and read oldest first, in name order. Each file is
40 + maxHashSlotNum*4 + maxIndexNum*20 bytes, created sparse at full size. Big-endian:

    header (40 bytes)  beginTimestamp i8 | endTimestamp i8 | beginPhyOffset i8 | endPhyOffset i8
                       | hashSlotCount i4 | indexCount i4
    slots              maxHashSlotNum x i4: the number of the newest item whose key hashes there (0: none)
    items              maxIndexNum x 20 bytes: keyHash i4 | phyOffset i8 | timeDiff i4 | prevIndex i4

keyHash is |String.hashCode()| of "topic#key" (Integer.MIN_VALUE, whose Math.abs is negative, becomes
0); the slot is keyHash % maxHashSlotNum; items are numbered from 1 (indexCount starts at 1, item 0 is
never used and 0 means "none"); prevIndex chains the items of one slot, newest first; timeDiff is the
store time in whole seconds after beginTimestamp. A file holds maxIndexNum - 1 items; then the next one
is created, starting where it ended (beginPhyOffset/beginTimestamp = its end). Rules, quirks included,
are the reference's (IndexFile.putKey, selectPhyOffset, IndexService.queryOffset).

The index service over these files, with their recovery, is rmqha/broker/store/index_service.py.

Writes go through os.pwrite (a full disk is an error to answer, never a SIGBUS); reads through a
read-only shared mapping of the same file. The core (IndexFile) only sees a `view` to read and a
`write(pos, data)`, so tests can run it on memory.
"""

from __future__ import annotations

import mmap
import os
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from . import record
from .mapped_file import StoreError, fsync_directory


HEADER = struct.Struct(">qqqqii")  # beginTimestamp endTimestamp beginPhyOffset endPhyOffset hashSlotCount indexCount
HEADER_SIZE = HEADER.size  # 40
SLOT = struct.Struct(">i")
SLOT_SIZE = SLOT.size  # 4
ITEM = struct.Struct(">iqii")  # keyHash phyOffset timeDiff prevIndex
ITEM_SIZE = ITEM.size  # 20
INVALID_INDEX = 0
INT_MAX = (1 << 31) - 1
INT_MIN = -(1 << 31)
KEY_SEPARATOR = " "  # MessageConst.KEY_SEPARATOR
MAX_FILE_SIZE = INT_MAX  # a Java MappedFile's size is an int

# MessageStoreConfig defaults
DEFAULT_MAX_HASH_SLOT_NUM = 5_000_000
DEFAULT_MAX_INDEX_NUM = 5_000_000 * 4
MAX_MSGS_NUM_BATCH = 64  # maxMsgsNumBatch: the most offsets one query returns
DEFAULT_QUERY_MAX_NUM = 32  # defaultQueryMaxNum: maxNum of a query by UNIQ_KEY (_UNIQUE_KEY_QUERY=true)
# Ours: the most index items one query reads. A slot's chain holds every item of every key that hashes
# there; the reference walks it all (a frequent key can make that millions). Beyond this many items
# a query answers with what it found.
MAX_ITEMS_WALKED = 200_000
# The most keys one record can have: its properties are at most 32767 bytes, each key takes two or more.
MAX_KEYS_PER_RECORD = record.MAX_PROPERTIES_BYTES // 2 + 1


@dataclass(frozen=True)
class IndexSettings:
    """messageIndexEnable, maxHashSlotNum, maxIndexNum (MessageStoreConfig names and defaults)."""

    enable: bool = True
    max_hash_slot_num: int = DEFAULT_MAX_HASH_SLOT_NUM
    max_index_num: int = DEFAULT_MAX_INDEX_NUM

    @property
    def file_size(self) -> int:
        return HEADER_SIZE + self.max_hash_slot_num * SLOT_SIZE + self.max_index_num * ITEM_SIZE

    def problem(self) -> str | None:
        """None when a file can be laid out with these numbers, else what is wrong."""
        if self.max_hash_slot_num < 1:
            return f"maxHashSlotNum={self.max_hash_slot_num}: must be at least 1"
        if self.max_index_num < 2:
            return f"maxIndexNum={self.max_index_num}: must be at least 2 (item 0 is never used)"
        if self.file_size > MAX_FILE_SIZE:
            return (
                f"maxHashSlotNum={self.max_hash_slot_num} and maxIndexNum={self.max_index_num} make "
                f"index files of {self.file_size} bytes, over {MAX_FILE_SIZE}: "
                "40 + maxHashSlotNum*4 + maxIndexNum*20 must fit in a Java int"
            )
        return None


DEFAULT_INDEX_SETTINGS = IndexSettings()  # frozen: one shared default is safe


# -- the reference's pure rules ---------------------------------------------------------------------


def key_hash(key: str) -> int:
    """IndexFile.indexKeyHashMethod: Math.abs(key.hashCode()), and 0 when that is still negative."""
    h = record.java_string_hash(key)
    return 0 if h == INT_MIN else abs(h)


def index_key(topic: str, key: str) -> str:
    """IndexService.buildKey."""
    return f"{topic}#{key}"


_POW31 = [pow(31, k, 1 << 32) for k in range(4097)]  # 31^k mod 2^32
_prefix_hashes: dict[str, int] = {}  # topic -> String.hashCode of "topic#", unsigned


def key_hashes(topic: str, uniq_key: str | None, keys: str | None) -> list[int]:
    """[key_hash(k) for k in keys_of(topic, uniq_key, keys)], without building the "topic#key" strings:
    String.hashCode(p + k) = hashCode(p) * 31^len(k) + hashCode(k) (mod 2^32), len in UTF-16 units,
    so "topic#" is hashed once per topic (for ASCII keys; any other key is hashed whole)."""
    prefix = _prefix_hashes.get(topic)
    if prefix is None:
        if len(_prefix_hashes) > 4096:
            _prefix_hashes.clear()
        prefix = _prefix_hashes[topic] = record.java_string_hash(topic + "#") & 0xFFFFFFFF
    out = []
    parts = [uniq_key] if uniq_key is not None else []
    if keys:
        parts.extend(k for k in keys.split(KEY_SEPARATOR) if k)
    jhash = record.java_string_hash
    for k in parts:
        if k.isascii() and len(k) <= 4096:
            h = (prefix * _POW31[len(k)] + jhash(k)) & 0xFFFFFFFF
            if h & 0x80000000:
                h -= 1 << 32
        else:
            h = jhash(index_key(topic, k))
        out.append(0 if h == INT_MIN else abs(h))
    return out


def keys_of(topic: str, uniq_key: str | None, keys: str | None) -> list[str]:
    """The index keys of one record, in the order buildIndex puts them: UNIQ_KEY, then each KEYS entry
    (String.split(" ") drops empty entries, as does its length check)."""
    out = []
    if uniq_key is not None:
        out.append(index_key(topic, uniq_key))
    if keys:
        out.extend(index_key(topic, k) for k in keys.split(KEY_SEPARATOR) if k)
    return out


def indexed(sys_flag: int) -> bool:
    """buildIndex returns early for TRANSACTION_ROLLBACK_TYPE only."""
    return sys_flag & record.TRANSACTION_MASK != record.TRANSACTION_ROLLBACK


def file_name(ms: int) -> str:
    """UtilAll.timeMillisToHumanString: yyyyMMddHHmmssSSS in local time."""
    t = time.localtime(ms // 1000)
    return f"{t.tm_year:04d}{t.tm_mon:02d}{t.tm_mday:02d}{t.tm_hour:02d}{t.tm_min:02d}{t.tm_sec:02d}{ms % 1000:03d}"


def time_diff(store_ts: int, begin_ts: int) -> int:
    """putKey's timeDiff: whole seconds after the file's beginTimestamp, 0 while it has none, clamped."""
    if begin_ts <= 0:
        return 0
    if store_ts < begin_ts:
        return 0  # Java's long division truncates toward zero; a negative result is clamped to 0
    return min((store_ts - begin_ts) // 1000, INT_MAX)


@dataclass
class QueryOffsetResult:
    phy_offsets: list[int]
    index_last_update_timestamp: int
    index_last_update_phyoffset: int


# -- one file ---------------------------------------------------------------------------------------


class Backing(Protocol):
    """Where an IndexFile's bytes live: a view to read, write(pos, data) to write."""

    @property
    def view(self) -> bytearray | mmap.mmap: ...

    def write(self, pos: int, data: bytes) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


B = TypeVar("B", bound=Backing)


class MemoryBacking:
    """An index file's bytes in memory (for tests of the core)."""

    def __init__(self, size: int):
        self.view = bytearray(size)
        self.writes = 0

    def write(self, pos: int, data: bytes) -> None:
        self.view[pos : pos + len(data)] = data
        self.writes += 1

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


class FileBacking:
    """An index file on disk: pwrite to write, a read-only shared mapping to read."""

    def __init__(self, path: str, size: int, create: bool):
        self.path = path
        self.fd = os.open(path, os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0), 0o644)
        try:
            if create:
                os.ftruncate(self.fd, size)  # sparse, as a Java MappedFile makes it
                # its length and its name durable now (POSIX: the name only through its directory): a
                # power cut took the whole file, and the keys later flushed into it, otherwise
                os.fsync(self.fd)
                fsync_directory(os.path.dirname(path) or ".")
            else:
                actual = os.fstat(self.fd).st_size
                if actual != size:
                    raise StoreError(
                        f"{path} is {actual} bytes, but maxHashSlotNum and maxIndexNum make index files of "
                        f"{size} bytes: set the values it was written with, or delete the index directory "
                        "to have it rebuilt from the commit log"
                    )
            self.view = mmap.mmap(self.fd, size, prot=mmap.PROT_READ)
        except BaseException:
            os.close(self.fd)
            raise
        self.writes = 0  # bumped by the writer; flush() syncs when it moved (see IndexService.flush)
        self.synced_writes = 0

    def write(self, pos: int, data: bytes) -> None:
        n = os.pwrite(self.fd, data, pos)
        if n != len(data):
            raise OSError(f"short write to {self.path}: {n} of {len(data)} bytes at {pos}")
        self.writes += 1

    def flush(self) -> None:
        w = self.writes
        if w != self.synced_writes:
            os.fdatasync(self.fd)
            self.synced_writes = w

    def close(self) -> None:
        if self.fd >= 0:
            self.view.close()
            os.close(self.fd)
            self.fd = -1


class _Batch:
    """The writes put_keys() collected for one file since IndexFile.begin()."""

    __slots__ = ("first", "items", "slots", "saved")

    def __init__(self, first: int, saved: tuple[int, int, int, int, int, int]):
        self.first = first  # the number of the first item collected
        self.items = bytearray()
        self.slots: dict[int, int] = {}  # slot position -> its new value (the newest item there)
        self.saved = saved  # the header fields at begin(), put back when a write fails


class IndexFile(Generic[B]):
    """One index file's header, slots and items, and the reference's operations on them."""

    def __init__(self, name: str, backing: B, slot_num: int, index_num: int):
        self.name = name
        self.backing = backing
        self.slot_num = slot_num
        self.index_num = index_num
        self.items_at = HEADER_SIZE + slot_num * SLOT_SIZE
        self.begin_ts = self.end_ts = self.begin_phy = self.end_phy = 0
        self.slot_count = 0
        self.count = 1
        self._batch: _Batch | None = None

    # header
    def start(self, end_phy: int, end_ts: int) -> None:
        """A new file, continuing from the last one's end. As in the reference, only the fields given
        are written; hashSlotCount and indexCount stay 0 on disk until the first key."""
        if end_phy > 0:
            self.begin_phy = self.end_phy = end_phy
        if end_ts > 0:
            self.begin_ts = self.end_ts = end_ts
        self.backing.write(0, HEADER.pack(self.begin_ts, self.end_ts, self.begin_phy, self.end_phy, 0, 0))

    def load(self) -> None:
        (self.begin_ts, self.end_ts, self.begin_phy, self.end_phy, self.slot_count, self.count) = HEADER.unpack_from(
            self.backing.view, 0
        )
        if self.count <= 0:
            self.count = 1

    def _write_header(self) -> None:
        self.backing.write(
            0, HEADER.pack(self.begin_ts, self.end_ts, self.begin_phy, self.end_phy, self.slot_count, self.count)
        )

    @property
    def full(self) -> bool:
        return self.count >= self.index_num

    @property
    def items(self) -> int:
        return self.count - 1

    # slots and items
    def _slot_pos(self, h: int) -> int:
        return HEADER_SIZE + (h % self.slot_num) * SLOT_SIZE

    def slot(self, h: int) -> int:
        value: int = SLOT.unpack_from(self.backing.view, self._slot_pos(h))[0]
        return value

    def item(self, i: int) -> tuple[int, int, int, int]:
        """(keyHash, phyOffset, timeDiff, prevIndex) of item i."""
        return ITEM.unpack_from(self.backing.view, self.items_at + i * ITEM_SIZE)

    # writing
    def put_key(self, key: str, phy: int, store_ts: int) -> bool:
        """IndexFile.putKey: False when the file is full."""
        return self.put_keys([key_hash(key)], phy, store_ts) == 1

    def put_keys(self, hashes: list[int], phy: int, store_ts: int) -> int:
        """IndexFile.putKey for the keys of one record (their hashes, in order), as many as the file has
        room for; returns how many. Each key as the reference puts it (its slot's item, or none, is its
        prevIndex; the first item of the file sets the begin fields after its own timeDiff); written as
        the record's items in one write, then their slots, then the header. A process stopped in
        between leaves items and slots past indexCount, which repair() undoes; a failed write leaves
        this object as it was.

        Inside begin()/commit() nothing is written here: the items, the slots and the header of every
        record put in between go out at commit(), in that order (one write for the items, one per slot
        touched, one for the header), so a batch of records costs what one record costs."""
        count = self.count
        n = min(len(hashes), self.index_num - count)
        if n <= 0:
            return 0
        batch = self._batch
        own = batch is None
        if batch is None:
            batch = self.begin()
        view, nslots = self.backing.view, self.slot_num
        begin_phy, begin_ts, slot_count = self.begin_phy, self.begin_ts, self.slot_count
        items, slots = batch.items, batch.slots
        for h in hashes[:n]:
            pos = HEADER_SIZE + (h % nslots) * SLOT_SIZE
            prev = slots.get(pos)
            if prev is None:
                prev = SLOT.unpack_from(view, pos)[0]
                if prev <= INVALID_INDEX or prev > count:
                    prev = INVALID_INDEX
            items += ITEM.pack(h, phy, time_diff(store_ts, begin_ts), prev)
            slots[pos] = count
            if count <= 1:
                begin_phy, begin_ts = phy, store_ts
            if prev == INVALID_INDEX:
                slot_count += 1
            count += 1
        self.begin_phy, self.begin_ts, self.slot_count, self.count = begin_phy, begin_ts, slot_count, count
        self.end_phy, self.end_ts = phy, store_ts
        if own:
            self.commit()
        return n

    def begin(self) -> _Batch:
        """Start collecting the writes of put_keys() until commit()."""
        self._batch = _Batch(
            self.count, (self.begin_ts, self.end_ts, self.begin_phy, self.end_phy, self.slot_count, self.count)
        )
        return self._batch

    def commit(self) -> None:
        """Write what put_keys() collected since begin(): the items, each slot touched, the header. A
        failed write (OSError) puts this object back as it was at begin() and is raised."""
        batch, self._batch = self._batch, None
        if batch is None or not batch.items:
            return
        write = self.backing.write
        try:
            write(self.items_at + batch.first * ITEM_SIZE, bytes(batch.items))
            for pos, value in batch.slots.items():
                write(pos, SLOT.pack(value))
            write(0, HEADER.pack(self.begin_ts, self.end_ts, self.begin_phy, self.end_phy, self.slot_count, self.count))
        except BaseException:
            (self.begin_ts, self.end_ts, self.begin_phy, self.end_phy, self.slot_count, self.count) = batch.saved
            raise

    # reading
    def time_matched(self, begin: int, end: int) -> bool:
        """IndexFile.isTimeMatched."""
        return (
            (begin < self.begin_ts and end > self.end_ts)
            or self.begin_ts <= begin <= self.end_ts
            or self.begin_ts <= end <= self.end_ts
        )

    def select(self, h: int, max_num: int, begin: int, end: int, out: list[int], budget: list[int]) -> None:
        """IndexFile.selectPhyOffset: follow the slot's chain, newest first, adding the offsets of items
        with this key hash stored within [begin, end]. Stops at maxNum, at the chain's end, at the first
        item older than begin, and (ours) when an item does not point to an older one or the query's
        item budget is spent, so a damaged file cannot loop."""
        cur = self.slot(h)
        if cur <= INVALID_INDEX or cur > self.count or self.count <= 1:
            return
        while len(out) < max_num and budget[0] > 0:
            budget[0] -= 1
            h_read, phy, diff, prev = self.item(cur)
            if diff < 0:
                break
            t = self.begin_ts + diff * 1000
            if h_read == h and begin <= t <= end:
                out.append(phy)
            if prev <= INVALID_INDEX or prev > self.count or prev >= cur or t < begin:
                break
            cur = prev

    def trailing_items_at(self, phy: int) -> tuple[int, bool]:
        """How many of the newest items point at `phy`, and whether every item of the file does."""
        n = 0
        for i in range(self.count - 1, 0, -1):
            if self.item(i)[1] != phy:
                return n, False
            n += 1
        return n, True

    # recovery
    def repair(self) -> int:
        """Undo what a put stopped part way left past indexCount: its items (the keys of one record, or
        of several in commit-log order when it was a batch, written before their slots) are zeroed, and
        each slot already pointing at one of them goes back down its chain to the newest item
        indexCount covers. Returns the slots put back. (An all-zero item is a written one only for a
        record at offset 0, which can only come first: those are walked too, to the most keys a record
        can have, since such an item's slot, 0, may have been written.)"""
        count = self.count
        if count >= self.index_num:
            return 0
        end = self._in_flight_end(count)
        fixed = 0
        written_to = count
        for i in range(count, end):
            h, phy, diff, prev = self.item(i)
            if h or phy or diff or prev:
                written_to = i + 1
            v = self.slot(h)
            if v >= count:
                for _ in range(end - count + 1):  # in-flight items point to older ones
                    v = self.item(v)[3] if v < self.index_num else INVALID_INDEX
                    if v < count:
                        break
                self.backing.write(self._slot_pos(h), SLOT.pack(v if 0 <= v < count else INVALID_INDEX))
                fixed += 1
        if written_to > count:
            self.backing.write(self.items_at + count * ITEM_SIZE, bytes((written_to - count) * ITEM_SIZE))
        return fixed

    def _in_flight_end(self, count: int) -> int:
        """The end of the items an interrupted put may have left from item `count` on: non-zero items
        whose offsets do not go down (one batch's records, in commit-log order), after the all-zero
        items a record at offset 0 may have written first."""
        last_phy = 0
        i = count
        while i < self.index_num:
            h, phy, diff, prev = self.item(i)
            if h or phy or diff or prev:
                if phy < last_phy:
                    break
                last_phy = phy
            elif last_phy or i - count >= MAX_KEYS_PER_RECORD:
                break
            i += 1
        return i

    def roll_back(self, limit: int, ts_at: Callable[[int], int | None]) -> int:
        """Undo the newest items whose offset is `limit` or more, the exact inverse of put_key: the
        slot goes back to the item's prevIndex, hashSlotCount down when that is 0, the item zeroed.
        The new endTimestamp is the store time of the record the last item left points at
        (ts_at(phy), or begin + timeDiff when that record cannot be read). Returns the items undone."""
        undone = 0
        while self.count > 1:
            i = self.count - 1
            h, phy, _diff, prev = self.item(i)
            if phy < limit:
                break
            if self.slot(h) == i:
                self.backing.write(self._slot_pos(h), SLOT.pack(prev))
            if prev == INVALID_INDEX:
                self.slot_count -= 1
            self.backing.write(self.items_at + i * ITEM_SIZE, bytes(ITEM_SIZE))
            self.count -= 1
            undone += 1
        if undone and self.count > 1:
            _h, phy, diff, _prev = self.item(self.count - 1)
            ts = ts_at(phy)
            self.end_phy = phy
            self.end_ts = ts if ts is not None else self.begin_ts + diff * 1000
            self._write_header()
        return undone


# -- the service ------------------------------------------------------------------------------------

# A record for IndexService.build_records: (topic, sysflag, store time, keys, stored bytes, offset), keys
# (UNIQ_KEY, KEYS), or their key_hashes, or None to read them from the stored bytes (then given).
IndexRecord = tuple[str, int, int, "tuple[str | None, str | None] | list[int] | None", "record.BytesLike | None", int]
