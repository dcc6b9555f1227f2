"""A small blocking DLedger client (tests and tools): one request, one answer, over RocketMQ remoting."""

from __future__ import annotations

import itertools
import socket
import time

from rmqha.broker.remoting.codec import FrameDecoder, encode
from rmqha.broker.remoting.command import RemotingCommand

from . import signing
from .protocol import (
    AppendEntryRequest,
    AppendEntryResponse,
    RequestOrResponse,
    ResponseCode,
    decode_response,
    request_code,
)
from .transport import split_address

_opaques = itertools.count(1)


_clock = signing.SignClock(time.time)


def call(
    address: str, request: RequestOrResponse, timeout: float = 5.0, secret: str | None = None
) -> RequestOrResponse:
    """Send `request` to `address` ("host:port") and return the decoded DLedger response; with the
    cluster `secret`, signed, and the answer's signature checked."""
    code, body = int(request_code(request)), request.to_json_bytes()
    ext = signing.sign_request(secret, code, body, _clock.next_us()) if secret else None
    cmd = RemotingCommand.request(code, ext, body=body, opaque=next(_opaques), language="JAVA")
    with socket.create_connection(split_address(address), timeout=timeout) as sock:
        sock.sendall(encode(cmd))
        decoder = FrameDecoder()
        while True:
            data = sock.recv(65536)
            if not data:
                raise ConnectionError(f"{address} closed the connection")
            for reply in decoder.feed(data):
                if reply.opaque != cmd.opaque:
                    continue
                if reply.code != ResponseCode.SUCCESS:  # DLedger answers with 200, not remoting's 0
                    raise ConnectionError(f"{address} answered remoting code {reply.code}: {reply.remark}")
                if ext and not signing.response_ok(
                    secret, reply.code, reply.body, ext[signing.SIGN_NONCE], reply.ext_fields
                ):
                    raise ConnectionError(f"{address} answered without the cluster secret's signature")
                return decode_response(code, reply.body)


def append(
    address: str, group: str, leader_id: str, body: bytes, timeout: float = 5.0, secret: str | None = None
) -> AppendEntryResponse:
    resp = call(address, AppendEntryRequest(group=group, remoteId=leader_id, body=body), timeout, secret)
    assert isinstance(resp, AppendEntryResponse)
    return resp


def raw_frame(code: int, body: bytes, opaque: int = 1) -> bytes:
    """A request frame as bytes (for tests that send something malformed)."""
    return encode(RemotingCommand.request(code, body=body, opaque=opaque))
