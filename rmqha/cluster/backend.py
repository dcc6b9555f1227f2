"""What a backend provides, and how `--backend NAME` finds one.

A backend starts and stops the processes (or containers) of one cluster and tells the rest of the
tooling where things are. Everything else (status, wait, sample, the table, the JSON) works from
RUN_DIR/state.json, whose backend-independent part is:

    {"name", "topology", "backend", "runDir", "startedAt", "stoppedAt",
     "registration": "auto" | "required" | "optional",
     "namesrv": {"addr": what brokers use, "endpoint": host:port this machine can reach},
     "nodes": [{"name", "brokerName", "brokerId", "role", "clusterName", "addr", "haAddr",
                "metricsUrl", "statusUrl", "master": node name or null}, ...]}

addr/haAddr are the broker's own view (what it registers); statusUrl and metricsUrl must be
reachable from this machine (a docker backend maps them to published ports, or to the Toxiproxy-free
container address). A backend adds its own keys (pids, container ids, ...) beside these.

The docker backend is rmqha/cluster/docker_backend.py (`DockerBackend`); the CLI imports a backend only
when it is asked for, so the local backend works without the docker SDK.
"""

from __future__ import annotations

import abc
import importlib
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from . import ClusterError
from . import runfolder as rf
from .runfolder import tail
from .topology import PortPlan, Topology
from rmqha.runs.layout import NODE_JSON_KEYS, write_node_json


@dataclass
class ProcessState:
    running: bool
    detail: str  # "running", "exited with code 1", "not started", "gone", ...


@dataclass
class UpOptions:
    host: str = "127.0.0.1"
    fresh: bool = False  # wipe stores kept by an earlier `down --keep-data`
    extra: dict | None = None  # --set KEY=VALUE for every broker
    extra_per_node: dict | None = None  # --set NODE:KEY=VALUE
    registration: str = "auto"
    acl: bool = False  # aclEnable with a kit-written plain_acl.yml (rmqha/cluster/acl.py)
    broker: object = None  # implementations.BrokerChoice: which broker runs each node (None: ours everywhere)


class Backend(abc.ABC):
    name = "?"

    def __init__(self, cluster: str, run_dir: Path, state: dict):
        self.cluster = cluster
        self.run_dir = run_dir
        self.state = state

    # -- lifecycle ----------------------------------------------------------------------------
    @classmethod
    @abc.abstractmethod
    def start(cls, cluster: str, run_dir: Path, topology: Topology, plan: PortPlan, options: UpOptions) -> "Backend":
        """Start the name server and every broker; write state.json and node.json. Do not wait."""

    @abc.abstractmethod
    def stop(self, keep_data: bool = False, timeout: float = 10.0) -> list[str]:
        """Stop everything this cluster started; remove the stores unless keep_data. Returns notes."""

    # -- observation --------------------------------------------------------------------------
    @abc.abstractmethod
    def process_state(self, node: str) -> ProcessState:
        """node is a broker node name or "namesrv"."""

    def log_path(self, node: str) -> Path | None:
        """The node's log file on this machine, when it has one."""
        return None

    def log_location(self, node: str) -> str:
        p = self.log_path(node)
        return str(p) if p else f"python -m rmqha.cluster logs {node}"

    def log_tail(self, node: str, n: int = 20) -> list[str]:
        p = self.log_path(node)
        return tail(p, n) if p else []

    def follow_logs(self, nodes: list[str], lines: int = 10, out=None, poll: float = 0.3) -> None:
        """Print the last lines of each log, then new lines as they come, until interrupted."""
        import sys

        out = out or sys.stdout
        paths = {n: self.log_path(n) for n in nodes}
        positions = {}
        for n, p in paths.items():
            for line in self.log_tail(n, lines):
                out.write(f"{n:<11} | {line}\n")
            positions[n] = p.stat().st_size if p and p.exists() else 0
        out.flush()
        partial = {n: b"" for n in nodes}
        while True:
            for n, p in paths.items():
                if not p or not p.exists():
                    continue
                size = p.stat().st_size
                if size < positions[n]:
                    positions[n] = 0  # truncated or replaced
                if size == positions[n]:
                    continue
                with open(p, "rb") as fh:
                    fh.seek(positions[n])
                    data = partial[n] + fh.read(size - positions[n])
                positions[n] = size
                *complete, partial[n] = data.split(b"\n")
                for line in complete:
                    out.write(f"{n:<11} | {line.decode('utf-8', 'replace')}\n")
            out.flush()
            time.sleep(poll)

    def _release_stores(self, keep_data: bool) -> list[str]:
        """After the nodes stopped: delete their stores unless keep_data, and save state.json."""
        notes = []
        self.state["stoppedAt"] = time.time()
        if not keep_data:
            for n in self.state.get("nodes", []):
                sd = Path(n.get("store") or rf.store_dir(self.run_dir, n["name"]))
                if sd.exists():
                    shutil.rmtree(sd, ignore_errors=True)
                    if sd.exists():
                        notes.append(f"could not remove {sd} (files owned by another user?)")
            self.state["keptStores"] = []
        else:
            self.state["keptStores"] = [n["name"] for n in self.state.get("nodes", [])]
        if (self.run_dir / "state.json").exists():
            rf.write_state(self.run_dir, self.state)
        return notes

    def node_names(self) -> list[str]:
        return [n["name"] for n in self.state.get("nodes", [])]

    def proxies(self) -> list[dict] | None:
        """The fault proxies in front of the nodes, with their live state; None when the backend has none.

        Each: {"name", "kind": "client"|"vip"|"ha", "node", "listen", "upstream", "hostEndpoint", "enabled",
        "toxics": [{"name", "type", "stream", "attributes"}], "error"}.
        """
        return None


BACKENDS = {
    "local": ("rmqha.cluster.local_backend", "LocalBackend"),
    "docker": ("rmqha.cluster.docker_backend", "DockerBackend"),
}


def node_record(run_dir: Path, topology: Topology, n, c, host: str, backend: str, kind: str, overrides: dict) -> dict:
    """The part of a node's record in the state that both backends write (its node.json written too)."""
    node = rf.node_record(n.name, c, host, backend)
    write_node_json(rf.node_dir(run_dir, node["name"]), node, NODE_JSON_KEYS)
    return {
        **node,
        "implementation": kind,
        "statusUrl": f"http://{host}:{c.metrics_port}/status",
        "master": None if n.is_master else topology.master_of(n).name,
        "conf": str(n.conf_file),
        "overrides": overrides,
    }


def state_head(
    cluster: str, run_dir: Path, topology: Topology, plan: PortPlan, options: UpOptions, backend: str, kept: list[str]
) -> dict:
    """What every backend's state.json starts with (its own keys follow)."""
    return {
        "name": cluster,
        "topology": topology.name,
        "backend": backend,
        "runDir": str(run_dir),
        "basePort": plan.base_port,
        "host": options.host,
        "registration": options.registration,
        "startedAt": time.time(),
        "stoppedAt": None,
        "keptStores": kept,
    }


def backend_class(name: str) -> type[Backend]:
    if name not in BACKENDS:
        raise ClusterError(f"unknown backend {name!r}: choose one of {', '.join(BACKENDS)}")
    module, cls = BACKENDS[name]
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name != module:
            raise
        raise ClusterError(
            f"the {name} backend is not available in this checkout ({module.replace('.', '/')}.py "
            "does not exist yet); use --backend local"
        ) from None
    return getattr(mod, cls)


def attach(cluster: str, run_dir: Path, state: dict) -> Backend:
    """The backend object for a cluster that `up` started earlier (from its state.json)."""
    return backend_class(state.get("backend", "local"))(cluster, run_dir, state)
