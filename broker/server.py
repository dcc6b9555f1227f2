"""BrokerServer: the whole broker process: the controller (store, HA, metrics) plus the client-facing
remoting server and name-server registration once those are wired in."""
from __future__ import annotations

from .controller import BrokerController


class BrokerServer:
    def __init__(self, config, reactor):
        self.config = config
        self.reactor = reactor
        self.controller = BrokerController(config, reactor)

    def start(self):
        self.controller.start()

    def stop(self):
        return self.controller.stop()
