"""One slave connection on the master, as an IO-free state machine (HA-PROTOCOL §3).

The reader half turns reports into acks; the writer half decides what to send next. Time is passed
in (seconds, from the reactor), so tests drive it with task.Clock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from rmqha.broker.store.mapped_file import MappedFile

from .peers import ProvenPeers, host_of
from .wire import HEADER_SIZE, ProtocolError, ReportReader, encode_header

log = logging.getLogger("rmqha.broker.ha.master")

# A data frame as next_frames gives it: a header, then a body that is a view into the commit log's bytes.
Chunk = bytes | memoryview
# next_file_frames: (header, file position, size) of each frame whose body stays in the file.
FileFrame = tuple[bytes, int, int]


class LogSource(Protocol):
    """What a session reads from the master's commit log (rmqha.broker.store.commitlog.CommitLog)."""

    @property
    def max_offset(self) -> int: ...

    @property
    def min_offset(self) -> int: ...

    def last_file_start(self) -> int: ...

    def read(self, offset: int, max_bytes: int) -> bytes: ...

    def region(self, offset: int, max_bytes: int) -> tuple[MappedFile, int, int] | None: ...


class SessionState:
    AWAITING_REPORT = "AWAITING_REPORT"  # connected, no valid report yet: not counted as a slave
    STREAMING = "STREAMING"
    OFFSET_UNAVAILABLE = "OFFSET_UNAVAILABLE"  # the slave wants data the master no longer has
    # The slave holds offsets this master never sent in its current life (it came back behind its
    # slave, e.g. after a power loss): never streamed to, never counted for sync acks. Sticky.
    SLAVE_AHEAD = "SLAVE_AHEAD"
    CLOSED = "CLOSED"


@dataclass
class Incarnation:
    """What this master wrote and sent since it started, shared by all its sessions.

    start_offset: the commit log's max offset when the master started (after recovery): every byte
    below it is the master's own; a slave can hold bytes past it only if this master sent them.
    sent_max: the highest offset streamed to any slave since start.
    A first report past both comes from a slave that holds bytes this master does not have (it lost
    them, e.g. in a power loss); if the master has written since, its bytes there are different ones.
    """

    start_offset: int
    sent_max: int = -1
    # A fork remembered across restarts: (from, to) when a slave was once found holding [from, to), a
    # history this master lost. Once the master has written past `to` a second life's start_offset is
    # above it and no longer shows the fork, so a slave reporting past `from` stays SLAVE_AHEAD until one
    # reports at or below `from` (it was truncated or rebuilt). on_fence persists every change.
    fence: tuple[int, int] | None = None
    on_fence: Callable[[tuple[int, int] | None], object] | None = None
    # Who may claim a lost history (rmqha/broker/ha/peers.py): only a host proven in an earlier life can be
    # SLAVE_AHEAD, set or clear the fence; anybody else's such report is a protocol error. None: no proof
    # asked (the IO-free state-machine tests; the HA service always passes its ProvenPeers).
    peers: ProvenPeers | None = None
    # hosts served this life's log (a first report the master took): a replica of this life's log
    # cannot also hold the lost history, so none of their later sessions may claim it
    served: set[str] = field(default_factory=set)
    ahead_live: dict[str, int] = field(default_factory=dict)  # host -> its sessions now SLAVE_AHEAD
    # haCompat49: take every connection's first report unchecked, as 4.9 does (false acks, streaming into
    # the middle of a slave's records once the log passes its offset): the matrix's 4.9 column
    compat49: bool = False

    def __post_init__(self) -> None:
        self.sent_max = max(self.sent_max, self.start_offset)

    def ahead(self, offset: int) -> bool:
        """A first report at `offset` comes from a slave holding bytes that are not this master's."""
        if self.fence is not None and offset > self.fence[0]:
            return True
        return offset > self.start_offset and offset > self.sent_max

    @property
    def fork_from(self) -> int:
        """Where the slave's history and this master's part: the fence, else this life's start."""
        return self.fence[0] if self.fence is not None else self.start_offset

    def remember_fork(self, offset: int) -> None:
        lo = self.fork_from
        fence = (lo, max(offset, self.fence[1] if self.fence else offset))
        if fence != self.fence:
            self.fence = fence
            if callable(self.on_fence):
                self.on_fence(fence)

    def history_refused(self, host: str, offset: int) -> str:
        """Why a first report at `offset` from `host` may not claim a history this master lost ('' if it
        may): it must come from a replica of an earlier life that this life has not served."""
        if self.peers is None:
            return ""
        if host in self.served:
            return (
                f"a session from {host} was served this life's log, so a report from {host} cannot "
                "hold a history this life lost"
            )
        return self.peers.history_refused(host, offset)

    def saw_report(self, offset: int, host: str) -> None:
        """A slave at or below the fork point holds nothing of the lost history: the fence is done, if a
        replica of an earlier life says so while no session from its host is still SLAVE_AHEAD."""
        if self.fence is None or offset > self.fence[0]:
            return
        if self.peers is not None and (host not in self.peers.earlier or self.ahead_live.get(host, 0)):
            log.warning(
                "%s reported offset %d, at or below the fork at %d, but the fence [%d, %d) stays: %s",
                host,
                offset,
                self.fence[0],
                *self.fence,
                f"a session from {host} is still SLAVE_AHEAD"
                if host in self.peers.earlier
                else f"{host} was not proven a replica of this master in an earlier life",
            )
            return
        log.warning(
            "slave %s reported offset %d, at or below the fork at %d: the fork [%d, %d) is no longer "
            "held by a slave; forgetting it",
            host,
            offset,
            self.fence[0],
            *self.fence,
        )
        self.fence = None
        if callable(self.on_fence):
            self.on_fence(None)

    def streaming(self, end: int) -> None:
        """Bytes up to `end` are about to be streamed: the recorded streamLimit covers them first."""
        if end > self.sent_max:
            self.sent_max = end
        if self.peers is not None:
            self.peers.cover(end)


@dataclass
class Ack:
    offset: int
    first: bool  # the connection's first valid report (sets slaveRequestOffset)


class MasterSession:
    def __init__(
        self,
        commitlog: LogSource,
        peer: str,
        *,
        batch_size: int,
        heartbeat_s: float,
        housekeeping_s: float,
        now: float,
        incarnation: Incarnation | None = None,
    ):
        self.log = commitlog
        self.incarnation = incarnation or Incarnation(commitlog.max_offset)
        self.peer = peer
        self.host = host_of(peer)
        self.batch_size = batch_size
        self.heartbeat_s = heartbeat_s
        self.housekeeping_s = housekeeping_s
        self.state = SessionState.AWAITING_REPORT
        self.reports = ReportReader()
        self.slave_request_offset = -1
        self.slave_ack_offset = -1
        self.next_transfer_from = -1
        self.last_read = now
        self.last_write = now
        self.connected_at = now
        self.bytes_sent = 0
        self.problem = ""  # a human-readable reason when state is OFFSET_UNAVAILABLE or SLAVE_AHEAD
        self.ahead_master_offset = -1  # SLAVE_AHEAD: the master's max offset when it was detected

    @property
    def is_slave(self) -> bool:
        """Counts toward connectionCount only after a valid report (unlike the reference, #3015)."""
        return self.state in (SessionState.STREAMING, SessionState.OFFSET_UNAVAILABLE)

    # -- reader -----------------------------------------------------------------------------------
    def on_data(self, data: bytes, now: float) -> Ack | None:
        """Feed bytes from the slave. Raises ProtocolError for a report no honest slave sends."""
        self.last_read = now
        offset = self.reports.feed(data)
        if offset is None:
            return None
        max_offset = self.log.max_offset
        if offset < 0:
            raise ProtocolError(f"slave {self.peer} reported a negative offset {offset}")
        if self.state == SessionState.SLAVE_AHEAD:
            self.slave_ack_offset = offset  # shown in /status; never an ack
            return None
        if self.incarnation.compat49 and self.slave_request_offset < 0:
            # 4.9 HAConnection: the first report sets slaveRequestOffset and is an ack, whatever it says
            self.slave_request_offset = self.slave_ack_offset = offset
            self._choose_start(offset)
            if offset > max_offset:
                log.warning(
                    "haCompat49: slave %s's first report %d is past this master's log (%d), taken "
                    "unchecked as 4.9 does: push2SlaveMaxOffset rises to it",
                    self.peer,
                    offset,
                    max_offset,
                )
            return Ack(offset, True)
        if self.slave_request_offset < 0 and self._ahead(offset):
            why = self.incarnation.history_refused(self.host, offset)
            if why:
                # Nothing is written and no state changes: a stranger cannot fence the real slave out.
                raise ProtocolError(
                    f"{self.peer} reported offset {offset}, past what this master holds ({max_offset}) and "
                    f"sent, refused: {why}. A real slave whose master lost data is known from an earlier "
                    "life (store/haPeers.json); see rmqha/broker/ha/peers.py"
                )
            self._enter_slave_ahead(offset, now)
            return None
        if offset > max_offset:
            raise ProtocolError(
                f"slave {self.peer} reported offset {offset} beyond the master's max "
                f"offset {max_offset}: a rogue peer, or a slave whose log has data this "
                "master does not (the slave must be truncated or rebuilt)"
            )
        first = self.slave_request_offset < 0
        if first:
            self.incarnation.saw_report(offset, self.host)
            self.incarnation.served.add(self.host)
            self.slave_request_offset = offset
            self._choose_start(offset)
        elif offset < self.slave_ack_offset:
            log.warning(
                "slave %s ack went backwards: slaveAckOffset %d -> %d", self.peer, self.slave_ack_offset, offset
            )
        self.slave_ack_offset = offset
        if (
            not first
            and self.incarnation.peers is not None
            and offset > self.slave_request_offset
            and self.state == SessionState.STREAMING
            and offset <= self.next_transfer_from
        ):
            # it stored bytes we streamed to it: a replica of this log
            self.incarnation.peers.prove(self.host, offset, int(now * 1000))
        return Ack(offset, first)

    def _ahead(self, offset: int) -> bool:
        return self.incarnation.ahead(offset)

    def _enter_slave_ahead(self, offset: int, now: float) -> None:
        self.state = SessionState.SLAVE_AHEAD
        self.incarnation.ahead_live[self.host] = self.incarnation.ahead_live.get(self.host, 0) + 1
        self.slave_request_offset = self.slave_ack_offset = offset
        self.ahead_master_offset = self.log.max_offset
        start = self.incarnation.fork_from
        self.incarnation.remember_fork(offset)
        self.problem = (
            f"SLAVE_AHEAD: slave {self.peer} holds the commit log up to {offset} but this master's "
            f"history parts from it at {start} (the master came back behind its slave, e.g. after a "
            f"power loss; it holds {self.ahead_master_offset}): the slave's bytes from {start} are "
            "not this master's. The slave is not "
            "replicated to and not counted for SYNC_MASTER acks (sends get SLAVE_NOT_AVAILABLE); "
            "an operator must either rebuild the slave from the master (its data past "
            f"{start} is then lost) or restore the master from the slave (see README)"
        )
        self.last_write = now - self.heartbeat_s  # announce it to the slave at the next tick
        log.error("%s", self.problem)

    def _choose_start(self, request: int) -> None:
        if request == 0:
            # The reference's rule: an empty slave starts at the master's LAST mapped file.
            start = self.log.last_file_start()
            if start > self.log.min_offset:
                log.warning(
                    "slave %s is empty: replication starts at the master's last file, offset %d; "
                    "the master's data in [%d, %d) will NOT be on this slave (RocketMQ does the "
                    "same; copy the older files by hand if the slave needs them)",
                    self.peer,
                    start,
                    self.log.min_offset,
                    start,
                )
        else:
            start = request
        self.next_transfer_from = start
        if request and request < self.log.min_offset:
            self._unavailable(request, "asks for")
        else:
            self.state = SessionState.STREAMING
        log.info(
            "slave %s connected: slaveRequestOffset=%d nextTransferFromWhere=%d masterMaxOffset=%d",
            self.peer,
            request,
            start,
            self.log.max_offset,
        )

    def _unavailable(self, offset: int, what: str) -> None:
        self.state = SessionState.OFFSET_UNAVAILABLE
        self.problem = (
            f"slave {self.peer} {what} offset {offset} but the master's commit log "
            f"starts at {self.log.min_offset}: the data it needs is gone; rebuild the slave"
        )
        log.error("%s", self.problem)

    def _gone(self, start: int) -> bool:
        """The next bytes to send are no longer in the log (retention deleted their file under a slave
        that was behind): the session stops as at connect time, never waits silently (4.9 does)."""
        if start >= self.log.min_offset:
            return False
        self._unavailable(start, "needs")
        return True

    # -- writer -----------------------------------------------------------------------------------
    def next_frame(self, now: float) -> tuple[Chunk, Chunk] | None:
        """The next data frame (header, body), or None when the slave is caught up or not started."""
        frames = self.next_frames(now, self.batch_size)
        return (frames[0], frames[1]) if frames else None

    def next_frames(self, now: float, max_bytes: int) -> list[Chunk]:
        """Frames for up to max_bytes of log as [header, body, header, body, ...].

        One read from the commit log, cut into frames of at most haTransferBatchSize: the wire is
        exactly the reference's, with fewer reads and writes per byte on this side.
        """
        if self.state != SessionState.STREAMING:
            return []
        start = self.next_transfer_from
        if start >= self.log.max_offset or self._gone(start):
            return []
        data = self.log.read(start, max(max_bytes, self.batch_size))  # never crosses a file boundary
        if not data:
            return []
        view = memoryview(data)
        out: list[Chunk] = []
        pos, n, batch = 0, len(data), self.batch_size
        while pos < n:
            size = min(batch, n - pos)
            out.append(encode_header(start + pos, size))
            out.append(view[pos : pos + size])
            pos += size
        self._sent(start + n, n, len(out) // 2, now)
        return out

    def next_file_frames(self, now: float, max_bytes: int) -> tuple[MappedFile, list[FileFrame]] | None:
        """Like next_frames, but the bodies stay in the commit-log file: (file, [(header, file
        position, size), ...]) for a sender that hands the file to the kernel, or None."""
        if self.state != SessionState.STREAMING:
            return None
        start = self.next_transfer_from
        if start >= self.log.max_offset or self._gone(start):
            return None
        region = self.log.region(start, max(max_bytes, self.batch_size))  # never crosses a file boundary
        if region is None:
            return None
        f, fpos, n = region
        frames: list[FileFrame] = []
        pos, batch = 0, self.batch_size
        while pos < n:
            size = min(batch, n - pos)
            frames.append((encode_header(start + pos, size), fpos + pos, size))
            pos += size
        self._sent(start + n, n, len(frames), now)
        return f, frames

    def _sent(self, end: int, n: int, frames: int, now: float) -> None:
        self.next_transfer_from = end
        self.incarnation.streaming(end)
        self.last_write = now
        self.bytes_sent += n + HEADER_SIZE * frames

    def heartbeat(self, now: float) -> bytes | None:
        """A size-0 frame when the writer has been idle for haSendHeartbeatInterval.

        SLAVE_AHEAD: the heartbeat carries the offset where this master's life began (below the
        slave's max offset), which tells the slave its master is behind it; no data ever follows."""
        if self.state == SessionState.SLAVE_AHEAD:
            return self._ahead_heartbeat(now)
        if self.next_transfer_from < 0 or now - self.last_write < self.heartbeat_s:
            return None
        self.last_write = now
        if self.state == SessionState.OFFSET_UNAVAILABLE:
            log.error("%s (still connected, sending heartbeats only)", self.problem)
        return encode_header(self.next_transfer_from, 0)

    def _ahead_heartbeat(self, now: float) -> bytes | None:
        if now - self.last_write < self.heartbeat_s:
            return None
        self.last_write = now
        log.error(
            "%s (still connected, heartbeats only; slave at %d, master at %d)",
            self.problem,
            self.slave_ack_offset,
            self.log.max_offset,
        )
        return encode_header(self.incarnation.fork_from, 0)

    def close(self) -> None:
        """The connection is gone: a SLAVE_AHEAD session no longer keeps its host's fence."""
        if self.state == SessionState.SLAVE_AHEAD:
            n = self.incarnation.ahead_live.get(self.host, 0) - 1
            if n > 0:
                self.incarnation.ahead_live[self.host] = n
            else:
                self.incarnation.ahead_live.pop(self.host, None)
        self.state = SessionState.CLOSED

    def expired(self, now: float) -> bool:
        """Nothing read for haHousekeepingInterval: the link is dead or the peer is not a slave."""
        return now - self.last_read > self.housekeeping_s

    def lag(self) -> int:
        return max(0, self.log.max_offset - max(self.slave_ack_offset, 0))
