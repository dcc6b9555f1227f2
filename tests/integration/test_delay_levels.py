"""Delay levels end to end with the official client (Message.set_delay_time_level), across HA.

A master and its slave as real processes; messages at levels 1, 2 and 3 (1 s, 5 s, 10 s by default)
are received and stored again no earlier than their delay after they were sent, and the broker's own
delivery times (the delivered copies' store timestamps) keep the levels' order; no wall-clock upper bound
(load can always break one), the consume deadline is the only limit on lateness;
the slave holds the master's commit log byte for byte (the parked and the delivered copies) and a copy
of its delay offsets; with the master killed, a consumer reading the slave gets every delivered
message once.
"""

from __future__ import annotations

import json

import pytest

from rmqha.cluster.wait import wait_until

from .processes import master_and_slave, unique_name
from .test_official_client import consume, produce

pytestmark = pytest.mark.integration
pytest.importorskip("rocketmq.client")

LEVEL_DELAY_S = {1: 1.0, 2: 5.0, 3: 10.0}


def assert_delivered_in_level_order(by_body: dict, sends: list[dict]) -> None:
    """Every delayed copy the broker stored for a shorter level precedes, by the broker's own clock, every
    copy it stored for a longer one: a schedule service that ignored the delay, or served a level at
    another's time, fails; a slow machine cannot (each level's timer fires in its due order)."""
    stored = {}
    for s in sends:
        if s.get("delay"):
            stored.setdefault(s["delay"], []).append(by_body[s["body"]]["store_ms"])
    levels = sorted(stored)
    for lo, hi in zip(levels, levels[1:], strict=False):
        assert max(stored[lo]) < min(stored[hi]), ("levels delivered out of order", lo, stored[lo], hi, stored[hi])


@pytest.fixture
def pair(tmp_path):
    with master_and_slave(tmp_path, "broker-d") as pair:
        yield pair


def test_delay_levels_are_honoured_and_replicated(pair):
    ns, master, slave = pair
    topic = unique_name("Delay")
    sends = [
        {"body": f"L{level}-{i}", "keys": f"k{level}-{i}", "tags": "t", "delay": level}
        for level in (1, 2, 3)
        for i in range(3)
    ] + [{"body": "L0-0", "keys": "k0", "tags": "t"}]
    results = produce(ns.addr, [{"mode": "sync", "topic": topic, "messages": sends}])
    assert all(r["status"] == 0 for r in results), results
    got = consume(ns.addr, topic, "G-delay", expect=len(sends), deadline_s=40)
    by_body = {m["body"]: m for m in got}
    assert set(by_body) == {s["body"] for s in sends} and len(got) == len(sends), sorted(by_body)
    lateness = {}
    for s in sends:
        m = by_body[s["body"]]
        waited = (m["received_ms"] - m["born_ms"]) / 1000.0
        expected = LEVEL_DELAY_S.get(s.get("delay", 0), 0.0)
        lateness[s["body"]] = round(waited - expected, 3)
        assert waited >= expected - 0.05, (s["body"], waited, expected)
        if expected:  # delivered as a new record: its store time is the deliver time
            assert (m["store_ms"] - m["born_ms"]) / 1000.0 >= expected - 0.05
    assert_delivered_in_level_order(by_body, sends)
    print("lateness after the level's delay, s:", json.dumps(lateness))

    # The slave holds the same bytes (parked copies in SCHEDULE_TOPIC_XXXX and delivered ones) ...
    wait_until(lambda: slave.status()["maxPhyOffset"] == master.status()["maxPhyOffset"], 20, "slave caught up")
    end = master.status()["maxPhyOffset"]
    assert slave.commitlog_bytes(end) == master.commitlog_bytes(end)
    # ... and a copy of the master's delay offsets (SlaveSynchronize, every 10 s).
    master_offsets = master.store_dir / "config" / "delayOffset.json"
    slave_offsets = slave.store_dir / "config" / "delayOffset.json"
    wait_until(
        lambda: (
            master_offsets.exists()
            and json.loads(master_offsets.read_text())["offsetTable"] == {"1": 3, "2": 3, "3": 3}
        ),
        15,
        "the master wrote its delay offsets",
    )
    wait_until(
        lambda: (
            slave_offsets.exists() and json.loads(slave_offsets.read_text()) == json.loads(master_offsets.read_text())
        ),
        25,
        "the slave copied the delay offsets",
    )

    # The master dies: a consumer on the slave gets each delivered message once, nothing parked twice.
    master.kill()
    wait_until(lambda: 0 not in ns.broker_addrs("broker-d"), 30, "the name server dropped the master")
    again = consume(ns.addr, topic, "G-after-failover", expect=len(sends), deadline_s=40, linger_s=2)
    bodies = [m["body"] for m in again]
    assert sorted(bodies) == sorted(s["body"] for s in sends), bodies
