"""The admin plane RocketMQ's own tools read (issue 24): GET_BROKER_RUNTIME_INFO (28), GET_BROKER_CONFIG (26),
UPDATE_BROKER_CONFIG (25), VIEW_BROKER_STATS_DATA (315), GET_BROKER_HA_STATUS (907), and the
rocketmq-exporter names on /metrics with the Grafana dashboard that reads them."""

import json
import os
import re
from pathlib import Path

import pytest

from rmqha.broker import fastpath
from rmqha.broker.config.properties import parse_properties
from rmqha.broker.processors.ha_status import TransferRates
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.codec import encode
from rmqha.broker.remoting.command import RemotingCommand

from .harness import TOPIC, Broker, pull, send_v1, send_v2
from .test_hostile_requests import Wire

REPO = Path(__file__).resolve().parents[3]

# Every key 4.9.8's GET_BROKER_RUNTIME_INFO answers with ASYNC_FLUSH and no transient store pool
# (StoreStatsService.getRuntimeInfo, DefaultMessageStore.getRuntimeInfo, AdminBrokerProcessor.prepareRuntimeInfo),
# besides commitLogDiskRatio_<path> and scheduleMessageOffset_<level>.
KEYS_4_9_8 = {
    "bootTimestamp",
    "runtime",
    "putMessageEntireTimeMax",
    "putMessageTimesTotal",
    "putMessageFailedTimes",
    "putMessageSizeTotal",
    "putMessageDistributeTime",
    "putMessageAverageSize",
    "dispatchMaxBuffer",
    "getMessageEntireTimeMax",
    "putTps",
    "getFoundTps",
    "getMissTps",
    "getTotalTps",
    "getTransferedTps",
    "putLatency99",
    "putLatency999",
    "commitLogDiskRatio",
    "consumeQueueDiskRatio",
    "commitLogMinOffset",
    "commitLogMaxOffset",
    "brokerVersionDesc",
    "brokerVersion",
    "msgPutTotalYesterdayMorning",
    "msgPutTotalTodayMorning",
    "msgPutTotalTodayNow",
    "msgGetTotalYesterdayMorning",
    "msgGetTotalTodayMorning",
    "msgGetTotalTodayNow",
    "sendThreadPoolQueueSize",
    "sendThreadPoolQueueCapacity",
    "pullThreadPoolQueueSize",
    "pullThreadPoolQueueCapacity",
    "queryThreadPoolQueueSize",
    "queryThreadPoolQueueCapacity",
    "EndTransactionQueueSize",
    "EndTransactionThreadPoolQueueCapacity",
    "dispatchBehindBytes",
    "pageCacheLockTimeMills",
    "sendThreadPoolQueueHeadWaitTimeMills",
    "pullThreadPoolQueueHeadWaitTimeMills",
    "queryThreadPoolQueueHeadWaitTimeMills",
    "earliestMessageTimeStamp",
    "startAcceptSendRequestTimeStamp",
    "remainTransientStoreBufferNumbs",
    "remainHowManyDataToFlush",
    "commitLogDirCapacity",
}


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path / "store")
    yield b
    b.stop()


def q(code, body=b"", **fields):
    return RemotingCommand.request(code, fields, body=body)


def seconds(b, n):
    for _ in range(n):
        b.clock.advance(1)


def runtime(b):
    r = b.call(q(RequestCode.GET_BROKER_RUNTIME_INFO))
    assert r.code == ResponseCode.SUCCESS
    return json.loads(r.body)["table"]


# -- GET_BROKER_RUNTIME_INFO -------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["SYNC_MASTER", "SLAVE"])
def test_runtime_info_has_no_key_4_9_8_does_not_answer(tmp_path, role):
    """mqadmin brokerStatus prints the whole table: ours added 12 keys of its own (brokerRole, topicCount,
    haConnectionCount, ...), lines 4.9.8 does not print (compared with 4.9.8's brokerStatus, 2026-11-29)."""
    b = Broker(tmp_path / "store", brokerRole=role)
    try:
        own = ("commitLogDiskRatio_", "scheduleMessageOffset_")  # 4.9.8's per-path and per-level keys
        extra = {k for k in runtime(b) if k not in KEYS_4_9_8 and not k.startswith(own)}
        assert extra == set()
    finally:
        b.stop()


def test_runtime_info_has_every_4_9_8_key_with_real_values(broker):
    b = broker
    b.clock.advance(1000)
    for _ in range(3):
        assert b.call(send_v1(body=b"x" * 10)).code == ResponseCode.SUCCESS
    assert b.call(pull()).code == ResponseCode.SUCCESS
    t = runtime(b)
    assert KEYS_4_9_8 <= set(t), KEYS_4_9_8 - set(t)
    assert all(isinstance(v, str) for v in t.values())
    commitlog = str(Path(b.root) / "commitlog")
    assert t[f"commitLogDiskRatio_{commitlog}"] == t["commitLogDiskRatio"]
    assert 0 < float(t["commitLogDiskRatio"]) <= 1
    size = b.store.max_offset
    assert (t["putMessageTimesTotal"], t["msgPutTotalTodayNow"], t["putMessageSizeTotal"]) == ("3", "3", str(size))
    assert t["putMessageAverageSize"] == f"{size / 3}"
    assert t["msgGetTotalTodayNow"] == "3" and t["commitLogMaxOffset"] == str(size)
    assert t["earliestMessageTimeStamp"] == "1000000"  # the store time of the first message (fake clock)
    assert t["brokerVersion"] == "409" and t["brokerVersionDesc"] == "V4_9_8"
    assert t["remainTransientStoreBufferNumbs"] == "2147483647" and t["sendThreadPoolQueueCapacity"] == "10000"
    assert re.fullmatch(r"Total : [\d.]+ [KMGTPE]iB, Free : [\d.]+ [KMGTPE]iB\.", t["commitLogDirCapacity"])
    assert t["runtime"] == "[ 0 days, 0 hours, 16 minutes, 40 seconds ]"
    assert t["putTps"] == "  "  # two samples (0 s and 1000 s): no window is full yet, as 4.9 says it
    # the puts came after the last full minute ended: not in its distribution yet
    assert t["putMessageDistributeTime"] == "".join(
        f"{label}:0 "
        for label in (
            "[<=0ms]",
            "[0~10ms]",
            "[10~50ms]",
            "[50~100ms]",
            "[100~200ms]",
            "[200~500ms]",
            "[500ms~1s]",
            "[1~2s]",
            "[2~3s]",
            "[3~4s]",
            "[4~5s]",
            "[5~10s]",
            "[10s~]",
        )
    )
    assert {k for k in t if k.startswith("scheduleMessageOffset_")} == set()  # nothing delayed yet


def test_put_tps_is_what_mqadmin_cluster_list_parses(broker):
    b = broker
    for _ in range(12):  # 2 sends a second for 12 s, sampled every second
        b.call(send_v1())
        b.call(send_v1())
        b.clock.advance(1)
    t = runtime(b)
    assert t["putTps"] == "2.0  "
    # ClusterListSubCommand: String[] tpss = putTps.split(" "); in = Double.parseDouble(tpss[0])
    assert float(t["putTps"].split(" ")[0]) == 2.0
    assert t["getTotalTps"] == "0.0 0.0 0.0"
    seconds(b, 60)
    t = runtime(b)
    dist = dict(part.split(":") for part in t["putMessageDistributeTime"].split())
    assert list(dist) == [
        "[<=0ms]",
        "[0~10ms]",
        "[10~50ms]",
        "[50~100ms]",
        "[100~200ms]",
        "[200~500ms]",
        "[500ms~1s]",
        "[1~2s]",
        "[2~3s]",
        "[3~4s]",
        "[4~5s]",
        "[5~10s]",
        "[10s~]",
    ]
    assert sum(map(int, dist.values())) == 24  # every put of the first minute in a bucket


# -- VIEW_BROKER_STATS_DATA ----------------------------------------------------------------------------
def test_view_broker_stats_data(broker):
    b = broker
    for _ in range(3):
        b.call(send_v1(body=b"abc"))
    seconds(b, 10)
    r = b.call(q(RequestCode.VIEW_BROKER_STATS_DATA, statsName="TOPIC_PUT_NUMS", statsKey=TOPIC))
    assert r.code == ResponseCode.SUCCESS
    data = json.loads(r.body)
    assert list(data) == ["statsDay", "statsHour", "statsMinute"]
    # the counter was created after the tick at 0 s: first sampled at 10 s, with a zero sample 10 s before
    assert data["statsMinute"] == {"avgpt": 1.0, "sum": 3, "tps": 0.3}
    r = b.call(q(RequestCode.VIEW_BROKER_STATS_DATA, statsName="BROKER_PUT_NUMS", statsKey="DefaultCluster"))
    assert json.loads(r.body)["statsMinute"]["sum"] == 3
    r = b.call(q(RequestCode.VIEW_BROKER_STATS_DATA, statsName="GROUP_GET_NUMS", statsKey=f"{TOPIC}@CG"))
    assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, f"The stats <GROUP_GET_NUMS> <{TOPIC}@CG> not exist")
    b.call(pull(group="CG"))
    r = b.call(q(RequestCode.VIEW_BROKER_STATS_DATA, statsName="GROUP_GET_NUMS", statsKey=f"{TOPIC}@CG"))
    assert r.code == ResponseCode.SUCCESS


@pytest.mark.skipif(not fastpath.available(), reason="the compiled accelerator is not built here")
def test_sends_on_the_compiled_path_are_counted_too(broker):
    b = broker
    assert b.call(send_v1()).code == ResponseCode.SUCCESS  # creates the topic (Python path)
    w = Wire(b)
    replies = w.raw(b"".join(encode(send_v2(body=b"fast")) for _ in range(3)))
    assert [r.code for r in replies] == [ResponseCode.SUCCESS] * 3
    assert int(b.server.controller.metrics.metrics["rocketmq_send_fastpath_messages_total"].get()) == 3
    item = b.server.controller.stats.table.item("TOPIC_PUT_NUMS", TOPIC)
    assert (item.value, item.times) == (4, 4)  # one addition per request, as 4.9
    assert b.server.controller.stats.store.put_times_total == 4
    assert b.server.controller.stats.store.put_times[TOPIC] == 4


def test_view_broker_stats_data_without_its_header_is_answered(broker):
    w = Wire(broker)
    r = w.request(q(RequestCode.VIEW_BROKER_STATS_DATA, statsName="TOPIC_PUT_NUMS"))
    assert r.code == ResponseCode.SYSTEM_ERROR and "statsKey" in r.remark


# -- GET_BROKER_CONFIG / UPDATE_BROKER_CONFIG ----------------------------------------------------------
def get_config(b):
    r = b.call(q(RequestCode.GET_BROKER_CONFIG))
    assert r.code == ResponseCode.SUCCESS
    return json.loads(r.ext_fields["version"]), parse_properties(r.body.decode())


def update(b, text):
    return b.call(q(RequestCode.UPDATE_BROKER_CONFIG, body=text.encode()))


def test_get_broker_config(broker):
    version, props = get_config(broker)
    assert list(version) == ["counter", "timestamp"] and version["counter"] == 0
    assert props["brokerName"] == "broker-a" and props["maxMessageSize"] == str(4 * 1024 * 1024)


def test_update_applies_live_keys_and_persists_them(broker, tmp_path):
    b = broker
    path = Path(b.root) / "config" / "broker.properties"  # no -c file: 4.9's default place
    assert b.call(send_v1()).code == ResponseCode.SUCCESS  # the topic exists before auto-creation is off
    r = update(b, "maxMessageSize=16\nautoCreateTopicEnable=false\n")
    assert (r.code, r.remark) == (ResponseCode.SUCCESS, None)
    assert b.config.maxMessageSize == 16 and b.config.autoCreateTopicEnable is False
    assert parse_properties(path.read_text()) == {"autoCreateTopicEnable": "false", "maxMessageSize": "16"}
    version, props = get_config(b)
    assert version["counter"] == 1 and props["maxMessageSize"] == "16"
    r = b.call(send_v1(body=b"x" * 17))  # applied at once
    assert r.code == ResponseCode.MESSAGE_ILLEGAL and "maxMessageSize 16" in r.remark


def test_update_rewrites_the_file_the_broker_read(tmp_path):
    conf = tmp_path / "broker-a.properties"
    conf.write_text("# mine\nbrokerName=broker-a\nmaxMessageSize=1024\n")
    b = Broker(tmp_path / "store")
    try:
        b.config.config_path = str(conf)
        r = update(b, "maxMessageSize=2048\nnamesrvAddr=127.0.0.1:9876")
        assert r.code == ResponseCode.SUCCESS
        assert r.remark == f"saved in {conf}; applies at the next start: namesrvAddr"
        assert conf.read_text() == "# mine\nbrokerName=broker-a\nmaxMessageSize=2048\nnamesrvAddr=127.0.0.1:9876\n"
        assert b.config.maxMessageSize == 2048 and b.config.namesrvAddr is None  # restart keys: not live
    finally:
        b.stop()


def test_update_refusals_change_nothing(broker):
    b = broker
    path = Path(b.root) / "config" / "broker.properties"
    r = update(b, "maxMessageSize=16\nstorePathRootDir=/elsewhere\n")
    assert r.code == ResponseCode.SYSTEM_ERROR
    assert r.remark.startswith("storePathRootDir cannot be changed at run time: the store on disk")
    r = update(b, "brokerRole=SLAVE")
    assert r.code == ResponseCode.SYSTEM_ERROR and r.remark.startswith("brokerRole cannot be changed")
    r = update(b, "noSuchKey=1")
    assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, "noSuchKey is not a setting of this broker")
    r = update(b, "maxMessageSize=lots")
    assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, "maxMessageSize='lots': expected an integer")
    r = update(b, "brokerConfigPath=/tmp/x\nmaxMessageSize=16")  # 4.9's black list, 4.9's answer
    assert (r.code, r.remark) == (ResponseCode.NO_PERMISSION, "Can not update config in black list.")
    assert b.config.maxMessageSize == 4 * 1024 * 1024 and not path.exists()
    assert get_config(b)[0]["counter"] == 0
    r = update(b, "")  # 4.9: no body, nothing to do
    assert r.code == ResponseCode.SUCCESS


def test_broker_permission_is_live_and_announced(broker):
    b = broker
    before = b.server.topics.data_version["counter"]
    assert update(b, "brokerPermission=4").code == ResponseCode.SUCCESS  # read only
    assert b.server.topics.data_version["counter"] == before + 1  # re-registered with a new version
    r = b.call(send_v1())
    assert r.code == ResponseCode.NO_PERMISSION


# -- GET_BROKER_HA_STATUS -------------------------------------------------------------------------------
def test_ha_status_of_a_master_and_a_slave(tmp_path):
    m = Broker(tmp_path / "m", brokerRole="SYNC_MASTER")
    s = Broker(tmp_path / "s", brokerRole="SLAVE", haMasterAddress="127.0.0.1:10912")
    try:
        m.call(send_v1())
        info = json.loads(m.call(q(RequestCode.GET_BROKER_HA_STATUS)).body)
        assert info == {
            "master": True,
            "masterCommitLogMaxOffset": m.store.max_offset,
            "inSyncSlaveNums": 0,
            "haConnectionInfo": [],
            "haClientRuntimeInfo": {
                "activated": False,
                "lastReadTimestamp": 0,
                "lastWriteTimestamp": 0,
                "masterFlushOffset": 0,
                "maxOffset": 0,
                "transferredByteInSecond": 0,
            },
        }
        info = json.loads(s.call(q(RequestCode.GET_BROKER_HA_STATUS)).body)
        assert info["master"] is False and info["haConnectionInfo"] == []
        assert info["haClientRuntimeInfo"]["masterAddr"] == "127.0.0.1:10912"
        assert info["haClientRuntimeInfo"]["activated"] is False  # the fake reactor never connects
    finally:
        m.stop()
        s.stop()


def test_transfer_rates_are_per_second_and_forget_closed_connections():
    rates = TransferRates()

    class S:
        pass

    a, c = S(), S()
    rates.sample(0, [(id(a), 0), (id(c), 100)])
    rates.sample(1000, [(id(a), 5000), (id(c), 100)])
    assert (rates.of(a), rates.of(c)) == (5000, 0)
    rates.sample(3000, [(id(a), 9000)])  # c closed; 4000 bytes over 2 s
    assert rates.of(a) == 2000 and id(c) not in rates.rate and rates.of(c) == 0


# -- /metrics: the rocketmq-exporter's names ------------------------------------------------------------
def metric_lines(b, name):
    return [line for line in b.server.controller.metrics.render().splitlines() if line.startswith(name + "{")]


def test_exporter_names_and_labels(broker):
    b = broker
    for _ in range(6):
        b.call(send_v1(body=b"abc"))
    b.call(pull(group="CG", offset=0))
    b.server.offsets.commit("CG", TOPIC, 0, 2)
    seconds(b, 10)
    labels = (
        'cluster="DefaultCluster",brokerIP="127.0.0.1:10911",brokerHost="",des="V4_9_8",boottime="0",'
        'broker_version="409"'
    )
    assert metric_lines(b, "rocketmq_brokeruntime_msg_put_total_today_now") == [
        f"rocketmq_brokeruntime_msg_put_total_today_now{{{labels}}} 6.0"
    ]
    assert metric_lines(b, "rocketmq_brokeruntime_dispatch_behind_bytes") == [
        f"rocketmq_brokeruntime_dispatch_behind_bytes{{{labels}}} 0.0"
    ]
    assert metric_lines(b, "rocketmq_broker_tps") == [
        'rocketmq_broker_tps{cluster="DefaultCluster",brokerIP="127.0.0.1:10911",broker="broker-a"} 0.6'
    ]
    assert metric_lines(b, "rocketmq_producer_tps") == [
        f'rocketmq_producer_tps{{cluster="DefaultCluster",broker="broker-a",topic="{TOPIC}"}} 0.6'
    ]
    assert metric_lines(b, "rocketmq_consumer_tps") == [
        f'rocketmq_consumer_tps{{cluster="DefaultCluster",broker="broker-a",topic="{TOPIC}",group="CG"}} 0.6'
    ]
    # queue 0 holds 6 messages, CG committed 2
    assert metric_lines(b, "rocketmq_group_diff") == [
        f'rocketmq_group_diff{{group="CG",topic="{TOPIC}",countOfOnlineConsumers="0",msgModel="1"}} 4'
    ]
    assert metric_lines(b, "rocketmq_broker_commitlog_diff") == []  # no slaves


def test_grafana_dashboard_reads_only_metrics_the_brokers_export(tmp_path):
    dash = json.loads((REPO / "compose" / "grafana" / "rocketmq-ha.json").read_text())
    assert dash["uid"] and dash["title"] and dash["panels"]
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 10 and all(t["refId"] for p in dash["panels"] for t in p.get("targets", []))
    m = Broker(tmp_path / "m", brokerRole="SYNC_MASTER")
    s = Broker(tmp_path / "s", brokerRole="SLAVE", haMasterAddress="127.0.0.1:10912")
    try:
        exported = set(m.server.controller.metrics.metrics) | set(s.server.controller.metrics.metrics)
    finally:
        m.stop()
        s.stop()
    used = set()
    for e in exprs + [v["query"] for v in dash["templating"]["list"]]:
        for name in re.findall(r"\brocketmq_[a-z0-9_]+", e):
            used.add(re.sub(r"_(bucket|sum|count)$", "", name) if name.endswith(("_bucket", "_count")) else name)
    assert used - exported == set()
    # the panels the issue asks for
    for needed in (
        "rocketmq_ha_slave_lag_bytes",
        "rocketmq_sync_wait_outcomes_total",
        "rocketmq_broker_tps",
        "rocketmq_send_responses_total",
    ):
        assert needed in used
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))


def test_dledger_mode_reports_its_data_directory_s_disk_ratio(tmp_path):
    """4.9.8's getStorePathPhysic in DLedger mode is DLedger's data directory: commitLogDiskRatio (and
    commitLogDiskRatio_<that directory>) is its disk's ratio, not -1 for a commitlog/ that does not exist."""
    from .harness import Broker

    b = Broker(
        tmp_path / "dl",
        enableDLegerCommitLog="true",
        dLegerGroup="broker-a",
        dLegerPeers="n0-127.0.0.1:40914",
        dLegerSelfId="n0",
    )
    try:
        data = b.config.dledger_data_dir
        assert os.path.isdir(data) and not os.path.exists(b.config.commitlog_dir)
        t = runtime(b)
        assert 0 < float(t["commitLogDiskRatio"]) <= 1, t["commitLogDiskRatio"]
        assert t[f"commitLogDiskRatio_{data}"] == t["commitLogDiskRatio"]
        assert not any(k == f"commitLogDiskRatio_{b.config.commitlog_dir}" for k in t)
    finally:
        b.stop()
