"""The kit on Apache RocketMQ 4.9.x (a binary distribution the user brings): `make test-apache ROCKETMQ_HOME=<dir>`.

Skipped without ROCKETMQ_HOME. Everything here reads the 4.9 brokers only through what 4.9 serves
(rmqha/cluster/implementations/runtime_status.py): its admin API, the name server and the process.
"""

import os
import socket
import struct
from pathlib import Path

import pytest

from rmqha.broker.remoting.codec import decode_frame, encode
from rmqha.cluster.implementations import parse_choice, unavailable_reason
from rmqha.cluster.requests import props, send_v1
from rmqha.rmqkit import RocketMQCluster

from .replica_checks import commitlog_bytes

HOME = os.environ.get("ROCKETMQ_HOME")
WHY = "no Apache RocketMQ 4.9.x distribution: run `make test-apache ROCKETMQ_HOME=<dir>`"
if HOME:
    WHY = unavailable_reason(parse_choice("apache", home=HOME)) or ""

pytestmark = [
    pytest.mark.integration,
    pytest.mark.apache,
    pytest.mark.timeout(300),
    pytest.mark.skipif(not HOME or bool(WHY), reason=WHY or "ROCKETMQ_HOME is not set"),
]


def request(addr: str, cmd, timeout: float = 5.0):
    host, _, port = addr.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(encode(cmd))
        head = b""
        while len(head) < 4:
            head += s.recv(4 - len(head))
        (n,) = struct.unpack(">I", head)
        body = b""
        while len(body) < n:
            chunk = s.recv(n - len(body))
            assert chunk, "connection closed mid-reply"
            body += chunk
    return decode_frame(body)


def send(addr: str, topic: str, count: int) -> list[int]:
    codes = []
    for i in range(count):
        cmd = send_v1(topic=topic, body=b"m%05d" % i, properties=props(KEYS=f"k{i}", UNIQ_KEY=f"U{i}", WAIT="true"))
        codes.append(request(addr, cmd).code)
    return codes


def test_sync_master_and_slave_all_apache(tmp_path):
    with RocketMQCluster("2m-2s-sync", "local", broker="apache", rocketmq_home=HOME, run_root=tmp_path) as c:
        h = c.handle
        table = h.cluster_status()
        a = next(n for n in table.nodes if n.name == "broker-a")
        assert a.status["implementation"] == "apache" and a.status["brokerVersion"].startswith("V4_9")
        assert a.status["ha"]["connectionCount"] == 1  # its slave's HA connection, seen on the process
        assert "ha.slaves[].slaveAckOffset" in a.status["unavailable"]
        # each node's properties are in its run folder; the repository's conf file is not touched
        conf = Path(h.node("broker-a")["conf"])
        before = conf.read_text()
        assert (h.run_dir / "nodes" / "broker-a" / "broker.properties").is_file()

        # SEND_OK once the slave has it; FLUSH_SLAVE_TIMEOUT (12) when it took longer than syncFlushTimeout
        # on a loaded machine: stored on the master, replicated after (checked byte for byte below)
        codes = send(h.addr("broker-a"), "ApacheSync", 20)
        assert set(codes) <= {0, 12} and codes.count(0) >= 10, codes
        h.wait_caught_up(60)
        mo = h.max_offset("broker-a")
        assert mo > 0 and h.max_offset("broker-a-s") == mo
        assert commitlog_bytes(h.store_path("broker-a"), mo) == commitlog_bytes(h.store_path("broker-a-s"), mo)

        h.kill("broker-a-s")
        assert not h.running("broker-a-s")
        h.start("broker-a-s", timeout=90)
        assert set(send(h.addr("broker-a"), "ApacheSync", 5)) <= {0, 12}
        h.wait_caught_up(60)
        assert conf.read_text() == before


def test_mixed_groups_replicate_both_ways(tmp_path):
    """Our master with Apache's slave (broker-a), Apache's master with our slave (broker-b)."""
    spec = "ours,broker-a-s=apache,broker-b=apache"
    with RocketMQCluster("2m-2s-async", "local", broker=spec, rocketmq_home=HOME, run_root=tmp_path) as c:
        h = c.handle
        assert [h.node(n)["implementation"] for n in h.nodes] == ["ours", "apache", "apache", "ours"]
        for m in ("broker-a", "broker-b"):
            assert send(h.addr(m), "ApacheMixed", 30) == [0] * 30
        h.wait_caught_up(60)
        for m, s in (("broker-a", "broker-a-s"), ("broker-b", "broker-b-s")):
            mo = h.max_offset(m)
            assert mo > 0 and h.max_offset(s) == mo
            assert commitlog_bytes(h.store_path(m), mo) == commitlog_bytes(h.store_path(s), mo)


def test_dledger_group_of_apache_brokers_elects_again(tmp_path):
    with RocketMQCluster("dledger", "local", broker="apache", rocketmq_home=HOME, run_root=tmp_path) as c:
        h = c.handle
        leader = h.dledger_leader("RaftNode00")
        assert leader is not None
        assert send(h.addr(leader), "ApacheDLedger", 10) == [0] * 10
        h.wait_caught_up(60)
        h.kill(leader)
        new = h.wait_until(
            lambda: (lambda x: x if x and x != leader else None)(h.dledger_leader("RaftNode00")),
            60,
            "another DLedger leader",
        )
        h.wait_until(lambda: send(h.addr(new), "ApacheDLedger", 1) == [0], 60, "the new leader takes a send")
        h.start(leader, timeout=90)
        h.wait_caught_up(90)


def test_acl_on_apache_brokers_reads_the_kit_file_in_each_node_folder(tmp_path):
    """--acl with 4.9.8: each broker reads the kit's plain_acl.yml through its own home in its run folder
    (4.9 has no aclConfigFile), so the kit's signed requests are served, an unsigned send is refused with
    4.9's reason, and the distribution's conf/plain_acl.yml is neither read nor written."""
    from rmqha.broker.acl.rules import sign_request

    dist_acl = Path(HOME) / "conf" / "plain_acl.yml"
    before = dist_acl.read_bytes() if dist_acl.exists() else None
    with RocketMQCluster("2m-noslave", "local", broker="apache", rocketmq_home=HOME, run_root=tmp_path, acl=True) as c:
        h = c.handle
        creds = h.credentials
        table = h.cluster_status()
        for n in table.nodes:  # the kit's status requests are signed with its account: every node answers
            assert n.error is None and n.status and n.status["implementation"] == "apache", (n.name, n.error)
        for name in h.nodes:
            link = h.run_dir / "nodes" / name / "rocketmq-home" / "conf" / "plain_acl.yml"
            assert link.resolve() == (h.run_dir / "nodes" / name / "store" / "config" / "plain_acl.yml").resolve()

        addr = h.addr("broker-a")
        ok = sign_request(send_v1(topic="ApacheAcl", body=b"signed"), creds["accessKey"], creds["secretKey"])
        assert request(addr, ok).code == 0
        unsigned = request(addr, send_v1(topic="ApacheAcl", body=b"unsigned"))
        assert unsigned.code != 0 and "No accessKey is configured" in (unsigned.remark or ""), unsigned.remark
        wrong = sign_request(send_v1(topic="ApacheAcl", body=b"wrong"), creds["accessKey"], "0" * 32)
        refused = request(addr, wrong)
        assert refused.code != 0 and "Check signature failed" in (refused.remark or ""), refused.remark
    assert (dist_acl.read_bytes() if dist_acl.exists() else None) == before
