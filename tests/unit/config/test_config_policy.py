"""rmqha/broker/config/policy.py: which settings UPDATE_BROKER_CONFIG may change, and the config file rewrite."""

import dataclasses

import pytest

from rmqha.broker.config import policy as cp
from rmqha.broker.config.properties import BrokerConfig, parse_properties

from ..processors.harness import make_config

ALL_KEYS = {f.metadata["name"] for f in dataclasses.fields(BrokerConfig) if f.metadata.get("name")}


def test_every_setting_is_in_exactly_one_class():
    refused = set(cp.REFUSED_WHY)
    assert not cp.LIVE_KEYS & cp.RESTART_KEYS and not (cp.LIVE_KEYS | cp.RESTART_KEYS) & refused
    # a new setting must be classified: this fails until it is put in one of the three
    assert cp.LIVE_KEYS | cp.RESTART_KEYS | refused == ALL_KEYS


@pytest.mark.parametrize(
    "key",
    [
        "storePathRootDir",
        "brokerRole",
        "brokerName",
        "brokerId",
        "brokerClusterName",
        "listenPort",
        "mappedFileSizeCommitLog",
        "flushDiskType",
        "aclEnable",
    ],
)
def test_dangerous_keys_are_refused_by_name(tmp_path, key):
    with pytest.raises(cp.UpdateRefused) as e:
        cp.plan_update(make_config(tmp_path), {"maxMessageSize": "1024", key: "x"})
    assert str(e.value).startswith(f"{key} cannot be changed at run time: ")


def test_unknown_and_unused_keys_are_refused(tmp_path):
    c = make_config(tmp_path)
    with pytest.raises(cp.UpdateRefused, match=r"^maxMesageSize is not a setting of this broker$"):
        cp.plan_update(c, {"maxMesageSize": "1"})
    with pytest.raises(cp.UpdateRefused, match=r"^useTLS is a RocketMQ 4.9 setting this broker does not use$"):
        cp.plan_update(c, {"useTLS": "true"})


def test_values_are_checked_as_the_files_are(tmp_path):
    c = make_config(tmp_path)
    with pytest.raises(cp.UpdateRefused, match=r"^defaultTopicQueueNums=0: allowed range is 1..1024$"):
        cp.plan_update(c, {"defaultTopicQueueNums": "0"})
    with pytest.raises(cp.UpdateRefused, match="autoCreateTopicEnable='yes': expected true or false"):
        cp.plan_update(c, {"autoCreateTopicEnable": "yes"})
    with pytest.raises(cp.UpdateRefused, match="namesrvAddr"):
        cp.plan_update(c, {"namesrvAddr": "no-port"})  # the whole config is validated
    plan = cp.plan_update(c, {"maxMessageSize": " 2048 ", "namesrvAddr": "127.0.0.1:9876"})
    assert plan.values == {"maxMessageSize": 2048, "namesrvAddr": "127.0.0.1:9876"}
    assert (plan.live, plan.restart) == (["maxMessageSize"], ["namesrvAddr"])
    assert plan.text == {"maxMessageSize": "2048", "namesrvAddr": "127.0.0.1:9876"}
    assert c.maxMessageSize == 4 * 1024 * 1024  # planning changes nothing


def test_properties_text_is_every_set_value_sorted_without_secrets(tmp_path):
    c = make_config(tmp_path, aclClientAccessKey="rocketmq2", aclClientSecretKey="12345678")
    text = cp.properties_text(c)
    props = parse_properties(text)
    assert list(props) == sorted(props)
    assert props["brokerName"] == "broker-a" and props["autoCreateTopicEnable"] == "true"
    assert props["listenPort"] == "10911" and props["aclClientAccessKey"] == "rocketmq2"
    assert "aclClientSecretKey" not in props and "12345678" not in text
    assert "namesrvAddr" not in props  # null: left out, as 4.9 does
    assert text.endswith("\n") and all("=" in line for line in text.splitlines())


def test_rewrite_keeps_comments_and_order():
    text = (
        "# broker-a\n"
        "brokerName = broker-a\n"
        "! a note\n"
        "maxMessageSize=1024\n"
        "namesrvAddr=a:1;\\\n"
        "    b:2\n"
        "listenPort=10911\n"
    )
    out = cp.rewrite_properties(text, {"maxMessageSize": "2048", "namesrvAddr": "c:3", "brokerPermission": "4"})
    assert out == (
        "# broker-a\n"
        "brokerName = broker-a\n"
        "! a note\n"
        "maxMessageSize=2048\n"
        "namesrvAddr=c:3\n"
        "listenPort=10911\n"
        "brokerPermission=4\n"
    )
    assert parse_properties(out)["namesrvAddr"] == "c:3"
    assert cp.rewrite_properties("", {"a": "x\\y"}) == "a=x\\\\y\n"
    assert parse_properties(cp.rewrite_properties("", {"a": "x\\y"})) == {"a": "x\\y"}
