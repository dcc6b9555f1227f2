"""The local backend: the name server and every broker as detached processes on loopback.

Each process runs in its own session (start_new_session), so it outlives the CLI and a Ctrl-C in the
terminal does not reach it; its pid is also its process-group id. state.json records the pid with
the process's start time from /proc, so `down` never signals a recycled pid.
"""

from __future__ import annotations

import shutil
import signal
import socket
import threading
import time
from pathlib import Path


from . import ClusterError
from . import acl
from . import runfolder as rf
from .backend import Backend, ProcessState, UpOptions, node_record, state_head
from .implementations import BrokerChoice, check_available, implementation, parse_choice
from .topology import CLUSTER_PORT_SPAN, PortPlan, Topology, effective_config, node_overrides

_STATE_LOCK = threading.Lock()


# The launcher and the port planner live in rmqha/cluster/process.py and rmqha/cluster/ports.py; these names are
# kept here for the callers that imported them from this module.
from .ports import free_cluster_base, port_in_use  # noqa: E402,F401
from .process import (  # noqa: E402,F401
    _reap,
    broker_command,
    child_env,
    is_running,
    is_stopped,
    namesrv_command,
    proc_stat,
    proxy_command,
    record,
    send_signal,
    spawn,
)
from .process import kill as kill_process  # noqa: E402
from .process import stop as stop_process  # noqa: E402

_signal = send_signal


# ---- ports -------------------------------------------------------------------------------------


def suggest_base_port(topology: Topology, exclude_base: int | None = None) -> int | None:
    """A base port below the ephemeral range whose whole block is free."""
    return free_cluster_base(topology, exclude=exclude_base)


def _owner_of_port(port: int, me: str) -> str | None:
    for other in rf.list_clusters():
        if other == me:
            continue
        st = rf.read_state(rf.run_dir(other)) or {}
        for owner, what, p in st.get("ports", []):
            if p == port and not st.get("stoppedAt"):
                return f"cluster {other!r}"
    return None


def check_ports(cluster: str, topology: Topology, plan: PortPlan) -> None:
    busy = [(owner, what, p) for owner, what, p in plan.all_ports(topology) if port_in_use(p)]
    if not busy:
        return
    lines, owners = [], set()
    for owner, what, p in busy:
        who = _owner_of_port(p, cluster)
        if who:
            owners.add(who)
        lines.append(f"  port {p} ({owner} {what}) is in use" + (f" by {who}" if who else ""))
    if len(lines) > 6:
        lines[5:] = [f"  ... and {len(lines) - 5} more"]
    free = suggest_base_port(topology, plan.base_port)
    hint = (
        f"pick another port block with --base-port {free} (or CLUSTER_BASE_PORT={free}); "
        f"a cluster uses {CLUSTER_PORT_SPAN} ports from its base"
        if free
        else "free the ports or pick another --base-port"
    )
    if owners:
        stop = "; ".join(
            f"`python -m rmqha.cluster down --name {o.split()[-1].strip(chr(39))}`" for o in sorted(owners)
        )
        cause = f"{', '.join(sorted(owners))} holds them: stop it with {stop}"
    else:
        cause = "another process holds them (a cluster started from another checkout or run root? see `ss -ltnp`)"
    if all(owner == "namesrv" for owner, _, _ in busy):
        hint += ", or keep the brokers' ports and move only the name server with --namesrv-port N"
    raise ClusterError(
        "cannot start cluster %r: %d of its ports are taken:\n%s\n%s; or %s"
        % (cluster, len(busy), "\n".join(lines), cause, hint)
    )


# ---- the backend -------------------------------------------------------------------------------


def _refuse_if_running(cluster: str, run_dir: Path, old: dict | None) -> None:
    if old and not old.get("stoppedAt"):
        running = [n for n, rec in _records(old) if is_running(rec)]
        if running:
            raise ClusterError(
                f"cluster {cluster!r} is already running ({', '.join(running)}; "
                f"run folder {run_dir}): `python -m rmqha.cluster down --name {cluster}` first, "
                "or start another with --name NAME --base-port N"
            )


def _local_overrides(
    run_dir: Path, topology: Topology, plan: PortPlan, options: UpOptions, creds: dict | None
) -> dict[str, dict[str, str]]:
    """Each node's per-deployment keys (stores in the run folder), ACL's and the user's --set on top."""
    host = options.host
    per_node = {n.name: dict((options.extra_per_node or {}).get(n.name, {})) for n in topology.nodes}
    if creds:
        for n in topology.nodes:
            per_node[n.name] = {**acl.broker_sets(str(rf.store_dir(run_dir, n.name)), creds), **per_node[n.name]}
    overrides = node_overrides(
        topology,
        plan,
        host=host,
        store_dir_of=lambda n: rf.store_dir(run_dir, n),
        extra=options.extra,
        extra_per_node=per_node,
    )
    for n in topology.nodes:
        # The HA ports listen on every interface, and the kit's slaves and recovering masters all
        # connect from `host`: nobody else may (docs/ha-protocol.md, "Who can do what on the HA port").
        if _is_ip(host):
            overrides[n.name].setdefault("haAllowedAddresses", host)
    return overrides


def _prepare_stores(
    run_dir: Path, topology: Topology, configs: dict, old: dict | None, options: UpOptions, creds: dict | None
) -> list[str]:
    """The run folder and each node's folder (stores emptied with --fresh); returns the nodes whose store
    was kept."""
    # Node folders of another topology would be read by the audit as part of this run.
    rf.prepare(run_dir, [n.name for n in topology.nodes], topology.name, old, options.fresh)
    kept = []
    for n in topology.nodes:
        sd = Path(configs[n.name].storePathRootDir)
        if sd.exists() and any(sd.iterdir()):
            if options.fresh:
                shutil.rmtree(sd)
            else:
                kept.append(n.name)
        rf.node_dir(run_dir, n.name).mkdir(parents=True, exist_ok=True)
        if creds:
            acl.write_file(sd, creds)
    return kept


def choice_of(state: dict) -> BrokerChoice:
    """The broker implementations a started cluster runs (state.json's "broker" and "rocketmqHome")."""
    return parse_choice(state.get("broker"), home=state.get("rocketmqHome"))


def spawn_node(run_dir: Path, state: dict, node: str) -> dict:
    """Start one node (a broker, or "namesrv") with its implementation's launcher; its process record."""
    choice = choice_of(state)
    if node == "namesrv":
        port = int(state["namesrv"]["endpoint"].rpartition(":")[2])
        impl = implementation(choice.namesrv)
        launch = impl.namesrv_launch(port, state.get("host", "127.0.0.1"), run_dir, choice)
        log = rf.namesrv_log(run_dir)
    else:
        spec = next(n for n in state["nodes"] if n["name"] == node)
        impl = implementation(spec.get("implementation", "ours"))
        launch, log = impl.broker_launch(spec, run_dir, choice), Path(spec["log"])
    return record(impl.adopt(spawn(launch.cmd, log, launch.env)))


def _node_records(
    run_dir: Path, topology: Topology, configs: dict, overrides: dict, host: str, backend: str, choice=None
) -> list[dict]:
    """Each node's record in the state (its node.json written too)."""
    nodes = []
    for n in topology.nodes:
        c = configs[n.name]
        kind = (choice or BrokerChoice()).of(n.name)
        nodes.append(
            {
                **node_record(run_dir, topology, n, c, host, backend, kind, overrides[n.name]),
                "properties": str(
                    implementation(kind).write_run_properties(run_dir, n.name, n.conf_file, overrides[n.name])
                ),
                "log": str(rf.broker_log(run_dir, n.name)),
                "store": c.storePathRootDir,
            }
        )
    return nodes


def _wait_listening(host: str, port: int, rec: dict, timeout: float) -> None:
    """Until host:port accepts a connection; ClusterError if the process in rec ends first or the time runs out."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((host, port), timeout=1).close()
            return
        except OSError:
            pass
        if not is_running(rec):
            raise ClusterError(f"the name server (pid {rec.get('pid')}) exited before it listened on {host}:{port}")
        if time.monotonic() > deadline:
            raise ClusterError(f"the name server did not listen on {host}:{port} within {timeout:g}s")
        time.sleep(0.1)


class LocalBackend(Backend):
    name = "local"

    @classmethod
    def start(
        cls, cluster: str, run_dir: Path, topology: Topology, plan: PortPlan, options: UpOptions
    ) -> "LocalBackend":
        choice = options.broker or BrokerChoice()
        check_available(choice)
        old = rf.read_state(run_dir)
        _refuse_if_running(cluster, run_dir, old)
        check_ports(cluster, topology, plan)
        host = options.host
        creds = acl.new_credentials() if options.acl else None
        overrides = _local_overrides(run_dir, topology, plan, options, creds)
        configs = {n.name: effective_config(n, overrides[n.name]) for n in topology.nodes}
        kept = _prepare_stores(run_dir, topology, configs, old, options, creds)
        nodes = _node_records(run_dir, topology, configs, overrides, host, cls.name, choice)
        state = {
            "broker": choice.spec(),
            "rocketmqHome": choice.home,
            **state_head(cluster, run_dir, topology, plan, options, cls.name, kept),
            "ports": [list(p) for p in plan.all_ports(topology)],
            "namesrv": {
                "addr": f"{host}:{plan.namesrv_port}",
                "endpoint": f"{host}:{plan.namesrv_port}",
                "log": str(rf.namesrv_log(run_dir)),
            },
            "proxy": {"endpoint": f"{host}:{plan.proxy_port}", "log": str(rf.proxy_log(run_dir))},
            "nodes": nodes,
        }
        if creds:
            state["acl"] = creds
        rf.write_state(run_dir, state)
        rf.set_current(cluster)
        return cls._spawn_all(cluster, run_dir, state, plan, host)

    @classmethod
    def _spawn_all(cls, cluster: str, run_dir: Path, state: dict, plan: PortPlan, host: str) -> "LocalBackend":
        """The name server, then every broker, each recorded in state.json as it starts; everything stopped
        again if one fails."""
        backend = cls(cluster, run_dir, state)
        try:
            state["namesrv"]["process"] = spawn_node(run_dir, state, "namesrv")
            rf.write_state(run_dir, state)
            if any(n.get("implementation") == "rust" for n in state["nodes"]):
                # rocketmq-rust's broker gives up its start when its first registration finds no name
                # server (a 4.x broker retries): start it once the name server listens
                _wait_listening(host, plan.namesrv_port, state["namesrv"]["process"], timeout=60)
            for node in state["nodes"]:  # masters come before their slaves in the node list
                node["process"] = spawn_node(run_dir, state, node["name"])
                rf.write_state(run_dir, state)
            state["proxy"]["process"] = record(spawn(backend._proxy_command(), rf.proxy_log(run_dir), child_env()))
            rf.write_state(run_dir, state)
        except BaseException:
            backend.stop(keep_data=True, timeout=5)
            raise
        return backend

    def stop(self, keep_data: bool = False, timeout: float = 10.0) -> list[str]:
        notes: list[str] = []
        brokers = [(n["name"], n.get("process")) for n in self.state.get("nodes", [])]
        namesrv = [("namesrv", self.state.get("namesrv", {}).get("process"))]
        proxy = [("proxy", self.state.get("proxy", {}).get("process"))]
        # The 5.x proxy, then the brokers while the name server can still hear them leave; then the name server.
        for group in (proxy, brokers, namesrv):
            notes += self._stop_group([(n, rec) for n, rec in group if is_running(rec)], timeout)
        return notes + self._release_stores(keep_data)

    @staticmethod
    def _stop_group(group: list[tuple[str, dict]], timeout: float) -> list[str]:
        notes = []
        for _, rec in group:
            send_signal(rec, signal.SIGCONT)  # a frozen process cannot handle SIGTERM
            send_signal(rec, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(is_running(rec) for _, rec in group):
            time.sleep(0.05)
        stubborn = [(n, rec) for n, rec in group if is_running(rec)]
        for n, rec in stubborn:
            send_signal(rec, signal.SIGKILL)
            notes.append(f"{n} (pid {rec['pid']}) ignored SIGTERM for {timeout:g}s; killed with SIGKILL")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(is_running(rec) for _, rec in stubborn):
            time.sleep(0.05)
        for n, rec in stubborn:
            if is_running(rec):
                notes.append(f"{n} (pid {rec['pid']}) is still running after SIGKILL")
        return notes

    # -- node operations (rmqha/cluster/handle.py calls these) ----------------------------------------------
    def _spec(self, node: str) -> dict:
        for n in self.state.get("nodes", []):
            if n["name"] == node:
                return n
        if node in ("namesrv", "proxy") and node in self.state:
            return self.state[node]
        raise ClusterError(
            f"cluster {self.cluster!r} has no node {node!r}; nodes: " + ", ".join(["namesrv"] + self.node_names())
        )

    def start_node(self, node: str) -> None:
        """Start the node again exactly as `up` did (no-op when it runs); its new pid goes to state.json."""
        spec = self._spec(node)
        if is_running(spec.get("process")):
            return
        if node == "proxy":
            spec["process"] = record(spawn(self._proxy_command(), rf.proxy_log(self.run_dir), child_env()))
        else:
            spec["process"] = spawn_node(self.run_dir, self.state, node)
        self._save_process(node, spec["process"])

    def _proxy_command(self) -> list[str]:
        port = int(self.state["proxy"]["endpoint"].rpartition(":")[2])
        return proxy_command(port, self.state.get("host", "127.0.0.1"), self.state["namesrv"]["endpoint"])

    def _save_process(self, node: str, rec: dict) -> None:
        """Write one node's process record into state.json, keeping whatever else is there. Nodes may be
        restarted from several threads at once (rmqha.chaos.run's disk limits): one read-modify-write at a time."""
        with _STATE_LOCK:
            cur = rf.read_state(self.run_dir) or self.state
            if node in ("namesrv", "proxy"):
                cur.setdefault(node, {})["process"] = rec
            else:
                for n in cur.get("nodes", []):
                    if n["name"] == node:
                        n["process"] = rec
            rf.write_state(self.run_dir, cur)

    def stop_node(self, node: str, timeout: float = 10.0) -> str | None:
        return stop_process(self._spec(node).get("process"), timeout)

    def kill_node(self, node: str) -> None:
        kill_process(self._spec(node).get("process"))

    def pause_node(self, node: str) -> None:
        rec = self._spec(node).get("process")
        if not is_running(rec):
            raise ClusterError(f"{node} is not running: cannot pause it")
        send_signal(rec, signal.SIGSTOP)

    def resume_node(self, node: str) -> None:
        rec = self._spec(node).get("process")
        if is_running(rec):
            send_signal(rec, signal.SIGCONT)

    def is_paused(self, node: str) -> bool:
        return is_stopped(self._spec(node).get("process"))

    def store_path(self, node: str) -> Path:
        """The node's storePathRootDir on this machine."""
        return Path(self._spec(node).get("store") or rf.store_dir(self.run_dir, node))

    # -- observation ------------------------------------------------------------------------------
    def _record(self, node: str) -> dict | None:
        if node in ("namesrv", "proxy"):
            return self.state.get(node, {}).get("process")
        for n in self.state.get("nodes", []):
            if n["name"] == node:
                return n.get("process")
        raise ClusterError(
            f"cluster {self.cluster!r} has no node {node!r}; nodes: " + ", ".join(["namesrv"] + self.node_names())
        )

    def process_state(self, node: str) -> ProcessState:
        rec = self._record(node)
        if not rec:
            return ProcessState(False, "not started")
        if is_running(rec):
            return ProcessState(True, "running")
        return ProcessState(False, "stopped" if self.state.get("stoppedAt") else "exited")

    def log_path(self, node: str) -> Path | None:
        if node == "namesrv":
            return rf.namesrv_log(self.run_dir)
        if node == "proxy":
            return rf.proxy_log(self.run_dir)
        self._record(node)  # validates the name
        return rf.broker_log(self.run_dir, node)


def _records(state: dict):
    yield "namesrv", state.get("namesrv", {}).get("process")
    yield "proxy", state.get("proxy", {}).get("process")
    for n in state.get("nodes", []):
        yield n["name"], n.get("process")


def _is_ip(host: str) -> bool:
    import ipaddress

    try:
        return not ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False
