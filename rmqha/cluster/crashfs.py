"""Stores on the crash-consistency filesystem (images/crashfs): mount, cut, status, unmount.
Tests: tests/unit/crashfs/.

A node's whole store directory is a crashfs mount: the files live in `<store>.crashfs/backing`, and
the filesystem remembers every change the broker has not fsynced (a file's bytes: fsync of the file;
a name: fsync of its directory). A power cut is `cut`: every such change disappears at once, whatever
the broker believes or reports. Docker containers bind-mount the store from the host, so the mount is
made on the host before the container starts and is seen inside it (no SYS_ADMIN, no /dev/fuse in the
container, and the cut runs where the kit runs).

Control: a Unix socket, one line per command, one JSON line back (images/crashfs/src/control.rs)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from . import ClusterError
from .process import pid_alive
from .topology import REPO_ROOT

MODES = ("lose-unsynced", "keep-prefix", "torn")
BUILD = REPO_ROOT / "images" / "crashfs" / "build.sh"
SOCKETS = Path("/tmp/rmqha-crashfs")  # a Unix socket path must stay under 108 bytes
GRAVE = ".crashfs-graveyard"


class CrashFsUnavailable(ClusterError):
    """This machine cannot mount crashfs (no /dev/fuse, not root, no cargo): power faults are not exercised."""


def unavailable() -> str | None:
    """Why crashfs cannot be mounted here, or None."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse on this machine (a container needs --device /dev/fuse)"
    if os.geteuid() != 0:
        return "mounting crashfs with allow_other needs root"
    if not os.environ.get("CRASHFS_BIN") and not shutil.which("cargo") and not _cached_binary():
        return "no crashfs binary and no cargo to build images/crashfs"
    return None


def _cached_binary() -> bool:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rocketmq-ha-refcluster" / "crashfs"
    return any(cache.glob("bin-*"))


def binary() -> Path:
    """The crashfs binary: $CRASHFS_BIN, else images/crashfs/build.sh (cached per content in ~/.cache)."""
    if os.environ.get("CRASHFS_BIN"):
        return Path(os.environ["CRASHFS_BIN"])
    r = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True)
    if r.returncode != 0:
        raise CrashFsUnavailable(f"images/crashfs/build.sh failed:\n{r.stderr[-2000:]}")
    return Path(r.stdout.strip().splitlines()[-1])


def mounted(store: Path) -> bool:
    """`store` is a crashfs mount point now."""
    target = str(Path(store).resolve())
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return False
    # fuser's own mount(2) names the source "crashfs" and the type plain "fuse"
    return any(
        len(f) > 2 and f[0] == "crashfs" and f[1] == target and f[2].startswith("fuse") for f in map(str.split, lines)
    )


@dataclass
class Mount:
    """One crashfs mount over a store directory."""

    store: Path
    work: Path
    control: Path

    @property
    def backing(self) -> Path:
        return self.work / "backing"

    def command(self, line: str, timeout: float = 120.0) -> dict:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(str(self.control))
            s.sendall(line.encode() + b"\n")
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = s.recv(1 << 20)
                if not chunk:
                    break
                buf += chunk
        reply = json.loads(buf or b"{}")
        if not reply.get("ok"):
            raise ClusterError(f"crashfs on {self.store}: {line!r} failed: {reply.get('error') or buf!r}")
        return reply

    def cut(self, mode: str = "lose-unsynced", seed: int = 0) -> dict:
        """The power cut: every change not fsynced is gone; the kernel's caches of the mount dropped."""
        if mode not in MODES:
            raise ValueError(f"cut mode {mode!r}: one of {', '.join(MODES)}")
        return self.command(f"cut {mode} {int(seed)}")

    def status(self) -> dict:
        return self.command("status")

    def sync(self) -> dict:
        """Everything so far made durable (set-up, never a fault)."""
        return self.command("sync")


def _control_path(store: Path) -> Path:
    return SOCKETS / (hashlib.sha256(str(store.resolve()).encode()).hexdigest()[:16] + ".sock")


def find(store: Path) -> Mount | None:
    """The crashfs mount over `store`, or None."""
    store = Path(store)
    if not mounted(store):
        return None
    return Mount(store, Path(str(store) + ".crashfs"), _control_path(store))


def mount(
    store: Path,
    *,
    rename_over_flushes: bool = False,
    semantics: str = "posix",
    write_through: bool = False,
    timeout: float = 30.0,
) -> Mount:
    """Put `store` on crashfs: its files move to <store>.crashfs/backing, the mount takes its place.
    What was there is durable. The node using it must be stopped. semantics "posix": a name is durable
    only through an fsync of its directory; "ext4": an fsync of any file also commits every earlier
    namespace change (ext4's one journal; --fsync-commits-journal) and a rename over a file makes the
    renamed file's data durable (auto_da_alloc; --rename-over-flushes). write_through: no kernel writeback
    cache (--write-through): every write(2) reaches crashfs in order, as a keep-prefix cut needs (crashfs
    refuses keep-prefix otherwise); slower."""
    store = Path(store)
    found = find(store)
    if found:
        return found
    why = unavailable()
    if why:
        raise CrashFsUnavailable(f"cannot put {store} on crashfs: {why}")
    exe = binary()
    work = Path(str(store) + ".crashfs")
    backing = work / "backing"
    work.mkdir(parents=True, exist_ok=True)
    store.mkdir(parents=True, exist_ok=True)
    if backing.exists():
        shutil.rmtree(backing)
    store.rename(backing)
    store.mkdir()
    SOCKETS.mkdir(parents=True, exist_ok=True)
    m = Mount(store, work, _control_path(store))
    args = [str(exe), "--backing", str(backing), "--mount", str(store), "--control", str(m.control)]
    if rename_over_flushes:
        args.append("--rename-over-flushes")
    if semantics == "ext4":
        args.append("--fsync-commits-journal")
    elif semantics != "posix":
        raise ValueError(f"semantics {semantics!r}: posix or ext4")
    if write_through:
        args.append("--write-through")
    with open(work / "crashfs.log", "ab") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        if mounted(store) and m.control.exists():
            try:
                m.command("ping", timeout=5)
            except (OSError, ClusterError):
                pass
            else:
                (work / "mount.json").write_text(json.dumps({"pid": proc.pid, "control": str(m.control)}))
                return m
        time.sleep(0.05)
    proc.kill()
    subprocess.run(["umount", "-l", str(store)], capture_output=True)
    _restore(store, backing)
    tail = (work / "crashfs.log").read_text(errors="replace")[-1500:]
    raise ClusterError(f"crashfs did not mount on {store} within {timeout:g}s:\n{tail}")


def _restore(store: Path, backing: Path) -> None:
    if store.is_dir() and not any(store.iterdir()):
        store.rmdir()
    if backing.exists() and not store.exists():
        shutil.rmtree(backing / GRAVE, ignore_errors=True)
        backing.rename(store)


def unmount(store: Path, timeout: float = 30.0) -> bool:
    """The store back on the ordinary disk, as it is now (its user must be stopped). False: it was not
    on crashfs."""
    store = Path(store)
    work = Path(str(store) + ".crashfs")
    if not mounted(store):
        if (work / "backing").exists() and not mounted(store):
            _restore(store, work / "backing")  # a daemon that died: put the files back all the same
            shutil.rmtree(work, ignore_errors=True)
        return False
    pid = None
    try:
        pid = json.loads((work / "mount.json").read_text())["pid"]
    except (OSError, ValueError, KeyError):
        pass
    r = subprocess.run(["umount", str(store)], capture_output=True, text=True)
    if r.returncode != 0:
        subprocess.run(["umount", "-l", str(store)], capture_output=True, text=True)
    deadline = time.monotonic() + timeout
    while pid and time.monotonic() < deadline and pid_alive(pid):
        time.sleep(0.05)
    _restore(store, work / "backing")
    shutil.rmtree(work, ignore_errors=True)
    return True
