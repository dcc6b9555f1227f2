"""One slave connection on the master, as an IO-free state machine (HA-PROTOCOL §3).

The reader half turns reports into acks; the writer half decides what to send next. Time is passed
in (seconds, from the reactor), so tests drive it with task.Clock.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from .wire import HEADER_SIZE, ProtocolError, ReportReader, encode_header

log = logging.getLogger("broker.ha.master")


class SessionState:
    AWAITING_REPORT = "AWAITING_REPORT"  # connected, no valid report yet: not counted as a slave
    STREAMING = "STREAMING"
    OFFSET_UNAVAILABLE = "OFFSET_UNAVAILABLE"  # the slave wants data the master no longer has
    CLOSED = "CLOSED"


@dataclass
class Ack:
    offset: int
    first: bool  # the connection's first valid report (sets slaveRequestOffset)


class MasterSession:
    def __init__(self, commitlog, peer: str, *, batch_size: int, heartbeat_s: float,
                 housekeeping_s: float, now: float):
        self.log = commitlog
        self.peer = peer
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
        self.problem = ""  # a human-readable reason when state is OFFSET_UNAVAILABLE

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
        if offset > max_offset:
            raise ProtocolError(f"slave {self.peer} reported offset {offset} beyond the master's max "
                                f"offset {max_offset}: a rogue peer, or a slave whose log has data this "
                                "master does not (the slave must be truncated or rebuilt)")
        first = self.slave_request_offset < 0
        if first:
            self.slave_request_offset = offset
            self._choose_start(offset)
        elif offset < self.slave_ack_offset:
            log.warning("slave %s ack went backwards: slaveAckOffset %d -> %d", self.peer,
                        self.slave_ack_offset, offset)
        self.slave_ack_offset = offset
        return Ack(offset, first)

    def _choose_start(self, request: int) -> None:
        if request == 0:
            # The reference's rule: an empty slave starts at the master's LAST mapped file.
            start = self.log.last_file_start()
            if start > self.log.min_offset:
                log.warning("slave %s is empty: replication starts at the master's last file, offset %d; "
                            "the master's data in [%d, %d) will NOT be on this slave (RocketMQ does the "
                            "same; copy the older files by hand if the slave needs them)",
                            self.peer, start, self.log.min_offset, start)
        else:
            start = request
        self.next_transfer_from = start
        if request and request < self.log.min_offset:
            self.state = SessionState.OFFSET_UNAVAILABLE
            self.problem = (f"slave {self.peer} asks for offset {request} but the master's commit log "
                            f"starts at {self.log.min_offset}: the data it needs is gone; rebuild the slave")
            log.error("%s", self.problem)
        else:
            self.state = SessionState.STREAMING
        log.info("slave %s connected: slaveRequestOffset=%d nextTransferFromWhere=%d masterMaxOffset=%d",
                 self.peer, request, start, self.log.max_offset)

    # -- writer -----------------------------------------------------------------------------------
    def next_frame(self, now: float) -> tuple[bytes, bytes] | None:
        """The next data frame (header, body), or None when the slave is caught up or not started."""
        frames = self.next_frames(now, self.batch_size)
        return (frames[0], frames[1]) if frames else None

    def next_frames(self, now: float, max_bytes: int) -> list:
        """Frames for up to max_bytes of log as [header, body, header, body, ...].

        One read from the commit log, cut into frames of at most haTransferBatchSize: the wire is
        exactly the reference's, with fewer reads and writes per byte on this side.
        """
        if self.state != SessionState.STREAMING:
            return []
        start = self.next_transfer_from
        if start >= self.log.max_offset:
            return []
        data = self.log.read(start, max(max_bytes, self.batch_size))  # never crosses a file boundary
        if not data:
            return []
        view = memoryview(data)
        out = []
        pos, n, batch = 0, len(data), self.batch_size
        while pos < n:
            size = min(batch, n - pos)
            out.append(encode_header(start + pos, size))
            out.append(view[pos:pos + size])
            pos += size
        self.next_transfer_from = start + n
        self.last_write = now
        self.bytes_sent += n + HEADER_SIZE * (len(out) // 2)
        return out

    def heartbeat(self, now: float) -> bytes | None:
        """A size-0 frame when the writer has been idle for haSendHeartbeatInterval."""
        if self.next_transfer_from < 0 or now - self.last_write < self.heartbeat_s:
            return None
        self.last_write = now
        if self.state == SessionState.OFFSET_UNAVAILABLE:
            log.error("%s (still connected, sending heartbeats only)", self.problem)
        return encode_header(self.next_transfer_from, 0)

    def expired(self, now: float) -> bool:
        """Nothing read for haHousekeepingInterval: the link is dead or the peer is not a slave."""
        return now - self.last_read > self.housekeeping_s

    def lag(self) -> int:
        return max(0, self.log.max_offset - max(self.slave_ack_offset, 0))
