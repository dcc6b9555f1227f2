"""The broker's commit log on DLedger (RocketMQ 4.9's enableDLegerCommitLog=true): DLedgerCommitLog over the
IO-free core in rmqha/broker/dledger; the role changes it drives are rmqha/broker/dledger/role_handler.py.

Each DLedger entry's body is one classic commit-log record (store/record.py); the leader writes its
PHYSICALOFFSET as the entry's pos + 48 through the file store's append hook, so every replica holds the
same bytes, and a message's commit-log offset (consume-queue unit, msgId) is pos + 48. Only committed
entries are dispatched to the consume queues and the index (a `Committed` effect), on the leader and on
followers alike. A send is answered once a quorum has the entry (SEND_OK), after maxWaitAckTimeMs with
OS_PAGECACHE_BUSY (SYSTEM_ERROR "[PC_SYNCHRONIZED]..."), at once with OS_PAGECACHE_BUSY when this node
is not the DLedger leader, and with SERVICE_NOT_AVAILABLE (14) by a SLAVE (a follower). A batch is one
entry per message with one wait on the last one's quorum (put_batch_async, 4.9's asyncPutMessages).

Upgrade from a classic commit log (4.9's dividedCommitlogOffset): the classic files in storePathCommitLog
stay readable below the divide, DLedger's files start at it (DLedgerMessageStore._divide, docs/dledger.md
"Upgrade from a classic commit log").

Left out (see docs/dledger.md): clean-space, leadership transfer to preferredLeaderId.
"""

from __future__ import annotations

import logging
import os
import random
import struct
from collections.abc import Callable
from typing import Any

from twisted.internet import defer

from rmqha.broker.support import validation
from rmqha.broker.store import delay
from rmqha.broker.config.properties import BrokerConfig, ConfigError
from rmqha.broker.dledger.config import DLedgerConfig
from rmqha.broker.dledger.effects import Committed, RoleChanged
from rmqha.broker.dledger.entry import BODY_OFFSET
from rmqha.broker.dledger.file_store import DEFAULT_INDEX_FILE_SIZE, FileStore
from rmqha.broker.dledger.node import DLedgerNode
from rmqha.broker.dledger.protocol import ResponseCode as DLCode
from rmqha.broker.dledger.transport import DLedgerService
from rmqha.broker.store import commitlog, record
from rmqha.broker.store.consume_queue import ConsumeQueue
from rmqha.broker.store.mapped_file import StoreError, create_durably, make_dirs
from rmqha.broker.store.message_store import MessageStore, PutResult, PutStatus
from rmqha.broker.store.record import Scan

log = logging.getLogger("rmqha.broker.dledger_commitlog")

# SendMessageProcessor's remark for OS_PAGECACHE_BUSY (4.9.8)
BUSY = "[PC_SYNCHRONIZED]broker busy, start flow control for a while"
# The new leader's no-op: a TRANSACTION_ROLLBACK record with an empty body, which 4.9's dispatch gives no
# consume-queue unit and no index key (DefaultMessageStore.CommitLogDispatcherBuildConsumeQueue,
# IndexService.buildIndex); this store skips it by its topic too.
NOOP_TOPIC = "RMQ_SYS_DLEDGER_NOOP"
PHYS_AT = 28  # PHYSICALOFFSET in a record (MessageDecoder.PHY_POS_POSITION)
_I8 = struct.Struct(">q")
DISPATCH_RETRY_S = 1.0  # a failed dispatch (disk error) is tried again this much later (ours)


def _code_name(code: Any) -> str:
    try:
        return DLCode(code).name
    except ValueError:
        return str(code)


# AppendEntryResponse codes -> the PutStatus 4.9's DLedgerCommitLog.putMessage answers
_OUTCOME = {
    DLCode.WAIT_QUORUM_ACK_TIMEOUT: PutStatus.OS_PAGECACHE_BUSY,
    DLCode.LEADER_PENDING_FULL: PutStatus.OS_PAGECACHE_BUSY,
    DLCode.NOT_LEADER: PutStatus.SERVICE_NOT_AVAILABLE,
    DLCode.INCONSISTENT_LEADER: PutStatus.SERVICE_NOT_AVAILABLE,
    DLCode.LEADER_NOT_READY: PutStatus.SERVICE_NOT_AVAILABLE,
    DLCode.DISK_FULL: PutStatus.SERVICE_NOT_AVAILABLE,
}


def patch_physical_offset(body: bytes, pos: int) -> bytes:
    """The leader's append hook (DLedgerCommitLog's AppendHook): PHYSICALOFFSET = pos + 48."""
    buf = bytearray(body)
    _I8.pack_into(buf, PHYS_AT, pos + BODY_OFFSET)
    return bytes(buf)


def noop_body() -> bytes:
    rec = record.encode(record.Message(topic=NOOP_TOPIC, body=b"", sys_flag=record.TRANSACTION_ROLLBACK))
    return bytes(rec.finish(0, 0))


class DLedgerLog:
    """CommitLog's read side over the DLedger data files: offsets are entry positions + 48 (a message's
    start); max_offset is the end of the last dispatched committed entry (4.9's committedPos).

    After an upgrade from a classic commit log (docs/dledger.md "Upgrade from a classic commit log"),
    offsets below `divided` (4.9's dividedCommitlogOffset) are read from the old log `old`, as 4.9's
    getData does; the DLedger files start at `divided`."""

    def __init__(self, fs: FileStore, old: commitlog.CommitLog | None = None, divided: int = -1):
        self.fs = fs
        self.file_size = fs.data.file_size
        self.committed_pos = 0
        self.old = old
        self.divided = divided

    def _below(self, offset: int) -> bool:
        return offset < self.divided and self.old is not None

    @property
    def min_offset(self) -> int:
        if self.old is not None and self.old.queue.files:  # 4.9's getMinOffset: the old files first
            return self.old.min_offset
        return self.fs.data.min_offset

    @property
    def max_offset(self) -> int:
        return self.committed_pos or self.fs.data.min_offset  # 4.9's getMaxOffset

    def load(self) -> None:
        pass

    def read(self, offset: int, max_bytes: int) -> bytes:
        if self._below(offset):
            return self.old.read(offset, max_bytes)  # type: ignore[union-attr]
        f = self.fs.data._file_at(offset)
        if f is None:
            return b""
        rel = offset - f.start
        n = min(max_bytes, f.wrote - rel)
        return os.pread(f.fd, n, rel) if n > 0 else b""

    def read_record(self, offset: int, size: int) -> bytes:
        if self._below(offset):
            return self.old.read_record(offset, size)  # type: ignore[union-attr]
        return self.fs.data.read(offset, size) or b""

    def message_at(self, offset: int, size: int | None = None) -> record.Message | None:
        return commitlog.message_at(self, offset, size)

    def last_file_start(self) -> int:
        m = self.max_offset
        return max(0, m - m % self.file_size)

    def flush(self) -> int:
        return self.max_offset  # DLedgerService fsyncs the data and index files every 10 ms

    def close(self) -> None:
        # DLedgerMessageStore.shutdown stops the service, which closes the DLedger files
        if self.old is not None:
            self.old.close()


class DLedgerMessageStore(MessageStore):
    """MessageStore whose commit log is a DLedger group member (see the module docstring)."""

    dledger_config: BrokerConfig
    service: DLedgerService
    node: DLedgerNode
    fs: FileStore

    def configure(
        self,
        config: BrokerConfig,
        reactor: Any,
        clock: Any,
        rng: random.Random | None = None,
        dledger: DLedgerConfig | None = None,
    ) -> None:
        """Called before start(): the broker config, the reactor and clock the DLedger service runs on;
        `dledger` replaces the DLedger config built from the broker's keys (tests shorten timers)."""
        self.dledger_config = config
        self._reactor, self._clock = reactor, clock
        self._rng = rng or random.Random()
        # from_broker also reads clusterSecretFile: with a secret, peer traffic is signed (docs/dledger.md)
        try:
            self._dl_config = dledger or DLedgerConfig.from_broker(config)
        except ValueError as e:
            raise ConfigError(f"clusterSecretFile: {e}") from None
        self.next_dispatch_index = 0  # the first committed entry not yet in the consume queues
        self.role_listeners: list[Callable[[RoleChanged], object]] = []
        self.noops = 0
        # The term in which change_to_master completed (RCH sets it, change_to_slave clears it): a leader
        # takes no send before, whatever brokerRole its file says (review 2, A1: its consume queues may be
        # behind its log, so a queue offset taken then can be one an older entry holds).
        self.master_term: int | None = None
        self.not_master_refusals = 0
        self.dispatch_failures = 0
        self.truncated_units = 0  # consume-queue units a TRUNCATE of committed entries took away
        self.divided = -1  # 4.9's dividedCommitlogOffset: set by start() (_divide)
        self.upgraded = False
        self.entries_below_divide = 0
        self._retry_call: Any = None
        # phys offset -> queue offset of committed records their consume queue could not place (the
        # offset held another record): the send they belong to is answered with an error, not SEND_OK
        self.misplaced_positions: dict[int, int] = {}

    # -- lifecycle -----------------------------------------------------------------------------------
    def start(self):
        c = self.dledger_config
        make_dirs(self.root, sync=True)  # a new root survives a power cut, and the vote and log in it
        self._take_lock()
        abort = os.path.join(self.root, "abort")
        self.was_clean_shutdown = not os.path.exists(abort)
        # storeBaseDir = storePathRootDir: <root>/dledger-<selfId>/{data,index,checkpoint,currterm}; data
        # in storePathDLedgerCommitLog when set (DLedgerConfig.dataStorePath)
        old = self.commitlog  # the classic commit log's directory (storePathCommitLog): 4.9 keeps reading it
        old.load()
        self.fs = FileStore(
            self.root,
            c.dLegerSelfId,
            data_file_size=c.mappedFileSizeCommitLog,
            index_file_size=DEFAULT_INDEX_FILE_SIZE,
            data_path=c.storePathDLedgerCommitLog or None,
        )
        self.fs.append_hook = patch_physical_offset
        self.fs.truncate_hook = self._log_truncated
        self._load_queues()
        self.upgraded = False  # set by _divide on the first start after an upgrade
        try:
            self.divided = self._divide(old)
        except StoreError:
            self.fs.release()
            old.close()
            os.close(self._lock_fd)
            self._lock_fd = -1
            self.closed = True
            raise
        self.commitlog = DLedgerLog(self.fs, old if old.queue.files else None, self.divided)  # type: ignore[assignment]
        # Units past the log's end (lost data files) are dropped, as 4.9's truncateDirtyLogicFiles does.
        end = self.fs.data.max_wrote
        dropped = sum(cq.truncate_beyond(end) for cq in self.queues.values())
        if dropped:
            log.warning("recovery: dropped %d consume-queue units past the DLedger data end %d", dropped, end)
        self.next_dispatch_index = self._first_undispatched()
        if self.next_dispatch_index > self.fs.begin_index >= 0:
            prev = self.fs.get(self.next_dispatch_index - 1)
            self.commitlog.committed_pos = prev.pos + prev.size
        self.index.load()
        if self.upgraded:  # the index ends where the classic log does, as a classic start leaves it
            self.index.recover(old)
        self.dispatch_committed()
        create_durably(abort)  # it must outlive a power cut, or the next start takes a crash for a clean shutdown
        term, vote_for = self.fs.load_term()
        self.node = DLedgerNode(self._dl_config, self.fs, rng=self._rng, term=term, vote_for=vote_for)
        self.service = DLedgerService(
            self.node, self.fs, reactor=self._reactor, clock=self._clock, on_effect=self._on_effect
        )
        log.info(
            "DLedger store %s: entries %d..%d (term %d), committed %d, dispatched up to %d, currTerm %d",
            self.fs.path,
            self.fs.begin_index,
            self.fs.end_index,
            self.fs.end_term,
            self.fs.committed_index,
            self.next_dispatch_index - 1,
            term,
        )
        if not self.upgraded:
            self.recovery = None
        return None

    def _divide(self, old: commitlog.CommitLog) -> int:
        """4.9's DLedgerCommitLog.recover: where the classic commit log ends and the DLedger log begins
        (dividedCommitlogOffset), -1 when there is no classic log.

        DLedger files present: the divide is the first one's start, and the classic files are read as
        they are (4.9 loads them as full files). None yet but classic files (the first start after the
        upgrade): the classic log is recovered as a classic store recovers it, its last file is closed
        with a blank record from the end of its data, and the first DLedger file is created at that
        file's end, which is the divide; the first DLedger entry's pos is the divide, its message at
        divide + 48."""
        if self.fs.data.files:
            if not old.queue.files:
                return self.fs.data.files[0].start
            for f in old.queue.files:
                f.wrote = f.size
            divided = self.fs.data.files[0].start
            if divided < old.queue.files[-1].end:
                # 4.9 would read [divided, old end) from the old files and serve the wrong bytes for the
                # DLedger entries there (a member whose DLedger log was rebuilt below its old log's end,
                # from a leader whose old log was shorter): refuse instead
                raise StoreError(
                    f"the DLedger log in {self.fs.data.path} starts at {divided}, inside the classic commit log "
                    f"in {old.queue.directory} (it ends at {old.queue.files[-1].end}): this member's old log and "
                    "the group's DLedger log overlap; every member of an upgraded group needs the same classic "
                    'commit log (docs/dledger.md "Upgrade from a classic commit log")'
                )
            return divided
        if not old.queue.files:
            return -1
        report = old.recover(self.check_crc, on_record=self._redispatch)
        dropped = sum(cq.truncate_beyond(report.end_offset) for cq in self.queues.values())
        if dropped:
            log.warning(
                "upgrade: dropped %d consume-queue units past the classic log's end %d", dropped, report.end_offset
            )
        self.recovery = report
        self.upgraded = True
        last = old.queue.last
        if last is None:  # recovery found no data at all: a pure DLedger log from 0
            return -1
        if last.wrote < last.size:
            # the end marker 4.9 writes (BLANK_MAGIC_CODE and the rest's length) unless one is there
            last.write_at(last.wrote, record.blank(last.size - last.wrote))
            last.wrote = last.size
            last.flush()
        divided = last.end
        self.fs.data._new_file(divided)  # 4.9: dLedgerFileList.getLastMappedFile(dividedCommitlogOffset)
        log.warning(
            "upgrade from a classic commit log: %d records in %s up to %d are read from there; "
            "DLedger entries start at %d (dividedCommitlogOffset)",
            report.records,
            old.queue.directory,
            report.end_offset,
            divided,
        )
        return divided

    def _first_undispatched(self) -> int:
        """The first entry whose message no consume queue holds: entries are dispatched in order, so it
        is the first one at or past the queues' furthest end (a bisection over the index)."""
        fs = self.fs
        if fs.end_index < 0:
            return max(0, fs.end_index + 1)
        ends = [cq.max_phys_end for cq in self.queues.values() if cq.max_index > 0]
        done = max(ends, default=0)
        lo, hi = fs.begin_index, fs.end_index + 1
        while lo < hi:
            mid = (lo + hi) // 2
            pos, _size = fs._pos_size(mid)
            if pos + BODY_OFFSET < done:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _log_truncated(self, data_end: int) -> None:
        """A TRUNCATE cut the DLedger log at data_end. Raft never cuts a committed entry, but 4.9's rules can
        (a leader of any term commits what a later leader truncates, docs/dledger.md) and so can a power cut
        that took what a majority had acknowledged: consume-queue units past the cut would then point at
        the new leader's entries, and serve, or refuse, the wrong messages (4.9.8 does: its pause-leader cell).
        The units go with the entries, and the next commit dispatches again from the cut."""
        # below the divide the units are the classic log's (an upgraded member), which no TRUNCATE touches
        data_end = max(data_end, self.divided)
        dropped = sum(cq.truncate_beyond(data_end) for cq in self.queues.values())
        if not dropped:
            return
        self.truncated_units += dropped
        log.error(
            "TRUNCATE at %d cut committed entries already in the consume queues: dropped %d units past it",
            data_end,
            dropped,
        )
        committed = getattr(self.commitlog, "committed_pos", None)
        if committed is not None and committed > data_end:
            self.commitlog.committed_pos = data_end  # type: ignore[attr-defined]
        self.next_dispatch_index = self._first_undispatched()
        self.reput_offset = self.commitlog.max_offset

    def start_service(self, listen: bool = True) -> None:
        """Start DLedger (the elector, the pusher, the RPC listener): 4.9's commitLog.start(), last."""
        self.service.start(listen=listen)

    def shutdown(self) -> None:
        if self.closed:
            return
        if self._retry_call is not None and self._retry_call.active():
            self._retry_call.cancel()
        self.service.stop()  # flush, checkpoint, close the DLedger files
        super().shutdown()

    def _on_effect(self, eff: object) -> None:
        if isinstance(eff, Committed):
            if not self.closed:
                self.dispatch_committed()
        elif isinstance(eff, RoleChanged):
            for cb in list(self.role_listeners):
                cb(eff)

    # -- dispatch (ReputMessageService over committed entries) ---------------------------------------
    @property
    def dispatched_all(self) -> bool:
        return self.next_dispatch_index > self.fs.committed_index

    def dispatch_committed(self) -> int:
        """Committed entries into the consume queues and the index. next_dispatch_index moves only once
        their writes are done (review 2, A5): a disk error leaves the entries to the next Committed
        effect or the retry DISPATCH_RETRY_S later (a consume queue skips units it holds already)."""
        fs = self.fs
        if fs.begin_index >= 0:
            self.next_dispatch_index = max(self.next_dispatch_index, fs.begin_index)
        batches: dict[ConsumeQueue, list[tuple[int, int, int, int]]] = {}
        keyed = []
        n = 0
        idx = self.next_dispatch_index
        committed_pos = None
        last_ts = None
        try:
            while idx <= fs.committed_index:
                entry = fs.get(idx)
                idx += 1
                committed_pos = entry.pos + entry.size
                phys = entry.pos + BODY_OFFSET
                if entry.pos < self.divided:
                    # reads below the divide go to the classic log, so this entry could only be served
                    # as the old bytes there: the DLedger log was rebuilt below this member's old log
                    # (docs/dledger.md "Upgrade from a classic commit log"); never dispatched
                    self.entries_below_divide += 1
                    if not self.dispatch_error:
                        self.dispatch_error = f"entry {entry.index} at {entry.pos} is below the divide {self.divided}"
                        log.error("dispatch: %s (skipped)", self.dispatch_error)
                    continue
                kind, size, info, reason = record.scan_index(entry.body, 0, False)
                if kind != Scan.MESSAGE or info is None:
                    if not self.dispatch_error:
                        self.dispatch_error = f"entry {entry.index} at {entry.pos} is not a message: {kind} {reason}"
                        log.error("dispatch: %s (skipped)", self.dispatch_error)
                    continue
                if info.topic == NOOP_TOPIC:
                    continue
                n += 1
                last_ts = info.store_timestamp
                keyed.append((info.topic, info.sys_flag, info.store_timestamp, info.index_keys(), None, phys))
                if info.gets_queue_entry:
                    cq = self._queue_for_record(info.topic, info.queue_id, phys)
                    if cq is not None:
                        batches.setdefault(cq, []).append(
                            (info.queue_offset, phys, size, self._unit_tags_code(info, phys))
                        )
            misplaced: list[tuple[int, int, int, int]] = []
            for cq, units in batches.items():
                cq.put_many(units, misplaced)
            if keyed:
                self.index.build_records(keyed)
        except Exception as e:  # noqa: BLE001 (a disk error or a bug: neither may lose these dispatches)
            self.dispatch_failures += 1
            log.exception(
                "dispatch of entries %d..%d failed (%s); retried in %.1f s",
                self.next_dispatch_index,
                idx - 1,
                e,
                DISPATCH_RETRY_S,
            )
            if self._retry_call is None or not self._retry_call.active():
                self._retry_call = self._clock.callLater(DISPATCH_RETRY_S, self._retry_dispatch)
            return 0
        self.next_dispatch_index = idx
        if committed_pos is not None:
            self.commitlog.committed_pos = committed_pos  # type: ignore[attr-defined]
        if last_ts is not None:
            self.last_store_timestamp = last_ts
        for u in misplaced:
            self.misplaced_positions[u[1]] = u[0]
        while len(self.misplaced_positions) > 4096:  # only the leader's pending answers read them
            del self.misplaced_positions[next(iter(self.misplaced_positions))]
        self.reput_offset = self.commitlog.max_offset
        for cq in batches:
            for cb in self.dispatch_listeners:
                cb(cq.topic, cq.queue_id)
        return n

    def _retry_dispatch(self) -> None:
        self._retry_call = None
        if not self.closed and not self.dispatched_all:
            self.dispatch_committed()

    def dispatch_pending(self) -> int:
        return 0  # nothing is dispatched at append time: only committed entries are

    def dispatch(self, max_bytes: int = 8 << 20) -> int:
        return 0

    # -- the send path -------------------------------------------------------------------------------
    def put_message(self, msg: record.Message) -> PutResult:  # type: ignore[override]
        raise StoreError("a DLedger store is written through put_async")

    def put_sends(self, buf, sends, born_host):  # type: ignore[no-untyped-def]
        return []  # the compiled fast path is off in DLedger mode; the Python path says why

    def recover_topic_queue_table(self) -> None:
        """4.9's recoverTopicQueueTable: the next queue offsets come from the consume queues again."""
        self.queue_offsets.clear()

    @property
    def writable(self) -> bool:
        """Sends are taken: this node leads and change_to_master completed in its current term."""
        node = self.node
        return node.role == "LEADER" and self.master_term == node.term

    def master_lease_valid(self) -> bool:
        """May register as master (brokerId 0): writable, and the DLedger leader lease holds (a quorum
        acknowledged this leader within maxHeartBeatLeak x heartBeatTimeIntervalMs, 6 s by default).
        A leader that was stopped (SIGSTOP) or cut off longer than that is likely replaced already: its
        registration as 0 would overwrite the new master's, and its step-down registration under its own
        id would then delete the id-0 entry (4.9's registerBroker drops an address's other ids), leaving
        the name server without a master until the new one's next periodic registration (review 2, A4)."""
        return self.writable and self.node.lease_valid(self._clock.seconds() * 1000.0)

    def _not_master_yet(self) -> PutResult | None:
        """A leader that is not master yet (catching up, or a node restarted with its file's brokerRole)
        answers as a node that is not the leader does: OS_PAGECACHE_BUSY, at once, nothing appended."""
        if self.node.role != "LEADER" or self.writable:
            return None  # a follower or candidate: the core answers NOT_LEADER
        self.not_master_refusals += 1
        return PutResult(PutStatus.OS_PAGECACHE_BUSY, remark=f"{BUSY} (DLedger leader, not master yet)")

    def put_async(self, msg: record.Message) -> PutResult | defer.Deferred:
        """DLedgerCommitLog.putMessage: a PutResult at once when nothing was appended, else a Deferred
        firing with one once DLedger decided (quorum, ack timeout, ...)."""
        if self.closed:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark="store is shut down")
        refused = self._not_master_yet()
        if refused is not None:
            return refused
        refused = self._stamp(msg)
        if refused is not None:
            return refused
        key = (msg.topic, msg.queue_id)
        if msg.gets_queue_entry:
            if validation.topic_problem(msg.topic):
                return PutResult(PutStatus.MESSAGE_ILLEGAL, remark=f"topic {msg.topic!r} is not valid")
            queue_offset = self.queue_offsets.get(key)
            if queue_offset is None:
                queue_offset = self.queue(*key).max_index
        else:
            queue_offset = 0
        msg.queue_offset = queue_offset
        try:
            rec = record.encode(msg)
        except record.RecordError as e:
            return PutResult.unencodable(e)
        if rec.size + BODY_OFFSET + 8 > self.fs.data.file_size:
            return PutResult(
                PutStatus.MESSAGE_ILLEGAL,
                remark=f"a {rec.size}-byte message does not fit a {self.fs.data.file_size}-byte data file",
            )
        done: list[Any] = []
        d = defer.Deferred()
        d.addCallback(done.append)
        try:
            self.service.append(bytes(rec.finish(queue_offset, 0)), d)
        except StoreError as e:
            log.error("DLedger append failed: %s", e)
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark=f"DLedger store error: {e}")
        if done:  # decided at once: not appended (not the leader, transferring, pending full, ...)
            resp = done[0]
            if resp.code == DLCode.SUCCESS:  # a one-node group
                if msg.gets_queue_entry:
                    self.queue_offsets[key] = queue_offset + 1
                return self._outcome(resp, rec.size, queue_offset, msg.store_timestamp)
            return PutResult(PutStatus.OS_PAGECACHE_BUSY, remark=f"{BUSY} (DLedger {DLCode(resp.code).name})")
        if msg.gets_queue_entry:
            self.queue_offsets[key] = queue_offset + 1  # at once, as 4.9 (even if the append fails later)
        d2 = defer.Deferred()
        d.addCallback(lambda _r: d2.callback(self._outcome(done[0], rec.size, queue_offset, msg.store_timestamp)))
        return d2

    def put_batch_async(self, msgs: list[record.Message]) -> list[PutResult] | defer.Deferred:
        """4.9.8's DLedgerCommitLog.asyncPutMessages: one DLedger entry per message (a
        BatchAppendEntryRequest), consecutive queue offsets from the queue's next one, one wait on the
        last entry's quorum; the batch is all SEND_OK or all failed. A PutResult per message (a list of
        one when nothing was appended), or a Deferred firing with that list."""
        if self.closed:
            return [PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark="store is shut down")]
        if any(m.sys_flag & record.TRANSACTION_MASK != record.TRANSACTION_NOT_TYPE for m in msgs):
            return [PutResult(PutStatus.MESSAGE_ILLEGAL, remark="a batch cannot hold transactional messages")]
        try:
            delayed = any(delay.delay_level_of(m.properties) > 0 for m in msgs)
        except ValueError as e:
            return [PutResult(PutStatus.MESSAGE_ILLEGAL, remark=str(e))]
        if delayed:
            return [PutResult(PutStatus.MESSAGE_ILLEGAL, remark="a batch cannot have a delay level")]
        refused = self._not_master_yet()
        if refused is not None:
            return [refused]
        now = self.now_ms()
        key = (msgs[0].topic, msgs[0].queue_id)
        if validation.topic_problem(key[0]):
            return [PutResult(PutStatus.MESSAGE_ILLEGAL, remark=f"topic {key[0]!r} is not valid")]
        first = self.queue_offsets.get(key)
        if first is None:
            first = self.queue(*key).max_index
        bodies, sizes = [], []
        for i, msg in enumerate(msgs):
            msg.store_timestamp, msg.store_host, msg.queue_offset = now, self.store_host, first + i
            try:
                rec = record.encode(msg)
            except record.RecordError as e:
                return [PutResult.unencodable(e)]
            if rec.size + BODY_OFFSET + 8 > self.fs.data.file_size:
                return [
                    PutResult(
                        PutStatus.MESSAGE_ILLEGAL,
                        remark=f"a {rec.size}-byte message does not fit a {self.fs.data.file_size}-byte data file",
                    )
                ]
            bodies.append(bytes(rec.finish(first + i, 0)))
            sizes.append(rec.size)
        done: list[Any] = []
        d = defer.Deferred()
        d.addCallback(done.append)
        try:
            positions = self.service.append_batch(bodies, d)
        except StoreError as e:
            log.error("DLedger batch append failed: %s", e)
            return [PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark=f"DLedger store error: {e}")]
        if not positions:  # refused at once (not the leader, transferring, pending full)
            code = done[0].code if done else None
            return [PutResult(PutStatus.OS_PAGECACHE_BUSY, remark=f"{BUSY} (DLedger {_code_name(code)})")]
        self.queue_offsets[key] = first + len(msgs)  # at once, as 4.9 (even if the wait fails later)

        def results(resp: Any) -> list[PutResult]:
            if resp.code != DLCode.SUCCESS:
                return [self._outcome(resp, 0, first, now)]
            bad = [pos + BODY_OFFSET for pos in positions if pos + BODY_OFFSET in self.misplaced_positions]
            if bad:
                for off in bad[1:]:
                    self.misplaced_positions.pop(off, None)
                return [self._misplaced_result(bad[0])]
            return [
                PutResult(
                    PutStatus.PUT_OK,
                    pos + BODY_OFFSET,
                    size,
                    first + i,
                    record.offset_msg_id(self.store_host, pos + BODY_OFFSET),
                    now,
                )
                for i, (pos, size) in enumerate(zip(positions, sizes))
            ]

        if done:  # a one-node group: decided already
            return results(done[0])
        d2: defer.Deferred = defer.Deferred()
        d.addCallback(lambda _r: d2.callback(results(done[0])))
        return d2

    def _outcome(self, resp: Any, size: int, queue_offset: int, store_timestamp: int) -> PutResult:
        if resp.code == DLCode.SUCCESS:
            offset = resp.pos + BODY_OFFSET
            if offset in self.misplaced_positions:
                return self._misplaced_result(offset)
            return PutResult(
                PutStatus.PUT_OK,
                offset,
                size,
                queue_offset,
                record.offset_msg_id(self.store_host, offset),
                store_timestamp,
            )
        try:
            name = DLCode(resp.code).name
        except ValueError:
            name = str(resp.code)
        status = _OUTCOME.get(resp.code, PutStatus.UNKNOWN_ERROR)
        remark = BUSY if status is PutStatus.OS_PAGECACHE_BUSY else ""
        return PutResult(status, remark=f"{remark} (DLedger {name})".strip())

    def _misplaced_result(self, offset: int) -> PutResult:
        queue_offset = self.misplaced_positions.pop(offset)
        return PutResult(
            PutStatus.UNKNOWN_ERROR,
            remark=f"stored at {offset}, but its queue offset {queue_offset} holds another message: "
            "it is in no consume queue, send it again",
        )

    def append_noop(self) -> None:
        """The new leader's entry of its own term (docs/dledger.md "The new leader's no-op")."""
        self.noops += 1
        self.service.append(noop_body(), object())

    def status(self) -> dict:
        s = self.service.status()
        s["dispatchedIndex"] = self.next_dispatch_index - 1
        s["noops"] = self.noops
        s["writable"] = self.writable
        s["leaseValid"] = self.node.lease_valid(self._clock.seconds() * 1000.0)
        s["notMasterRefusals"] = self.not_master_refusals
        s["dispatchFailures"] = self.dispatch_failures
        s["misplacedUnits"] = sum(cq.misplaced for cq in self.queues.values())
        s["dividedCommitlogOffset"] = self.divided
        s["entriesBelowDivide"] = self.entries_below_divide
        # where the last fsync of the DLedger files reached (Cluster.power_loss cuts there)
        s["durableDataPos"], s["durableIndexPos"] = self.fs.durable_positions
        return s
