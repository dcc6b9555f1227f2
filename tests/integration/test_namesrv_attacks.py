"""A live attack on a real name server process (issue 25): a KV flood, a forged registration that would
point a slave at a fake master, a huge register body, and a filter-server bomb. The routes of the real
broker stay intact and the name server keeps answering. With a cluster secret the forgery is refused
outright; without one (4.9's behaviour) the flood, the huge body and the bomb are still bounded."""

from __future__ import annotations

import os
import time

import pytest

from rmqha.broker.namesrv import guard
from rmqha.broker.namesrv.register_body import RegisterBrokerBody, TopicConfig, body_crc32
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.cluster.standalone import BrokerProcess, NameServerProcess, rpc
from rmqha.cluster.wait import wait_until

pytestmark = pytest.mark.integration
SECRET = "a-cluster-secret-for-the-test-0123"


def process_cost(ns) -> tuple[float, int, int]:
    """The name server's CPU seconds, resident bytes and log size so far."""
    fields = open(f"/proc/{ns.proc.pid}/stat").read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
    rss = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
    return cpu, rss, ns.log_path.stat().st_size


def forged_register(ns_addr, broker_name, addr, ha, topics=1, compressed=False, names=(), filters=()):
    names = names or [f"F{i}" for i in range(topics)]
    body = RegisterBrokerBody({n: TopicConfig(n, 4, 4, 6) for n in names}, filter_servers=list(filters)).encode(
        compressed
    )
    fields = {
        "brokerName": broker_name,
        "brokerAddr": addr,
        "clusterName": "DefaultCluster",
        "haServerAddr": ha,
        "brokerId": "0",
        "compressed": str(compressed).lower(),
        "bodyCrc32": str(body_crc32(body)),
    }
    return rpc(ns_addr, RequestCode.REGISTER_BROKER, fields, body, timeout=20)


@pytest.mark.parametrize("secured", [True, False], ids=["cluster-secret", "as-4.9"])
def test_routes_survive_a_kv_flood_a_forged_registration_and_a_huge_body(tmp_path, secured):
    args, extra = [], {}
    if secured:
        (tmp_path / "secret").write_text(SECRET + "\n")
        args, extra = (
            ["--cluster-secret-file", str(tmp_path / "secret")],
            {"clusterSecretFile": str(tmp_path / "secret")},
        )
    ns = NameServerProcess(tmp_path, args=args).start()
    broker = None
    try:
        broker = BrokerProcess(tmp_path, "broker-a", ns.addr, extra=extra).start()
        # 1. the KV flood of the finding: 18 values of 340,000 CJK characters (1 MB each in UTF-8)
        kv = [
            rpc(
                ns.addr,
                RequestCode.PUT_KV_CONFIG,
                {"namespace": "ORDER_TOPIC_CONFIG", "key": f"k{i}", "value": "\u4e2d" * 340_000},
            ).code
            for i in range(18)
        ]
        assert ResponseCode.SUCCESS not in kv
        # 2. a forged master for broker-a's group, and a stranger's group
        r = forged_register(ns.addr, "broker-a", "127.0.0.1:1", "127.0.0.1:2")
        if secured:
            assert r.code == ResponseCode.NO_PERMISSION, r.remark
        # 3. 300,000 topics in one compressed body: refused, costing the name server little work (its CPU
        # seconds, not wall time, so a loaded machine does not fail it), memory and log (the finding:
        # a 4.5 s stall, +131 MiB, 32 MiB of log)
        before = process_cost(ns)
        t0 = time.monotonic()
        r = forged_register(ns.addr, "evil", "127.0.0.1:3", "127.0.0.1:4", topics=300_000, compressed=True)
        took = time.monotonic() - t0
        cpu_s, rss, log_bytes = (a - b for a, b in zip(process_cost(ns), before))
        assert r.code != ResponseCode.SUCCESS, (r.code, r.remark)
        assert cpu_s < 3 and rss < 64 << 20 and log_bytes < 64 << 10, (cpu_s, rss, log_bytes)
        print(
            f"300,000-topic body refused in {took:.2f} s ({cpu_s:.2f} s CPU, +{rss >> 20} MiB, "
            f"+{log_bytes} bytes of log): {r.remark}"
        )
        # 4. the filter-server bomb: three fake brokers naming the real broker's topic with 16,000 filter
        # servers of 1 KB each (34 KB compressed) once made its route reply 48 MB, past the 16 MiB frame
        for k in range(3):
            r = forged_register(
                ns.addr,
                f"bomb{k}",
                f"127.0.0.1:{20 + k}",
                "",
                names=["TBW102"],
                compressed=True,
                filters=["x" * 1000] * 16_000,
            )
            assert r.code != ResponseCode.SUCCESS, (r.code, r.remark)
        # the real broker re-registers (every 10 s here) and its route is what it says
        wait_until(
            lambda: ns.broker_addrs("broker-a").get(0) == broker.addr, 25, "broker-a's own address as its master"
        )
        route = rpc(ns.addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"})
        assert route.code == ResponseCode.SUCCESS and broker.addr.encode() in route.body
        assert len(route.body) < 64 << 10 and b"bomb" not in route.body, len(route.body)
        assert "evil" not in ns.cluster_info().get("brokerAddrTable", {})
        # every request is answered, unknown ones too
        assert rpc(ns.addr, 9999).code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    finally:
        if broker is not None:
            broker.stop()
        ns.stop()


def test_a_signed_broker_registers_and_unregisters(tmp_path):
    (tmp_path / "secret").write_text(SECRET)
    ns = NameServerProcess(tmp_path, args=["--cluster-secret-file", str(tmp_path / "secret")]).start()
    broker = BrokerProcess(tmp_path, "broker-a", ns.addr, extra={"clusterSecretFile": str(tmp_path / "secret")})
    try:
        broker.start()  # waits until the name server lists it
        fields = guard.sign_cluster({"namespace": "NS", "key": "k", "value": "v"}, b"", SECRET)
        assert rpc(ns.addr, RequestCode.PUT_KV_CONFIG, fields).code == ResponseCode.SUCCESS
    finally:
        broker.stop()
    wait_until(lambda: not ns.broker_addrs("broker-a"), 10, "the clean stop's signed UNREGISTER")
    ns.stop()
