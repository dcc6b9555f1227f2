"""RocketMQCluster: a whole HA cluster as one context manager, testcontainers-style.

    with RocketMQCluster("2m-2s-sync", backend="docker", sets={"syncFlushTimeout": 1500}) as c:
        c.namesrv_addr                  # "127.0.0.1:P": give it to any RocketMQ client
        c.handle                        # rmqha/cluster/handle.py's Cluster: node, link and admin operations
        c.faults.inject("cut", "broker-a-s")         # logged to RUN/faults/, healed by heal_all()
        rec = c.recorder("orders")      # the official client, every send and receive recorded
        c.audit()                       # the pipeline over RUN (raises AuditFailed on a FAIL verdict)

It is started by the same code as `make cluster-up` (rmqha.cluster.handle.Cluster.up: the compose files and
the docker backend, or local processes), not by testcontainers: see docs/kit.md ("Why not
testcontainers") for why. Isolation: the name is `kit-<pid>-<n>` (unique per process, so per pytest-xdist
worker) and the 50-port block is the first free one of this worker's interleaved slots
(rmqha/cluster/ports.py's free_cluster_base); the run folder is under `run_root` (default: the
CLUSTER_RUN_ROOT of the caller, else run/). A cluster left behind by a process that died (its pid is
gone) is removed the next time a RocketMQCluster starts on docker, which is what testcontainers' Ryuk
reaper would do.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

from rmqha.cluster import ClusterError
from rmqha.cluster import runfolder as rf

NAME_PREFIX = "kit-"
PROJECT_RE = re.compile(r"^rmqha-kit-(\d+)-")
PORT_LOW, PORT_HIGH = 20000, 32000
# Commit-log files are preallocated: RocketMQ's 1 GiB default reserves 4 GiB for a 2m-2s cluster.
KIT_DEFAULTS = {"mappedFileSizeCommitLog": str(64 << 20)}

_seq = [0]
_seq_lock = threading.Lock()


def free_base_port(topology: str) -> int:
    """A free 50-port block (plus the Toxiproxy API port, base+48) in this xdist worker's slice."""
    from rmqha.cluster.ports import free_cluster_base, xdist_worker
    from rmqha.cluster.topology import load_topology

    base = free_cluster_base(load_topology(topology), low=PORT_LOW, high=PORT_HIGH, extra_offsets=(48,))
    if base is None:
        slot, slots = xdist_worker()
        raise ClusterError(
            f"no free block of 50 ports between {PORT_LOW} and {PORT_HIGH} for this worker "
            f"(slot {slot} of {slots}): stop clusters you no longer need "
            "(`python -m rmqha.cluster down --name NAME`, `docker ps`), or pass base_port=N"
        )
    return base


def sweep_leftovers() -> list[str]:
    """Remove the containers and networks of kit clusters whose process is gone (docker)."""
    from rmqha.cluster.docker_backend import docker_client, sweep_dead_projects

    return sweep_dead_projects(docker_client(), PROJECT_RE)
    return True


def _run_root(path: Path | None):
    """CLUSTER_RUN_ROOT set for the duration of a start (the handle reads it then, never after)."""
    return rf.using_run_root(path)


def unavailable_reason(backend: str) -> str | None:
    """Why a cluster of this backend cannot start here, with what to do; None when it can."""
    if backend == "local":
        return None
    if backend != "docker":
        return f"unknown backend {backend!r}: use docker or local"
    from rmqha.cluster.docker_backend import BROKER_IMAGE, TOXIPROXY_IMAGE, check_images, compose_command, docker_client

    try:
        compose_command()
        check_images(docker_client(), [BROKER_IMAGE, TOXIPROXY_IMAGE])
    except ClusterError as e:
        return str(e)
    return None


def broker_unavailable_reason(
    broker: str | None, rocketmq_home: str | None = None, backend: str = "local"
) -> str | None:
    """Why this broker implementation cannot start here (no distribution, not built; on docker: no image of
    it), with the fix."""
    from rmqha.cluster.implementations import parse_choice
    from rmqha.cluster.implementations import unavailable_reason as why

    try:
        choice = parse_choice(broker, home=rocketmq_home)
        if backend != "docker":
            return why(choice)
        from rmqha.cluster.docker_backend import docker_client, implementation_images

        implementation_images(docker_client(), choice)
    except ClusterError as e:
        return str(e)
    return None


class RocketMQCluster:
    """An HA RocketMQ cluster for the duration of a `with` block (or start() ... stop())."""

    def __init__(
        self,
        topology: str = "2m-2s-sync",
        backend: str = "docker",
        *,
        name: str | None = None,
        base_port: int | None = None,
        sets: dict | None = None,
        run_root: str | Path | None = None,
        keep_data: bool = False,
        timeout: float = 90.0,
        acl: bool = False,
        broker: str = "ours",
        rocketmq_home: str | None = None,
    ):
        from rmqha.cluster.topology import TOPOLOGIES

        if topology not in TOPOLOGIES:
            raise ClusterError(f"unknown topology {topology!r}: choose one of {', '.join(TOPOLOGIES)}")
        if backend not in ("docker", "local"):
            raise ClusterError(f"unknown backend {backend!r}: choose docker or local")
        self.topology, self.backend = topology, backend
        self.name = name
        self.base_port = base_port
        self.sets = {**KIT_DEFAULTS, **{k: str(v) for k, v in (sets or {}).items()}}
        self.run_root = Path(run_root).resolve() if run_root else None
        self.keep_data = keep_data
        self.timeout = timeout
        self.acl = acl  # aclEnable with a kit-written plain_acl.yml; recorders and checks sign with its account
        # which broker runs each node: "ours", "apache" (a 4.9.x distribution at rocketmq_home or
        # $ROCKETMQ_HOME), "rust", or mixed ("ours,broker-a-s=apache"): rmqha/cluster/implementations/
        self.broker = broker
        self.rocketmq_home = rocketmq_home
        self.handle = None
        self._faults = None
        self._recorders: list = []

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self) -> "RocketMQCluster":
        from rmqha.cluster.handle import Cluster

        if self.handle is not None:
            return self
        reason = unavailable_reason(self.backend) or broker_unavailable_reason(
            self.broker, self.rocketmq_home, self.backend
        )
        if reason:
            raise ClusterError(reason)
        if self.backend == "docker":
            sweep_leftovers()
        if self.name is None:
            with _seq_lock:
                _seq[0] += 1
                self.name = f"{NAME_PREFIX}{os.getpid()}-{_seq[0]}"
        base = self.base_port or free_base_port(self.topology)
        with _run_root(self.run_root):
            self.handle = Cluster.up(
                self.name,
                self.topology,
                self.backend,
                base_port=base,
                sets=self.sets,
                fresh=True,
                timeout=self.timeout,
                acl=self.acl,
                broker=self.broker,
                rocketmq_home=self.rocketmq_home,
            )
        return self

    def stop(self, keep_data: bool | None = None) -> list[str]:
        """Heal what the faults broke, close recorders, stop every node; returns what could not be healed."""
        if self.handle is None:
            return []
        errors = self.heal_all()
        for r in self._recorders:
            r.close()
        self._recorders.clear()
        if self._faults is not None:
            self._faults.close()
        keep = self.keep_data if keep_data is None else keep_data
        self.handle.down(keep_data=keep, timeout=5)
        self.handle = None
        return errors

    def __enter__(self) -> "RocketMQCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        errors = self.stop()
        if errors and exc[0] is None:
            raise ClusterError("faults that could not be healed:\n  " + "\n  ".join(errors))

    # -- where things are -------------------------------------------------------------------------
    def _need(self):
        if self.handle is None:
            raise ClusterError("the cluster is not started: use `with RocketMQCluster(...) as c:` or c.start()")
        return self.handle

    @property
    def namesrv_addr(self) -> str:
        """The name server as this machine reaches it: what a client's set_namesrv_addr takes."""
        return self._need().namesrv

    @property
    def run_dir(self) -> Path:
        """The run folder: nodes/ (stores), history/, faults/; what audit() reads."""
        return self._need().run_dir

    @property
    def nodes(self) -> list[str]:
        return self._need().nodes

    def masters(self) -> list[str]:
        return self._need().masters()

    def slaves(self) -> list[str]:
        return self._need().slaves()

    def create_topic(self, topic: str, masters: list[str] | None = None, queues: int = 4) -> None:
        """The topic on these masters (default all), routed by the name server before this returns."""
        self._need().create_topic(topic, masters, queues)

    def wait_caught_up(self, timeout: float = 60.0) -> float:
        return self._need().wait_caught_up(timeout)

    # -- faults, histories, audit -----------------------------------------------------------------
    @property
    def faults(self):
        """rmqha.rmqkit.faults.Faults on this cluster (one fault log per cluster, RUN/faults/kit-<pid>.jsonl)."""
        if self._faults is None:
            from .faults import Faults

            self._faults = Faults(self._need(), self.run_dir / "faults" / f"kit-{os.getpid()}.jsonl")
        return self._faults

    def heal_all(self) -> list[str]:
        """Every fault healed, every link restored, every node running; errors returned, not raised."""
        if self.handle is None:
            return []
        return self.faults.heal_all()

    @property
    def credentials(self) -> dict | None:
        """{"accessKey", "secretKey"} of the kit's account when the cluster runs with acl=True; else None.
        A client of your own signs with them: set_session_credentials(ak, sk, "")."""
        return self.handle.credentials if self.handle is not None else None

    def recorder(self, client: str):
        """rmqha.rmqkit.history.Recorder writing RUN/history/<client>.jsonl: Producer and PushConsumer classes
        that behave as rocketmq.client's and record every send and receive. ClusterError on rocketmq-rust's
        brokers, which the official client gets no answer from (rmqha/cluster/implementations/rust.py)."""
        from rmqha.cluster.implementations import official_client_refusal, parse_choice

        from .history import Recorder

        refused = official_client_refusal(parse_choice(self.broker, home=self.rocketmq_home))
        if refused:
            raise ClusterError(f"recorder({client!r}) records the official C++ client, not usable here: {refused}")

        r = Recorder(
            self.run_dir / "history" / f"{client}.jsonl", client, self.namesrv_addr, credentials=self.credentials
        )
        self._recorders.append(r)
        return r

    def audit(self, out: str | Path | None = None, master: str | None = None, check: bool = True):
        """The pipeline over the run folder (the cluster quiet and caught up first). Returns an
        rmqha.rmqkit.audit.AuditResult; raises AuditFailed on a FAIL verdict when check is true."""
        from .audit import run_audit

        h = self._need()
        for r in self._recorders:
            r.flush()
        if h.slaves():
            h.wait_caught_up(60)
        result = run_audit(self.run_dir, out, master=master)
        if check:
            result.check()
        return result
