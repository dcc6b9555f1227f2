"""The integration tests' names for cluster/standalone.py (single name servers and brokers as local
processes), plus the waiter argument order these tests use. The processes themselves live in
cluster/standalone.py, which bench/bench_send.py uses too."""
from __future__ import annotations

from pathlib import Path

from cluster.standalone import (START_DEADLINE_S, STOP_DEADLINE_S, BrokerProcess, NameServerProcess, _ProcView,
                                free_ports, metric, rpc)
from cluster.wait import wait_until as _wait_until

__all__ = ["ROOT", "START_DEADLINE_S", "STOP_DEADLINE_S", "BrokerProcess", "NameServerProcess", "_ProcView",
           "free_ports", "metric", "rpc", "wait_until"]

ROOT = Path(__file__).resolve().parents[2]


def wait_until(what: str, predicate, deadline_s: float, interval: float = 0.1, on_fail=lambda: ""):
    """cluster.wait.wait_until with this module's argument order (kept for the tests that use it)."""
    return _wait_until(predicate, deadline_s, what, interval=interval, on_timeout=on_fail)
