"""The cluster tool (`python -m rmqha.cluster`) run as a user runs it, for the tests that check it end to
end: a free port block in this xdist worker's slice and a run root of the test's own.

    c = cli_cluster(tmp_path, "2m-2s-async", "it")   # c.topo, c.base, c.env, c.run_dir (RUN_ROOT/it)
    up = cli(c.env, "up", "--topology", "2m-2s-async", "--name", "it", "--base-port", str(c.base))
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

from rmqha.cluster.ports import free_cluster_base
from rmqha.cluster.topology import load_topology

REPO = Path(__file__).resolve().parents[2]


def free_base_port(topology) -> int:
    """A free cluster block in this xdist worker's slice of the cluster ports (rmqha/cluster/ports.py)."""
    base = free_cluster_base(topology)
    assert base is not None, "no free 50-port block in this worker's slice of 20000-32000"
    return base


def cli(env, *args, timeout=60):
    return subprocess.run(
        [sys.executable, "-m", "rmqha.cluster", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


class CliCluster(NamedTuple):
    topo: object  # rmqha.cluster.topology's Topology
    base: int  # the port block: --base-port
    env: dict  # CLUSTER_RUN_ROOT=tmp_path/run, no CLUSTER_BASE_PORT
    run_dir: Path  # tmp_path/run/<name>


def cli_cluster(tmp_path: Path, topology: str, name: str) -> CliCluster:
    """Where a cluster `name` of this topology started by the tool will live, before it is started."""
    topo = load_topology(topology)
    env = dict(os.environ, CLUSTER_RUN_ROOT=str(tmp_path / "run"), PYTHONPATH=str(REPO))
    env.pop("CLUSTER_BASE_PORT", None)
    return CliCluster(topo, free_base_port(topo), env, tmp_path / "run" / name)
