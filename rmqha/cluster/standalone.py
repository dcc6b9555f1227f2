"""Single name servers and brokers as real local processes, for tests that need one custom broker.

    ns = NameServerProcess(workdir); ns.start()
    b = BrokerProcess(workdir, "broker-a", ns.addr, role="SYNC_MASTER"); b.start()
    ...; b.stop(); ns.stop()

Whole topologies come from the cluster handle (rmqha/cluster/handle.py: `Cluster.up(...)`); this module is
for tests and benchmarks that build their own broker (tests/integration, bench/bench_send.py). It has no launcher, waiter or port picker of its own: processes
start through rmqha/cluster/process.py's `spawn`, ports come from rmqha/cluster/ports.py, and every wait is
rmqha/cluster/wait.py's `wait_until` (a deadline; the failure message carries the tail of the process log).
Readiness is polled, never slept for: a name server is ready when it answers GET_BROKER_CLUSTER_INFO;
a broker when its metrics endpoint (listenPort + 2) serves /status and the name server lists its
address under its brokerName and brokerId.
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import time
import urllib.request
from pathlib import Path

from rmqha.broker.remoting.codec import FrameDecoder, encode
from rmqha.broker.remoting.codes import RequestCode
from rmqha.broker.remoting.command import RemotingCommand
from . import process
from .ports import free_block, free_broker_port
from .topology import CLUSTER_INDEX_SIZES
from .wait import ProcessExited, wait_until

START_DEADLINE_S = 20.0
STOP_DEADLINE_S = 10.0


def free_ports(count: int = 1) -> int:
    """The first of `count` consecutive free loopback ports (brokers use listenPort..+2)."""
    return free_block(count)


def rpc(addr: str, code: int, fields: dict | None = None, body: bytes = b"", timeout: float = 3.0) -> RemotingCommand:
    """One blocking request/response over a fresh connection (for test checks)."""
    host, _, port = addr.rpartition(":")
    req = RemotingCommand.request(code, fields or {}, body=body)
    req.opaque = 1
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(encode(req))
        dec = FrameDecoder()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            data = s.recv(65536)
            if not data:
                break
            for cmd in dec.feed(data):
                if cmd.is_response and cmd.opaque == 1:
                    return cmd
    raise TimeoutError(f"no response from {addr} to code {code}")


class _ProcView:
    """What tests read of a started process: pid, poll(), returncode (None while it runs)."""

    def __init__(self, rec: dict):
        self.rec = rec
        self.pid = rec["pid"]

    def poll(self):
        return None if process.is_running(self.rec) else -1

    @property
    def returncode(self):
        return self.poll()


class _Process:
    name = "process"

    def __init__(self, workdir: Path):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.rec: dict | None = None
        self.log_path = self.workdir / f"{self.name}.log"

    @property
    def proc(self) -> _ProcView | None:
        return _ProcView(self.rec) if self.rec else None

    def _spawn(self, args: list[str]) -> None:
        import sys

        self.rec = process.spawn([sys.executable, *args], self.log_path, process.child_env())

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return f"--- last lines of {self.log_path} ---\n" + "\n".join(text[-lines:])

    @property
    def running(self) -> bool:
        return process.is_running(self.rec)

    def _check_alive(self):
        if self.rec is not None and not self.running:
            raise ProcessExited(f"{self.name} exited\n{self.log_tail()}")

    def stop(self, sig=signal.SIGTERM) -> int | None:
        """Stop the process (SIGTERM: clean shutdown), SIGKILL after the deadline."""
        if self.rec is None:
            return None
        process.stop(self.rec, STOP_DEADLINE_S, sig)
        return self.proc.returncode

    def kill(self) -> None:
        process.kill(self.rec)

    def pause(self) -> None:
        process.send_signal(self.rec, signal.SIGSTOP)

    def resume(self) -> None:
        process.send_signal(self.rec, signal.SIGCONT)


class NameServerProcess(_Process):
    name = "namesrv"

    def __init__(self, workdir: Path, port: int | None = None, args: list[str] | None = None):
        super().__init__(workdir)
        self.port = port or free_ports(1)
        self.args = list(args or [])

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "NameServerProcess":
        self._spawn(["-m", "rmqha.broker.namesrv", "--port", str(self.port), "--host", "127.0.0.1", *self.args])

        def ready():
            self._check_alive()
            return rpc(self.addr, RequestCode.GET_BROKER_CLUSTER_INFO, timeout=1.0).code == 0

        wait_until(ready, START_DEADLINE_S, f"name server {self.addr}", on_timeout=self.log_tail)
        return self

    def cluster_info(self) -> dict:
        from rmqha.broker.remoting import json_body

        resp = rpc(self.addr, RequestCode.GET_BROKER_CLUSTER_INFO)
        return json_body.loads(resp.body) if resp.body else {}

    def broker_addrs(self, broker_name: str) -> dict[int, str]:
        data = self.cluster_info().get("brokerAddrTable", {}).get(broker_name) or {}
        return {int(k): v for k, v in (data.get("brokerAddrs") or {}).items()}


class BrokerProcess(_Process):
    def __init__(
        self,
        workdir: Path,
        broker_name: str,
        namesrv_addr: str,
        *,
        role: str = "ASYNC_MASTER",
        broker_id: int | None = None,
        cluster: str = "DefaultCluster",
        port: int | None = None,
        extra: dict | None = None,
    ):
        self.name = f"{broker_name}-{broker_id if broker_id is not None else (0 if role != 'SLAVE' else 1)}"
        super().__init__(workdir)
        self.broker_name = broker_name
        self.namesrv_addr = namesrv_addr
        self.role = role
        self.broker_id = broker_id if broker_id is not None else (0 if role != "SLAVE" else 1)
        self.cluster = cluster
        self.port = port or free_broker_port()  # listenPort - 2 .. listenPort + 2 free
        self.store_dir = self.workdir / f"store-{self.name}"
        self.extra = {
            "mappedFileSizeCommitLog": str(8 * 1024 * 1024),
            "registerNameServerPeriod": "10000",
            "syncFlushTimeout": "1500",
            **CLUSTER_INDEX_SIZES,
            **(extra or {}),
        }
        self.conf = self.workdir / f"{self.name}.properties"

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.port + 2}"

    def start(self) -> "BrokerProcess":
        self.conf.write_text(
            f"brokerClusterName={self.cluster}\nbrokerName={self.broker_name}\nbrokerId={self.broker_id}\n"
            f"brokerRole={self.role}\nflushDiskType=ASYNC_FLUSH\n"
        )
        sets = {
            "listenPort": self.port,
            "storePathRootDir": self.store_dir,
            "namesrvAddr": self.namesrv_addr,
            "brokerIP1": "127.0.0.1",
            **self.extra,
        }
        args = ["-m", "rmqha.broker", "-c", str(self.conf)]
        for k, v in sets.items():
            args += ["--set", f"{k}={v}"]
        self._spawn(args)
        self.wait_ready()
        return self

    def status(self) -> dict:
        with urllib.request.urlopen(f"{self.metrics_url}/status", timeout=1.0) as r:
            return json.loads(r.read())

    def wait_ready(self, deadline_s: float = START_DEADLINE_S) -> None:
        def up():
            self._check_alive()
            return self.status()["addr"] == self.addr

        wait_until(up, deadline_s, f"{self.name} /status", on_timeout=self.log_tail)
        ns = NameServerProcess.__new__(NameServerProcess)
        ns.port = int(self.namesrv_addr.rpartition(":")[2])

        def registered():
            self._check_alive()
            return ns.broker_addrs(self.broker_name).get(self.broker_id) == self.addr

        wait_until(registered, deadline_s, f"{self.name} registered with {self.namesrv_addr}", on_timeout=self.log_tail)

    def max_offset(self, topic: str, queue_id: int) -> int:
        resp = rpc(self.addr, RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": queue_id})
        return int(resp.ext_fields["offset"])

    def total_messages(self, topic: str, queues: int = 8) -> int:
        return sum(self.max_offset(topic, q) for q in range(queues))

    def commitlog_bytes(self, end: int) -> bytes:
        """The first `end` bytes of this broker's commit log, read from its files (to compare replicas)."""
        out = bytearray()
        for f in sorted((self.store_dir / "commitlog").iterdir()):
            if len(out) >= end:
                break
            with open(f, "rb") as fh:
                out += fh.read(end - len(out))
        return bytes(out)


def metric(text: str, name: str) -> float | None:
    """The value of an unlabelled metric in a /metrics page, or None."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


@contextlib.contextmanager
def sync_groups(tmp: Path, groups: tuple[str, ...] = ("broker-a", "broker-b"), extra: dict | None = None):
    """A name server and, per group, a SYNC_MASTER with one SLAVE connected to it: yields (ns, nodes)
    with nodes keyed "<group>" and "<group>-s"; every process is stopped on exit."""
    ns = NameServerProcess(tmp).start()
    nodes: dict[str, BrokerProcess] = {}
    try:
        for g in groups:
            nodes[g] = BrokerProcess(tmp, g, ns.addr, role="SYNC_MASTER", extra=extra).start()
            nodes[g + "-s"] = BrokerProcess(tmp, g, ns.addr, role="SLAVE", extra=extra).start()
        for g in groups:
            wait_until(
                lambda m=nodes[g]: m.status()["ha"]["connectionCount"] == 1,
                20,
                f"{g}'s slave connected",
                on_timeout=nodes[g].log_tail,
            )
        yield ns, nodes
    finally:
        for node in nodes.values():
            node.stop()
        ns.stop()
