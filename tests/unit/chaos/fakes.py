"""Fakes for the fault table's unit tests (test_fault_*.py): a recording cluster handle, a clock, a stop
event on that clock, and an RNG whose draws the test places.

The handle is a fake of the interface rmqha/chaos/nemesis.py uses (rmqha/cluster/handle.py's Cluster): the thing under
test is the table's logic; the real handle is exercised by the integration tests. Every operation is
recorded with its arguments bound to the real method's signature, defaults filled in, so a call that
the real handle would refuse (a wrong name, a missing or unknown argument) fails here too, and a test
reads ("start", {"node": "broker-a", "wait": True, "timeout": 60}) whether the nemesis passed the
timeout by position or by name.
"""

from __future__ import annotations

import inspect
import random

from rmqha.cluster.handle import Cluster


def topology(*groups: tuple[str, int]) -> list[dict]:
    """State nodes for groups given as (broker name, number of slaves): "<g>" the master, "<g>-s", "<g>-s2"..."""
    out = []
    for g, slaves in groups:
        out.append({"name": g, "brokerName": g, "master": None})
        out += [{"name": g + "-s" + (str(i + 1) if i else ""), "brokerName": g, "master": g} for i in range(slaves)]
    return out


TWO_BY_TWO = topology(("broker-a", 1), ("broker-b", 1))  # 2m-2s: two groups, a slave each


class Clock:
    """time.monotonic() and time.sleep() for the nemesis (patched in as the module's `time`), in seconds."""

    def __init__(self, now: float = 100.0):
        self.now = now

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class FakeStop:
    """A threading.Event on the fake clock: wait(timeout) moves the clock on by the timeout and returns
    False, unless the stop comes first (at stop_at): then the clock is at stop_at, the event is set and
    every wait returns True at once, as Event.wait does once set."""

    def __init__(self, clock: Clock, stop_at: float | None = None):
        self.clock, self.stop_at, self.set_ = clock, stop_at, False
        self.waits: list[float] = []

    def wait(self, timeout: float) -> bool:
        self.waits.append(timeout)
        if self.set_:
            return True
        end = self.clock.now + max(0.0, timeout)
        if self.stop_at is not None and self.stop_at <= end:
            self.clock.now = max(self.clock.now, self.stop_at)
            self.set_ = True
            return True
        self.clock.now = end
        return False

    def is_set(self) -> bool:
        return self.set_


class FakeHandle:
    """Records every operation the nemesis asks of the cluster handle: `calls` holds
    (name, {argument: value}) and `when` the clock's time of each. `fail` makes an operation raise: keyed
    by its name, or by (name, first argument) for one node or link. `returns` gives an operation's return
    value by name, `took` the seconds an operation takes on the clock (`when` is when it began: a restart
    of Apache 4.9.8 takes 15-47 s). Node state follows the operations: kill, stop and power_loss leave a node stopped,
    start runs it; `limited` are the nodes whose store is on a size-limited filesystem."""

    OPS = (
        "start",
        "stop",
        "kill",
        "pause",
        "resume",
        "power_loss",
        "partition",
        "heal_partition",
        "fill_disk",
        "free_disk",
        "slow_link",
        "cut_link",
        "slice_link",
        "heal_link",
        "heal_links",
        "wait_up",
    )

    # the handle's own naming and bookkeeping, not faked: the kind of backend, the nodes, the proxies' names
    kind = Cluster.kind
    nodes = Cluster.nodes
    ha_link = Cluster.ha_link
    client_link = Cluster.client_link

    def __init__(self, kind: str = "docker", state_nodes: list[dict] | None = None, clock: Clock | None = None):
        self.state = {"backend": kind, "nodes": TWO_BY_TWO if state_nodes is None else state_nodes}
        self.clock = clock
        self.calls: list[tuple[str, dict]] = []
        self.when: list[float] = []
        self.fail: dict = {}
        self.returns: dict = {}
        self.took: dict = {}
        self.stopped: set[str] = set()
        self.limited: set[str] = set()

    def _record(self, name: str, args: dict):
        self.calls.append((name, args))
        self.when.append(self.clock.now if self.clock else 0.0)
        if self.clock:
            self.clock.now += self.took.get(name, 0.0)
        first = next(iter(args.values()), None)
        err = self.fail.get((name, first), self.fail.get(name))
        if err is not None:
            raise err
        if name in ("kill", "stop", "power_loss"):
            self.stopped.add(first)
        elif name == "start":
            self.stopped.discard(first)
        return self.returns.get(name)

    def running(self, node: str) -> bool:
        return node not in self.stopped

    def disk_limited(self, node: str) -> bool:
        return node in self.limited

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def timeline(self) -> list[tuple[float, str, object]]:
        """(time, operation, its first argument) for each call."""
        return [(t, name, next(iter(args.values()), None)) for t, (name, args) in zip(self.when, self.calls)]


def _recording(name: str):
    sig = inspect.signature(getattr(Cluster, name))

    def op(self, *args, **kwargs):
        bound = sig.bind(self, *args, **kwargs)
        bound.apply_defaults()
        return self._record(name, {k: v for k, v in bound.arguments.items() if k != "self"})

    op.__name__ = name
    return op


for _name in FakeHandle.OPS:
    setattr(FakeHandle, _name, _recording(_name))
for _name in ("running", "disk_limited"):  # the queries: same signatures as the handle's
    assert inspect.signature(getattr(FakeHandle, _name)) == inspect.signature(getattr(Cluster, _name)), _name


class DrawAt(random.Random):
    """An RNG whose draws a test places. uniform(a, b) returns a + q * (b - a), q the next of `fractions`
    or `fraction` when they are used up (0: the low end of the range, 1: the high end); choice(seq) takes
    seq[i], i the next of `picks` or `pick`; random() returns `coin`. shuffle() is Random's, seeded."""

    def __init__(self, fraction: float = 0.0, fractions=(), pick: int = 0, picks=(), coin: float = 0.9):
        super().__init__(0)
        self.fraction, self.fractions = fraction, list(fractions)
        self.pick, self.picks = pick, list(picks)
        self.coin = coin

    def uniform(self, a, b):
        q = self.fractions.pop(0) if self.fractions else self.fraction
        return a + q * (b - a)

    def choice(self, seq):
        return seq[self.picks.pop(0) if self.picks else self.pick]

    def random(self):
        return self.coin
