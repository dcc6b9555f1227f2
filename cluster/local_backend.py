"""The local backend: the name server and every broker as detached processes on loopback.

Each process runs in its own session (start_new_session), so it outlives the CLI and a Ctrl-C in the
terminal does not reach it; its pid is also its process-group id. state.json records the pid with
the process's start time from /proc, so `down` never signals a recycled pid.
"""
from __future__ import annotations

import datetime as _dt
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from . import ClusterError
from . import runfolder as rf
from .backend import Backend, ProcessState, UpOptions
from .topology import (CLUSTER_PORT_SPAN, REPO_ROOT, PortPlan, Topology, effective_config,
                       node_overrides, set_args)



# ---- processes ---------------------------------------------------------------------------------

def proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks) of a live pid, from /proc; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            data = fh.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = data[data.rindex(")") + 2:].split()
    return fields[0], int(fields[19])


def is_running(rec: dict | None) -> bool:
    """True when the process recorded in rec still runs (same pid, same start time, not a zombie)."""
    if not rec or not rec.get("pid"):
        return False
    st = proc_stat(rec["pid"])
    if st is None or st[0] in ("Z", "X"):
        _reap(rec["pid"])
        return False
    return rec.get("startTime") is None or st[1] == rec["startTime"]


def _reap(pid: int) -> None:
    """Collect the exit status when the process is our child (in-process use, e.g. tests)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except (ChildProcessError, OSError):
        pass


def _signal(rec: dict, sig: int) -> None:
    pid = rec["pid"]
    try:
        if rec.get("pgid") == pid and os.getpgid(pid) == pid:
            os.killpg(pid, sig)   # the session we created: the process and anything it forked
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        pass


def spawn(cmd: list[str], log_path: Path, env: dict) -> dict:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        stamp = _dt.datetime.now().isoformat(timespec="seconds")
        log.write(f"==== {stamp} cluster: starting {shlex.join(cmd)}\n".encode())
        log.flush()
        try:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    cwd=REPO_ROOT, env=env, start_new_session=True, close_fds=True)
        except OSError as e:
            raise ClusterError(f"cannot start {cmd[0]}: {e}") from e
    st = proc_stat(proc.pid)
    return {"pid": proc.pid, "pgid": proc.pid, "startTime": st[1] if st else None,
            "cmd": cmd, "log": str(log_path)}


def child_env() -> dict:
    env = dict(os.environ)
    paths = [str(REPO_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("NAMESRV_ADDR", None)  # namesrvAddr is always passed explicitly
    return env


# ---- ports -------------------------------------------------------------------------------------

def port_in_use(port: int) -> bool:
    """Whether a listener holds the port on any local address (a TIME_WAIT leftover does not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return True
    return False


def suggest_base_port(topology: Topology, exclude_base: int | None = None) -> int | None:
    """A base port below the ephemeral range whose whole block is free."""
    for base in range(20000, 32000, 100):
        if base == exclude_base:
            continue
        plan = PortPlan.make(base)
        if not any(port_in_use(p) for _, _, p in plan.all_ports(topology)):
            return base
    return None


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
    hint = (f"pick another port block with --base-port {free} (or CLUSTER_BASE_PORT={free}); "
            f"a cluster uses {CLUSTER_PORT_SPAN} ports from its base"
            if free else "free the ports or pick another --base-port")
    if owners:
        stop = "; ".join(f"`python -m cluster down --name {o.split()[-1].strip(chr(39))}`" for o in sorted(owners))
        cause = f"{', '.join(sorted(owners))} holds them: stop it with {stop}"
    else:
        cause = ("another process holds them (a cluster started from another checkout or run root? "
                 "see `ss -ltnp`)")
    if all(owner == "namesrv" for owner, _, _ in busy):
        hint += ", or keep the brokers' ports and move only the name server with --namesrv-port N"
    raise ClusterError("cannot start cluster %r: %d of its ports are taken:\n%s\n%s; or %s"
                       % (cluster, len(busy), "\n".join(lines), cause, hint))


# ---- the backend -------------------------------------------------------------------------------

class LocalBackend(Backend):
    name = "local"

    @classmethod
    def start(cls, cluster: str, run_dir: Path, topology: Topology, plan: PortPlan,
              options: UpOptions) -> "LocalBackend":
        old = rf.read_state(run_dir)
        if old and not old.get("stoppedAt"):
            running = [n for n, rec in _records(old) if is_running(rec)]
            if running:
                raise ClusterError(f"cluster {cluster!r} is already running ({', '.join(running)}; "
                                   f"run folder {run_dir}): `python -m cluster down --name {cluster}` first, "
                                   "or start another with --name NAME --base-port N")
        check_ports(cluster, topology, plan)

        host = options.host
        overrides = node_overrides(topology, plan, host=host,
                                   store_dir_of=lambda n: rf.store_dir(run_dir, n),
                                   extra=options.extra, extra_per_node=options.extra_per_node)
        configs = {n.name: effective_config(n, overrides[n.name]) for n in topology.nodes}

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

        nodes = []
        for n in topology.nodes:
            c = configs[n.name]
            master = None if n.is_master else topology.master_of(n).name
            node = {
                "name": n.name, "brokerName": c.brokerName, "brokerId": c.brokerId, "role": c.brokerRole,
                "clusterName": c.brokerClusterName, "addr": c.broker_addr, "haAddr": c.ha_server_addr,
                "metricsUrl": f"http://{host}:{c.metrics_port}/metrics", "backend": cls.name,
                "commitlogFileSize": c.mappedFileSizeCommitLog,
            }
            rf.write_node_json(run_dir, node)
            nodes.append({**node, "statusUrl": f"http://{host}:{c.metrics_port}/status", "master": master,
                          "conf": str(n.conf_file), "overrides": overrides[n.name],
                          "log": str(rf.broker_log(run_dir, n.name)), "store": c.storePathRootDir})

        state = {
            "name": cluster, "topology": topology.name, "backend": cls.name, "runDir": str(run_dir),
            "basePort": plan.base_port, "host": host, "registration": options.registration,
            "startedAt": time.time(), "stoppedAt": None, "keptStores": kept,
            "ports": [list(p) for p in plan.all_ports(topology)],
            "namesrv": {"addr": f"{host}:{plan.namesrv_port}", "endpoint": f"{host}:{plan.namesrv_port}",
                        "log": str(rf.namesrv_log(run_dir))},
            "nodes": nodes,
        }
        rf.write_state(run_dir, state)
        rf.set_current(cluster)
        backend = cls(cluster, run_dir, state)
        env = child_env()
        try:
            state["namesrv"]["process"] = spawn(
                [sys.executable, "-m", "broker.namesrv", "--port", str(plan.namesrv_port), "--host", host],
                rf.namesrv_log(run_dir), env)
            rf.write_state(run_dir, state)
            for node in nodes:  # masters come before their slaves in the node list
                node["process"] = spawn([sys.executable, "-m", "broker", "-c", node["conf"]]
                                        + set_args(node["overrides"]), Path(node["log"]), env)
                rf.write_state(run_dir, state)
        except BaseException:
            backend.stop(keep_data=True, timeout=5)
            raise
        return backend

    def stop(self, keep_data: bool = False, timeout: float = 10.0) -> list[str]:
        notes: list[str] = []
        brokers = [(n["name"], n.get("process")) for n in self.state.get("nodes", [])]
        namesrv = [("namesrv", self.state.get("namesrv", {}).get("process"))]
        # Brokers first, while the name server can still hear them leave; then the name server.
        for group in (brokers, namesrv):
            notes += self._stop_group([(n, rec) for n, rec in group if is_running(rec)], timeout)
        self.state["stoppedAt"] = time.time()
        if not keep_data:
            for n in self.state.get("nodes", []):
                sd = Path(n.get("store") or rf.store_dir(self.run_dir, n["name"]))
                if sd.exists():
                    shutil.rmtree(sd, ignore_errors=True)
            self.state["keptStores"] = []
        else:
            self.state["keptStores"] = [n["name"] for n in self.state.get("nodes", [])]
        if (self.run_dir / "state.json").exists():
            rf.write_state(self.run_dir, self.state)
        return notes

    @staticmethod
    def _stop_group(group: list[tuple[str, dict]], timeout: float) -> list[str]:
        notes = []
        for _, rec in group:
            _signal(rec, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(is_running(rec) for _, rec in group):
            time.sleep(0.05)
        stubborn = [(n, rec) for n, rec in group if is_running(rec)]
        for n, rec in stubborn:
            _signal(rec, signal.SIGKILL)
            notes.append(f"{n} (pid {rec['pid']}) ignored SIGTERM for {timeout:g}s; killed with SIGKILL")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(is_running(rec) for _, rec in stubborn):
            time.sleep(0.05)
        for n, rec in stubborn:
            if is_running(rec):
                notes.append(f"{n} (pid {rec['pid']}) is still running after SIGKILL")
        return notes

    # -- observation ------------------------------------------------------------------------------
    def _record(self, node: str) -> dict | None:
        if node == "namesrv":
            return self.state.get("namesrv", {}).get("process")
        for n in self.state.get("nodes", []):
            if n["name"] == node:
                return n.get("process")
        raise ClusterError(f"cluster {self.cluster!r} has no node {node!r}; nodes: "
                           + ", ".join(["namesrv"] + self.node_names()))

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
        self._record(node)  # validates the name
        return rf.broker_log(self.run_dir, node)


def _records(state: dict):
    yield "namesrv", state.get("namesrv", {}).get("process")
    for n in state.get("nodes", []):
        yield n["name"], n.get("process")
