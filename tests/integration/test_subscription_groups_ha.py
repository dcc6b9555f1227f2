"""Subscription groups and topic administration on real processes (issue 24): a group made on the master
is copied by its slave (as 4.9's SlaveSynchronize.syncSubscriptionGroupConfig), so consumeEnable=false
holds on the slave too; the slave refuses changes; a deleted topic is gone from config and queues."""

from __future__ import annotations

import json

import pytest

from rmqha.broker.remoting import object_keys
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.cluster.standalone import BrokerProcess, NameServerProcess, rpc
from rmqha.cluster.wait import wait_until

from ..unit.processors.harness import pull, send_v1

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

TOPIC = "GroupsHaTopic"


def groups_of(addr) -> dict:
    r = rpc(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    assert r.code == ResponseCode.SUCCESS
    return json.loads(r.body)["subscriptionGroupTable"]


def test_slave_copies_groups_and_refuses_changes(tmp_path):
    ns = NameServerProcess(tmp_path).start()
    master = slave = None
    try:
        master = BrokerProcess(tmp_path, "broker-grp", ns.addr, role="ASYNC_MASTER").start()
        r = rpc(
            master.addr,
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
            body=b'{"groupName":"FROZEN","consumeEnable":false}',
        )
        assert r.code == ResponseCode.SUCCESS
        req = send_v1(topic=TOPIC, body=b"one")
        assert rpc(master.addr, req.code, req.ext_fields, req.body).code == ResponseCode.SUCCESS

        slave = BrokerProcess(tmp_path, "broker-grp", ns.addr, role="SLAVE").start()
        # the first sync runs as soon as the slave learns its master's address
        wait_until(lambda: "FROZEN" in groups_of(slave.addr), 15, "the slave copies the master's groups")
        assert groups_of(slave.addr) == groups_of(master.addr)
        wait_until(
            lambda: (
                rpc(slave.addr, RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": "0"}).ext_fields.get("offset")
                == "1"
            ),
            15,
            "the slave holds the message",
        )
        p = pull(topic=TOPIC, group="FROZEN", suspend_ms=0)
        r = rpc(slave.addr, p.code, p.ext_fields)
        assert (r.code, r.remark) == (ResponseCode.NO_PERMISSION, "subscription group no permission, FROZEN")
        p = pull(topic=TOPIC, group="WARM", suspend_ms=0)
        assert rpc(slave.addr, p.code, p.ext_fields).code == ResponseCode.SUCCESS

        r = rpc(slave.addr, RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "FROZEN"})
        assert r.code == ResponseCode.SYSTEM_ERROR and r.remark.startswith("Can't modify topic or subscription")

        # topic stats over the wire, in fastjson's object-key form, then the topic deleted on the master
        r = rpc(master.addr, RequestCode.GET_TOPIC_STATS_INFO, {"topic": TOPIC})
        table = object_keys.loads(r.body)["offsetTable"]
        key = json.dumps({"brokerName": "broker-grp", "queueId": 0, "topic": TOPIC}, separators=(",", ":"))
        assert table[key]["maxOffset"] == 1 and table[key]["lastUpdateTimestamp"] > 0
        assert rpc(master.addr, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": TOPIC}).code == ResponseCode.SUCCESS
        r = rpc(master.addr, RequestCode.GET_TOPIC_STATS_INFO, {"topic": TOPIC})
        assert r.code == ResponseCode.TOPIC_NOT_EXIST
        assert not (master.store_dir / "consumequeue" / TOPIC).exists()
    finally:
        for proc in (slave, master):
            if proc is not None:
                proc.stop()
        ns.stop()
