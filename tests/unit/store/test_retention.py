"""rmqha/broker/store/retention.py: commit-log retention as 4.9's CleanCommitLogService and
CleanConsumeQueueService have it, on a real store and a task.Clock; the disk's fullness and the local hour
are given (a test cannot fill the disk), everything else is the store's own files."""

import os
import time

import pytest
from twisted.internet.task import Clock

from rmqha.broker.config.properties import BrokerConfig
from rmqha.broker.store import retention
from rmqha.broker.store.index import IndexSettings
from rmqha.broker.store.message_store import GetStatus, PutStatus
from rmqha.broker.store.retention import RetentionService, check_disk, expired_prefix, hour_matches

from .conftest import msg, open_store

FILE = 4096
HOUR_MS = 3600 * 1000


# -- the decisions ------------------------------------------------------------------------------------
def test_delete_when_names_hours_of_the_day():
    assert hour_matches("04", 4) and not hour_matches("04", 5)
    assert hour_matches("04;16", 16) and hour_matches(" 3; 5", 5) and not hour_matches("", 0)


@pytest.mark.parametrize(
    "physic, logics, ratio, want",
    [
        (0.50, 0.50, 75, (False, False, False)),  # plenty of room: only the hour or an admin deletes
        (0.80, 0.50, 75, (True, False, False)),  # past diskMaxUsedSpaceRatio: reclaim, old files only
        (0.86, 0.50, 95, (False, True, False)),  # past 0.85: forced, though under the (95%) ratio
        (0.91, 0.50, 95, (False, True, False)),  # the consume queues' disk said OK last: not full
        (0.91, 0.91, 95, (False, True, True)),  # past 0.90 on both: writes refused
        (0.92, 0.10, 75, (True, True, True)),  # the physic part alone decides when it says delete
        (-1.0, 0.10, 75, (True, False, False)),  # no such directory: reclaim, as 4.9
        (0.60, 0.60, 5, (True, False, False)),  # the ratio is clamped to 10..95
    ],
)
def test_the_disk_check_is_4_9s(physic, logics, ratio, want):
    c = check_disk(physic, logics, ratio)
    assert (c.space_to_delete, c.clean_immediately, bool(c.disk_full)) == want


def test_expired_files_go_oldest_first_never_the_last_nor_past_a_young_one():
    now = 100 * HOUR_MS
    old, young = now - 73 * HOUR_MS, now - HOUR_MS
    assert expired_prefix([old, old, young, old, old], now, 72 * HOUR_MS, False) == 2
    assert expired_prefix([old, old], now, 72 * HOUR_MS, False) == 1  # the last file stays
    assert expired_prefix([young, young, young], now, 72 * HOUR_MS, True) == 2  # forced: age does not count
    assert expired_prefix([old] * 30, now, 72 * HOUR_MS, False) == retention.DELETE_FILES_BATCH_MAX


# -- the service on a store -----------------------------------------------------------------------------
class World:
    def __init__(self, root, hour=4, ratio=0.30, **settings):
        self.clock = Clock()
        self.clock.advance(time.time())  # the files' mtimes are the wall clock's
        props = {"brokerName": "b", "storePathRootDir": str(root), "mappedFileSizeCommitLog": str(FILE)}
        props.update({k: str(v) for k, v in settings.items()})
        self.config = BrokerConfig.from_properties(props)
        self.store = open_store(
            root,
            file_size=FILE,
            cq_file_size=20 * 8,
            now_ms=lambda: int(self.clock.seconds() * 1000),
            index=IndexSettings(True, 16, 8),
        )
        self.hour, self.ratio, self.flushing = hour, ratio, False
        self.service = RetentionService(
            self.store,
            self.config,
            self.clock,
            flush_idle=lambda: not self.flushing,
            local_hour=lambda _t: self.hour,
            disk_ratio=lambda _path: self.ratio,
        )

    def fill(self, n):
        for i in range(n):
            assert self.store.put_message(msg(i, size=300)).status == PutStatus.PUT_OK
        self.store.dispatch_pending()

    def age(self, hours, files=None):
        """Make the commit log's first `files` files last written `hours` ago."""
        at = self.clock.seconds() - hours * 3600
        for f in self.store.commitlog.queue.files[:files]:
            os.utime(f.path, (at, at))

    def run(self):
        """One run, its waits (deleteCommitLogFilesInterval ...) included."""
        self.service.run_now()
        for _ in range(1000):
            if self.service._run is None:
                return
            self.clock.advance(0.05)
        raise AssertionError("the run did not end")

    @property
    def files(self):
        return [f.base for f in self.store.commitlog.queue.files]


@pytest.fixture
def world(tmp_path):
    worlds = []

    def make(**kw):
        w = World(tmp_path / f"w{len(worlds)}", **kw)
        worlds.append(w)
        return w

    yield make
    for w in worlds:
        w.service.stop()
        if not w.store.closed:
            w.store.shutdown()


def test_at_the_delete_hour_files_past_file_reserved_time_go_and_queues_and_index_follow(world):
    w = world(hour=4, fileReservedTime=72)
    w.fill(60)  # 60 x ~400 bytes: 6+ files of 4 KiB
    files = w.files
    assert len(files) >= 6
    cq = w.store.queues[("T", 0)]
    queue_files, index_files = len(cq.files.files), len(w.store.index.files)
    w.age(100, files=3)
    w.run()
    assert w.files == files[3:]  # the three old ones, oldest first; the young ones stay
    assert w.store.min_offset == files[3]
    # consume queues: the files whose units all point below the log's start are gone, and the queue's
    # first readable offset is its first unit still in the log
    assert len(cq.files.files) < queue_files
    first = cq.get(cq.min_index)
    assert first[0] >= files[3] and cq.get(cq.min_index - 1) is None or cq.get(cq.min_index - 1)[0] < files[3]
    r = w.store.get_messages("T", 0, 0, 32)
    assert (r.status, r.next_begin_offset) == (GetStatus.OFFSET_TOO_SMALL, cq.min_index)
    assert w.store.get_messages("T", 0, cq.min_index, 1).status == GetStatus.FOUND
    assert len(w.store.index.files) < index_files
    assert all(f.end_phy >= files[3] for f in w.store.index.files[:-1])
    assert (w.service.deleted_files, w.service.deleted_queue_files > 0) == (3, True)


def test_outside_the_hour_with_room_nothing_goes_until_an_admin_asks(world):
    w = world(hour=5, deleteWhen="04", fileReservedTime=72)
    w.fill(60)
    files = w.files
    w.age(100, files=2)
    w.run()
    assert w.files == files
    w.service.execute_delete_files_manually()  # DELETE_EXPIRED_COMMITLOG (329)
    w.run()
    assert w.files == files[2:]  # only what fileReservedTime allows
    assert w.service.manual_times == retention.MAX_MANUAL_DELETE_FILE_TIMES - 1


def test_past_the_used_space_ratio_old_files_go_at_any_hour(world):
    w = world(hour=5, deleteWhen="04", diskMaxUsedSpaceRatio=75, fileReservedTime=72)
    w.fill(60)
    files = w.files
    w.age(100, files=1)
    w.ratio = 0.80
    w.run()
    assert w.files == files[1:]  # young files stay: under 0.85 the age still counts


def test_past_the_clean_forcibly_ratio_young_files_go_too_and_past_the_warning_writes_stop(world):
    w = world(hour=5, deleteWhen="04", fileReservedTime=72)
    w.fill(60)
    files = w.files
    w.ratio = 0.86
    w.run()
    assert w.files == files[-1:] or len(files) - 1 > retention.DELETE_FILES_BATCH_MAX
    assert not w.store.write_refused
    w.ratio = 0.93
    w.run()
    r = w.store.put_message(msg(999))
    assert r.status == PutStatus.SERVICE_NOT_AVAILABLE and "disk is full" in r.remark
    w.ratio = 0.40
    w.run()
    assert w.store.put_message(msg(1000)).status == PutStatus.PUT_OK


def test_forced_cleaning_is_off_without_clean_file_forcibly_enable(world):
    w = world(hour=5, deleteWhen="04", cleanFileForciblyEnable="false")
    w.fill(60)
    files = w.files
    w.ratio = 0.88
    w.run()
    assert w.files == files  # nothing old enough, and forcing is off


def test_deletions_are_paced_and_wait_for_the_flush_in_flight(world):
    w = world(hour=4, deleteCommitLogFilesInterval=1000)
    w.fill(60)
    files = w.files
    w.age(100, files=3)
    w.flushing = True
    w.service.run_now()
    w.clock.advance(0.5)
    assert w.files == files  # a flush is syncing the files: nothing is closed under it
    w.flushing = False
    w.clock.advance(0.02)
    assert w.files == files[1:]
    w.clock.advance(0.9)
    assert w.files == files[1:]  # deleteCommitLogFilesInterval between two deletions
    w.clock.advance(0.2)
    assert w.files == files[2:]
    w.clock.advance(1.1)
    assert w.files == files[3:]


def test_a_file_an_ha_transfer_sends_from_waits_at_most_destroy_maped_file_interval_forcibly(world):
    w = world(hour=4, destroyMapedFileIntervalForcibly=120000)
    w.fill(60)
    files = w.files
    w.age(100, files=2)
    w.store.commitlog.queue.files[0].holds = 1  # frames of it queued on a slave's socket
    w.run()
    assert w.files == files  # held: and the run stops there (never deleting in the middle)
    w.clock.advance(100)
    w.run()
    assert w.files == files
    w.clock.advance(21)
    w.run()
    assert w.files == files[2:]


def test_the_service_runs_every_clean_resource_interval_from_a_minute_after_start(world):
    w = world(hour=4, cleanResourceInterval=10000)
    w.fill(60)
    files = w.files
    w.age(100, files=1)
    w.service.start()
    w.clock.advance(59)
    assert w.files == files
    w.clock.advance(2)
    assert w.files == files[1:]
    w.age(100, files=1)
    w.clock.advance(10)
    assert w.files == files[2:]


def test_a_store_whose_first_files_are_gone_restarts_and_serves_from_its_first_offset(world, tmp_path):
    w = world(hour=4)
    w.fill(60)
    files = w.files
    w.age(100, files=3)
    w.run()
    cq_min = w.store.queues[("T", 0)].min_index
    max_offset = w.store.max_offset
    w.store.shutdown()
    s = open_store(w.store.root, file_size=FILE, cq_file_size=20 * 8, index=IndexSettings(True, 16, 8))
    try:
        assert (s.min_offset, s.max_offset) == (files[3], max_offset)
        assert s.queues[("T", 0)].min_index == cq_min  # corrected at recovery, as 4.9's correctMinOffset
        assert s.get_messages("T", 0, cq_min, 1).status == GetStatus.FOUND
        assert s.get_messages("T", 0, cq_min - 1, 1).status == GetStatus.OFFSET_TOO_SMALL
        assert s.put_message(msg(500)).status == PutStatus.PUT_OK
    finally:
        s.shutdown()


def test_the_retention_keys_are_read_at_each_use(world):
    w = world(hour=4, fileReservedTime=200)
    w.fill(60)
    files = w.files
    w.age(100, files=2)
    w.run()
    assert w.files == files
    w.config.fileReservedTime = 72  # what UPDATE_BROKER_CONFIG does for a live key
    w.run()
    assert w.files == files[2:]


def test_the_config_s_physic_path_is_dledger_s_data_directory_in_dledger_mode(tmp_path):
    cfg = BrokerConfig.from_properties(
        {
            "brokerName": "b",
            "storePathRootDir": str(tmp_path),
            "enableDLegerCommitLog": "true",
            "dLegerGroup": "b",
            "dLegerPeers": "n0-127.0.0.1:40914",
            "dLegerSelfId": "n0",
        }
    )
    assert cfg.store_path_physic == os.path.join(str(tmp_path), "dledger-n0", "data")


def test_a_slave_s_dispatch_behind_the_deleted_files_continues_at_the_log_s_first_offset(tmp_path):
    # A slave's dispatch (consume queues from replicated bytes) that has not reached the files retention
    # deleted would otherwise wait for bytes that are gone, for ever (4.9's reput jumps to minOffset).
    master = open_store(tmp_path / "m", file_size=FILE)
    slave = open_store(tmp_path / "s", file_size=FILE)
    try:
        for i in range(60):
            master.put_message(msg(i, size=300))
        master.dispatch_pending()
        data = master.commitlog.read
        offset = 0
        while offset < master.max_offset:
            chunk = data(offset, FILE)
            slave.append_replicated(offset, chunk)
            offset += len(chunk)
        files = slave.commitlog.queue.files
        first = files[2].base
        while slave.commitlog.min_offset < first:
            files.pop(0).destroy()
        assert slave.reput_offset == 0
        while slave.dispatch():
            pass
        assert slave.reput_offset == slave.max_offset
        cq = slave.queues[("T", 0)]
        assert cq.get(cq.max_index - 1) == master.queues[("T", 0)].get(cq.max_index - 1)
        assert slave.get_messages("T", 0, cq.max_index - 1, 1).status == GetStatus.FOUND
    finally:
        master.shutdown()
        slave.shutdown()
