"""The HA master's and slave's tickers survive a failing tick (rmqha.broker.support.supervision), on the fake clock."""

import pytest

from .harness import Cluster, put


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    yield c
    c.close()


def failures(service, name):
    return service.metrics.metrics["rocketmq_service_failures_total"].get(service=name)


def link_stayed_up(cluster):
    return (
        cluster.ha.connection_count == 1
        and cluster.client.proto is not None
        and cluster.client.reconnects.get() == 1
        and cluster.ha.housekeeping_closes.get() == 0 == cluster.client.housekeeping_closes.get()
    )


def test_master_tick_raising_once_keeps_heartbeats_going(cluster):
    put(cluster.master, 3)
    cluster.connect()
    conn = cluster.master_conn()
    real, raised = conn.tick, []

    def flaky(now):
        if not raised:
            raised.append(now)
            raise OSError(104, "Connection reset by peer")
        return real(now)

    conn.tick = flaky
    # Ten housekeeping intervals: with a dead ticker the master stops heartbeating, and the slave closes
    # the silent link after 20 s, again and again.
    cluster.advance(200)
    assert raised and link_stayed_up(cluster)
    assert cluster.reactor.seconds() - conn.session.last_write <= cluster.ha.heartbeat_s + 1
    assert failures(cluster.ha, "ha_master") == 1
    health = cluster.ha._ticker.health()
    assert health["running"] and health["consecutiveFailures"] == 0
    assert health["lastError"] == "ConnectionResetError: [Errno 104] Connection reset by peer"
    assert health["lastSuccess"] > health["lastFailure"] == raised[0]


class BrokenConnection:
    """A connection whose every tick raises (a transport that fails each write)."""

    session = None
    peer = "broken"

    def tick(self, now):
        raise OSError(32, "Broken pipe")

    def pump(self):
        pass

    def close(self):
        pass


def test_a_connection_that_always_fails_does_not_starve_the_others(cluster):
    put(cluster.master, 3)
    cluster.connect()
    broken = BrokenConnection()
    cluster.ha.connections.add(broken)
    cluster.advance(200)
    cluster.ha.connections.discard(broken)
    assert link_stayed_up(cluster)
    assert failures(cluster.ha, "ha_master") >= 150  # every run failed, and was retried within a second
    assert cluster.ha._ticker.consecutive_failures >= 150


def test_slave_tick_raising_once_keeps_reporting(cluster):
    put(cluster.master, 3)
    cluster.connect()
    proto = cluster.client.proto
    real, raised = proto.tick, []

    def flaky(now):
        if not raised:
            raised.append(now)
            raise OSError(5, "Input/output error")
        return real(now)

    proto.tick = flaky
    cluster.advance(200)  # without the slave's reports the master closes the link after 20 s
    assert raised and link_stayed_up(cluster)
    assert failures(cluster.client, "ha_client") == 1
    assert cluster.client._ticker.health()["consecutiveFailures"] == 0
