"""Thin Twisted wrappers around the IO-free codec: one protocol for both ends of a connection.

Either end can send requests (matched to responses by opaque, with a timeout on the reactor clock)
and serve requests through a ProcessorRegistry. The broker and name server listen with
RemotingServerFactory; brokers reach the name server and slaves reach the master with RemotingClient.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from typing import Union

from twisted.internet import defer
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.internet.interfaces import IReactorTime
from twisted.internet.protocol import Factory, Protocol
from twisted.python.failure import Failure

from zope.interface import implementer
from twisted.internet.interfaces import IPushProducer

from rmqha.broker.support.log_limit import LogLimiter
from rmqha.broker import fastpath
from rmqha.broker.remoting.codec import FrameDecoder, FrameError, decode_frame, encode
from rmqha.broker.remoting.codes import (
    DEFAULT_MAX_FRAME_LENGTH,
    DEFAULT_MAX_HEADER_LENGTH,
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    ResponseCode,
)
from rmqha.broker.remoting.command import BadRequest, RemotingCommand

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 3.0  # seconds; Java's default RPC timeout is 3000 ms

ProcessorResult = Union[RemotingCommand, None, defer.Deferred]
Processor = Callable[[RemotingCommand, "ConnectionContext"], ProcessorResult]
CloseListener = Callable[["ConnectionContext"], None]

# Shared by every connection, like Java's static requestId counter; 31 bits so never negative.
_opaque_counter = itertools.count(1)


def next_opaque() -> int:
    return next(_opaque_counter) & 0x7FFFFFFF


class RemotingError(Exception):
    pass


class RemotingTimeoutError(RemotingError):
    pass


class RemotingConnectionError(RemotingError):
    pass


class ProcessorRegistry:
    """Request code -> processor.

    reply_to_unknown: a broker answers unknown codes with REQUEST_CODE_NOT_SUPPORTED; the Java
    name server sends nothing (its default processor returns null), so it passes False.
    """

    def __init__(self, reply_to_unknown: bool = True, limiter: LogLimiter | None = None):
        self.reply_to_unknown = reply_to_unknown
        self._processors: dict[int, Processor] = {}
        # Shared by every connection of a server: one peer's repeated mistakes log once a minute.
        self.limiter = limiter if limiter is not None else LogLimiter(log)
        self.unsupported: dict[int, int] = {}  # request code -> requests seen (for /metrics)
        # (scan, handler, cluster name): runs of plain sends read by the compiled scan and handed to
        # handler(protocol, buffer, sends) (rmqha/broker/fastpath; the send processor registers it).
        self.fast_sends: tuple | None = None
        # aclEnable: callable(request, peer) -> the refusal to send, or None to serve (rmqha/broker/acl/service.py)
        self.acl = None

    def register(self, code: int, processor: Processor) -> None:
        self._processors[int(code)] = processor

    def get(self, code: int) -> Processor | None:
        return self._processors.get(code)

    def __contains__(self, code: int) -> bool:
        return code in self._processors


class ConnectionContext:
    """What a processor knows about, and can do with, the connection a request came on."""

    def __init__(self, protocol: RemotingProtocol, peer_address: str, local_address: str):
        self._protocol = protocol
        self.peer_address = peer_address
        self.local_address = local_address
        self.attributes: dict[str, object] = {}  # free space for processors (client id, ...)
        self._close_hooks: list[CloseListener] = []

    @property
    def closed(self) -> bool:
        return self._protocol.closed

    def send_request(self, cmd: RemotingCommand, timeout: float = DEFAULT_TIMEOUT) -> defer.Deferred:
        """Send a request to the peer; fires with its response, or fails on timeout/close."""
        return self._protocol.send_request(cmd, timeout)

    def send_oneway(self, cmd: RemotingCommand) -> None:
        self._protocol.send_oneway(cmd)

    def close(self) -> None:
        self._protocol.close()

    def add_close_hook(self, hook: CloseListener) -> None:
        """Call ``hook(context)`` once when the connection closes (at once if it already has)."""
        if self.closed:
            hook(self)
        else:
            self._close_hooks.append(hook)

    def _run_close_hooks(self) -> None:
        hooks, self._close_hooks = self._close_hooks, []
        for hook in hooks:
            _call_listener(hook, self)

    def __repr__(self) -> str:
        return f"ConnectionContext(peer={self.peer_address})"


@implementer(IPushProducer)
class RemotingProtocol(Protocol):
    """One connection. Bounds what a peer can make it hold: one frame of at most max_frame_length
    bytes buffered inbound; outbound, the transport pauses reading (and so dispatching) while its
    write buffer is over Twisted's high-water mark, so a peer that sends requests but never reads
    the replies stalls itself instead of growing our memory; idle_timeout closes a silent peer."""

    def __init__(
        self,
        registry: ProcessorRegistry | None = None,
        clock: IReactorTime | None = None,
        max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH,
        close_listeners: list[CloseListener] | None = None,
        idle_timeout: float = 0.0,
        max_header_length: int = DEFAULT_MAX_HEADER_LENGTH,
    ):
        if clock is None:
            from twisted.internet import reactor as clock
        self.registry = registry if registry is not None else ProcessorRegistry()
        self.clock = clock
        self.decoder = FrameDecoder(max_frame_length, max_header_length)
        self.context: ConnectionContext | None = None
        self.closed = False
        self._close_listeners = close_listeners if close_listeners is not None else []
        self._pending: dict[int, tuple[defer.Deferred, object]] = {}
        self.idle_timeout = idle_timeout
        self._last_active = 0.0
        self._idle_timer = None
        self._paused = False

    # ---- connection lifecycle ------------------------------------------------------------------

    def connectionMade(self) -> None:
        self.context = ConnectionContext(
            self, _format_address(self.transport.getPeer()), _format_address(self.transport.getHost())
        )
        register = getattr(self.transport, "registerProducer", None)
        if register is not None:
            register(self, True)
        if self.idle_timeout > 0:
            self._last_active = self.clock.seconds()
            self._idle_timer = self.clock.callLater(self.idle_timeout, self._check_idle)

    def _check_idle(self) -> None:
        self._idle_timer = None
        if self.closed:
            return
        idle_for = self.clock.seconds() - self._last_active
        if idle_for >= self.idle_timeout:
            log.info(
                "closing connection from %s: idle for %.0f s (serverChannelMaxIdleTimeSeconds=%.0f)",
                self.peer,
                idle_for,
                self.idle_timeout,
            )
            self.close()
            return
        self._idle_timer = self.clock.callLater(self.idle_timeout - idle_for, self._check_idle)

    # ---- IPushProducer: the transport's write buffer drives reading --------------------------------

    def pauseProducing(self) -> None:
        self._paused = True
        self.transport.pauseProducing()

    def resumeProducing(self) -> None:
        self._paused = False
        if self.closed:
            return
        self.transport.resumeProducing()
        self._dispatch(self.decoder.feed(b""))  # frames that arrived before the pause

    def stopProducing(self) -> None:
        pass

    def connectionLost(self, reason: Failure = None) -> None:
        self.closed = True
        self.decoder.release()  # now, not when a garbage collection gets to this connection
        if self._idle_timer is not None and self._idle_timer.active():
            self._idle_timer.cancel()
        self._idle_timer = None
        why = reason.getErrorMessage() if reason is not None else "closed"
        pending, self._pending = self._pending, {}
        for opaque, (d, timer) in pending.items():
            if timer.active():
                timer.cancel()
            d.errback(
                RemotingConnectionError(f"connection to {self.peer} closed before response to opaque {opaque}: {why}")
            )
        if self.context is not None:
            self.context._run_close_hooks()
            for listener in list(self._close_listeners):
                _call_listener(listener, self.context)

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.loseConnection()

    @property
    def peer(self) -> str:
        return self.context.peer_address if self.context is not None else "?"

    # ---- inbound -------------------------------------------------------------------------------

    def dataReceived(self, data: bytes) -> None:
        self._last_active = self.clock.seconds() if self.idle_timeout > 0 else 0.0
        self._dispatch(self.decoder.feed(data))

    def _dispatch(self, frames) -> None:
        fast = self.registry.fast_sends
        try:
            while True:
                if fast is not None and not self._dispatch_sends(fast):
                    return
                cmd = next(frames, None)
                if cmd is None or self.closed:
                    return
                if cmd.is_response:
                    self._handle_response(cmd)
                else:
                    self._handle_request(cmd)
                if self._paused:
                    return  # the rest waits in the decoder until the peer reads our replies
        except FrameError as e:
            self.registry.limiter.log(
                logging.WARNING,
                ("malformed frame", self.peer),
                "closing connection from %s: malformed frame: %s",
                self.peer,
                e,
            )
            self.closed = True  # stop sending and dispatching at once; connectionLost follows
            self.decoder.release()
            self.transport.abortConnection()

    def _dispatch_sends(self, fast) -> bool:
        """Runs of plain sends at the head of the buffer, through the compiled scan; False when this
        connection must stop dispatching (closed, or paused by its own replies)."""
        scan, handler, cluster = fast
        while not self.closed:
            buf, sends = self.decoder.take_sends(scan, cluster, fastpath.SCAN_LIMIT)
            if not sends:
                return True
            handler(self, buf, sends)
            if self._paused:
                return False
        return False

    def handle_frame(self, buf, start: int, end: int) -> None:
        """A frame the fast path took but leaves to the Python path: decoded and served as any other
        (a malformed one cannot get here: the scan only takes frames the codec accepts)."""
        view = memoryview(buf)[start + 4 : end]
        try:
            cmd = decode_frame(view, self.decoder.max_header_length)
        finally:
            view.release()
        self._handle_request(cmd)

    def write_replies(self, data: bytes) -> None:
        if not self.closed:
            self._write(data)

    def _write(self, data: bytes) -> None:
        if self.idle_timeout > 0:
            self._last_active = self.clock.seconds()
        self.transport.write(data)

    def _handle_response(self, cmd: RemotingCommand) -> None:
        entry = self._pending.pop(cmd.opaque, None)
        if entry is None:
            log.debug("response from %s for unknown or timed-out opaque %d dropped", self.peer, cmd.opaque)
            return
        d, timer = entry
        if timer.active():
            timer.cancel()
        d.callback(cmd)

    def _handle_request(self, request: RemotingCommand) -> None:
        acl = self.registry.acl
        if acl is not None:
            try:
                refused = acl(request, self.peer)
            except Exception:  # a bug in the check: answered and logged as a processor's, the link kept
                self._reply_later(Failure(), request)
                return
            if refused is not None:
                self._reply(request, refused)
                return
        processor = self.registry.get(request.code)
        if processor is None:
            self._unsupported(request)
            return
        try:
            result = processor(request, self.context)
        except Exception:
            result = Failure()
        if isinstance(result, defer.Deferred):
            result.addBoth(self._reply_later, request)  # one callback per request (SYNC_MASTER sends)
            return
        self._reply_later(result, request)  # answered at once (most requests): no Deferred round

    def _reply_later(self, result, request: RemotingCommand) -> None:
        """A processor's outcome (at once, or from its Deferred): its response, or SYSTEM_ERROR for its
        failure; a failure to reply is logged (as addCallbacks(_reply, _reply_error).addErrback(
        _log_reply_failure) would)."""
        try:
            if isinstance(result, Failure):
                self._reply_error(request, result)
            else:
                self._reply(request, result)
        except Exception:
            self._log_reply_failure(Failure(), request)

    def _unsupported(self, request: RemotingCommand) -> None:
        """One log line per code for the life of the process; every request is counted."""
        seen = self.registry.unsupported
        first = request.code not in seen
        seen[request.code] = seen.get(request.code, 0) + 1
        if self.registry.reply_to_unknown:
            if first:
                log.info(
                    "request code %d (first from %s) is not supported: answered "
                    "REQUEST_CODE_NOT_SUPPORTED; further ones are only counted",
                    request.code,
                    self.peer,
                )
            self._reply(
                request,
                request.make_response(
                    ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {request.code} not supported"
                ),
            )
        elif first:
            log.warning(
                "request code %d (first from %s) is not supported; no reply sent (as the Java "
                "name server does); further ones are only counted",
                request.code,
                self.peer,
            )

    def _log_about(self, request: RemotingCommand, level: int, key: tuple, fmt: str, detail) -> None:
        """A line about one request, rate-limited per `key` and request code; fmt takes the code, the
        peer and `detail`."""
        self.registry.limiter.log(level, (*key, request.code), fmt, request.code, self.peer, detail)

    def _log_reply_failure(self, failure: Failure, request: RemotingCommand) -> None:
        self._log_about(
            request,
            logging.ERROR,
            ("reply failed",),
            "replying to request code %d from %s failed: %s",
            failure.getTraceback(),
        )

    def _reply(self, request: RemotingCommand, response: RemotingCommand | None) -> None:
        if response is None or request.is_oneway or self.closed:
            return
        if not isinstance(response, RemotingCommand):
            log.error("processor for code %d returned %r, not a RemotingCommand", request.code, response)
            response = request.make_response(ResponseCode.SYSTEM_ERROR, f"processor returned {type(response).__name__}")
        # Whatever the processor built, the reply must match the request (C++ needs type 0 JSON,
        # and it only ever sends JSON, so copying the request's type is always right).
        response.opaque = request.opaque
        response.flag |= FLAG_RESPONSE
        response.serialize_type = request.serialize_type
        self._write(encode(response))

    def _reply_error(self, request: RemotingCommand, failure: Failure) -> None:
        """SYSTEM_ERROR. The peer's mistake (BadRequest) is answered with what was wrong and logged
        as one line; our own failure is logged with its traceback and answered without Python text."""
        e = failure.value
        if isinstance(e, BadRequest):
            self._log_about(request, logging.WARNING, ("bad request",), "request code %d from %s refused: %s", e)
            text = str(e)
        else:
            self._log_about(
                request,
                logging.ERROR,
                ("internal error", type(e).__name__),
                "processing request code %d from %s failed:\n%s",
                failure.getTraceback(),
            )
            text = (
                f"the broker failed to process request code {request.code} ({type(e).__name__}); see the broker's log"
            )
        self._reply(request, request.make_response(ResponseCode.SYSTEM_ERROR, text))

    # ---- outbound ------------------------------------------------------------------------------

    def send_request(self, cmd: RemotingCommand, timeout: float = DEFAULT_TIMEOUT) -> defer.Deferred:
        """Send ``cmd`` with a fresh opaque; the Deferred fires with the response command."""
        if self.closed or self.transport is None:
            return defer.fail(RemotingConnectionError(f"connection to {self.peer} is closed"))
        cmd.opaque = next_opaque()
        cmd.flag &= ~(FLAG_RESPONSE | FLAG_ONEWAY)
        opaque = cmd.opaque

        def cancel(_d):
            entry = self._pending.pop(opaque, None)
            if entry is not None and entry[1].active():
                entry[1].cancel()

        d = defer.Deferred(cancel)
        timer = self.clock.callLater(timeout, self._time_out, opaque, cmd.code, timeout)
        self._pending[opaque] = (d, timer)
        self._write(encode(cmd))
        return d

    def _time_out(self, opaque: int, code: int, timeout: float) -> None:
        entry = self._pending.pop(opaque, None)
        if entry is not None:
            entry[0].errback(
                RemotingTimeoutError(
                    f"no response from {self.peer} within {timeout}s to request code {code} opaque {opaque}"
                )
            )

    def send_oneway(self, cmd: RemotingCommand) -> None:
        if self.closed or self.transport is None:
            raise RemotingConnectionError(f"connection to {self.peer} is closed")
        cmd.opaque = next_opaque()
        cmd.flag = (cmd.flag & ~FLAG_RESPONSE) | FLAG_ONEWAY
        self._write(encode(cmd))


class RemotingServerFactory(Factory):
    """Listens for remoting connections and dispatches their requests to ``registry``.

    close_listeners are called with each connection's context when it closes (the name server
    uses this to drop a broker whose channel went away).
    """

    def __init__(
        self,
        registry: ProcessorRegistry,
        clock: IReactorTime | None = None,
        max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH,
        *,
        idle_timeout: float = 0.0,
        max_connections: int | None = None,
        max_header_length: int = DEFAULT_MAX_HEADER_LENGTH,
        max_held_bytes: int = 0,
    ):
        self.registry = registry
        # bytes held in partial (and not yet served) frames by all connections together, and the cap
        # (0: none); a connection that pushes the total past it is closed
        self.held_bytes = 0
        self.max_held_bytes = max_held_bytes
        self.held_refused = 0
        self.clock = clock
        self.max_frame_length = max_frame_length
        self.max_header_length = max_header_length
        self.idle_timeout = idle_timeout
        self.max_connections = max_connections
        self.refused = 0  # connections closed at once because max_connections were open
        self.close_listeners: list[CloseListener] = [self._forget]
        self.connections: set[ConnectionContext] = set()

    def buildProtocol(self, addr) -> RemotingProtocol | None:
        if self.max_connections is not None and len(self.connections) >= self.max_connections:
            self.refused += 1
            self.registry.limiter.log(
                logging.WARNING,
                ("connection refused",),
                "refusing connection from %s: %d connections open (the limit)",
                _format_address(addr),
                len(self.connections),
            )
            return None  # Twisted closes the socket
        proto = _TrackedProtocol(
            self,
            self.registry,
            self.clock,
            self.max_frame_length,
            self.close_listeners,
            self.idle_timeout,
            self.max_header_length,
        )
        proto.factory = self
        return proto

    def add_close_listener(self, listener: CloseListener) -> None:
        self.close_listeners.append(listener)

    def _forget(self, ctx: ConnectionContext) -> None:
        self.connections.discard(ctx)


class _TrackedProtocol(RemotingProtocol):
    def __init__(self, owner: RemotingServerFactory, *args):
        super().__init__(*args)
        self._owner = owner
        self._held = 0  # bytes this connection's decoder holds, as counted in owner.held_bytes

    def connectionMade(self) -> None:
        super().connectionMade()
        self._owner.connections.add(self.context)

    def dataReceived(self, data: bytes) -> None:
        super().dataReceived(data)
        owner = self._owner
        now = 0 if self.closed else self.decoder.buffered
        owner.held_bytes += now - self._held
        self._held = now
        if owner.max_held_bytes and owner.held_bytes > owner.max_held_bytes and now and not self.closed:
            # Many peers each holding a frame just under the limit would otherwise add up without bound:
            # the connection that pushed the total past the cap goes, the others are untouched.
            owner.held_refused += 1
            self.registry.limiter.log(
                logging.WARNING,
                ("held bytes",),
                "closing connection from %s: partial frames of all connections hold "
                "%d bytes, over the %d-byte cap (this one %d)",
                self.peer,
                owner.held_bytes,
                owner.max_held_bytes,
                now,
            )
            self.closed = True
            self.decoder.release()
            self.transport.abortConnection()
            owner.held_bytes -= now
            self._held = 0

    def connectionLost(self, reason=None) -> None:
        self._owner.held_bytes -= self._held
        self._held = 0
        super().connectionLost(reason)


def parse_address(address: str) -> tuple[str, int]:
    """ "ip:port" (or "[v6]:port") -> (host, port)."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"not an ip:port address: {address!r}")
    return host.strip("[]"), int(port)


def connect(
    reactor,
    address: str,
    *,
    registry: ProcessorRegistry | None = None,
    clock: IReactorTime | None = None,
    connect_timeout: float = DEFAULT_TIMEOUT,
    max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH,
) -> defer.Deferred:
    """Open one connection; fires with the connected RemotingProtocol."""
    host, port = parse_address(address)
    proto = RemotingProtocol(registry, clock if clock is not None else reactor, max_frame_length)
    endpoint = TCP4ClientEndpoint(reactor, host, port, timeout=connect_timeout)
    d = connectProtocol(endpoint, proto)

    def failed(failure: Failure):
        raise RemotingConnectionError(f"connect to {address} failed: {failure.getErrorMessage()}")

    d.addErrback(failed)
    return d


class RemotingClient:
    """Requests to any number of peers over one cached connection per address (like Java's
    NettyRemotingClient). A lost connection is reopened by the next request."""

    def __init__(
        self,
        reactor,
        clock: IReactorTime | None = None,
        connect_timeout: float = DEFAULT_TIMEOUT,
        registry: ProcessorRegistry | None = None,
    ):
        self.reactor = reactor
        self.clock = clock if clock is not None else reactor
        self.connect_timeout = connect_timeout
        self.registry = registry
        self._connections: dict[str, RemotingProtocol] = {}
        self._connecting: dict[str, list[defer.Deferred]] = {}

    def invoke(self, address: str, cmd: RemotingCommand, timeout: float = DEFAULT_TIMEOUT) -> defer.Deferred:
        """Send a request to ``address``; fires with the response, fails with a RemotingError."""
        d = self.get_connection(address)
        d.addCallback(lambda proto: proto.send_request(cmd, timeout))
        return d

    def invoke_oneway(self, address: str, cmd: RemotingCommand) -> defer.Deferred:
        """Fires with None once the frame is handed to the transport."""
        d = self.get_connection(address)
        d.addCallback(lambda proto: proto.send_oneway(cmd))
        return d

    def get_connection(self, address: str) -> defer.Deferred:
        proto = self._connections.get(address)
        if proto is not None and not proto.closed:
            return defer.succeed(proto)
        waiter = defer.Deferred()
        if address in self._connecting:
            self._connecting[address].append(waiter)
            return waiter
        self._connecting[address] = [waiter]
        d = connect(
            self.reactor, address, registry=self.registry, clock=self.clock, connect_timeout=self.connect_timeout
        )
        d.addBoth(self._connected, address)
        return waiter

    def _connected(self, result, address: str) -> None:
        waiters = self._connecting.pop(address, [])
        if isinstance(result, RemotingProtocol):
            self._connections[address] = result
            result.context.add_close_hook(lambda _ctx: self._drop(address, result))
            for w in waiters:
                w.callback(result)
        else:
            for w in waiters:
                w.errback(result)

    def _drop(self, address: str, proto: RemotingProtocol) -> None:
        if self._connections.get(address) is proto:
            del self._connections[address]

    def close(self, address: str | None = None) -> None:
        """Close the connection to ``address``, or all of them."""
        targets = [address] if address is not None else list(self._connections)
        for a in targets:
            proto = self._connections.pop(a, None)
            if proto is not None:
                proto.close()


def _format_address(addr) -> str:
    host = getattr(addr, "host", None)
    port = getattr(addr, "port", None)
    if host is None or port is None:
        return str(addr)
    return f"{host}:{port}"


def _call_listener(listener: CloseListener, ctx: ConnectionContext) -> None:
    try:
        listener(ctx)
    except Exception:
        log.exception("close listener %r failed for %s", listener, ctx.peer_address)
