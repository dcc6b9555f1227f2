"""A crashfs mount per test (rmqha/cluster/crashfs.py); skipped, with the reason, where FUSE is not there."""

from __future__ import annotations

import os

import pytest

from rmqha.cluster import crashfs


@pytest.fixture(scope="session")
def crashfs_ready():
    why = crashfs.unavailable()
    if why:
        pytest.skip(f"crashfs cannot mount here: {why}")
    crashfs.binary()  # build once (cached per content in ~/.cache)


@pytest.fixture
def cfs(crashfs_ready, tmp_path, request):
    """A mounted crashfs over an empty store; yields the Mount. Write-through for a test parametrized with
    mode keep-prefix (crashfs refuses that cut over the kernel's writeback cache, which reorders writes)."""
    store = tmp_path / "store"
    store.mkdir()
    params = getattr(request.node, "callspec", None)
    m = crashfs.mount(store, write_through=params is not None and params.params.get("mode") == "keep-prefix")
    try:
        yield m
    finally:
        crashfs.unmount(store)


def fsync_path(p) -> None:
    fd = os.open(p, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file(path, data: bytes, *, fsync: bool = True) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        if fsync:
            os.fsync(f.fileno())


def durable_file(path, data: bytes) -> None:
    """A file whose bytes and name are both durable."""
    write_file(path, data)
    fsync_path(os.path.dirname(path))


def read(path) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None
