"""rmqha/cluster/ports.py: each pytest-xdist worker owns its own ports, so workers never race for one."""

from __future__ import annotations

import socket

import pytest

from rmqha.cluster import ports
from rmqha.cluster.topology import PortPlan, load_topology


def as_worker(monkeypatch, index, count):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{index}")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", str(count))


@pytest.mark.parametrize("count", [1, 2, 3, 8])
def test_worker_slices_are_disjoint_and_cover_the_range(monkeypatch, count):
    slices = []
    for i in range(count):
        as_worker(monkeypatch, i, count)
        slices.append(ports.worker_slice(20000, 32000, 100))
    for (lo, hi), (nlo, _) in zip(slices, slices[1:]):
        assert lo < hi == nlo
    assert slices[0][0] == 20000 and slices[-1][1] <= 32000
    assert all((lo - 20000) % 100 == 0 and (hi - 20000) % 100 == 0 for lo, hi in slices)


def test_outside_xdist_the_whole_range_is_used(monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    assert ports.worker_slice(12000, 20000) == (12000, 20000)


def test_single_ports_and_cluster_blocks_never_overlap_between_workers(monkeypatch):
    topo = load_topology("2m-2s-async")
    taken = {}
    for i in range(3):
        as_worker(monkeypatch, i, 3)
        monkeypatch.setattr(ports, "_next", [0])
        singles = {ports.free_block(5) + k for _ in range(20) for k in range(5)}
        base = ports.free_cluster_base(topo)
        block = {p for _, _, p in PortPlan.make(base).all_ports(topo)} | {base + 48}  # + Toxiproxy's API
        for other, used in taken.items():
            assert not used & (singles | block), f"worker {i} shares ports with worker {other}"
        assert not singles & block
        taken[i] = singles | block


def test_a_held_port_is_skipped(monkeypatch):
    as_worker(monkeypatch, 1, 3)
    lo, _ = ports.worker_slice(ports.LOW, ports.HIGH)
    monkeypatch.setattr(ports, "_next", [lo])
    with socket.socket() as s:
        s.bind(("127.0.0.1", lo))
        s.listen()
        assert ports.port_in_use(lo)
        assert ports.free_block(1) != lo


def test_too_many_workers_is_a_clear_error(monkeypatch):
    as_worker(monkeypatch, 0, 500)
    with pytest.raises(RuntimeError, match="cannot be split between 500 test workers"):
        ports.worker_slice(20000, 32000, 100)


@pytest.mark.parametrize("count", [1, 2, 3])
def test_every_port_of_a_cluster_block_stays_in_its_workers_slice(monkeypatch, count):
    topo = load_topology("2m-2s-sync")
    for i in range(count):
        as_worker(monkeypatch, i, count)
        lo, hi = ports.worker_slice(ports.CLUSTER_LOW, ports.CLUSTER_HIGH, 100)
        for low in (ports.CLUSTER_LOW, 21000, 22000):  # callers pass their own bounds
            base = ports.free_cluster_base(topo, low=low)
            if base is None:
                continue
            used = [p for _, _, p in PortPlan.make(base).all_ports(topo)]
            assert lo <= min(used) and max(used) < hi, (i, low, base, min(used), max(used))
            assert min(used) >= ports.HIGH  # never in the single-port range (the VIP channel is base - 2)
