"""IndexService: the index files of a store (rmqha/broker/store/index.py holds their format and IndexFile),
built from dispatched records, queried by key and time, recovered after a crash.

Recovery (ours, equivalent to the reference's): the reference deletes, after a crash, every file
written after the checkpoint's indexMsgTimestamp (the end time of the last full file, forced to disk)
and re-dispatches the commit log from the file that timestamp selects. We keep every file and make it
exact instead: (1) what a record being put left past indexCount (its items, some of its slots: a crash
before its header) is undone, each slot back down its chain through the items' prevIndex; (2) items
pointing at or past the recovered commit log's end (a power loss cut the log) are undone, newest first,
restoring each slot to the item's prevIndex, and a file left without an item is deleted (the next
record makes it again); (3) the commit log is re-indexed from the last indexed record (endPhyOffset of
the last file) to its end; that record's keys already present (the newest items with its offset) are
not put again. So the index always ends with the commit log, and a rebuild from any earlier point gives
the same bytes.
The checkpoint's indexMsgTimestamp (bytes 16..23) is still written with the reference's meaning
(`checkpoint_timestamp`), for a Java broker opening the store.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from . import record
from .index import (
    MAX_ITEMS_WALKED,
    MAX_MSGS_NUM_BATCH,
    DEFAULT_INDEX_SETTINGS,
    FileBacking,
    IndexFile,
    IndexRecord,
    IndexSettings,
    QueryOffsetResult,
    file_name,
    index_key,
    indexed,
    key_hash,
    key_hashes,
    keys_of,
)
from .mapped_file import StoreError, make_dirs

if TYPE_CHECKING:
    from .commitlog import CommitLog

log = logging.getLogger("rmqha.broker.store.index")


@dataclass
class IndexRecovery:
    repaired: int = 0  # slots put back from a record half put when the process stopped
    undone: int = 0  # items pointing at or past the commit log's end, undone
    deleted: list[str] = field(default_factory=list)  # files left with no item, deleted
    start: int = -1  # commit-log offset the rebuild walked from (-1: none)
    records: int = 0  # records walked by the rebuild
    keys: int = 0  # keys put by the rebuild


class IndexService:
    """The index files of a store and the reference's build and query rules over them."""

    def __init__(
        self, directory: str, settings: IndexSettings = DEFAULT_INDEX_SETTINGS, now_ms: Callable[[], int] | None = None
    ):
        why = settings.problem()
        if why:
            raise StoreError(f"message index: {why}")
        self.directory = directory
        self.settings = settings
        self.now_ms = now_ms or (lambda: int(time.time() * 1000))
        self.files: list[IndexFile[FileBacking]] = []
        self.error = ""  # set when a write failed: building stops until a restart rebuilds the rest
        self.checkpoint_timestamp = 0  # the reference's indexMsgTimestamp: end time of the last full file
        self.recovery: IndexRecovery | None = None
        self._batching = False  # inside build_records(): files collect their writes until committed

    # -- files ------------------------------------------------------------------------------------
    def _open(self, name: str, create: bool) -> IndexFile[FileBacking]:
        s = self.settings
        backing = FileBacking(os.path.join(self.directory, name), s.file_size, create)
        return IndexFile(name, backing, s.max_hash_slot_num, s.max_index_num)

    def load(self) -> None:
        """Open every index file, oldest first (IndexService.load sorts by name)."""
        if not os.path.isdir(self.directory):
            return
        for name in sorted(os.listdir(self.directory)):
            if not (name.isascii() and name.isdigit()):
                log.warning("ignoring %s: not an index file name", os.path.join(self.directory, name))
                continue
            f = self._open(name, create=False)
            f.load()
            self.files.append(f)
        self.checkpoint_timestamp = max((f.end_ts for f in self.files if f.full), default=0)

    def _new_file_name(self) -> str:
        name = file_name(self.now_ms())
        if self.files:
            last = self.files[-1].name
            if (len(name), name) <= (len(last), last):
                name = str(int(last) + 1).zfill(len(last))  # same millisecond, or a clock set back
        return name

    def _writable_file(self) -> IndexFile[FileBacking]:
        """IndexService.getAndCreateLastIndexFile: the last file, or a new one after it when it is
        full (or when there is none)."""
        if self.files and not self.files[-1].full:
            f = self.files[-1]
            if self._batching and f._batch is None:
                f.begin()
            return f
        prev = self.files[-1] if self.files else None
        if prev is not None:
            prev.commit()  # a batch's writes to the full file go out before the next file is made
        make_dirs(self.directory, sync=True)
        f = self._open(self._new_file_name(), create=True)
        f.start(prev.end_phy if prev else 0, prev.end_ts if prev else 0)
        self.files.append(f)
        if prev is not None:
            log.info("index file %s is full (%d items); continuing in %s", prev.name, prev.items, f.name)
        if self._batching:
            f.begin()
        return f

    def _delete(self, f: IndexFile[FileBacking]) -> None:
        f.backing.close()
        os.unlink(f.backing.path)
        self.files.remove(f)

    # -- building ---------------------------------------------------------------------------------
    def build(self, phy: int, info: record.IndexInfo) -> int:
        """IndexService.buildIndex for the record at commit-log offset `phy`; returns the keys put."""
        if not self.settings.enable or self.error:
            return 0
        uniq_key, keys = info.index_keys()
        return self._build(phy, info.topic, info.sys_flag, info.store_timestamp, keys_of(info.topic, uniq_key, keys))

    def build_record(self, phy: int, buf: record.BytesLike, msg: record.Message | None = None) -> int:
        """build() for a record just stored (the master's path): its stored bytes `buf`, and the message
        it was encoded from. The keys are taken from the message's properties when they read back the
        same from the stored text (no separator inside a name or value: always, for what clients send),
        else from the stored bytes, as a slave reads them."""
        if not self.settings.enable or self.error:
            return 0
        if msg is not None and record.properties_round_trip(msg.properties):
            props = msg.properties
            return self._build(
                phy,
                msg.topic,
                msg.sys_flag,
                msg.store_timestamp,
                keys_of(msg.topic, props.get("UNIQ_KEY") or None, props.get("KEYS")),
            )
        kind, _size, info, reason = record.scan_index(buf, 0, False)
        if kind != record.Scan.MESSAGE or info is None:  # cannot happen for a record just encoded; never fail the put
            self.error = f"index build stopped at commit-log offset {phy}: not a record ({reason})"
            log.error("%s", self.error)
            return 0
        return self.build(phy, info)

    def build_records(self, records: Sequence[IndexRecord]) -> int:
        """Index records in commit-log order as one batch (the master's dispatch_pending, and a slave's
        dispatch with the keys its IndexInfo read from the stored bytes): each file's
        items, slots and header are written once for all of them (see IndexFile.begin); the same bytes
        as building them one by one with build_record(). Each record is (topic, sysflag, store time,
        keys, stored bytes, offset), keys its (UNIQ_KEY, KEYS) properties (or the list of their key_hashes,
        from the send fast path) when the stored text reads
        back the same (EncodedRecord.plain_properties: always, for what clients send), else None: then
        they are read from the stored bytes, as a slave reads them."""
        if not self.settings.enable or self.error or not records:
            return 0
        self._batching = True
        put = 0
        phy = records[0][-1]
        try:
            f = self._writable_file()
            for topic, sys_flag, store_ts, keys, buf, phy in records:
                if keys is None:
                    assert buf is not None  # no keys given: they are read from the stored bytes
                    put += self.build_record(phy, buf)
                    if self.error:
                        break
                    f = self._writable_file()
                    continue
                if f.full:  # as build_record would: the next file, even for a record with no key
                    f = self._writable_file()
                if phy < f.end_phy or sys_flag & record.TRANSACTION_MASK == record.TRANSACTION_ROLLBACK:
                    continue
                # keys: (UNIQ_KEY, KEYS), or their hashes already (the send fast path computes them)
                hashes = keys if isinstance(keys, list) else key_hashes(topic, keys[0], keys[1])
                done = f.put_keys(hashes, phy, store_ts) if hashes else 0
                while done < len(hashes):
                    f = self._writable_file()
                    done += f.put_keys(hashes[done:], phy, store_ts)
                put += done
        except (OSError, StoreError) as e:
            self._failed(phy, e)
        finally:
            self._batching = False
            if self.files:
                try:
                    self.files[-1].commit()
                except (OSError, StoreError) as e:
                    self._failed(records[0][-1], e)
                    put = 0
        return put

    def _build(self, phy: int, topic: str, sys_flag: int, store_ts: int, keys: list[str]) -> int:
        try:
            f = self._writable_file()
            if phy < f.end_phy or not indexed(sys_flag):
                return 0
            return self._put(f, phy, store_ts, keys)
        except (OSError, StoreError) as e:
            self._failed(phy, e)
            return 0

    def _put(self, f: IndexFile[FileBacking], phy: int, store_ts: int, keys: list[str]) -> int:
        """Put the keys of one record, rolling to a new file whenever one is full."""
        hashes = [key_hash(k) for k in keys]
        done = 0
        while done < len(hashes):
            done += f.put_keys(hashes[done:] if done else hashes, phy, store_ts)
            if done < len(hashes):
                f = self._writable_file()
        return done

    def _failed(self, phy: int, e: Exception) -> None:
        self.error = f"index build stopped at commit-log offset {phy}: {e}"
        log.error("%s; queries answer from what is indexed, a restart rebuilds the rest", self.error)

    def _rebuild_first(self, phy: int, info: record.IndexInfo, skip: int) -> int:
        """The rebuild's first record, whose first `skip` keys the index holds: the rest, if any."""
        uniq_key, keys = info.index_keys()
        rest = keys_of(info.topic, uniq_key, keys)[skip:]
        if not rest or not indexed(info.sys_flag):
            return 0
        try:
            return self._put(self._writable_file(), phy, info.store_timestamp, rest)
        except (OSError, StoreError) as e:
            self._failed(phy, e)
            return 0

    # -- recovery ---------------------------------------------------------------------------------
    def recover(self, commitlog: CommitLog) -> IndexRecovery:
        """Make the index end exactly where the recovered commit log ends (see the module docstring)."""
        rec = IndexRecovery()
        low, end = commitlog.min_offset, commitlog.max_offset
        if self.files:
            rec.repaired = self.files[-1].repair()
            if rec.repaired:
                log.warning(
                    "index: undid a record half put after item %d of %s (%d slots put back)",
                    self.files[-1].items,
                    self.files[-1].name,
                    rec.repaired,
                )

        def ts_at(phy: int) -> int | None:
            return record.store_timestamp(commitlog.read(phy, record.STORE_TIMESTAMP_PEEK))

        while self.files:
            f = self.files[-1]
            rec.undone += f.roll_back(end, ts_at)
            if f.count > 1:
                break
            # No item (left): its header may point past the log, or be all zeros (a crash right after
            # the file was created); the next record creates it again, continuing the file before.
            rec.deleted.append(f.name)
            self._delete(f)
        if rec.undone:
            log.warning(
                "index: undid %d items pointing at or past the commit log's end %d%s",
                rec.undone,
                end,
                f" and deleted {', '.join(rec.deleted)}" if rec.deleted else "",
            )
        if self.settings.enable:
            self._rebuild(commitlog, low, end, rec)
        self.checkpoint_timestamp = max((f.end_ts for f in self.files if f.full), default=0)
        self.recovery = rec
        return rec

    def _rebuild(self, commitlog: CommitLog, low: int, end: int, rec: IndexRecovery) -> None:
        start, skip = low, 0
        if self.files and self.files[-1].end_phy >= low:  # every file left has items
            start = self.files[-1].end_phy
            skip = self._keys_present_at(start)
        if start >= end:
            return
        rec.start = start
        for at, kind, _size, info, reason in commitlog.walk(start, end, check_crc=False):
            if kind == record.Scan.MESSAGE:
                assert info is not None  # a MESSAGE carries its IndexInfo
                rec.records += 1
                rec.keys += self._rebuild_first(at, info, skip) if at == start and skip else self.build(at, info)
                if self.error:
                    break
            elif kind != record.Scan.BLANK:
                log.error("index rebuild stopped at %d: %s", at, reason)
                break
        if rec.records > 1 or rec.keys:
            log.info("index: re-indexed %d records (%d keys) of commit log [%d, %d)", rec.records, rec.keys, start, end)

    def _keys_present_at(self, phy: int) -> int:
        """How many keys of the record at `phy` are in the index: the newest items pointing at it, which
        may span a file roll."""
        n = 0
        for f in reversed(self.files):
            k, whole = f.trailing_items_at(phy)
            n += k
            if not whole:
                break
        return n

    # -- querying ---------------------------------------------------------------------------------
    def query(self, topic: str, key: str, max_num: int, begin: int, end: int) -> QueryOffsetResult:
        """IndexService.queryOffset: offsets of records indexed under topic#key and stored within
        [begin, end], newest file first, at most min(max_num, maxMsgsNumBatch)."""
        max_num = min(max_num, MAX_MSGS_NUM_BATCH)
        out: list[int] = []
        last_ts = last_phy = 0
        h = key_hash(index_key(topic, key))
        budget = [MAX_ITEMS_WALKED]
        for i in range(len(self.files) - 1, -1, -1):
            f = self.files[i]
            if i == len(self.files) - 1:
                last_ts, last_phy = f.end_ts, f.end_phy
            if f.time_matched(begin, end):
                f.select(h, max_num, begin, end, out, budget)
            if f.begin_ts < begin or len(out) >= max_num:
                break
        return QueryOffsetResult(out, last_ts, last_phy)

    # -- durability -------------------------------------------------------------------------------
    def flush(self) -> None:
        """fdatasync the files written since the last flush (from the flush thread: it only reads the
        list and each file's write counter). The reference forces a file when it is full and then
        records its end time as the checkpoint's indexMsgTimestamp; so do we."""
        for f in list(self.files):
            if f.backing.fd < 0:
                continue
            f.backing.flush()
            if f.full and f.end_ts > self.checkpoint_timestamp:
                self.checkpoint_timestamp = f.end_ts

    def close(self) -> None:
        for f in self.files:
            f.backing.close()

    def status(self) -> dict[str, int | str | None]:
        last = self.files[-1] if self.files else None
        return {
            "files": len(self.files),
            "items": last.items if last else 0,
            "endPhyOffset": last.end_phy if last else 0,
            "endTimestamp": last.end_ts if last else 0,
            "error": self.error or None,
        }
