"""The message store: commit log + consume queues + checkpoint/abort/lock files, and their recovery.

Master path: put_message() encodes and appends the record, with the queue offset it takes from the
store's topic-queue table (the reference's topicQueueTable: assigned at append time, so a send's reply
carries it at once). Its consume-queue unit and its index keys are built later, by dispatch_pending(),
for every record appended since the last one, in one batch (the reference's ReputMessageService): the
controller runs it on the next reactor turn (`dispatch_soon`); a bare store, with no one to schedule
it, runs it inside put_message. A message is visible to pulls, and wakes the pulls held for its queue
(dispatch_listeners), once dispatched. The commit log is the truth: after a crash recovery rebuilds
whatever was not dispatched.
Slave path: append_replicated() stores raw bytes from the master; a dispatcher then parses the
records that are complete and builds the consume queues from them, so the slave serves reads.
"""

from __future__ import annotations

import fcntl
import logging
import os
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rmqha.broker import fastpath
from rmqha.broker.support import validation
from rmqha.broker.support.log_limit import LogLimiter

from . import delay, record
from .commitlog import CommitLog, RecoveryReport
from .consume_queue import FILLER_SIZE, ConsumeQueue
from .index import DEFAULT_INDEX_SETTINGS, IndexRecord, IndexSettings
from .index_service import IndexService
from .mapped_file import DiskFullError, MappedFile, StoreError, create_durably, make_dirs
from .offset_lease import LEASE_FILE, QueueOffsetLease
from .outcome import PutResult as PutResult, PutStatus as PutStatus  # re-exported: importers read them here
from .record import BytesLike, Scan
from rmqha.broker.support.beans import forwarded

log = logging.getLogger("rmqha.broker.store")
_limiter = LogLimiter(log)

CHECKPOINT = struct.Struct(">qqq")
# After the reference's three timestamps: the commit-log offset the last fdatasync covered. The reference
# ignores the rest of the 4 KiB file. Written after each fdatasync and before any send waiting for it is
# answered, so after a SIGKILL the file (in the page cache) holds an offset at or past every send
# acknowledged as flushed: the chaos kit's power-loss fault reads it to drop exactly the unsynced bytes.
CHECKPOINT_DURABLE = struct.Struct(">q")
CHECKPOINT_DURABLE_AT = CHECKPOINT.size
CHECKPOINT_FILE_SIZE = 4096
# The most records put_message leaves undispatched (the controller dispatches once per reactor turn;
# this bounds one turn's batch and the memory it holds).
MAX_PENDING_RECORDS = 1024
# The transaction types that get a consume-queue unit (record.Message.gets_queue_entry).
_QUEUED_TYPES = frozenset({record.TRANSACTION_NOT_TYPE, record.TRANSACTION_COMMIT})

# A consume-queue unit to write: (queue offset, physical offset, size, tagsCode), ConsumeQueue.put_many's.
Unit = tuple[int, int, int, int]
# A record put_message (or put_sends) appended and dispatch_pending has not yet dispatched: (offset, size,
# consume queue or None, queue offset, the unit's tagsCode or TAGS, then for the index: topic, sysflag,
# store time, (UNIQ_KEY, KEYS) or the list of their index hashes (put_sends) or None to read them from the
# stored bytes, those bytes).
_Pending = tuple[
    int,
    int,
    "ConsumeQueue | None",
    int,
    "int | str | None",
    str,
    int,
    int,
    "tuple[str | None, str | None] | list[int] | None",
    "bytearray | None",
]


class GetStatus:
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass
class GetResult:
    status: str
    next_begin_offset: int
    min_offset: int
    max_offset: int
    records: list[bytes]


# Why a put is refused while the disk is marked full (the send processor says "service not available
# now: " before it, as 4.9.8's SendMessageProcessor says "service not available now. It may be caused by
# ... the broker's disk is full ...").
WRITE_REFUSED_REMARK = (
    "the broker's disk is full: past diskSpaceWarningLevelRatio of its disk, writes are refused until "
    "the retention service finds it below (store/retention.py)"
)
DISPATCH_READ_MARGIN = 64 << 10  # read past a dispatch slice's end, for the record that straddles it


class MessageStore:
    def __init__(
        self,
        root: str,
        commitlog_dir: str | None = None,
        *,
        commitlog_file_size: int = 1 << 30,
        cq_file_size: int = 300000 * 20,
        check_crc_on_recover: bool = True,
        store_host: tuple[str, int] = ("127.0.0.1", 10911),
        preallocate: bool = True,
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        index: IndexSettings = DEFAULT_INDEX_SETTINGS,
    ):
        self.root = root
        self.commitlog = CommitLog(commitlog_dir or os.path.join(root, "commitlog"), commitlog_file_size, preallocate)
        self.cq_root = os.path.join(root, "consumequeue")
        self.cq_file_size = cq_file_size
        self.check_crc = check_crc_on_recover
        self.store_host = store_host
        self.now_ms = now_ms
        # The message index (index/): built next to the consume queues, on master and slave alike.
        self.index = IndexService(os.path.join(root, "index"), index, now_ms=lambda: self.now_ms())
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        self.reput_offset = 0  # commit-log offset up to which consume queues are built
        self.dispatch_error: str = ""
        self.unqueueable_records = 0  # replicated or recovered records whose topic is not a valid name
        # The delay of each level (messageDelayLevel): where a DELAY message is stored and when due.
        self.delay_levels_ms: tuple[int, ...] = delay.parse_delay_levels(delay.DEFAULT_LEVELS)
        self.last_store_timestamp = 0
        # a seam only controls fill (skip-queue-entry): a unit is written only if this passes its queue offset
        self.unit_filter: Callable[[int], bool] | None = None
        # called with the new max offset after every append
        self.append_listeners: list[Callable[[int], object]] = []
        # called with (topic, queue_id) when units were added
        self.dispatch_listeners: list[Callable[[str, int], object]] = []
        # Master path: set by the controller to a callable that runs dispatch_pending() soon (on the next
        # reactor turn); None: put_message dispatches at once.
        self.dispatch_soon: Callable[[], object] | None = None
        # Records appended by put_message and not yet dispatched, in commit-log order (_Pending).
        self._pending: list[_Pending] = []
        # The next queue offset of each (topic, queue id) put_message appended to: ahead of the consume
        # queue by the records not yet dispatched. Filled from the queue when a key is first used.
        self.queue_offsets: dict[tuple[str, int], int] = {}
        self.lease = QueueOffsetLease(os.path.join(root, LEASE_FILE))  # every queue offset is leased first
        # Units a full disk kept out of their consume queue, written before any later one of that queue
        # at the next dispatch.
        self._unwritten_units: dict[ConsumeQueue, list[Unit]] = {}
        self._tag_codes: dict[str | None, int] = {}  # TAGS -> tagsCode, for the dispatch
        self.recovery: RecoveryReport | None = None
        self.was_clean_shutdown = True
        self._lock_fd = -1
        self.closed = False
        # Why puts are refused SERVICE_NOT_AVAILABLE ("" when they are not): the retention service marks
        # the disk full past diskSpaceWarningLevelRatio, as 4.9's DISK_FULL running flag (store/retention.py).
        self.write_refused = ""

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> RecoveryReport:
        make_dirs(self.root, sync=True)  # a new root survives a power cut
        self._take_lock()
        abort = os.path.join(self.root, "abort")
        self.was_clean_shutdown = not os.path.exists(abort)
        self.commitlog.load()
        self._load_queues()
        self.recovery = self._recover()
        self.index.load()
        self.index.recover(self.commitlog)  # after the log's recovery: the index ends where the log does
        self.lease.load()
        create_durably(abort)  # it must outlive a power cut, or the next start takes a crash for a clean shutdown
        return self.recovery

    def _take_lock(self) -> None:
        path = os.path.join(self.root, "lock")
        self._lock_fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._lock_fd)
            raise StoreError(
                f"another broker is using the store at {self.root} (it holds {path}); "
                "stop it, or give this broker its own storePathRootDir"
            ) from None

    def _load_queues(self) -> None:
        if not os.path.isdir(self.cq_root):
            return
        for topic in sorted(os.listdir(self.cq_root)):
            tdir = os.path.join(self.cq_root, topic)
            if validation.topic_problem(topic) or not os.path.isdir(tdir):
                log.warning("ignoring %s: not a consume-queue directory of a valid topic", tdir)
                continue
            for qid in sorted(os.listdir(tdir)):
                if qid.isdigit() and len(qid) <= 10:
                    cq = ConsumeQueue(self.cq_root, topic, int(qid), self.cq_file_size)
                    cq.load()
                    cq.recover()
                    self.queues[(topic, int(qid))] = cq

    def _recover(self) -> RecoveryReport:
        # Consume queues are recovered (in _load_queues), then the commit log; units that point past
        # the log's valid end are dropped, and every valid record the walk sees is dispatched again
        # idempotently, which rebuilds whatever a crash left out of the queues.
        report = self.commitlog.recover(self.check_crc, on_record=self._redispatch)
        end = report.end_offset
        dropped = 0
        for cq in self.queues.values():
            dropped += cq.truncate_beyond(end)
        if dropped:
            log.warning(
                "recovery: dropped %d consume-queue units that pointed past the commit log end %d", dropped, end
            )
        self.reput_offset = end
        if self.commitlog.min_offset:  # its first files were deleted (retention): older units are unreadable
            for cq in self.queues.values():
                cq.correct_min_offset(self.commitlog.min_offset)
        log.info(
            "store recovered: clean_shutdown=%s commitlog=[%d, %d) records_walked=%d queues=%d",
            self.was_clean_shutdown,
            self.commitlog.min_offset,
            end,
            report.records,
            len(self.queues),
        )
        return report

    def _redispatch(self, offset: int, info: record.IndexInfo) -> None:
        self.last_store_timestamp = info.store_timestamp
        if info.gets_queue_entry:
            cq = self._queue_for_record(info.topic, info.queue_id, offset)
            if cq is not None:
                cq.put(info.queue_offset, offset, info.size, self._unit_tags_code(info, offset))

    def _unit_tags_code(self, info: record.IndexInfo, offset: int) -> int:
        """A unit's tagsCode: the TAGS hash, or for SCHEDULE_TOPIC_XXXX the deliver time (rare: the
        record is read again for its DELAY property)."""
        if info.topic != delay.SCHEDULE_TOPIC:
            return info.tags_code
        msg = self.commitlog.message_at(offset, info.size)
        at = (
            None
            if msg is None
            else delay.deliver_time(
                self.delay_levels_ms, msg.properties.get(delay.PROPERTY_DELAY), info.store_timestamp
            )
        )
        return info.tags_code if at is None else at

    def _queue_for_record(self, topic: str, queue_id: int, offset: int) -> ConsumeQueue | None:
        """The queue of a stored record, or None (counted, logged once a minute) when its topic
        cannot be a directory name: such a record stays in the commit log, unreachable by pulls."""
        try:
            return self.queue(topic, queue_id)
        except StoreError as e:
            self.unqueueable_records += 1
            _limiter.log(
                logging.WARNING,
                ("unqueueable record",),
                "record at commit-log offset %d gets no consume-queue unit: %s",
                offset,
                e,
            )
            return None

    def shutdown(self) -> None:
        if self.closed:
            return
        self.dispatch_pending()  # a clean shutdown leaves the queues and the index complete
        self.closed = True
        try:
            self.flush()
            self._write_checkpoint()
            self.lease.tighten({k: cq.max_index for k, cq in self.queues.items()})
            os.unlink(os.path.join(self.root, "abort"))
        except OSError as e:
            log.error("store shutdown: %s (the next start will run crash recovery)", e)
        self.commitlog.close()
        for cq in self.queues.values():
            cq.close()
        self.index.close()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    # -- queues -----------------------------------------------------------------------------------
    def queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            cq = ConsumeQueue(self.cq_root, topic, queue_id, self.cq_file_size)
            self.queues[(topic, queue_id)] = cq
        return cq

    def pad_leased_queues(self) -> int:
        """A master about to take writes, once nothing comes back at its own offsets (after the recovery
        fetch): every queue of the lease padded up to its bound now. Returns the fillers written."""
        return self.lease.pad_all(self.queue)

    def max_queue_offset(self, topic: str, queue_id: int) -> int:
        cq = self.queues.get((topic, queue_id))
        return cq.max_index if cq else 0

    def min_queue_offset(self, topic: str, queue_id: int) -> int:
        cq = self.queues.get((topic, queue_id))
        return cq.min_index if cq else 0

    max_offset: int = forwarded("commitlog.max_offset")
    min_offset: int = forwarded("commitlog.min_offset")

    # -- master: writing --------------------------------------------------------------------------
    def _stamp(self, msg: record.Message) -> PutResult | None:
        """Store time and host on a message about to be written, and a delayed one moved to the schedule
        topic; a refusal when its delay level is not valid."""
        msg.store_timestamp = self.now_ms()
        msg.store_host = self.store_host
        try:
            delay.to_schedule_topic(msg, self.delay_levels_ms)
        except ValueError as e:
            return PutResult(PutStatus.MESSAGE_ILLEGAL, remark=str(e))
        return None

    def put_message(self, msg: record.Message) -> PutResult:
        """Append a message to the commit log, with its queue offset; its consume-queue unit and index
        keys follow at the next dispatch_pending(). Synchronous; flush and HA waits come after."""
        if self.closed:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark="store is shut down")
        if self.write_refused:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark=WRITE_REFUSED_REMARK)
        refused = self._stamp(msg)
        if refused is not None:
            return refused
        if msg.sys_flag & record.TRANSACTION_MASK in _QUEUED_TYPES:  # msg.gets_queue_entry
            key = (msg.topic, msg.queue_id)
            cq = self.queues.get(key) or self.queue(*key)
            queue_offset, why = self.lease.claim(key, cq, self.queue_offsets.get(key), self.now_ms())
            if why:  # a full disk (the fillers), or no lease
                return PutResult(PutStatus.DISK_FULL if "disk full" in why else PutStatus.UNKNOWN_ERROR, remark=why)
        else:
            cq, queue_offset = None, 0
        msg.queue_offset = queue_offset
        try:
            rec = record.encode(msg)
        except record.RecordError as e:
            return PutResult.unencodable(e)
        try:
            res = self.commitlog.append_record(rec, queue_offset)
        except record.RecordError as e:
            return PutResult(PutStatus.MESSAGE_ILLEGAL, remark=str(e))
        except DiskFullError as e:
            log.error("put_message failed, nothing stored: %s", e)
            return PutResult(PutStatus.DISK_FULL, remark=f"disk full: {e}")
        offset = res.wrote_offset
        if cq is not None:
            self.queue_offsets[key] = queue_offset + 1
        pending = self._pending
        # Undispatched records stay within the commit log's last two files (recovery re-dispatches
        # from the third-last one): a record that opened a new file dispatches what came before.
        rolled = bool(pending) and offset - offset % self.commitlog.file_size > pending[0][0]
        # What dispatching needs, taken now (the caller may reuse the message): see dispatch_pending.
        props = msg.properties
        unit_tags: int | str | None
        if cq is None:
            unit_tags = None
        elif msg.topic == delay.SCHEDULE_TOPIC:  # the unit's tagsCode is the deliver time
            unit_tags = delay.deliver_time(self.delay_levels_ms, props.get(delay.PROPERTY_DELAY), msg.store_timestamp)
            if unit_tags is None:
                unit_tags = props.get("TAGS")
        else:
            unit_tags = props.get("TAGS")
        keys = (props.get("UNIQ_KEY") or None, props.get("KEYS")) if rec.plain_properties else None
        pending.append(
            (
                offset,
                res.wrote_bytes,
                cq,
                queue_offset,
                unit_tags,
                msg.topic,
                msg.sys_flag,
                msg.store_timestamp,
                keys,
                rec.buf,
            )
        )
        self.last_store_timestamp = msg.store_timestamp
        self._notify_append()
        if self.dispatch_soon is None or rolled or len(pending) >= MAX_PENDING_RECORDS:
            self.dispatch_pending()
        elif len(pending) == 1:
            self.dispatch_soon()
        return PutResult(
            PutStatus.PUT_OK,
            offset,
            res.wrote_bytes,
            queue_offset,
            record.offset_msg_id(self.store_host, offset),
            msg.store_timestamp,
        )

    def put_sends(self, buf: BytesLike, sends: list[tuple[Any, ...]], born_host: bytes) -> list[tuple[int, int, int]]:
        """put_message() for a run of plain sends read by the compiled scan (rmqha/broker/fastpath): their
        records encoded together (fastpath.native.encode_records) and appended with one write per
        commit-log file. Returns (physical offset, size, queue offset) of the first ones stored, in
        order: the rest (a full disk, a record larger than a file, a closed store) were not stored and
        took no queue offset, and go through put_message, which says why. A failed file creation or
        write does not raise: what was stored before it is returned.

        The caller has made them plain: a topic that takes sends, a valid queue id, no transaction
        type, no delay (the scan leaves such properties to the Python path)."""
        if self.closed or not sends or self.write_refused:
            return []  # put_message says why
        now = self.now_ms()
        cl = self.commitlog
        next_offsets: dict[tuple[str, int], list[Any]] = {}  # key -> [consume queue, next queue offset]
        qoffs: list[int] = []
        cqs: list[ConsumeQueue] = []
        for s in sends:
            key = (s[fastpath.TOPIC], s[fastpath.QUEUE_ID])
            slot = next_offsets.get(key)
            if slot is None:
                cq = self.queues.get(key) or self.queue(*key)
                qo, why = self.lease.claim(key, cq, self.queue_offsets.get(key), now)
                if why:
                    return []  # put_message says why
                slot = next_offsets[key] = [cq, qo]
            qoffs.append(slot[1])
            cqs.append(slot[0])
            slot[1] += 1
        if self.lease.cover({k: slot[1] for k, slot in next_offsets.items()}, now):
            return []  # put_message says why
        store_host = record.encode_host(self.store_host)
        # the C extension (rmqha/broker/fastpath/_fastsend.c, no stub), bound in fastpath's try/except: the caller
        # only sends here when it is built
        encode = fastpath.native.encode_records  # type: ignore[attr-defined]
        stored: list[tuple[int, int, int]] = []
        pending = self._pending
        i, n = 0, len(sends)
        while i < n:
            # Whatever fails from here on, what is already stored is returned as stored: sending it
            # down the Python path again would store it twice.
            try:
                f = cl.queue.writable_file()  # a new file when the last is full: where a disk fills up
                base = f.base + f.wrote
                data, m, sizes, needed = encode(
                    buf, sends, i, n, qoffs[i:] if i else qoffs, base, f.free, now, born_host, store_host
                )
                if m == 0:
                    if needed + record.END_FILE_MIN_BLANK_LENGTH > cl.file_size:
                        break  # larger than a file: put_message refuses it
                    f.write_at(f.wrote, record.blank(f.free))  # the file's end, as append_record does
                    f.wrote = f.size
                    continue
                f.append(data)
            except DiskFullError as e:
                log.error("put_sends stopped, %d of %d stored: %s", len(stored), n, e)
                break
            except Exception:
                log.exception("put_sends stopped, %d of %d stored", len(stored), n)
                break
            rolled = bool(pending) and base - base % cl.file_size > pending[0][0]
            offset = base
            for k in range(i, i + m):
                s = sends[k]
                size = sizes[k - i]
                qo = qoffs[k]
                topic = s[fastpath.TOPIC]
                self.queue_offsets[(topic, s[fastpath.QUEUE_ID])] = qo + 1
                pending.append(
                    (
                        offset,
                        size,
                        cqs[k],
                        qo,
                        s[fastpath.TAGS],
                        topic,
                        s[fastpath.SYS_FLAG] & ~(record.FLAG_BORNHOST_V6 | record.FLAG_STOREHOST_V6),
                        now,
                        s[fastpath.KEY_HASHES],
                        None,
                    )
                )
                stored.append((offset, size, qo))
                offset += size
            i += m
            self.last_store_timestamp = now
            self._notify_append()
            if self.dispatch_soon is None or rolled or len(pending) >= MAX_PENDING_RECORDS:
                self.dispatch_pending()
            elif len(pending) == m:
                self.dispatch_soon()
        return stored

    def dispatch_pending(self) -> int:
        """Build the consume-queue units and index keys of every record put_message appended since the
        last call, one batch per queue and one index batch; then tell the dispatch listeners which
        queues grew. Returns the records dispatched."""
        pending = self._pending
        if not pending and not self._unwritten_units:
            return 0
        self._pending = []
        batches: dict[ConsumeQueue, list[Unit]] = {}
        codes = self._tag_codes
        if len(codes) > 4096:
            codes.clear()
        for offset, size, cq, queue_offset, unit_tags, *_index in pending:
            if cq is None:
                continue
            units = batches.get(cq)
            if units is None:
                units = batches[cq] = self._unwritten_units.pop(cq, [])
            if not isinstance(unit_tags, int):  # TAGS: its hash (a topic has few tags: remembered)
                code = codes.get(unit_tags)
                if code is None:
                    code = codes[unit_tags] = record.tags_code(unit_tags)
                unit_tags = code
            if self.unit_filter is not None and not self.unit_filter(queue_offset):
                continue  # the unit-filter seam: never on a real broker
            units.append((queue_offset, offset, size, unit_tags))
        for cq in list(self._unwritten_units):  # a full disk's leftovers of queues nothing was put to
            batches[cq] = self._unwritten_units.pop(cq)
        grew: list[ConsumeQueue] = []
        for cq, units in batches.items():
            before = cq.max_index
            try:
                cq.put_many(units)
            except DiskFullError as e:
                # The records are in the commit log and their queue offsets taken: the units wait for
                # the next dispatch (recovery would rebuild them too).
                left = [u for u in units if u[0] >= cq.max_index]
                self._unwritten_units[cq] = left
                _limiter.log(
                    logging.ERROR,
                    ("consume queue unit not written",),
                    "%d consume-queue unit(s) of %s-%d not written yet (retried at the next "
                    "dispatch, rebuilt on restart): %s",
                    len(left),
                    cq.topic,
                    cq.queue_id,
                    e,
                )
            if cq.max_index > before:
                grew.append(cq)
        if pending:
            self.index.build_records([p[5:] + (p[0],) for p in pending])
            last = pending[-1]
            self.reput_offset = last[0] + last[1]
        for cq in grew:
            for cb in self.dispatch_listeners:
                cb(cq.topic, cq.queue_id)
        return len(pending)

    def _notify_append(self) -> None:
        m = self.commitlog.max_offset
        for cb in self.append_listeners:
            cb(m)

    # -- slave: replicated bytes ------------------------------------------------------------------
    def append_replicated(self, offset: int, data: BytesLike | list[BytesLike]) -> None:
        """Store raw commit-log bytes from the master (raises StoreError/DiskFullError)."""
        was_empty = not self.commitlog.queue.files
        self.commitlog.append_raw(offset, data)
        if was_empty:
            self.reput_offset = offset
        self._notify_append()

    def replica_target(self, offset: int, size: int) -> tuple[MappedFile, int]:
        """(file, file position) where the master's next `size` bytes at `offset` go, for a slave that
        moves them there without Python (MappedFile.splice_in); they count once replica_written says
        so. Raises StoreError when they would not continue the log or would cross a file's end."""
        was_empty = not self.commitlog.queue.files
        f = self.commitlog.replica_file(offset, size)
        if was_empty:
            self.reput_offset = offset
        return f, f.wrote

    def replica_written(self, offset: int, size: int) -> None:
        """The `size` bytes at `offset` that replica_target placed are all in the file: they count."""
        f = self.commitlog.replica_file(offset, size)
        f.wrote += size
        self._notify_append()

    def dispatch(self, max_bytes: int = 8 << 20) -> int:
        """Build consume-queue units for complete records up to the commit-log end.

        Works in slices of max_bytes so a slave catching up keeps serving its sockets; returns the
        bytes consumed (0 when caught up or blocked). Units are written one batch per queue.
        """
        self.dispatch_pending()
        self.queue_offsets.clear()  # units from replicated records: the queues say what comes next
        if self.reput_offset < self.commitlog.min_offset:
            # retention deleted files not dispatched yet (4.9's ReputMessageService jumps the same way)
            log.warning(
                "dispatch: offset %d is before the commit log's first file; continuing at %d",
                self.reput_offset,
                self.commitlog.min_offset,
            )
            self.reput_offset = self.commitlog.min_offset
        start = self.reput_offset
        stop = min(self.commitlog.max_offset, start + max_bytes)
        batches: dict[tuple[str, int], list[Unit]] = {}
        keyed: list[IndexRecord] = []  # index items, written as one batch (as the master's dispatch_pending does)
        offset = start
        # Read about one slice, not the walk's default 4 MiB: a 256 KiB slice every 20 ms of a catch-up
        # otherwise copies 16x what it parses (a record left over is read again from its start).
        for at, kind, size, info, reason in self.commitlog.walk(
            start, self.commitlog.max_offset, check_crc=False, read_size=max_bytes + DISPATCH_READ_MARGIN
        ):
            if at >= stop and at > start:
                break
            if kind == Scan.MESSAGE:
                assert info is not None  # a MESSAGE carries its IndexInfo
                self.last_store_timestamp = info.store_timestamp
                keyed.append((info.topic, info.sys_flag, info.store_timestamp, info.index_keys(), None, at))
                if info.gets_queue_entry:
                    batches.setdefault((info.topic, info.queue_id), []).append(
                        (info.queue_offset, at, size, self._unit_tags_code(info, at))
                    )
                offset = at + size
            elif kind == Scan.BLANK:
                blank_in = self.commitlog.queue.find(at)
                assert blank_in is not None  # walk read the blank from this file
                offset = blank_in.end
            elif kind == Scan.PARTIAL:
                break  # the rest of this record is still on its way
            else:
                if not self.dispatch_error:
                    self.dispatch_error = f"invalid record at {at}: {reason}"
                    log.error("dispatch stopped: %s; consume queues end before it", self.dispatch_error)
                break
        self.index.build_records(keyed)
        for (topic, qid), units in list(batches.items()):
            cq = self._queue_for_record(topic, qid, units[0][1])
            if cq is None:
                del batches[(topic, qid)]
                continue
            cq.put_many(units)
        self.reput_offset = offset
        for key in batches:
            for cb in self.dispatch_listeners:
                cb(*key)
        return offset - start

    # -- reading ----------------------------------------------------------------------------------
    def get_messages(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_msgs: int,
        tag_codes: set[int] | None = None,
        max_bytes: int = 256 * 1024,
    ) -> GetResult:
        """Read for PULL_MESSAGE (WIRE-FACTS §5). tag_codes None means no filter ('*')."""
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0, [])
        lo, hi = cq.min_index, cq.max_index
        if hi == 0:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, lo, hi, [])
        if offset < lo:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, lo, lo, hi, [])
        if offset == hi:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, lo, hi, [])
        if offset > hi:
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, hi, lo, hi, [])
        records: list[bytes] = []
        size_total = 0
        next_offset = offset
        max_msgs = max(1, min(max_msgs, 32))
        for i, (phys, size, tcode) in enumerate(cq.units(offset, 800)):
            if phys < self.commitlog.min_offset or size == FILLER_SIZE:  # expired, or a filler: step over
                next_offset = offset + i + 1
                continue
            if len(records) >= max_msgs or (records and size_total + size > max_bytes):
                break
            next_offset = offset + i + 1
            if tag_codes is not None and tcode not in tag_codes:
                continue
            data = self.commitlog.read_record(phys, size)
            if len(data) != size:
                break
            records.append(data)
            size_total += size
        if records:
            return GetResult(GetStatus.FOUND, next_offset, lo, hi, records)
        if next_offset > offset:
            return GetResult(GetStatus.NO_MATCHED_MESSAGE, next_offset, lo, hi, [])
        return GetResult(GetStatus.OFFSET_FOUND_NULL, offset, lo, hi, [])

    def message_by_offset(self, phys: int) -> record.Message | None:
        return self.commitlog.message_at(phys)

    # -- durability -------------------------------------------------------------------------------
    def flush(self) -> int:
        """fdatasync the commit log and queues (call from a thread on a live broker).

        Returns the commit-log offset the fdatasync covered: captured before it, so never counting
        bytes the reactor appended meanwhile. An OSError (EIO, ...) propagates: nothing new is durable.
        """
        flushed = self.commitlog.flush()
        for cq in list(self.queues.values()):
            cq.flush()
        self.index.flush()
        self._durable_offset = flushed
        self._write_checkpoint()
        return flushed

    def _write_checkpoint(self) -> None:
        path = os.path.join(self.root, "checkpoint")
        ts = self.last_store_timestamp
        # bytes 16..23: the reference's indexMsgTimestamp (end time of the last full index file)
        data = (
            CHECKPOINT.pack(ts, ts, self.index.checkpoint_timestamp)
            + CHECKPOINT_DURABLE.pack(getattr(self, "_durable_offset", 0))
        ).ljust(CHECKPOINT_FILE_SIZE, b"\0")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, data, 0)
        finally:
            os.close(fd)

    def read_checkpoint(self) -> tuple[int, int, int]:
        try:
            with open(os.path.join(self.root, "checkpoint"), "rb") as fh:
                return CHECKPOINT.unpack(fh.read(CHECKPOINT.size))
        except (OSError, struct.error):
            return (0, 0, 0)
