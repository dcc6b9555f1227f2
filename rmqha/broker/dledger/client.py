"""A small blocking DLedger client (tests and tools): one request, one answer, over RocketMQ remoting."""

from __future__ import annotations

import itertools
import socket

from rmqha.broker.remoting.codec import FrameDecoder, encode
from rmqha.broker.remoting.command import RemotingCommand

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


def call(address: str, request: RequestOrResponse, timeout: float = 5.0) -> RequestOrResponse:
    """Send `request` to `address` ("host:port") and return the decoded DLedger response."""
    code = int(request_code(request))
    cmd = RemotingCommand.request(code, body=request.to_json_bytes(), opaque=next(_opaques), language="JAVA")
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
                return decode_response(code, reply.body)


def append(address: str, group: str, leader_id: str, body: bytes, timeout: float = 5.0) -> AppendEntryResponse:
    resp = call(address, AppendEntryRequest(group=group, remoteId=leader_id, body=body), timeout)
    assert isinstance(resp, AppendEntryResponse)
    return resp


def raw_frame(code: int, body: bytes, opaque: int = 1) -> bytes:
    """A request frame as bytes (for tests that send something malformed)."""
    return encode(RemotingCommand.request(code, body=body, opaque=opaque))
