"""The broker admin plane over real sockets, on a live SYNC_MASTER and its SLAVE (issue 24): HA status as
5.x's haStatus reads it, the runtime table, a config update written into the -c file, and the
rocketmq-exporter's commit-log diff on /metrics."""

from __future__ import annotations

import json
import urllib.request

import pytest

from rmqha.broker.config.properties import parse_properties
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.cluster.standalone import rpc
from rmqha.cluster.wait import wait_until

from .processes import master_and_slave
from ..unit.processors.harness import send_v1

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    with master_and_slave(tmp_path_factory.mktemp("admin-plane"), "broker-adm", role="SYNC_MASTER") as (_, m, s):
        yield m, s


def ha_status(addr):
    r = rpc(addr, RequestCode.GET_BROKER_HA_STATUS)
    assert r.code == ResponseCode.SUCCESS
    return json.loads(r.body)


def test_ha_status_runtime_info_and_exporter_diff(pair):
    master, slave = pair
    wait_until(lambda: ha_status(master.addr)["inSyncSlaveNums"] == 1, 15, "the slave reports to its master")
    req = send_v1(topic="AdminPlaneTopic", body=b"replicate me")
    r = rpc(master.addr, req.code, req.ext_fields, req.body)
    assert r.code == ResponseCode.SUCCESS, r.remark  # SYNC_MASTER: the slave acknowledged it
    info = ha_status(master.addr)
    [conn] = info["haConnectionInfo"]
    assert info["master"] is True and conn["inSync"] is True and conn["diff"] == 0
    assert conn["slaveAckOffset"] == info["masterCommitLogMaxOffset"] == conn["transferFromWhere"] > 0
    assert conn["addr"].startswith("127.0.0.1:")
    s = ha_status(slave.addr)
    assert s["master"] is False and s["haClientRuntimeInfo"]["activated"] is True
    assert s["haClientRuntimeInfo"]["masterAddr"] == f"127.0.0.1:{master.port + 1}"
    assert s["haClientRuntimeInfo"]["maxOffset"] == info["masterCommitLogMaxOffset"]

    table = json.loads(rpc(master.addr, RequestCode.GET_BROKER_RUNTIME_INFO).body)["table"]
    assert table["putMessageTimesTotal"] == "1" and table["commitLogMaxOffset"] == str(conn["slaveAckOffset"])
    assert len(table["putTps"].split(" ")) == 3 and table["brokerVersionDesc"] == "V4_9_8"

    with urllib.request.urlopen(f"{master.metrics_url}/metrics", timeout=2) as resp:
        text = resp.read().decode()
    [diff] = [line for line in text.splitlines() if line.startswith("rocketmq_broker_commitlog_diff{")]
    assert diff == (
        f'rocketmq_broker_commitlog_diff{{cluster="DefaultCluster",brokerIP="{conn["addr"]}",broker="broker-adm"}} 0'
    )


def test_update_broker_config_is_written_into_the_config_file(pair):
    master, _slave = pair
    r = rpc(master.addr, RequestCode.UPDATE_BROKER_CONFIG, body=b"maxMessageSize=65536\nhaTransferBatchSize=65536\n")
    assert r.code == ResponseCode.SUCCESS
    assert r.remark == f"saved in {master.conf}; applies at the next start: haTransferBatchSize"
    props = parse_properties(master.conf.read_text())
    assert props["maxMessageSize"] == "65536" and props["haTransferBatchSize"] == "65536"
    assert props["brokerName"] == "broker-adm"  # the rest of the file is kept
    r = rpc(master.addr, RequestCode.GET_BROKER_CONFIG)
    assert json.loads(r.ext_fields["version"])["counter"] == 1
    assert parse_properties(r.body.decode())["maxMessageSize"] == "65536"
    r = rpc(master.addr, RequestCode.UPDATE_BROKER_CONFIG, body=b"brokerRole=ASYNC_MASTER")
    assert r.code == ResponseCode.SYSTEM_ERROR and r.remark.startswith("brokerRole cannot be changed at run time")
