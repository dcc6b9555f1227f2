"""The one port planner: whether a port is free, and free blocks for clusters and single processes.

Every port this project picks for a process comes from here: `make cluster-up` (a cluster's 50-port
block, cluster/topology.py's PortPlan), the integration tests' single brokers (`free_broker_port()`: a
broker uses listenPort - 2 for the VIP channel, listenPort, +1 for HA, +2 for metrics) and the
benchmarks. Ports are picked below Linux's
default ephemeral range (32768-60999), so an outgoing connection cannot take one between the check and
the process binding it; a per-process starting point keeps parallel test workers apart.
"""
from __future__ import annotations

import os
import socket

LOW, HIGH = 12000, 32000
_next = [LOW + (os.getpid() * 37) % (HIGH - LOW)]


def port_in_use(port: int) -> bool:
    """Whether a listener holds the port on any local address (a TIME_WAIT leftover does not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return True
    return False


def free_block(count: int = 1, low: int = LOW, high: int = HIGH) -> int:
    """The first of `count` consecutive free ports in [low, high), walking on from the last block given."""
    span = high - low
    for _ in range(2000):
        base = _next[0] if low <= _next[0] < high else low + (os.getpid() * 37) % span
        nxt = base + count + 1
        _next[0] = nxt if nxt + count < high else low
        if base + count <= high and not any(port_in_use(base + i) for i in range(count)):
            return base
    raise RuntimeError(f"no {count} consecutive free ports between {low} and {high}")


def free_broker_port() -> int:
    """A listenPort for one broker: listenPort - 2 (4.9's VIP channel) through listenPort + 2 (metrics)
    all free."""
    return free_block(5) + 2


def free_cluster_base(topology, *, low: int = 20000, high: int = 32000, stride: int = 100,
                      slot: int = 0, slots: int = 1, extra_offsets: tuple[int, ...] = (),
                      exclude: int | None = None) -> int | None:
    """A cluster base port whose whole block (and base+offset for each extra offset) is free.

    slot/slots interleave the candidates between parallel users (pytest-xdist workers: slot = worker
    index), so two workers never race for one block."""
    from .topology import CLUSTER_PORT_SPAN, PortPlan
    for k in range((high - low) // stride):
        base = low + stride * (k * slots + slot)
        if base + CLUSTER_PORT_SPAN > high:
            break
        if base == exclude:
            continue
        ports = [p for _, _, p in PortPlan.make(base).all_ports(topology)] + [base + o for o in extra_offsets]
        if not any(port_in_use(p) for p in ports):
            return base
    return None
