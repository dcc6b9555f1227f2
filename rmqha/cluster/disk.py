"""A size-limited store (the disk-full fault): a node's store on a tmpfs of its own, filled with a filler
file and freed again. Tests: tests/unit/cluster/test_fill_filesystem.py."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from . import ClusterError, Unsupported

FILLER = "fill-disk.filler"


def limit_disk(cluster, node: str, size_mb: int) -> dict:
    """Put the node's store on its own tmpfs of size_mb MiB (a host mount, so root; a docker container
    bind-mounts the store when it starts, so it sees the mount too). A running node is stopped
    cleanly first and started again after its store was copied onto the tmpfs. down() moves the store
    back onto the ordinary disk."""
    store = cluster.store_path(node)
    if is_size_limited(store):
        return {"limitMb": _mount_size_mb(store), "already": True}
    if os.geteuid() != 0:
        raise Unsupported("a size-limited store is a tmpfs mount, which needs root")
    running = cluster.running(node)
    if running:
        cluster.stop(node)
    store.mkdir(parents=True, exist_ok=True)
    aside = store.with_name(store.name + ".on-disk")
    store.rename(aside)
    store.mkdir()
    try:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={int(size_mb)}m,mode=0755", "tmpfs", str(store)],
            check=True,
            capture_output=True,
            text=True,
        )
    except subprocess.CalledProcessError as e:
        store.rmdir()
        aside.rename(store)
        raise ClusterError(f"cannot mount a {size_mb} MiB tmpfs on {store}: {e.stderr.strip()}") from e
    shutil.copytree(aside, store, dirs_exist_ok=True)
    shutil.rmtree(aside)
    if running:
        cluster.start(node, timeout=60)
    return {"limitMb": int(size_mb), "restarted": running}


def unlimit_disk(store: Path) -> dict:
    """The store back on the ordinary disk (its node must be stopped); no-op when not limited."""
    if not is_size_limited(store):
        return {"limitMb": 0}
    size = _mount_size_mb(store)
    free_filesystem(store)
    aside = store.with_name(store.name + ".off-tmpfs")
    shutil.copytree(store, aside)
    subprocess.run(["umount", str(store)], check=True, capture_output=True, text=True)
    shutil.rmtree(store)
    aside.rename(store)
    return {"limitMb": size}


def is_size_limited(path: Path) -> bool:
    """True when path is the root of its own mount (a tmpfs or loop filesystem made for it)."""
    return os.path.ismount(path)


def _mount_size_mb(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize >> 20


def fill_filesystem(path: Path, leave_bytes: int = 0) -> dict:
    st = os.statvfs(path)
    free = st.f_bavail * st.f_frsize
    want = max(0, free - leave_bytes)
    filler = Path(path) / FILLER
    written = 0
    # unbuffered: a buffered file that hit ENOSPC raises again when it is closed (it still holds the
    # bytes it could not write); a raw write just reports how much it wrote
    with open(filler, "ab", buffering=0) as fh:
        block = bytes(1 << 20)
        try:
            while written < want:
                n = fh.write(block[: min(len(block), want - written)])
                if not n:
                    break
                written += n
        except OSError:
            pass  # ENOSPC: full
    st = os.statvfs(path)
    return {"filled": written, "freeBytes": st.f_bavail * st.f_frsize}


def free_filesystem(path: Path) -> dict:
    filler = Path(path) / FILLER
    size = filler.stat().st_size if filler.exists() else 0
    filler.unlink(missing_ok=True)
    st = os.statvfs(path)
    return {"freed": size, "freeBytes": st.f_bavail * st.f_frsize}
