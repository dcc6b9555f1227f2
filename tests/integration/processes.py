"""Name server and broker processes for one test or module (rmqha/cluster/standalone.py), always stopped.

    with broker_on_namesrv(tmp, "broker-a", extra={...}) as (ns, broker): ...
    with master_and_slave(tmp, "broker-d", role="SYNC_MASTER", wait_connected=True) as (ns, master, slave): ...
    with two_async_groups(tmp) as (ns, nodes): ...      # nodes: broker-a, broker-a-s, broker-b, broker-b-s

(SYNC_MASTER groups with slaves, the topology most tests of the Rust client use, are
rmqha.cluster.standalone.sync_groups.)
"""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path

from rmqha.cluster.standalone import BrokerProcess, NameServerProcess
from rmqha.cluster.wait import wait_until


def unique_name(prefix: str) -> str:
    """A topic or group name no other test uses: the prefix and 8 random hex digits."""
    return f"{prefix}{uuid.uuid4().hex[:8]}"


@contextlib.contextmanager
def broker_on_namesrv(tmp: Path, broker_name: str = "broker-a", extra: dict | None = None):
    """A name server and one master (ASYNC_MASTER, no slave): yields (ns, broker)."""
    ns = NameServerProcess(tmp).start()
    broker = None
    try:
        broker = BrokerProcess(tmp, broker_name, ns.addr, extra=extra).start()
        yield ns, broker
    finally:
        if broker is not None:
            broker.stop()
        ns.stop()


@contextlib.contextmanager
def master_and_slave(
    tmp: Path,
    broker_name: str,
    *,
    role: str = "ASYNC_MASTER",
    extra: dict | None = None,
    slave_extra: dict | None = None,
    wait_connected: bool = False,
):
    """A name server, a master of this role and its slave: yields (ns, master, slave). `extra` is the
    master's settings, `slave_extra` the slave's; wait_connected waits for the slave's HA connection."""
    ns = NameServerProcess(tmp).start()
    master = slave = None
    try:
        master = BrokerProcess(tmp, broker_name, ns.addr, role=role, extra=extra).start()
        slave = BrokerProcess(tmp, broker_name, ns.addr, role="SLAVE", extra=slave_extra).start()
        if wait_connected:
            wait_until(
                lambda: master.status()["ha"]["connectionCount"] == 1,
                20,
                "slave connected to the master's HA port",
                on_timeout=master.log_tail,
            )
        yield ns, master, slave
    finally:
        for p in (slave, master):
            if p is not None:
                p.stop()
        ns.stop()


@contextlib.contextmanager
def two_async_groups(tmp: Path):
    """A name server, broker-a and broker-b (ASYNC_MASTER) each with a slave: yields (ns, nodes) with
    nodes keyed "broker-a", "broker-a-s", "broker-b", "broker-b-s"."""
    ns = NameServerProcess(tmp).start()
    nodes: dict[str, BrokerProcess] = {}
    try:
        for name in ("broker-a", "broker-b"):
            nodes[name] = BrokerProcess(tmp, name, ns.addr).start()
            nodes[name + "-s"] = BrokerProcess(tmp, name, ns.addr, role="SLAVE").start()
        yield ns, nodes
    finally:
        for b in nodes.values():
            b.stop()
        ns.stop()
