"""The slave's HA client on Twisted (HAClient): connect, report, store, reconnect.

Reconnects with a short backoff (100 ms doubling up to haReconnectMaxDelay, 1 s by default) instead
of the reference's fixed 5 s, so a slave is back within about a second of its master's return.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, cast

from twisted.internet import protocol
from twisted.internet.interfaces import IAddress, IConnector, IPushProducer
from twisted.python.failure import Failure
from zope.interface import implementer

from rmqha.broker.support.clock import Clock, DelayedCall

from ..store.mapped_file import StoreError
from rmqha.broker.support.supervision import PeriodicService
from .master import tune_socket
from .slave_session import OffsetMismatch, ReplicaStore, SlaveSession
from .transport import RecvIntoClient, SpliceClient, SplicePipe, connect_tcp
from .wire import ProtocolError

log = logging.getLogger("rmqha.broker.ha.slave")

# Received bytes/s above which the slave is catching up (its dispatch then yields to the stream). A
# catch-up runs at hundreds of MiB/s; live sends of small messages bring ~10-30 MiB/s here, which a
# slave's dispatch (~60 MiB/s of 1 KiB messages per core) keeps up with at full speed. Above it, a
# throttled slice still dispatches at least one record, so very large messages keep moving too.
CATCH_UP_RATE = 64 << 20

_S = TypeVar("_S")


class _Link(Protocol):
    """What the protocol uses of its transport (transport.RecvIntoClient/SpliceClient, or a test's)."""

    bufferSize: int

    def write(self, data: bytes) -> None: ...

    def abortConnection(self) -> None: ...

    def registerProducer(self, producer: object, streaming: bool) -> None: ...


class ClientState:
    NO_MASTER = "NO_MASTER"  # no haMasterAddress yet: waiting, not an error
    CONNECTING = "CONNECTING"
    CONNECTED = "CONNECTED"
    STOPPED = "STOPPED"


@implementer(IPushProducer)
class SlaveHAProtocol(protocol.Protocol):
    def __init__(self, client: "HAClient"):
        self.client = client
        self.session: SlaveSession | None = None

    @property
    def link(self) -> _Link:
        """self.transport, typed as this protocol uses it (Twisted's ITransport is a zope interface)."""
        return cast(_Link, self.transport)

    def _live(self) -> SlaveSession:
        """The session: made in connectionMade, before any byte is received."""
        assert self.session is not None
        return self.session

    def connectionMade(self) -> None:
        c = self.client
        tune_socket(self.transport, c.socket_buffer)
        # Read in big chunks, as the reference's 4 MiB buffer does.
        self.link.bufferSize = 1 << 20
        self.link.registerProducer(self, True)
        self.session = SlaveSession(
            c.store, heartbeat_s=c.heartbeat_s, housekeeping_s=c.housekeeping_s, now=c.clock.seconds()
        )
        c.connected(self)
        self.link.write(self.session.start(c.clock.seconds()))

    def dataReceived(self, data: bytes) -> None:
        self._stored(self._live().on_data, data)

    def pipeReceived(self, pipe: SplicePipe) -> None:
        """The zero-copy transport's stream: headers are read from the pipe, bodies spliced to disk.
        The transport calls readDone after the last fill of a read: one report per read."""
        self._stored(self._live().drain, pipe)

    def readDone(self) -> None:
        self._stored(lambda _none, now: self._live().report_if_moved(now), None)

    def _stored(self, take: Callable[[_S, float], bytes | None], source: _S) -> None:
        if self.failed:
            return  # nothing after a bad frame counts, even what its read still holds
        c = self.client
        try:
            report = take(source, c.clock.seconds())
        except OffsetMismatch as e:
            c.offset_mismatch(e)
            self._abort()
            return
        except ProtocolError as e:
            c.protocol_errors.inc()
            log.error("closing HA connection to master %s: %s", c.master_address, e)
            self._abort()
            return
        except StoreError as e:
            c.store_errors.inc()
            log.error("closing HA connection to master %s: cannot store replicated bytes: %s", c.master_address, e)
            self._abort()
            return
        behind = self._live().master_behind
        if behind is not None:
            c.master_behind(behind)
        if report is not None:
            self.link.write(report)

    failed = False  # set when the stream broke a rule: the connection is being aborted

    def _abort(self) -> None:
        self.failed = True
        self.link.abortConnection()

    # A report that cannot even be buffered means the master stopped reading: treat as failed.
    def pauseProducing(self) -> None:
        log.error("closing HA connection to master %s: reports are not being read", self.client.master_address)
        self.link.abortConnection()

    def resumeProducing(self) -> None:
        pass

    def stopProducing(self) -> None:
        pass

    def tick(self, now: float) -> None:
        s = self.session
        if s is None:
            return
        if s.expired(now):
            log.warning(
                "closing HA connection to master %s: nothing read for %.1fs (haHousekeepingInterval)",
                self.client.master_address,
                now - s.last_read,
            )
            self.client.housekeeping_closes.inc()
            self.link.abortConnection()
            return
        hb = s.heartbeat(now)
        if hb is not None:
            self.link.write(hb)

    def connectionLost(self, reason: Failure = protocol.connectionDone) -> None:
        self.client.disconnected(self, reason)


class _Factory(protocol.ClientFactory):
    def __init__(self, client: HAClient):
        self.client = client

    def buildProtocol(self, addr: IAddress | None) -> SlaveHAProtocol:
        return SlaveHAProtocol(self.client)

    def clientConnectionFailed(self, connector: IConnector, reason: Failure) -> None:
        self.client.connect_failed(reason)


class HAClient:
    def __init__(
        self,
        store: ReplicaStore,
        master_address: str | None,
        *,
        clock: Clock,
        reactor: Any,
        heartbeat_ms: int = 5000,
        housekeeping_ms: int = 20000,
        socket_buffer: int = 65536,
        reconnect_max_ms: int = 1000,
        zero_copy: bool = True,
        compiled_frames: bool = True,
        metrics: Any = None,
    ):
        self.store = store
        self.master_address = master_address or None
        self.clock = clock
        self.reactor = reactor
        self.heartbeat_s = heartbeat_ms / 1000.0
        self.housekeeping_s = housekeeping_ms / 1000.0
        self.socket_buffer = socket_buffer
        self.reconnect_max_s = reconnect_max_ms / 1000.0
        self.zero_copy = zero_copy
        self.compiled_frames = compiled_frames
        self.state = ClientState.NO_MASTER
        self.proto: SlaveHAProtocol | None = None
        self.connector: Any = None  # what connect_tcp returned: an IConnector
        self._retry: DelayedCall | None = None
        self._delay = 0.1
        self._ticker: PeriodicService | None = None
        self.last_mismatch: tuple[int, int] | None = None
        self.behind: tuple[int, int] | None = None  # (our max offset, master's offset): MASTER_BEHIND
        self.connected_since: float | None = None
        self._install_metrics(metrics)

    def _install_metrics(
        self, reg: Any
    ) -> None:  # a rmqha.broker.observability.metrics Registry, or None: a private one
        from rmqha.broker.observability.metrics import Registry

        reg = reg or Registry()
        self.metrics = reg
        self.reconnects = reg.counter("ha_slave_connects_total", "HA connections the slave made to its master")
        self.mismatches = reg.counter(
            "ha_slave_offset_mismatch_total", "frames whose fromPhyOffset differed from the slave's max offset"
        )
        self.protocol_errors = reg.counter("ha_slave_protocol_errors_total", "malformed frames from the master")
        self.store_errors = reg.counter("ha_slave_store_errors_total", "replicated bytes that could not be stored")
        self.housekeeping_closes = reg.counter(
            "ha_slave_housekeeping_closes_total", "connections closed after haHousekeepingInterval of silence"
        )
        reg.gauge("ha_slave_connected", "1 while connected to the master", lambda: int(self.proto is not None))
        reg.gauge(
            "ha_slave_reported_offset",
            "currentReportedOffset: the last offset reported to the master",
            lambda: self.proto.session.reported if self.proto and self.proto.session else -1,
        )
        reg.gauge(
            "ha_slave_master_behind",
            "1 while the master says it holds less than this slave "
            "(MASTER_BEHIND: nothing replicated, nothing truncated; an operator decides)",
            lambda: int(self.behind is not None and self.proto is not None),
        )
        reg.gauge(
            "ha_slave_last_mismatch_offset",
            "the last offset mismatch seen (side=slave|master); -1 if none",
            lambda: [
                ({"side": "slave"}, self.last_mismatch[0] if self.last_mismatch else -1),
                ({"side": "master"}, self.last_mismatch[1] if self.last_mismatch else -1),
            ],
        )

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self) -> None:
        interval = max(0.01, min(1.0, self.heartbeat_s / 5, self.housekeeping_s / 5))
        self._ticker = PeriodicService(
            "ha_client", self.tick, interval, self.clock, self.metrics, max_backoff=1.0, logger=log
        )
        self._ticker.start()
        if self.master_address:
            self.connect()
        else:
            log.info("no haMasterAddress yet: the slave waits for one (from config or the name server)")

    def stop(self) -> None:
        self.state = ClientState.STOPPED
        if self._ticker is not None:
            self._ticker.stop()
        if self._retry is not None and self._retry.active():
            self._retry.cancel()
        if self.proto is not None:
            self.proto.link.abortConnection()
        if self.connector is not None:
            self.connector.disconnect()

    def set_master_address(self, address: str | None) -> None:
        if address == self.master_address or self.state == ClientState.STOPPED:
            return
        log.info("haMasterAddress changed: %s -> %s", self.master_address, address)
        self.master_address = address or None
        if self.proto is not None:
            self.proto.link.abortConnection()  # disconnected() reconnects to the new address
        elif address and self.state == ClientState.NO_MASTER:
            self.connect()

    def connect(self) -> None:
        self._retry = None
        if self.state == ClientState.STOPPED or not self.master_address:
            self.state = ClientState.NO_MASTER if self.state != ClientState.STOPPED else self.state
            return
        host, _, port = self.master_address.rpartition(":")
        self.state = ClientState.CONNECTING
        self.connector = connect_tcp(
            self.reactor,
            host,
            int(port),
            _Factory(self),
            timeout=3,
            zero_copy=self.zero_copy,
            compiled_frames=self.compiled_frames,
        )

    def _schedule_reconnect(self) -> None:
        if self.state == ClientState.STOPPED:
            return
        self.state = ClientState.CONNECTING if self.master_address else ClientState.NO_MASTER
        if self._retry is None or not self._retry.active():
            self._retry = self.clock.callLater(self._delay, self.connect)
            self._delay = min(self._delay * 2, self.reconnect_max_s)

    # -- events from the protocol -----------------------------------------------------------------
    def connected(self, proto: SlaveHAProtocol) -> None:
        self.proto = proto
        self.behind = None
        self.state = ClientState.CONNECTED
        self.connected_since = self.clock.seconds()
        self._delay = 0.1
        self.reconnects.inc()
        log.info("connected to master %s, reporting maxPhyOffset=%d", self.master_address, self.store.max_offset)

    def disconnected(self, proto: SlaveHAProtocol, reason: Failure) -> None:
        if self.proto is proto:
            self.proto = None
        if self.state != ClientState.STOPPED:
            log.info(
                "HA connection to master %s closed: %s; reconnecting", self.master_address, reason.getErrorMessage()
            )
            self._schedule_reconnect()

    def connect_failed(self, reason: Failure) -> None:
        log.debug("cannot reach master %s: %s", self.master_address, reason.getErrorMessage())
        self._schedule_reconnect()

    def master_behind(self, offsets: tuple[int, int]) -> None:
        if offsets != self.behind:
            log.error(
                "MASTER_BEHIND: the master at %s is behind this slave, SLAVE: %d MASTER: %d (it restarted "
                "without the bytes in [%d, %d), e.g. after a power loss). This slave keeps its data, "
                "stays connected and receives nothing; the master does not count it for sync sends. "
                "An operator must rebuild this slave from the master or restore the master from it "
                "(README: a master that comes back behind its slave)",
                self.master_address,
                offsets[0],
                offsets[1],
                offsets[1],
                offsets[0],
            )
        self.behind = offsets

    def offset_mismatch(self, e: OffsetMismatch) -> None:
        self.mismatches.inc()
        self.last_mismatch = (e.slave_offset, e.master_offset)
        log.error("%s; closing to reconnect and report the slave's true offset", e)

    def catching_up(self, now: float, window: float = 0.1) -> bool:
        """True while the master streams a backlog: data arrived within `window` seconds, at
        CATCH_UP_RATE or more over the session's last rate window. Consume-queue building then
        yields to the stream; a master sending its new messages as they come (tens of MiB/s at most
        here) is not a catch-up, so dispatch keeps pace with it instead of falling behind for as
        long as the load lasts.

        The window is wide enough that a busy machine descheduling either process for a few
        milliseconds does not make a catch-up look finished (consume-queue building would then run
        at full speed between every two reads of the stream)."""
        s = self.proto.session if self.proto is not None else None
        return (
            s is not None and s.last_data is not None and now - s.last_data < window and s.recent_rate >= CATCH_UP_RATE
        )

    def tick(self) -> None:
        if self.proto is not None:
            self.proto.tick(self.clock.seconds())

    def _stores_with(self) -> str | None:
        """How the connected transport gets replicated bytes to disk (null when not connected):
        splice+compiled (the frame loop in C), splice, recv_into+pwrite or twisted+pwrite (test reactors)."""
        t = self.proto.transport if self.proto is not None else None
        if t is None:
            return None
        if isinstance(t, SpliceClient):
            return "splice+compiled" if t.compiled_frames else "splice"
        return "recv_into+pwrite" if isinstance(t, RecvIntoClient) else "twisted+pwrite"

    def status(self) -> dict[str, Any]:
        s = self.proto.session if self.proto else None
        behind = self.behind if self.proto is not None else None
        return {
            "state": "MASTER_BEHIND" if behind and self.state == ClientState.CONNECTED else self.state,
            "masterBehind": {"slave": behind[0], "master": behind[1]} if behind else None,
            "haMasterAddress": self.master_address,
            "currentReportedOffset": s.reported if s else None,
            "connects": int(self.reconnects.get()),
            "offsetMismatches": int(self.mismatches.get()),
            "storesWith": self._stores_with(),
            "lastMismatch": (
                {"slave": self.last_mismatch[0], "master": self.last_mismatch[1]} if self.last_mismatch else None
            ),
        }
