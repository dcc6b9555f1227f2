"""A SYNC_MASTER's send outcomes as the official 5.x client (rocketmq-python-client 5.1.2) sees them
through the 5.x proxy, on a local 2m-2s-sync cluster (the 4.x client's view is rmqha/chaos/outcomes.py):

  every slave healthy          -> OK
  every slave frozen (SIGSTOP) -> SLAVE_PERSISTENCE_TIMEOUT (50402, the client's ProxyTimeoutException)
                                  after the client's 3 attempts, each one stored on a master all the same
  every slave stopped          -> HA_NOT_AVAILABLE (50002, InternalErrorException), stored all the same
  slaves back and caught up    -> OK

The 5.x client retries every failed send (max attempts 3, the proxy's settings), so a SYNC_MASTER
timeout stores the message up to three times: the test counts them."""

from __future__ import annotations

import os
import uuid

import pytest

from rmqha.cluster.handle import Cluster
from rmqha.cluster.ports import free_cluster_base
from rmqha.cluster.topology import load_topology

from . import client5

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

SLAVES = ("broker-a-s", "broker-b-s")
MASTERS = ("broker-a", "broker-b")


def _send(c, topic, body):
    [r] = client5.produce(c.proxy, topic, [{"body": body}], request_timeout=6)
    return r


def _stored(c, before):
    return {m: (c.max_offset(m) or 0) - before[m] for m in MASTERS}


def test_sync_master_outcomes_seen_by_the_5x_client():
    client5.require()
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    base = free_cluster_base(load_topology("2m-2s-sync"))
    assert base is not None
    c = Cluster.up(
        f"proxy5o-{worker}", "2m-2s-sync", "local", base_port=base, sets={"slaveTimeout": "1500"}, timeout=90
    )
    try:
        topic = f"P5o{uuid.uuid4().hex[:8]}"
        c.create_topic(topic)
        assert _send(c, topic, "ok").get("error") is None

        before = {m: c.max_offset(m) or 0 for m in MASTERS}
        for s in SLAVES:
            c.pause(s)
        try:
            r = _send(c, topic, "frozen")
        finally:
            for s in SLAVES:
                c.resume(s)
        assert r.get("code") == 50402 and "ProxyTimeoutException" in r["error"], r
        grew = _stored(c, before)
        assert sum(1 for v in grew.values() if v > 0) >= 1, grew  # stored all the same, once per attempt
        c.wait_caught_up(60, list(MASTERS))

        for s in SLAVES:
            c.stop(s)
        c.wait_until(
            lambda: all(((c.status(m) or {}).get("ha") or {}).get("connectionCount") == 0 for m in MASTERS),
            30,
            "both masters dropped their slaves' HA connections",
            node=list(MASTERS),
        )
        before = {m: c.max_offset(m) or 0 for m in MASTERS}
        r = _send(c, topic, "no-slave")
        assert r.get("code") == 50002 and "InternalErrorException" in r["error"], r
        assert any(v > 0 for v in _stored(c, before).values())

        for s in SLAVES:
            c.start(s)
        c.wait_caught_up(60, list(MASTERS))
        assert _send(c, topic, "ok-again").get("error") is None
    finally:
        c.down()
