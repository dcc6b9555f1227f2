"""The fault vocabulary: every fault kind's name and properties, in one table (tests/unit/runs/test_faults.py).

The nemesis (rmqha/chaos/nemesis.py) keeps only how to start and stop each kind, keyed by these names;
the fault log (rmqha/runs/faultlog.py) writes them; the audit (rmqha/pipeline/) and the guarantee
matrix (rmqha/matrix/) judge a fault by the properties below, never by spelling its name.

  kind                          targets   backends  action     link    scope    modes
  latency                       slave     docker    delay      ha      node     classic
  cut                           slave     docker    cut        ha      node     classic
  slicer                        slave     docker    slice      ha      node     classic
  pause-slave                   slave     both      pause              node     classic
  restart-slave                 slave     both      stop               node     classic
  kill-slave                    slave     both      kill               node     classic
  pause-master                  master    both      pause              node     classic
  restart-master                master    both      stop               node     classic
  kill-master                   master    both      kill               node     classic
  power-loss                    node      both      power              node     classic
  group-power-loss              master    both      power              group    classic
  slave-then-master-power-loss  master    both      power              group    classic
  cluster-power-loss            master    both      power              cluster  classic
  disk-full                     node      both      disk               node     classic
  partition                     node      docker    isolate            node     classic
  client-latency                master    docker    delay      client  node     classic
  client-cut                    master    docker    cut        client  node     classic
  kill-leader                   master    both      kill               node     dledger
  pause-leader                  master    both      pause              node     dledger
  partition-leader              master    docker    cut-peers          node     dledger
  kill-follower                 slave     both      kill               node     dledger
  pause-follower                slave     both      pause              node     dledger
  power-loss-leader             master    both      power              node     dledger
  power-loss-follower           slave     both      power              node     dledger
  partition-follower            slave     docker    cut-peers          node     dledger

targets: "master", "slave" or "node" (either). A DLedger kind's "master" is its group's leader when the
fault is injected, its "slave" a follower (the broker's roles). action: what happens to the target
(kill: SIGKILL; stop: SIGTERM, a clean shutdown; pause: SIGSTOP / docker pause; power: SIGKILL and
every file cut to what was fsynced; isolate: the container off the network; cut-peers: its DLedger peer
proxies cut, clients still reach it; disk: its store's filesystem filled; delay, cut, slice: a
Toxiproxy link, `link` says which). scope: the target alone, its whole group, or every broker.

The sets the checkers use are derived from these properties (RESTARTING, DESTRUCTIVE, LOG_REWRITING,
POWER_LOSSES, ...), so a new kind lands in each by what it does.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

CLASSIC, DLEDGER = "classic", "dledger"  # a group's replication: master/slave HA, or a DLedger (Raft) group
BOTH, DOCKER = ("local", "docker"), ("docker",)
NODE, GROUP, CLUSTER = "node", "group", "cluster"  # a fault's scope
# A DLedger leader fault is held at least this long. DLedger 0.3.1.2's followers count a silent leader
# alive for maxHeartBeatLeak (3) x heartBeatTimeIntervalMs (2 s), and the first election after that took
# 5.2-5.5 s here (docs/dledger.md); a leader back sooner is elected again in its own term (the followers
# voted for it in that term), so a 2-4 s hold would never make another node leader. On a loaded 2-core
# machine (the guarantee matrix's first DLedger sweep) a new leader took 6.8 s after a kill, and a leader
# paused for 7 s was never replaced (its followers, one just restarted, were still candidates): 12 s.
LEADER_FAILOVER_HOLD_S = 12.0

Params = Callable[[random.Random, int], dict]  # (rng, the master's sync wait in ms) -> the fault's params


def _none(rng: random.Random, sync_wait_ms: int) -> dict:
    return {}


def _cut_mode(rng: random.Random, sync_wait_ms: int) -> dict:
    return {"mode": rng.choice(["timeout", "disabled"])}


@dataclass(frozen=True)
class FaultKind:
    name: str
    targets: str  # "slave", "master", "node" (master or slave)
    backends: tuple[str, ...]
    action: str  # kill, stop, pause, power, isolate, cut-peers, disk, delay, cut, slice (the module's doc)
    params: Params = _none  # how a schedule draws its parameters
    link: str | None = None  # the Toxiproxy link it acts on: "ha" (the slave's HA link) or "client"
    scope: str = NODE  # NODE, GROUP (the target's group), CLUSTER (every broker)
    modes: tuple[str, ...] = (CLASSIC,)  # the group replications it applies to
    min_hold: float = 0.0  # a drawn hold shorter than this is raised to it (schedules, sweeps)
    # A master power cut that may leave its group SLAVE_AHEAD (a fork nothing after it on that group can
    # test): a sweep puts these last, in this order (1 first); 0: anywhere.
    last_in_sweep: int = 0
    doc: str = ""

    @property
    def dledger(self) -> bool:
        return DLEDGER in self.modes

    @property
    def restarts(self) -> bool:
        """The target's process ends and is started again: what it held only in memory is gone."""
        return self.action in ("kill", "stop", "power")

    @property
    def power_cut(self) -> bool:
        return self.action == "power"

    @property
    def node_down(self) -> bool:
        """The target stops answering anyone (a metric sample sees it down while the fault is active)."""
        return self.action in ("kill", "stop", "power", "pause", "isolate")

    @property
    def can_hit_master(self) -> bool:
        return self.targets in ("master", "node")


def _k(name: str, targets: str, backends: tuple[str, ...], action: str, **kw) -> FaultKind:
    return FaultKind(name, targets, backends, action, **kw)


_DL = {"modes": (DLEDGER,)}
_LEADER = {"modes": (DLEDGER,), "min_hold": LEADER_FAILOVER_HOLD_S}

FAULTS: dict[str, FaultKind] = {
    k.name: k
    for k in [
        _k(
            "latency",
            "slave",
            DOCKER,
            "delay",
            link="ha",
            params=lambda rng, w: {"ms": w + 1000},
            doc="master -> slave delayed above the sync wait: FLUSH_SLAVE_TIMEOUT",
        ),
        _k(
            "cut",
            "slave",
            DOCKER,
            "cut",
            link="ha",
            params=_cut_mode,
            doc="the HA link cut: SLAVE_NOT_AVAILABLE once the master drops it",
        ),
        _k(
            "slicer",
            "slave",
            DOCKER,
            "slice",
            link="ha",
            params=lambda rng, w: {"average_size": 7, "size_variation": 3, "delay_us": 10},
            doc="frames cut into tiny pieces",
        ),
        _k("pause-slave", "slave", BOTH, "pause"),
        _k("restart-slave", "slave", BOTH, "stop"),
        _k("kill-slave", "slave", BOTH, "kill"),
        _k("pause-master", "master", BOTH, "pause"),
        _k("restart-master", "master", BOTH, "stop"),
        _k("kill-master", "master", BOTH, "kill"),
        _k(
            "power-loss",
            "node",
            BOTH,
            "power",
            last_in_sweep=1,
            doc="SIGKILL, then the commit log cut to the durable (fdatasync'ed) offset",
        ),
        _k(
            "group-power-loss",
            "master",
            BOTH,
            "power",
            scope=GROUP,
            last_in_sweep=3,
            doc="master and slaves of one group lose power together: each SIGKILLed and cut to its durable "
            "offset -> all started together",
        ),
        _k(
            "slave-then-master-power-loss",
            "master",
            BOTH,
            "power",
            scope=GROUP,
            last_in_sweep=2,
            params=lambda rng, w: {"gap_s": round(rng.uniform(0.5, 1.5), 1)},
            doc="the group's slaves lose power, gap_s later its master -> all started together",
        ),
        _k(
            "cluster-power-loss",
            "master",
            BOTH,
            "power",
            scope=CLUSTER,
            last_in_sweep=4,
            doc="every broker loses power (masters first) -> all started together",
        ),
        _k(
            "disk-full",
            "node",
            BOTH,
            "disk",
            doc="the store's filesystem (a tmpfs of its own: Cluster.limit_disk) filled to the last byte; sends "
            "fail once the next commit-log file cannot be reserved -> the filler removed",
        ),
        _k("partition", "node", DOCKER, "isolate"),
        _k(
            "client-latency",
            "master",
            DOCKER,
            "delay",
            link="client",
            params=lambda rng, w: {"ms": rng.choice([200, 1000, 3000])},
        ),
        _k("client-cut", "master", DOCKER, "cut", link="client", params=_cut_mode),
        # DLedger groups: the target is whoever leads (or follows) when the fault starts
        _k(
            "kill-leader",
            "master",
            BOTH,
            "kill",
            **_LEADER,
            doc="SIGKILL the DLedger leader of the moment -> started (a follower by then)",
        ),
        _k(
            "pause-leader",
            "master",
            BOTH,
            "pause",
            **_LEADER,
            doc="the DLedger leader frozen: it keeps its connections and, resumed, its stale term",
        ),
        _k(
            "partition-leader",
            "master",
            DOCKER,
            "cut-peers",
            params=_cut_mode,
            **_LEADER,
            doc="the leader's DLedger proxies cut both ways: a minority of one that clients still reach",
        ),
        _k("kill-follower", "slave", BOTH, "kill", **_DL, doc="SIGKILL a DLedger follower -> started"),
        _k("pause-follower", "slave", BOTH, "pause", **_DL),
        _k(
            "power-loss-leader",
            "master",
            BOTH,
            "power",
            **_LEADER,
            doc="the DLedger leader loses power: SIGKILL, its data and index files cut at their fsynced "
            "positions -> started (a follower by then)",
        ),
        _k(
            "power-loss-follower",
            "slave",
            BOTH,
            "power",
            **_DL,
            doc="a DLedger follower loses power: SIGKILL, its files cut at their fsynced positions -> started",
        ),
        _k("partition-follower", "slave", DOCKER, "cut-peers", params=_cut_mode, **_DL),
    ]
}
ALL_FAULTS = tuple(FAULTS)
DEFAULT_FAULTS = ("latency", "cut", "pause-slave", "restart-slave", "slicer")  # `rmqha.chaos.run --nemesis`
MASTER_FAULTS = tuple(k for k, v in FAULTS.items() if v.can_hit_master)


def _kinds(test: Callable[[FaultKind], bool]) -> tuple[str, ...]:
    return tuple(k for k, v in FAULTS.items() if test(v))


def _classic_master(v: FaultKind, actions: tuple[str, ...]) -> bool:
    return not v.dledger and v.can_hit_master and v.action in actions


# A classic master's process restarted (killed, stopped, powered off): what it held in memory only, such as
# consumer offsets persisted every 5 s, may come back older.
RESTARTING = _kinds(lambda v: _classic_master(v, ("kill", "stop", "power")))
# ... or taken off the network: faults that can take bytes a master had already stored (its tail) or leave it
# behind its slave.
DESTRUCTIVE = _kinds(lambda v: _classic_master(v, ("kill", "stop", "power", "isolate")))
# ... or frozen: the master is out of its group (a slave may serve, the master may come back behind it, so
# the replicas' logs may be rewritten).
LOG_REWRITING = _kinds(lambda v: _classic_master(v, ("kill", "stop", "power", "isolate", "pause")))
MASTER_OUT = LOG_REWRITING
# Every power cut, classic or DLedger: only a power cut drops what the page cache held, so a lost send
# acknowledged before one is blamed on it too (a DLedger group's quorum should survive one node's cut;
# when it does not, the cut must be named).
POWER_LOSSES = _kinds(lambda v: v.power_cut)
GROUP_POWER = _kinds(lambda v: v.power_cut and v.scope != NODE)  # every node of a group loses power
CLUSTER_WIDE = _kinds(lambda v: v.scope == CLUSTER)  # faults on every group (the fault log names one)
NODE_DOWN = _kinds(lambda v: v.node_down)
# DLedger faults on the leader: they move the group's leadership
LEADER_FAULTS = _kinds(lambda v: v.dledger and v.targets == "master")
# (kind, role) cells a sweep runs last, in order (nemesis.make_sweep)
LAST_IN_SWEEP = tuple(
    (k, "master") for k in sorted(_kinds(lambda v: v.last_in_sweep > 0), key=lambda k: FAULTS[k].last_in_sweep)
)


def master_power_cut(kind: str, role: str | None) -> bool:
    """A classic fault that cut a master's power (alone, or with its whole group)."""
    v = FAULTS.get(kind)
    return v is not None and v.power_cut and not v.dledger and (v.scope != NODE or role == "master")


def evidence(kind: str) -> str | None:
    """What the metric samples must show for the fault to have taken effect (the matrix's "not exercised"):
    "down" the target not answering; "disk" a full master refusing a send, a full slave no longer storing;
    "behind" a send failing or the slave falling behind its master (its HA link); "refused" a send
    failing (the clients' link); "appending" a DLedger follower no longer appending while its leader's
    log grows (its peer links); None: nothing the samples hold (split frames, slow replies; a leader fault
    shows by another node leading)."""
    v = FAULTS.get(kind)
    if v is None:
        return None
    if v.node_down:
        return "down"
    if v.action == "disk":
        return "disk"
    if v.link == "ha" and v.action in ("cut", "delay"):
        return "behind"
    if v.link == "client" and v.action == "cut":
        return "refused"
    if v.action == "cut-peers" and v.targets == "slave":
        return "appending"
    return None


def topology_mode(topology: str | None) -> str | None:
    """The replication of a topology's groups (None: unknown, every mode passes)."""
    if topology is None:
        return None
    return DLEDGER if topology == "dledger" else CLASSIC


def applicable_faults(faults: list[str], backend: str, topology: str | None = None) -> tuple[list[str], list[str]]:
    """(usable, dropped) for a backend and, when given, a topology (a classic fault is dropped on
    dledger, a DLedger fault on the classic topologies)."""
    mode = topology_mode(topology)

    def ok(f: str) -> bool:
        return backend in FAULTS[f].backends and (mode is None or mode in FAULTS[f].modes)

    return [f for f in faults if ok(f)], [f for f in faults if not ok(f)]


def why_not_applicable(fault: str, backend: str, topology: str | None = None) -> str | None:
    """Why applicable_faults drops a fault (None: it does not)."""
    k = FAULTS[fault]
    if backend not in k.backends:
        return f"{fault} needs the {'/'.join(k.backends)} backend"
    mode = topology_mode(topology)
    if mode is not None and mode not in k.modes:
        return (
            f"{fault} is a {'/'.join(k.modes)} fault; topology {topology} has "
            f"{'DLedger groups (use kill-leader, kill-follower, ...)' if mode == DLEDGER else 'classic groups'}"
        )
    return None
