"""The broker's periodic services keep running when a run fails, and show their health (rmqha.broker.support.supervision)."""

import json

from twisted.internet import defer
from twisted.internet.testing import MemoryReactorClock

from rmqha.broker.namesrv.register_body import TopicConfig
from rmqha.broker.managers import consumer_offsets
from rmqha.broker.managers.topics import TopicConfigManager
from rmqha.broker.managers.registration import BrokerRegistration
from rmqha.broker.observability.metrics import Registry

from .harness import TOPIC, Broker, FakeContext, make_config
from .test_clients import heartbeat
from .test_offsets_topics import update_offset
from .test_registration_sync import FakeClient, ok


def failures(reg, name):
    return reg.metrics["rocketmq_service_failures_total"].get(service=name)


def test_status_and_metrics_show_every_periodic_service(tmp_path):
    m = Broker(tmp_path / "m")
    s = Broker(tmp_path / "s", brokerRole="SLAVE")
    try:
        assert set(m.server.status()["services"]) == {
            "clean_files",
            "client_scan",
            "commitlog_flush",
            "consumer_offsets_flush",
            "delay_offset_flush",
            "ha_master",
            "stats",
            "transaction_check",
        }
        assert set(s.server.status()["services"]) == {
            "clean_files",
            "client_scan",
            "commitlog_flush",
            "consumer_offsets_flush",
            "ha_client",
            "slave_sync",
            "stats",
        }
        health = m.server.status()["services"]["client_scan"]
        assert health["running"] and health["consecutiveFailures"] == 0 and health["lastError"] is None
        json.dumps(m.server.status())
        text = m.server.controller.metrics.render()
        assert 'rocketmq_service_up{service="ha_master"} 1' in text
        assert "# TYPE rocketmq_service_failures_total counter" in text
    finally:
        m.stop()
        s.stop()


def test_client_scan_goes_on_after_a_failure(tmp_path):
    b = Broker(tmp_path / "a")
    try:
        clients = b.server.clients
        c1, c2 = FakeContext("127.0.0.1:1"), FakeContext("127.0.0.1:2")
        b.call(heartbeat("c1"), c1)
        b.call(heartbeat("c2"), c2)
        real, raised = clients.channel_closed, []

        def flaky(ctx):
            if not raised:
                raised.append(ctx)
                raise RuntimeError("a bug in the cleanup")
            return real(ctx)

        clients.channel_closed = flaky
        b.clock.pump([10] * 13)  # t=130: both silent for more than 120 s; the first one's cleanup fails
        assert raised and (c1.closed != c2.closed)  # ... and the other one was still closed
        b.clock.pump([10])  # restarted after one interval: the one left is closed now
        assert c1.closed and c2.closed
        reg = b.server.controller.metrics
        assert failures(reg, "client_scan") == 1
        assert b.server.status()["services"]["client_scan"]["lastError"] == "RuntimeError: a bug in the cleanup"
    finally:
        b.stop()


def test_consumer_offsets_flush_failure_is_counted_and_retried(tmp_path, monkeypatch):
    b = Broker(tmp_path / "a")
    try:
        real, raised = consumer_offsets.atomic_write, []

        def flaky(path, data):
            if not raised:
                raised.append(path)
                raise OSError(28, "No space left on device")
            return real(path, data)

        monkeypatch.setattr(consumer_offsets, "atomic_write", flaky)
        b.call(update_offset("G", TOPIC, 0, 7))
        path = tmp_path / "a" / "config" / "consumerOffset.json"
        b.clock.advance(5.1)
        assert raised and not path.exists() and b.server.offsets.dirty
        health = b.server.status()["services"]["consumer_offsets_flush"]
        assert health["consecutiveFailures"] == 1 and "No space left" in health["lastError"]
        assert failures(b.server.controller.metrics, "consumer_offsets_flush") == 1
        b.clock.advance(5)
        assert json.loads(path.read_text())["offsetTable"][f"{TOPIC}@G"] == {"0": 7}
        assert b.server.status()["services"]["consumer_offsets_flush"]["consecutiveFailures"] == 0
    finally:
        b.stop()


def test_registration_reply_handling_error_is_counted_and_registration_goes_on(tmp_path):
    clock = MemoryReactorClock()
    cfg = make_config(tmp_path, namesrvAddr="127.0.0.1:1", brokerRole="SLAVE", registerNameServerPeriod=10000)

    class BrokenSync:
        def set_master_address(self, addr):
            raise RuntimeError("cannot follow the new master")

    def reply(addr, cmd):
        return cmd.make_response(ext_fields={"masterAddr": "127.0.0.1:10911", "haServerAddr": ""})

    client = FakeClient(reply)
    reg = Registry()
    r = BrokerRegistration(
        cfg, TopicConfigManager(cfg, clock), clock, clock, slave_sync=BrokenSync(), client=client, metrics=reg
    )
    r.start()
    assert failures(reg, "registration") == 1
    clock.pump([10])
    assert len(client.calls) == 2 and r.registrations == 2  # retried after the back-off, and it registered
    r.stop()


def test_registration_never_overlaps_and_a_change_during_one_registers_again(tmp_path):
    clock = MemoryReactorClock()
    cfg = make_config(tmp_path, namesrvAddr="127.0.0.1:1", registerNameServerPeriod=10000)
    topics = TopicConfigManager(cfg, clock)
    pending = []

    class SlowClient(FakeClient):
        def invoke(self, addr, cmd, timeout=3.0):
            self.calls.append((addr, cmd))
            d = defer.Deferred()
            pending.append((d, cmd))
            return d

    client = SlowClient(ok)
    reg = BrokerRegistration(cfg, topics, clock, clock, client=client)
    reg.start()
    topics.update(TopicConfig("New", 2, 2))
    clock.advance(0)
    assert len(client.calls) == 1  # the first registration is still in flight
    d, cmd = pending.pop()
    d.callback(cmd.make_response())
    clock.advance(0)
    assert len(client.calls) == 2 and reg.registrations == 1  # once more, now with the new topic
    d, cmd = pending.pop()
    d.callback(cmd.make_response())
    clock.advance(0)
    assert len(client.calls) == 2 and reg.registrations == 2
    reg.stop()
