"""updateBrokerConfig on a local cluster rewrites the node's copy in its run folder, never the repository's
compose/<topology>/<node>.properties (it once rewrote the tracked file), and the value survives a restart of
the node, as 4.9 keeps its file."""

from __future__ import annotations

import hashlib
import os

import pytest

from rmqha.broker.config.properties import parse_properties
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.cluster import runfolder as rf
from rmqha.cluster.handle import Cluster
from rmqha.cluster.ports import free_cluster_base
from rmqha.cluster.standalone import rpc
from rmqha.cluster.topology import COMPOSE_DIR, load_topology

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def digests() -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(COMPOSE_DIR.glob("*/*.properties"))}


def broker_config(addr: str) -> dict[str, str]:
    r = rpc(addr, RequestCode.GET_BROKER_CONFIG)
    assert r.code == ResponseCode.SUCCESS
    return parse_properties(r.body.decode())


def test_update_broker_config_writes_the_run_folder_copy_only(tmp_path, monkeypatch):
    monkeypatch.setenv("CLUSTER_RUN_ROOT", str(tmp_path / "run"))
    before = digests()
    base = free_cluster_base(load_topology("2m-noslave"))
    name = f"cfg-{os.getpid()}"
    c = Cluster.up(name, "2m-noslave", "local", base_port=base, timeout=90)
    try:
        addr = c.addr("broker-a")
        props_file = rf.node_properties(rf.run_dir(name), "broker-a")
        assert parse_properties(props_file.read_text())["listenPort"] == str(base)
        body = b"defaultTopicQueueNums=5\nsyncFlushTimeout=4321\n"
        r = rpc(addr, RequestCode.UPDATE_BROKER_CONFIG, body=body)
        assert r.code == ResponseCode.SUCCESS, r.remark
        assert str(props_file) in (r.remark or "")  # "saved in <file>; applies at the next start: ..."
        assert digests() == before, "updateBrokerConfig changed a tracked compose/ file"
        saved = parse_properties(props_file.read_text())
        assert (saved["defaultTopicQueueNums"], saved["syncFlushTimeout"]) == ("5", "4321")
        assert broker_config(addr)["defaultTopicQueueNums"] == "5"
        c.restart("broker-a")
        got = broker_config(addr)
        assert (got["defaultTopicQueueNums"], got["syncFlushTimeout"]) == ("5", "4321")
    finally:
        c.down()
    assert digests() == before
