"""Wires the name server together: processors, listening port, and the expiry scan."""
from __future__ import annotations

import logging

from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall

from broker.namesrv.kv_config import KVConfigManager
from broker.namesrv.processors import NameServerProcessors
from broker.namesrv.route_info import BROKER_CHANNEL_EXPIRED_MS, RouteInfoManager
from broker.remoting.protocol import RemotingServerFactory

log = logging.getLogger(__name__)

SCAN_INTERVAL_SECONDS = 10.0


class NameServer:
    def __init__(self, reactor, clock: IReactorTime | None = None,
                 scan_interval: float = SCAN_INTERVAL_SECONDS, expiry_ms: int = BROKER_CHANNEL_EXPIRED_MS):
        self.reactor = reactor
        self.clock = clock if clock is not None else reactor
        self.routes = RouteInfoManager(expiry_ms)
        self.kv = KVConfigManager()
        self.processors = NameServerProcessors(self.routes, self.kv, self.clock)
        self.factory = RemotingServerFactory(self.processors.registry(), clock=self.clock)
        self.factory.add_close_listener(self.processors.channel_closed)
        self.scan_interval = scan_interval
        self._scan = LoopingCall(self._scan_once)
        self._scan.clock = self.clock
        self.port = None

    def _scan_once(self) -> None:
        try:
            self.processors.scan_not_active_brokers()
        except Exception:  # a scan bug must not stop future scans
            log.exception("scanning for inactive brokers failed")

    def start_scanning(self) -> None:
        if not self._scan.running:
            self._scan.start(self.scan_interval, now=False)

    def listen(self, port: int, host: str = "0.0.0.0"):
        """Start listening and scanning; returns the IListeningPort (port 0 picks a free one)."""
        self.port = self.reactor.listenTCP(port, self.factory, interface=host)
        self.start_scanning()
        addr = self.port.getHost()
        log.info("The Name Server boot success. listening on %s:%d, serializeType=JSON", addr.host, addr.port)
        return self.port

    def stop(self):
        if self._scan.running:
            self._scan.stop()
        for ctx in list(self.factory.connections):
            ctx.close()
        if self.port is not None:
            port, self.port = self.port, None
            return port.stopListening()
        return None
