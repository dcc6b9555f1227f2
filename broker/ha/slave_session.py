"""The slave's side of one HA connection (HAClient, HA-PROTOCOL §4), IO-free.

It checks every frame's fromPhyOffset against its own max offset, appends bodies to the commit log,
and says what to report. Reports are coalesced per read: after all frames of one read are stored
the slave reports once, which the master treats exactly like several reports in a row.
"""
from __future__ import annotations

import logging

from .wire import FrameReader, encode_report

log = logging.getLogger("broker.ha.slave")


class OffsetMismatch(Exception):
    def __init__(self, slave_offset: int, master_offset: int):
        super().__init__(f"master pushed offset not equal the max phy offset in slave, "
                         f"SLAVE: {slave_offset} MASTER: {master_offset}")
        self.slave_offset = slave_offset
        self.master_offset = master_offset


class SlaveSession:
    def __init__(self, store, *, heartbeat_s: float, housekeeping_s: float, now: float,
                 max_body: int | None = None):
        self.store = store
        self.frames = FrameReader(max_body) if max_body else FrameReader()
        self.heartbeat_s = heartbeat_s
        self.housekeeping_s = housekeeping_s
        self.last_read = now
        self.last_write = now
        self.reported = -1  # currentReportedOffset
        self.bytes_received = 0
        self.last_data = None  # when the last frame with a body arrived
        # (slave max offset, master offset) once the master said it is behind us: a heartbeat below
        # our max offset. Our bytes past its offset are not on the master; we keep them (no silent
        # truncation), stay connected and keep reporting; the master sends nothing (SLAVE_AHEAD).
        self.master_behind: tuple[int, int] | None = None

    def start(self, now: float) -> bytes:
        """On connect: report our max offset at once (the reference waits one heartbeat interval)."""
        return self._report(now)

    def _report(self, now: float) -> bytes:
        self.reported = self.store.max_offset
        self.last_write = now
        return encode_report(self.reported)

    def on_data(self, data, now: float) -> bytes | None:
        """Store what arrived; return the report to send, if the offset moved.

        Raises ProtocolError (bad frame), OffsetMismatch (close and reconnect), or a StoreError
        (the bytes could not be stored: close, reconnect, and report the true offset).
        """
        self.last_read = now
        self.bytes_received += len(data)
        # Bodies of consecutive frames are stored with one write per read, not one per frame.
        pending, start, expected = [], -1, self.store.max_offset
        try:
            for frame in self.frames.feed(data):
                if not frame.body and not pending and 0 <= frame.offset < expected:
                    self.master_behind = (expected, frame.offset)
                    continue
                if expected != 0 and expected != frame.offset:
                    raise OffsetMismatch(expected, frame.offset)
                if frame.body:
                    if not pending:
                        start = frame.offset
                    pending.append(frame.body)
                    expected = frame.offset + len(frame.body)
        finally:
            if pending:  # what matched is stored even when a later frame did not
                self.store.append_replicated(start, pending)
                self.last_data = now
        if self.store.max_offset != self.reported:
            return self._report(now)
        return None

    def heartbeat(self, now: float) -> bytes | None:
        if now - self.last_write >= self.heartbeat_s:
            return self._report(now)
        return None

    def expired(self, now: float) -> bool:
        return now - self.last_read > self.housekeeping_s
