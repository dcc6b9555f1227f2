"""The kit in users' hands: an HA RocketMQ cluster, its faults, client histories and the audit.

    from rmqha.rmqkit import RocketMQCluster
    with RocketMQCluster("2m-2s-sync") as c:            # docker (default) or backend="local"
        producer.set_namesrv_addr(c.namesrv_addr)
        c.faults.inject("kill-master", "broker-a")      # a kind of rmqha/runs/faults.py, logged
        c.faults.heal_all()
        result = c.audit()                              # the Spark audit of the run folder
    with RocketMQCluster("dledger", backend="local") as c:   # one DLedger group of three nodes
        c.faults.inject("kill-leader")                  # whoever leads when it is injected

pytest users get the same as fixtures (rmqha/rmqkit/pytest_plugin.py, registered as a pytest11 entry point):
`rocketmq_cluster`, `rocketmq_faults`, `rocketmq_history` and the marker
`@pytest.mark.rocketmq(topology=..., backend=..., scope="module"|"session", sets={...}, audit=True)`.

Modules: cluster (RocketMQCluster, per-worker names and ports, leftover sweep), faults (inject/heal
through the cluster handle), history (the official client, recorded), audit (the pipeline as a
subprocess), pytest_plugin.
"""

from __future__ import annotations

from rmqha.cluster import ClusterError as KitError

__all__ = ["RocketMQCluster", "KitError", "AuditFailed", "AuditResult"]


def __getattr__(name):  # keep `import rmqkit` (and pytest's plugin loading) cheap
    if name == "RocketMQCluster":
        from .cluster import RocketMQCluster

        return RocketMQCluster
    if name in ("AuditFailed", "AuditResult"):
        from . import audit

        return getattr(audit, name)
    raise AttributeError(name)
