"""The publisher's retries, without a cluster: a producer that fails a given number of times."""

import pytest

from orders import OrderPublisher
from orders.publisher import OrderRejected


class Status:
    name = "OK"


class Result:
    status = Status()


def flaky_producer(failures: int):
    class Producer:
        tries = 0

        def __init__(self, group, timeout=None):
            pass

        def set_namesrv_addr(self, addr):
            pass

        def send_sync(self, msg):
            Producer.tries += 1
            if Producer.tries <= failures:
                raise RuntimeError("No route info of this topic: Orders")
            return Result()

    return Producer


def test_a_client_error_is_tried_again_until_the_send_is_confirmed():
    cls = flaky_producer(failures=4)  # more than `attempts`: the time allowance carries it on
    p = OrderPublisher("127.0.0.1:1", producer_cls=cls, attempts=2, retry_for=30.0)
    assert p.place("o-1", 1) == "SEND_OK" and cls.tries == 5


def test_an_order_is_rejected_after_its_attempts_once_the_time_allowance_is_spent():
    cls = flaky_producer(failures=100)
    p = OrderPublisher("127.0.0.1:1", producer_cls=cls, attempts=3, retry_for=0.0)
    with pytest.raises(OrderRejected, match="after 3 tries: No route info"):
        p.place("o-2", 1)
    assert cls.tries == 3
