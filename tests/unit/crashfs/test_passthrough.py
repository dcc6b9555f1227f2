"""crashfs as an ordinary filesystem: data, sizes, mtimes, readdir, permissions, large files and mmap all
pass through to the backing directory unchanged. Tests images/crashfs through a real mount."""

from __future__ import annotations

import pytest

import hashlib
import mmap
import os
import stat

from .conftest import read, write_file

# builds images/crashfs (cargo, cached per content): not in the fast tier
pytestmark = pytest.mark.compiles


def test_data_and_sizes_reach_the_backing_directory(cfs):
    write_file(cfs.store / "a", b"hello world")
    with open(cfs.store / "a", "r+b") as f:
        f.seek(6)
        f.write(b"there")
    assert read(cfs.store / "a") == b"hello there"
    assert os.stat(cfs.store / "a").st_size == 11
    assert (cfs.backing / "a").read_bytes() == b"hello there"


def test_mtimes_and_permissions(cfs):
    write_file(cfs.store / "t", b"x")
    os.utime(cfs.store / "t", (1_600_000_000.5, 1_700_000_000.25))
    st = os.stat(cfs.store / "t")
    assert st.st_mtime == 1_700_000_000.25 and st.st_atime == 1_600_000_000.5
    os.chmod(cfs.store / "t", 0o640)
    assert stat.S_IMODE(os.stat(cfs.store / "t").st_mode) == 0o640
    assert stat.S_IMODE(os.stat(cfs.backing / "t").st_mode) == 0o640
    os.mkdir(cfs.store / "d", 0o750)
    assert stat.S_ISDIR(os.stat(cfs.store / "d").st_mode)


def test_readdir_lists_every_entry_and_hides_the_graveyard(cfs):
    names = {f"f{i:03d}" for i in range(300)}  # more than one readdir reply
    for n in names:
        write_file(cfs.store / n, n.encode(), fsync=False)
    os.mkdir(cfs.store / "sub")
    os.unlink(cfs.store / "f000")  # waits in the graveyard until durable: never listed
    assert set(os.listdir(cfs.store)) == (names - {"f000"}) | {"sub"}


def test_rename_and_unlink_pass_through(cfs):
    write_file(cfs.store / "x", b"1")
    os.rename(cfs.store / "x", cfs.store / "y")
    assert read(cfs.store / "x") is None and read(cfs.store / "y") == b"1"
    os.unlink(cfs.store / "y")
    assert not (cfs.backing / "y").exists()


def test_a_large_file(cfs):
    chunk = os.urandom(1 << 20)
    h = hashlib.sha256()
    with open(cfs.store / "big", "wb") as f:
        for i in range(64):
            data = bytes([i]) + chunk[1:]
            f.write(data)
            h.update(data)
    assert os.stat(cfs.store / "big").st_size == 64 << 20
    r = hashlib.sha256()
    with open(cfs.store / "big", "rb") as f:
        while block := f.read(1 << 20):
            r.update(block)
    assert r.digest() == h.digest()


def test_shared_mmap_reads_and_writes(cfs):
    write_file(cfs.store / "m", b"\0" * 8192)
    with open(cfs.store / "m", "r+b") as f:
        mm = mmap.mmap(f.fileno(), 8192)
        mm[100:105] = b"abcde"
        mm.flush()
        mm.close()
    assert read(cfs.store / "m")[100:105] == b"abcde"
    assert (cfs.backing / "m").read_bytes()[100:105] == b"abcde"


@pytest.mark.parametrize("write_through", [True, False], ids=["write-through", "writeback-cache"])
def test_status_reports_durable_and_cached_bytes(crashfs_ready, tmp_path, write_through):
    """status counts what the kernel still caches too (it syncfs's first, as the cut does). Write-through,
    crashfs sees the 3 bytes appended; over the writeback cache the kernel writes the dirty page back, whole
    (up to the size: 8) or only its dirty part (3)."""
    from rmqha.cluster import crashfs

    store = tmp_path / "store"
    m = crashfs.mount(store, write_through=write_through)
    try:
        write_file(store / "s", b"12345")
        with open(store / "s", "ab") as f:
            f.write(b"678")
        files = {f["path"]: f for f in m.status()["files"]}
        assert files["s"]["size"] == 8 and files["s"]["durableSize"] == 5
        assert files["s"]["cachedBytes"] == 3 if write_through else 3 <= files["s"]["cachedBytes"] <= 8
    finally:
        crashfs.unmount(store)
