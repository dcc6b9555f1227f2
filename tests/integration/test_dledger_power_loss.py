"""Power loss on the leader of a DLedger group (topology dledger, local backend): Cluster.power_loss SIGKILLs
it and cuts its dledger data and index files at the positions its last fsync covered. A minority lost
power: another node is elected, every message acknowledged with WAIT is still pullable from it at its queue
offset, and the old leader, started again, recovers from the cut files and catches up (its committed and
end index equal to the new leader's)."""

import json
import os

import pytest

from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.cluster.handle import Cluster
from rmqha.cluster.ports import free_cluster_base
from rmqha.cluster.standalone import rpc
from rmqha.cluster.topology import load_topology
from rmqha.cluster.wait import wait_until

from .test_dledger_broker import (
    DATA_FILE,
    FAILOVER_BOUND_S,
    QUEUES,
    REPO,
    TOPIC,
    addrs,
    cli,
    pull_all,
    send,
    try_status,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def dl(node) -> dict:
    return (try_status(node) or {}).get("dledger") or {}


def test_power_loss_on_the_leader_loses_no_acknowledged_message(tmp_path, monkeypatch):
    topo = load_topology("dledger")
    base = free_cluster_base(topo)
    assert base is not None, "no free 50-port block in this worker's slice"
    run_root = tmp_path / "run"
    env = dict(os.environ, CLUSTER_RUN_ROOT=str(run_root), PYTHONPATH=str(REPO))
    env.pop("CLUSTER_BASE_PORT", None)
    up = cli(
        env,
        "up",
        *("--topology", "dledger", "--backend", "local", "--name", "dlp", "--base-port", str(base)),
        *("--set", f"mappedFileSizeCommitLog={DATA_FILE}"),
    )
    try:
        assert up.returncode == 0, up.stderr + up.stdout
        monkeypatch.setenv("CLUSTER_RUN_ROOT", str(run_root))
        c = Cluster.attach("dlp")
        state = json.loads((run_root / "dlp" / "state.json").read_text())
        namesrv = state["namesrv"]["addr"]
        nodes = {n["name"]: n for n in state["nodes"]}
        by_addr = {n["addr"]: n for n in nodes.values()}
        leader = by_addr[addrs(namesrv)[0]]
        r = rpc(
            leader["addr"],
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {
                "topic": TOPIC,
                "defaultTopic": "TBW102",
                "readQueueNums": QUEUES,
                "writeQueueNums": QUEUES,
                "perm": 6,
                "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": 0,
                "order": "false",
            },
        )
        assert r.code == ResponseCode.SUCCESS, r.remark
        acked = {}
        for i in range(60):
            r = send(leader["addr"], i)
            assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
            acked[f"U{i:05d}"] = (int(r.ext_fields["queueId"]), int(r.ext_fields["queueOffset"]))

        # the durable positions are reported, and reach the end of the log once the flusher ran
        before = dl(leader)
        assert before["durableDataPos"] <= c.status(leader["name"])["dledger"]["durableDataPos"]
        wait_until(
            lambda: (lambda d: d.get("durableIndexPos") == (d["endIndex"] + 1) * 32)(dl(leader)),
            10,
            "the leader's index fsynced to its end",
        )

        c.power_model = "reported"  # the cut at the reported positions; crashfs: test_power_crashfs.py
        info = c.power_loss(leader["name"])
        print("power loss:", info)
        assert info["recordDurable"] is not None  # read from dledger-<selfId>/durable after the kill
        assert info["durableDataPos"] > 0 and info["durableIndexPos"] >= 60 * 32
        assert not c.backend.process_state(leader["name"]).running  # left stopped

        def new_master():
            node = by_addr.get(addrs(namesrv).get(0))
            if node is None or node is leader:
                return None
            st = try_status(node)
            return node if st and st["brokerId"] == 0 and st["role"] == "SYNC_MASTER" else None

        master = wait_until(new_master, FAILOVER_BOUND_S + 10, "a new master after the leader's power loss")
        assert pull_all(master["addr"]) == acked
        for i in range(60, 66):  # the group goes on while the old leader is down
            r = send(master["addr"], i)
            assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
            acked[f"U{i:05d}"] = (int(r.ext_fields["queueId"]), int(r.ext_fields["queueOffset"]))

        c.start(leader["name"], timeout=60)

        def caught_up():
            m, o = dl(master), dl(leader)
            return (
                o.get("role") == "FOLLOWER"
                and o.get("committedIndex") == m.get("committedIndex")
                and o.get("endIndex") == m.get("endIndex")
            )

        wait_until(caught_up, 30, "the old leader caught up with the new one")
        assert pull_all(master["addr"]) == acked
    finally:
        down = cli(env, "down", "--name", "dlp", timeout=60)
        assert down.returncode == 0, down.stderr
