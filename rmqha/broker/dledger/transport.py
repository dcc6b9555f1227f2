"""The Twisted driver of one DLedgerNode: DLedgerRpcNettyService's RPC over RocketMQ remoting.

Every DLedger request is a remoting request whose code is the DLedger RequestCode (VOTE 51001, APPEND
50001, ...) and whose body is the request's JSON; the answer is a remoting response with code SUCCESS
(200), the request's opaque, and the response's JSON, its own `code` field saying how it went
(DLedgerRpcNettyService.handleResponse). A request no one answers within rpcTimeoutMs (3 s, the
invokeAsync timeout), or that cannot be sent, gets the NETWORK_ERROR answer Java makes up
(DLedgerNode.network_error). One listener per node (the port of its own entry in `peers`); one
outgoing connection per peer, opened when first needed and again after it drops.

The driver is thin: it ticks the node every tick_ms (the state maintainer's 10 ms) with a LoopingCall
on an injectable clock, carries out the effects in order (PersistTerm is written and fsynced before
the Sends and Replies after it), fsyncs the store every flushFileInterval when it wrote, and writes
the checkpoint every checkPointInterval.

With a cluster secret (DLedgerConfig.clusterSecret) it signs every request and answer and refuses
requests that are not signed, or are stale or replayed (signing.py), with remoting NO_PERMISSION and a
remark saying why, counted in the status (refused_*). One exception keeps DLedger's own admin tool
usable on the node's host: an unsigned LeadershipTransferRequest asking this node (transferId) to hand
over, from a loopback address.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable
from typing import Any

from twisted.internet import protocol
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall

from rmqha.broker.remoting.codec import FrameDecoder, FrameError, encode
from rmqha.broker.remoting.codes import FLAG_RESPONSE, ResponseCode as RemotingCode
from rmqha.broker.remoting.command import RemotingCommand

from .effects import AppendDone, Committed, PersistTerm, Reply, RoleChanged, Send
from .file_store import FileStore
from . import signing
from .node import DLedgerNode
from .protocol import (
    LeadershipTransferRequest,
    ProtocolError,
    RequestCode,
    ResponseCode,
    decode_request,
    decode_response,
    request_code,
)

log = logging.getLogger("rmqha.broker.dledger")


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


class _Conn(protocol.Protocol):
    """One TCP connection either way: requests in are handed to the service, responses in are
    matched to the requests this side sent on it (by opaque)."""

    def __init__(self, service: DLedgerService, peer: str | None):
        self.service, self.peer = service, peer
        self.decoder = FrameDecoder()

    def connectionMade(self) -> None:
        if self.peer is not None:
            self.service._connected(self.peer, self)

    def dataReceived(self, data: bytes) -> None:
        try:
            for cmd in self.decoder.feed(data):
                if cmd.is_response:
                    self.service._on_response(self, cmd)
                else:
                    self.service._on_request(self, cmd)
        except FrameError as e:
            log.warning("dropping a connection with a bad frame: %s", e)
            self.transport.loseConnection()

    def connectionLost(self, reason: Any = None) -> None:
        if self.peer is not None:
            self.service._disconnected(self.peer, self)

    def send(self, cmd: RemotingCommand) -> None:
        self.transport.write(encode(cmd))


class _ServerFactory(protocol.ServerFactory):
    def __init__(self, service: DLedgerService):
        self.service = service

    def buildProtocol(self, addr: Any) -> _Conn:
        return _Conn(self.service, None)


class DLedgerService:
    def __init__(
        self,
        node: DLedgerNode,
        store: FileStore,
        *,
        reactor: Any,
        clock: IReactorTime | None = None,
        tick_ms: float = 10,
        flush_ms: float = 10,
        checkpoint_ms: float = 3000,
        on_effect: Callable[[object], None] | None = None,
    ):
        self.node, self.store, self.reactor = node, store, reactor
        self.clock: IReactorTime = clock or reactor
        self.config = node.config
        self.peers = self.config.peer_map()
        self.tick_ms, self.flush_ms, self.checkpoint_ms = tick_ms, flush_ms, checkpoint_ms
        self.on_effect = on_effect
        self.conns: dict[str, _Conn] = {}
        self.connecting: dict[str, list[RemotingCommand]] = {}
        self.pending: dict[int, tuple[str, Any, Any, str]] = {}  # opaque -> (peer, request, timeout, nonce)
        self.next_opaque = 0
        self.listener: Any = None
        self.loops: list[LoopingCall] = []
        self.stats = {
            "sent": 0,
            "timeouts": 0,
            "network_errors": 0,
            "committed": store.committed_index,
            "effect_errors": 0,
            "loop_errors": 0,
            "request_errors": 0,
            # signed traffic (clusterSecret): requests refused by reason, answers not signed right, and
            # this node's requests a peer refused (NO_PERMISSION)
            **{f"refused_{r}": 0 for r in (signing.UNSIGNED, signing.BAD_SIGNATURE, signing.STALE, signing.REPLAYED)},
            "bad_answer_signatures": 0,
            "refused_by_peer": 0,
        }
        self.secret = self.config.clusterSecret
        self.sign_clock = signing.SignClock(self.clock.seconds)
        others = [p for p in self.peers if p != node.self_id]
        self.guard = signing.Guard(self.secret, others, self.config.signWindowMs) if self.secret else None
        self._last_warned: dict[str, float] = {}

    def now(self) -> float:
        return self.clock.seconds() * 1000.0

    # --- life cycle -------------------------------------------------------------------------------
    def start(self, listen: bool = True) -> None:
        if listen:
            host, port = split_address(self.peers[self.node.self_id])
            self.listener = self.reactor.listenTCP(port, _ServerFactory(self), interface=host)
        for fn, ms in (
            (self.tick, self.tick_ms),
            (self.flush, self.flush_ms),
            (self.store.persist_checkpoint, self.checkpoint_ms),
        ):
            loop = LoopingCall(self._guarded(fn))
            loop.clock = self.clock
            loop.start(ms / 1000.0, now=False)
            self.loops.append(loop)

    def stop(self) -> None:
        for loop in self.loops:
            if loop.running:
                loop.stop()
        for conn in list(self.conns.values()):
            conn.transport.loseConnection()
        if self.listener is not None:
            self.listener.stopListening()
        self.store.close()

    # --- effects ----------------------------------------------------------------------------------
    def run(self, effects: list) -> None:
        """Carry out effects in order, each on its own: one that raises is logged and counted, and the
        ones after it still run (an AppendDone behind a failing Committed is still answered)."""
        for eff in effects:
            try:
                self._run_one(eff)
            except Exception:  # noqa: BLE001 (one bad effect must not freeze the node)
                self.stats["effect_errors"] += 1
                log.exception("%s: effect %s failed; going on", self.node.self_id, type(eff).__name__)

    def _run_one(self, eff: object) -> None:
        if isinstance(eff, PersistTerm):
            self.store.persist_term(eff.term, eff.vote_for)
        elif isinstance(eff, Send):
            self.send(eff.peer, eff.request)
        elif isinstance(eff, Reply):
            self._answer(eff.to, eff.response)
        elif isinstance(eff, AppendDone):
            if hasattr(eff.token, "callback"):
                eff.token.callback(eff.response)
        elif isinstance(eff, RoleChanged):
            log.info("%s is %s in term %d", self.node.self_id, eff.role, eff.term)
        elif isinstance(eff, Committed):
            self.stats["committed"] = eff.new
        if self.on_effect is not None:
            self.on_effect(eff)

    def _guarded(self, fn: Callable[[], object]) -> Callable[[], None]:
        """A LoopingCall body that logs an exception and keeps the loop running (a LoopingCall whose
        function raises stops for good: the node would never tick again)."""

        def call() -> None:
            try:
                fn()
            except Exception:  # noqa: BLE001
                self.stats["loop_errors"] += 1
                log.exception("%s: %s failed; the loop goes on", self.node.self_id, getattr(fn, "__name__", fn))

        return call

    def tick(self) -> None:
        self.run(self.node.tick(self.now()))

    def flush(self) -> None:
        if self.store.dirty:
            self.store.flush()

    def append(self, body: bytes, token: Any) -> None:
        """A local append (the broker's): token.callback(AppendEntryResponse) once it is decided."""
        self.run(self.node.append(body, token, self.now()))

    def append_batch(self, bodies: list[bytes], token: Any) -> list[int]:
        """Entries appended as one batch (4.9's DLedgerCommitLog.asyncPutMessages): their positions, and
        token.callback(AppendEntryResponse) once the last has a quorum; [] when refused at once."""
        positions, effects = self.node.append_batch(bodies, token, self.now())
        self.run(effects)
        return positions

    # --- requests out -----------------------------------------------------------------------------
    def send(self, peer: str, request: Any) -> None:
        self.next_opaque += 1
        opaque = self.next_opaque
        code, body = int(request_code(request)), request.to_json_bytes()
        ext = None
        if self.secret is not None:
            ext = signing.sign_request(self.secret, code, body, self.sign_clock.next_us())
        cmd = RemotingCommand.request(code, ext, body=body, opaque=opaque)
        timeout = self.clock.callLater(self.config.rpcTimeoutMs / 1000.0, self._timed_out, opaque)
        self.pending[opaque] = (peer, request, timeout, ext[signing.SIGN_NONCE] if ext else "")
        self.stats["sent"] += 1
        conn = self.conns.get(peer)
        if conn is not None:
            conn.send(cmd)
            return
        queued = self.connecting.get(peer)
        if queued is not None:
            queued.append(cmd)
            return
        self.connecting[peer] = [cmd]
        host, port = split_address(self.peers[peer])
        creator = protocol.ClientCreator(self.reactor, _Conn, self, peer)
        d = creator.connectTCP(host, port, timeout=max(1, int(self.config.rpcTimeoutMs / 1000)))
        d.addErrback(lambda _f: self._connect_failed(peer))

    def _connected(self, peer: str, conn: _Conn) -> None:
        self.conns[peer] = conn
        for cmd in self.connecting.pop(peer, []):
            conn.send(cmd)

    def _connect_failed(self, peer: str) -> None:
        # invokeAsync throws when it cannot connect: the answer is NETWORK_ERROR at once
        for cmd in self.connecting.pop(peer, []):
            self._fail(cmd.opaque)

    def _disconnected(self, peer: str, conn: _Conn) -> None:
        if self.conns.get(peer) is conn:
            del self.conns[peer]
        for opaque in [o for o, (p, *_rest) in self.pending.items() if p == peer]:
            self._fail(opaque)

    def _timed_out(self, opaque: int) -> None:
        if opaque in self.pending:
            self.stats["timeouts"] += 1
            self._fail(opaque, cancel=False)

    def _fail(self, opaque: int, cancel: bool = True) -> None:
        entry = self.pending.pop(opaque, None)
        if entry is None:
            return
        peer, request, timeout, _nonce = entry
        if cancel and timeout.active():
            timeout.cancel()
        self.stats["network_errors"] += 1
        self.run(self.node.on_response(peer, request, DLedgerNode.network_error(request), self.now()))

    def _on_response(self, conn: _Conn, cmd: RemotingCommand) -> None:
        entry = self.pending.get(cmd.opaque)
        if entry is None or entry[0] != conn.peer:
            # answered after its timeout, or not on the connection the request went out on: a response
            # on the listening port would otherwise pass for a peer's (Java's server side keeps its own
            # response table, where nothing waits)
            return
        del self.pending[cmd.opaque]
        peer, request, timeout, nonce = entry
        if timeout.active():
            timeout.cancel()
        try:
            if cmd.code != ResponseCode.SUCCESS:  # 200: DLedger's, not remoting's 0
                if cmd.code == RemotingCode.NO_PERMISSION:
                    self.stats["refused_by_peer"] += 1
                raise ProtocolError(f"remoting code {cmd.code}: {cmd.remark}")
            if self.secret is not None and not signing.response_ok(
                self.secret, cmd.code, cmd.body, nonce, cmd.ext_fields
            ):
                self.stats["bad_answer_signatures"] += 1
                raise ProtocolError("the answer is not signed with the cluster secret")
            response = decode_response(int(request_code(request)), cmd.body)
        except ProtocolError as e:
            self._warn(peer, f"bad answer from {peer} to {type(request).__name__}: {e}")
            response = DLedgerNode.network_error(request)
        self.run(self.node.on_response(peer, request, response, self.now()))

    # --- requests in ------------------------------------------------------------------------------
    def _on_request(self, conn: _Conn, cmd: RemotingCommand) -> None:
        try:
            RequestCode(cmd.code)
        except ValueError:
            conn.send(
                cmd.make_response(RemotingCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported")
            )
            return
        signed = None
        if self.guard is not None:
            try:
                signed = self.guard.check_signature(cmd.code, cmd.ext_fields, cmd.body)
            except signing.Refused as e:
                if not (e.reason == signing.UNSIGNED and self._local_admin_transfer(conn, cmd)):
                    self._refuse(conn, cmd, e)
                    return
        try:
            request = decode_request(cmd.code, cmd.body)
        except (ProtocolError, RecursionError) as e:
            self.stats["request_errors"] += 1
            conn.send(cmd.make_response(RemotingCode.SYSTEM_ERROR, f"bad DLedger request: {e}"[:500]))
            return
        if self.guard is not None and signed is not None:
            try:
                self.guard.check_fresh(request.localId, signed[0], signed[1], self.clock.seconds())
            except signing.Refused as e:
                self._refuse(conn, cmd, e)
                return
        request._dledger_reply_to = (conn, cmd)  # type: ignore[attr-defined]
        try:
            effects = self.node.handle_request(request, self.now())
        except Exception as e:  # noqa: BLE001 (a request the core cannot take must not drop the node)
            self.stats["request_errors"] += 1
            log.exception(
                "%s: %s from %s failed", self.node.self_id, type(request).__name__, getattr(request, "localId", None)
            )
            conn.send(cmd.make_response(RemotingCode.SYSTEM_ERROR, f"{type(e).__name__}: {e}"[:500]))
            return
        self.run(effects)

    def _local_admin_transfer(self, conn: _Conn, cmd: RemotingCommand) -> bool:
        """An unsigned LeadershipTransferRequest asking this node to hand over, from a loopback address:
        DLedger's admin tool run on this host (it cannot sign). The take-leadership leg is never exempt."""
        if cmd.code != RequestCode.LEADERSHIP_TRANSFER:
            return False
        try:
            host = conn.transport.getPeer().host
            if not ipaddress.ip_address(host).is_loopback:
                return False
            request = decode_request(cmd.code, cmd.body)
        except (AttributeError, ValueError, ProtocolError, RecursionError):
            return False
        assert isinstance(request, LeadershipTransferRequest)
        return request.transferId == self.node.self_id and request.transfereeId != self.node.self_id

    def _refuse(self, conn: _Conn, cmd: RemotingCommand, e: signing.Refused) -> None:
        self.stats[f"refused_{e.reason}"] += 1
        try:
            where = conn.transport.getPeer().host
        except AttributeError:
            where = "?"
        self._warn(f"in:{where}:{e.reason}", f"{self.node.self_id}: request code {cmd.code} from {where}: {e}")
        conn.send(cmd.make_response(RemotingCode.NO_PERMISSION, str(e)[:500]))

    def _warn(self, key: str, message: str) -> None:
        """A warning at most every 10 s per key: a misconfigured peer would otherwise log every request."""
        now = self.clock.seconds()
        if now - self._last_warned.get(key, float("-inf")) >= 10:
            self._last_warned[key] = now
            log.warning("%s", message)

    def _answer(self, to: Any, response: Any) -> None:
        where = getattr(to, "_dledger_reply_to", None)
        if where is None:
            return
        conn, cmd = where
        if conn.transport is None or not getattr(conn.transport, "connected", True):
            return
        body = response.to_json_bytes()
        nonce = cmd.ext_fields.get(signing.SIGN_NONCE) if self.secret is not None else None
        reply = RemotingCommand(
            code=ResponseCode.SUCCESS,
            opaque=cmd.opaque,
            flag=FLAG_RESPONSE,
            body=body,
            serialize_type=cmd.serialize_type,
        )
        if nonce:  # a signed request: its answer is signed, bound to it
            assert self.secret is not None
            reply.ext_fields = signing.sign_response(self.secret, int(ResponseCode.SUCCESS), body, nonce)
        conn.send(reply)

    # --- status -----------------------------------------------------------------------------------
    def status(self) -> dict:
        n, s = self.node, self.store
        return {
            "group": n.ms.group,
            "selfId": n.self_id,
            "role": n.role,
            "term": n.term,
            "leaderId": n.ms.leader_id,
            "beginIndex": s.begin_index,
            "endIndex": s.end_index,
            "endTerm": s.end_term,
            "committedIndex": s.committed_index,
            "dataDir": s.data.path,
            "signed": self.secret is not None,
            "preferredLeaderIds": self.config.preferredLeaderIds,
            "autoTransfers": n.auto_transfers,
            **{k: v for k, v in self.stats.items() if k != "committed"},
        }
