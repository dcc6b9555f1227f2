"""Faults on a running cluster, by name from the fault vocabulary (rmqha/runs/faults.py), each written to the fault log.

    f = Faults(cluster_handle, run_dir / "faults" / "kit-1.jsonl")
    fault = f.inject("latency", "broker-a-s", ms=3000)  # the HA link of broker-a-s slowed (docker)
    f.heal(fault)
    f.inject("kill-master")                              # target: the first master the kind can hit
    f.inject("kill-leader")                              # topology dledger: the leader when injected
    errors = f.heal_all()                                # [] when everything came back

Every inject and heal goes through the cluster handle (rmqha.chaos.nemesis.Nemesis) and is one line of
RUN/faults/*.jsonl, so the audit attributes non-OK sends and losses to it. heal_all() also undoes what
a test did to the handle directly (a killed, stopped or paused node, a toxic, a partition) and returns
the errors of anything that did not come back: the pytest plugin fails the test on them.
"""

from __future__ import annotations

from pathlib import Path

from rmqha.cluster import ClusterError
from rmqha.runs.faults import FAULTS


class Faults:
    def __init__(self, cluster, log_path: str | Path):
        from rmqha.runs.faultlog import FaultLog
        from rmqha.chaos.nemesis import Nemesis

        self.cluster = cluster
        self.log_path = Path(log_path)
        self._log = FaultLog(self.log_path)
        self.nemesis = Nemesis(cluster, fault_log=self._log)

    @staticmethod
    def kinds() -> list[str]:
        return list(FAULTS)

    def _target(self, kind, target: str | None) -> tuple[str, str, str]:
        """(target node, its role, its group) for a fault kind."""
        c = self.cluster
        if target is None:
            masters, slaves = c.masters(), c.slaves()
            pool = {"master": masters, "slave": slaves, "node": masters + slaves}[kind.targets]
            if not pool:
                raise ClusterError(
                    f"fault {kind.name} needs a {kind.targets}, and topology {c.state.get('topology')} has none"
                )
            target = pool[0]
        role = "slave" if c.master_of(target) else "master"
        if kind.targets in ("master", "slave") and role != kind.targets:
            raise ClusterError(f"fault {kind.name} targets a {kind.targets}; {target} is a {role}")
        return target, role, c.node(target)["brokerName"]

    def inject(self, kind: str, target: str | None = None, **params):
        """Start a fault from the table; returns the rmqha.chaos.nemesis.Fault (pass it to heal). params
        override the table's (latency: ms; cut: mode timeout|disabled; slicer: average_size, ...)."""
        import random

        from rmqha.chaos.nemesis import Fault

        k = FAULTS.get(kind)
        if k is None:
            raise ClusterError(f"unknown fault {kind!r}; known: {', '.join(FAULTS)}")
        if self.cluster.kind not in k.backends:
            raise ClusterError(
                f"fault {kind} needs the {'/'.join(k.backends)} backend; this cluster is "
                f"{self.cluster.kind} (start it with backend='docker')"
            )
        node, role, group = self._target(k, target)
        drawn = k.params(random.Random(0), self._sync_wait_ms())
        f = Fault(at=0.0, hold=0.0, kind=kind, group=group, target=node, params={**drawn, **params}, role=role)
        self.nemesis.inject(f)
        return f

    def heal(self, fault) -> None:
        self.nemesis.heal(fault)

    def _sync_wait_ms(self) -> int:
        for n in self.cluster.masters():
            w = (self.cluster.status(n) or {}).get("syncWaitMs")
            if w:
                return int(w)
        return 5000

    @property
    def active(self) -> list:
        return list(self.nemesis.active.values())

    def heal_all(self) -> list[str]:
        """Heal every active fault, reset every link, bring every node back; the errors, if any."""
        if self.cluster.state.get("stoppedAt"):
            return []
        return self.nemesis.heal_all()

    def close(self) -> None:
        self._log.close()
