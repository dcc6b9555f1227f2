"""Power cuts on crashfs (rmqha/cluster/crashfs.py): the store of every node on its own mount, and a cut
that reads nothing from the broker. Tests: tests/unit/crashfs/test_power.py, tests/integration/test_power_crashfs.py.

Two power models, named in the fault log of every power fault:
  fs        (default) the node is SIGKILLed, then its filesystem drops every change not fsynced, in the
            cut mode asked for (lose-unsynced, keep-prefix, torn), seeded so a run replays.
  reported  the old cut: the commit log (or DLedger data) cut at the offset the broker itself reports
            as fsynced (/status, its checkpoint): a broker that lies about fsync passes it. Kept only
            to compare (`--power-model reported`)."""

from __future__ import annotations

from . import crashfs
from .crashfs import CrashFsUnavailable

POWER_MODELS = ("fs", "reported")


class PowerNotModelled(CrashFsUnavailable):
    """A power fault on a store that is not on crashfs: the fault is not exercised (never replaced)."""


def on_crashfs(cluster, node: str) -> bool:
    return crashfs.find(cluster.store_path(node)) is not None


def mount_stores(cluster, nodes: list[str] | None = None, *, semantics: str = "posix") -> dict:
    """Every broker's store on its own crashfs mount. A running node is stopped cleanly first (its files
    are then durable as they are) and started again on the mount. Returns {node: "mounted"|"already"}.
    A keep-prefix cut (cluster.cut_mode) needs writes in the broker's order: those mounts are write-through."""
    why = crashfs.unavailable()
    if why:
        raise CrashFsUnavailable(f"power faults not exercised: {why}")
    done = {}
    for node in nodes if nodes is not None else list(cluster.nodes):
        store = cluster.store_path(node)
        if crashfs.find(store):
            done[node] = "already"
            continue
        running = cluster.running(node)
        if running:
            cluster.stop(node)
        try:
            crashfs.mount(
                store,
                semantics=semantics,
                rename_over_flushes=semantics == "ext4",
                write_through=getattr(cluster, "cut_mode", "lose-unsynced") == "keep-prefix",
            )
        finally:  # a mount that fails leaves the node as it was, running
            if running:
                cluster.start(node, timeout=60)
        done[node] = "mounted"
    return done


def unmount_stores(cluster) -> list[str]:
    """Every crashfs store back on the ordinary disk (the nodes are stopped); notes for `down`."""
    return [f"{n}: store moved off crashfs" for n in cluster.nodes if crashfs.unmount(cluster.store_path(n))]


def fs_power_loss(cluster, node: str) -> dict:
    """SIGKILL, then the node's filesystem drops what was never fsynced. Nothing is asked of the broker."""
    m = crashfs.find(cluster.store_path(node))
    if m is None:
        raise PowerNotModelled(
            f"{node}'s store {cluster.store_path(node)} is not on crashfs: power faults are not exercised "
            "(rmqha.chaos.run mounts every store when a power fault is planned; --power-model reported "
            "is the old cut at the offset the broker reports)"
        )
    mode = getattr(cluster, "cut_mode", "lose-unsynced")
    cluster.cuts = getattr(cluster, "cuts", 0) + 1
    seed = int(getattr(cluster, "cut_seed", 0)) * 1000 + cluster.cuts
    cluster.kill(node)  # returns once the process is gone; the cut's syncfs takes any page it left dirty
    r = m.cut(mode, seed)
    files = r.get("files") or []
    return {
        "powerModel": "fs",
        "fsSemantics": getattr(cluster, "fs_semantics", "posix"),
        "cutMode": mode,
        "cutSeed": seed,
        "filesCut": len(files),
        "droppedChanges": sum(f["droppedChanges"] for f in files),
        "bytesDropped": sum(max(0, f["sizeBefore"] - f["sizeAfter"]) for f in files),
        "namespaceUndone": r.get("namespaceUndone") or [],
        "files": files[:50],
    }
