"""The matrix's plan: its configurations, each one's fault sweeps, the broker modes, run names and ports, and the runs of a matrix (tests/unit/matrix/test_plan.py)."""

from __future__ import annotations


from rmqha.runs.faults import FAULTS


CONFIGS = [
    ("2m-2s-sync", "ASYNC_FLUSH"),
    ("2m-2s-sync", "SYNC_FLUSH"),
    ("2m-2s-async", "ASYNC_FLUSH"),
    ("2m-2s-async", "SYNC_FLUSH"),
]
LOCAL_FAULTS = [
    "kill-master",
    "restart-master",
    "pause-master",
    "power-loss",
    "kill-slave",
    "restart-slave",
    "pause-slave",
    "group-power-loss",
    "slave-then-master-power-loss",
    "cluster-power-loss",
    "disk-full",
]
# disk-full needs every store on a size-limited tmpfs, where fsync does nothing: it gets a sweep of its own,
# so the process faults (power loss above all) run on the real filesystem
DISK_FAULTS = ["disk-full"]
LOCAL_SWEEPS = [[f for f in LOCAL_FAULTS if f not in DISK_FAULTS], DISK_FAULTS]
# --long-holds: faults held past the 20 s HA housekeeping, the 30 s client route refresh and the 120 s
# name-server expiry (a frozen master's routes expire; a frozen slave's connection is reaped), 135 s each
LONG_FAULTS = ["pause-master", "pause-slave", "kill-master"]
LONG_HOLD_S = 135.0  # the expiry scan runs every 10 s: past 120 s plus one scan
DOCKER_FAULTS = ["partition", "cut", "latency", "client-cut"]

# A DLedger (Raft) group of three: one configuration, in mode "ours" only (haCompat49 and haRecoveryEnable
# are classic HA settings). compose/dledger sets no flushDiskType, so the broker's default: the sweep sets
# none either, and the row names the default. Its faults are the nemesis's DLedger faults, found by their
# modes: every one the local backend can do, and on docker the ones only docker can (partitions).
DLEDGER = ("dledger", "ASYNC_FLUSH")
DLEDGER_LOCAL_FAULTS = [k for k, v in FAULTS.items() if v.dledger and "local" in v.backends]
DLEDGER_DOCKER_FAULTS = [k for k, v in FAULTS.items() if v.dledger and "local" not in v.backends]
# The DLedger sweep's faults end about 50 s in; its workload goes on to at least this: a leader fault is
# held from when it took effect, and later faults move with it (nemesis.py Nemesis.run), so a slow
# inject or restart needs room before the sends stop (then the nemesis stops, and heals what is active).
# Since 2026-11-29 a late heal moves what follows too (each restart 5-15 s at load 20-30): with 80 s the
# sweep's last fault fell off the end in 1 of 3 runs (seed 1's pause-leader was never injected).
DLEDGER_MIN_DURATION_S = 110.0
# `--configs all` (the default): the classic four, and dledger (one sweep of about 2 minutes per seed)
ALL_CONFIGS = CONFIGS + [DLEDGER]


def is_dledger(topology: str) -> bool:
    return topology == DLEDGER[0]


def parse_configs(text: str) -> list[tuple[str, str]]:
    """--configs: "all", or comma-separated TOPOLOGY/FLUSH (2m-2s-sync/ASYNC_FLUSH) or "dledger" (its flush
    is the topology's own; dledger/ASYNC_FLUSH is the same). ValueError names an unknown one."""
    if text == "all":
        return list(ALL_CONFIGS)
    out = []
    for item in (c.strip() for c in text.split(",") if c.strip()):
        if item in (DLEDGER[0], "/".join(DLEDGER)):
            out.append(DLEDGER)
            continue
        pair = tuple(item.split("/"))
        if pair not in CONFIGS:
            known = ", ".join(["/".join(c) for c in CONFIGS] + [DLEDGER[0]])
            raise ValueError(f"--configs: {item!r}; known: {known}")
        out.append(pair)
    return out


def sweeps_for(topology: str, backend: str, long_holds: bool = False) -> list[list[str]]:
    """The fault sweeps of one configuration on one backend (each sweep is one run per seed)."""
    if is_dledger(topology):
        return [DLEDGER_LOCAL_FAULTS if backend == "local" else DLEDGER_DOCKER_FAULTS]
    if backend != "local":
        return [DOCKER_FAULTS]
    return LOCAL_SWEEPS + ([LONG_FAULTS] if long_holds else [])


# this broker; the same broker with haCompat49=true (4.9's HA behaviour); or with haRecoveryEnable=true (a
# master back behind its slave fetches the slave's tail before it takes writes: rmqha/broker/ha/recovery.py)
MODES = ("ours", "4.9", "recovery", "apache")
MODE_SETS = {"ours": [], "4.9": ["haCompat49=true"], "recovery": ["haRecoveryEnable=true"], "apache": []}
MODE_SUFFIX = {"ours": "", "4.9": "-49", "recovery": "-rc", "apache": "-ap"}
# mode "apache": the real Apache RocketMQ 4.9.x (ROCKETMQ_HOME; on docker the image built from it, images/build.sh
# apache) beside the "4.9" emulation;
# it is the one mode besides "ours" that runs the DLedger configuration too (a DLedger group of 4.9 brokers)
MODE_ARGS = {"apache": ["--broker", "apache"]}
DLEDGER_MODES = ("ours", "apache")


def run_name(topology: str, flush: str, backend: str, seed: int, mode: str = "ours", faults=()) -> str:
    if is_dledger(topology):
        return f"mx-dl-{backend[0]}{seed}" + (MODE_SUFFIX[mode] if mode != "ours" else "")
    return (
        f"mx-{'s' if topology == '2m-2s-sync' else 'a'}{'s' if flush == 'SYNC_FLUSH' else 'a'}-{backend[0]}{seed}"
        + ("-df" if list(faults) == DISK_FAULTS else "")
        + ("-lh" if list(faults) == LONG_FAULTS else "")
        + MODE_SUFFIX[mode]
    )


def free_base(topology: str, backend: str, lane: int, lanes: int = 2) -> int | None:
    """A free port block for one lane (lanes run at once: each takes its own interleaved candidates)."""
    from rmqha.cluster.ports import free_cluster_base
    from rmqha.cluster.topology import load_topology

    # below the usual ephemeral range (32768.. on Linux): outgoing connections take ports from it, and the
    # port planner refuses a base there
    return free_cluster_base(
        load_topology(topology),
        low=21000,
        high=32000,
        slot=lane,
        slots=max(2, lanes),
        extra_offsets=(48,) if backend == "docker" else (),
    )


def make_plan(
    configs: list[tuple[str, str]],
    backends: list[str],
    modes: list[str],
    first_seed: int = 1,
    seeds: int = 3,
    long_holds: bool = False,
) -> list[tuple[str, str, str, list[str], int, str]]:
    """(topology, flush, backend, faults, seed, mode) per run: for each backend, sweep, mode, configuration
    and seed; the classic configurations in the order they always had, dledger after them in each sweep
    slot it has (its single sweep goes with the first), and only in DLEDGER_MODES."""
    plan = []
    for backend in backends:
        classic = [c for c in configs if not is_dledger(c[0])]
        slots = sweeps_for(CONFIGS[0][0], backend, long_holds) if classic else [[]]
        for k, faults in enumerate(slots):
            for mode in modes:
                for topology, flush in configs:
                    mine = sweeps_for(topology, backend, long_holds)
                    if is_dledger(topology):
                        if mode not in DLEDGER_MODES or k >= len(mine):
                            continue
                        faults_here = mine[k]
                    else:
                        faults_here = faults
                    assert all(backend in FAULTS[f].backends for f in faults_here)
                    for seed in range(first_seed, first_seed + seeds):
                        plan.append((topology, flush, backend, faults_here, seed, mode))
    return plan
