"""Replica checks the other-broker integration tests share (Apache's 4.9, rocketmq-rust): a slave holds its
master's commit log byte for byte, and a cut HA link leaves the master without its slave."""

from __future__ import annotations

from pathlib import Path


def commitlog_bytes(store: Path, upto: int) -> bytes:
    data = b"".join(f.read_bytes() for f in sorted((store / "commitlog").iterdir()))
    return data[:upto]


def caught_up_offset(h, master: str, slave: str, timeout: float) -> int:
    """Once the cluster has caught up: the master's end of log (real offsets, from GET_BROKER_RUNTIME_INFO),
    held by its slave with the same bytes."""
    h.wait_caught_up(timeout)
    mo = h.max_offset(master)
    assert mo > 0 and h.max_offset(slave) == mo
    assert commitlog_bytes(h.store_path(master), mo) == commitlog_bytes(h.store_path(slave), mo)
    return mo


def cut_ha_link(h, slave: str, master: str):
    """The slave's HA proxy cut (a partition of the replication link), once its master sees no slave."""
    link = h.ha_link(slave)
    h.cut_link(link)
    h.wait_until(
        lambda: (h.status(master) or {}).get("ha", {}).get("connectionCount") == 0,
        60,
        f"{master} sees no slave connected",
        node=master,
    )
    return link
