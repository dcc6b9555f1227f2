"""The ACL admin requests (50-53): the IO-free edits of plain_acl.yml (rmqha/broker/acl/edits.py), and the
processors on an in-process broker with aclEnable (rmqha/broker/processors/acl_admin.py)."""

from __future__ import annotations

import json
import os

import pytest
import yaml

from rmqha.broker.acl import rules as acl, edits as acl_admin
from rmqha.broker.acl.rules import AclConfig, AclError
from rmqha.broker.acl.edits import AccessUpdate, AclAdminError
from rmqha.broker.remoting.codes import RequestCode as R
from rmqha.broker.remoting.codes import ResponseCode as C
from rmqha.broker.remoting.command import HeaderFieldError, RemotingCommand

from ..processors.harness import Broker, FakeContext

FILE = """# operators' comment
globalWhiteRemoteAddresses: ["10.10.103.*"]
accounts:
  - accessKey: rocketmq2
    secretKey: "12345678"
    admin: false
    defaultTopicPerm: DENY
    topicPerms: ["topicA=PUB|SUB"]
  - accessKey: RocketMQ
    secretKey: "87654321"
    admin: true
"""


def doc():
    return yaml.safe_load(FILE)


def update(**kw) -> AccessUpdate:
    return AccessUpdate(**{"access_key": "newuser1", "secret_key": "newsecret1", **kw})


# -- the IO-free edits -----------------------------------------------------------------------------


def test_a_new_account_is_appended_with_only_the_fields_sent():
    original = doc()
    out = acl_admin.upsert_account(original, update(topic_perms=["t1=PUB"], default_group_perm="SUB"))
    assert out["accounts"][-1] == {
        "accessKey": "newuser1",
        "secretKey": "newsecret1",
        "admin": False,
        "defaultGroupPerm": "SUB",
        "topicPerms": ["t1=PUB"],
    }
    assert len(out["accounts"]) == 3 and original == doc()  # the input is not changed
    assert "newuser1" in AclConfig.from_dict(out).accounts


def test_an_update_merges_keeping_what_the_request_leaves_out():
    out = acl_admin.upsert_account(doc(), update(access_key="rocketmq2", secret_key="changed-secret", admin=True))
    acc = next(a for a in out["accounts"] if a["accessKey"] == "rocketmq2")
    assert acc == {
        "accessKey": "rocketmq2",
        "secretKey": "changed-secret",
        "admin": True,
        "defaultTopicPerm": "DENY",
        "topicPerms": ["topicA=PUB|SUB"],
    }
    assert len(out["accounts"]) == 2
    # an empty list clears (mqadmin without -t sends none, so it keeps)
    out = acl_admin.upsert_account(
        out, update(access_key="rocketmq2", secret_key="changed-secret", topic_perms=acl_admin.split_list(""))
    )
    assert next(a for a in out["accounts"] if a["accessKey"] == "rocketmq2")["topicPerms"] == []


@pytest.mark.parametrize(
    "kw, says",
    [
        ({"access_key": "short6"}, "The accessKey=short6 and secretKey=<10 characters> cannot be null"),
        ({"secret_key": "123456"}, "secretKey=<6 characters> cannot be null and length should longer than 6"),
        ({"secret_key": None}, "secretKey=null cannot be null"),
        ({"access_key": ""}, "The accessKey= and"),
        ({"topic_perms": ["topicA"]}, "Parse Resource format error for topicA."),
        ({"topic_perms": ["a=SUB=PUB"]}, "Parse Resource format error for a=SUB=PUB."),
        ({"group_perms": ["g=READ"]}, "Parse resource permission error for g=READ."),
        ({"group_perms": ["g=pub"]}, "Parse resource permission error for g=pub."),  # 4.9: case matters
        ({"default_topic_perm": "ALL"}, "defaultTopicPerm=ALL is not one of DENY, PUB, SUB, PUB|SUB, SUB|PUB"),
        ({"white_remote_address": "10.1.1.300"}, "whiteRemoteAddress: address pattern '10.1.1.300'"),
    ],
)
def test_bad_fields_are_refused_with_a_reason_and_no_secret(kw, says):
    with pytest.raises(AclAdminError) as e:
        acl_admin.upsert_account(doc(), update(**kw))
    assert says in str(e.value)
    assert "newsecret1" not in str(e.value)


def test_delete_removes_the_account_or_says_there_is_none():
    out = acl_admin.delete_account(doc(), "rocketmq2")
    assert [a["accessKey"] for a in out["accounts"]] == ["RocketMQ"]
    assert acl_admin.delete_account(doc(), "nobody") is None
    assert acl_admin.delete_account(doc(), "") is None
    assert acl_admin.delete_account({}, "rocketmq2") is None


def test_global_white_addresses_are_replaced_and_checked():
    out = acl_admin.set_global_white(doc(), acl_admin.split_list("192.168.0.*, 10.0.0.1-9,"))
    assert out["globalWhiteRemoteAddresses"] == ["192.168.0.*", "10.0.0.1-9"]
    assert acl_admin.set_global_white(doc(), [])["globalWhiteRemoteAddresses"] == []
    with pytest.raises(AclAdminError, match="globalWhiteRemoteAddresses: address pattern 'nonsense'"):
        acl_admin.set_global_white(doc(), ["nonsense"])


def test_the_data_version_moves_on_as_4_9s():
    first, v1 = acl_admin.next_version(doc(), 1000)
    assert v1 == {"counter": 1, "timestamp": 1000} and first["dataVersion"] == [v1]
    second, v2 = acl_admin.next_version(first, 2000)
    assert v2 == {"counter": 2, "timestamp": 2000}
    assert acl_admin.data_version(yaml.safe_load(acl_admin.dump(second))) == v2
    assert acl_admin.data_version({"dataVersion": [{"counter": "x"}]}) is None
    assert acl_admin.data_version({"dataVersion": "junk"}) is None


def test_the_dump_reads_back_the_same_and_keys_stay_strings():
    d = acl_admin.upsert_account(doc(), update(secret_key="1234567890"))
    back = yaml.safe_load(acl_admin.dump(d))
    assert back == d and back["accounts"][-1]["secretKey"] == "1234567890"


def test_the_acl_admin_requests_need_an_admin_account():
    cfg = AclConfig.from_yaml(FILE)
    for code in (
        R.UPDATE_AND_CREATE_ACL_CONFIG,
        R.DELETE_ACL_CONFIG,
        R.GET_BROKER_CLUSTER_ACL_INFO,
        R.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
    ):
        with pytest.raises(
            AclError, match=f"Need admin permission for request code={int(code)}, but accessKey=rocketmq2 is not"
        ):
            cfg.validate(code, acl.sign({"accessKey": "x"}, b"", "rocketmq2", "12345678"), b"", "127.0.0.1")
        cfg.validate(code, acl.sign({"accessKey": "x"}, b"", "RocketMQ", "87654321"), b"", "127.0.0.1")


# -- the processors, on an in-process broker -------------------------------------------------------


@pytest.fixture
def broker(tmp_path):
    path = tmp_path / "plain_acl.yml"
    path.write_text(FILE)
    b = Broker(tmp_path / "store", aclEnable="true", aclConfigFile=str(path))
    b.path = path
    yield b
    b.stop()


def call(b, code, fields):
    return b.server.registry.get(code)(RemotingCommand.request(code, fields), FakeContext())


def on_disk(b):
    return yaml.safe_load(b.path.read_text())


def test_create_writes_the_file_and_is_in_force_at_once(broker):
    r = call(
        broker,
        R.UPDATE_AND_CREATE_ACL_CONFIG,
        {"accessKey": "newuser1", "secretKey": "newsecret1", "admin": "false", "topicPerms": "t1=PUB,t2=SUB"},
    )
    assert (r.code, r.remark) == (C.SUCCESS, None)
    d = on_disk(broker)
    assert d["accounts"][-1]["topicPerms"] == ["t1=PUB", "t2=SUB"]
    assert d["dataVersion"][0]["counter"] == 1
    assert "newuser1" in broker.server.acl.config.accounts
    assert not os.path.exists(f"{broker.path}.tmp")
    before = broker.server.acl.reloads
    broker.server.acl.reload_if_changed()  # the service took the file's hash: no second load
    assert broker.server.acl.reloads == before


def test_a_refused_edit_leaves_the_file_untouched(broker):
    r = call(broker, R.UPDATE_AND_CREATE_ACL_CONFIG, {"accessKey": "newuser1", "secretKey": "short"})
    assert r.code == C.UPDATE_AND_CREATE_ACL_CONFIG_FAILED
    assert "length should longer than 6" in r.remark
    assert broker.path.read_text() == FILE
    with pytest.raises(HeaderFieldError, match="the custom field <accessKey> is null"):
        call(broker, R.UPDATE_AND_CREATE_ACL_CONFIG, {"secretKey": "newsecret1"})


def test_an_unusable_file_on_disk_is_not_overwritten(broker):
    broker.path.write_text("accounts: [ broken")
    r = call(broker, R.DELETE_ACL_CONFIG, {"accessKey": "rocketmq2"})
    assert r.code == C.DELETE_ACL_CONFIG_FAILED and "is not valid YAML" in r.remark, r.remark
    assert broker.path.read_text() == "accounts: [ broken"


def test_delete_and_its_4_9_remark_for_an_unknown_key(broker):
    assert call(broker, R.DELETE_ACL_CONFIG, {"accessKey": "rocketmq2"}).code == C.SUCCESS
    assert "rocketmq2" not in broker.server.acl.config.accounts
    assert [a["accessKey"] for a in on_disk(broker)["accounts"]] == ["RocketMQ"]
    r = call(broker, R.DELETE_ACL_CONFIG, {"accessKey": "rocketmq2"})
    assert (r.code, r.remark) == (
        C.DELETE_ACL_CONFIG_FAILED,
        "The accesskey[rocketmq2] corresponding to accessConfig has been deleted failed.",
    )


def test_global_white_addresses_and_the_file_path(broker):
    r = call(broker, R.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, {"globalWhiteAddrs": "192.168.0.*,10.1.1.1"})
    assert r.code == C.SUCCESS, r.remark
    assert on_disk(broker)["globalWhiteRemoteAddresses"] == ["192.168.0.*", "10.1.1.1"]
    assert broker.server.acl.config.global_white[1].match("10.1.1.1")
    r = call(
        broker, R.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, {"globalWhiteAddrs": "1.2.3.4", "aclFileFullPath": str(broker.path)}
    )
    assert r.code == C.SUCCESS, r.remark
    r = call(
        broker, R.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, {"globalWhiteAddrs": "1.2.3.4", "aclFileFullPath": "/etc/other.yml"}
    )
    assert r.code == C.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED and "is not the ACL file" in r.remark
    r = call(broker, R.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, {"globalWhiteAddrs": "1.2.3.999"})
    assert r.code == C.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED and "1.2.3.999" in r.remark
    assert on_disk(broker)["globalWhiteRemoteAddresses"] == ["1.2.3.4"]


def test_acl_info_answers_4_9s_header(broker):
    r = call(broker, R.GET_BROKER_CLUSTER_ACL_INFO, {})
    f = r.ext_fields
    assert r.code == C.SUCCESS
    assert (f["brokerName"], f["clusterName"], f["brokerAddr"]) == ("broker-a", "DefaultCluster", "127.0.0.1:10911")
    assert json.loads(f["version"])["counter"] == 0
    call(broker, R.DELETE_ACL_CONFIG, {"accessKey": "rocketmq2"})
    f = call(broker, R.GET_BROKER_CLUSTER_ACL_INFO, {}).ext_fields
    assert json.loads(f["version"])["counter"] == 1
    assert json.loads(f["allAclFileVersion"]) == {str(broker.path): json.loads(f["version"])}


def test_with_acl_off_each_is_answered_saying_so(tmp_path):
    b = Broker(tmp_path)
    try:
        for code, fields in (
            (R.UPDATE_AND_CREATE_ACL_CONFIG, {"accessKey": "newuser1", "secretKey": "x" * 8}),
            (R.DELETE_ACL_CONFIG, {"accessKey": "newuser1"}),
            (R.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, {"globalWhiteAddrs": "*"}),
            (R.GET_BROKER_CLUSTER_ACL_INFO, {}),
        ):
            r = call(b, code, fields)
            assert r.code != C.SUCCESS and "aclEnable=false" in r.remark
    finally:
        b.stop()
