"""A DLedger broker group with a cluster secret (clusterSecretFile, docs/dledger.md "Signed peer
traffic"): the brokers' own peer traffic is signed, so they elect, replicate and commit; a request on the
DLedger port that is not signed, or signed with another secret, is refused and counted."""

import json
import os

import pytest

from rmqha.broker.dledger import client
from rmqha.cluster.ports import free_cluster_base
from rmqha.cluster.topology import load_topology
from rmqha.cluster.wait import wait_until

from .test_dledger_broker import addrs, cli, send, status

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

SECRET = "a-cluster-secret-of-32-characters"


def test_a_dledger_broker_group_with_a_secret_signs_its_traffic_and_refuses_unsigned(tmp_path):
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET + "\n")
    base = free_cluster_base(load_topology("dledger"))
    assert base is not None, "no free 50-port block in this worker's slice"
    env = dict(os.environ, CLUSTER_RUN_ROOT=str(tmp_path / "run"))
    env.pop("CLUSTER_BASE_PORT", None)
    up = cli(
        env,
        *("up", "--topology", "dledger", "--backend", "local", "--name", "dls", "--base-port", str(base)),
        *("--set", f"clusterSecretFile={secret_file}"),
    )
    try:
        assert up.returncode == 0 and "is ready" in up.stdout + up.stderr, up.stderr + up.stdout
        state = json.loads((tmp_path / "run" / "dls" / "state.json").read_text())
        nodes = list(state["nodes"])
        leader_addr = addrs(state["namesrv"]["addr"])[0]
        for i in range(5):
            r = send(leader_addr, i)
            assert r.code == 0, (r.code, r.remark)
        leader_index = status(next(n for n in nodes if n["addr"] == leader_addr))["dledger"]["committedIndex"]
        assert leader_index >= 4
        wait_until(
            lambda: all(status(n)["dledger"]["committedIndex"] >= leader_index for n in nodes),
            15,
            "every member committed the signed group's sends",
        )
        follower = next(n for n in nodes if n["addr"] != leader_addr)
        port = int(follower["addr"].rsplit(":", 1)[1]) + 3  # DLedger's port: listenPort + 3 (topology.py)
        dl_addr = f"127.0.0.1:{port}"
        with pytest.raises(ConnectionError, match="remoting code 16: DLedger request refused: not signed"):
            client.append(dl_addr, "RaftNode00", "n0", b"unsigned")
        with pytest.raises(ConnectionError, match="remoting code 16: DLedger request refused: the signature"):
            client.append(dl_addr, "RaftNode00", "n0", b"wrong", secret="another-secret-0123456789")
        sts = {n["name"]: status(n)["dledger"] for n in nodes}
        assert all(s["signed"] for s in sts.values()), sts
        assert sts[follower["name"]]["refused_unsigned"] == 1
        assert sts[follower["name"]]["refused_bad_signature"] == 1
        # the brokers' own traffic was all signed right: nothing else refused, no answer rejected
        for s in sts.values():
            assert s["refused_by_peer"] == 0 and s["bad_answer_signatures"] == 0, s
            assert s["refused_stale"] == 0 and s["refused_replayed"] == 0, s
    finally:
        cli(env, "down", "--name", "dls")


def test_an_unreadable_secret_stops_the_broker_with_a_config_error(tmp_path):
    from rmqha.broker.config.properties import BrokerConfig, ConfigError
    from rmqha.broker.store.dledger_commitlog import DLedgerMessageStore

    short = tmp_path / "short"
    short.write_text("too-short\n")
    c = BrokerConfig.from_properties(
        {
            "brokerName": "B",
            "enableDLegerCommitLog": "true",
            "dLegerGroup": "B",
            "dLegerPeers": "n0-127.0.0.1:40911",
            "dLegerSelfId": "n0",
            "storePathRootDir": str(tmp_path / "s"),
            "clusterSecretFile": str(short),
        }
    )
    s = DLedgerMessageStore(c.storePathRootDir, c.commitlog_dir, store_host=("127.0.0.1", 10911))
    with pytest.raises(ConfigError, match="clusterSecretFile: the cluster secret in .* shorter than 16"):
        s.configure(c, reactor=None, clock=None)
