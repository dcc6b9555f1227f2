"""The proxy's remoting client on asyncio (tests: tests/unit/test_proxy_remoting.py).

One connection per broker or name server address, requests matched to replies by opaque. The frame
format is the broker's (rmqha/broker/remoting/codec.py); only the transport is here. Requests a broker
sends us on that connection (CHECK_TRANSACTION_STATE, NOTIFY_CONSUMER_IDS_CHANGED) go to `on_request`,
which may return a reply command or None.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable

from rmqha.broker.remoting.codec import FrameDecoder, FrameError, encode
from rmqha.broker.remoting.command import RemotingCommand

log = logging.getLogger("rmqha.proxy.remoting")

_opaques = itertools.count(1)


class RemotingTimeout(Exception):
    """No reply within the deadline (5.x's proxy answers PROXY_TIMEOUT)."""


class RemotingUnreachable(Exception):
    """The peer could not be reached or the connection broke before the reply."""


OnRequest = Callable[[str, RemotingCommand], "RemotingCommand | None"]


class Connection(asyncio.Protocol):
    def __init__(self, address: str, on_request: OnRequest | None):
        self.address = address
        self.on_request = on_request
        self.decoder = FrameDecoder()
        self.pending: dict[int, asyncio.Future] = {}
        self.transport: asyncio.Transport | None = None
        self.closed = asyncio.get_running_loop().create_future()

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            for cmd in self.decoder.feed(data):
                if cmd.is_response:
                    fut = self.pending.pop(cmd.opaque, None)
                    if fut is not None and not fut.done():
                        fut.set_result(cmd)
                elif self.on_request is not None:
                    self._serve(cmd)
        except FrameError as e:
            log.warning("%s sent a bad frame (%s): closing", self.address, e)
            if self.transport is not None:
                self.transport.close()

    def _serve(self, cmd: RemotingCommand) -> None:
        try:
            reply = self.on_request(self.address, cmd)  # type: ignore[misc]
        except Exception:
            log.exception("handling request %d from %s", cmd.code, self.address)
            return
        if reply is not None and not cmd.is_oneway and self.transport is not None:
            self.transport.write(encode(reply))

    def connection_lost(self, exc) -> None:
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(RemotingUnreachable(f"{self.address}: connection lost"))
        self.pending.clear()
        if not self.closed.done():
            self.closed.set_result(None)

    async def invoke(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        if self.transport is None or self.transport.is_closing():
            raise RemotingUnreachable(f"{self.address}: not connected")
        cmd.opaque = next(_opaques)
        fut = asyncio.get_running_loop().create_future()
        self.pending[cmd.opaque] = fut
        self.transport.write(encode(cmd))
        try:
            return await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            raise RemotingTimeout(f"{self.address}: no reply to request {cmd.code} within {timeout}s") from None
        finally:
            self.pending.pop(cmd.opaque, None)


class RemotingClient:
    """Connections by address, made on first use and again after one breaks."""

    def __init__(self, on_request: OnRequest | None = None, connect_timeout: float = 3.0):
        self.on_request = on_request
        self.connect_timeout = connect_timeout
        self._conns: dict[str, Connection] = {}
        self._connecting: dict[str, asyncio.Future] = {}

    async def connection(self, address: str) -> Connection:
        conn = self._conns.get(address)
        if conn is not None and conn.transport is not None and not conn.transport.is_closing():
            return conn
        pending = self._connecting.get(address)
        if pending is not None:
            return await asyncio.shield(pending)
        fut = asyncio.get_running_loop().create_future()
        self._connecting[address] = fut
        try:
            host, _, port = address.rpartition(":")
            loop = asyncio.get_running_loop()
            try:
                _, conn = await asyncio.wait_for(
                    loop.create_connection(lambda: Connection(address, self.on_request), host, int(port)),
                    self.connect_timeout,
                )
            except (OSError, asyncio.TimeoutError) as e:
                err = RemotingUnreachable(f"{address}: {e or 'connect timed out'}")
                fut.set_exception(err)
                fut.exception()  # retrieved: waiters get it through shield
                raise err from None
            self._conns[address] = conn
            fut.set_result(conn)
            return conn
        finally:
            self._connecting.pop(address, None)

    async def invoke(self, address: str, cmd: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        conn = await self.connection(address)
        return await conn.invoke(cmd, timeout)

    async def oneway(self, address: str, cmd: RemotingCommand) -> None:
        conn = await self.connection(address)
        cmd.opaque = next(_opaques)
        cmd.mark_oneway()
        if conn.transport is not None:
            conn.transport.write(encode(cmd))

    def addresses(self) -> list[str]:
        return list(self._conns)

    def close(self) -> None:
        for conn in self._conns.values():
            if conn.transport is not None:
                conn.transport.close()
        self._conns.clear()
