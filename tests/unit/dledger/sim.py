"""A simulated DLedger group for the Raft property tests: a fake clock, a network that drops, delays,
duplicates and reorders messages and can be partitioned, nodes that crash and restart from what
they persisted (the log, and term/votedFor as of their last PersistTerm), and a checker of Raft's
safety properties that runs as the schedule goes.

Everything random comes from one random.Random(seed): a seed is a schedule, and a failing one
replays exactly (`Cluster(seed=...)`).
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass
from typing import Any

from rmqha.broker.dledger.config import DLedgerConfig
from rmqha.broker.dledger.effects import AppendDone, Committed, PersistTerm, Reply, RoleChanged, Send
from rmqha.broker.dledger.election import LEADER
from rmqha.broker.dledger.node import DLedgerNode
from rmqha.broker.dledger.protocol import (
    LeadershipTransferRequest,
    ResponseCode,
    decode_request,
    decode_response,
    request_code,
)
from rmqha.broker.dledger.file_store import FileStore
from rmqha.broker.dledger.replication import MemoryLog, Rules


class Violation(AssertionError):
    pass


@dataclass
class NetworkFaults:
    drop: float = 0.0  # chance a message is lost
    duplicate: float = 0.0  # chance a request is delivered twice
    min_delay: float = 1.0  # ms
    max_delay: float = 30.0  # ms; random delays reorder messages
    slow: float = 0.0  # chance of a long delay (up to slow_delay), to reorder across rounds
    slow_delay: float = 3000.0


@dataclass
class Box:
    """What survives a crash (log, persisted term/vote) and the running node, if any."""

    node_id: str
    log: MemoryLog
    term: int = 0
    vote_for: str | None = None
    node: DLedgerNode | None = None
    incarnation: int = 0
    persists: int = 0
    next_tick: float = 0.0  # the one tick event that counts; earlier inputs may move it forward


class Checker:
    """Election safety, log matching, leader completeness, state-machine safety."""

    def __init__(self):
        self.leaders: dict[int, str] = {}  # term -> the one node that led it
        self.committed: dict[int, tuple] = {}  # index -> (term, body) committed anywhere
        self.commit_term: dict[int, int] = {}  # index -> lowest term in which it was seen committed
        self.seen: dict[tuple[int, int], tuple] = {}  # (index, term) -> (body, previous entry's term)
        self.violations: list[str] = []
        self.elections = 0
        self.commits = 0

    def fail(self, message: str) -> None:
        self.violations.append(message)
        raise Violation(message)

    def on_leader(self, node_id: str, term: int, log: MemoryLog) -> None:
        other = self.leaders.get(term)
        if other is not None and other != node_id:
            self.fail(f"election safety: {other} and {node_id} both lead term {term}")
        if other is None:
            self.elections += 1
        self.leaders[term] = node_id
        # leader completeness: every entry committed in an earlier term is in the new leader's log
        for index, (eterm, body) in self.committed.items():
            if self.commit_term[index] < term:
                try:
                    mine = log.get(index)
                except Exception:
                    self.fail(f"leader completeness: {node_id} leads term {term} without committed index {index}")
                if (mine.term, mine.body) != (eterm, body):
                    self.fail(
                        f"leader completeness: {node_id} leads term {term} with ({mine.term}, {mine.body!r}) "
                        f"at {index}, committed ({eterm}, {body!r})"
                    )

    def on_commit(self, node_id: str, term: int, log: MemoryLog, old: int, new: int) -> None:
        for index in range(old + 1, new + 1):
            e = log.get(index)
            mine = (e.term, e.body)
            prior = self.committed.get(index)
            if prior is None:
                self.committed[index] = mine
                self.commit_term[index] = term
                self.commits += 1
            elif prior != mine:
                self.fail(f"state machine safety: {node_id} commits {mine} at {index}, elsewhere {prior}")
            else:
                self.commit_term[index] = min(self.commit_term[index], term)

    def check_logs(self, logs: dict[str, MemoryLog]) -> None:
        """Log matching: one (index, term) names one entry, and the same predecessor term."""
        for node_id, log in logs.items():
            prev_term = None
            for e in log._entries if isinstance(log, MemoryLog) else log.entries():  # no copies: hot
                key = (e.index, e.term)
                value = (e.body, prev_term)
                had = self.seen.setdefault(key, value)
                if had != value:
                    self.fail(f"log matching: {node_id} has {value} at {key}, another log {had}")
                prev_term = e.term
            if log.committed_index > log.end_index:
                self.fail(f"{node_id} committed {log.committed_index} past its end {log.end_index}")


class Cluster:
    def __init__(
        self,
        seed: int,
        n: int = 3,
        *,
        faults: NetworkFaults | None = None,
        rules: Rules | None = None,
        config_overrides: dict | None = None,
        elector_classes: dict | None = None,
        wire: bool = False,
        check_every: int = 25,
        on_start=None,
        store_dir: str | None = None,
    ):
        self.rng = random.Random(seed)
        self.seed = seed
        self.ids = [f"n{i}" for i in range(n)]
        self.peers = ";".join(f"{i}-127.0.0.1:{40911 + k}" for k, i in enumerate(self.ids))
        self.faults = faults or NetworkFaults()
        self.rules = rules or Rules()
        self.overrides = config_overrides or {}
        self.elector_classes = elector_classes or {}
        self.on_start = on_start  # called with every (re)started DLedgerNode: plants bugs in tests
        self.wire = wire  # pass every message through its JSON bytes
        self.now = 0.0
        self.events: list = []
        self.seq = 0
        # store_dir: each node's log is a rmqha.broker.dledger.file_store.FileStore there (small files, so
        # they roll over); a crash drops the process's file handles, and a restart reopens and recovers
        # the store and reads term/vote back from its currterm file
        self.store_dir = store_dir
        self.boxes = {i: Box(i, self._open_store(i) if store_dir else MemoryLog()) for i in self.ids}
        self.blocked: set[tuple[str, str]] = set()  # (from, to) pairs that drop everything
        self.checker = Checker()
        self.inflight: dict[int, tuple] = {}  # send id -> (sender, incarnation, request, answered)
        self.acked: dict[int, tuple] = {}  # client appends acknowledged SUCCESS: index -> (term, body)
        self.appended = 0
        self.check_every = check_every
        self.max_tick = 1000.0  # ticks come when a node says it has work, at least this often
        self.steps = 0
        for i in self.ids:
            self.start(i)

    # --- nodes -----------------------------------------------------------------------------------
    def config(self, node_id: str) -> DLedgerConfig:
        c = DLedgerConfig(group="g", selfId=node_id, peers=self.peers)
        for k, v in self.overrides.items():
            setattr(c, k, v)
        return c

    def _open_store(self, node_id: str) -> FileStore:
        return FileStore(self.store_dir, node_id, data_file_size=4096, index_file_size=32 * 64)

    def start(self, node_id: str) -> None:
        box = self.boxes[node_id]
        if self.store_dir and box.incarnation:
            box.term, box.vote_for = box.log.load_term()
        box.incarnation += 1
        cls = self.elector_classes.get(node_id)
        kwargs = {"elector_class": cls} if cls else {}
        box.node = DLedgerNode(
            self.config(node_id),
            box.log,
            rng=random.Random(self.rng.random()),
            term=box.term,
            vote_for=box.vote_for,
            rules=self.rules,
            **kwargs,
        )
        if self.on_start is not None:
            self.on_start(box.node)
        box.next_tick = self.now
        self.schedule(self.now, "tick", (node_id, box.incarnation))

    def crash(self, node_id: str) -> None:
        box = self.boxes[node_id]
        box.node = None
        box.log.committed_index = min(box.log.committed_index, box.log.end_index)
        if self.store_dir:  # reopened (and recovered) at once: nothing writes until the restart
            box.log.release()
            box.log = self._open_store(node_id)

    def alive(self) -> list[str]:
        return [i for i in self.ids if self.boxes[i].node is not None]

    def leader(self) -> str | None:
        leaders = [i for i in self.alive() if self.boxes[i].node.role == LEADER]
        if not leaders:
            return None
        return max(leaders, key=lambda i: self.boxes[i].node.term)

    # --- events ----------------------------------------------------------------------------------
    def schedule(self, at: float, kind: str, payload) -> None:
        self.seq += 1
        heapq.heappush(self.events, (at, self.seq, kind, payload))

    def _apply(self, node_id: str, effects: list) -> None:
        box = self.boxes[node_id]
        node = box.node
        if node is not None:  # an input may bring the node's next deadline forward
            due = max(node.next_deadline(self.now), self.now + 1)  # 1 ms: Java's loops wait 1-10 ms
            if due < box.next_tick:
                box.next_tick = due
                self.schedule(due, "tick", (node_id, box.incarnation))
        for eff in effects:
            if isinstance(eff, PersistTerm):
                box.term, box.vote_for = eff.term, eff.vote_for
                if self.store_dir:
                    box.log.persist_term(eff.term, eff.vote_for)
                box.persists += 1
            elif isinstance(eff, Send):
                self._send(node_id, box.incarnation, eff.peer, eff.request)
            elif isinstance(eff, Reply):
                self._reply(node_id, eff.to, eff.response)
            elif isinstance(eff, RoleChanged):
                if eff.role == LEADER:
                    self.checker.on_leader(node_id, eff.term, box.log)
            elif isinstance(eff, Committed):
                self.checker.on_commit(node_id, node.term, box.log, eff.old, eff.new)
            elif isinstance(eff, AppendDone):
                if eff.response.code == ResponseCode.SUCCESS:
                    e = box.log.get(eff.response.index)
                    self.acked[e.index] = (e.term, e.body)
                    self.checker.on_commit(node_id, node.term, box.log, eff.response.index - 1, eff.response.index)

    def _link_ok(self, src: str, dst: str) -> bool:
        return (src, dst) not in self.blocked

    def _delay(self) -> float:
        f = self.faults
        if f.slow and self.rng.random() < f.slow:
            return self.rng.uniform(f.max_delay, f.slow_delay)
        return self.rng.uniform(f.min_delay, f.max_delay)

    def _send(self, src: str, incarnation: int, dst: str, request) -> None:
        self.seq += 1
        send_id = self.seq
        self.inflight[send_id] = [src, incarnation, request, False]
        copies = 1
        if self.faults.duplicate and self.rng.random() < self.faults.duplicate:
            copies = 2
        for _ in range(copies):
            if self.faults.drop and self.rng.random() < self.faults.drop:
                continue
            self.schedule(self.now + self._delay(), "request", (send_id, src, dst, request))
        # the remoting layer's 3 s timeout: a made-up NETWORK_ERROR answer if none came
        self.schedule(self.now + 3000, "timeout", send_id)

    def _reply(self, node_id: str, to, response) -> None:
        send_id = getattr(to, "_sim_send_id", None)
        if send_id is None:
            return  # an answer to a request that did not come over the network
        if self.faults.drop and self.rng.random() < self.faults.drop:
            return
        if self.wire:
            response = decode_response(request_code(to), response.to_json_bytes())
        self.schedule(self.now + self._delay(), "response", (send_id, node_id, response))

    def step(self) -> bool:
        if not self.events:
            return False
        at, _seq, kind, payload = heapq.heappop(self.events)
        self.now = max(self.now, at)
        if kind == "tick":
            node_id, inc = payload
            box = self.boxes[node_id]
            if box.node is None or box.incarnation != inc or at != box.next_tick:
                return True
            box.next_tick = float("inf")
            self._apply(node_id, box.node.tick(self.now))
            nxt = max(min(box.node.next_deadline(self.now), self.now + self.max_tick), self.now + 1)
            if nxt < box.next_tick:
                box.next_tick = nxt
                self.schedule(nxt, "tick", payload)
        elif kind == "request":
            send_id, src, dst, request = payload
            box = self.boxes[dst]
            if box.node is None or not self._link_ok(src, dst):
                return True
            if self.wire:
                copy = decode_request(request_code(request), request.to_json_bytes())
            else:
                copy = _shallow(request)
            copy._sim_send_id = send_id
            self._apply(dst, box.node.handle_request(copy, self.now))
        elif kind == "response":
            send_id, responder, response = payload
            self._deliver_response(send_id, responder, response)
        elif kind == "timeout":
            entry = self.inflight.get(send_id := payload)
            if entry is not None and not entry[3]:
                src, inc, request, _ = entry
                box = self.boxes[src]
                entry[3] = True
                if box.node is not None and box.incarnation == inc:
                    self._apply(
                        src,
                        box.node.on_response(_peer_of(request), request, DLedgerNode.network_error(request), self.now),
                    )
            self.inflight.pop(payload, None)
        elif kind == "call":
            payload()
        self.steps += 1
        if self.steps % self.check_every == 0:
            self.check()
        return True

    def _deliver_response(self, send_id, responder, response) -> None:
        entry = self.inflight.get(send_id)
        if entry is None or entry[3]:
            return  # answered already (a duplicate), or timed out
        src, inc, request, _ = entry
        box = self.boxes[src]
        if box.node is None or box.incarnation != inc or not self._link_ok(responder, src):
            return
        entry[3] = True
        self._apply(src, box.node.on_response(responder, request, response, self.now))

    def run_until(self, t: float) -> None:
        while self.events and self.events[0][0] <= t:
            self.step()
        self.now = max(self.now, t)

    def at(self, t: float, fn) -> None:
        self.schedule(t, "call", fn)

    # --- clients ---------------------------------------------------------------------------------
    def client_append(self, node_id: str | None = None) -> None:
        """Append a fresh body at `node_id`, or at whichever node is leader (else a random live one)."""
        alive = self.alive()
        if not alive:
            return
        target = node_id or self.leader() or self.rng.choice(alive)
        if self.boxes[target].node is None:
            return
        self.appended += 1
        body = f"s{self.seed}-m{self.appended}".encode()
        self._apply(target, self.boxes[target].node.append(body, self.appended, self.now))

    # --- faults ----------------------------------------------------------------------------------
    def partition(self, *groups) -> None:
        self.blocked = set()
        for g in groups:
            for a in self.ids:
                for b in self.ids:
                    if a != b and (a in g) != (b in g):
                        self.blocked.add((a, b))

    def heal(self) -> None:
        self.blocked = set()

    def check(self) -> None:
        self.checker.check_logs({i: b.log for i, b in self.boxes.items()})


def _shallow(request):
    copy = object.__new__(type(request))
    copy.__dict__.update(request.__dict__)
    return copy


def _peer_of(request) -> str:
    return request.remoteId


TIMERS = (
    "heartBeatTimeIntervalMs",
    "minVoteIntervalMs",
    "maxVoteIntervalMs",
    "maxWaitAckTimeMs",
    "maxPushTimeOutMs",
    "minTakeLeadershipVoteIntervalMs",
    "maxTakeLeadershipVoteIntervalMs",
    "leadershipTransferWaitTimeout",
    "rpcTimeoutMs",
    "voteWaitBaseMs",
    "commitPushIntervalMs",
    "leakCheckIntervalMs",
    "pushFutureTimeoutMs",
    "errorBackoffMs",
)


def scaled_timers(scale: float) -> dict:
    """DLedger's default timers times `scale` (1.0: the defaults)."""
    if scale == 1.0:
        return {}
    base = DLedgerConfig()
    return {name: max(1, int(getattr(base, name) * scale)) for name in TIMERS}


RANDOM: Any = object()  # random_schedule's default preferred leader: drawn per seed


def random_schedule(
    seed: int,
    n: int = 3,
    *,
    duration: float = 10000.0,
    rules: Rules | None = None,
    elector_classes: dict | None = None,
    wire: bool = False,
    on_start=None,
    store_dir: str | None = None,
    preferred: str | None = RANDOM,
) -> Cluster:
    """One seeded chaotic schedule: lossy, reordering network; partitions; crashes and restarts; appends.
    preferred: preferredLeaderIds for every node (by default drawn per seed: none in about half of them,
    from an rng of its own so that those schedules stay what they were)."""
    rng = random.Random(seed * 7919 + n)
    if preferred is RANDOM:
        preferred = random.Random(seed * 104_729 + n).choice([None, None, "n1", f"n0;n{n - 1}"])
    faults = NetworkFaults(
        drop=rng.choice([0.0, 0.05, 0.2]),
        duplicate=rng.choice([0.0, 0.1]),
        max_delay=rng.choice([10.0, 100.0, 400.0]),
        slow=rng.choice([0.0, 0.02]),
    )
    scale = rng.choice([1.0, 0.15, 0.15])  # 0.15: every DLedger timer scaled down, many more elections
    c = Cluster(
        seed,
        n,
        faults=faults,
        rules=rules,
        elector_classes=elector_classes,
        wire=wire,
        config_overrides={**scaled_timers(scale), **({"preferredLeaderIds": preferred} if preferred else {})},
        on_start=on_start,
        store_dir=store_dir,
    )
    t = 0.0
    while True:
        t += rng.uniform(50, 600)
        if t >= duration:
            break
        r = rng.random()
        if r < 0.55:
            c.at(t, c.client_append)
        elif r < 0.70:
            victim = rng.choice(c.ids)

            def crash(v=victim):
                if c.boxes[v].node is not None and len(c.alive()) > 1:
                    c.crash(v)

            c.at(t, crash)
            back = t + rng.uniform(100, 3000)

            def restart(v=victim):
                if c.boxes[v].node is None:
                    c.start(v)

            c.at(back, restart)
        elif r < 0.82:
            ids = list(c.ids)
            rng.shuffle(ids)
            cut = rng.randrange(1, n)
            c.at(t, lambda a=ids[:cut], b=ids[cut:]: c.partition(a, b))
            c.at(t + rng.uniform(200, 4000), c.heal)
        elif r < 0.88:
            # leadership transfer to a random peer, asked of whoever leads
            def transfer():
                leader = c.leader()
                if leader is None:
                    return
                node = c.boxes[leader].node
                others = [i for i in c.ids if i != leader]
                req = LeadershipTransferRequest(
                    group="g",
                    remoteId=leader,
                    localId="admin",
                    term=node.term,
                    transferId=leader,
                    transfereeId=rng.choice(others),
                )
                c._apply(leader, node.handle_request(req, c.now))

            c.at(t, transfer)
    c.run_until(duration)
    c.check()
    return c
