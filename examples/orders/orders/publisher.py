"""The producer service: one message per order on topic Orders, KEYS = the order id."""

from __future__ import annotations

import json
import time


def status_name(status) -> str:
    """rocketmq 0.4.4's SendStatus as RocketMQ names it: OK is SEND_OK."""
    return "SEND_OK" if status.name == "OK" else status.name


class OrderRejected(Exception):
    """The broker did not confirm the order (a non-OK status, or the client gave up)."""


class OrderPublisher:
    def __init__(
        self,
        namesrv: str,
        topic: str = "Orders",
        group: str = "OrderPublisher",
        producer_cls=None,
        attempts: int = 3,
        retry_for: float = 20.0,
    ):
        if producer_cls is None:
            from rocketmq.client import Producer as producer_cls
        self.topic = topic
        self.attempts = attempts
        self.retry_for = retry_for
        self.producer = producer_cls(group, timeout=10000)
        self.producer.set_namesrv_addr(namesrv)

    def start(self) -> "OrderPublisher":
        self.producer.start()
        return self

    def stop(self) -> None:
        self.producer.shutdown()

    def place(self, order_id: str, amount: int) -> str:
        """Publish the order; returns the broker's status name (SEND_OK, ...). A client error is tried
        again with the same order id (the processor handles each order once): at least `attempts`
        times, and for up to `retry_for` seconds, half a second apart. The 0.4.4 client reports every
        failure the same way ("No route info", after its own retries on every broker), whether the
        name server did not answer in time or each master refused the send, so a short outage of
        either is ridden out instead of rejecting the order."""
        from rocketmq.client import Message

        errors = []
        deadline = time.monotonic() + self.retry_for
        while True:
            msg = Message(self.topic)
            msg.set_keys(order_id)
            msg.set_tags("order")
            msg.set_body(json.dumps({"id": order_id, "amount": amount}))
            try:
                return status_name(self.producer.send_sync(msg).status)
            except Exception as e:  # the C++ client raises on "no route", timeouts, ...
                errors.append(e)
            if len(errors) >= self.attempts and time.monotonic() >= deadline:
                break
            time.sleep(0.5)
        raise OrderRejected(f"order {order_id} not confirmed after {len(errors)} tries: {errors[-1]}")
