"""A hand-built oracle for RocketMQ 4.9's index files, written from the layout and rules alone (IndexFile,
IndexHeader, IndexService of rocketmq-all-4.9.8), sharing no code with rmqha/broker/store/index.py.

Layout (big-endian): a 40-byte header (beginTimestamp q, endTimestamp q, beginPhyOffset q, endPhyOffset q,
hashSlotCount i, indexCount i), `slots` 4-byte slots, `items` 20-byte items (keyHash i, phyOffset q,
timeDiff i, prevIndex i). Item numbers start at 1.
"""

from __future__ import annotations

import errno

import datetime
import struct

from rmqha.broker.store.index import IndexSettings
from rmqha.broker.store.message_store import MessageStore
from rmqha.broker.store.record import Message

INT_MAX = 2**31 - 1


def java_hash(s: str) -> int:
    """String.hashCode: h = 31*h + c over UTF-16 code units, 32-bit two's complement."""
    units = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (h * 31 + (units[i] << 8 | units[i + 1])) % 2**32
    return h - 2**32 if h >= 2**31 else h


def abs_hash(s: str) -> int:
    """Math.abs(hashCode), with Integer.MIN_VALUE (whose abs stays negative) taken as 0."""
    h = java_hash(s)
    return 0 if h == -(2**31) else abs(h)


def name_at(ms: int) -> str:
    """yyyyMMddHHmmssSSS, local time."""
    return datetime.datetime.fromtimestamp(ms // 1000).strftime("%Y%m%d%H%M%S") + "%03d" % (ms % 1000)


def key_with_min_value_hash(prefix: str) -> str:
    """A string starting with `prefix` whose String.hashCode() is Integer.MIN_VALUE: prefix + 5 chars
    c1..c5 with sum(c_i * 31^(5-i)) = MIN_VALUE - hash(prefix) * 31^5 (mod 2^32), every char >= '!'."""
    weights = [31**4, 31**3, 31**2, 31, 1]
    target = (-(2**31) - java_hash(prefix) * 31**5 - 0x21 * sum(weights)) % 2**32
    digits = []
    for w in weights:
        digits.append(target // w)
        target -= digits[-1] * w
    s = prefix + "".join(chr(0x21 + d) for d in digits)
    assert java_hash(s) == -(2**31) and max(digits) < 0xD800 - 0x21
    return s


class OracleFile:
    def __init__(self, name: str, slots: int, items: int, prev_end_phy: int = 0, prev_end_ts: int = 0):
        self.name, self.nslots, self.nitems = name, slots, items
        # A new file starts where the last one ended; hashSlotCount and indexCount stay 0 on disk.
        self.begin_ts = self.end_ts = prev_end_ts
        self.begin_phy = self.end_phy = prev_end_phy
        self.slot_count = 0
        self.count = 1
        self.count_on_disk = 0
        self.slots = [0] * slots
        self.items: dict[int, tuple[int, int, int, int]] = {}

    @property
    def full(self) -> bool:
        return self.count >= self.nitems

    def put(self, key: str, phy: int, ts: int) -> bool:
        if self.full:
            return False
        h = abs_hash(key)
        s = h % self.nslots
        prev = self.slots[s] if 0 < self.slots[s] <= self.count else 0
        if self.begin_ts <= 0:
            diff = 0
        else:
            diff = max(0, min((ts - self.begin_ts) // 1000 if ts >= self.begin_ts else 0, INT_MAX))
        self.items[self.count] = (h, phy, diff, prev)
        self.slots[s] = self.count
        if self.count == 1:
            self.begin_phy, self.begin_ts = phy, ts
        if prev == 0:
            self.slot_count += 1
        self.count += 1
        self.count_on_disk = self.count
        self.end_phy, self.end_ts = phy, ts
        return True

    def bytes(self) -> bytes:
        out = bytearray(
            struct.pack(
                ">qqqqii", self.begin_ts, self.end_ts, self.begin_phy, self.end_phy, self.slot_count, self.count_on_disk
            )
        )
        for v in self.slots:
            out += struct.pack(">i", v)
        for i in range(self.nitems):
            out += struct.pack(">iqii", *self.items.get(i, (0, 0, 0, 0)))
        assert len(out) == 40 + 4 * self.nslots + 20 * self.nitems
        return bytes(out)


class OracleIndex:
    """IndexService.buildIndex over OracleFiles: the last file, or a new one when it is full or absent,
    is taken for every record; ROLLBACK records and records before the last file's end are skipped;
    UNIQ_KEY first, then each non-empty KEYS entry split on ' '."""

    def __init__(self, slots: int, items: int):
        self.nslots, self.nitems = slots, items
        self.files: list[OracleFile] = []

    def _last(self, now: int) -> OracleFile:
        if self.files and not self.files[-1].full:
            return self.files[-1]
        prev = self.files[-1] if self.files else None
        name = name_at(now)
        if prev is not None and name <= prev.name:
            name = str(int(prev.name) + 1)
        f = OracleFile(name, self.nslots, self.nitems, prev.end_phy if prev else 0, prev.end_ts if prev else 0)
        self.files.append(f)
        return f

    def record(self, topic: str, phy: int, ts: int, props: dict, now: int, sys_flag: int = 0) -> None:
        f = self._last(now)
        if phy < f.end_phy or sys_flag & 0xC == 0xC:
            return
        keys = []
        if props.get("UNIQ_KEY"):
            keys.append(props["UNIQ_KEY"])
        keys += [k for k in (props.get("KEYS") or "").split(" ") if k]
        for k in keys:
            while not f.put(f"{topic}#{k}", phy, ts):
                f = self._last(now)


class Clock:
    """now_ms for a store: a value the test sets."""

    def __init__(self, t: int = 1_700_000_000_000):
        self.t = t

    def __call__(self) -> int:
        return self.t


def open_store(root, clock, slots=16, items=8, enable=True, file_size=1 << 20) -> MessageStore:
    s = MessageStore(
        str(root),
        commitlog_file_size=file_size,
        cq_file_size=20 * 1000,
        now_ms=clock,
        index=IndexSettings(enable, slots, items),
    )
    s.start()
    return s


def message(
    i: int, topic: str = "T", keys: str | None = None, uniq: bool = True, size: int = 40, sys_flag: int = 0
) -> Message:
    props = {}
    if uniq:
        props["UNIQ_KEY"] = f"U{i:05d}"
    if keys is not None:
        props["KEYS"] = keys
    return Message(topic=topic, body=(f"m{i}-".encode() * size)[:size], properties=props, sys_flag=sys_flag)


def index_files(root) -> dict[str, bytes]:
    d = root / "index"
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())} if d.exists() else {}


def crash(store) -> None:
    """Stop as a killed process would: no flush, no checkpoint, no header rewrite, the abort file stays."""
    import os

    store.commitlog.close()
    for cq in store.queues.values():
        cq.close()
    store.index.close()
    os.close(store._lock_fd)
    store.closed = True


def fail_index_write(monkeypatch, nth_write: int):
    """Make the index's (nth_write + 1)-th file write fail with ENOSPC; returns a function that heals it."""
    from rmqha.broker.store import index

    real_write = index.FileBacking.write
    writes = [0]

    def failing_write(self, pos, data):
        writes[0] += 1
        if writes[0] == nth_write + 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(self, pos, data)

    monkeypatch.setattr(index.FileBacking, "write", failing_write)
    return lambda: monkeypatch.setattr(index.FileBacking, "write", real_write)
