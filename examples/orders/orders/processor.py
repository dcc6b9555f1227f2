"""The consumer service: handles each order once, however often it is delivered."""

from __future__ import annotations

import json
import threading
import time


class OrderProcessor:
    def __init__(self, namesrv: str, topic: str = "Orders", group: str = "OrderProcessor", consumer_cls=None):
        if consumer_cls is None:
            from rocketmq.client import PushConsumer as consumer_cls
        self.consumer = consumer_cls(group)
        self.consumer.set_namesrv_addr(namesrv)
        self.consumer.subscribe(topic, self._on_message)
        self.totals: dict[str, int] = {}  # order id -> amount, each order once
        self.deliveries = 0
        self._cond = threading.Condition()

    def start(self) -> "OrderProcessor":
        self.consumer.start()
        return self

    def stop(self) -> None:
        self.consumer.shutdown()

    def _on_message(self, msg) -> None:
        order = json.loads(msg.body)
        with self._cond:
            self.deliveries += 1
            self.totals.setdefault(order["id"], order["amount"])
            self._cond.notify_all()

    def wait_for(self, order_ids, timeout: float = 60.0) -> set[str]:
        """Until every order id was handled, or timeout; returns the ids still missing."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                missing = set(order_ids) - self.totals.keys()
                left = deadline - time.monotonic()
                if not missing or left <= 0:
                    return missing
                self._cond.wait(min(left, 0.5))
