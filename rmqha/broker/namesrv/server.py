"""Wires the name server together: processors, listening port, and the expiry scan."""

from __future__ import annotations

import logging

from twisted.internet.interfaces import IReactorTime

from rmqha.broker.namesrv import guard
from rmqha.broker.namesrv.kv_config import KVConfigManager
from rmqha.broker.namesrv.namesrv_config import NamesrvSettings
from rmqha.broker.namesrv.processors import NameServerProcessors
from rmqha.broker.namesrv.route_info import BROKER_CHANNEL_EXPIRED_MS, RouteInfoManager
from rmqha.broker.remoting.protocol import RemotingServerFactory
from rmqha.broker.support.supervision import PeriodicService

log = logging.getLogger(__name__)

SCAN_INTERVAL_SECONDS = 10.0


class NameServer:
    def __init__(
        self,
        reactor,
        clock: IReactorTime | None = None,
        scan_interval: float = SCAN_INTERVAL_SECONDS,
        expiry_ms: int = BROKER_CHANNEL_EXPIRED_MS,
        *,
        cluster_secret: str | None = None,
        max_brokers: int = guard.MAX_BROKERS,
        max_topics_per_broker: int = guard.MAX_TOPICS_PER_BROKER,
        max_topic_routes: int = guard.MAX_TOPIC_ROUTES,
        signed_window_s: float = guard.SIGNED_WINDOW_S,
        signed_audience: str | None = None,
    ):
        self.reactor = reactor
        self.clock = clock if clock is not None else reactor
        self.routes = RouteInfoManager(expiry_ms, max_brokers=max_brokers, max_topic_routes=max_topic_routes)
        self.kv = KVConfigManager()
        self.settings = NamesrvSettings()
        self.processors = NameServerProcessors(
            self.routes,
            self.kv,
            self.clock,
            cluster_secret=cluster_secret,
            max_topics_per_broker=max_topics_per_broker,
            settings=self.settings,
            on_settings_changed=self.apply_settings,
            signed_window_s=signed_window_s,
            signed_audience=signed_audience,
        )  # None: drawn now (tests fix it)
        # Java's name server uses the same NettyServerConfig as the broker: idle channels close
        # after 120 s (brokers register every 30 s, clients poll routes every 30 s).
        idle = float(self.settings.get("serverChannelMaxIdleTimeSeconds"))
        self.factory = RemotingServerFactory(
            self.processors.registry(),
            clock=self.clock,
            idle_timeout=idle,
            max_connections=4096,
            max_held_bytes=128 * 1024 * 1024,
        )
        self.factory.add_close_listener(self.processors.channel_closed)
        self.scan_interval = scan_interval
        # Supervised: a scan that raises is logged (one traceback, then a line a minute) and scanning
        # resumes after a back-off; its health is self._scan.health().
        self._scan = PeriodicService("namesrv_broker_scan", self._scan_once, scan_interval, self.clock, logger=log)
        self.port = None

    def apply_settings(self, changed: dict) -> None:
        """What an UPDATE_NAMESRV_CONFIG changes beyond the settings table (orderMessageEnable is read
        per request)."""
        if "serverChannelMaxIdleTimeSeconds" in changed:  # connections opened from now on
            self.factory.idle_timeout = float(changed["serverChannelMaxIdleTimeSeconds"])

    def _scan_once(self) -> None:
        self.processors.scan_not_active_brokers()

    def start_scanning(self) -> None:
        self._scan.start()

    def listen(self, port: int, host: str = "0.0.0.0"):
        """Start listening and scanning; returns the IListeningPort (port 0 picks a free one)."""
        self.port = self.reactor.listenTCP(port, self.factory, interface=host)
        self.start_scanning()
        addr = self.port.getHost()
        self.settings.values["listenPort"] = addr.port
        log.info("The Name Server boot success. listening on %s:%d, serializeType=JSON", addr.host, addr.port)
        return self.port

    def stop(self):
        self._scan.stop()
        for ctx in list(self.factory.connections):
            ctx.close()
        if self.port is not None:
            port, self.port = self.port, None
            return port.stopListening()
        return None
