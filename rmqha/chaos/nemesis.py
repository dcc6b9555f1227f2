"""The nemesis of a chaos run: a seeded schedule of faults, each a start/stop pair from one table.

    c = Cluster.attach("chaos")
    sched = make_schedule(random.Random(seed), ["kill-master", "latency"], c, duration=60)
    nem = Nemesis(c, log=print, fault_log=FaultLog(run_dir / "faults" / "faults-1.jsonl"))
    nem.run(sched, t0, stop_event, end=60)       # in a thread; nem.active says what is broken now
    stop_event.set(); nem.heal_all()             # waits for the nemesis's inject or heal under way

ACTIONS is the table: each kind's start and stop (both take the cluster handle and the fault), keyed by
the names of the fault vocabulary (rmqha/runs/faults.py: what each kind targets, the backends it works
on, how its parameters are drawn and what it does). Every start and stop goes through
rmqha/cluster/handle.py and is written to the fault log (rmqha/runs/faultlog.py), so the audit knows what
was broken when.

  kind            target        backends       start -> stop
  latency         HA link       docker         latency above the sync wait on <slave>-ha -> toxics removed
  cut             HA link       docker         timeout toxic both ways, or the proxy disabled -> restored
  slicer          HA link       docker         master -> slave bytes in 7 +/- 3 byte slices -> removed
  pause-slave     slave         both           frozen (SIGSTOP / docker pause) -> resumed
  restart-slave   slave         both           SIGTERM, clean shutdown -> started
  kill-slave      slave         both           SIGKILL -> started
  pause-master    master        both           frozen -> resumed
  restart-master  master        both           SIGTERM -> started
  kill-master     master        both           SIGKILL -> started after the hold
  power-loss      master|slave  both           SIGKILL, commit log cut to the durable offset -> started
  group-power-loss master       both           the same on the master and its slaves at once -> all started
  slave-then-master-power-loss  both           the group's slaves, then gap_s later its master -> all started
  cluster-power-loss            both           every broker, masters first -> all started
  disk-full       master|slave  both           the store's own tmpfs filled (Cluster.limit_disk) -> freed
  partition       master|slave  docker         container off the network (no name server, peers or
                                               clients) -> reconnected
  client-latency  master        docker         latency on the host clients' proxy of the master -> removed
  client-cut      master        docker         the clients' proxy cut (timeout or disabled) -> restored

The faults above are classic (modes ("classic",)): they are not applicable to a DLedger group, which
has no planned master or slave (a kill-slave there would hit whichever node the schedule named,
leader or not). A DLedger group (topology dledger) has its own, each resolving its target when it is
injected (the schedule's target is only who led when it was drawn; the fault log's is the real one,
and info.plannedTarget says when they differ):

  kind                targets   backends  start -> stop
  kill-leader         leader    both      SIGKILL whoever leads now -> started
                                          (leader faults are held >= LEADER_FAILOVER_HOLD_S, 12 s:
                                          rmqha/runs/faults.py)
  pause-leader        leader    both      the leader frozen (SIGSTOP / docker pause) -> resumed
  partition-leader    leader    docker    every <leader>-dl-<peer> and <peer>-dl-<leader> proxy cut (timeout
                                          or disabled): the leader alone, a minority; clients and the name
                                          server still reach it -> restored. The local backend has no
                                          proxies: pause-leader is the nearest (it also stops clients)
  kill-follower       follower  both      SIGKILL a node that is not the leader now -> started
  pause-follower      follower  both      frozen -> resumed
  partition-follower  follower  docker    its -dl- proxies cut both ways -> restored
  power-loss-leader   leader    both      SIGKILL the leader, its dledger data and index files cut at
                                          their fsynced positions (Cluster.power_loss) -> started
  power-loss-follower follower  both      the same on a follower -> started

A leader fault counts as role "master", a follower fault as "slave" (the broker's roles). Not yet for
DLedger: power loss on a majority, disk-full, link latency.

Schedules: one fault at a time by default; with overlap=True a master fault may start while a slave
fault of another group is active (never two faults on one group, so each heal is unambiguous).
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

from rmqha.cluster import ClusterError
from rmqha.runs.faults import ALL_FAULTS, CLASSIC, CLUSTER_WIDE, DLEDGER, FAULTS, LAST_IN_SWEEP, FaultKind


@dataclass
class Fault:
    at: float  # seconds after the start of the workload
    hold: float  # seconds until healed
    kind: str
    group: str  # broker name
    target: str  # the node
    params: dict = field(default_factory=dict)
    role: str = "slave"  # of the target
    link: str | None = None
    id: int = 0

    def describe(self) -> str:
        extra = " ".join(f"{k}={v}" for k, v in self.params.items())
        what = self.link or self.target
        return f"{self.kind} {what}" + (f" ({extra})" if extra else "")

    def to_json(self) -> dict:
        return asdict(self)


LEADER_WAIT_S = 30.0  # a DLedger fault waits this long for its group to have a leader (an election: ~5 s)


def _restart(c, f):
    c.start(f.target, timeout=60)


def _group_nodes(c, f) -> list[str]:
    """The faulted group's master (the fault's target) and its slaves."""
    g = groups_of(c).get(f.group) or {"master": f.target, "slaves": []}
    return [g["master"]] + list(g["slaves"])


def _group_power_loss(c, f):
    """The whole group's power cut at once: master first (it stops acknowledging), then its slaves."""
    return {"nodes": {n: c.power_loss(n) for n in _group_nodes(c, f)}}


def _group_restart(c, f):
    """Power back on every node of the group together (as after a rack's power cut), then each is waited for."""
    nodes = _group_nodes(c, f)
    for n in nodes:
        c.start(n, wait=False)
    for n in nodes:
        c.wait_up(n, 60)


def _cluster_nodes(c) -> list[str]:
    """Every broker: the masters first."""
    groups = groups_of(c)
    return [g["master"] for _, g in sorted(groups.items())] + [
        s for _, g in sorted(groups.items()) for s in g["slaves"]
    ]


def _cluster_power_loss(c, f):
    """Every broker's power cut (a data centre's): masters first, then slaves."""
    return {"nodes": {n: c.power_loss(n) for n in _cluster_nodes(c)}}


def _cluster_restart(c, f):
    nodes = _cluster_nodes(c)
    for n in nodes:
        c.start(n, wait=False)
    for n in nodes:
        c.wait_up(n, 60)


def _slave_then_master_power_loss(c, f):
    """The group's slaves lose power, the master goes on alone for gap_s, then it loses power too: what
    it acknowledged meanwhile was only ever on the master."""
    g = _group_nodes(c, f)
    info = {n: c.power_loss(n) for n in g[1:]}
    time.sleep(f.params.get("gap_s", 0))
    info[g[0]] = c.power_loss(g[0])
    return {"nodes": info}


def _resume(c, f):
    c.resume(f.target)


def _heal_link(c, f):
    c.heal_link(f.link)


def group_mode(cluster, group: str) -> str:
    """DLEDGER when the group's nodes are DLedger nodes (state.json), else CLASSIC."""
    from rmqha.cluster.status import is_dledger_spec

    return (
        DLEDGER
        if any(is_dledger_spec(n) for n in cluster.state.get("nodes", []) if n.get("brokerName") == group)
        else CLASSIC
    )


# ---- DLedger: targets resolved when the fault is injected ----------------------------------------


def _dledger_members(c, group: str) -> list[str]:
    return [n["name"] for n in c.state.get("nodes", []) if n.get("brokerName") == group]


def _leader_now(c, group: str) -> str | None:
    """The member whose /status says it leads; when none answers so (a busy leader can miss the 1 s
    /status timeout for many seconds), the node that the members in the highest term name as their
    leader: a term has one leader."""
    members = _dledger_members(c, group)
    statuses = {n: c.status(n) for n in members}
    leader = c.dledger_leader(group, statuses)
    if leader:
        return leader
    node_of = {n.get("dLegerSelfId"): n["name"] for n in c.state.get("nodes", []) if n.get("brokerName") == group}
    claims = [
        (int(d.get("term") or 0), node_of[d["leaderId"]])
        for d in ((s or {}).get("dledger") or {} for s in statuses.values())
        if d.get("role") == "FOLLOWER" and d.get("leaderId") in node_of
    ]
    return max(claims)[1] if claims else None


def _current_leader(c, f) -> str:
    """The group's leader now (_leader_now); waits up to LEADER_WAIT_S for one (an election may be under way)."""
    return c.wait_until(
        lambda: _leader_now(c, f.group),
        LEADER_WAIT_S,
        f"a DLedger leader in {f.group} to fault",
        node=_dledger_members(c, f.group),
        interval=0.2,
    )


def _resolve(c, f, leader_fault: bool) -> dict:
    """Point f at the leader now (leader_fault) or at a follower now: the planned target when it still is
    one, else the first other follower. Returns the log's info (plannedTarget when it moved)."""
    planned = f.target
    leader = _current_leader(c, f)
    if leader_fault:
        f.target = leader
    elif planned == leader or planned not in _dledger_members(c, f.group):
        f.target = next(n for n in _dledger_members(c, f.group) if n != leader)
    info = {"leader": leader}
    if f.target != planned:
        info["plannedTarget"] = planned
    return info


def _dledger_links(c, node: str) -> list[str]:
    """The node's DLedger peer proxies, both directions (docker: `<src>-dl-<dst>`, kind "dledger")."""
    return [p["name"] for p in c.links() if p.get("kind") == "dledger" and node in (p.get("node"), p.get("peer"))]


def _node_op(op: str, leader_fault: bool):
    def start(c, f):
        info = _resolve(c, f, leader_fault)
        getattr(c, op)(f.target)
        return info

    start.__name__ = f"_{op}_{'leader' if leader_fault else 'follower'}"
    return start


def _power_loss_dledger(leader_fault: bool):
    def start(c, f):
        info = _resolve(c, f, leader_fault)
        return dict(info, **(c.power_loss(f.target) or {}))

    start.__name__ = f"_power_loss_{'leader' if leader_fault else 'follower'}"
    return start


def _partition_dledger(leader_fault: bool):
    def start(c, f):
        info = _resolve(c, f, leader_fault)
        links = _dledger_links(c, f.target)
        if not links:
            raise ClusterError(
                f"{f.target} has no DLedger peer proxies (a docker dledger cluster has <node>-dl-<peer> for every pair)"
            )
        f.params["links"] = links
        for link in links:
            c.cut_link(link, f.params["mode"])
        return dict(info, links=links)

    return start


def _heal_dledger_partition(c, f):
    for link in f.params.get("links") or []:
        c.heal_link(link)


def _slow_link(c, f):
    c.slow_link(f.link, f.params["ms"])


def _cut_link(c, f):
    c.cut_link(f.link, f.params["mode"])


def _slice_link(c, f):
    c.slice_link(f.link, f.params["average_size"], f.params["size_variation"], f.params["delay_us"])


@dataclass(frozen=True)
class Action:
    """How to start and stop one kind of fault (rmqha/runs/faults.py names it and says what it is)."""

    start: Callable  # (cluster, fault) -> dict | None (info for the log)
    stop: Callable  # (cluster, fault) -> dict | None


ACTIONS: dict[str, Action] = {
    "latency": Action(_slow_link, _heal_link),
    "cut": Action(_cut_link, _heal_link),
    "slicer": Action(_slice_link, _heal_link),
    "pause-slave": Action(lambda c, f: c.pause(f.target), _resume),
    "restart-slave": Action(lambda c, f: c.stop(f.target), _restart),
    "kill-slave": Action(lambda c, f: c.kill(f.target), _restart),
    "pause-master": Action(lambda c, f: c.pause(f.target), _resume),
    "restart-master": Action(lambda c, f: c.stop(f.target), _restart),
    "kill-master": Action(lambda c, f: c.kill(f.target), _restart),
    "power-loss": Action(lambda c, f: c.power_loss(f.target), _restart),
    "group-power-loss": Action(_group_power_loss, _group_restart),
    "slave-then-master-power-loss": Action(_slave_then_master_power_loss, _group_restart),
    "cluster-power-loss": Action(_cluster_power_loss, _cluster_restart),
    "disk-full": Action(lambda c, f: c.fill_disk(f.target), lambda c, f: c.free_disk(f.target)),
    "partition": Action(lambda c, f: c.partition(f.target), lambda c, f: c.heal_partition(f.target)),
    "client-latency": Action(_slow_link, _heal_link),
    "client-cut": Action(_cut_link, _heal_link),
    "kill-leader": Action(_node_op("kill", True), _restart),
    "pause-leader": Action(_node_op("pause", True), _resume),
    "partition-leader": Action(_partition_dledger(True), _heal_dledger_partition),
    "kill-follower": Action(_node_op("kill", False), _restart),
    "pause-follower": Action(_node_op("pause", False), _resume),
    "power-loss-leader": Action(_power_loss_dledger(True), _restart),
    "power-loss-follower": Action(_power_loss_dledger(False), _restart),
    "partition-follower": Action(_partition_dledger(False), _heal_dledger_partition),
}
assert set(ACTIONS) == set(FAULTS), "every fault kind of rmqha/runs/faults.py has a start and a stop here"


def link_of(cluster, f: Fault) -> str | None:
    """The Toxiproxy proxy a link fault acts on (its kind's link: the target's HA or client link)."""
    link = FAULTS[f.kind].link
    if link == "ha":
        return cluster.ha_link(f.target)
    if link == "client":
        return cluster.client_link(f.target)
    return None


def groups_of(cluster) -> dict[str, dict]:
    """broker name -> {"master": node, "slaves": [nodes]}. A DLedger group's master is its leader now
    (/status), its slaves the other members, and it has "dledger": True; with no leader now its first
    node stands in (a DLedger fault finds the real leader when it is injected)."""
    from rmqha.cluster.status import is_dledger_spec

    out: dict[str, dict] = {}
    for n in cluster.state.get("nodes", []):
        g = out.setdefault(n["brokerName"], {"master": None, "slaves": []})
        if is_dledger_spec(n):
            g["dledger"] = True
            g.setdefault("members", []).append(n["name"])
        elif n.get("master"):
            g["slaves"].append(n["name"])
        else:
            g["master"] = n["name"]
    for name, g in out.items():
        if g.get("dledger"):
            members = g.pop("members")
            leader = cluster.dledger_leader(name) or members[0]
            g["master"], g["slaves"] = leader, [m for m in members if m != leader]
    return out


def _candidates(kind: FaultKind, groups: dict[str, dict]) -> list[tuple[str, str, str]]:
    """(group, node, role) this kind can hit: only groups of a replication mode the kind applies to."""
    out = []
    for g, members in sorted(groups.items()):
        if (DLEDGER if members.get("dledger") else CLASSIC) not in kind.modes:
            continue
        if kind.targets in ("master", "node") and members["master"]:
            # a master fault only where its loss matters to replication: groups with a slave
            if members["slaves"] or kind.targets == "node":
                out.append((g, members["master"], "master"))
        if kind.targets in ("slave", "node"):
            out += [(g, s, "slave") for s in members["slaves"]]
    return out


def make_schedule(
    rng: random.Random,
    faults: list[str],
    cluster,
    duration: float,
    sync_wait_ms: int = 1500,
    max_faults: int | None = None,
    warmup: float | None = None,
    quiet: float | None = None,
    overlap: bool = False,
) -> list[Fault]:
    """Faults every few seconds from `warmup` until `duration - quiet`. One at a time, or (overlap) a
    second one on another group while the first is active. Deterministic for a seed and a topology."""
    groups = groups_of(cluster)
    usable = [f for f in faults if _candidates(FAULTS[f], groups)]
    if not usable:
        return []
    warmup = min(3.0, duration * 0.15) if warmup is None else warmup
    quiet = max(3.0, min(10.0, duration * 0.2)) if quiet is None else quiet
    out: list[Fault] = []
    t = warmup
    while max_faults is None or len(out) < max_faults:
        hold = round(rng.uniform(2.0, 4.0), 1)
        if t + hold > duration - quiet:
            break
        kind = FAULTS[rng.choice(usable)]
        if hold < kind.min_hold:
            hold = kind.min_hold
            if t + hold > duration - quiet:
                break
        group, target, role = rng.choice(_candidates(kind, groups))
        f = Fault(round(t, 1), hold, kind.name, group, target, kind.params(rng, sync_wait_ms), role, id=len(out) + 1)
        f.link = link_of(cluster, f)
        out.append(f)
        if overlap and (max_faults is None or len(out) < max_faults) and rng.random() < 0.5:
            # a second fault on another group, starting inside this one's hold
            kinds = [k for k in usable if any(g != group and r != role for g, _, r in _candidates(FAULTS[k], groups))]
            if kinds:
                k2 = FAULTS[rng.choice(kinds)]
                c2 = [(g, n, r) for g, n, r in _candidates(k2, groups) if g != group and r != role]
                g2, n2, r2 = rng.choice(c2)
                at2 = round(t + rng.uniform(0.3, hold * 0.6), 1)
                hold2 = max(round(rng.uniform(1.5, 3.0), 1), k2.min_hold)
                if at2 + hold2 <= duration - quiet:
                    f2 = Fault(at2, hold2, k2.name, g2, n2, k2.params(rng, sync_wait_ms), r2, id=len(out) + 1)
                    f2.link = link_of(cluster, f2)
                    out.append(f2)
                    hold = max(hold, at2 + hold2 - t)
        t += hold + round(rng.uniform(1.0, 3.0), 1)
    return out


def sweep_cells(faults: list[str], cluster) -> list[tuple[str, str]]:
    """(kind, role) for every fault and every role it can hit: the cells of a guarantee matrix."""
    groups = groups_of(cluster)
    return [
        (k, r)
        for k in faults
        for r in ("master", "slave")
        if any(role == r for _, _, role in _candidates(FAULTS[k], groups))
    ]


def make_sweep(
    rng: random.Random,
    faults: list[str],
    cluster,
    sync_wait_ms: int = 1500,
    warmup: float = 3.0,
    hold: tuple[float, float] = (2.5, 3.5),
    gap: tuple[float, float] = (4.0, 5.0),
) -> list[Fault]:
    """Every (kind, role) of `faults` once, one at a time, in a seeded order with a master power loss
    last; targets drawn from the groups. The schedule's end is the last fault's heal."""
    groups = groups_of(cluster)
    cells = sweep_cells(faults, cluster)
    rng.shuffle(cells)
    cells.sort(key=lambda c: LAST_IN_SWEEP.index(c) + 1 if c in LAST_IN_SWEEP else 0)
    out, t = [], warmup
    forking = set()  # groups a fault that may fork them already hit
    for kind_name, role in cells:
        kind = FAULTS[kind_name]
        choices = [c for c in _candidates(kind, groups) if c[2] == role]
        if (kind_name, role) in LAST_IN_SWEEP:
            choices = [c for c in choices if c[0] not in forking] or choices
        group, target, r = rng.choice(choices)
        if (kind_name, role) in LAST_IN_SWEEP:
            forking.add(group)
        h = max(round(rng.uniform(*hold), 1), kind.min_hold)
        f = Fault(round(t, 1), h, kind.name, group, target, kind.params(rng, sync_wait_ms), r, id=len(out) + 1)
        f.link = link_of(cluster, f)
        out.append(f)
        t += h + round(rng.uniform(*gap), 1)
    return out


def _event_order(event: tuple[float, bool, Fault]) -> tuple:
    """Events of a schedule, (time, is_heal, fault), in the order the nemesis takes them: by time to the
    millisecond (so a heal at 3.1 + 2.2 s is at the same instant as an inject at 5.3 s). At one instant
    the heals of faults injected earlier come first: a fault that ends when the next one begins is one at
    a time (both active at once would hit two nodes, or undo the next fault on the same node). Then the
    injects; then the heals of faults held for no time, each after its own inject."""
    at, is_heal, f = event
    return round(at, 3), not is_heal or f.hold == 0, is_heal


# A fault moved late must still be healed this long before the sends end. Every schedule plans a longer
# quiet end (make_schedule: >= 3 s; --schedule: 3 s; a sweep: 5 s), so a fault may be moved by 2 s or more
# before it is skipped; and a fault healed as the sends end would show nothing of the recovery.
QUIET_MIN_S = 1.0


class Nemesis:
    """Injects and heals faults through the cluster handle, writing each to the fault log.

    One operation at a time: inject, heal and heal_all hold the nemesis's operation lock, so heal_all
    (called once the run's stop is set) waits for the schedule's inject or heal under way, and a fault is
    healed once: a heal of a fault no longer active does nothing."""

    def __init__(self, cluster, log=None, fault_log=None):
        self.cluster = cluster
        self.log = log or (lambda line: None)
        self.fault_log = fault_log
        self.active: dict[int, Fault] = {}
        self.done: list[tuple[Fault, str | None]] = []  # (fault, error)
        self.skipped: list[tuple[Fault, str]] = []  # (fault, why): moved past the run's end, never injected
        self._lock = threading.Lock()
        self._ops = threading.RLock()  # one inject or heal at a time (heal_all heals under it)
        self._held_from: dict[int, float] = {}  # a scheduled fault's id -> time.monotonic() when its inject ended
        self._ids = 1000  # faults injected outside a schedule

    @property
    def current(self) -> Fault | None:
        with self._lock:
            return next(iter(self.active.values()), None)

    def describe_active(self) -> str:
        with self._lock:
            return ", ".join(f.describe() for f in self.active.values()) or "none"

    # -- one fault --------------------------------------------------------------------------------
    def inject(self, f: Fault, note: dict | None = None) -> dict | None:
        """Start fault f (it is active from now until healed, even when the start fails: half done,
        perhaps). `note`: more for its fault-log line (the schedule's lateness)."""
        kind = FAULTS.get(f.kind)
        if kind is None:
            raise ValueError(f"unknown fault {f.kind!r}; known: {', '.join(ALL_FAULTS)}")
        if self.cluster.kind not in kind.backends:
            raise ValueError(f"{f.kind} needs the {'/'.join(kind.backends)} backend")
        mode = group_mode(self.cluster, f.group)
        if mode not in kind.modes:
            raise ValueError(
                f"{f.kind} does not apply to group {f.group}: it is a {'/'.join(kind.modes)} fault, "
                f"and {f.group} is a {mode} group"
                + (
                    " (DLedger faults: " + ", ".join(k for k, v in FAULTS.items() if DLEDGER in v.modes) + ")"
                    if mode == DLEDGER
                    else ""
                )
            )
        with self._ops:
            if not f.id:
                self._ids += 1
                f.id = self._ids
            if not f.link:
                f.link = link_of(self.cluster, f)
            with self._lock:
                self.active[f.id] = f
            note = dict(note or {}, **(self._not_exercised(f) or {})) or None
            return self._op("inject", ACTIONS[f.kind].start, f, note)

    def _not_exercised(self, f: Fault) -> dict | None:
        """Why a fault on this group cannot show anything about replication: its master holds a slave
        SLAVE_AHEAD (a fork an earlier fault left; nothing replicates until an operator acts). The
        fault still runs, and its log line says so, so the audit and the matrix do not count it as
        coverage. None when the group replicates (or its master does not answer: unknown, not excused).
        A fault on every group (cluster-power-loss) is judged per group: notExercisedGroups names each
        group that cannot replicate, and the fault is not exercised only when none can."""
        try:
            ahead = self.cluster.slaves_ahead()
            masters = {self.cluster.node(m).get("brokerName"): m for m in self.cluster.masters()}
        except Exception:
            return None
        groups = sorted(g for g in masters if g) if f.kind in CLUSTER_WIDE else [f.group]
        idle = {}
        for g in groups:
            master = masters.get(g)
            if master in ahead:
                a = ahead[master][0]
                idle[g] = (
                    f"group {g} cannot replicate: {master} holds a slave SLAVE_AHEAD "
                    f"(at {a.get('slaveAckOffset')}), left by an earlier fault"
                )
        if not idle:
            return None
        out: dict = {"notExercisedGroups": idle} if f.kind in CLUSTER_WIDE else {}
        if len(idle) == len(groups):
            out["notExercised"] = "; ".join(idle[g] for g in groups)
        return out

    def heal(self, f: Fault, note: dict | None = None) -> dict | None:
        """Stop fault f, once: a fault no longer active (healed already, by the schedule or heal_all)
        is left alone, nothing done and nothing written."""
        with self._ops:
            with self._lock:
                if f.id not in self.active:
                    return None
            try:
                return self._op("heal", ACTIONS[f.kind].stop, f, note)
            finally:
                with self._lock:
                    self.active.pop(f.id, None)
                self._held_from.pop(f.id, None)

    def _op(self, op: str, fn, f: Fault, note: dict | None = None) -> dict | None:
        from rmqha.runs.faultlog import now_ms

        start = now_ms()
        try:
            info = fn(self.cluster, f)
        except Exception as e:
            if self.fault_log:
                self.fault_log.write(op, f, start, error=f"{type(e).__name__}: {e}", info=note)
            raise
        if note:
            info = dict(info if isinstance(info, dict) else {}, **note)
        if self.fault_log:
            self.fault_log.write(op, f, start, info=info if isinstance(info, dict) else None)
        return info

    def heal_all(self) -> list[str]:
        """Undo everything still broken, then every toxic and every stopped node. Errors are returned,
        not raised: a fault that cannot be undone fails the run, and the rest must still be healed.
        Call it once the run's stop is set: it waits for the schedule's operation under way (a restart
        can take a minute), so what that heals is not healed twice. A fault healed here before its hold
        was over says so in its heal line (info.cutShort)."""
        errors = []
        with self._ops:
            for f in list(self.active.values()):
                try:
                    self.heal(f, self._cut_short(f))
                except Exception as e:
                    errors.append(f"healing {f.describe()}: {type(e).__name__}: {e}")
            try:
                self.cluster.heal_links()
            except Exception as e:
                errors.append(f"Toxiproxy reset: {type(e).__name__}: {e}")
            for node in self.cluster.nodes:
                try:
                    if self.cluster.kind == "docker":
                        try:
                            self.cluster.heal_partition(node)
                        except ClusterError:
                            pass
                    self.cluster.resume(node)
                    if self.cluster.disk_limited(node):
                        self.cluster.free_disk(node)
                    if not self.cluster.running(node):
                        self.cluster.start(node, timeout=60)
                except Exception as e:
                    errors.append(f"bringing {node} back: {type(e).__name__}: {e}")
        return errors

    def _cut_short(self, f: Fault) -> dict | None:
        """The heal line's note for a fault heal_all heals before its hold was over (the run ended under
        it): how long it was held of its hold. None when it had its hold, never took effect, or was not
        injected by the schedule (run())."""
        took = self._held_from.get(f.id)
        if took is None:
            return None
        held = time.monotonic() - took
        if held >= f.hold - 0.05:
            return None
        self.log(f"  {f.describe()}: healed at the run's end after {held:.1f}s of its {f.hold:g}s hold")
        return {"cutShort": f"healed at the run's end after {held:.1f} s of its {f.hold:g} s hold"}

    # -- the schedule -----------------------------------------------------------------------------
    def run(self, schedule: list[Fault], t0: float, stop: threading.Event, end: float | None = None) -> None:
        """Inject and heal each fault at its time (t0: time.monotonic() of the start); stop ends early.
        Faults may overlap: events are taken in time order, a heal before an inject at the same instant
        (_event_order). A failing inject or heal is logged and kept in `done`, not raised.

        Every fault is held its full hold from when its inject ended, not from when it was due: an inject
        can start late (an earlier restart took long: Apache 4.9.8 restarts in 15-47 s) or take long (a
        DLedger fault first finds who leads), and a fault healed when due would be held for no time
        (showing nothing: "not exercised"). Everything after it moves by as much (`shift`, which only
        grows), so the gaps after it are kept, and the order of events never changes: two faults
        scheduled to overlap still overlap, and one scheduled to end as the next begins still ends first.
        A DLedger heal that ends late (a restart waits for the node) also moves what follows, which keeps
        its gap from when the node is back (mx-dl-l2, 2026-11-29: a follower's power cut began 1.4 s after
        its peer was back from the leader's cut, not 4.4 s, two members catching up at once). A classic
        heal does not: a classic schedule leaves restarts their room in its gaps (a sweep on Apache's
        broker: 25-30 s, run.sweep_gap), and the next fault, due before the node is back, starts late
        and is held in full from then. The fault log has the real times; an inject line says how late
        it was (info.lateS).

        `end` (seconds after t0: when the run's sends end) bounds the moves: a fault whose full hold,
        moved, would end less than QUIET_MIN_S before it (and later than it was scheduled to end) is not
        injected. It is skipped in the open: said, kept in `skipped`, and written to the fault log as a
        "skip" line. A fault that still runs into the stop (its inject took long) is healed by heal_all,
        whose heal line says it was cut short."""
        events = sorted(
            [(f.at, False, f) for f in schedule] + [(f.at + f.hold, True, f) for f in schedule], key=_event_order
        )
        errors: dict[int, str] = {}
        shift = 0.0
        took: dict[int, float] = {}  # fault id -> when its inject ended
        skipped: set[int] = set()
        for at, is_heal, f in events:
            if is_heal and f.id in skipped:
                continue
            if is_heal and f.id in took:
                shift = max(shift, took[f.id] + f.hold - (t0 + at))
            if stop.wait(max(0.0, t0 + at + shift - time.monotonic())):
                break
            with self._ops:  # heal_all, once the stop is set, waits for this; after it, nothing more
                if stop.is_set():
                    break
                now = time.monotonic() - t0
                if not is_heal:
                    why = _past_the_end(f, now, end)
                    if why:
                        self._skip(f, now, why)
                        skipped.add(f.id)
                        continue
                    late = now - f.at
                    self.log(
                        f"t={now:5.1f}s inject {f.describe()} on {f.group} for {f.hold:g}s"
                        + (f" ({late:.1f}s late: held in full, what follows moves)" if late >= 0.1 else "")
                    )
                    try:
                        info = self.inject(f, {"lateS": round(late, 1)} if late >= 0.1 else None)
                        took[f.id] = self._held_from[f.id] = time.monotonic()
                        if info:
                            self.log("  " + " ".join(f"{k}={v}" for k, v in info.items()))
                    except Exception as e:
                        errors[f.id] = f"inject: {type(e).__name__}: {e}"
                        self.log(f"  {f.describe()}: {errors[f.id]}")
                else:
                    try:
                        self.heal(f)
                        self.log(f"t={time.monotonic() - t0:5.1f}s healed {f.describe()}")
                    except Exception as e:
                        errors[f.id] = (
                            errors.get(f.id, "") + "; " if f.id in errors else ""
                        ) + f"heal: {type(e).__name__}: {e}"
                        self.log(f"  healing {f.describe()}: {errors[f.id]}")
                    kind = FAULTS.get(f.kind)
                    if kind is not None and DLEDGER in kind.modes:
                        shift = max(shift, time.monotonic() - (t0 + at))
                    self.done.append((f, errors.get(f.id)))
        # A fault the run stopped before (its sends ended while earlier faults, moved, still ran) is as
        # much a fault not injected as one skipped for its hold: said and written, never just missing
        # (4.9.8's ASYNC_FLUSH sweep of seed 3, 2026-11-29: its cluster-power-loss had no line at all).
        with self._ops:
            now = time.monotonic() - t0
            for f in schedule:
                if f.id not in took and f.id not in skipped and f.id not in errors:
                    due = f.at + shift
                    self._skip(
                        f,
                        now,
                        f"not reached before the run stopped (due at t={due:.1f}s, the stop seen at t={now:.1f}s)",
                    )

    def _skip(self, f: Fault, now: float, why: str) -> None:
        from rmqha.runs.faultlog import now_ms

        self.log(f"t={now:5.1f}s skip {f.describe()} on {f.group}: {why}")
        self.skipped.append((f, why))
        if self.fault_log:
            self.fault_log.write(
                "skip", f, now_ms(), info={"skipped": why, "scheduledAtS": f.at, "lateS": round(now - f.at, 1)}
            )


def _past_the_end(f: Fault, now: float, end: float | None) -> str | None:
    """Why fault f, due at f.at and reached at `now` (seconds after the start), is not injected: its full
    hold would end less than QUIET_MIN_S before the run's `end` and later than it was scheduled to end
    (a schedule's own times are never refused). None: it fits, or the run has no end given."""
    if end is None:
        return None
    limit = max(end - QUIET_MIN_S, f.at + f.hold)
    if now + f.hold <= limit + 1e-6:
        return None
    return (
        f"{now - f.at:.1f}s late (earlier faults took long), its {f.hold:g}s hold would end at "
        f"t={now + f.hold:.1f}s, past t={limit:.1f}s ({QUIET_MIN_S:g}s before the sends end at t={end:g}s)"
    )
