"""`python -m rmqha.broker.namesrv` as a real process: startup line, NAMESRV_PORT, answers on the socket."""

import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

from rmqha.broker.namesrv.__main__ import parse_args
from rmqha.broker.remoting.codec import decode, encode
from rmqha.broker.remoting.codes import ResponseCode
from rmqha.broker.remoting.command import RemotingCommand

REPO = Path(__file__).resolve().parents[3]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_port_defaults(monkeypatch):
    monkeypatch.delenv("NAMESRV_PORT", raising=False)
    assert parse_args([]).port == 9876 and parse_args([]).host == "0.0.0.0"
    monkeypatch.setenv("NAMESRV_PORT", "12345")
    assert parse_args([]).port == 12345
    assert parse_args(["--port", "777"]).port == 777


def test_entry_point_serves_requests():
    port = free_port()
    env = dict(os.environ, NAMESRV_PORT=str(port), PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [sys.executable, "-m", "rmqha.broker.namesrv", "--host", "127.0.0.1"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        line = proc.stdout.readline()  # blocks until the startup line (or exit)
        assert "boot success" in line and f"127.0.0.1:{port}" in line, line
        deadline = time.monotonic() + 10
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(encode(RemotingCommand(code=105, opaque=9, ext_fields={"topic": "Nope"})))
            data = b""
            while len(data) < 4 or len(data) < 4 + struct.unpack(">I", data[:4])[0]:
                assert time.monotonic() < deadline, "no reply from the name server"
                chunk = s.recv(65536)
                assert chunk, "name server closed the connection"
                data += chunk
        resp = decode(data)
        assert (resp.code, resp.opaque) == (ResponseCode.TOPIC_NOT_EXIST, 9)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
