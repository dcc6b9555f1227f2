"""The broker's VIP channel (4.9's fastRemotingServer): listenPort - 2, the same factory as listenPort
(so the same processors, ACL, frame and connection limits), in /status, closed on stop, and a clear
start-up error when the port is taken."""

import pytest
from twisted.internet.error import CannotListenError
from twisted.internet.testing import MemoryReactorClock

from rmqha.broker.config.properties import BrokerConfig, ConfigError
from rmqha.broker.server import BrokerServer, VipChannelError

from tests.unit.processors.harness import make_config, now_thread


class Reactor(MemoryReactorClock):
    """Records which ports stopped listening; `busy` is a port another process holds."""

    def __init__(self, busy: int | None = None):
        super().__init__()
        self.busy = busy
        self.stopped: list[int] = []

    def listenTCP(self, port, factory, backlog=50, interface=""):
        if port == self.busy:
            raise CannotListenError(interface, port, OSError(98, "Address already in use"))
        fake = super().listenTCP(port, factory, backlog, interface)
        fake.stopListening = lambda: self.stopped.append(port)
        return fake


def start(tmp_path, reactor, **overrides):
    server = BrokerServer(make_config(tmp_path, **overrides), reactor, clock=reactor, run_in_thread=now_thread)
    server.start(listen=True)
    return server


@pytest.mark.parametrize("role", ["ASYNC_MASTER", "SLAVE"])
def test_both_ports_share_one_factory_and_status_shows_the_vip_port(tmp_path, role):
    reactor = Reactor()
    server = start(tmp_path, reactor, brokerRole=role)
    remoting = {port: factory for port, factory, _, _ in reactor.tcpServers if factory is server.factory}
    assert remoting == {10911: server.factory, 10909: server.factory}
    assert [i for p, f, _, i in reactor.tcpServers if p == 10909] == [""]  # every interface, as listenPort
    status = server.status()
    assert (status["listenPort"], status["fastListenPort"]) == (10911, 10909)
    server.stop()
    reactor.advance(0)
    assert server.fast_port is None and server.port is None
    assert {10911, 10909} <= set(reactor.stopped)


def test_a_taken_vip_port_is_a_start_up_error_that_names_it(tmp_path):
    reactor = Reactor(busy=10909)
    with pytest.raises(VipChannelError) as e:
        start(tmp_path, reactor)
    assert reactor.stopped == [10911]  # the main port is not left open behind the error
    assert str(e.value) == (
        "the VIP channel cannot listen on port 10909 (listenPort 10911 - 2, as 4.9's "
        "fastListenPort): [Errno 98] Address already in use; free that port or pick another "
        "listenPort"
    )
    assert isinstance(e.value, OSError)  # rmqha/broker/__main__ answers it as a port problem: exit status 3


@pytest.mark.parametrize(
    "props, why",
    [
        ({"listenPort": "2"}, "listenPort=2: must be at least 3, as the VIP channel listens on listenPort - 2"),
        ({"listenPort": "10911", "metricsPort": "10909"}, "ports must differ"),
        ({"listenPort": "10911", "haListenPort": "10909"}, "ports must differ"),
    ],
)
def test_config_refuses_a_listen_port_whose_vip_port_is_impossible_or_taken(props, why):
    with pytest.raises(ConfigError, match=why):
        BrokerConfig.from_properties({"brokerName": "b", **props})
