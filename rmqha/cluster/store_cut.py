"""The reported power model's cut (rmqha/cluster/power.py names the models): a node's store cut, from
outside, at the positions the broker reports as fsynced. Tests: tests/unit/chaos/test_nemesis_and_faults.py,
tests/unit/dledger/test_power_loss_cut.py, tests/unit/pipeline/test_audit_fork.py.

Also the cut itself (drop_after), which repair (rmqha/cluster/repair.py) uses to cut a slave at a fork."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import struct
from pathlib import Path

from . import ClusterError, Unsupported

CHECKPOINT_DURABLE = struct.Struct(">q")  # rmqha/broker/store/message_store.py: bytes 24..32 of store/checkpoint
CHECKPOINT_DURABLE_AT = 24


def reported_power_loss(cluster, node: str) -> dict:
    """SIGKILL, then every commit-log byte past the durable offset dropped.

    The durable offset is polled from /status before the kill and read again after it from the
    store's checkpoint file (the broker writes it there after each fdatasync, before answering any
    send that waited for it); the larger one is used: nothing acknowledged as flushed is dropped,
    and nothing that was not fsynced is kept. The node is left stopped; start() brings it back
    (it then recovers as after a crash). Returns what was done, for the history.

    A DLedger node: dledger_power_loss."""
    impl = cluster.node(node).get("implementation", "ours")
    if impl != "ours":
        from .power import PowerNotModelled

        raise PowerNotModelled(
            f"{node} runs the {impl} broker: the reported power model reads our /status's durableOffset, "
            "which no 4.9 broker serves; power faults on it are not exercised (use the fs model, crashfs)"
        )
    if cluster.is_dledger(node):
        return dledger_power_loss(cluster, node)
    st = cluster.status(node)
    if st is None or st.get("durableOffset") is None:
        raise ClusterError(
            f"{node} does not answer /status with a durableOffset: cannot simulate a power "
            "loss without knowing what is on disk"
        )
    polled, max_before = int(st["durableOffset"]), st.get("maxPhyOffset")
    cluster.kill(node)
    store = cluster.store_path(node)
    ckpt = read_checkpoint_durable(store)
    durable = max(polled, ckpt or 0)
    size = int(cluster.node(node).get("commitlogFileSize") or 0)
    dropped = drop_after(store / "commitlog", durable, size)
    return {
        "durableOffset": durable,
        "polledDurableOffset": polled,
        "checkpointDurableOffset": ckpt,
        "maxPhyOffsetBefore": max_before,
        "droppedBytes": dropped,
    }


def dledger_power_loss(cluster, node: str) -> dict:
    """Power loss on a DLedger node: SIGKILL, then its dledger-<selfId>/data and index files cut at
    the positions the store's last fsync covered (zeros from there on, later files removed), as if
    nothing after them reached the disk. The positions are polled from /status (dledger
    durableDataPos, durableIndexPos) and read again after the kill from dledger-<selfId>/durable,
    which the store rewrites after each fsync and before each cut of its log; that record wins (it
    is the newer, and a follower's truncation may have lowered it). The store's recovery then
    stops at the first zeroed entry or unwritten index slot. currterm is fsynced before use, so it
    is kept; checkpoint (committedIndex, not fsynced) is kept too: it only names committed entries
    and recovery clamps it to the log's end. The node is left stopped."""
    st = cluster.status(node)
    dl = (st or {}).get("dledger") or {}
    if dl.get("durableDataPos") is None or not dl.get("selfId"):
        raise ClusterError(
            f"{node} does not answer /status with dledger durableDataPos: cannot simulate a power loss "
            "without knowing what is on disk"
        )
    if cluster.node(node).get("storePathDLedgerCommitLog"):
        raise Unsupported(f"{node} keeps its DLedger data outside its store (storePathDLedgerCommitLog)")
    polled = (int(dl["durableDataPos"]), int(dl["durableIndexPos"]))
    before = {"endIndex": dl.get("endIndex"), "committedIndex": dl.get("committedIndex"), "role": dl.get("role")}
    cluster.kill(node)
    base = cluster.store_path(node) / f"dledger-{dl['selfId']}"
    record = read_dledger_durable(base)
    data_pos, index_pos = record if record is not None else polled
    return {
        "durableDataPos": data_pos,
        "durableIndexPos": index_pos,
        "polledDurable": list(polled),
        "recordDurable": list(record) if record is not None else None,
        "before": before,
        "droppedDataBytes": drop_after(base / "data", data_pos),
        "droppedIndexBytes": drop_after(base / "index", index_pos),
    }


# ---- the store, seen from outside ----------------------------------------------------------------


def read_checkpoint_durable(store: Path) -> int | None:
    """The durable commit-log offset the broker last wrote into store/checkpoint (None: not there)."""
    try:
        with open(Path(store) / "checkpoint", "rb") as fh:
            fh.seek(CHECKPOINT_DURABLE_AT)
            raw = fh.read(CHECKPOINT_DURABLE.size)
    except OSError:
        return None
    if len(raw) < CHECKPOINT_DURABLE.size:
        return None
    (v,) = CHECKPOINT_DURABLE.unpack(raw)
    return v if v > 0 else None


def read_dledger_durable(dledger_dir: Path) -> tuple[int, int] | None:
    """(data, index) durable positions from dledger-<selfId>/durable (rmqha/broker/dledger/file_store.py),
    None when it is not there."""
    from rmqha.broker.dledger.file_store import DURABLE_FILE, DURABLE_RECORD

    try:
        raw = (Path(dledger_dir) / DURABLE_FILE).read_bytes()
    except OSError:
        return None
    if len(raw) < DURABLE_RECORD.size:
        return None
    data, index = DURABLE_RECORD.unpack_from(raw)
    return data, index


_FALLOC_FL_KEEP_SIZE, _FALLOC_FL_PUNCH_HOLE = 0x01, 0x02


def _punch_hole(fd: int, offset: int, length: int) -> bool:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    fn = libc.fallocate
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong]
    return fn(fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, offset, length) == 0


def drop_after(commitlog_dir: Path, durable: int, file_size: int = 0) -> int:
    """Make the commit log hold nothing past `durable`, as if the bytes after it never reached the disk:
    the file holding `durable` keeps its size (files are preallocated) with zeros from there on; later
    files are removed. Returns how many non-zero bytes were dropped."""
    from rmqha.broker.store.mapped_file import list_files

    dropped = 0
    for base, path in list_files(str(commitlog_dir)):
        size = os.path.getsize(path)
        if base + size <= durable:
            continue
        start = max(0, durable - base)
        if start == 0 and base > 0:
            dropped += _nonzero_bytes(path, 0)
            os.unlink(path)
            continue
        dropped += _nonzero_bytes(path, start)
        fd = os.open(path, os.O_RDWR)
        try:
            if not _punch_hole(fd, start, size - start):
                zeros = bytes(1 << 20)
                pos = start
                while pos < size:
                    pos += os.pwrite(fd, zeros[: min(len(zeros), size - pos)], pos)
        finally:
            os.close(fd)
    return dropped


def _nonzero_bytes(path: str, start: int) -> int:
    """Bytes from start to the last non-zero byte of the file (where the written data ends)."""
    size = os.path.getsize(path)
    chunk = 1 << 20
    end = start
    with open(path, "rb") as fh:
        pos = start
        while pos < size:
            fh.seek(pos)
            data = fh.read(min(chunk, size - pos))
            stripped = data.rstrip(b"\0")
            if stripped:
                end = pos + len(stripped)
            elif pos > end + 4 * chunk:
                break  # 4 MiB of zeros after the last data: the end of what was written
            pos += len(data)
    return end - start
