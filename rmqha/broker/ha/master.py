"""The master's HA service on Twisted (HAService + HAConnection): thin wrappers over MasterSession.

Flow control: each connection is a streaming producer on its transport, so the writer stops when
the socket's send buffer is full and resumes when it drains; a frame is always written whole, in
order, before the next (the reference's "finish the last frame first"). On a real reactor the
transport is rmqha/broker/ha/transport.py's FileFrameServer: frame bodies go from the commit-log file to the
socket with os.sendfile, and the transport resumes the writer once a partly sent batch has gone out.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Callable
from typing import Any, Protocol, cast

from twisted.internet import defer, protocol
from twisted.internet.interfaces import IAddress, IPushProducer
from twisted.python.failure import Failure
from zope.interface import implementer

from rmqha.broker.support.clock import Clock, DelayedCall
from rmqha.broker.store.mapped_file import fsync_directory
from rmqha.broker.store.message_store import MessageStore, PutStatus
from rmqha.broker.support.files import atomic_write

from rmqha.broker.support.supervision import PeriodicService
from .group_transfer import GroupTransfer
from .master_session import Ack, Incarnation, MasterSession, SessionState
from .peers import PEERS_FILE, ProvenPeers, load_record, save_peers
from .transport import listen_tcp
from .wire import ProtocolError

log = logging.getLogger("rmqha.broker.ha.master")

READ_SIZE = 1 << 20  # log bytes read at once, then cut into haTransferBatchSize frames
READS_PER_TURN = 4  # then yield to the reactor so other connections and clients get served


class _Link(Protocol):
    """What the protocol uses of its transport (transport.FileFrameServer, tcp.Server, or a test's)."""

    def getPeer(self) -> IAddress: ...

    def write(self, data: bytes) -> None: ...

    def abortConnection(self) -> None: ...

    def registerProducer(self, producer: object, streaming: bool) -> None: ...


def tune_socket(transport: object, buffer_size: int) -> None:
    """TCP_NODELAY and fixed buffers, as the reference sets on HA sockets (no-op on test transports)."""
    sock: Any = getattr(transport, "getHandle", lambda: None)()
    if not hasattr(sock, "setsockopt"):
        return
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if buffer_size:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffer_size)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer_size)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    except OSError as e:
        log.debug("socket options not applied: %s", e)


@implementer(IPushProducer)
class MasterHAProtocol(protocol.Protocol):
    def __init__(self, service: "HAService"):
        self.service = service
        self.session: MasterSession | None = None
        self.paused = False
        self.pump_scheduled: DelayedCall | None = None
        self.peer = "?"

    @property
    def link(self) -> _Link:
        """self.transport, typed as this protocol uses it (Twisted's ITransport is a zope interface)."""
        return cast(_Link, self.transport)

    @property
    def live_session(self) -> MasterSession:
        """The session of a connected protocol (made in connectionMade): what _reported() returns have one."""
        assert self.session is not None
        return self.session

    def connectionMade(self) -> None:
        svc = self.service
        p = self.link.getPeer()
        self.peer = f"{getattr(p, 'host', '?')}:{getattr(p, 'port', id(self))}"
        tune_socket(self.transport, svc.socket_buffer)
        self.session = MasterSession(
            svc.store.commitlog,
            self.peer,
            batch_size=svc.batch_size,
            heartbeat_s=svc.heartbeat_s,
            housekeeping_s=svc.housekeeping_s,
            now=svc.clock.seconds(),
            incarnation=svc.incarnation,
        )
        self.link.registerProducer(self, True)
        svc.connection_made(self)

    def dataReceived(self, data: bytes) -> None:
        svc = self.service
        if self.session is None or self.session.state == SessionState.CLOSED:
            return  # closed by us; the transport may still hand over what was already read
        try:
            ack = self.session.on_data(data, svc.clock.seconds())
        except ProtocolError as e:
            svc.protocol_errors.inc()
            log.error("closing HA connection from %s: %s", self.peer, e)
            self.close()
            return
        if ack is not None:
            svc.on_ack(self, ack)
            if ack.first:
                self.pump()

    # -- writer -----------------------------------------------------------------------------------
    def pump(self) -> None:
        self.pump_scheduled = None
        s = self.session
        if s is None or self.paused or s.state == SessionState.CLOSED:
            return
        now = self.service.clock.seconds()
        t: Any = self.transport  # FileFrameServer (zero-copy) or any other transport
        if getattr(t, "file_frames_pending", None) is not None:
            # Zero-copy: headers, then bodies straight from the commit-log file (os.sendfile). The
            # transport resumes us once the frames it could not send at once have gone out.
            if t.file_frames_pending:
                return
            for _ in range(READS_PER_TURN):
                planned = s.next_file_frames(now, READ_SIZE)
                if planned is None:
                    return
                t.write_file_frames(*planned)
                if self.paused or t.file_frames_pending:
                    return
            self.schedule_pump()
            return
        for _ in range(READS_PER_TURN):
            frames = s.next_frames(now, READ_SIZE)
            if not frames:
                return
            t.write(b"".join(frames))  # real transports take bytes only
            if self.paused:
                return
        self.schedule_pump()

    def schedule_pump(self) -> None:
        if self.pump_scheduled is None and not self.paused:
            self.pump_scheduled = self.service.clock.callLater(0, self.pump)

    def pauseProducing(self) -> None:
        self.paused = True

    def resumeProducing(self) -> None:
        # The transport calls this the moment its queue drains: refill now rather than a reactor turn
        # later (about +10 % catch-up with 64 KiB socket buffers). Enlarging Twisted's queue instead
        # made it slower: it re-joins what is queued on every write.
        self.paused = False
        if self.pump_scheduled is not None and self.pump_scheduled.active():
            self.pump_scheduled.cancel()
        self.pump()

    def stopProducing(self) -> None:
        self.paused = True

    def tick(self, now: float) -> None:
        s = self.live_session
        if s.expired(now):
            log.warning(
                "closing HA connection from %s: nothing read for %.1fs (haHousekeepingInterval); slaveAckOffset=%d",
                self.peer,
                now - s.last_read,
                s.slave_ack_offset,
            )
            self.service.housekeeping_closes.inc()
            self.close()
            return
        if not self.paused and not getattr(self.transport, "file_frames_pending", False):
            hb = s.heartbeat(now)
            if hb is not None:
                self.link.write(hb)

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
        if self.pump_scheduled is not None and self.pump_scheduled.active():
            self.pump_scheduled.cancel()
        self.pump_scheduled = None
        self.link.abortConnection()

    def connectionLost(self, reason: Failure = protocol.connectionDone) -> None:
        if self.pump_scheduled is not None and self.pump_scheduled.active():
            self.pump_scheduled.cancel()
        self.pump_scheduled = None
        if self.session is not None:
            self.session.close()
        self.service.connection_lost(self)


FENCE_FILE = "haFence.json"


def load_fence(path: str) -> tuple[int, int] | None:
    """The fork a previous life of this master found (haFence.json: {"from": f, "to": t}), or None."""
    try:
        with open(path) as fh:
            d = json.load(fh)
        fence = (int(d["from"]), int(d["to"]))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        log.error("ignoring unreadable %s (%s): a fork found before this start is not enforced", path, e)
        return None
    if not 0 <= fence[0] <= fence[1]:
        log.error("ignoring %s: from %d to %d is not a range", path, *fence)
        return None
    return fence


def save_fence(path: str, fence: tuple[int, int] | None) -> None:
    """Write (or, for None, remove) the fence, durably: the rename (or the unlink) survives a power cut only
    once its directory is fsynced. Without that a cut took haFence.json and left haFence.json.tmp, and the
    next life streamed into the forked slave from its report, mixing two histories (matrix 2026-11-29,
    mx-sa-l2 broker-b)."""
    if fence is None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            return
        fsync_directory(os.path.dirname(path) or ".")
        return
    atomic_write(path, json.dumps({"from": fence[0], "to": fence[1]}).encode())


class HAService(protocol.Factory):
    """Listens on haListenPort; tracks push2SlaveMaxOffset and the sync waiters."""

    def __init__(
        self,
        store: MessageStore,
        *,
        clock: Clock,
        batch_size: int = 32768,
        heartbeat_ms: int = 5000,
        housekeeping_ms: int = 20000,
        fallbehind_max: int = 256 * 1024 * 1024,
        sync_wait_ms: int = 5000,
        socket_buffer: int = 65536,
        metrics: Any = None,
        compat49: bool = False,
        allowed: frozenset[str] | None = None,
    ):
        self.store = store
        self.allowed = allowed  # haAllowedAddresses: the only peers accepted (None: anyone, as 4.9)
        self.clock = clock
        self.batch_size = batch_size
        self.heartbeat_s = heartbeat_ms / 1000.0
        self.housekeeping_s = housekeeping_ms / 1000.0
        self.fallbehind_max = fallbehind_max
        self.socket_buffer = socket_buffer
        self.connections: set[MasterHAProtocol] = set()
        self.push2slave_max_offset = 0
        # Where this master's life began: a slave holding bytes past it that were never sent since is
        # SLAVE_AHEAD (the master came back behind its slave).
        self.fence_path = os.path.join(store.root, FENCE_FILE)
        self.peers_path = os.path.join(store.root, PEERS_FILE)
        self.peers = ProvenPeers.from_record(load_record(self.peers_path), on_proven=self._save_peers)
        self.incarnation = Incarnation(
            store.commitlog.max_offset, fence=load_fence(self.fence_path), on_fence=self._save_fence, peers=self.peers
        )
        if self.incarnation.fence is not None:
            log.error(
                "a fork is remembered in %s: a slave holding offsets past %d has a history this master "
                "lost and stays SLAVE_AHEAD until it is truncated or rebuilt (see the README)",
                self.fence_path,
                self.incarnation.fence[0],
            )
        self.compat49 = compat49
        if compat49:
            self.incarnation.compat49 = True
            log.warning(
                "haCompat49=true: this master reproduces Apache RocketMQ 4.9's HA behaviour where this "
                "broker differs (unchecked first reports, false SEND_OK, any socket a slave): for "
                "comparisons only"
            )
        self.group_transfer = GroupTransfer(clock, sync_wait_ms / 1000.0, self._sync_outcome)
        self._ticker: PeriodicService | None = None
        self._pump_all_scheduled: DelayedCall | None = None
        self.port: Any = None  # the listening IListeningPort
        self._install_metrics(metrics)
        store.append_listeners.append(self.on_append)

    def _save_peers(self, peers: ProvenPeers) -> None:
        try:
            save_peers(self.peers_path, peers)
        except OSError as e:  # proven in this life still; the next one may refuse this slave if it is ahead
            log.error(
                "cannot write %s (%s): the proven HA peers are known until this master stops, not after",
                self.peers_path,
                e,
            )

    def _save_fence(self, fence: tuple[int, int] | None) -> None:
        try:
            save_fence(self.fence_path, fence)
        except OSError as e:  # the fork is still enforced in this life; say the next one may miss it
            log.error(
                "cannot write %s (%s): the fork %s is enforced until this master stops, not after",
                self.fence_path,
                e,
                fence,
            )

    # -- metrics ----------------------------------------------------------------------------------
    def _install_metrics(
        self, reg: Any
    ) -> None:  # a rmqha.broker.observability.metrics Registry, or None: a private one
        from rmqha.broker.observability.metrics import Registry

        reg = reg or Registry()
        self.metrics = reg
        self.protocol_errors = reg.counter(
            "ha_protocol_errors_total", "HA connections closed for a malformed or rogue report"
        )
        self.housekeeping_closes = reg.counter(
            "ha_housekeeping_closes_total", "HA connections closed after haHousekeepingInterval of silence"
        )
        self.accepted = reg.counter("ha_connections_accepted_total", "TCP connections accepted on the HA port")
        self.refused_peers = reg.counter(
            "ha_connections_refused_total", "HA connections closed at once: the peer is not in haAllowedAddresses"
        )
        self.sync_outcomes = reg.counter("sync_wait_outcomes_total", "SYNC_MASTER replication waits by outcome")
        self.sync_latency = reg.histogram(
            "sync_wait_seconds",
            "time a SYNC_MASTER send waited for a slave ack",
            [0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10],
        )
        reg.gauge(
            "ha_connections", "HA connections that sent a valid report (connectionCount)", lambda: self.connection_count
        )
        reg.gauge(
            "ha_connections_unvalidated",
            "HA connections with no valid report yet (probes, slow slaves)",
            lambda: len(self.connections) - self.connection_count,
        )
        reg.gauge(
            "ha_push2slave_max_offset",
            "push2SlaveMaxOffset: the highest offset any slave acknowledged",
            lambda: self.push2slave_max_offset,
        )
        reg.gauge("sync_waiters", "SYNC_MASTER sends waiting for a slave ack", lambda: len(self.group_transfer))

        def per_slave(attr: str) -> Callable[[], list[tuple[dict[str, str], int]]]:
            return lambda: [({"slave": c.peer}, getattr(c.session, attr)) for c in self._reported()]

        reg.gauge(
            "ha_slave_request_offset",
            "slaveRequestOffset: the offset the slave asked for on connect",
            per_slave("slave_request_offset"),
        )
        reg.gauge(
            "ha_slave_ack_offset", "slaveAckOffset: the slave's last reported max offset", per_slave("slave_ack_offset")
        )
        reg.gauge(
            "ha_slave_next_transfer_offset", "nextTransferFromWhere for each slave", per_slave("next_transfer_from")
        )
        reg.gauge(
            "ha_slave_lag_bytes",
            "master max offset minus the slave's ack offset",
            lambda: [({"slave": c.peer}, c.live_session.lag()) for c in self._reported()],
        )
        reg.gauge(
            "ha_slave_offset_unavailable",
            "1 when a slave asks for data the master no longer has",
            lambda: [
                ({"slave": c.peer}, int(c.live_session.state == SessionState.OFFSET_UNAVAILABLE))
                for c in self._reported()
            ],
        )
        reg.gauge(
            "ha_slave_ahead",
            "1 when a slave holds offsets this master lost (SLAVE_AHEAD: not replicated "
            "to, not counted for sync acks; see slaveAckOffset and ha_master_start_offset)",
            lambda: [
                ({"slave": c.peer}, int(c.live_session.state == SessionState.SLAVE_AHEAD)) for c in self._reported()
            ],
        )
        reg.gauge(
            "ha_master_start_offset",
            "the commit log's max offset when this master started",
            lambda: self.incarnation.start_offset,
        )

    def _sync_outcome(self, outcome: PutStatus, waited: float) -> None:
        self.sync_outcomes.inc(outcome=outcome)
        self.sync_latency.observe(waited, outcome=outcome)

    # -- lifecycle --------------------------------------------------------------------------------
    def listen(self, reactor: Any, port: int, interface: str = "") -> Any:
        # Twisted sets SO_REUSEADDR. A deep backlog so a burst of health probes is not dropped.
        self.port = listen_tcp(reactor, port, self, backlog=1024, interface=interface)
        self.start_ticking()
        log.info("HA service listening on %s:%d", interface or "0.0.0.0", self.port.getHost().port)
        return self.port

    def start_ticking(self) -> None:
        interval = max(0.01, min(1.0, self.heartbeat_s / 5, self.housekeeping_s / 5))
        # Supervised: a failed tick is logged and counted and ticking resumes within a second, instead of
        # heartbeats and housekeeping stopping for every slave until a restart.
        self._ticker = PeriodicService(
            "ha_master", self.tick, interval, self.clock, self.metrics, max_backoff=1.0, logger=log
        )
        self._ticker.start()

    def stop(self) -> Any:  # the port's stopListening() Deferred, if listening
        if self._ticker is not None:
            self._ticker.stop()
        self.group_transfer.shutdown()
        for c in list(self.connections):
            c.close()
        if self.port is not None:
            return self.port.stopListening()
        return None

    def buildProtocol(self, addr: IAddress | None) -> MasterHAProtocol | None:
        self.accepted.inc()
        host = getattr(addr, "host", None)
        if self.allowed is not None and host not in self.allowed:
            self.refused_peers.inc()
            log.warning("HA connection from %s refused: not in haAllowedAddresses", host)
            return None  # Twisted closes it
        return MasterHAProtocol(self)

    def connection_made(self, conn: MasterHAProtocol) -> None:
        self.connections.add(conn)

    def connection_lost(self, conn: MasterHAProtocol) -> None:
        self.connections.discard(conn)
        s = conn.session
        if s is not None and s.slave_request_offset >= 0:
            log.info("slave %s disconnected: slaveAckOffset=%d", conn.peer, s.slave_ack_offset)

    # -- replication state ------------------------------------------------------------------------
    def _slaves(self) -> list[MasterHAProtocol]:
        return [c for c in self.connections if c.session is not None and c.session.is_slave]

    def _reported(self) -> list[MasterHAProtocol]:
        """Connections that sent a valid report: the slaves, and those in SLAVE_AHEAD."""
        return [
            c
            for c in self.connections
            if c.session is not None and (c.session.is_slave or c.session.state == SessionState.SLAVE_AHEAD)
        ]

    def slaves_ahead(self) -> list[MasterHAProtocol]:
        return [c for c in self._reported() if c.live_session.state == SessionState.SLAVE_AHEAD]

    @property
    def connection_count(self) -> int:
        if self.compat49:  # 4.9: every accepted socket is an HAConnection, reported or not (#3015)
            return sum(1 for c in self.connections if c.session is not None and c.session.state != SessionState.CLOSED)
        return sum(1 for c in self.connections if c.session is not None and c.session.is_slave)

    def on_ack(self, conn: MasterHAProtocol, ack: Ack) -> None:
        self.notify_transfer_some(ack.offset)

    def notify_transfer_some(self, offset: int) -> None:
        if offset > self.push2slave_max_offset:
            self.push2slave_max_offset = offset
            log.debug("push2SlaveMaxOffset=%d", offset)
            self.group_transfer.notify_transfer(offset)

    def is_slave_ok(self, master_put_where: int) -> bool:
        return self.connection_count > 0 and master_put_where - self.push2slave_max_offset < self.fallbehind_max

    def wait_for_slave(self, next_offset: int) -> defer.Deferred[PutStatus]:
        """Fires with PutStatus PUT_OK, FLUSH_SLAVE_TIMEOUT or SLAVE_NOT_AVAILABLE (HA-PROTOCOL §5)."""
        if not self.is_slave_ok(next_offset):
            self.sync_outcomes.inc(outcome=PutStatus.SLAVE_NOT_AVAILABLE)
            return defer.succeed(PutStatus.SLAVE_NOT_AVAILABLE)
        d = self.group_transfer.wait(next_offset)
        self.schedule_pump_all()
        return d

    def on_append(self, max_offset: int) -> None:
        self.schedule_pump_all()

    def schedule_pump_all(self) -> None:
        if self._pump_all_scheduled is None:
            self._pump_all_scheduled = self.clock.callLater(0, self._pump_all)

    def _pump_all(self) -> None:
        self._pump_all_scheduled = None
        for c in list(self.connections):
            c.pump()

    def tick(self) -> None:
        """Heartbeats and housekeeping for every connection. One connection's error does not starve
        the others: each gets its turn, then the first error is raised for the supervisor."""
        now = self.clock.seconds()
        error: Failure | None = None
        for c in list(self.connections):
            try:
                c.tick(now)
                c.pump()  # the reference also polls every 100 ms, whether woken or not
            except Exception:
                if error is None:
                    error = Failure()
        if error is not None:
            error.raiseException()

    def status(self) -> dict[str, Any]:
        return {
            "push2SlaveMaxOffset": self.push2slave_max_offset,
            "connectionCount": self.connection_count,
            "unvalidatedConnections": len(self.connections) - self.connection_count,
            "syncWaiters": len(self.group_transfer),
            "masterStartOffset": self.incarnation.start_offset,
            "compat49": self.compat49,
            "forkFence": list(self.incarnation.fence) if self.incarnation.fence else None,
            "provenPeers": self.peers.to_json()["peers"],
            "streamLimit": self.peers.stream_limit,
            "slavesAhead": len(self.slaves_ahead()),
            "slaves": [
                {
                    "addr": c.peer,
                    "state": s.state,
                    "slaveRequestOffset": s.slave_request_offset,
                    "slaveAckOffset": s.slave_ack_offset,
                    "nextTransferFromWhere": s.next_transfer_from,
                    "lagBytes": s.lag(),
                    "problem": s.problem,
                }
                for c in self._reported()
                for s in (c.live_session,)
            ],
        }


__all__ = ["HAService", "MasterHAProtocol"]
