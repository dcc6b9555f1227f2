import json

from twisted.internet import defer
from twisted.internet.testing import MemoryReactorClock

from rmqha.broker.namesrv.register_body import RegisterBrokerBody, TopicConfig, body_crc32
from rmqha.broker.managers.topics import TopicConfigManager
from rmqha.broker.managers.registration import BrokerRegistration
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.managers.slave_sync import SlaveSynchronize

from .harness import Broker, make_config, send_v1


class FakeClient:
    """RemotingClient stand-in: records requests, answers with `handler(addr, cmd)`."""

    def __init__(self, handler):
        self.handler = handler
        self.calls = []
        self.closed = False

    def invoke(self, addr, cmd, timeout=3.0):
        self.calls.append((addr, cmd))
        try:
            return defer.succeed(self.handler(addr, cmd))
        except Exception as e:
            return defer.fail(e)

    def close(self, address=None):
        self.closed = True


class FakeHAClient:
    def __init__(self):
        self.addresses = []

    def set_master_address(self, a):
        self.addresses.append(a)


def ok(addr, cmd):
    return cmd.make_response(ResponseCode.SUCCESS)


def test_registers_with_every_name_server_at_start_and_periodically(tmp_path):
    clock = MemoryReactorClock()
    cfg = make_config(tmp_path, namesrvAddr="127.0.0.1:1;127.0.0.1:2", registerNameServerPeriod=10000)
    topics = TopicConfigManager(cfg, clock)
    client = FakeClient(ok)
    reg = BrokerRegistration(cfg, topics, clock, clock, client=client)
    reg.start()
    assert [a for a, _ in client.calls] == ["127.0.0.1:1", "127.0.0.1:2"]
    addr, cmd = client.calls[0]
    assert cmd.code == RequestCode.REGISTER_BROKER
    f = cmd.ext_fields
    assert (f["brokerName"], f["brokerAddr"], f["clusterName"], f["brokerId"], f["haServerAddr"]) == (
        "broker-a",
        "127.0.0.1:10911",
        "DefaultCluster",
        "0",
        "127.0.0.1:10912",
    )
    assert f["bodyCrc32"] == str(body_crc32(cmd.body)) and f["compressed"] == "false"
    body = RegisterBrokerBody.decode(cmd.body, False)
    assert "TBW102" in body.topic_configs
    clock.advance(10)
    assert len(client.calls) == 4
    topics.update(TopicConfig("New", 2, 2))
    clock.advance(0)
    assert len(client.calls) == 6 and "New" in RegisterBrokerBody.decode(client.calls[-1][1].body, False).topic_configs
    reg.stop()
    assert [c.code for _, c in client.calls[-2:]] == [RequestCode.UNREGISTER_BROKER] * 2
    assert client.closed
    clock.advance(100)
    assert len(client.calls) == 8


def test_read_only_broker_announces_its_permission(tmp_path):
    clock = MemoryReactorClock()
    cfg = make_config(tmp_path, namesrvAddr="127.0.0.1:1", brokerPermission=4)
    reg = BrokerRegistration(cfg, TopicConfigManager(cfg, clock), clock, clock, client=FakeClient(ok))
    body = RegisterBrokerBody.decode(reg.body(), False)
    assert {t.perm for t in body.topic_configs.values()} == {4}


def test_slave_learns_its_master_from_the_reply(tmp_path):
    clock = MemoryReactorClock()
    cfg = make_config(tmp_path, namesrvAddr="127.0.0.1:1", brokerRole="SLAVE")

    def reply(addr, cmd):
        return cmd.make_response(ext_fields={"masterAddr": "127.0.0.1:10911", "haServerAddr": "127.0.0.1:10912"})

    ha = FakeHAClient()

    class Sync:
        addrs = []

        def set_master_address(self, a):
            self.addrs.append(a)

    sync = Sync()
    reg = BrokerRegistration(
        cfg, TopicConfigManager(cfg, clock), clock, clock, ha_client=ha, slave_sync=sync, client=FakeClient(reply)
    )
    reg.start()
    assert ha.addresses == ["127.0.0.1:10912"] and sync.addrs == ["127.0.0.1:10911"]
    # configured haMasterAddress wins over the name server's answer
    cfg2 = make_config(tmp_path / "2", namesrvAddr="127.0.0.1:1", brokerRole="SLAVE", haMasterAddress="10.0.0.9:10912")
    ha2 = FakeHAClient()
    BrokerRegistration(
        cfg2, TopicConfigManager(cfg2, clock), clock, clock, ha_client=ha2, client=FakeClient(reply)
    ).start()
    assert ha2.addresses == []


def test_registration_failure_is_retried_next_period(tmp_path):
    clock = MemoryReactorClock()
    cfg = make_config(tmp_path, namesrvAddr="127.0.0.1:1", registerNameServerPeriod=10000)
    fail = {"on": True}

    def handler(addr, cmd):
        if fail["on"]:
            raise ConnectionRefusedError("down")
        return cmd.make_response()

    reg = BrokerRegistration(cfg, TopicConfigManager(cfg, clock), clock, clock, client=FakeClient(handler))
    reg.start()
    assert reg.registrations == 0 and "127.0.0.1:1" in reg.last_error
    fail["on"] = False
    clock.advance(10)
    assert reg.registrations == 1 and not reg.last_error


def test_slave_copies_topics_and_offsets_from_its_master(tmp_path):
    master = Broker(tmp_path / "m")
    slave = Broker(tmp_path / "s", brokerRole="SLAVE")
    try:
        master.call(send_v1(topic="SyncT"))
        master.server.offsets.commit("G", "SyncT", 1, 5)

        def handler(addr, cmd):
            return master.call(cmd)

        client = FakeClient(handler)
        sync = SlaveSynchronize(slave.server.topics, slave.server.offsets, slave.clock, slave.clock, client=client)
        sync.start()
        sync.set_master_address("127.0.0.1:10911")  # learned from the name server: sync at once
        assert slave.server.topics.get("SyncT").read_queue_nums == 4
        assert slave.server.offsets.query("G", "SyncT", 1) == 5
        saved = json.loads((tmp_path / "s" / "config" / "consumerOffset.json").read_text())
        assert saved["offsetTable"]["SyncT@G"] == {"1": 5}
        master.server.offsets.commit("G", "SyncT", 1, 8)
        slave.clock.advance(10)
        assert slave.server.offsets.query("G", "SyncT", 1) == 8
        assert sync.syncs == 2

        def down(addr, cmd):
            raise ConnectionRefusedError("master gone")

        client.handler = down
        slave.clock.advance(10)
        assert sync.failures == 1 and slave.server.offsets.query("G", "SyncT", 1) == 8
    finally:
        master.stop()
        slave.stop()


def test_a_broker_with_no_id_yet_does_not_register(tmp_path):
    """A DLedger broker is brokerId -1 until its first role change: registering it would only be refused
    ("out of range") by the name server, every period; the role handler registers once it has a role."""
    clock = MemoryReactorClock()
    cfg = make_config(tmp_path, namesrvAddr="127.0.0.1:1", registerNameServerPeriod=10000)
    client = FakeClient(ok)
    reg = BrokerRegistration(cfg, TopicConfigManager(cfg, clock), clock, clock, client=client)
    cfg.brokerId = -1
    reg.register_all()
    clock.advance(30)
    assert client.calls == [] and reg.registrations == 0
    cfg.brokerId = 1  # the role handler gave it a role
    reg.register_all()
    assert [str(c.ext_fields["brokerId"]) for _, c in client.calls] == ["1"]
