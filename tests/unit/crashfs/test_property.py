"""Random operation sequences on crashfs against an in-memory model: after a cut, each file holds what its
model says survives (lose-unsynced: exactly the durable image; keep-prefix: one of its states since the
last fsync). Tests images/crashfs through a real mount."""

from __future__ import annotations

import os
import random

import pytest

from .conftest import fsync_path, read

# builds images/crashfs (cargo, cached per content): not in the fast tier
pytestmark = pytest.mark.compiles

# hypothesis is not among the project's dev dependencies: seeded sequences from random, 60 of them, each
# seed printed by its test id so a failure replays.
FILES = ("f0", "f1")


def random_ops(rng: random.Random) -> list[tuple]:
    ops: list[tuple] = []
    for _ in range(rng.randint(0, 25)):
        name, kind = rng.choice(FILES), rng.random()
        if kind < 0.6:
            ops.append(("write", name, rng.randint(0, 20000), rng.randbytes(rng.randint(1, 6000))))
        elif kind < 0.8:
            ops.append(("truncate", name, rng.randint(0, 20000)))
        else:
            ops.append(("fsync", name))
    return ops


def apply(model: bytearray, o) -> None:
    if o[0] == "write":
        off, data = o[2], o[3]
        if len(model) < off + len(data):
            model.extend(b"\0" * (off + len(data) - len(model)))
        model[off : off + len(data)] = data
    elif o[0] == "truncate":
        del model[o[2] :]
        model.extend(b"\0" * (o[2] - len(model)))


def between(got: bytes, a: bytes, b: bytes) -> bool:
    """got is `a` with part of the change to `b` applied: the kernel may hand one write(2) to the
    filesystem as several requests, split where a page it has not cached starts, and keep-prefix keeps a
    prefix of those requests."""
    if not min(len(a), len(b)) <= len(got) <= max(len(a), len(b)):
        return False
    pa, pb = a.ljust(len(got), b"\0"), b.ljust(len(got), b"\0")
    return all(g in (x, y) for g, x, y in zip(got, pa, pb))


@pytest.fixture(scope="module")
def mounts(crashfs_ready, tmp_path_factory):
    """One mount over the kernel's writeback cache (the default) and one write-through (keep-prefix needs it)."""
    from rmqha.cluster import crashfs

    stores = {wt: tmp_path_factory.mktemp("prop") / "store" for wt in (False, True)}
    try:
        yield {wt: crashfs.mount(store, write_through=wt) for wt, store in stores.items()}
    finally:
        for store in stores.values():
            crashfs.unmount(store)


@pytest.mark.parametrize("example", range(60))
def test_random_sequences_match_the_model(mounts, example):
    rng = random.Random(example)
    ops, mode, seed = random_ops(rng), rng.choice(["lose-unsynced", "keep-prefix"]), rng.randint(0, 99)
    # lose-unsynced on both mounts (alternately), keep-prefix write-through only
    mounted = mounts[mode == "keep-prefix" or example % 2 == 1]
    root = mounted.store
    for name in FILES:  # a fresh, durable, empty start for each example
        with open(root / name, "wb") as f:
            os.fsync(f.fileno())
    fsync_path(root)
    durable = {n: bytearray() for n in FILES}
    states = {n: [b""] for n in FILES}  # every state of the file since its last fsync
    live = {n: bytearray() for n in FILES}
    fds = {n: os.open(root / n, os.O_RDWR) for n in FILES}
    try:
        for o in ops:
            name = o[1]
            if o[0] == "write":
                os.pwrite(fds[name], o[3], o[2])
            elif o[0] == "truncate":
                os.ftruncate(fds[name], o[2])
            else:
                os.fsync(fds[name])
                durable[name] = bytearray(live[name])
                states[name] = [bytes(live[name])]
                continue
            apply(live[name], o)
            states[name].append(bytes(live[name]))
    finally:
        for fd in fds.values():
            os.close(fd)
    mounted.cut(mode, seed)
    for name in FILES:
        got = read(root / name)
        if mode == "lose-unsynced":
            assert got == bytes(durable[name])
        else:
            s = states[name]
            assert got in s or any(between(got, s[i], s[i + 1]) for i in range(len(s) - 1))
