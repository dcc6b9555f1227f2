"""A power cut under Apache RocketMQ 4.9.x on crashfs (rmqha/cluster/power.py): the kit mounts every 4.9
broker's whole store (storePathRootDir: commit log, consume queues, index, checkpoint, config/*.json) on
its own crashfs mount and cuts it without asking the broker, as it does for ours.

4.9 writes its commit log through a memory map and, in ASYNC_FLUSH, forces it (msync) every 500 ms: the
cut must find changes the broker wrote and never forced, and drop them; then the audit must judge the run
(every verdict computed, the power fault's cell judged by the guarantee matrix's promise).

ext4 semantics (--fs-semantics ext4: an fsync of a file also commits earlier names): 4.9 never fsyncs a
directory, so under POSIX's worst case a cut removes every file it created since the mount, the commit
log's included (docs/guarantees.md); ext4 and XFS, where 4.9 runs, commit a new file's name with its fsync.

`make test-apache ROCKETMQ_HOME=<dir>`; skipped without a 4.9.x distribution, or where crashfs cannot mount.
"""

from __future__ import annotations

import ctypes
import os

import pytest

from rmqha.cluster import crashfs
from rmqha.cluster.implementations import parse_choice, unavailable_reason
from rmqha.cluster.power import fs_power_loss, mount_stores
from rmqha.rmqkit import RocketMQCluster
from rmqha.runs.faultlog import read_faults

from .test_apache_broker import send
from .test_planted_bugs import audited, chaos_run, matrix_cells

HOME = os.environ.get("ROCKETMQ_HOME")
WHY = (
    ""
    if HOME
    else "ROCKETMQ_HOME is not set: run `make test-apache ROCKETMQ_HOME=<an Apache RocketMQ 4.9.x distribution>`"
)
if HOME:
    WHY = unavailable_reason(parse_choice("apache", home=HOME)) or ""
WHY = WHY or (f"crashfs cannot mount here: {crashfs.unavailable()}" if crashfs.unavailable() else "")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.apache,
    # four 4.9 JVMs started, each stopped and started again on its mount, the cut node restarted, the audit
    pytest.mark.timeout(1500),
    pytest.mark.skipif(bool(WHY), reason=WHY),
]
pytest.importorskip("rocketmq.client")

# broker-a's master loses power once sends have flowed for a while (4.9's nodes answer 20-40 s after a
# start on a loaded machine: the run is long enough for the heal to be waited for)
SCHEDULE = [{"at": 12, "hold": 2, "kind": "power-loss", "target": "broker-a"}]


def test_a_power_cut_on_a_49_master_drops_what_it_never_forced_and_is_judged(tmp_path):
    rc, out, run_dir = chaos_run(
        tmp_path,
        "ap-power",
        "2m-2s-sync",
        SCHEDULE,
        {"flushDiskType": "ASYNC_FLUSH"},
        [
            "--broker",
            "apache",
            "--rocketmq-home",
            HOME,
            "--power-model",
            "fs",
            "--fs-semantics",
            "ext4",
            "--duration",
            "30",
            "--catchup-timeout",
            "60",
        ],
        timeout=1400,
    )
    assert "every broker's store on crashfs" in out, out
    cuts = [r for r in read_faults(run_dir) if r["kind"] == "power-loss" and r["op"] == "inject"]
    assert len(cuts) == 1, out
    info = cuts[0]["info"]
    assert info["powerModel"] == "fs" and "durableOffset" not in info, info  # the filesystem's cut
    # the cut was real: changes to the commit log that 4.9 wrote through its mapping and never forced
    commitlog = [f for f in info["files"] if f["path"].startswith("commitlog/")]
    assert commitlog and sum(f["droppedChanges"] for f in commitlog) > 0, info
    assert info["droppedChanges"] > 0, info
    # ...and the audit judged it: every verdict computed, the fault's cell judged against its promise
    verdicts = audited(run_dir)
    assert verdicts and all(v["status"] in ("PASS", "WARN", "FAIL", "INFO") for v in verdicts.values()), verdicts
    assert rc in (0, 1), out  # 0 every guarantee held, 1 one failed; anything else is a broken run
    judged = matrix_cells(run_dir, "2m-2s-sync", "ASYNC_FLUSH")
    assert ("power-loss", "master") in judged, judged
    verdict, _why = judged[("power-loss", "master")]
    assert verdict in ("PASS", "WEAK", "FAIL", "not exercised"), judged


def _commitlog_pending(m: crashfs.Mount) -> int:
    """Bytes of the first commit-log file changed since crashfs last saw it fsynced (msync is an fsync).
    syncfs first, as the cut does: pages the broker dirtied through its mapping reach crashfs as plain
    writes (FUSE sends no fsync for a syncfs), so nothing still in the page cache hides from the count."""
    fd = os.open(m.store, os.O_RDONLY)
    try:
        assert ctypes.CDLL(None, use_errno=True).syncfs(fd) == 0
    finally:
        os.close(fd)
    files = {f["path"]: f for f in m.status()["files"]}
    return files["commitlog/00000000000000000000"]["cachedBytes"]


def test_crashfs_sees_every_force_of_49s_commit_log_and_a_cut_takes_the_rest(tmp_path):
    """4.9's ASYNC_FLUSH thread wakes every 500 ms and forces (msync) the commit log's mapping once at
    least flushCommitLogLeastPages (4) pages are written, all of it every flushCommitLogThoroughInterval
    (10 s; 10 min here, so what is left under 4 pages stays unforced). crashfs must count each force as a
    sync (a tail under 4 pages pending, not everything written), and the cut must take exactly that tail:
    4.9 comes back at the offset it last forced."""
    sets = {"flushDiskType": "ASYNC_FLUSH", "flushCommitLogThoroughInterval": "600000"}
    with RocketMQCluster("2m-noslave", "local", broker="apache", rocketmq_home=HOME, run_root=tmp_path, sets=sets) as c:
        h = c.handle
        mount_stores(h, ["broker-a"], semantics="ext4")
        m = crashfs.find(h.store_path("broker-a"))
        addr = h.addr("broker-a")
        assert send(addr, "ApachePower", 300) == [0] * 300
        written = h.max_offset("broker-a")
        assert written > 8 * 4096  # many forces' worth
        # every force reached crashfs: what is pending is the tail written since the last one. 4.9 forces once
        # the write position is 4 pages past the flushed one, so the tail touches at most 4 pages (the page the
        # last force ended in, written again, and 3 more), and crashfs counts whole pages: up to 4 * 4096
        pending = h.wait_until(
            lambda: (lambda p: [p] if p <= 4 * 4096 else None)(_commitlog_pending(m)), 60, "a force of the log"
        )[0]
        if pending == 0:  # the last send ended exactly at a force: leave one unforced
            assert send(addr, "ApachePower", 1) == [0]
            written = h.max_offset("broker-a")
            pending = _commitlog_pending(m)
        assert 0 < pending <= 4 * 4096, pending
        info = fs_power_loss(h, "broker-a")
        cut = {f["path"]: f for f in info["files"]}
        assert cut["commitlog/00000000000000000000"]["droppedChanges"] > 0, info
        h.start("broker-a", timeout=180)
        back = h.max_offset("broker-a")
        # 4.9 recovers the log up to its last valid record: the bytes it forced, none of the tail
        assert 0 < back < written, (back, written, pending)
        assert written - back <= pending, (back, written, pending)  # the tail (crashfs counts whole pages)
