"""Recovery without stranding (haRecoveryEnable, opt-in): a master that starts after an unclean
shutdown fetches what its slaves hold past its log before it takes a write.

Why: with ASYNC_FLUSH a power loss takes the master's unflushed tail, while its slave may hold (and a
SYNC_MASTER may have acknowledged) those records. A master that then takes writes overwrites that range
with new records: the slave's copy is a fork, its messages stranded (SLAVE_AHEAD, rmqha/broker/ha/peers.py).
With recovery on, the master instead holds writes, fetches the range from each slave in
`haRecoveryPeers` and only then serves writes and its HA port.

The wire is RocketMQ 4.x's HA wire with the roles reversed for that range: the slave's HA port (a 4.9
slave opens it too) serves its log as a 4.x master does, and the recovering master connects to it as a
4.x slave: it reports its max offset (8 bytes) and receives frames (offset i8, size i4, body). So the
source may be an unmodified 4.9 slave. The end of the range: a heartbeat (size 0) at the offset the
fetch has reached means the source holds nothing more; a heartbeat below it (before any data) means
the source is behind this master, which then has nothing to fetch from it.

Nothing fetched is trusted: every record must parse, match its body CRC, carry its own physical offset,
lie within one commit-log file, and name this master as its store host (it was written by this master
in an earlier life, not by anybody else); a blank end-of-file record must fill its file exactly. A
record that fails closes the fetch from that source and nothing after the last good record is kept.
Good records are stored byte-identical (what the slave holds, so master and slave stay byte-equal),
in whole records only.

The hold ends when every source has answered (sent the rest, or said it is behind) or after
haRecoveryWaitMs, whichever comes first; a source that cannot be reached by then is named in the log
and /status, and the master goes on as without recovery (its slave may then be SLAVE_AHEAD).

IO-free parts: RecordVerifier and FetchSession (master side), SourceSession (the source side).
The Twisted wrappers: RecoveryFetcher and RecoverySourceService.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from twisted.internet import protocol
from twisted.internet.interfaces import IAddress, IConnector, IPushProducer
from twisted.python.failure import Failure
from zope.interface import implementer

from rmqha.broker.support.clock import Clock
from ..store import record
from ..store.message_store import MessageStore
from ..store.record import BytesLike, Scan
from .master_session import LogSource
from .wire import MAX_FRAME_BODY, Frame, FrameReader, ProtocolError, ReportReader, encode_header, encode_report

log = logging.getLogger("rmqha.broker.ha.recovery")

SOURCE_BATCH = 1 << 20  # bytes of log per frame a source sends (the reference slave takes up to 4 MiB)


class _Link(Protocol):
    """What the protocols use of their transport (Twisted's ITransport is a zope interface)."""

    def getPeer(self) -> IAddress: ...

    def write(self, data: bytes) -> None: ...

    def abortConnection(self) -> None: ...

    def registerProducer(self, producer: object, streaming: bool) -> None: ...


class RecoveryRefused(ProtocolError):
    """Bytes a source sent that this master will not store: the fetch from it ends there. `records`:
    the whole records verified before them in the same feed, which are kept."""

    records: Sequence[bytes] = ()


# -- master side, IO-free --------------------------------------------------------------------------


class RecordVerifier:
    """Takes a contiguous byte stream from `start` and hands back whole records that passed every check.

    file_size: mappedFileSizeCommitLog; store_host: this master's (ip, port), as its records carry it.
    """

    def __init__(
        self, start: int, file_size: int, store_host: tuple[str, int], max_record: int, limit: int | None = None
    ):
        self.end = start  # the verified records end here
        # streamLimit (rmqha/broker/ha/peers.py): no replica holds more of this log than was ever streamed
        self.limit = limit
        self.file_size = file_size
        self.store_host = (store_host[0], int(store_host[1]))
        self.max_record = max_record
        self.records = 0
        self._buf = bytearray()

    @property
    def received_end(self) -> int:
        """Where the bytes received so far end (verified ones plus a record still arriving)."""
        return self.end + len(self._buf)

    @property
    def partial(self) -> int:
        return len(self._buf)

    def feed(self, data: BytesLike) -> list[bytes]:
        """Append `data` (continuing the stream); return the records it completed, in order, each one
        within one commit-log file. Raises RecoveryRefused on the first record that fails a check."""
        self._buf += data
        out: list[bytes] = []
        try:
            self._take(out)
        except RecoveryRefused as e:
            e.records = out  # the records before the bad one passed: the caller keeps them
            raise
        return out

    def _take(self, out: list[bytes]) -> None:
        # each record taken is cut from the front of the buffer: the next one always starts at 0
        buf = self._buf
        while True:
            at = self.end
            in_file = self.file_size - at % self.file_size
            r = record.scan(buf, 0, check_crc=True)
            if r.kind == Scan.PARTIAL:
                # its head still arriving (size 0), or its body: wait, unless what it declares cannot fit
                if r.size > in_file or r.size > self.max_record:
                    raise RecoveryRefused(
                        f"record at {at} of {r.size} bytes does not fit in its commit-log file "
                        f"({in_file} bytes left) or the size limit ({self.max_record})"
                    )
                break
            if r.kind == Scan.INVALID:
                raise RecoveryRefused(f"invalid record at {at}: {r.reason}")
            if r.kind == Scan.BLANK:
                if r.size != in_file:
                    raise RecoveryRefused(
                        f"end-of-file record at {at} spans {r.size} bytes; its file has {in_file} "
                        "left (do master and slave use the same mappedFileSizeCommitLog?)"
                    )
                if len(buf) < r.size:
                    break  # the blank's tail (zeros) is still arriving
                if any(buf[8 : r.size]):
                    raise RecoveryRefused(f"end-of-file record at {at} is not followed by zeros")
            else:
                m = r.message
                assert m is not None  # a MESSAGE scan carries its message
                if r.size > in_file:
                    raise RecoveryRefused(f"record at {at} of {r.size} bytes crosses its commit-log file's end")
                if m.physical_offset != at:
                    raise RecoveryRefused(
                        f"record at {at} says it is at {m.physical_offset}: the source's log "
                        "and this master's part before it"
                    )
                if (m.store_host[0], int(m.store_host[1])) != self.store_host:
                    raise RecoveryRefused(
                        f"record at {at} was stored by {m.store_host[0]}:{m.store_host[1]}, "
                        f"not by this master ({self.store_host[0]}:{self.store_host[1]})"
                    )
                self.records += 1
            if self.limit is not None and at + r.size > self.limit:
                raise RecoveryRefused(
                    f"record at {at} ends at {at + r.size}, past the most this master ever "
                    f"streamed ({self.limit}, streamLimit): no replica of it holds that"
                )
            out.append(bytes(buf[: r.size]))
            del buf[: r.size]  # (a refusal leaves the buffer at the bad record)
            self.end += r.size


class FetchOutcome:
    FETCHING = "FETCHING"
    COMPLETE = "COMPLETE"  # the source sent everything it holds past us (maybe nothing)
    SOURCE_BEHIND = "SOURCE_BEHIND"  # the source holds less than this master: nothing to fetch
    REFUSED = "REFUSED"  # it sent something no conforming source sends, or a bad record


class FetchSession:
    """One connection to a source: on_data returns (records to store, report to send or None); the
    records verified before a bad frame or record are returned too, with outcome REFUSED and `error`."""

    def __init__(self, verifier: RecordVerifier, max_body: int = MAX_FRAME_BODY):
        self.verifier = verifier
        self.frames = FrameReader(max_body)
        self.outcome = FetchOutcome.FETCHING
        self.error = ""
        self.had_data = False
        self.bytes = 0
        self.source_end: int | None = None  # where the source's log ends, once it said so

    def start(self) -> bytes:
        return encode_report(self.verifier.end)

    def on_data(self, data: bytes) -> tuple[list[bytes], bytes | None]:
        out: list[bytes] = []
        if self.outcome != FetchOutcome.FETCHING:
            return out, None
        try:
            for frame in self.frames.feed(data):
                if self._frame(frame, out):
                    break
        except ProtocolError as e:
            out.extend(getattr(e, "records", None) or [])
            self.outcome, self.error = FetchOutcome.REFUSED, str(e)
            return out, None
        return out, (encode_report(self.verifier.end) if out else None)

    def _frame(self, frame: Frame, out: list[bytes]) -> bool:
        """Take one frame; True when the fetch has its answer."""
        expected = self.verifier.received_end
        if frame.body:
            if frame.offset != expected:
                raise RecoveryRefused(f"frame at {frame.offset}, expected {expected}: not contiguous")
            self.had_data = True
            self.bytes += len(frame.body)
            out.extend(self.verifier.feed(frame.body))
            return False
        if frame.offset == expected:
            if self.verifier.partial:
                # the source's log ends inside a record: it holds no more of it; what is whole is kept
                log.warning(
                    "recovery source's log ends inside a record at %d (%d bytes of it): not kept",
                    self.verifier.end,
                    self.verifier.partial,
                )
            self.outcome, self.source_end = FetchOutcome.COMPLETE, frame.offset
            return True
        if frame.offset < expected and not self.had_data:
            self.outcome, self.source_end = FetchOutcome.SOURCE_BEHIND, frame.offset
            return True
        if frame.offset < expected:
            return False  # a 4.x master heartbeats from where its stream stands
        raise RecoveryRefused(f"heartbeat at {frame.offset} past the fetched end {expected}")


# -- source side, IO-free --------------------------------------------------------------------------


class SourceSession:
    """A source's side: read the fetching master's report, stream from there to this log's end, then a
    heartbeat at the end (the "nothing more" a 4.x master also says, without waiting its 5 s)."""

    def __init__(self, commitlog: LogSource, batch: int = SOURCE_BATCH):
        self.commitlog = commitlog
        self.batch = batch
        self.reports = ReportReader()
        self.next: int | None = None
        self.said_end = False

    def on_report(self, data: bytes) -> None:
        offset = self.reports.feed(data)
        if offset is None or self.next is not None:
            return  # later reports are acks; the stream goes on from where it is
        if offset < 0:
            raise ProtocolError(f"report of a negative offset {offset}")
        if offset < self.commitlog.min_offset:
            raise ProtocolError(f"asked for {offset}; this log starts at {self.commitlog.min_offset}")
        self.next = min(offset, self.commitlog.max_offset)

    def next_frames(self, max_bytes: int) -> list[bytes]:
        if self.next is None or self.said_end:
            return []
        out: list[bytes] = []
        sent = 0
        while sent < max_bytes and self.next < self.commitlog.max_offset:
            body = self.commitlog.read(self.next, min(self.batch, max_bytes - sent))
            if not body:
                break
            out += [encode_header(self.next, len(body)), body]
            self.next += len(body)
            sent += len(body)
        if self.next >= self.commitlog.max_offset:
            out.append(encode_header(self.next, 0))
            self.said_end = True
        return out


# -- Twisted: the source ---------------------------------------------------------------------------


@implementer(IPushProducer)
class _SourceProtocol(protocol.Protocol):
    def __init__(self, service: "RecoverySourceService"):
        self.service = service
        self.session = SourceSession(service.store.commitlog)
        self.paused = False
        self.peer = "?"

    @property
    def link(self) -> _Link:
        return cast(_Link, self.transport)

    def connectionMade(self) -> None:
        p = self.link.getPeer()
        self.peer = f"{getattr(p, 'host', '?')}:{getattr(p, 'port', '?')}"
        self.service.served += 1
        self.link.registerProducer(self, True)

    def dataReceived(self, data: bytes) -> None:
        first = self.session.next is None
        try:
            self.session.on_report(data)
        except ProtocolError as e:
            log.error("recovery source: closing connection from %s: %s", self.peer, e)
            self.link.abortConnection()
            return
        if first and self.session.next is not None:
            log.warning(
                "recovery source: %s fetches this log from %d (it ends at %d)",
                self.peer,
                self.session.next,
                self.service.store.commitlog.max_offset,
            )
            self.resumeProducing()

    def resumeProducing(self) -> None:
        # written in slices; the transport pauses us when its buffer is full and resumes us when it drains
        self.paused = False
        while not self.paused and not self.session.said_end and self.connected:
            frames = self.session.next_frames(1 << 20)
            if not frames:
                return
            self.link.write(b"".join(frames))

    def pauseProducing(self) -> None:
        self.paused = True

    def stopProducing(self) -> None:
        self.paused = True


class RecoverySourceService(protocol.Factory):
    """On a slave with haRecoveryEnable: its HA port serves its log to a recovering master."""

    def __init__(self, store: MessageStore, clock: Clock, allowed: frozenset[str] | None = None):
        self.store = store
        self.clock = clock
        self.allowed = allowed  # haAllowedAddresses (None: anyone, as a 4.9 slave's HA port)
        self.served = 0
        self.refused = 0
        self.port: Any = None  # the listening IListeningPort

    def buildProtocol(self, addr: IAddress | None) -> _SourceProtocol | None:
        if self.allowed is not None and getattr(addr, "host", None) not in self.allowed:
            self.refused += 1
            log.warning(
                "recovery source: connection from %s refused: not in haAllowedAddresses", getattr(addr, "host", "?")
            )
            return None
        return _SourceProtocol(self)

    def listen(self, reactor: Any, port: int, interface: str = "") -> Any:
        from .transport import listen_tcp

        self.port = listen_tcp(reactor, port, self, backlog=16, interface=interface)
        log.info(
            "recovery source listening on %s:%d (a restarting master may fetch this log)",
            interface or "0.0.0.0",
            self.port.getHost().port,
        )
        return self.port

    def status(self) -> dict[str, Any]:
        return {
            "port": self.port.getHost().port if self.port is not None else None,
            "connections": self.served,
            "refused": self.refused,
        }


# -- Twisted: the fetcher --------------------------------------------------------------------------


class RecoveryState:
    HOLDING = "HOLDING"  # writes refused; fetching from the sources
    DONE = "DONE"  # every source answered
    TIMED_OUT = "TIMED_OUT"  # haRecoveryWaitMs ended first
    OFF = "OFF"


@dataclass
class SourceStatus:
    address: str
    state: str = "PENDING"  # PENDING, CONNECTING, FETCHING, COMPLETE, SOURCE_BEHIND, REFUSED, UNREACHABLE
    fetched_bytes: int = 0
    records: int = 0
    attempts: int = 0
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "address": self.address,
            "state": self.state,
            "fetchedBytes": self.fetched_bytes,
            "records": self.records,
            "attempts": self.attempts,
            "error": self.error,
        }


class _FetchProtocol(protocol.Protocol):
    def __init__(self, fetcher: "RecoveryFetcher", source: SourceStatus):
        self.fetcher = fetcher
        self.source = source
        self.session = FetchSession(fetcher.new_verifier())
        self.finished = False

    @property
    def link(self) -> _Link:
        return cast(_Link, self.transport)

    def connectionMade(self) -> None:
        self.source.state = "FETCHING"
        self.fetcher.active = self
        self.link.write(self.session.start())

    def dataReceived(self, data: bytes) -> None:
        if self.finished:
            return
        records, report = self.session.on_data(data)
        self.fetcher.store_records(records, self.source)
        if report is not None:
            self.link.write(report)
        if self.session.outcome != FetchOutcome.FETCHING:
            self.finish()
            self.fetcher.source_done(self.source, self.session.outcome, self.session.error)

    def finish(self) -> None:
        self.finished = True
        self.link.abortConnection()

    def connectionLost(self, reason: Failure = protocol.connectionDone) -> None:
        if self.fetcher.active is self:
            self.fetcher.active = None
        if not self.finished:
            self.finished = True
            self.fetcher.source_lost(self.source, reason.getErrorMessage())


class _FetchFactory(protocol.ClientFactory):
    def __init__(self, fetcher: RecoveryFetcher, source: SourceStatus):
        self.fetcher, self.source = fetcher, source

    def buildProtocol(self, addr: IAddress | None) -> _FetchProtocol:
        return _FetchProtocol(self.fetcher, self.source)

    def clientConnectionFailed(self, connector: IConnector, reason: Failure) -> None:
        self.fetcher.source_lost(self.source, reason.getErrorMessage())


def proven_sources(sources: Sequence[str], proven: Collection[str], limit: int | None) -> tuple[list[str], list[str]]:
    """Which of haRecoveryPeers a recovering master may take bytes from: (kept, why each other was dropped).

    Only a replica proven in an earlier life (store/haPeers.json, rmqha/broker/ha/peers.py) can hold what this
    master lost: with no proven host or no streamLimit on record nothing is fetched. A source given as an
    IP address must be one of the proven hosts; a host name is kept (the master saw its slaves at IP
    addresses, through Toxiproxy at the proxy's, which a name cannot be compared with); every record
    fetched must still end within the streamLimit and pass RecordVerifier.
    """
    if not proven or limit is None:
        why = "no slave was proven a replica of this master in an earlier life (store/haPeers.json)"
        return [], [f"{a}: {why}" for a in sources]
    kept, dropped = [], []
    for a in sources:
        host = a.rpartition(":")[0].strip("[]")
        try:
            ipaddress.ip_address(host)
        except ValueError:
            kept.append(a)
            continue
        if host in proven:
            kept.append(a)
        else:
            dropped.append(
                f"{a}: {host} was never proven a replica of this master (proven: {', '.join(sorted(proven))})"
            )
    return kept, dropped


@dataclass
class RecoveryFetcher:
    """Holds this master's writes while it fetches from each source in turn; on_done() when it ends."""

    store: MessageStore
    sources: list[str]
    clock: Clock
    reactor: Any
    wait_s: float
    store_host: tuple[str, int]
    max_record: int
    on_done: Callable[[str], object]  # called with the state it ended in
    limit: int | None = None  # the earlier lives' streamLimit: nothing past it is taken
    retry_s: float = 0.5
    state: str = RecoveryState.HOLDING
    started_at: float = 0.0
    ended_at: float | None = None
    start_offset: int = 0
    status_sources: list[SourceStatus] = field(default_factory=list)
    active: _FetchProtocol | None = None  # the connection in use

    def start(self) -> None:
        self.started_at = self.clock.seconds()
        self.start_offset = self.store.max_offset
        self.status_sources = [SourceStatus(a) for a in self.sources]
        log.warning(
            "recovery: unclean shutdown; holding writes until %s say what they hold past %d "
            "(at most %.1fs, haRecoveryWaitMs)",
            ", ".join(self.sources),
            self.start_offset,
            self.wait_s,
        )
        self._deadline = self.clock.callLater(self.wait_s, self._timed_out)
        self._pending = list(self.status_sources)
        self._next()

    def new_verifier(self) -> RecordVerifier:
        cl = self.store.commitlog
        return RecordVerifier(cl.max_offset, cl.file_size, self.store_host, self.max_record, self.limit)

    def _next(self) -> None:
        if self.state != RecoveryState.HOLDING:
            return
        if not self._pending:
            self._end(RecoveryState.DONE)
            return
        source = self._pending[0]
        source.state, source.attempts = "CONNECTING", source.attempts + 1
        host, _, port = source.address.rpartition(":")
        self.reactor.connectTCP(host.strip("[]"), int(port), _FetchFactory(self, source), timeout=5)

    def store_records(self, records: list[bytes], source: SourceStatus) -> None:
        if not records or self.state != RecoveryState.HOLDING:
            return
        at = self.store.max_offset
        self.store.append_replicated(at, cast(list[BytesLike], records))  # (only read)
        n = sum(len(r) for r in records)
        source.fetched_bytes += n
        source.records += sum(1 for r in records if record.message_size(r))

    def source_done(self, source: SourceStatus, state: str, error: str) -> None:
        source.state, source.error = state, error
        if state == "REFUSED":
            log.error(
                "recovery: refused what %s sent past %d: %s; its copy stays as it is (SLAVE_AHEAD if it holds more)",
                source.address,
                self.store.max_offset,
                error,
            )
        else:
            log.warning(
                "recovery: %s %s: fetched %d bytes (%d records); this log now ends at %d",
                source.address,
                state,
                source.fetched_bytes,
                source.records,
                self.store.max_offset,
            )
        if source in self._pending:
            self._pending.remove(source)
        self.clock.callLater(0, self._next)

    def source_lost(self, source: SourceStatus, why: str) -> None:
        if source.state in ("COMPLETE", "SOURCE_BEHIND", "REFUSED"):
            return
        source.state, source.error = "UNREACHABLE", why
        if self.state != RecoveryState.HOLDING:
            return
        # retry it after the others, until the deadline
        if source in self._pending:
            self._pending.remove(source)
            self._pending.append(source)
        self.clock.callLater(self.retry_s, self._next)

    def _timed_out(self) -> None:
        missing = [s.address for s in self.status_sources if s.state not in ("COMPLETE", "SOURCE_BEHIND", "REFUSED")]
        log.error(
            "recovery: haRecoveryWaitMs (%.1fs) ended before %s answered; taking writes now: a slave that "
            "holds more than this master will be SLAVE_AHEAD (its tail stranded; see `python -m rmqha.cluster "
            "repair`)",
            self.wait_s,
            ", ".join(missing) or "every source",
        )
        self._end(RecoveryState.TIMED_OUT)

    def _end(self, state: str) -> None:
        if self.state != RecoveryState.HOLDING:
            return
        self.state = state
        self.ended_at = self.clock.seconds()
        if self._deadline.active():
            self._deadline.cancel()
        if self.active is not None:
            self.active.finish()  # a late source's bytes are not taken once writes resume
        while self.store.dispatch():
            pass
        self.store.flush()
        log.warning(
            "recovery %s after %.2fs: fetched %d bytes; the log ends at %d; taking writes",
            state,
            self.ended_at - self.started_at,
            self.store.max_offset - self.start_offset,
            self.store.max_offset,
        )
        self.on_done(state)

    @property
    def holding(self) -> bool:
        return self.state == RecoveryState.HOLDING

    def status(self) -> dict[str, Any]:
        now = self.ended_at if self.ended_at is not None else self.clock.seconds()
        return {
            "state": self.state,
            "heldSeconds": round(now - self.started_at, 3),
            "startOffset": self.start_offset,
            "endOffset": self.store.max_offset,
            "fetchedBytes": self.store.max_offset - self.start_offset,
            "sources": [s.to_json() for s in self.status_sources],
        }
