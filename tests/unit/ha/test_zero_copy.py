"""The zero-copy frame sender (rmqha/broker/ha/transport.py): whole frames, in order, across partial writes."""

from __future__ import annotations

import os
import socket

import pytest

from rmqha.broker.ha.transport import FileGone, _FileFrames
from rmqha.broker.ha.wire import FrameReader, encode_header


class _File:
    def __init__(self, path):
        self.path = str(path)
        self.fd = os.open(self.path, os.O_RDONLY)


def _drain(sock, into: bytearray) -> None:
    while True:
        try:
            data = sock.recv(1 << 16)
        except BlockingIOError:
            return
        if not data:
            return
        into += data


def test_frames_arrive_whole_and_in_order_through_a_small_socket_buffer(tmp_path):
    body = os.urandom(300_000)
    path = tmp_path / "log"
    path.write_bytes(b"x" * 100 + body)
    f = _File(path)
    frames, pos, base = [], 0, 5000
    while pos < len(body):
        size = min(32768, len(body) - pos)
        frames.append((encode_header(base + pos, size), 100 + pos, size))
        pos += size
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    a.setblocking(False)
    b.setblocking(False)
    sender = _FileFrames(f, frames)
    got = bytearray()
    rounds = 0
    while not sender.send(a):
        rounds += 1
        _drain(b, got)
        assert rounds < 10_000
    _drain(b, got)
    assert rounds > 1, "the socket buffer should have forced partial writes"
    reader = FrameReader()
    out = reader.feed(bytes(got))
    assert [fr.offset for fr in out] == [base + i * 32768 for i in range(len(frames))]
    assert b"".join(bytes(fr.body) for fr in out) == body
    assert reader.pending == 0
    os.close(f.fd)


def test_a_closed_file_is_an_error_not_other_bytes(tmp_path):
    path = tmp_path / "log"
    path.write_bytes(bytes(1000))
    f = _File(path)
    os.close(f.fd)
    f.fd = -1
    a, b = socket.socketpair()
    with pytest.raises(FileGone):
        _FileFrames(f, [(encode_header(0, 1000), 0, 1000)]).send(a)
