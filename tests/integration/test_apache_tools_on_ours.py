"""Apache's own tools on our broker (`make test-apache ROCKETMQ_HOME=<dir>`; skipped without a distribution):

* 4.9.8's `mqadmin getBrokerConfig`, `exportConfigs` (a NullPointerException on ours once: it reads keys
  ours did not print) and `deleteExpiredCommitLog` against one of our brokers and our name server;
* 4.9.8's `mqadmin brokerStatus` and `getNamesrvConfig` print the lines they print for 4.9.8 (ours printed
  12 runtime keys of its own, left rocketmqHome out and printed two key pairs swapped);
* DLedger 0.3.1.2's own client (`DLedgerClient`, from the distribution's dledger jar) against a group of
  our DLedger nodes: it finds the leader through METADATA (50000), appends, and reads the entry back with
  GET (50002), which ours answered UNSUPPORTED (303).

The Java client below is this project's own few lines, compiled at test time against the distribution."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from rmqha.cluster.ports import free_block, free_broker_port
from rmqha.cluster.standalone import rpc
from rmqha.cluster.wait import wait_until
from rmqha.broker.remoting.codes import RequestCode

HOME = os.environ.get("ROCKETMQ_HOME")
JAVAC = shutil.which("javac")
WHY = (
    "ROCKETMQ_HOME is not set: run `make test-apache ROCKETMQ_HOME=<Apache RocketMQ 4.9.x binary distribution>`"
    if not HOME
    else ("" if JAVAC else "no javac on PATH (the DLedger client is compiled at test time)")
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.apache,
    pytest.mark.timeout(600),
    pytest.mark.skipif(bool(WHY), reason=WHY),
]

JAVA_OPT_EXT = "-Xms64m -Xmx128m -Xmn32m"
CLIENT = """
import io.openmessaging.storage.dledger.client.DLedgerClient;
import io.openmessaging.storage.dledger.protocol.*;

public class DlClient {
    public static void main(String[] a) throws Exception {
        DLedgerClient c = new DLedgerClient(a[0], a[1]);
        c.startup();
        AppendEntryResponse r = c.append("from-dledger-client".getBytes());
        System.out.println("APPEND " + r.getCode() + " " + r.getIndex() + " " + r.getLeaderId());
        GetEntriesResponse g = c.get(r.getIndex());
        System.out.println("GET " + g.getCode() + " " + g.getEntries().size() + " "
            + (g.getEntries().isEmpty() ? "-" : new String(g.getEntries().get(0).getBody())));
        c.shutdown();
        System.exit(0);
    }
}
"""


def spawn(args, log, cwd=None):
    return subprocess.Popen(args, stdout=open(log, "wb"), stderr=subprocess.STDOUT, cwd=cwd, start_new_session=True)


def mqadmin(tmp_path, *args) -> str:
    env = dict(os.environ, ROCKETMQ_HOME=HOME, JAVA_OPT_EXT=f"{JAVA_OPT_EXT} -Duser.home={tmp_path}")
    for _ in range(8):  # a loaded machine can time out the JVM's first RPC (710 ms): ask again
        p = subprocess.run([f"{HOME}/bin/mqadmin", *args], env=env, capture_output=True, text=True, timeout=120)
        out = p.stdout + p.stderr
        if not any(e in out for e in ("RemotingTimeoutException", "RemotingConnectException", "RemotingSendRequest")):
            return out
    return out


@pytest.fixture
def ours(tmp_path):
    """Our name server and one broker of ours registered with it."""
    ns_port, port = free_block(1), free_broker_port()
    conf = tmp_path / "broker.properties"
    conf.write_text(
        "brokerClusterName=FidCluster\nbrokerName=fid-broker\nbrokerId=0\nbrokerRole=ASYNC_MASTER\n"
        f"listenPort={port}\nnamesrvAddr=127.0.0.1:{ns_port}\nbrokerIP1=127.0.0.1\n"
        f"storePathRootDir={tmp_path / 'store'}\nmappedFileSizeCommitLog=1048576\nmaxHashSlotNum=100\nmaxIndexNum=400\n"
    )
    py = sys.executable
    procs = [spawn([py, "-m", "rmqha.broker.namesrv", "--port", str(ns_port)], tmp_path / "ns.log")]
    procs.append(spawn([py, "-m", "rmqha.broker", "-c", str(conf)], tmp_path / "broker.log"))
    addr = f"127.0.0.1:{port}"

    def up():
        try:
            return rpc(addr, RequestCode.GET_BROKER_RUNTIME_INFO, timeout=1).code == 0
        except OSError:
            return False

    wait_until(up, 30, "our broker did not come up")

    def registered():
        return b"fid-broker" in rpc(f"127.0.0.1:{ns_port}", RequestCode.GET_BROKER_CLUSTER_INFO, timeout=1).body

    wait_until(registered, 30, "our broker did not register with our name server")
    yield f"127.0.0.1:{ns_port}", addr
    for p in procs:
        p.terminate()
        p.wait(10)


def test_mqadmin_reads_our_broker_config_and_exports_it(ours, tmp_path):
    ns, addr = ours
    out = mqadmin(tmp_path, "getBrokerConfig", "-n", ns, "-b", addr)
    keys = {line.split("=")[0].strip() for line in out.splitlines() if "=" in line and not line.startswith("=")}
    from tests.unit.config.test_broker_config_keys import KEYS_4_9_8

    assert set(KEYS_4_9_8) <= keys, sorted(set(KEYS_4_9_8) - keys)
    out = mqadmin(tmp_path, "exportConfigs", "-n", ns, "-c", "FidCluster", "-f", str(tmp_path / "export"))
    assert "needBrokerProprties" not in out and "success" in out, out[-2000:]  # 4.9.8's NPE on a missing key
    exported = json.loads((tmp_path / "export" / "configs.json").read_text())
    got = exported["brokerConfigs"]["fid-broker"]
    assert (got["fileReservedTime"], got["useTLS"], got["filterServerNums"]) == ("72", "false", "0")
    out = mqadmin(tmp_path, "deleteExpiredCommitLog", "-n", ns, "-b", addr)
    assert "success" in out.lower() and "Exception" not in out, out[-2000:]


# mqadmin getNamesrvConfig against a 4.9.8 name server, on Java 17 (2026-11-29): the keys in this order
NAMESRV_LINES_4_9_8 = """serverSocketBacklog writeBufferHighWaterMark serverWorkerThreads serverSelectorThreads
    serverChannelMaxIdleTimeSeconds configBlackList writeBufferLowWaterMark serverSocketRcvBufSize
    serverAsyncSemaphoreValue kvConfigPath configStorePath clusterTest orderMessageEnable serverSocketSndBufSize
    serverOnewaySemaphoreValue serverCallbackExecutorThreads listenPort rocketmqHome productEnvName
    useEpollNativeSelector serverPooledByteBufAllocatorEnable""".split()


def test_mqadmin_broker_status_and_namesrv_config_print_4_9_8_s_lines(ours, tmp_path):
    from rmqha.cluster.implementations.apache import java_major
    from tests.unit.processors.test_admin_plane import KEYS_4_9_8 as RUNTIME_KEYS_4_9_8

    ns, addr = ours
    out = mqadmin(tmp_path, "brokerStatus", "-n", ns, "-b", addr)
    keys = {line.split(":")[0].strip() for line in out.splitlines() if ":" in line}
    per_path = ("commitLogDiskRatio_", "scheduleMessageOffset_")  # 4.9.8's keys named after a path or level
    assert {k for k in keys if not k.startswith(per_path)} == RUNTIME_KEYS_4_9_8, out[-3000:]
    out = mqadmin(tmp_path, "getNamesrvConfig", "-n", ns)
    keys = [line.split("=")[0].strip() for line in out.splitlines() if "=  " in line]
    # mqadmin prints a java.util.Properties: its order is 4.9.8's for 4.9.8's body order on Java 9+ (a
    # ConcurrentHashMap); Java 8's Hashtable orders the same keys otherwise
    assert (keys if java_major() >= 9 else sorted(keys)) == (
        NAMESRV_LINES_4_9_8 if java_major() >= 9 else sorted(NAMESRV_LINES_4_9_8)
    ), out[-3000:]


def test_dledger_s_own_client_finds_the_leader_appends_and_gets(tmp_path):
    (tmp_path / "DlClient.java").write_text(CLIENT)
    cp = f"{tmp_path}:{HOME}/lib/*"
    subprocess.run([JAVAC, "-cp", f"{HOME}/lib/*", "DlClient.java"], cwd=tmp_path, check=True, timeout=300)
    base = free_block(3)
    peers = ";".join(f"n{i}-127.0.0.1:{base + i}" for i in range(3))
    nodes = [
        spawn(
            [
                sys.executable,
                "-m",
                "rmqha.broker.dledger",
                "--group",
                "fidg",
                "--peers",
                peers,
                "--self-id",
                f"n{i}",
                "--store-dir",
                str(tmp_path / "dl"),
                "--data-file-size",
                "1048576",
                "--index-file-size",
                "65536",
            ],
            tmp_path / f"n{i}.log",
        )
        for i in range(3)
    ]
    try:
        wait_until(
            lambda: any("is LEADER" in (tmp_path / f"n{i}.log").read_text() for i in range(3)), 60, "no leader elected"
        )
        p = subprocess.run(
            ["java", "-Xmx64m", "-cp", cp, "DlClient", "fidg", peers],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=180,
        )
        lines = {
            line.split()[0]: line.split()[1:] for line in p.stdout.splitlines() if line.startswith(("APPEND", "GET"))
        }
        assert lines["APPEND"][0] == "200", p.stdout + p.stderr[-2000:]
        assert lines["GET"] == ["200", "1", "from-dledger-client"], p.stdout
    finally:
        for n in nodes:
            n.terminate()
            n.wait(10)
