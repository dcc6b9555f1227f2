"""The producer service: one message per order on topic Orders, KEYS = the order id."""

from __future__ import annotations

import json


def status_name(status) -> str:
    """rocketmq 0.4.4's SendStatus as RocketMQ names it: OK is SEND_OK."""
    return "SEND_OK" if status.name == "OK" else status.name


class OrderRejected(Exception):
    """The broker did not confirm the order (a non-OK status, or the client gave up)."""


class OrderPublisher:
    def __init__(
        self, namesrv: str, topic: str = "Orders", group: str = "OrderPublisher", producer_cls=None, attempts: int = 3
    ):
        if producer_cls is None:
            from rocketmq.client import Producer as producer_cls
        self.topic = topic
        self.attempts = attempts
        self.producer = producer_cls(group, timeout=10000)
        self.producer.set_namesrv_addr(namesrv)

    def start(self) -> "OrderPublisher":
        self.producer.start()
        return self

    def stop(self) -> None:
        self.producer.shutdown()

    def place(self, order_id: str, amount: int) -> str:
        """Publish the order; returns the broker's status name (SEND_OK, ...). A client error is tried
        again with the same order id (the processor handles each order once)."""
        from rocketmq.client import Message

        last = None
        for _ in range(self.attempts):
            msg = Message(self.topic)
            msg.set_keys(order_id)
            msg.set_tags("order")
            msg.set_body(json.dumps({"id": order_id, "amount": amount}))
            try:
                return status_name(self.producer.send_sync(msg).status)
            except Exception as e:  # the C++ client raises on "no route", timeouts, ...
                last = e
        raise OrderRejected(f"order {order_id} not confirmed: {last}")
