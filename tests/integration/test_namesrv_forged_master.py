"""The forged-registration fork of issue 25, live: a slave that takes its master's address from the name
server (no haMasterAddress, as 4.9's sample configs) and an attacker without the cluster secret who keeps
registering a fake master for the slave's group. Without a secret (4.9's behaviour, the control) the slave
connects to the fake master; with one, every forgery is refused, the route stays the real master's and
the fake master never sees a connection. A captured signed registration of the real master (taken by a
second "name server" in its namesrvAddr, which gets its own copy signed for its own instance) is refused
when replayed, before and after that master stops."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from rmqha.broker.namesrv import guard
from rmqha.broker.namesrv.register_body import RegisterBrokerBody, TopicConfig, body_crc32
from rmqha.broker.remoting.codec import FrameDecoder, encode
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.cluster.ports import free_block
from rmqha.cluster.standalone import BrokerProcess, NameServerProcess
from rmqha.cluster.wait import wait_until

pytestmark = pytest.mark.integration
SECRET = "a-cluster-secret-for-the-test-0123"
WRONG = "not-the-cluster-secret-but-long"


class Listener:
    """A TCP port on 127.0.0.1 that accepts and counts connections; with `answer`, it also reads
    remoting frames and answers each request with answer(cmd) (None: no reply), keeping the requests."""

    def __init__(self, port: int, answer=None):
        self.addr = f"127.0.0.1:{port}"
        self.answer = answer
        self.accepted = 0
        self.requests: list[RemotingCommand] = []
        self.sock = socket.create_server(("127.0.0.1", port))
        self.sock.settimeout(0.2)
        self.stopped = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while not self.stopped:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # timeout, or closed by stop()
                continue
            self.accepted += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        dec = FrameDecoder()
        with conn:
            conn.settimeout(0.5)
            while not self.stopped:
                try:
                    data = conn.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not data or self.answer is None:
                    return
                for cmd in dec.feed(data):
                    self.requests.append(cmd)
                    reply = self.answer(cmd)
                    if reply is not None:
                        conn.sendall(encode(reply))

    def stop(self):
        self.stopped = True
        self.sock.close()
        self.thread.join(timeout=2)


class Attacker:
    """One connection to the name server, kept open (a registration lives as long as its connection)."""

    def __init__(self, addr: str):
        host, _, port = addr.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=5)
        self.dec = FrameDecoder()
        self.opaque = 100

    def call(self, code: int, fields: dict, body: bytes = b"") -> RemotingCommand:
        self.opaque += 1
        req = RemotingCommand.request(code, fields, body=body)
        req.opaque = self.opaque
        self.sock.sendall(encode(req))
        while True:
            data = self.sock.recv(65536)
            assert data, "the name server closed the attacker's connection"
            for cmd in self.dec.feed(data):
                if cmd.is_response and cmd.opaque == self.opaque:
                    return cmd

    def close(self):
        self.sock.close()


def forged_master_fields(broker_addr: str, ha_addr: str, body: bytes) -> dict:
    return {
        "brokerName": "broker-a",
        "brokerAddr": broker_addr,
        "clusterName": "DefaultCluster",
        "haServerAddr": ha_addr,
        "brokerId": "0",
        "compressed": "false",
        "bodyCrc32": str(body_crc32(body)),
    }


def slave_registrations(slave: BrokerProcess) -> int:
    return slave.status()["registration"]["registrations"]


@pytest.mark.parametrize("secured", [True, False], ids=["cluster-secret", "as-4.9-control"])
def test_a_forged_master_never_reaches_the_slave_and_a_captured_registration_does_not_replay(tmp_path, secured):
    args, extra = [], {}
    if secured:
        (tmp_path / "secret").write_text(SECRET + "\n")
        args, extra = (
            ["--cluster-secret-file", str(tmp_path / "secret")],
            {"clusterSecretFile": str(tmp_path / "secret")},
        )
    base = free_block(3)
    fake_broker, fake_ha = Listener(base), Listener(base + 1)
    # a second name server in the master's namesrvAddr: it sees every signed request the real one sees
    capture = Listener(base + 2, answer=lambda cmd: cmd.make_response(ResponseCode.SUCCESS))
    ns = NameServerProcess(tmp_path, args=args).start()
    nodes: list[BrokerProcess] = []
    attacker = None
    try:
        master = BrokerProcess(
            tmp_path,
            "broker-a",
            ns.addr,
            role="SYNC_MASTER",
            extra={**extra, "namesrvAddr": f"{ns.addr};{capture.addr}"},
        )
        nodes.append(master.start())
        slave = BrokerProcess(tmp_path, "broker-a", ns.addr, role="SLAVE", extra=extra)  # no haMasterAddress
        nodes.append(slave.start())
        wait_until(
            lambda: master.status()["ha"]["connectionCount"] == 1,
            20,
            "the slave connected to its master",
            on_timeout=master.log_tail,
        )
        assert slave.status()["registration"]["masterHaAddr"] != fake_ha.addr

        # the attacker keeps registering a fake master for broker-a over one open connection: unsigned,
        # timed with a wrong secret, and with the ACL's untimed signature under a wrong secret
        attacker = Attacker(ns.addr)
        body = RegisterBrokerBody({"TopicTest": TopicConfig("TopicTest", 4, 4, 6)}).encode()
        plain = forged_master_fields(fake_broker.addr, fake_ha.addr, body)
        now_ms = int(time.time() * 1000)
        forgeries = [
            plain,
            guard.sign_cluster_timed(plain, body, WRONG, now_ms, code=RequestCode.REGISTER_BROKER, audience=""),
            guard.sign_cluster(plain, body, WRONG),
        ]
        codes: list[int] = []

        def forge_and_check(done):
            for fields in forgeries:
                codes.append(attacker.call(RequestCode.REGISTER_BROKER, fields, body).code)
            return done()

        if not secured:  # the control: the finding, reproduced, so the secured run can fail
            wait_until(
                lambda: forge_and_check(lambda: fake_ha.accepted > 0),
                30,
                "the slave following the forged master to the fake HA port",
                interval=0.2,
                on_timeout=slave.log_tail,
            )
            assert set(codes) == {ResponseCode.SUCCESS}
            return

        start = slave_registrations(slave)
        # two more registrations of the slave (every 10 s), each answered while the forgeries go on
        wait_until(
            lambda: forge_and_check(lambda: slave_registrations(slave) >= start + 2),
            40,
            "two registrations of the slave under attack",
            interval=0.2,
            on_timeout=slave.log_tail,
        )
        assert set(codes) == {ResponseCode.NO_PERMISSION}, codes
        assert ns.broker_addrs("broker-a") == {0: master.addr, 1: slave.addr}
        assert (fake_broker.accepted, fake_ha.accepted) == (0, 0)
        assert slave.status()["registration"]["masterAddr"] == master.addr
        assert master.status()["ha"]["connectionCount"] == 1

        # replay: the master's signed registration as the second name server received it
        captured = wait_until(
            lambda: [c for c in capture.requests if c.code == RequestCode.REGISTER_BROKER],
            20,
            "a registration of the master at the capturing name server",
        )[0]
        assert guard.SIGN_TIME in captured.ext_fields  # timed, so the name server can tell
        # it was signed for the capturing name server's instance (it named none), not this one's
        r = attacker.call(RequestCode.REGISTER_BROKER, captured.ext_fields, captured.body)
        assert r.code == ResponseCode.NO_PERMISSION and "signed for name server instance" in r.remark, r.remark
        master.stop()  # the master goes (signed UNREGISTER): replaying its registration would bring it back
        wait_until(lambda: 0 not in ns.broker_addrs("broker-a"), 15, "the master's UNREGISTER")
        latest = [c for c in capture.requests if c.code == RequestCode.REGISTER_BROKER][-1]
        for cmd in (captured, latest):
            r = attacker.call(RequestCode.REGISTER_BROKER, cmd.ext_fields, cmd.body)
            assert r.code == ResponseCode.NO_PERMISSION and "signed for name server instance" in r.remark, r.remark
        assert ns.broker_addrs("broker-a") == {1: slave.addr}
        print(
            f"forgeries refused: {len(codes)}; slave registrations meanwhile: "
            f"{slave_registrations(slave) - start}; replays refused: 3"
        )
    finally:
        if attacker is not None:
            attacker.close()
        for node in reversed(nodes):
            node.stop()
        ns.stop()
        for lst in (fake_broker, fake_ha, capture):
            lst.stop()
