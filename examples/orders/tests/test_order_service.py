"""The order service against a real HA cluster, through the rmqkit pytest plugin's fixtures only.

The cluster (2m-2s-sync on docker unless --rocketmq-backend says otherwise) is shared by every test of
the session that asks for the same topology; each test uses its own consumer group.
"""

import pytest

from orders import OrderProcessor, OrderPublisher


def start_services(cluster, history, group):
    cluster.create_topic("Orders")
    processor = OrderProcessor(cluster.namesrv_addr, group=group, consumer_cls=history.PushConsumer).start()
    publisher = OrderPublisher(cluster.namesrv_addr, producer_cls=history.Producer).start()
    return publisher, processor


def test_an_order_is_published_and_processed_once(rocketmq_cluster, rocketmq_history):
    publisher, processor = start_services(rocketmq_cluster, rocketmq_history, "OrdersOnce")
    ids = [f"once-{i}" for i in range(10)]
    assert [publisher.place(i, 5) for i in ids] == ["SEND_OK"] * 10
    assert processor.wait_for(ids, timeout=60) == set()
    assert sum(processor.totals[i] for i in ids) == 50
    sends = [r for r in rocketmq_history.records() if r["op"] == "send"]
    assert {r["send_id"] for r in sends} == set(ids)  # the recorder used the order ids as send ids


@pytest.mark.rocketmq(audit=True)
def test_orders_survive_a_slave_crash(rocketmq_cluster, rocketmq_faults, rocketmq_history):
    """A SYNC_MASTER's slave killed mid-stream: every confirmed order is processed, and the audit (at
    teardown) finds no acknowledged message lost and replicas identical once the slave is back."""
    publisher, processor = start_services(rocketmq_cluster, rocketmq_history, "OrdersCrash")
    ids = [f"crash-{i}" for i in range(30)]
    statuses = [publisher.place(i, 1) for i in ids[:10]]
    crash = rocketmq_faults.inject("kill-slave", "broker-a-s")
    statuses += [publisher.place(i, 1) for i in ids[10:20]]
    rocketmq_faults.heal(crash)
    statuses += [publisher.place(i, 1) for i in ids[20:]]
    confirmed = [i for i, s in zip(ids, statuses) if s == "SEND_OK"]
    assert len(confirmed) >= 20, statuses
    assert processor.wait_for(confirmed, timeout=90) == set()


@pytest.mark.rocketmq(acl=True)
def test_orders_on_a_cluster_with_acl(rocketmq_cluster, rocketmq_history):
    """aclEnable on every broker (the kit writes plain_acl.yml): the recorder's clients sign with the
    cluster's account, so the service works unchanged; a client without credentials is refused."""
    from rocketmq.client import Message, Producer
    from rocketmq.exceptions import RocketMQException

    assert rocketmq_cluster.credentials["accessKey"] == "rmqha-admin"
    publisher, processor = start_services(rocketmq_cluster, rocketmq_history, "OrdersAcl")
    ids = [f"acl-{i}" for i in range(5)]
    assert [publisher.place(i, 2) for i in ids] == ["SEND_OK"] * 5
    assert processor.wait_for(ids, timeout=60) == set()
    stranger = Producer("StrangerPG", timeout=3000)
    stranger.set_namesrv_addr(rocketmq_cluster.namesrv_addr)
    stranger.start()
    try:
        msg = Message("Orders")
        msg.set_body("unsigned")
        with pytest.raises(RocketMQException):  # refused: the send fails in the client
            stranger.send_sync(msg)
    finally:
        stranger.shutdown()
