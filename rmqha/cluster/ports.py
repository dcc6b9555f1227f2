"""The one port planner: whether a port is free, and free blocks for clusters and single processes.

Every port this project picks for a process comes from here: `make cluster-up` (a cluster's 50-port
block, rmqha/cluster/topology.py's PortPlan), the integration tests' single brokers (`free_broker_port()`: a
broker uses listenPort - 2 for the VIP channel, listenPort, +1 for HA, +2 for metrics) and the
benchmarks. Ports are picked below Linux's
default ephemeral range (32768-60999), so an outgoing connection cannot take one between the check and
the process binding it. Single ports come from [12000, 20000) and cluster blocks from [20000, 32000), and
under pytest-xdist each worker owns one contiguous slice of each: a check-then-bind race between two
workers (CI saw a name server lose its port to another worker's cluster) cannot happen by construction.
"""

from __future__ import annotations

import os
import socket

LOW, HIGH = 12000, 20000  # single ports and small blocks
CLUSTER_LOW, CLUSTER_HIGH = 20000, 32000  # 50-port cluster blocks
_next = [0]


def xdist_worker() -> tuple[int, int]:
    """(this pytest-xdist worker's index, the number of workers); (0, 1) outside xdist."""
    w = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (w[2:].isdigit() and count.isdigit() and int(count) > 0):
        return 0, 1
    return int(w[2:]) % int(count), int(count)


def worker_slice(low: int, high: int, align: int = 1) -> tuple[int, int]:
    """This xdist worker's own contiguous part of [low, high), its ends multiples of `align` from low."""
    index, count = xdist_worker()
    units = (high - low) // align
    per = units // count
    if per == 0:
        raise RuntimeError(f"ports {low}-{high} cannot be split between {count} test workers")
    return low + index * per * align, low + (index + 1) * per * align


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
    """The first of `count` consecutive free ports in this worker's slice of [low, high), walking on from
    the last block given."""
    low, high = worker_slice(low, high)
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


def free_cluster_base(
    topology,
    *,
    low: int = CLUSTER_LOW,
    high: int = CLUSTER_HIGH,
    stride: int = 100,
    slot: int = 0,
    slots: int = 1,
    extra_offsets: tuple[int, ...] = (),
    exclude: int | None = None,
) -> int | None:
    """A cluster base port whose whole block (and base+offset for each extra offset) is free.

    Under pytest-xdist the search stays in this worker's slice of [low, high); slot/slots interleave
    the candidates between parallel users inside one process (the chaos matrix's lanes)."""
    from .topology import CLUSTER_PORT_SPAN, PortPlan

    # the worker's slice of the fixed cluster range, whatever low/high a caller passes, so two callers
    # with different bounds in two workers cannot meet; and every port of the block (the VIP channel
    # is base - 2) inside it, so a block never reaches into the single-port range or a neighbour's slice
    w_low, w_high = worker_slice(CLUSTER_LOW, CLUSTER_HIGH, stride)
    low, high = max(low, w_low), min(high, w_high)
    for k in range(max(0, high - low) // stride):
        base = low + stride * (k * slots + slot)
        if base - 2 + CLUSTER_PORT_SPAN > high:
            break
        if base == exclude:
            continue
        ports = [p for _, _, p in PortPlan.make(base).all_ports(topology)] + [base + o for o in extra_offsets]
        if min(ports) < low or max(ports) >= high:
            continue
        if not any(port_in_use(p) for p in ports):
            return base
    return None
