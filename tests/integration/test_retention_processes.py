"""Commit-log retention on real processes (rmqha/broker/store/retention.py): a master and its slave written
past many small commit-log files keep only the newest ones once the cleaning runs (4.9: the first a minute
after start), the slave keeps replicating, and both still serve the newest messages. fileReservedTime=0
with diskMaxUsedSpaceRatio=10 (the lowest 4.9 allows) makes every file but the last expired on any disk
that is more than 10% used; the test skips on an emptier one."""

from __future__ import annotations

import os

import pytest

from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.store.retention import disk_used_ratio
from rmqha.cluster.requests import send_v1
from rmqha.cluster.standalone import BrokerProcess, NameServerProcess, rpc
from rmqha.cluster.wait import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

FILE = 64 * 1024
RETENTION = {
    "mappedFileSizeCommitLog": str(FILE),
    "fileReservedTime": "0",
    "diskMaxUsedSpaceRatio": "10",
    "cleanResourceInterval": "1000",
    "deleteCommitLogFilesInterval": "0",
}


def commitlog_files(broker: BrokerProcess) -> list[str]:
    return sorted(os.listdir(broker.store_dir / "commitlog"))


def min_offset(addr: str) -> int:
    r = rpc(addr, RequestCode.GET_MIN_OFFSET, {"topic": "TopicTest", "queueId": "0"})
    assert r.code == ResponseCode.SUCCESS
    return int(r.ext_fields["offset"])


def test_a_master_and_its_slave_keep_only_their_newest_files(tmp_path):
    if disk_used_ratio(str(tmp_path)) <= 0.10:
        pytest.skip("the disk is 10% used or less: diskMaxUsedSpaceRatio cannot be passed here")
    ns = NameServerProcess(tmp_path).start()
    master = slave = None
    try:
        master = BrokerProcess(tmp_path, "broker-ret", ns.addr, extra=RETENTION).start()
        slave = BrokerProcess(tmp_path, "broker-ret", ns.addr, role="SLAVE", extra=RETENTION).start()
        body = b"x" * 2000
        for _ in range(300):  # ~600 KiB: ten files of 64 KiB
            req = send_v1(topic="TopicTest", body=body)
            assert rpc(master.addr, req.code, req.ext_fields, req.body).code == ResponseCode.SUCCESS
        assert len(commitlog_files(master)) >= 9
        wait_until(
            lambda: commitlog_files(slave) == commitlog_files(master), 30, "the slave holds what the master holds"
        )
        # the first run comes a minute after start (4.9's fixed delay), then one a second here
        wait_until(lambda: len(commitlog_files(master)) <= 2, 120, "the master deleted its expired files")
        wait_until(lambda: len(commitlog_files(slave)) <= 2, 60, "the slave deleted its expired files")
        # the consume queue's first readable offset followed; the newest message still reads
        wait_until(lambda: min_offset(master.addr) > 0, 30, "the master's queue start moved")
        assert master.max_offset("TopicTest", 0) == 300
        req = send_v1(topic="TopicTest", body=b"after")
        assert rpc(master.addr, req.code, req.ext_fields, req.body).code == ResponseCode.SUCCESS
        wait_until(lambda: slave.max_offset("TopicTest", 0) == 301, 30, "the slave replicates after the deletions")
        assert slave.status()["haClient"]["state"] == "CONNECTED"
    finally:
        for p in (slave, master, ns):
            if p is not None:
                p.stop()
