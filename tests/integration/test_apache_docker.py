"""Apache RocketMQ 4.9.x on the docker backend: `make test-apache ROCKETMQ_HOME=<dir>` (which builds the
image from that distribution first: images/build.sh apache).

Skipped without ROCKETMQ_HOME, without Docker, or without an image of that distribution, each with the
reason. The brokers and the name server are 4.9's, in containers of the image made from the distribution;
Toxiproxy sits on every link as for ours. The kit reads them only through what 4.9 serves
(rmqha/cluster/implementations/runtime_status.py) and their JVMs' TCP connections.
"""

import os

import pytest

from rmqha.rmqkit import RocketMQCluster
from rmqha.rmqkit.cluster import broker_unavailable_reason
from rmqha.rmqkit.cluster import unavailable_reason as docker_unavailable_reason

from .docker_cluster import FLUSH_SLAVE_TIMEOUT, SEND_OK, SLAVE_NOT_AVAILABLE, produce, produce_status
from .replica_checks import caught_up_offset, cut_ha_link

HOME = os.environ.get("ROCKETMQ_HOME")
WHY = "ROCKETMQ_HOME is not set: run `make test-apache ROCKETMQ_HOME=<dir of a 4.9.x binary distribution>`"
if HOME:
    WHY = docker_unavailable_reason("docker") or broker_unavailable_reason("apache", HOME, "docker") or ""

pytestmark = [
    pytest.mark.integration,
    pytest.mark.apache,
    pytest.mark.timeout(900),
    pytest.mark.skipif(bool(WHY), reason=WHY),
]

TOPIC = "ApacheDocker"


def test_sync_group_of_apache_containers_replicates_and_survives_a_cut_ha_link(tmp_path):
    with RocketMQCluster(
        "2m-2s-sync", "docker", broker="apache", rocketmq_home=HOME, run_root=tmp_path, timeout=300
    ) as c:
        h = c.handle
        assert {h.node(n)["implementation"] for n in h.nodes} == {"apache"}
        assert h.state["broker"] == "apache"  # 4.9's name server too
        for n in h.nodes:
            props = h.run_dir / "nodes" / n / "broker.properties"
            assert "haAllowedAddresses" not in props.read_text()  # the node's own file, 4.9's keys only
        table = {n.name: n for n in h.cluster_status().nodes}
        a = table["broker-a"].status
        assert a["implementation"] == "apache" and a["brokerVersion"].startswith("V4_9"), a
        # its slave's HA connection, counted on its JVM in the container (through this machine's /proc)
        assert a["ha"]["connectionCount"] == 1, a
        assert table["broker-a-s"].status["haClient"]["state"] == "CONNECTED"

        c.create_topic(TOPIC, masters=["broker-a"])
        bodies = [f"apache-docker-{i}" for i in range(20)]
        results = produce(h.namesrv, TOPIC, bodies)  # the official client, through Toxiproxy
        statuses = [r.get("status") for r in results]
        assert set(statuses) <= {SEND_OK, FLUSH_SLAVE_TIMEOUT} and statuses.count(SEND_OK) >= 10, results
        mo = caught_up_offset(h, "broker-a", "broker-a-s", 90)
        link = cut_ha_link(h, "broker-a-s", "broker-a")
        r = produce_status(h.namesrv, TOPIC, "while-cut")
        assert r.get("status") in (SLAVE_NOT_AVAILABLE, FLUSH_SLAVE_TIMEOUT), r
        stored = h.max_offset("broker-a")
        assert stored > mo and h.max_offset("broker-a-s") == mo  # stored on the master alone

        h.heal_link(link)
        assert caught_up_offset(h, "broker-a", "broker-a-s", 120) == stored


def test_acl_on_apache_containers_reads_the_kit_file_in_each_node_folder(tmp_path):
    """--acl on the docker backend: each 4.9 broker's home is in its mounted node folder, its
    conf/plain_acl.yml a relative link to the kit's file in its store, so the kit's signed requests are
    served and an unsigned send is refused with 4.9's reason."""
    from rmqha.broker.acl.rules import sign_request
    from rmqha.cluster.requests import send_v1

    from .test_apache_broker import request

    with RocketMQCluster(
        "2m-noslave", "docker", broker="apache", rocketmq_home=HOME, run_root=tmp_path, timeout=300, acl=True
    ) as c:
        h = c.handle
        creds = h.credentials
        for n in h.cluster_status().nodes:
            assert n.error is None and n.status and n.status["implementation"] == "apache", (n.name, n.error)
        addr = h.addr("broker-a")
        ok = sign_request(send_v1(topic=TOPIC, body=b"signed"), creds["accessKey"], creds["secretKey"])
        assert request(addr, ok).code == 0
        unsigned = request(addr, send_v1(topic=TOPIC, body=b"unsigned"))
        assert unsigned.code != 0 and "No accessKey is configured" in (unsigned.remark or ""), unsigned.remark
