"""A master and a slave as two real processes, started from two .properties files."""

import filecmp
import json
import os
import signal
import socket
import struct
import urllib.request

import pytest

from rmqha.broker.ha import transport
from rmqha.broker.store.message_store import MessageStore
from rmqha.broker.store.record import Message
from rmqha.cluster import process
from rmqha.cluster.ports import free_broker_port
from rmqha.cluster.standalone import _ProcView, metric
from rmqha.cluster.wait import ProcessExited, wait_until

pytestmark = pytest.mark.integration

FILE_SIZE = 1 << 20


def free_port_block():
    """A broker's listenPort with listenPort - 2 (VIP channel) .. listenPort + 2 free (rmqha/cluster/ports.py)."""
    return free_broker_port()


def write_conf(path, **props):
    path.write_text("\n".join(f"{k}={v}" for k, v in props.items()) + "\n")
    return path


class Broker:
    """A broker started from a .properties file by the shared launcher (rmqha/cluster/process.py)."""

    def __init__(self, conf, log):
        self.conf, self.log, self.rec = conf, log, None
        text = conf.read_text()
        self.port = int(text.split("listenPort=")[1].split()[0])

    @property
    def proc(self):
        return _ProcView(self.rec) if self.rec else None

    def start(self):
        self.rec = process.spawn(process.broker_command(self.conf), self.log, process.child_env())
        wait_until(
            lambda: self.status() is not None,
            20,
            f"broker {self.conf.name} did not start; see {self.log}",
            interval=0.05,
        )

    def status(self):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port + 2}/status", timeout=1) as r:
                return json.load(r)
        except OSError:
            if not process.is_running(self.rec):
                raise ProcessExited(f"broker exited:\n{open(self.log).read()[-3000:]}") from None
            return None

    def metrics(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port + 2}/metrics", timeout=2) as r:
            return r.read().decode()

    def stop(self, sig=signal.SIGTERM):
        process.stop(self.rec, 10, sig)


def append_offline(store_dir, n, start):
    """Write messages into a stopped master's store, as its own send path would have."""
    s = MessageStore(str(store_dir), commitlog_file_size=FILE_SIZE)
    s.start()
    for i in range(start, start + n):
        s.put_message(
            Message(
                topic="TopicTest",
                body=os.urandom(700),
                queue_id=i % 4,
                properties={"UNIQ_KEY": f"K{i}", "TAGS": "TagA"},
            )
        )
    end = s.max_offset
    s.shutdown()
    return end


def identical(a, b):
    names = sorted(os.listdir(b))
    return names and all(filecmp.cmp(os.path.join(a, n), os.path.join(b, n), shallow=False) for n in names)


@pytest.fixture(params=[True, False], ids=["splice", "recv-copy"])
def pair(tmp_path, request):
    """A master and its slave; the slave stores with splice (the default) or recv_into + pwrite."""
    mport, sport = free_port_block(), free_port_block()
    master_store, slave_store = tmp_path / "master", tmp_path / "slave"
    common = dict(
        brokerClusterName="DefaultCluster",
        brokerName="broker-a",
        flushDiskType="ASYNC_FLUSH",
        mappedFileSizeCommitLog=FILE_SIZE,
        brokerIP1="127.0.0.1",
        haSendHeartbeatInterval=1000,
        haSlaveZeroCopy=str(request.param).lower(),
    )
    mconf = write_conf(
        tmp_path / "broker-a.properties",
        brokerId=0,
        brokerRole="SYNC_MASTER",
        listenPort=mport,
        storePathRootDir=master_store,
        **common,
    )
    sconf = write_conf(
        tmp_path / "broker-a-s.properties",
        brokerId=1,
        brokerRole="SLAVE",
        listenPort=sport,
        storePathRootDir=slave_store,
        haMasterAddress=f"127.0.0.1:{mport + 1}",
        **common,
    )
    m, s = Broker(mconf, tmp_path / "master.log"), Broker(sconf, tmp_path / "slave.log")
    yield m, s, master_store, slave_store, request.param
    m.stop()
    s.stop()


def caught_up(m, s):
    ms, ss = m.status(), s.status()
    return (
        ms
        and ss
        and ss["maxPhyOffset"] == ms["maxPhyOffset"]
        and ms["ha"]["slaves"]
        and ms["ha"]["slaves"][0]["slaveAckOffset"] == ms["maxPhyOffset"]
    )


def test_two_processes_replicate_and_resume_after_either_restarts(pair):
    m, s, mdir, sdir, zero_copy = pair
    end = append_offline(mdir, 3000, 0)  # ~2.2 MiB over 3 files
    m.start()
    s.start()
    wait_until(lambda: caught_up(m, s), 30, "slave did not catch up", interval=0.05)
    # An empty slave starts at the master's last file (the reference's rule).
    assert s.status()["minPhyOffset"] == end - end % FILE_SIZE
    assert identical(mdir / "commitlog", sdir / "commitlog")

    # Metrics carry the replication figures.
    text = m.metrics()
    assert f"rocketmq_commitlog_max_offset {end}" in text
    assert "rocketmq_ha_connections 1" in text and f"rocketmq_ha_push2slave_max_offset {end}" in text
    assert 'rocketmq_ha_slave_ack_offset{slave="127.0.0.1:' in text
    stext = s.metrics()
    assert "rocketmq_ha_slave_connected 1" in stext and f"rocketmq_ha_slave_reported_offset {end}" in stext
    # The slave stores with the transport the test asked for.
    # With splice, the frame loop is the compiled one wherever rmqha/broker/ha/_frames.c is built (make venv).
    compiled = "splice+compiled" if transport._frames is not None else "splice"
    assert s.status()["haClient"]["storesWith"] == (compiled if zero_copy else "recv_into+pwrite")

    # Master restarts with more data; the slave reconnects from its own max offset.
    m.stop()
    end2 = append_offline(mdir, 500, 3000)
    m.start()
    wait_until(lambda: caught_up(m, s), 30, "slave did not resume after the master restarted", interval=0.05)
    slave_entry = m.status()["ha"]["slaves"][0]
    assert slave_entry["slaveRequestOffset"] == end
    assert identical(mdir / "commitlog", sdir / "commitlog")

    # Slave killed hard (no clean shutdown) while the master moves on; it resumes from its own log.
    s.stop(signal.SIGKILL)
    m.stop()
    end3 = append_offline(mdir, 500, 3500)
    m.start()
    s.start()
    assert s.status()["cleanShutdownBefore"] is False
    wait_until(lambda: caught_up(m, s), 30, "slave did not resume after being killed", interval=0.05)
    assert m.status()["ha"]["slaves"][0]["slaveRequestOffset"] == end2
    assert identical(mdir / "commitlog", sdir / "commitlog")
    assert s.status()["maxPhyOffset"] == end3
    # And the slave's consume queues serve what it received.
    wait_until(lambda: s.status()["dispatchOffset"] == end3, 10, "slave consume queues not built", interval=0.05)


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])


def test_probes_are_reaped_and_memory_stays_flat(tmp_path):
    """#8875: TCP health probes on the HA port must not pile up connection objects."""
    port = free_port_block()
    conf = write_conf(
        tmp_path / "m.properties",
        brokerName="broker-a",
        brokerId=0,
        brokerRole="SYNC_MASTER",
        listenPort=port,
        storePathRootDir=tmp_path / "store",
        brokerIP1="127.0.0.1",
        mappedFileSizeCommitLog=FILE_SIZE,
        haHousekeepingInterval=2000,
        haSendHeartbeatInterval=500,
    )
    m = Broker(conf, tmp_path / "m.log")
    m.start()
    try:

        def probe_round(n, batch=100):
            # Connect and close at once, as a load balancer's health check does. Half close with a
            # reset (SO_LINGER 0): 10,000 graceful closes would leave this client's ephemeral ports in
            # TIME_WAIT and make its own connects crawl.
            for i in range(n // batch):
                socks = [socket.create_connection(("127.0.0.1", port + 1)) for _ in range(batch)]
                for s in socks:
                    if i % 2:
                        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    s.close()

        probe_round(1000)
        wait_until(
            lambda: metric(m.metrics(), "rocketmq_ha_connections_unvalidated") == 0,
            20,
            "probes not reaped",
            interval=0.05,
        )
        before = rss_kib(m.proc.pid)
        probe_round(10_000)
        # Some probes stay open and silent (half-open peers): never slaves, and reaped by housekeeping.
        idle = [socket.create_connection(("127.0.0.1", port + 1)) for _ in range(200)]
        assert metric(m.metrics(), "rocketmq_ha_connections") == 0
        for s in idle:
            s.settimeout(20)
            try:  # the master aborts the connection: EOF or a reset
                assert s.recv(1) == b"", "the master sent data to a probe"
            except ConnectionResetError:
                pass
            s.close()
        wait_until(
            lambda: metric(m.metrics(), "rocketmq_ha_connections_unvalidated") == 0,
            20,
            "idle probes not reaped by housekeeping",
            interval=0.05,
        )
        after = rss_kib(m.proc.pid)
        assert metric(m.metrics(), "rocketmq_ha_connections_accepted_total") >= 11_200
        assert after - before < 8 * 1024, f"RSS grew from {before} KiB to {after} KiB over 10,000 probes"
    finally:
        m.stop()
