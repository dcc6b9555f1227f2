"""The configuration claims (docs/operations.md): official key names and defaults, bad values named with what is
allowed, unknown keys kept (and logged at start), and the sync wait taken from slaveTimeout when set."""

import pytest

from rmqha.broker.config.properties import BrokerConfig, ConfigError, parse_properties


def load(**props):
    c = BrokerConfig.from_properties({k: str(v) for k, v in props.items()})
    c.validate()
    return c


def test_defaults_are_rocketmqs():
    c = load(brokerName="broker-a")
    assert (c.brokerRole, c.brokerId, c.flushDiskType, c.listenPort, c.ha_port, c.metrics_port) == (
        "ASYNC_MASTER",
        0,
        "ASYNC_FLUSH",
        10911,
        10912,
        10913,
    )
    assert (c.syncFlushTimeout, c.slaveTimeout, c.sync_wait_ms) == (5000, None, 5000)
    assert (c.haSendHeartbeatInterval, c.haHousekeepingInterval, c.haTransferBatchSize) == (5000, 20000, 32768)
    assert (c.haSlaveFallbehindMax, c.mappedFileSizeCommitLog, c.flushIntervalCommitLog) == (256 << 20, 1 << 30, 500)
    assert (c.checkCRCOnRecover, c.haReconnectMaxDelay, c.commitLogPreallocate) == (True, 1000, True)


def test_slave_timeout_wins_over_sync_flush_timeout():
    assert load(syncFlushTimeout=1500).sync_wait_ms == 1500
    assert load(syncFlushTimeout=5000, slaveTimeout=2000).sync_wait_ms == 2000
    assert load(slaveTimeout=7000).sync_wait_ms == 7000


@pytest.mark.parametrize(
    "props,message",
    [
        ({"brokerRole": "MASTER"}, "brokerRole='MASTER': allowed values are ASYNC_MASTER, SYNC_MASTER, SLAVE"),
        ({"flushDiskType": "SOMETIMES"}, "flushDiskType='SOMETIMES': allowed values are"),
        ({"brokerRole": "SLAVE", "brokerId": "0"}, "brokerId=0 is the master's id; a SLAVE needs brokerId >= 1"),
        ({"brokerRole": "SYNC_MASTER", "brokerId": "2"}, "brokerRole=SYNC_MASTER needs brokerId=0 (got 2)"),
        ({"listenPort": "70000"}, "listenPort=70000: allowed range is 1..65535"),
        ({"listenPort": "abc"}, "listenPort='abc': expected an integer"),
        ({"syncFlushTimeout": "0"}, "syncFlushTimeout=0: allowed range is 1..inf"),
        ({"slaveTimeout": "-1"}, "slaveTimeout=-1: allowed range is 1..inf"),
        ({"haTransferBatchSize": str(4 * 1024 * 1024 + 1)}, "haTransferBatchSize=4194305: allowed range is 1..4194304"),
        ({"haReconnectMaxDelay": "9"}, "haReconnectMaxDelay=9: allowed range is 10..inf"),
        ({"checkCRCOnRecover": "yes"}, "checkCRCOnRecover='yes': expected true or false"),
        (
            {"brokerRole": "SLAVE", "brokerId": "1", "haMasterAddress": "10.0.0.1"},
            "haMasterAddress='10.0.0.1': expected host:port",
        ),
        ({"haMasterAddress": "10.0.0.1:0"}, "expected host:port"),
        ({"namesrvAddr": "127.0.0.1:9876;nohost"}, "namesrvAddr='nohost': expected host:port"),
        ({"listenPort": "10911", "haListenPort": "10913"}, "ports must differ"),
    ],
)
def test_bad_values_name_the_key_and_what_is_allowed(props, message):
    with pytest.raises(ConfigError) as e:
        load(**props)
    assert message in str(e.value)


def test_valid_edges_pass():
    c = load(
        listenPort=65535,
        haListenPort=1,
        metricsPort=2,
        haTransferBatchSize=4 * 1024 * 1024,
        checkCRCOnRecover="FALSE",
        brokerRole="SLAVE",
        brokerId=1,
        haMasterAddress="[::1]:10912",
        namesrvAddr="a:1; b:2;",
    )
    assert (c.ha_port, c.metrics_port, c.checkCRCOnRecover, c.haMasterAddress) == (1, 2, False, "[::1]:10912")


def test_an_unknown_or_misspelt_key_is_an_error_naming_the_key_it_resembles():
    with pytest.raises(
        ConfigError,
        match=r"unknown config key\(s\): flushIntervalCommitlog \(did you mean "
        r"flushIntervalCommitLog\?\), nonsenseKey;",
    ):
        BrokerConfig.from_properties({"brokerName": "b", "flushIntervalCommitlog": "9", "nonsenseKey": "1"})
    # 4.9 keys this broker does not implement are accepted, and kept for the start-up warning
    c = BrokerConfig.from_properties({"brokerName": "b", "useTLS": "false"})
    assert c.ignored_keys == ["useTLS"]


def test_acl_enable_is_no_longer_ignored():
    c = BrokerConfig.from_properties({"brokerName": "b", "aclEnable": "true"})
    assert c.aclEnable is True and c.ignored_keys == []


def test_an_official_conf_file_reads_as_is():
    text = (
        "# 2m-2s-sync broker-a\nbrokerClusterName=DefaultCluster\nbrokerName=broker-a\nbrokerId=0\n"
        "deleteWhen=04\nfileReservedTime=48\nbrokerRole=SYNC_MASTER\nflushDiskType=ASYNC_FLUSH\n"
    )
    c = BrokerConfig.from_properties(parse_properties(text))
    c.validate()
    assert (c.brokerName, c.brokerRole, c.ignored_keys) == ("broker-a", "SYNC_MASTER", [])
    assert (c.deleteWhen, c.fileReservedTime) == ("04", 48)  # commit-log retention, as 4.9 (store/retention.py)


def test_metrics_bind_to_loopback_by_default_and_addresses_are_checked():
    assert BrokerConfig.from_properties({"brokerName": "b"}).metricsBindAddress == "127.0.0.1"
    with pytest.raises(ConfigError, match="metricsBindAddress"):
        BrokerConfig.from_properties({"brokerName": "b", "metricsBindAddress": "everywhere"})
    with pytest.raises(ConfigError, match="haAllowedAddresses"):
        BrokerConfig.from_properties({"brokerName": "b", "haAllowedAddresses": "10.0.0.1,slave-host"})
    c = BrokerConfig.from_properties({"brokerName": "b", "haAllowedAddresses": " 10.0.0.1 , ::1"})
    assert c.ha_allowed == {"10.0.0.1", "::1"}
