"""One handle on a running cluster: node, link and admin operations, and one wait.

    from rmqha.cluster.handle import Cluster
    c = Cluster.attach("chaos")                     # by name (run/<name>/state.json); None: run/current
    c.kill("broker-a"); c.start("broker-a")         # node operations, on either backend
    c.power_loss("broker-a")                        # SIGKILL, then drop the commit-log bytes not fsynced
    c.cut_link("broker-a-s-ha", "timeout")          # link operations (docker: Toxiproxy)
    c.create_topic("TopicX"); c.wait_caught_up(60)  # admin operations
    c.wait_until(lambda: c.status("broker-a"), 30, "broker-a answers /status", node="broker-a")

The backend (rmqha/cluster/local_backend.py, rmqha/cluster/docker_backend.py) implements the primitives: start,
stop (SIGTERM, SIGKILL after a timeout), kill (SIGKILL), pause and resume (SIGSTOP/SIGCONT locally, the
cgroup freezer in docker), and on docker isolate/rejoin (the container cut from its network). Everything
else is here, the same for both: power loss, disk fill, the links, topics, catch-up, waiting. The
backends are the only writers of state.json (a restarted local process records its new pid there).

A DLedger group (topology dledger) has no planned master: masters(), slaves(), master_of() and
slaves_of() ask /status who leads now (dledger_leader()); caught_up() wants every member at the
leader's committed and end index, all committed and dispatched; lags() gives a follower's lag in
entries (dledger_lag(), as `cluster-status` shows it), a classic slave's in bytes. power_loss() on a
DLedger node cuts its dledger-<selfId>/data and index files at their durable (fsynced) positions.

What the local backend cannot do: it has no proxies, so no link operation (latency, cut, slicer,
bandwidth on the HA or client links) and no partition (processes on one loopback cannot be separated
without root network namespaces); fill_disk/free_disk need a store on a size-limited filesystem, which
only the docker backend's disk-limited stores have. Those raise Unsupported, saying so.
"""

from __future__ import annotations

import time
from pathlib import Path

from . import ClusterError, Unsupported, disk
from . import runfolder as rf
from .backend import attach as attach_backend
from .store_cut import reported_power_loss
from .status import NamesrvError, collect, is_dledger_spec, namesrv_request, node_status, unavailable
from .wait import ProcessExited, WaitTimeout, wait_until

LOG_TAIL_LINES = 30
# Apache's 4.9 broker (a JVM) answers admin requests 20-60 s after a restart on two shared cores
# (docs/guarantees.md), in a container while other tests load the machine over 60 s: a wait sized for
# ours would fail the heal (and stop the nemesis's schedule), not the broker
JVM_RESTART_TIMEOUT_S = 180.0


class Cluster:
    """A running cluster, attached by name. Node names: broker-a, broker-a-s, ..., and namesrv."""

    def __init__(self, backend):
        self.backend = backend

    # -- attaching --------------------------------------------------------------------------------
    @classmethod
    def attach(cls, name: str | None = None) -> "Cluster":
        cname, rd, state = rf.resolve(name)
        return cls(attach_backend(cname, rd, state))

    @classmethod
    def up(
        cls,
        name: str,
        topology: str = "2m-2s-sync",
        backend: str = "local",
        *,
        base_port: int | None = None,
        sets: dict[str, str] | None = None,
        fresh: bool = True,
        timeout: float = 90.0,
        out=None,
        acl: bool = False,
        broker: str | None = None,
        rocketmq_home: str | None = None,
    ) -> "Cluster":
        """Start a cluster (as `python -m rmqha.cluster up`) and wait until it is ready. sets: {"key": v} for
        every broker, {"node:key": v} for one. acl: aclEnable with a kit-written plain_acl.yml (the
        handle signs its own requests; client_env() is what a client needs). broker: which implementation
        runs each node ("ours", "apache" with rocketmq_home or $ROCKETMQ_HOME, "ours,broker-a-s=apache", ...:
        rmqha/cluster/implementations/)."""
        import io

        from .backend import UpOptions, backend_class
        from .implementations import parse_choice
        from .topology import PortPlan, load_topology
        from .wait import wait_ready

        topo = load_topology(topology)
        extra, per_node = {}, {}
        for k, v in (sets or {}).items():
            node, colon, key = k.rpartition(":")
            if colon:
                per_node.setdefault(node, {})[key] = str(v)
            else:
                extra[key] = str(v)
        b = backend_class(backend).start(
            rf.check_name(name),
            rf.run_dir(name),
            topo,
            PortPlan.make(base_port),
            UpOptions(
                fresh=fresh,
                extra=extra,
                extra_per_node=per_node,
                acl=acl,
                broker=parse_choice(broker, home=rocketmq_home, nodes=[n.name for n in topo.nodes]),
            ),
        )
        c = cls(b)
        progress = out if out is not None else io.StringIO()
        try:
            wait_ready(b.state, b, timeout=timeout, out=progress)
        except ClusterError as e:
            tails = "\n".join(f"--- {n} ---\n" + "\n".join(b.log_tail(n, 20)) for n in c.all_nodes())
            c.down(keep_data=True, timeout=5)
            shown = progress.getvalue()[-3000:] if isinstance(progress, io.StringIO) else ""
            raise ClusterError(f"cluster {name} did not get ready: {e}\n{shown}\n{tails}") from None
        return c

    def down(self, keep_data: bool = False, timeout: float = 10.0) -> list[str]:
        try:
            self.heal_links()
        except ClusterError:
            pass
        notes = self.backend.stop(keep_data=keep_data, timeout=timeout)
        from .power import unmount_stores

        notes += unmount_stores(self)
        for n in self.nodes:
            if disk.is_size_limited(self.store_path(n)):
                notes.append(f"{n}: store moved off its {self.unlimit_disk(n)['limitMb']} MiB tmpfs")
        return notes

    # -- who is who -------------------------------------------------------------------------------
    @property
    def state(self) -> dict:
        return self.backend.state

    @property
    def name(self) -> str:
        return self.state["name"]

    @property
    def kind(self) -> str:
        """The backend: "local" or "docker"."""
        return self.state.get("backend", "local")

    @property
    def run_dir(self) -> Path:
        return Path(self.state["runDir"])

    @property
    def namesrv(self) -> str:
        """The name server as this machine reaches it (host:port)."""
        return self.state["namesrv"]["endpoint"]

    @property
    def proxy(self) -> str | None:
        """The 5.x gRPC proxy (rmqha/proxy) as this machine reaches it (host:port); None when the cluster has none."""
        return (self.state.get("proxy") or {}).get("endpoint")

    @property
    def credentials(self) -> dict | None:
        """The kit's ACL account ({"accessKey", "secretKey"}) of a cluster started with acl; else None."""
        return self.state.get("acl")

    def client_env(self) -> dict[str, str]:
        """Environment variables a client process of this cluster needs (RMQHA_ACCESS_KEY/SECRET_KEY under
        ACL: the kit's workloads sign with them; empty otherwise)."""
        from .acl import env_of

        return env_of(self.state)

    @property
    def nodes(self) -> list[str]:
        return [n["name"] for n in self.state.get("nodes", [])]

    def all_nodes(self) -> list[str]:
        return ["namesrv"] + self.nodes

    def node(self, name: str) -> dict:
        for n in self.state.get("nodes", []):
            if n["name"] == name:
                return n
        raise ClusterError(f"cluster {self.name!r} has no broker {name!r}; brokers: {', '.join(self.nodes)}")

    def masters(self) -> list[str]:
        """Classic masters (from state.json), then each DLedger group's current leader (from /status; a
        group with no node answering as leader has none here)."""
        leaders = self._dledger_leaders()
        return [n["name"] for n in self.state.get("nodes", []) if not n.get("master") and not is_dledger_spec(n)] + [
            m for _, m in sorted(leaders.items()) if m
        ]

    def slaves(self) -> list[str]:
        """Classic slaves, then every DLedger node that is not its group's current leader."""
        leaders = self._dledger_leaders()
        return [n["name"] for n in self.state.get("nodes", []) if n.get("master") and not is_dledger_spec(n)] + [
            n for g, members in sorted(self.dledger_groups().items()) for n in members if n != leaders.get(g)
        ]

    def master_of(self, node: str) -> str | None:
        """A classic slave's master; a DLedger follower's current leader (None for the leader itself, and
        while no member answers as leader)."""
        spec = self.node(node)
        if not is_dledger_spec(spec):
            return spec.get("master")
        leader = self.dledger_leader(spec["brokerName"])
        return leader if leader != node else None

    def slaves_of(self, master: str) -> list[str]:
        spec = self.node(master)
        if is_dledger_spec(spec):
            group = spec["brokerName"]
            if self.dledger_leader(group) != master:
                return []
            return [n for n in self.dledger_groups()[group] if n != master]
        return [n["name"] for n in self.state.get("nodes", []) if n.get("master") == master]

    # -- DLedger groups (topology dledger): roles come from elections, so from /status ------------
    def is_dledger(self, node: str) -> bool:
        """A node of a DLedger group (enableDLegerCommitLog=true)."""
        return is_dledger_spec(self.node(node))

    def dledger_groups(self) -> dict[str, list[str]]:
        """brokerName -> its DLedger nodes, in state.json's order ({} for classic topologies)."""
        out: dict[str, list[str]] = {}
        for n in self.state.get("nodes", []):
            if is_dledger_spec(n):
                out.setdefault(n["brokerName"], []).append(n["name"])
        return out

    def dledger_leader(self, group: str, statuses: dict[str, dict | None] | None = None) -> str | None:
        """The node of the DLedger group whose /status says DLedger LEADER (of the highest term, should a
        deposed leader not have heard of the newer term yet); None while no member answers as leader (an
        election is under way, or the leader is down or paused). statuses: a statuses() already taken."""
        members = self.dledger_groups().get(group, [])
        if statuses is None:
            statuses = {n: self.status(n) for n in members}
        best, best_term = None, -1
        for n in members:
            d = (statuses.get(n) or {}).get("dledger") or {}
            if d.get("role") == "LEADER" and int(d.get("term") or 0) > best_term:
                best, best_term = n, int(d.get("term") or 0)
        return best

    def _dledger_leaders(self, statuses: dict[str, dict | None] | None = None) -> dict[str, str | None]:
        groups = self.dledger_groups()
        if not groups:
            return {}
        if statuses is None:
            statuses = self.statuses()
        return {g: self.dledger_leader(g, statuses) for g in groups}

    def addr(self, node: str) -> str:
        """The broker's client address as it registers it (and as a host client reaches it)."""
        return self.node(node)["addr"]

    # -- observation ------------------------------------------------------------------------------
    def status(self, node: str, timeout: float = 1.0) -> dict | None:
        """The broker's /status, or None when it does not answer."""
        return node_status(self.node(node), timeout, self.state.get("acl"))[0]

    def statuses(self) -> dict[str, dict | None]:
        return {n.name: n.status for n in collect(self.state, with_namesrv=False).nodes}

    def cluster_status(self):
        """rmqha/cluster/status.py's ClusterStatus: every node's /status, process and registration."""
        return collect(self.state, self.backend)

    def max_offset(self, node: str) -> int | None:
        return (self.status(node) or {}).get("maxPhyOffset")

    def running(self, node: str) -> bool:
        return self.backend.process_state(node).running

    def log_tail(self, node: str, n: int = LOG_TAIL_LINES) -> list[str]:
        try:
            return self.backend.log_tail(node, n)
        except Exception as e:  # a log we cannot read must not hide the real failure
            return [f"(log of {node} unavailable: {e})"]

    def node_log(self, node: str, since: float | None = None) -> str:
        """The node's whole log (docker: since a Unix time, when given)."""
        if hasattr(self.backend, "node_log"):
            return self.backend.node_log(node, since)
        p = self.backend.log_path(node)
        return p.read_text(errors="replace") if p and p.exists() else ""

    def store_path(self, node: str) -> Path:
        return self.backend.store_path(node)

    # -- waiting ----------------------------------------------------------------------------------
    def wait_until(
        self, predicate, timeout: float, what: str, *, node: str | list[str] | None = None, interval: float = 0.1
    ):
        """Poll predicate until it returns something true; return that. On timeout raise WaitTimeout
        naming `what`, the last error, and the last lines of the log of `node` (default: every node)."""
        nodes = [node] if isinstance(node, str) else (node or self.all_nodes())

        def tails() -> str:
            return "\n".join(
                f"--- last {LOG_TAIL_LINES} lines of {n} ({self.backend.log_location(n)}) ---\n"
                + "\n".join(self.log_tail(n))
                for n in nodes
            )

        return wait_until(predicate, timeout, what, interval=interval, on_timeout=tails)

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Every node up, registered, every slave connected and holding its master's log."""
        import io

        from .wait import wait_ready

        progress = io.StringIO()
        try:
            wait_ready(self.state, self.backend, timeout=timeout, out=progress)
        except ClusterError as e:
            raise WaitTimeout(f"{e}\n{progress.getvalue()[-2000:]}") from None

    def caught_up(self, masters: list[str] | None = None) -> bool:
        """Every slave (of `masters`, default all) up, holding exactly its master's log, and acknowledged
        as such by its master. A DLedger group (named in `masters` by any of its nodes) is caught up when
        one member answers as leader, and every member answers with the leader's committedIndex and
        endIndex, all of it committed (committed == end) and dispatched to the consume queues
        (dispatchedIndex == committedIndex): dledger_lag() is 0 for each follower."""
        st = self.statuses()
        groups = self.dledger_groups()
        in_group = {n: g for g, members in groups.items() for n in members}
        if masters is None:
            classic, dl = self.masters_in_state(), sorted(groups)
        else:
            classic = [m for m in masters if m not in in_group]
            dl = sorted({in_group[m] for m in masters if m in in_group})
        for g in dl:
            if not self._dledger_in_sync(g, st):
                return False
        for m in classic:
            ms = st.get(m)
            slaves = self.slaves_of(m)
            if not slaves:
                continue
            if not ms:
                return False
            if not unavailable(ms, "ha.slaves[].slaveAckOffset"):  # 4.9 does not serve acks: the logs alone
                acks = [s.get("slaveAckOffset") for s in (ms.get("ha") or {}).get("slaves") or []]
                if len(acks) < len(slaves) or any(a != ms["maxPhyOffset"] for a in acks):
                    return False
            if any((st.get(s) or {}).get("maxPhyOffset") != ms["maxPhyOffset"] for s in slaves):
                return False
        return True

    def masters_in_state(self) -> list[str]:
        """The classic masters as planned (state.json); DLedger nodes are never planned masters."""
        return [n["name"] for n in self.state.get("nodes", []) if not n.get("master") and not is_dledger_spec(n)]

    def _dledger_in_sync(self, group: str, st: dict[str, dict | None]) -> bool:
        leader = self.dledger_leader(group, st)
        if leader is None:
            return False
        members = self.dledger_groups()[group]
        if any(unavailable(st.get(n), "dledger.committedIndex") for n in members):
            # a 4.9 member serves no DLedger indexes: every member answers with the same end of log
            ends = {(st.get(n) or {}).get("maxPhyOffset") for n in members}
            return len(ends) == 1 and None not in ends
        ld = (st.get(leader) or {}).get("dledger") or {}
        if ld.get("committedIndex") != ld.get("endIndex") or ld.get("dispatchedIndex") != ld.get("committedIndex"):
            return False
        for n in self.dledger_groups()[group]:
            d = (st.get(n) or {}).get("dledger") or {}
            if any(d.get(k) != ld.get("committedIndex") for k in ("committedIndex", "endIndex", "dispatchedIndex")):
                return False
        return True

    def dledger_lag(self, node: str, statuses: dict[str, dict | None] | None = None) -> int | None:
        """A DLedger follower's lag in entries: its group leader's committedIndex minus its own, as
        `cluster-status` shows it (lagEntries); 0 for the leader; None when it or the leader does not
        answer (or no member is leader). Entries, not bytes: both sides count committed entries, and a
        follower's committedIndex is what the leader told it, so this is what it could dispatch now."""
        spec = self.node(node)
        st = statuses if statuses is not None else self.statuses()
        leader = self.dledger_leader(spec["brokerName"], st)
        if leader is None:
            return None
        lc = ((st.get(leader) or {}).get("dledger") or {}).get("committedIndex")
        mc = ((st.get(node) or {}).get("dledger") or {}).get("committedIndex")
        return lc - mc if lc is not None and mc is not None else None

    def slaves_ahead(self) -> dict[str, list[dict]]:
        """master -> its HA sessions in SLAVE_AHEAD (the master came back behind its slave: the slave holds
        bytes the master lost; nothing is replicated until an operator acts, see docs/ha-protocol.md)."""
        out = {}
        for m, st in self.statuses().items():
            ahead = [s for s in ((st or {}).get("ha") or {}).get("slaves") or [] if s.get("state") == "SLAVE_AHEAD"]
            if ahead:
                out[m] = ahead
        return out

    def lags(self) -> dict[str, int | None]:
        """slave -> how far it is behind its master, None when either does not answer. A classic slave: its
        master's maxPhyOffset minus its own, in bytes. A DLedger follower (every member but the leader;
        all of them while none is leader): dledger_lag(), in entries (lag_unit() says which)."""
        st = self.statuses()
        leaders = self._dledger_leaders(st)
        out: dict[str, int | None] = {}
        for s in self.slaves_in_state():
            m, sl = (st.get(self.node(s)["master"]) or {}).get("maxPhyOffset"), (st.get(s) or {}).get("maxPhyOffset")
            out[s] = (m - sl) if m is not None and sl is not None else None
        for g, members in sorted(self.dledger_groups().items()):
            for n in members:
                if n != leaders.get(g):
                    out[n] = self.dledger_lag(n, st)
        return out

    def slaves_in_state(self) -> list[str]:
        """The classic slaves as planned (state.json)."""
        return [n["name"] for n in self.state.get("nodes", []) if n.get("master") and not is_dledger_spec(n)]

    def lag_unit(self, node: str) -> str:
        """What lags()[node] counts: "bytes" (classic slave) or "entries" (DLedger follower)."""
        return "entries" if self.is_dledger(node) else "bytes"

    def wait_caught_up(self, timeout: float = 60.0, masters: list[str] | None = None) -> float:
        """Until caught_up(); returns the seconds it took."""
        t0 = time.monotonic()
        self.wait_until(
            lambda: self.caught_up(masters),
            timeout,
            "every slave holds its master's log (DLedger: every member the leader's, committed)",
            interval=0.2,
        )
        return time.monotonic() - t0

    def wait_up(self, node: str, timeout: float = 30.0) -> dict:
        """Until the node's process runs and its /status answers; returns the status."""

        def up():
            ps = self.backend.process_state(node)
            if not ps.running and ps.detail not in ("unknown",):
                raise ProcessExited(f"{node} {ps.detail}")
            return self.status(node)

        return self.wait_until(up, timeout, f"{node} answers /status", node=node)

    # -- node operations --------------------------------------------------------------------------
    def start(self, node: str, wait: bool = True, timeout: float = 30.0) -> None:
        """Start the node again as `up` did (no-op when it runs); wait until /status answers (a JVM broker:
        at least JVM_RESTART_TIMEOUT_S)."""
        self.backend.start_node(node)
        if wait and node not in ("namesrv", "proxy"):  # neither has a /status
            if self.node(node).get("implementation", "ours") != "ours":
                timeout = max(timeout, JVM_RESTART_TIMEOUT_S)
            self.wait_up(node, timeout)

    def stop(self, node: str, timeout: float = 10.0) -> str | None:
        """SIGTERM (clean shutdown), SIGKILL after timeout; a paused node is resumed first."""
        return self.backend.stop_node(node, timeout)

    def restart(self, node: str, timeout: float = 10.0) -> None:
        self.stop(node, timeout)
        self.start(node)

    def kill(self, node: str) -> None:
        """SIGKILL; returns once the process is gone."""
        self.backend.kill_node(node)

    def pause(self, node: str) -> None:
        """Frozen: SIGSTOP (local) or the cgroup freezer (docker); its connections stay open."""
        self.backend.pause_node(node)

    def resume(self, node: str) -> None:
        self.backend.resume_node(node)

    def durable_offset(self, node: str) -> int | None:
        """The commit-log offset the broker's last fdatasync covered, from /status (None: no answer)."""
        return (self.status(node) or {}).get("durableOffset")

    def power_loss(self, node: str) -> dict:
        """A power cut on one node. The power model (self.power_model, rmqha/cluster/power.py): "fs", the
        default, SIGKILLs the node and has its crashfs store drop every change never fsynced; "reported",
        the old cut, kept to compare.

        reported: rmqha/cluster/store_cut.py (SIGKILL, then the store cut at the offset the broker reports
        as fsynced; a DLedger node's data and index files likewise)."""
        if getattr(self, "power_model", "fs") != "reported":
            from .power import fs_power_loss

            return fs_power_loss(self, node)
        return reported_power_loss(self, node)

    # -- docker-only node operations ----------------------------------------------------------------
    def _need(self, op: str, why: str):
        fn = getattr(self.backend, op, None)
        if fn is None:
            raise Unsupported(f"the {self.kind} backend cannot {why}; use the docker backend")
        return fn

    def partition(self, node: str) -> None:
        """The node cut from everyone: name server, peers, clients (docker: off its network)."""
        self._need("isolate_node", "cut a node from the network (processes share one loopback)")(node)

    def heal_partition(self, node: str) -> None:
        self._need("rejoin_node", "cut a node from the network")(node)

    def fill_disk(self, node: str, leave_bytes: int = 0) -> dict:
        """Fill the filesystem of the node's store until `leave_bytes` are free (a filler file)."""
        store = self.store_path(node)
        if not disk.is_size_limited(store):
            raise Unsupported(
                f"{node}'s store {store} is not on its own size-limited filesystem "
                "(Cluster.limit_disk(node, mb) puts it on a tmpfs; rmqha.chaos.run does it for disk-full)"
            )
        return disk.fill_filesystem(store, leave_bytes)

    def free_disk(self, node: str) -> dict:
        return disk.free_filesystem(self.store_path(node))

    def disk_limited(self, node: str) -> bool:
        """The node's store is on a size-limited filesystem of its own (limit_disk)."""
        return disk.is_size_limited(self.store_path(node))

    def limit_disk(self, node: str, size_mb: int) -> dict:
        """The node's store on its own tmpfs of size_mb MiB (rmqha/cluster/disk.py); a running node is
        stopped and started again around the move. down() moves the store back."""
        return disk.limit_disk(self, node, size_mb)

    def unlimit_disk(self, node: str) -> dict:
        """The store back on the ordinary disk (the node must be stopped); no-op when not limited."""
        return disk.unlimit_disk(self.store_path(node))

    # -- links ------------------------------------------------------------------------------------
    @property
    def toxics(self):
        """The Toxiproxy client of a docker cluster (rmqha/cluster/toxics.py)."""
        if self.kind != "docker":
            raise Unsupported(
                "the local backend has no proxies: links cannot be delayed, sliced or cut "
                "(faults there are node faults: pause, stop, kill, power loss)"
            )
        if getattr(self, "_toxics", None) is None:
            from .toxics import Toxics

            self._toxics = Toxics(self.state["toxiproxy"]["api"])
        return self._toxics

    def links(self) -> list[dict]:
        """Each proxy: {"name", "kind": "client"|"ha", "node", ...} (docker); [] on the local backend."""
        return list(self.state.get("proxies") or [])

    def ha_link(self, slave: str) -> str:
        return f"{slave}-ha"

    def client_link(self, node: str) -> str:
        return node

    def slow_link(self, link: str, ms: int, stream: str = "downstream") -> None:
        self.toxics.latency(link, ms, stream=stream)

    def cut_link(self, link: str, mode: str = "disabled") -> None:
        self.toxics.cut(link, mode)

    def slice_link(
        self, link: str, average_size: int, size_variation: int = 0, delay_us: int = 0, stream: str = "downstream"
    ) -> None:
        self.toxics.slicer(link, average_size, size_variation, delay_us, stream=stream)

    def throttle_link(self, link: str, rate_kb: int, stream: str = "downstream") -> None:
        self.toxics.bandwidth(link, rate_kb, stream=stream)

    def heal_link(self, link: str) -> None:
        self.toxics.restore(link)

    def heal_links(self) -> None:
        """Every proxy enabled, every toxic removed (no-op on the local backend)."""
        if self.kind == "docker" and self.state.get("toxiproxy") and not self.state.get("stoppedAt"):
            self.toxics.reset()

    # -- admin ------------------------------------------------------------------------------------
    def create_topic(
        self, topic: str, masters: list[str] | None = None, queues: int = 4, timeout: float = 30.0
    ) -> None:
        """UPDATE_AND_CREATE_TOPIC on these masters (default all), then wait until the name server routes
        the topic to exactly them: an auto-created topic would live only where the first send went."""
        from rmqha.broker.remoting import json_body
        from rmqha.broker.remoting.codes import RequestCode

        if masters is None and self.dledger_groups():
            # a DLedger group's master is whoever leads now: wait for one in every group (an election)
            def leaders():
                got = self._dledger_leaders()
                if all(got.values()):
                    return got
                raise RuntimeError("no leader in " + ", ".join(g for g, m in sorted(got.items()) if not m))

            self.wait_until(leaders, timeout, "every DLedger group has a leader", interval=0.2)
        masters = masters if masters is not None else self.masters()
        fields = {
            "topic": topic,
            "defaultTopic": "TBW102",
            "readQueueNums": queues,
            "writeQueueNums": queues,
            "perm": 6,
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": 0,
            "order": "false",
        }
        for m in masters:

            def created(m=m):
                try:
                    r = namesrv_request(
                        self.addr(m),
                        RequestCode.UPDATE_AND_CREATE_TOPIC,
                        fields,
                        timeout=3.0,
                        credentials=self.credentials,
                    )
                except NamesrvError as e:
                    raise RuntimeError(str(e)) from None
                if r.code != 0:
                    raise RuntimeError(f"code {r.code} {r.remark}")
                return True

            self.wait_until(created, timeout, f"topic {topic} created on {m}", node=m, interval=0.5)
        want = {self.node(m)["brokerName"] for m in masters}

        def routed():
            r = namesrv_request(self.namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
            got = (
                {q["brokerName"] for q in json_body.loads(r.body).get("queueDatas") or []}
                if r.code == 0 and r.body
                else set()
            )
            if got == want:
                return True
            raise RuntimeError(f"routed to {sorted(got)}")

        self.wait_until(
            routed, timeout, f"the name server routes {topic} to {sorted(want)}", node="namesrv", interval=0.2
        )

    def group_backlog(self, group: str, topic: str, queues: int = 4) -> dict[str, dict[int, int | None]]:
        """master -> {queue id: messages the consumer group has not committed yet (max offset minus its
        committed offset; None when the master does not answer)}. Zero everywhere: the group has
        consumed every queue of the topic to its end."""
        return {
            m: {q: None if o is None else max(0, o["max"] - o["committed"]) for q, o in per.items()}
            for m, per in self.group_offsets(group, topic, queues).items()
        }

    def group_offsets(self, group: str, topic: str, queues: int = 4) -> dict[str, dict[int, dict | None]]:
        """master -> {queue id: {"max": queue max offset, "committed": the group's committed offset (0 when
        it has none)}, or None when the master does not answer}."""
        from rmqha.broker.remoting.codes import RequestCode, ResponseCode

        out: dict[str, dict[int, dict | None]] = {}
        for m in self.masters():
            per: dict[int, dict | None] = {}
            for q in range(queues):
                try:
                    mx = namesrv_request(
                        self.addr(m),
                        RequestCode.GET_MAX_OFFSET,
                        {"topic": topic, "queueId": q},
                        timeout=2.0,
                        credentials=self.credentials,
                    )
                    co = namesrv_request(
                        self.addr(m),
                        RequestCode.QUERY_CONSUMER_OFFSET,
                        {"consumerGroup": group, "topic": topic, "queueId": q},
                        timeout=2.0,
                        credentials=self.credentials,
                    )
                except NamesrvError:
                    per[q] = None
                    continue
                if mx.code != 0:
                    per[q] = None
                    continue
                end = int((mx.ext_fields or {}).get("offset", 0))
                done = (
                    int((co.ext_fields or {}).get("offset", 0))
                    if co.code == 0
                    else (0 if co.code == ResponseCode.QUERY_NOT_FOUND else None)
                )
                per[q] = None if done is None else {"max": end, "committed": done}
            out[m] = per
        return out
