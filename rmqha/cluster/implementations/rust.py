"""rocketmq-rust's broker (crates.io rocketmq-broker, built by `make peer-broker`), Java's `-c` layout.

Tests: tests/unit/test_implementations.py. Wired but not exercised here: the build takes about 35 minutes of
two cores, so no run of this kit has started it yet.
"""

from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path

from .. import ClusterError
from .. import runfolder as rf
from . import BrokerChoice, Launch
from .apache import broker_properties, write_run_properties

BINARY = "rocketmq-broker-rust"
CACHE = os.path.expanduser("~/.cache/rocketmq-ha-refcluster")


def find_binary() -> str | None:
    """rocketmq-broker-rust on PATH, else the newest one `make peer-broker` built into the cache."""
    found = shutil.which(BINARY)
    if found:
        return found
    builds = sorted(glob.glob(os.path.join(CACHE, "rocketmq-rust-*", "bin", BINARY)))
    return builds[-1] if builds else None


def check_available(choice: BrokerChoice) -> None:
    if not find_binary():
        raise ClusterError(
            f"BROKER=rust: rocketmq-rust's broker is not built ({BINARY} is not on PATH nor in {CACHE}): "
            "run `make peer-broker` first (about 35 minutes on 2 cores)"
        )


def broker_launch(node: dict, run_dir: Path, choice: BrokerChoice) -> Launch:
    check_available(choice)
    props = broker_properties(node["conf"], node.get("overrides") or {})
    path = Path(node.get("properties") or rf.node_properties(run_dir, node["name"]))
    if not path.is_file():
        write_run_properties(run_dir, node["name"], node["conf"], node.get("overrides") or {})
    env = dict(os.environ)
    env.pop("NAMESRV_ADDR", None)
    return Launch([str(find_binary()), "-c", str(path), "-n", props["namesrvAddr"]], env)


def namesrv_launch(port: int, host: str, run_dir: Path, choice: BrokerChoice) -> Launch:
    raise ClusterError("rocketmq-rust's name server is not wired: use namesrv=ours or namesrv=apache")


def adopt(rec: dict) -> dict:
    return rec
