"""The ACL admin requests (50-53, mqadmin's updateAclConfig / deleteAclConfig / clusterAclConfigVersion /
updateGlobalWhiteAddr) against a real broker process with aclEnable: an account created through 50 is
served signed, deleted through 51 it is refused, 53's global white list lets unsigned requests in and
out again, 52 reports the file's dataVersion; a non-admin account is refused all four."""

from __future__ import annotations

import json

import pytest
import yaml

from rmqha.broker.acl import rules as acl
from rmqha.broker.remoting.codes import RequestCode as R
from rmqha.broker.remoting.codes import ResponseCode as C
from rmqha.cluster.standalone import rpc

from .processes import broker_on_namesrv

pytestmark = pytest.mark.integration

ACL_FILE = """
globalWhiteRemoteAddresses: ["10.10.103.*"]
accounts:
  - accessKey: rocketmq2
    secretKey: "12345678"
    admin: false
    defaultTopicPerm: PUB|SUB
  - accessKey: RocketMQ
    secretKey: "87654321"
    admin: true
"""
ADMIN = ("RocketMQ", "87654321")
NEW = ("newuser1", "newsecret1")


def reason(reply) -> str:
    """A refusal's 4.9.8 reason, without the ", <frame>" suffix 4.9.8's AclException appends (which
    tests/unit/acl/test_acl.py checks exactly)."""
    text, sep, frame = reply.remark.partition(", org.apache.rocketmq.acl.")
    assert sep and frame.endswith(")"), reply.remark
    return text


QUERY = {"topic": "TopicAdmin", "queueId": "0"}  # GET_MAX_OFFSET: signed, no topic perm needed


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("acl-admin")
    path = tmp / "plain_acl.yml"
    path.write_text(ACL_FILE)
    with broker_on_namesrv(tmp, "broker-a", extra={"aclEnable": "true", "aclConfigFile": str(path)}) as (_, broker):
        yield broker, path


def signed(broker, code, fields, key):
    return rpc(broker.addr, code, acl.sign(fields, b"", *key))


def version(broker) -> int:
    r = signed(broker, R.GET_BROKER_CLUSTER_ACL_INFO, {}, ADMIN)
    assert r.code == C.SUCCESS, r.remark
    return json.loads(r.ext_fields["version"])["counter"]


def test_the_acl_admin_requests_end_to_end(acl_broker):
    broker, path = acl_broker
    create = {
        "accessKey": NEW[0],
        "secretKey": NEW[1],
        "admin": "false",
        "defaultTopicPerm": "SUB",
        "topicPerms": "TopicAdmin=PUB|SUB",
        "groupPerms": "GroupAdmin=SUB",
    }
    # a non-admin account may not touch the ACL (4.9.8 would let it)
    for code, fields in (
        (R.UPDATE_AND_CREATE_ACL_CONFIG, create),
        (R.DELETE_ACL_CONFIG, {"accessKey": "RocketMQ"}),
        (R.GET_BROKER_CLUSTER_ACL_INFO, {}),
        (R.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, {"globalWhiteAddrs": "*"}),
    ):
        r = signed(broker, code, fields, ("rocketmq2", "12345678"))
        # 4.9.8's remark, with the ", <frame>" suffix its AclException carries (rmqha/broker/acl/rules.py)
        assert r.code == C.SYSTEM_ERROR and r.remark.startswith(
            f"{acl.EXCEPTION}: Need admin permission for request code={int(code)}, but accessKey=rocketmq2 is not, "
            "org.apache.rocketmq.acl.plain.PlainPermissionManager.checkPerm("
        ), r.remark
    assert path.read_text() == ACL_FILE
    info = signed(broker, R.GET_BROKER_CLUSTER_ACL_INFO, {}, ADMIN).ext_fields
    assert (info["brokerName"], info["brokerAddr"]) == ("broker-a", broker.addr)
    assert json.loads(info["allAclFileVersion"]) == {str(path): json.loads(info["version"])}
    assert version(broker) == 0

    # 50: unknown, then created and served signed
    assert reason(signed(broker, R.GET_MAX_OFFSET, QUERY, NEW)) == f"{acl.EXCEPTION}: No acl config for newuser1"
    r = signed(broker, R.UPDATE_AND_CREATE_ACL_CONFIG, create, ADMIN)
    assert r.code == C.SUCCESS, r.remark
    assert signed(broker, R.GET_MAX_OFFSET, QUERY, NEW).code == C.SUCCESS
    assert signed(broker, R.GET_MAX_OFFSET, QUERY, (NEW[0], "wrong-secret")).code == C.SYSTEM_ERROR
    on_disk = yaml.safe_load(path.read_text())
    assert on_disk["accounts"][-1]["topicPerms"] == ["TopicAdmin=PUB|SUB"]
    assert version(broker) == 1
    # a bad field: 209 with the reason, the file as it was
    before = path.read_text()
    r = signed(broker, R.UPDATE_AND_CREATE_ACL_CONFIG, {**create, "secretKey": "short"}, ADMIN)
    assert r.code == C.UPDATE_AND_CREATE_ACL_CONFIG_FAILED and "length should longer than 6" in r.remark
    r = signed(broker, R.UPDATE_AND_CREATE_ACL_CONFIG, {**create, "topicPerms": "TopicAdmin=ALL"}, ADMIN)
    assert r.code == C.UPDATE_AND_CREATE_ACL_CONFIG_FAILED and "Parse resource permission error" in r.remark
    assert path.read_text() == before

    # 51: deleted, then refused; deleting again is 4.9's failure
    assert signed(broker, R.DELETE_ACL_CONFIG, {"accessKey": NEW[0]}, ADMIN).code == C.SUCCESS
    assert reason(signed(broker, R.GET_MAX_OFFSET, QUERY, NEW)) == f"{acl.EXCEPTION}: No acl config for newuser1"
    r = signed(broker, R.DELETE_ACL_CONFIG, {"accessKey": NEW[0]}, ADMIN)
    assert r.code == C.DELETE_ACL_CONFIG_FAILED and "has been deleted failed" in r.remark

    # 53: this host whitelisted, unsigned requests are served; it takes itself off again unsigned
    unsigned = rpc(broker.addr, R.GET_MAX_OFFSET, QUERY)
    assert reason(unsigned) == f"{acl.EXCEPTION}: No accessKey is configured"
    r = signed(broker, R.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, {"globalWhiteAddrs": "10.10.103.*,127.0.0.1"}, ADMIN)
    assert r.code == C.SUCCESS, r.remark
    assert rpc(broker.addr, R.GET_MAX_OFFSET, QUERY).code == C.SUCCESS
    r = rpc(
        broker.addr,
        R.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
        {"globalWhiteAddrs": "10.10.103.*", "aclFileFullPath": str(path)},
    )
    assert r.code == C.SUCCESS, r.remark
    assert reason(rpc(broker.addr, R.GET_MAX_OFFSET, QUERY)) == f"{acl.EXCEPTION}: No accessKey is configured"
    assert yaml.safe_load(path.read_text())["globalWhiteRemoteAddresses"] == ["10.10.103.*"]

    # 52: every edit moved the version on, and the file says the same
    assert version(broker) == 4
    assert yaml.safe_load(path.read_text())["dataVersion"][0]["counter"] == 4
    assert "ACL reloaded" not in broker.log_tail(300)  # edits are in force at once, not by the reload
