"""Subscription groups (200, 201, 207, 352), their file, auto-creation, and consumeEnable on pulls."""

from __future__ import annotations

import json

import pytest

from rmqha.broker.managers.subscriptions import BUILT_IN_GROUPS
from rmqha.broker.remoting import json_body
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand

from .harness import TOPIC, Broker, props, pull, send_v1
from .test_hostile_requests import Wire

DEFAULTS = {
    "brokerId": 0,
    "consumeBroadcastEnable": True,
    "consumeEnable": True,
    "consumeFromMinEnable": True,
    "notifyConsumerIdsChangedEnable": True,
    "retryMaxTimes": 16,
    "retryQueueNums": 1,
    "whichBrokerWhenConsumeSlowly": 1,
}


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path / "a")
    yield b
    b.stop()


def update(broker, **cfg):
    return broker.call(
        RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=json.dumps(cfg).encode())
    )


def all_groups(broker) -> dict:
    r = broker.call(RemotingCommand.request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
    assert r.code == ResponseCode.SUCCESS
    return json_body.loads(r.body)


def heartbeat(broker, group, topic=TOPIC, model="CLUSTERING", sub_version=1):
    hb = {
        "clientID": "c1",
        "consumerDataSet": [
            {
                "groupName": group,
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": model,
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "subscriptionDataSet": [{"topic": topic, "subString": "*", "subVersion": sub_version}],
            }
        ],
    }
    return broker.call(RemotingCommand.request(RequestCode.HEART_BEAT, body=json.dumps(hb).encode()))


def test_built_in_groups_and_the_wrapper_shape(broker):
    wrapper = all_groups(broker)
    # 4.9's SubscriptionGroupWrapper, plus 5.x's forbiddenTable and stateVersion (which 4.9 ignores)
    assert sorted(wrapper) == ["dataVersion", "forbiddenTable", "subscriptionGroupTable"]
    assert sorted(wrapper["dataVersion"]) == ["counter", "stateVersion", "timestamp"]
    assert wrapper["forbiddenTable"] == {} and wrapper["dataVersion"]["stateVersion"] == 0
    table = wrapper["subscriptionGroupTable"]
    assert sorted(table) == sorted(BUILT_IN_GROUPS)
    assert table["TOOLS_CONSUMER"] == {"groupName": "TOOLS_CONSUMER", **DEFAULTS}


def test_update_persists_as_4_9_writes_it_and_survives_a_restart(tmp_path):
    b = Broker(tmp_path / "a")
    r = update(b, groupName="GA", consumeEnable=False, retryMaxTimes=3)
    assert r.code == ResponseCode.SUCCESS and r.remark is None
    counter = all_groups(b)["dataVersion"]["counter"]
    with open(tmp_path / "a" / "config" / "subscriptionGroup.json", "rb") as fh:
        on_disk = json.loads(fh.read())
    assert on_disk["subscriptionGroupTable"]["GA"] == {
        **DEFAULTS,
        "groupName": "GA",
        "consumeEnable": False,
        "retryMaxTimes": 3,
    }
    assert on_disk["dataVersion"]["counter"] == counter >= 1
    assert sorted(on_disk) == ["dataVersion", "subscriptionGroupTable"]  # the file exactly as 4.9 writes it
    assert sorted(on_disk["dataVersion"]) == ["counter", "timestamp"]
    b.stop()
    b2 = Broker(tmp_path / "a")
    try:
        assert b2.server.groups.get("GA").consumeEnable is False
        assert all_groups(b2)["dataVersion"]["counter"] == counter
    finally:
        b2.stop()


def test_a_bad_field_type_is_refused_with_its_name(broker):
    wire = Wire(broker)
    r = wire.request(
        RemotingCommand.request(
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=b'{"groupName":"GB","retryQueueNums":"many"}'
        )
    )
    assert r.code == ResponseCode.SYSTEM_ERROR and "retryQueueNums" in r.remark
    assert broker.server.groups.get("GB") is None


def test_delete_with_and_without_remove_offset(broker):
    update(broker, groupName="GD")
    broker.server.offsets.commit("GD", TOPIC, 0, 5)
    r = broker.call(RemotingCommand.request(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "GD"}))
    assert r.code == ResponseCode.SUCCESS
    assert "GD" not in all_groups(broker)["subscriptionGroupTable"]
    assert broker.server.offsets.query("GD", TOPIC, 0) == 5
    broker.call(
        RemotingCommand.request(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "GD", "removeOffset": "true"})
    )
    assert broker.server.offsets.query("GD", TOPIC, 0) == -1


def test_delete_without_group_name_is_a_system_error(broker):
    r = Wire(broker).request(RemotingCommand.request(RequestCode.DELETE_SUBSCRIPTIONGROUP, {}))
    assert r.code == ResponseCode.SYSTEM_ERROR and "groupName" in r.remark


def test_get_one_5x(broker):
    update(broker, groupName="G1", retryQueueNums=2)
    r = broker.call(RemotingCommand.request(RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": "G1"}))
    assert r.code == ResponseCode.SUCCESS
    assert json.loads(r.body) == {**DEFAULTS, "groupName": "G1", "retryQueueNums": 2}


def test_heartbeat_and_pull_auto_create_the_group(broker):
    heartbeat(broker, "HB")
    assert all_groups(broker)["subscriptionGroupTable"]["HB"] == {"groupName": "HB", **DEFAULTS}
    broker.call(pull(group="PULLER", sys_flag=0x4))
    assert broker.server.groups.get("PULLER") is not None


def test_without_auto_create_an_unknown_group_cannot_pull(tmp_path):
    b = Broker(tmp_path / "a", autoCreateSubscriptionGroup="false")
    try:
        r = b.call(pull(group="NOPE", sys_flag=0x4))
        assert r.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
        assert r.remark.startswith("subscription group [NOPE] does not exist, \nSee ")
        # CID_RMQ_SYS_ groups are created anyway, as 4.9's isSysConsumerGroup: the pull gets past the
        # group check to the topic check (no topic was created here)
        r = b.call(pull(group="CID_RMQ_SYS_X", sys_flag=0x4))
        assert r.code == ResponseCode.TOPIC_NOT_EXIST
        assert b.server.groups.get("CID_RMQ_SYS_X") is not None and b.server.groups.get("NOPE") is None
    finally:
        b.stop()


def test_consume_enable_false_refuses_pulls(broker):
    broker.call(send_v1(body=b"m0", properties=props(UNIQ_KEY="U0")))
    update(broker, groupName="OFF", consumeEnable=False)
    r = broker.call(pull(group="OFF"))
    assert (r.code, r.remark, r.body) == (ResponseCode.NO_PERMISSION, "subscription group no permission, OFF", b"")
    update(broker, groupName="OFF", consumeEnable=True)
    assert broker.call(pull(group="OFF")).code == ResponseCode.SUCCESS


def test_a_slave_refuses_changes(tmp_path):
    b = Broker(tmp_path / "s", brokerRole="SLAVE")
    try:
        for req in (
            RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=b'{"groupName":"G"}'),
            RemotingCommand.request(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "TOOLS_CONSUMER"}),
        ):
            r = b.call(req)
            assert r.code == ResponseCode.SYSTEM_ERROR and r.remark.startswith("Can't modify topic or subscription")
        assert b.server.groups.get("G") is None and b.server.groups.get("TOOLS_CONSUMER") is not None
    finally:
        b.stop()


def test_slave_sync_copies_the_masters_groups(tmp_path):
    from rmqha.broker.managers.slave_sync import SlaveSynchronize

    master = Broker(tmp_path / "m")
    slave = Broker(tmp_path / "s", brokerRole="SLAVE")
    try:
        update(master, groupName="FROM_MASTER", retryMaxTimes=7)
        body = master.call(RemotingCommand.request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)).body

        class FakeClient:
            def invoke(self, addr, req, timeout):
                from twisted.internet import defer

                if req.code == RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG:
                    return defer.succeed(req.make_response(body=body))
                return defer.fail(RuntimeError("only groups here"))

            def close(self):
                pass

        sync = SlaveSynchronize(None, None, slave.clock, client=FakeClient(), groups=slave.server.groups)
        sync._sync_subscription_groups("m:1")
        assert slave.server.groups.get("FROM_MASTER").retryMaxTimes == 7
        assert all_groups(slave) == all_groups(master)
    finally:
        master.stop()
        slave.stop()


def test_auto_creation_stops_at_the_limit(broker, monkeypatch):
    from rmqha.broker.managers import subscriptions as subscription_groups

    monkeypatch.setattr(subscription_groups, "MAX_GROUPS", len(broker.server.groups.table) + 1)
    assert broker.call(pull(group="FITS", sys_flag=0x4)).code != ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
    r = broker.call(pull(group="ONE_TOO_MANY", sys_flag=0x4))
    assert r.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
    r = Wire(broker).request(
        RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=b'{"groupName":"ADMIN_TOO"}')
    )
    assert (r.code, r.remark) == (
        ResponseCode.SYSTEM_ERROR,
        "the broker holds 8 subscription groups, the most it keeps",
    )


def test_heartbeat_creates_the_retry_topic_with_the_groups_retry_queue_nums(broker):
    update(broker, groupName="WIDE", retryQueueNums=3)
    heartbeat(broker, "WIDE")
    tc = broker.server.topics.get("%RETRY%WIDE")
    assert (tc.read_queue_nums, tc.write_queue_nums, tc.perm) == (3, 3, 6)
    heartbeat(broker, "PLAIN")  # auto-created with the default of 1
    assert broker.server.topics.get("%RETRY%PLAIN").read_queue_nums == 1
