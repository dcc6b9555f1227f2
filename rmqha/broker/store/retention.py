"""Commit-log retention as RocketMQ 4.9 has it (DefaultMessageStore's CleanCommitLogService and
CleanConsumeQueueService), on the reactor's clock. Tests: tests/unit/store/test_retention.py.

Every cleanResourceInterval ms (the first run a minute after start, as 4.9) one run:
1. the commit log: when it is time (the local hour is one of deleteWhen's, "04;05"), or the disk is
   fuller than diskMaxUsedSpaceRatio (clamped to 10..95, as 4.9's getter), or an admin asked
   (DELETE_EXPIRED_COMMITLOG, 329: the next 20 runs), the oldest files whose last write is older than
   fileReservedTime hours are deleted, oldest first, never the last file, at most 10 a run, waiting
   deleteCommitLogFilesInterval ms between two. Past diskSpaceCleanForciblyRatio (0.85) of the disk, with
   cleanFileForciblyEnable, they go whatever their age; past diskSpaceWarningLevelRatio (0.90) the store
   also refuses writes (SERVICE_NOT_AVAILABLE, 4.9's DISK_FULL running flag) until a run finds the disk
   below it again. A file an HA transfer still sends from waits for it, at most
   destroyMapedFileIntervalForcibly ms; the run after that deletes it anyway (the transfer then ends with
   the file gone and the slave reconnects).
2. consume queues and the index behind the commit log's first offset: once that offset moved, every
   consume-queue file whose last unit points below it goes (never a queue's last file; a queue that
   deleted some waits deleteConsumeQueueFilesInterval ms before the next), each queue's first readable
   offset moves up to the first unit still in the log, and index files that end below it go.

A deletion never runs while a flush is in flight (the flush thread syncs the files the reactor would
close). The decisions are plain functions of numbers (hour_matches, check_disk, expired_prefix); the
service only sequences them with clock.callLater.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from rmqha.broker.support.clock import Clock, DelayedCall

log = logging.getLogger("rmqha.broker.store.retention")

# 4.9.8 reads these from the JVM's system properties rocketmq.broker.diskSpaceWarningLevelRatio and
# rocketmq.broker.diskSpaceCleanForciblyRatio; here from the environment under the same names.
DISK_SPACE_WARNING_LEVEL_RATIO = float(os.environ.get("ROCKETMQ_BROKER_DISK_SPACE_WARNING_LEVEL_RATIO", "0.90"))
DISK_SPACE_CLEAN_FORCIBLY_RATIO = float(os.environ.get("ROCKETMQ_BROKER_DISK_SPACE_CLEAN_FORCIBLY_RATIO", "0.85"))
MAX_MANUAL_DELETE_FILE_TIMES = 20  # runs a DELETE_EXPIRED_COMMITLOG lasts
DELETE_FILES_BATCH_MAX = 10  # MappedFileQueue.DELETE_FILES_BATCH_MAX
FIRST_RUN_DELAY_S = 60.0  # 4.9 schedules the first clean a minute after start
FLUSH_WAIT_S = 0.01  # a deletion waiting for the flush in flight looks again this soon


def disk_used_ratio(path: str) -> float:
    """UtilAll.getDiskPartitionSpaceUsedPercent: used / (used + usable), rounded up to hundredths; -1 when
    the path does not exist."""
    try:
        st = os.statvfs(path)
    except OSError:
        return -1.0
    total = st.f_blocks * st.f_frsize
    if total <= 0:
        return -1.0
    used = total - st.f_bfree * st.f_frsize
    entire = used + st.f_bavail * st.f_frsize
    if entire <= 0:
        return -1.0
    return (used * 100 // entire + (1 if used * 100 % entire else 0)) / 100.0


def hour_matches(delete_when: str, hour: int) -> bool:
    """UtilAll.isItTimeToDo: one of deleteWhen's ";"-separated hours is the current hour."""
    return any(part.strip().isdigit() and int(part) == hour for part in delete_when.split(";"))


def clamp_ratio(disk_max_used_space_ratio: int) -> float:
    """MessageStoreConfig.getDiskMaxUsedSpaceRatio: 10..95 percent, as a fraction."""
    return min(95, max(10, disk_max_used_space_ratio)) / 100.0


@dataclass
class DiskCheck:
    space_to_delete: bool  # reclaim space now, whatever the hour
    clean_immediately: bool  # past diskSpaceCleanForciblyRatio: delete whatever the files' age
    disk_full: bool | None  # the DISK_FULL flag after the check (None: left as it was)


def check_disk(physic: float, logics: float, max_used_ratio: int) -> DiskCheck:
    """CleanCommitLogService.isSpaceToDelete for the commit log's disk (`physic`) and the consume queues'
    (`logics`), in 4.9's order: the physic part first, and it alone decides when it says to delete."""
    ratio = clamp_ratio(max_used_ratio)
    full: bool | None = None
    clean = False
    for used in (physic, logics):
        if used > DISK_SPACE_WARNING_LEVEL_RATIO:
            full, clean = True, True
        elif used > DISK_SPACE_CLEAN_FORCIBLY_RATIO:
            clean = True
        else:
            full = False
        if used < 0 or used > ratio:
            return DiskCheck(True, clean, full)
    return DiskCheck(False, clean, full)


def expired_prefix(last_modified_ms: list[int], now_ms: int, reserved_ms: int, clean_at_once: bool) -> int:
    """How many of the oldest files go (MappedFileQueue.deleteExpiredFileByTime): from the first on, while
    each was last written at least reserved_ms ago (or clean_at_once), never the last file, at most
    DELETE_FILES_BATCH_MAX; the first that is not expired stops it (no deleting in the middle)."""
    n = 0
    for mtime in last_modified_ms[:-1]:
        if n == DELETE_FILES_BATCH_MAX or not (clean_at_once or now_ms >= mtime + reserved_ms):
            break
        n += 1
    return n


class RetentionService:
    """The periodic clean of one message store (classic commit log; DLedger's data is not cleaned yet)."""

    def __init__(
        self,
        store: Any,  # a MessageStore
        config: Any,  # a BrokerConfig: the retention keys are read at each use (updateBrokerConfig)
        clock: Clock,
        *,
        flush_idle: Callable[[], bool] = lambda: True,
        local_hour: Callable[[float], int] = lambda t: time.localtime(t).tm_hour,
        disk_ratio: Callable[[str], float] = disk_used_ratio,
    ):
        self.store = store
        self.config = config
        self.clock = clock
        self.flush_idle = flush_idle
        self.local_hour = local_hour
        self.disk_ratio = disk_ratio
        self.manual_times = 0
        self.disk_full = False
        self.last_physical_min_offset = 0
        self.deleted_files = 0  # commit-log files deleted, ever (a metric)
        self.deleted_queue_files = 0
        self.deleted_index_files = 0
        self._run: Iterator[float] | None = None  # the run in progress: yields seconds to wait
        self._next: DelayedCall | None = None
        self._first: DelayedCall | None = None
        self._loop: Any = None
        self._hold_since: dict[str, float] = {}  # file path -> when a held file was first to go

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self, metrics: Any = None) -> None:
        from rmqha.broker.support.supervision import PeriodicService

        interval = self.config.cleanResourceInterval / 1000.0
        self._loop = PeriodicService("clean_files", self.tick, interval, self.clock, metrics, logger=log)
        self._first = self.clock.callLater(FIRST_RUN_DELAY_S, self._loop.start, True)

    def stop(self) -> None:
        for call in (self._first, self._next):
            if call is not None and call.active():
                call.cancel()
        if self._loop is not None:
            self._loop.stop()
        self._run = None

    def execute_delete_files_manually(self) -> None:
        """DELETE_EXPIRED_COMMITLOG: the next MAX_MANUAL_DELETE_FILE_TIMES runs delete expired files
        whatever the hour (their age still counts, unless the disk is past the forced ratio)."""
        self.manual_times = MAX_MANUAL_DELETE_FILE_TIMES
        log.info("executeDeleteFilesManually was invoked")

    # -- one run ----------------------------------------------------------------------------------
    def tick(self) -> None:
        """Start a run unless one is still going (4.9's runs never overlap: one scheduled thread)."""
        if self._run is None:
            self._run = self._steps()
            self._continue()

    def run_now(self) -> None:
        """One whole run, waits included, for a caller that drives the clock itself (tests)."""
        self.tick()

    def _continue(self) -> None:
        self._next = None
        run = self._run
        if run is None:
            return
        try:
            wait = next(run)
        except StopIteration:
            self._run = None
            return
        except Exception:
            self._run = None
            raise
        self._next = self.clock.callLater(wait, self._continue)

    def _steps(self) -> Iterator[float]:
        yield from self._clean_commitlog()
        yield from self._clean_queues()

    # -- the commit log ---------------------------------------------------------------------------
    def _check(self) -> DiskCheck:
        c = self.config
        check = check_disk(
            self.disk_ratio(c.store_path_physic),
            self.disk_ratio(os.path.join(c.storePathRootDir, "consumequeue")),
            c.diskMaxUsedSpaceRatio,
        )
        if check.disk_full is not None and check.disk_full != self.disk_full:
            self.disk_full = check.disk_full
            if check.disk_full:
                log.error("disk maybe full soon (past %.2f used), so mark disk full", DISK_SPACE_WARNING_LEVEL_RATIO)
            else:
                log.info("disk space OK, so mark disk ok")
            self.store.write_refused = "disk full" if check.disk_full else ""
        return check

    def _clean_commitlog(self) -> Iterator[float]:
        c = self.config
        timeup = hour_matches(c.deleteWhen, self.local_hour(self.clock.seconds()))
        check = self._check()
        manual = self.manual_times > 0
        if not (timeup or check.space_to_delete or manual):
            return
        if manual:
            self.manual_times -= 1
        clean_at_once = c.cleanFileForciblyEnable and check.clean_immediately
        log.info(
            "begin to delete before %d hours file. timeup: %s spacefull: %s manualDeleteFileSeveralTimes: %d "
            "cleanAtOnce: %s",
            c.fileReservedTime,
            timeup,
            check.space_to_delete,
            self.manual_times,
            clean_at_once,
        )
        queue = self.store.commitlog.queue
        mtimes = [int(os.stat(f.path).st_mtime * 1000) for f in queue.files]
        due = expired_prefix(mtimes, int(self.clock.seconds() * 1000), c.fileReservedTime * 3600 * 1000, clean_at_once)
        deleted = 0
        for i in range(due):
            while not self.flush_idle():
                yield FLUSH_WAIT_S
            if not self._delete_first_commitlog_file():
                break  # held by a transfer: the next run tries again
            deleted += 1
            if i + 1 < due and c.deleteCommitLogFilesInterval > 0:
                yield c.deleteCommitLogFilesInterval / 1000.0
        if not deleted and check.space_to_delete:
            log.warning("disk space will be full soon, but delete file failed.")

    def _delete_first_commitlog_file(self) -> bool:
        queue = self.store.commitlog.queue
        if len(queue.files) < 2:
            return False
        f = queue.files[0]
        if getattr(f, "holds", 0) > 0:
            now = self.clock.seconds()
            since = self._hold_since.setdefault(f.path, now)
            if (now - since) * 1000 < self.config.destroyMapedFileIntervalForcibly:
                log.info(
                    "commit log file %s is still being sent; deleted at the latest %.0f s from now",
                    f.path,
                    self.config.destroyMapedFileIntervalForcibly / 1000 - (now - since),
                )
                return False
            log.warning("commit log file %s held for destroyMapedFileIntervalForcibly: deleted anyway", f.path)
        self._hold_since.pop(f.path, None)
        queue.files.pop(0)
        f.destroy()
        self.deleted_files += 1
        log.info("deleted expired commit log file %s; the log now starts at %d", f.path, queue.min_offset)
        return True

    # -- consume queues and the index -------------------------------------------------------------
    def _clean_queues(self) -> Iterator[float]:
        min_offset = self.store.commitlog.min_offset
        if min_offset <= self.last_physical_min_offset:
            return
        self.last_physical_min_offset = min_offset
        for cq in list(self.store.queues.values()):
            while not self.flush_idle():
                yield FLUSH_WAIT_S
            n = cq.delete_expired(min_offset)
            self.deleted_queue_files += n
            if n and self.config.deleteConsumeQueueFilesInterval > 0:
                yield self.config.deleteConsumeQueueFilesInterval / 1000.0
        while not self.flush_idle():
            yield FLUSH_WAIT_S
        self.deleted_index_files += delete_expired_index(self.store.index, min_offset)


def delete_expired_index(index: Any, min_offset: int) -> int:
    """IndexService.deleteExpiredFile: index files (never the last) whose endPhyOffset is below the commit
    log's first offset; returns how many went."""
    n = 0
    while len(index.files) > 1 and index.files[0].end_phy < min_offset:
        f = index.files[0]
        index._delete(f)
        log.info("deleted index file %s (it ends at %d, the log starts at %d)", f.name, f.end_phy, min_offset)
        n += 1
    return n
