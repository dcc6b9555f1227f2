"""The nemesis of a chaos run: a seeded schedule of faults on the HA links and slaves, and their injection.

    sched = make_schedule(rng, faults=["latency", "cut"], slaves={"broker-a": "broker-a-s", ...},
                          duration=60)
    nem = Nemesis(state, sync_wait_ms=1500)      # state: the cluster's state.json
    nem.run(sched, t0, stop_event)               # in a thread; nem.current says what is active
    nem.heal_all()

Faults (one at a time, on one broker group, each healed after its hold time):
  latency        Toxiproxy latency on `<slave>-ha` (master -> slave) above the sync wait: a SYNC_MASTER
                 send gets FLUSH_SLAVE_TIMEOUT                                          (docker only)
  cut            the HA link cut: a `timeout` toxic both ways (connection kept, data swallowed) or the
                 proxy disabled (connections closed, refused)                           (docker only)
  slicer         master -> slave data cut into 7 +/- 3 byte slices                      (docker only)
  pause-slave    the slave frozen (docker pause; local: SIGSTOP, then SIGCONT)
  restart-slave  the slave stopped cleanly (SIGTERM) and started again after the hold
  kill-slave     the slave killed (SIGKILL) and started again after the hold
"""
from __future__ import annotations

import random
import signal
import threading
import time
from dataclasses import dataclass, field

ALL_FAULTS = ("latency", "cut", "slicer", "pause-slave", "restart-slave", "kill-slave")
DEFAULT_FAULTS = ("latency", "cut", "pause-slave", "restart-slave", "slicer")
PROXY_FAULTS = ("latency", "cut", "slicer")
LOCAL_FAULTS = ("pause-slave", "restart-slave", "kill-slave")


@dataclass
class Fault:
    at: float            # seconds after the start of the workload
    hold: float          # seconds until healed
    kind: str
    group: str           # broker name
    slave: str           # the slave node
    params: dict = field(default_factory=dict)

    def describe(self) -> str:
        extra = " ".join(f"{k}={v}" for k, v in self.params.items())
        return f"{self.kind} {self.slave}" + (f" ({extra})" if extra else "")


def applicable_faults(faults: list[str], backend: str) -> tuple[list[str], list[str]]:
    """(usable, dropped) for a backend: the local backend has no proxies."""
    if backend == "docker":
        return list(faults), []
    return [f for f in faults if f in LOCAL_FAULTS], [f for f in faults if f not in LOCAL_FAULTS]


def make_schedule(rng: random.Random, faults: list[str], slaves: dict[str, str], duration: float,
                  sync_wait_ms: int = 1500, max_faults: int | None = None, warmup: float | None = None,
                  quiet: float | None = None) -> list[Fault]:
    """Faults every few seconds from `warmup` until `duration - quiet`, each healed before the next."""
    if not faults or not slaves:
        return []
    warmup = min(3.0, duration * 0.15) if warmup is None else warmup
    quiet = max(3.0, min(10.0, duration * 0.2)) if quiet is None else quiet
    groups = sorted(slaves)
    out: list[Fault] = []
    t = warmup
    while max_faults is None or len(out) < max_faults:
        hold = round(rng.uniform(2.0, 4.0), 1)
        if t + hold > duration - quiet:
            break
        kind = rng.choice(faults)
        group = rng.choice(groups)
        params: dict = {}
        if kind == "latency":
            params = {"ms": sync_wait_ms + 1000}
        elif kind == "cut":
            params = {"mode": rng.choice(["timeout", "disabled"])}
        elif kind == "slicer":
            params = {"average_size": 7, "size_variation": 3, "delay_us": 10}
        out.append(Fault(round(t, 1), hold, kind, group, slaves[group], params))
        t += hold + round(rng.uniform(1.0, 3.0), 1)
    return out


def slaves_by_group(state: dict) -> dict[str, str]:
    """broker name -> its (first) slave node, for the groups that have one."""
    out = {}
    for n in state.get("nodes", []):
        if n.get("role") == "SLAVE" or int(n.get("brokerId") or 0) > 0:
            out.setdefault(n["brokerName"], n["name"])
    return out


class Nemesis:
    def __init__(self, state: dict, log=None):
        self.state = state
        self.backend = state.get("backend", "local")
        self.log = log or (lambda line: None)
        self.current: Fault | None = None
        self.done: list[tuple[Fault, str | None]] = []   # (fault, error)
        self._broken: dict[str, str] = {}                 # slave -> what to undo ("proxy", "paused", "stopped")
        if self.backend == "docker":
            from chaos.nodes import Nodes
            from chaos.toxics import Toxics
            self.toxics = Toxics(state["toxiproxy"]["api"])
            self.nodes = Nodes(state["compose"]["project"])

    # -- one fault --------------------------------------------------------------------------------
    def inject(self, f: Fault) -> None:
        proxy = f"{f.slave}-ha"
        if f.kind in PROXY_FAULTS and self.backend != "docker":
            raise ValueError(f"{f.kind} needs the docker backend (Toxiproxy)")
        if f.kind == "latency":
            self._broken[f.slave] = "proxy"
            self.toxics.latency(proxy, f.params["ms"])
        elif f.kind == "cut":
            self._broken[f.slave] = "proxy"
            self.toxics.cut(proxy, f.params["mode"])
        elif f.kind == "slicer":
            self._broken[f.slave] = "proxy"
            self.toxics.slicer(proxy, f.params["average_size"], f.params["size_variation"], f.params["delay_us"])
        elif f.kind == "pause-slave":
            self._broken[f.slave] = "paused"
            if self.backend == "docker":
                self.nodes.pause(f.slave)
            else:
                self._local_signal(f.slave, signal.SIGSTOP)
        elif f.kind in ("restart-slave", "kill-slave"):
            self._broken[f.slave] = "stopped"
            if self.backend == "docker":
                if f.kind == "kill-slave":
                    self.nodes.kill(f.slave)
                else:
                    self.nodes.stop(f.slave, timeout=10)
            else:
                self._local_stop(f.slave, signal.SIGKILL if f.kind == "kill-slave" else signal.SIGTERM)
        else:
            raise ValueError(f"unknown fault {f.kind!r}; known: {', '.join(ALL_FAULTS)}")

    def heal(self, slave: str) -> None:
        what = self._broken.get(slave)
        if what == "proxy":
            self.toxics.restore(f"{slave}-ha")
        elif what == "paused":
            if self.backend == "docker":
                if self.nodes.status(slave) == "paused":
                    self.nodes.unpause(slave)
            else:
                self._local_signal(slave, signal.SIGCONT)
        elif what == "stopped":
            if self.backend == "docker":
                if self.nodes.status(slave) != "running":
                    self.nodes.start(slave)
            else:
                self._local_start(slave)
        self._broken.pop(slave, None)

    def heal_all(self) -> list[str]:
        """Undo everything still broken (and, on docker, every toxic of the cluster). Returns errors."""
        errors = []
        for slave in list(self._broken):
            try:
                self.heal(slave)
            except Exception as e:
                errors.append(f"healing {slave}: {type(e).__name__}: {e}")
        if self.backend == "docker":
            try:
                self.toxics.reset()
            except Exception as e:
                errors.append(f"Toxiproxy reset: {type(e).__name__}: {e}")
        self.current = None
        return errors

    # -- the schedule -----------------------------------------------------------------------------
    def run(self, schedule: list[Fault], t0: float, stop: threading.Event) -> None:
        """Inject and heal each fault at its time (t0: time.monotonic() of the start); stop ends early."""
        for f in schedule:
            if stop.wait(max(0.0, t0 + f.at - time.monotonic())):
                break
            err = None
            self.current = f
            self.log(f"t={time.monotonic() - t0:5.1f}s inject {f.describe()} for {f.hold:g}s")
            try:
                self.inject(f)
            except Exception as e:
                err = f"inject: {type(e).__name__}: {e}"
                self.log(f"  {f.kind} {f.slave}: {err}")
            stop.wait(max(0.0, t0 + f.at + f.hold - time.monotonic()))
            try:
                self.heal(f.slave)
                self.log(f"t={time.monotonic() - t0:5.1f}s healed {f.kind} {f.slave}")
            except Exception as e:
                err = (err + "; " if err else "") + f"heal: {type(e).__name__}: {e}"
                self.log(f"  healing {f.kind} {f.slave}: {err}")
            self.current = None
            self.done.append((f, err))
            if stop.is_set():
                break

    # -- local processes --------------------------------------------------------------------------
    def _node(self, name: str) -> dict:
        for n in self.state["nodes"]:
            if n["name"] == name:
                return n
        raise ValueError(f"no node {name!r}")

    def _local_signal(self, name: str, sig: int) -> None:
        from cluster.local_backend import _signal, is_running
        rec = self._node(name).get("process")
        if not is_running(rec):
            raise RuntimeError(f"{name} is not running")
        _signal(rec, sig)

    def _local_stop(self, name: str, sig: int) -> None:
        from cluster.local_backend import _signal, is_running
        rec = self._node(name).get("process")
        if not is_running(rec):
            return
        _signal(rec, sig)
        deadline = time.monotonic() + 15
        while is_running(rec) and time.monotonic() < deadline:
            time.sleep(0.05)
        if is_running(rec):
            _signal(rec, signal.SIGKILL)

    def _local_start(self, name: str) -> None:
        """Start the broker again exactly as `cluster up` did, and record its new pid in state.json."""
        import sys
        from pathlib import Path

        from cluster import runfolder as rf
        from cluster.local_backend import child_env, is_running, spawn
        from cluster.topology import set_args
        node = self._node(name)
        if is_running(node.get("process")):
            return
        rd = Path(self.state["runDir"])
        cur = rf.read_state(rd) or self.state
        node["process"] = spawn([sys.executable, "-m", "broker", "-c", node["conf"]] + set_args(node["overrides"]),
                                Path(node["log"]), child_env())
        for n in cur.get("nodes", []):
            if n["name"] == name:
                n["process"] = node["process"]
        rf.write_state(rd, cur)
        if cur is not self.state:
            self.state.update({k: v for k, v in cur.items() if k != "nodes"})


