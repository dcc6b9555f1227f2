"""What the setup phases of a chaos run (rmqha/chaos/run.py) lean on: whether the named cluster already
runs, every store on a size-limited tmpfs (disk-full), and an explicit fault schedule read from JSON
(--schedule)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from rmqha.chaos.nemesis import Fault, groups_of
from rmqha.chaos.run_status import say
from rmqha.cluster import ClusterError
from rmqha.cluster.handle import Cluster
from rmqha.runs.faults import ALL_FAULTS, FAULTS, why_not_applicable


def cluster_running(name: str) -> Cluster | None:
    """The handle of cluster `name` when every node of it runs, else None."""
    try:
        c = Cluster.attach(name)
    except ClusterError:
        return None
    if c.state.get("stoppedAt"):
        return None
    try:
        if all(c.running(n) for n in c.all_nodes()):
            return c
    except Exception:
        return None
    return None


def limit_disks(cluster, limit_mb: int) -> list[str]:
    """Every store on a tmpfs of limit_mb at once (each node is stopped, copied and started again on its
    own); the errors, said (the run cannot inject disk-full without them)."""
    t_limit = time.monotonic()
    errors: list[str] = []

    def limit(node):
        try:
            cluster.limit_disk(node, limit_mb)
        except Exception as e:  # reported below; the run cannot inject disk-full without it
            errors.append(f"{node}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=limit, args=(n,)) for n in cluster.nodes if not cluster.disk_limited(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        say("error: could not put the stores on a size-limited tmpfs: " + "; ".join(errors))
        return errors
    cluster.wait_caught_up(60)
    say(f"disk-full: every broker's store on its own {limit_mb} MiB tmpfs ({time.monotonic() - t_limit:.0f} s)")
    return []


POWER_FAULTS = tuple(k for k, v in FAULTS.items() if v.power_cut)  # classic and DLedger (rmqha/runs/faults.py)


def power_on_crashfs(cluster, usable: list[str], args, seed: int) -> list[str]:
    """The power model of the run set on the cluster handle (it is in every power fault's log); with
    the fs model, every store on crashfs. Without crashfs here the power faults are said and dropped
    (not exercised), never replaced by the reported cut. Returns the faults still usable."""
    from rmqha.cluster.power import CrashFsUnavailable, mount_stores

    cluster.power_model, cluster.cut_mode, cluster.cut_seed = args.power_model, args.cut_mode, seed or 0
    cluster.fs_semantics = args.fs_semantics
    planned = list(usable)
    if getattr(args, "schedule", None):  # an explicit schedule names its faults itself
        try:
            planned += [item["kind"] for item in json.loads(Path(args.schedule).read_text())]
        except (OSError, ValueError, KeyError, TypeError):
            pass  # plan_schedule says what is wrong with it
    power = sorted({f for f in planned if f in POWER_FAULTS})
    if not power or args.power_model != "fs":
        if power:
            say(f"power model: reported (the broker's own fsync report): {', '.join(power)}")
        return usable
    limited = [n for n in cluster.nodes if cluster.disk_limited(n)]
    if limited:
        # disk-full put the stores on size-limited tmpfs mounts; crashfs cannot move a mount point under
        # it (and a cut on tmpfs would not be a disk's): the matrix runs disk-full in a sweep of its own
        say(
            f"note: {', '.join(power)} not exercised: the stores of {', '.join(limited)} are on disk-full's tmpfs; "
            "run the power faults without disk-full"
        )
        return [f for f in usable if f not in POWER_FAULTS]
    t0 = time.monotonic()
    try:
        mount_stores(cluster, semantics=args.fs_semantics)
    except (CrashFsUnavailable, ClusterError, OSError) as e:
        # OSError: a store that is already a mount point (disk-full's size-limited tmpfs) cannot move
        # under crashfs
        say(f"note: {', '.join(power)} not exercised: {e}")
        return [f for f in usable if f not in POWER_FAULTS]
    cluster.wait_caught_up(60)
    say(
        f"power model: fs ({args.fs_semantics}), cut mode {args.cut_mode}: every broker's store on crashfs ({time.monotonic() - t0:.0f} s)"
    )
    return usable


def schedule_from_json(items: list[dict], cluster) -> list[Fault]:
    """An explicit schedule: [{"at": s, "hold": s, "kind": k, "target": node, "params": {...}}, ...].
    The group and role come from the cluster; ValueError names what is wrong."""
    groups = groups_of(cluster)
    where = {}
    for g, members in groups.items():
        if members["master"]:
            where[members["master"]] = (g, "master")
        where.update({s: (g, "slave") for s in members["slaves"]})
    out = []
    for i, item in enumerate(items, 1):
        kind = FAULTS.get(item["kind"])
        if kind is None:
            raise ValueError(f"fault {i}: unknown kind {item['kind']!r}; known: {', '.join(ALL_FAULTS)}")
        why = why_not_applicable(kind.name, cluster.kind, cluster.state.get("topology"))
        if why:
            raise ValueError(f"fault {i}: {why}")
        if item["target"] not in where:
            raise ValueError(f"fault {i}: no broker node {item['target']!r}; nodes: {', '.join(sorted(where))}")
        group, role = where[item["target"]]
        if kind.targets not in (role, "node"):
            raise ValueError(f"fault {i}: {kind.name} hits a {kind.targets}, {item['target']} is a {role}")
        f = Fault(
            float(item["at"]),
            float(item["hold"]),
            kind.name,
            group,
            item["target"],
            dict(item.get("params") or {}),
            role,
            id=i,
        )
        if kind.link:
            f.link = kind.link(cluster, f)
        out.append(f)
    return sorted(out, key=lambda f: f.at)
