"""This project's broker and name server (the default): `python -m rmqha.broker`, status on /status.

Tests: tests/unit/test_implementations.py.

The broker runs on RUN/nodes/NODE/broker.properties (written at `up`), so an updateBrokerConfig rewrites
that copy and never the repository's compose/ file; a restart keeps what it saved there, as 4.9 keeps its file.
"""

from __future__ import annotations

from pathlib import Path

from rmqha.broker.config.properties import parse_properties

from .. import runfolder as rf
from . import BrokerChoice, Launch


def check_available(choice: BrokerChoice) -> None:
    return None


def run_properties(conf: str | Path, overrides: dict) -> dict[str, str]:
    return {**parse_properties(Path(conf).read_text(encoding="utf-8")), **{k: str(v) for k, v in overrides.items()}}


def write_run_properties(run_dir: Path, node: str, conf: str | Path, overrides: dict) -> Path:
    """The node's conf file with its deployment keys, in its run folder."""
    return rf.write_node_properties(
        run_dir, node, run_properties(conf, overrides), f"{node}: {conf} with the deployment keys (written at up)"
    )


def broker_launch(node: dict, run_dir: Path, choice: BrokerChoice) -> Launch:
    from ..process import broker_command, child_env

    if not node.get("properties"):  # a state from before the run-folder copy runs as it did
        return Launch(broker_command(node["conf"], node.get("overrides") or {}), child_env())
    path = Path(node["properties"])
    if not path.is_file():
        write_run_properties(run_dir, node["name"], node["conf"], node.get("overrides") or {})
    return Launch(broker_command(path, {}), child_env())


def namesrv_launch(port: int, host: str, run_dir: Path, choice: BrokerChoice) -> Launch:
    from ..process import child_env, namesrv_command

    return Launch(namesrv_command(port, host), child_env())


def adopt(rec: dict) -> dict:
    return rec  # the python process is the broker
