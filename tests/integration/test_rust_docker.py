"""rocketmq-rust's broker on the docker backend: the image `make images BROKER=rust` builds from the binary
`make peer-broker` made (images/build.sh rust).

Skipped without Docker, without the binary or without an image of it, each with the kit's reason (CI has
neither). The brokers are rocketmq-rust's, in containers of that image, on their broker.toml in the
mounted node folder; the name server is ours; Toxiproxy sits on every link as for ours. The kit reads them
only through what every 4.9 broker serves and their processes' TCP connections. The official C++ client
gets no answer from them (rust.OFFICIAL_CLIENT_REFUSED): the sends here are the kit's own requests, which
write their headers as 4.9's clients do.
"""

import socket
import struct
import tomllib

import pytest

from rmqha.broker.remoting.codec import decode_frame, encode
from rmqha.broker.remoting.codes import ResponseCode
from rmqha.cluster.requests import props, send_v1
from rmqha.rmqkit import RocketMQCluster
from rmqha.rmqkit.cluster import broker_unavailable_reason
from rmqha.rmqkit.cluster import unavailable_reason as docker_unavailable_reason

from .replica_checks import caught_up_offset, cut_ha_link

WHY = docker_unavailable_reason("docker") or broker_unavailable_reason("rust", None, "docker") or ""

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(900),
    pytest.mark.skipif(bool(WHY), reason=WHY),
]

TOPIC = "RustDocker"


def send(addr: str, body: str, timeout: float = 20.0):
    """SEND_MESSAGE to queue 0 as a 4.9 client writes it (rocketmq-rust refuses "0" for batch and unitMode)."""
    cmd = send_v1(
        topic=TOPIC,
        body=body.encode(),
        properties=props(KEYS=body, UNIQ_KEY=body, WAIT="true"),
        unitMode="false",
        batch="false",
    )
    host, _, port = addr.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(encode(cmd))
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack(">I", data[:4])[0]:
            chunk = s.recv(65536)
            assert chunk, f"{addr} closed the connection without an answer"
            data += chunk
    return decode_frame(data[4:])


def test_a_sync_group_of_rust_containers_replicates_and_waits_out_a_cut_ha_link(tmp_path):
    with RocketMQCluster("2m-2s-sync", "docker", broker="rust", run_root=tmp_path, timeout=300) as c:
        h = c.handle
        assert {h.node(n)["implementation"] for n in h.nodes} == {"rust"}
        for n in h.nodes:
            doc = tomllib.loads((h.run_dir / "nodes" / n / "broker.toml").read_text())
            assert doc["store"]["storePathRootDir"] == "/var/lib/rocketmq/store"  # the bind-mounted store
        table = {n.name: n for n in h.cluster_status().nodes}
        for name in ("broker-a", "broker-a-s"):
            assert table[name].error is None, (name, table[name].error)
        a = table["broker-a"].status
        assert a["implementation"] == "rust" and a["role"] == "SYNC_MASTER", a
        # its slave's HA connection, counted on its process in the container (through this machine's /proc)
        assert a["ha"]["connectionCount"] == 1, a
        assert table["broker-a-s"].status["haClient"]["state"] == "CONNECTED"

        c.create_topic(TOPIC, masters=["broker-a"])
        addr = h.addr("broker-a")  # through Toxiproxy
        codes = [send(addr, f"rust-docker-{i}").code for i in range(10)]
        assert codes.count(ResponseCode.SUCCESS) >= 8 and set(codes) <= {0, ResponseCode.FLUSH_SLAVE_TIMEOUT}, codes
        mo = caught_up_offset(h, "broker-a", "broker-a-s", 120)
        link = cut_ha_link(h, "broker-a-s", "broker-a")
        r = send(addr, "while-cut")
        # rocketmq-rust never answers SLAVE_NOT_AVAILABLE: it waits slaveTimeout for the slave (rust.py)
        assert r.code == ResponseCode.FLUSH_SLAVE_TIMEOUT, (r.code, r.remark)
        stored = h.max_offset("broker-a")
        assert stored > mo and h.max_offset("broker-a-s") == mo  # stored on the master alone

        h.heal_link(link)
        assert caught_up_offset(h, "broker-a", "broker-a-s", 120) == stored
