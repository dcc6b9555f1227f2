"""The rmqha/toxiproxy image, driven unchanged by toxiproxy-python 0.1.1.

Starts the image (building it with images/build.sh if it is missing) on the
host network with its API on a free loopback port, proxies a TCP echo server
that this test runs on 127.0.0.1, and checks that every toxic the chaos kit
uses has its effect on real traffic. All traffic stays on 127.0.0.1.

Set TOXIPROXY_SERVER_BINARY=/path/to/toxiproxy-server to test a host binary
instead of the image (no Docker needed).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
import requests

# The module fixture may build the image from scratch (debootstrap + cargo: a few
# minutes on 2 cores), which counts against the first test's timeout.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

toxiproxy = pytest.importorskip("toxiproxy")

from rmqha.cluster.ports import free_block  # noqa: E402
from rmqha.cluster.wait import wait_until  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "rmqha/toxiproxy:latest"
LOCAL = "127.0.0.1"


# --------------------------------------------------------------- helpers


def free_port() -> int:
    return free_block(1)


class EchoServer:
    """Threaded TCP echo server on 127.0.0.1; a chunk containing b"BYE" is
    echoed and then the server closes the connection."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((LOCAL, 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.stopped = False
        self.accepted = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopped:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    @staticmethod
    def _serve(conn):
        with conn:
            try:
                while True:
                    data = conn.recv(65536)
                    if not data:
                        return
                    conn.sendall(data)
                    if b"BYE" in data:
                        return
            except OSError:
                return

    def close(self):
        self.stopped = True
        self.sock.close()


def connect(port: int, timeout: float = 5.0) -> socket.socket:
    s = socket.create_connection((LOCAL, port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def recv_exactly(s: socket.socket, n: int, timeout: float) -> bytes:
    deadline = time.monotonic() + timeout
    buf = b""
    while len(buf) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"got {len(buf)} of {n} bytes before the deadline")
        s.settimeout(left)
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise AssertionError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


def recv_until_closed(s: socket.socket, timeout: float) -> bytes:
    """Everything up to EOF; raises ConnectionResetError on a reset."""
    deadline = time.monotonic() + timeout
    buf = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"connection still open after {timeout}s ({len(buf)} bytes read)")
        s.settimeout(left)
        chunk = s.recv(65536)
        if not chunk:
            return buf
        buf += chunk


def payload_of(n: int) -> bytes:
    """n random bytes the echo server will not take for its b"BYE" (100 KiB of urandom holds it ~0.6 % of
    the time: the server then closes after the chunk that held it, which failed test_bandwidth once)."""
    return os.urandom(n).replace(b"B", b"b")


def round_trip(port: int, payload: bytes = b"ping", timeout: float = 5.0) -> float:
    with connect(port) as s:
        t0 = time.monotonic()
        s.sendall(payload)
        assert recv_exactly(s, len(payload), timeout) == payload
        return time.monotonic() - t0


# --------------------------------------------------------------- fixtures


def docker_ok() -> bool:
    return (
        shutil.which("docker") is not None and subprocess.run(["docker", "info"], capture_output=True).returncode == 0
    )


@pytest.fixture(scope="module")
def api_port():
    port = free_port()
    binary = os.environ.get("TOXIPROXY_SERVER_BINARY")
    if binary:
        proc = subprocess.Popen([binary, "-host", LOCAL, "-port", str(port)])
        stop = proc.terminate
    else:
        if not docker_ok():
            pytest.skip("Docker engine not available")
        have_image = subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode == 0
        if not have_image or shutil.which("cargo"):
            # Builds what is missing or stale; a no-op (well under a second) when up to date.
            subprocess.run([str(ROOT / "images" / "build.sh"), "toxiproxy"], check=True)
        name = f"rmqha-toxiproxy-test-{uuid.uuid4().hex[:8]}"
        # Host networking: the proxy listens on, and connects to, 127.0.0.1 only.
        subprocess.run(
            [
                "docker",
                "run",
                "-d",
                "--rm",
                "--name",
                name,
                "--network",
                "host",
                "--label",
                "rmqha.test=toxiproxy-server",
                IMAGE,
                "-host",
                LOCAL,
                "-port",
                str(port),
            ],
            check=True,
            capture_output=True,
        )

        def stop():
            subprocess.run(["docker", "rm", "-f", name], capture_output=True)

    try:
        wait_until(lambda: requests.get(f"http://{LOCAL}:{port}/version", timeout=1).ok, 20, "the API", interval=0.05)
        yield port
    finally:
        stop()


@pytest.fixture(scope="module")
def server(api_port):
    srv = toxiproxy.Toxiproxy()
    srv.update_api_consumer(LOCAL, api_port)
    return srv


@pytest.fixture(scope="module")
def echo():
    e = EchoServer()
    yield e
    e.close()


@pytest.fixture
def proxy(server, echo):
    name = f"echo_{uuid.uuid4().hex[:6]}"
    listen_port = free_port()
    p = server.create(upstream=f"{LOCAL}:{echo.port}", name=name, listen=f"{LOCAL}:{listen_port}")
    p.port = listen_port
    wait_until(lambda: round_trip(listen_port) < 5, 5, "the proxy to pass traffic", interval=0.05)
    yield p
    server.destroy(p)


# --------------------------------------------------------------- API


def test_version_and_proxy_listing(server, proxy):
    assert server.running()
    assert server.version()
    listed = server.proxies()
    assert proxy.name in listed
    got = listed[proxy.name]
    assert got.enabled is True
    assert got.listen == f"{LOCAL}:{proxy.port}"
    assert got.upstream == proxy.upstream


def test_existing_proxy_is_a_conflict(server, proxy):
    with pytest.raises(toxiproxy.exceptions.ProxyExists):
        server.create(upstream=proxy.upstream, name=proxy.name, listen=f"{LOCAL}:0")
    with pytest.raises(toxiproxy.exceptions.NotFound):
        proxy.destroy_toxic("no_such_toxic")


def test_toxic_listing_round_trips(proxy):
    proxy.add_toxic(type="latency", stream="upstream", toxicity=0.5, attributes={"latency": 10, "jitter": 2})
    t = proxy.get_toxic("latency_upstream")
    assert (t.type, t.stream, t.toxicity, t.attributes) == ("latency", "upstream", 0.5, {"latency": 10, "jitter": 2})
    with pytest.raises(toxiproxy.exceptions.ProxyExists):
        proxy.add_toxic(type="latency", stream="upstream", attributes={"latency": 1})
    with pytest.raises(toxiproxy.exceptions.InvalidToxic):
        proxy.add_toxic(type="no_such_type", name="bad")
    proxy.destroy_toxic("latency_upstream")
    assert proxy.toxics() == {}


def test_populate_endpoint(api_port, echo):
    base = f"http://{LOCAL}:{api_port}"
    ports = [free_port(), free_port()]
    body = [
        {"name": f"pop{i}", "listen": f"{LOCAL}:{p}", "upstream": f"{LOCAL}:{echo.port}"} for i, p in enumerate(ports)
    ]
    r = requests.post(f"{base}/populate", json=body, timeout=5)
    assert r.status_code == 201, r.text
    assert sorted(p["name"] for p in r.json()["proxies"]) == ["pop0", "pop1"]
    # Populating the same list again keeps the proxies as they are.
    assert requests.post(f"{base}/populate", json=body, timeout=5).status_code == 201
    for p in ports:
        assert round_trip(p) < 2
    for i in range(2):
        assert requests.delete(f"{base}/proxies/pop{i}", timeout=5).status_code == 204


def test_reset_removes_toxics_and_enables(server, proxy):
    proxy.add_toxic(type="latency", attributes={"latency": 1000})
    proxy.disable()
    server.reset()
    got = server.get_proxy(proxy.name)
    assert got.enabled is True
    assert proxy.toxics() == {}
    assert round_trip(proxy.port) < 0.5


# --------------------------------------------------------------- toxics


def test_latency_downstream_and_upstream(proxy):
    assert round_trip(proxy.port) < 0.2
    proxy.add_toxic(type="latency", attributes={"latency": 300})
    assert 0.28 <= round_trip(proxy.port) < 1.5
    proxy.add_toxic(type="latency", stream="upstream", attributes={"latency": 200})
    assert 0.48 <= round_trip(proxy.port) < 2.0
    proxy.destroy_toxic("latency_downstream")
    proxy.destroy_toxic("latency_upstream")
    assert round_trip(proxy.port) < 0.2


def test_latency_applies_to_open_connections(proxy):
    with connect(proxy.port) as s:
        s.sendall(b"a")
        recv_exactly(s, 1, 2)
        proxy.add_toxic(type="latency", attributes={"latency": 400})
        t0 = time.monotonic()
        s.sendall(b"b")
        recv_exactly(s, 1, 3)
        assert time.monotonic() - t0 >= 0.38
        proxy.destroy_toxic("latency_downstream")
        t0 = time.monotonic()
        s.sendall(b"c")
        recv_exactly(s, 1, 3)
        assert time.monotonic() - t0 < 0.2


def test_toxicity_zero_never_applies(proxy):
    proxy.add_toxic(type="latency", toxicity=0.0, attributes={"latency": 1000})
    assert round_trip(proxy.port) < 0.5


def test_bandwidth(proxy):
    payload = payload_of(100 * 1024)
    fast = round_trip(proxy.port, payload)
    proxy.add_toxic(type="bandwidth", attributes={"rate": 100})  # KB/s
    slow = round_trip(proxy.port, payload, timeout=10)
    assert fast < 0.5
    assert 0.8 <= slow < 4.0, slow
    proxy.destroy_toxic("bandwidth_downstream")


def test_timeout_zero_stalls_and_drops_until_removed(proxy):
    with connect(proxy.port) as s:
        proxy.add_toxic(type="timeout", attributes={"timeout": 0})
        s.sendall(b"lost")
        s.settimeout(0.7)
        with pytest.raises(socket.timeout):
            s.recv(16)
        proxy.destroy_toxic("timeout_downstream")
        s.sendall(b"kept")
        # Data that arrived while the toxic was active was dropped, as in Toxiproxy.
        assert recv_exactly(s, 4, 30) == b"kept"  # a deadline for the data, not a speed check


def test_timeout_closes_the_connection(proxy):
    proxy.add_toxic(type="timeout", attributes={"timeout": 500})
    with connect(proxy.port) as s:
        t0 = time.monotonic()
        s.sendall(b"hello")
        assert recv_until_closed(s, 5) == b""
        assert time.monotonic() - t0 >= 0.4


def test_reset_peer(proxy):
    proxy.add_toxic(type="reset_peer", attributes={"timeout": 0})
    with connect(proxy.port) as s:
        s.sendall(b"hello")
        with pytest.raises(ConnectionResetError):
            recv_until_closed(s, 5)
    proxy.destroy_toxic("reset_peer_downstream")
    assert round_trip(proxy.port) < 0.5


def test_reset_peer_after_timeout(proxy):
    proxy.add_toxic(type="reset_peer", stream="upstream", attributes={"timeout": 400})
    with connect(proxy.port) as s:
        t0 = time.monotonic()
        s.sendall(b"hello")
        with pytest.raises(ConnectionResetError):
            recv_until_closed(s, 5)
        assert time.monotonic() - t0 >= 0.35


def test_slicer(proxy):
    proxy.add_toxic(type="slicer", attributes={"average_size": 10, "size_variation": 5, "delay": 2000})
    payload = payload_of(400)
    with connect(proxy.port) as s:
        s.sendall(payload)
        reads, buf = 0, b""
        deadline = time.monotonic() + 5
        while len(buf) < len(payload) and time.monotonic() < deadline:
            s.settimeout(deadline - time.monotonic())
            chunk = s.recv(65536)
            assert chunk
            reads += 1
            buf += chunk
    assert buf == payload
    assert reads >= 10, reads  # ~40 slices 2 ms apart arrive as many separate reads


def test_limit_data(proxy):
    proxy.add_toxic(type="limit_data", attributes={"bytes": 100})
    payload = payload_of(300)
    with connect(proxy.port) as s:
        s.sendall(payload)
        got = recv_until_closed(s, 5)
    assert got == payload[:100]


def test_slow_close(proxy):
    t = time.monotonic()
    with connect(proxy.port) as s:
        s.sendall(b"BYE")
        assert recv_until_closed(s, 5) == b"BYE"
    assert time.monotonic() - t < 0.5
    proxy.add_toxic(type="slow_close", attributes={"delay": 800})
    t = time.monotonic()
    with connect(proxy.port) as s:
        s.sendall(b"BYE")
        assert recv_until_closed(s, 5) == b"BYE"
    assert time.monotonic() - t >= 0.75


def test_disable_refuses_and_enable_restores(proxy):
    s = connect(proxy.port)
    s.sendall(b"x")
    recv_exactly(s, 1, 2)
    proxy.disable()
    # Open connections are closed and new ones are refused.
    try:
        assert recv_until_closed(s, 5) == b""
    except ConnectionResetError:
        pass
    finally:
        s.close()
    with pytest.raises(ConnectionRefusedError):
        connect(proxy.port, timeout=2).close()
    proxy.enable()
    assert round_trip(proxy.port) < 0.5
    with proxy.down():
        with pytest.raises(ConnectionRefusedError):
            connect(proxy.port, timeout=2).close()
    assert round_trip(proxy.port) < 0.5


def test_upstream_unreachable_closes_client(server):
    dead = free_port()
    listen = free_port()
    p = server.create(upstream=f"{LOCAL}:{dead}", name="dead_upstream", listen=f"{LOCAL}:{listen}")
    try:
        with connect(listen) as s:
            try:
                assert recv_until_closed(s, 5) == b""
            except ConnectionResetError:
                pass
    finally:
        server.destroy(p)
