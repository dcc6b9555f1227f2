"""The `dledger` topology on the docker backend: three broker containers on one DLedger group, every
DLedger peer link through Toxiproxy (one proxy per direction).

`up` returns once one node is master and the others are in sync (rmqha/cluster/wait.py); sends to the
master are SEND_OK. Cutting the master's four peer proxies elects another master (so the peer links do
run through Toxiproxy, and chaos faults on them partition the group); after healing, killing the new
leader's container elects a third, which delivers every acknowledged message at its queue offset."""

from __future__ import annotations

import os
import time

import pytest

from rmqha.broker.remoting import json_body
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.store import record
from rmqha.cluster.handle import Cluster
from rmqha.cluster.ports import free_cluster_base
from rmqha.cluster.requests import props, send_v1
from rmqha.cluster.runfolder import using_run_root
from rmqha.cluster.standalone import rpc
from rmqha.cluster.topology import load_topology

from . import client5
from .docker_cluster import docker_unavailable_reason

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

TOPIC = "DLedgerDocker"
QUEUES = 4
# maxHeartBeatLeak (3) heartbeats of 2 s from the last one, a vote round (<= 1 s) and a lost one (3 s),
# the no-op's quorum and the 100 ms poll, and slack for a shared 2-core machine (as test_dledger_broker.py)
FAILOVER_BOUND_S = (3 + 1) * 2.0 + 1.0 + 3.0 + 0.5 + 2.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reason = docker_unavailable_reason()
    if reason:
        pytest.skip(f"docker integration tests: {reason}")
    topo = load_topology("dledger")
    base = free_cluster_base(topo, low=20000, high=32000, extra_offsets=(48,))
    assert base is not None, "no free 50-port block"
    # it-<pid>-: the prefix tests/integration/docker_cluster.py sweeps when a killed test leaves it
    with using_run_root(tmp_path_factory.mktemp("dledger-docker")):
        c = Cluster.up(
            f"it-{os.getpid()}-dl",
            "dledger",
            "docker",
            base_port=base,
            fresh=True,
            timeout=60,
            sets={"mappedFileSizeCommitLog": str(4 << 20)},
        )
    try:
        yield c
    finally:
        c.down(timeout=5)


def master(c: Cluster) -> str | None:
    """The node the name server names master (brokerId 0) of RaftNode00, when /status agrees."""
    resp = rpc(c.state["namesrv"]["endpoint"], RequestCode.GET_BROKER_CLUSTER_INFO, timeout=2)
    table = json_body.loads(resp.body).get("brokerAddrTable", {}) if resp.body else {}
    addr = ((table.get("RaftNode00") or {}).get("brokerAddrs") or {}).get("0")
    node = next((n for n in c.nodes if c.addr(n) == addr), None)
    st = c.status(node, timeout=1.0) if node else None
    if st and st["brokerId"] == 0 and st["role"] == "SYNC_MASTER" and st["dledger"]["role"] == "LEADER":
        return node
    return None


def send(c: Cluster, node: str, i: int):
    p = props(TAGS="t", KEYS=f"k{i}", UNIQ_KEY=f"U{i:05d}", WAIT="true")
    return rpc(
        c.addr(node),
        RequestCode.SEND_MESSAGE,
        send_v1(TOPIC, f"body-{i}".encode(), i % QUEUES, p).ext_fields,
        body=f"body-{i}".encode(),
        timeout=10,
    )


def pull_all(c: Cluster, node: str) -> dict[str, tuple[int, int]]:
    out = {}
    for q in range(QUEUES):
        offset = 0
        while True:
            resp = rpc(
                c.addr(node),
                RequestCode.PULL_MESSAGE,
                {
                    "consumerGroup": "dl-check",
                    "topic": TOPIC,
                    "queueId": q,
                    "queueOffset": offset,
                    "maxMsgNums": 32,
                    "sysFlag": 4,
                    "commitOffset": 0,
                    "suspendTimeoutMillis": 0,
                    "subscription": "*",
                    "subVersion": 0,
                },
                timeout=5,
            )
            if resp.code != ResponseCode.SUCCESS:
                break
            for _, r in record.iter_records(resp.body, 0, check_crc=True):
                if r.kind == record.Scan.MESSAGE:
                    out[r.message.uniq_key] = (r.message.queue_id, r.message.queue_offset)
            offset = int(resp.ext_fields["nextBeginOffset"])
    return out


def new_master_after(c: Cluster, old: str, what: str) -> tuple[str, float]:
    t0 = time.monotonic()
    m = c.wait_until(lambda: (lambda m: m if m and m != old else None)(master(c)), FAILOVER_BOUND_S + 5, what)
    return m, time.monotonic() - t0


@pytest.mark.timeout(180)  # the module's cluster starts in this test's setup
def test_the_5x_client_on_the_dledger_group(cluster):
    """The official 5.x client's whole surface (client5.surface) through the cluster's 5.x proxy, on the
    DLedger group's master (the partition and the kill below come after)."""
    client5.surface_on(cluster)


def test_dledger_in_containers_partition_and_leader_kill(cluster):
    c = cluster
    links = {p["name"]: p for p in c.links() if p["kind"] == "dledger"}
    assert len(links) == 6  # one per direction of each of the 3 peer links
    first = master(c)
    assert first is not None, "up returned without a master"
    # every node's dLegerPeers reach the others through toxiproxy only
    for n in c.nodes:
        peers = dict(p.split("-", 1) for p in c.node(n)["overrides"]["dLegerPeers"].split(";"))
        own = "n" + n[-1]
        assert peers.pop(own).startswith("0.0.0.0:")
        assert all(a.startswith("toxiproxy:") for a in peers.values()), peers

    c.create_topic(TOPIC, masters=[first], queues=QUEUES)
    acked = {}
    for i in range(20):
        r = send(c, first, i)
        assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
        acked[f"U{i:05d}"] = (int(r.ext_fields["queueId"]), int(r.ext_fields["queueOffset"]))

    # 1. partition the master from both peers through the proxies alone: the others elect a new one
    cut = [name for name, p in links.items() if first in (p["node"], p["peer"])]
    assert len(cut) == 4
    for name in cut:
        c.cut_link(name)
    second, t_part = new_master_after(c, first, "a new master while the old one is cut off by its proxies")
    print(f"partition: {second} master {t_part:.2f} s after cutting {first}'s peer links")
    for name in cut:
        c.heal_link(name)
    # the old master hears the higher term and follows again
    c.wait_until(
        lambda: (c.status(first, timeout=1.0) or {}).get("role") == "SLAVE",
        20,
        f"{first} a slave again after the partition heals",
    )

    for i in range(20, 30):
        r = send(c, second, i)
        assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
        acked[f"U{i:05d}"] = (int(r.ext_fields["queueId"]), int(r.ext_fields["queueOffset"]))

    # 2. kill the leader's container: a third master, holding every acknowledged message
    c.kill(second)
    third, t_kill = new_master_after(c, second, "a new master after the leader's container was killed")
    print(f"kill: {third} master {t_kill:.2f} s after killing {second}'s container")
    assert t_kill <= FAILOVER_BOUND_S
    assert pull_all(c, third) == acked
