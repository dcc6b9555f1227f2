"""crashfs over the kernel's writeback cache (its default): write(2) lands in the page cache and reaches
crashfs at writeback, at the latest at the file's fsync or at the cut's syncfs. The cut must still take
exactly what was never fsynced, and a process started afterwards must see it taken, although the kernel
trusts its own size of a cached inode over crashfs's. Tests images/crashfs through a real mount."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rmqha.cluster.crashfs import ClusterError

from .conftest import durable_file, read

# builds images/crashfs (cargo, cached per content): not in the fast tier
pytestmark = pytest.mark.compiles

PAGE = 4096


def fresh_read(path) -> tuple[int, bytes]:
    """Size and bytes as a process started now sees them (nothing it inherits holds the file)."""
    code = (
        "import os, sys; p = sys.argv[1]; sys.stdout.buffer.write(b'%d ' % os.stat(p).st_size + open(p, 'rb').read())"
    )
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, check=True).stdout
    size, _, data = out.partition(b" ")
    return int(size), data


def test_the_cut_takes_unsynced_appends_and_overwrites_the_kernel_still_cached(cfs):
    """The file grows and is overwritten, never fsynced, and closed: the kernel holds the bytes and its own
    size (13192). After the cut a new process sees the durable 8192 bytes. Before crashfs gave every file a
    new inode number at the cut, the kernel kept its cached size and this read 13192 (measured on 6.18)."""
    p = cfs.store / "f"
    durable_file(p, b"A" * 2 * PAGE)
    fd = os.open(p, os.O_WRONLY)
    os.pwrite(fd, b"B" * 5000, 2 * PAGE)
    os.pwrite(fd, b"C" * 100, 10)
    assert os.fstat(fd).st_size == 2 * PAGE + 5000
    os.close(fd)
    files = {f["path"]: f for f in cfs.cut("lose-unsynced", 1)["files"]}
    assert files["f"]["sizeBefore"] == 2 * PAGE + 5000 and files["f"]["sizeAfter"] == 2 * PAGE
    assert fresh_read(p) == (2 * PAGE, b"A" * 2 * PAGE)
    assert read(p) == b"A" * 2 * PAGE


def test_fsync_hands_the_cached_writes_over_first_and_later_ones_are_cut(cfs):
    """fsync: the kernel writes the dirty pages back and waits for crashfs before it sends FSYNC, so
    everything written before the fsync is durable, and nothing written after it."""
    p = cfs.store / "g"
    durable_file(p, b"")
    with open(p, "r+b", buffering=0) as f:
        f.write(b"x" * (3 * PAGE + 7))
        os.fsync(f.fileno())
        f.write(b"y" * 100)
        f.seek(PAGE + 1)
        f.write(b"z")
    cfs.cut("lose-unsynced", 1)
    assert fresh_read(p) == (3 * PAGE + 7, b"x" * (3 * PAGE + 7))


_HOLDER = """
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
os.pwrite(fd, b"u" * 5000, 4096)  # grows the file; never fsynced
print("ready", flush=True)
sys.stdin.readline()
try:
    os.pwrite(fd, b"v" * 4096, 0)  # after the cut: a whole page, which the kernel takes without reading
    os.fsync(fd)
    print("synced", flush=True)
except OSError as e:
    print("refused", e.errno, flush=True)
"""


def test_a_process_holding_the_file_across_the_cut_changes_nothing_others_see(cfs):
    """The holder's open file keeps its inode (and the kernel's size and pages of it) alive across the cut;
    a process opening the file afterwards must get the durable image all the same, and the holder's write
    after the cut, taken into its page cache, must reach neither the file nor any other reader."""
    p = cfs.store / "h"
    durable_file(p, b"d" * PAGE)
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(p)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert holder.stdout.readline().strip() == b"ready"
        cfs.cut("lose-unsynced", 1)
        assert fresh_read(p) == (PAGE, b"d" * PAGE)
        out, _ = holder.communicate(b"go\n", timeout=60)
    finally:
        if holder.poll() is None:
            holder.kill()
    assert b"synced" not in out, out  # its fsync after the cut is refused
    os.sync()
    assert fresh_read(p) == (PAGE, b"d" * PAGE)
    assert (cfs.backing / "h").read_bytes() == b"d" * PAGE


def test_keep_prefix_is_refused_over_the_writeback_cache(cfs):
    """The writeback cache merges and reorders writes into pages: a prefix of what crashfs received is not a
    prefix of the application's writes, so crashfs says so instead of cutting (write_through=True mounts
    for keep-prefix)."""
    durable_file(cfs.store / "k", b"k")
    with pytest.raises(ClusterError, match="write-through"):
        cfs.cut("keep-prefix", 1)
    assert read(cfs.store / "k") == b"k"
