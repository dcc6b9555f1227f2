"""Master and slave HA roles wired through Twisted's in-memory transports, on one fake clock."""

from __future__ import annotations

import filecmp
import json
import os

from twisted.internet.testing import MemoryReactorClock
from twisted.test.iosim import ConnectionCompleter

from rmqha.broker.ha.master import HAService
from rmqha.broker.ha.slave import HAClient
from rmqha.broker.store.message_store import MessageStore
from rmqha.broker.store.record import Message

FILE_SIZE = 64 * 1024
HA_PORT = 10912


def make_store(path, file_size=FILE_SIZE):
    s = MessageStore(str(path), commitlog_file_size=file_size, cq_file_size=20 * 1000)
    s.start()
    return s


def remember_replica(tmp_path, host="?", stream_limit=1 << 30):
    """Write the master's store/haPeers.json as an earlier life left it: `host` proven (the harness's
    in-memory connections have host "?"), and the streamLimit that life reached."""
    d = tmp_path / "master"
    d.mkdir(parents=True, exist_ok=True)
    (d / "haPeers.json").write_text(
        json.dumps({"peers": {host: {"ack": 1, "provenAtMs": 0}}, "streamLimit": stream_limit})
    )


def put(store, n, size=500, start=0, topic="T"):
    out = []
    for i in range(start, start + n):
        body = (f"{i}:".encode() * size)[:size]
        out.append(store.put_message(Message(topic=topic, body=body, queue_id=i % 4, properties={"UNIQ_KEY": f"U{i}"})))
    return out


class Cluster:
    """One master store and one slave store, an HA service and an HA client, and the link between."""

    def __init__(
        self,
        tmp_path,
        *,
        batch_size=32768,
        heartbeat_ms=5000,
        housekeeping_ms=20000,
        fallbehind_max=256 << 20,
        sync_wait_ms=5000,
        file_size=FILE_SIZE,
    ):
        self.tmp = tmp_path
        self.reactor = MemoryReactorClock()
        self.master = make_store(tmp_path / "master", file_size)
        self.slave = make_store(tmp_path / "slave", file_size)
        self.file_size = file_size
        self.ha = HAService(
            self.master,
            clock=self.reactor,
            batch_size=batch_size,
            heartbeat_ms=heartbeat_ms,
            housekeeping_ms=housekeeping_ms,
            fallbehind_max=fallbehind_max,
            sync_wait_ms=sync_wait_ms,
        )
        self.ha.listen(self.reactor, HA_PORT)
        self.client = HAClient(
            self.slave,
            f"127.0.0.1:{HA_PORT}",
            clock=self.reactor,
            reactor=self.reactor,
            heartbeat_ms=heartbeat_ms,
            housekeeping_ms=housekeeping_ms,
        )
        self.completer = ConnectionCompleter(self.reactor)
        self.pump = None

    def connect(self):
        """Start the client (first time) or let its pending reconnect through, then complete it."""
        if not self.client._ticker:
            self.client.start()
        elif not self.reactor.tcpClients:
            self.advance(self.client._delay + 0.01)
        self.pump = self.completer.succeedOnce()
        assert self.pump is not None, "the slave did not try to connect"
        self.flush()
        return self.pump

    def flush(self):
        if self.pump is not None:
            self.pump.flush()

    def advance(self, seconds, step=0.1):
        """Move the fake clock forward in steps, delivering bytes between steps."""
        t = 0.0
        while t < seconds - 1e-9:
            d = min(step, seconds - t)
            self.reactor.advance(d)
            t += d
            self.flush()

    def master_conn(self):
        conns = list(self.ha.connections)
        return conns[0] if conns else None

    def identical(self) -> bool:
        """The slave's commit-log files equal the master's, byte for byte, over the slave's range."""
        md, sd = self.tmp / "master" / "commitlog", self.tmp / "slave" / "commitlog"
        names = sorted(os.listdir(sd))
        if not names:
            return False
        return all(filecmp.cmp(md / n, sd / n, shallow=False) for n in names)

    def close(self):
        self.client.stop()
        self.ha.stop()
        self.flush()
        self.master.shutdown()
        self.slave.shutdown()
