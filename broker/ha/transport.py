"""TCP transports for the HA port that keep commit-log bytes out of Python.

Master: `FileFrameServer` sends a data frame as its 12-byte header (send with MSG_MORE) followed
by the body straight from the commit-log file with os.sendfile: the bytes go page cache -> socket
in the kernel, never through a Python object. Frames are written whole and in order: a frame the
socket did not take completely is finished on the next writable event before anything else, and
bytes written with the ordinary `write()` meanwhile (a heartbeat) go after it.

Slave: `RecvIntoClient` reads into one reused buffer (recv_into) instead of a new bytes object per
read, and sends a report at once when nothing is queued ahead of it instead of a reactor turn later.
The protocol above sees a memoryview that is valid only during dataReceived.

Both are used only on a real POSIX reactor; test reactors keep Twisted's own transports, and the
wire is the same either way.
"""
from __future__ import annotations

import errno
import os
import socket

from twisted.internet import main, tcp
from twisted.internet.posixbase import PosixReactorBase

HEADER_FLAGS = getattr(socket, "MSG_MORE", 0)  # header and body leave in one segment
RECV_BUFFER = 1 << 20  # the reference slave reads into a 4 MiB buffer; 1 MiB covers any socket read here


class FileGone(OSError):
    """The commit-log file of a queued frame was closed (deleted) before the frame went out."""


class _FileFrames:
    """Frames queued for one file: [(header, file position, size)], and how far the first one went."""

    __slots__ = ("file", "frames", "index", "header_sent", "body_sent")

    def __init__(self, file, frames):
        self.file = file
        self.frames = frames
        self.index = 0
        self.header_sent = 0
        self.body_sent = 0

    def send(self, sock) -> bool:
        """Write what the socket takes; True when every frame is out. Raises OSError on a dead link."""
        out_fd = sock.fileno()
        frames = self.frames
        while self.index < len(frames):
            header, pos, size = frames[self.index]
            try:
                while self.header_sent < len(header):
                    self.header_sent += sock.send(header[self.header_sent:], HEADER_FLAGS if size else 0)
                while self.body_sent < size:
                    in_fd = self.file.fd
                    if in_fd < 0:
                        raise FileGone(errno.EBADF, f"{self.file.path} was closed while a frame from it was queued")
                    n = os.sendfile(out_fd, in_fd, pos + self.body_sent, size - self.body_sent)
                    if n == 0:
                        raise FileGone(errno.EIO, f"{self.file.path} ended before file position {pos + size}")
                    self.body_sent += n
            except BlockingIOError:
                return False
            except InterruptedError:
                continue
            self.index += 1
            self.header_sent = self.body_sent = 0
        return True


class FileFrameServer(tcp.Server):
    """tcp.Server that can also send frames whose bodies are regions of a commit-log file."""

    _file_frames: _FileFrames | None = None

    @property
    def file_frames_pending(self) -> bool:
        return self._file_frames is not None

    def _buffered(self) -> int:
        return len(self.dataBuffer) - self.offset + self._tempDataLen

    def write_file_frames(self, file, frames) -> bool:
        """Queue frames [(header, file position, size)] of `file` (a MappedFile) and send what the
        socket takes now. True when all went out; otherwise the producer is resumed once they have."""
        if not self.connected or self.disconnecting or self._writeDisconnected:
            return True
        if self._file_frames is not None or self._buffered():
            # Something is queued ahead: keep the order by going through the ordinary buffer.
            for header, pos, size in frames:
                self.write(header + file.read(pos, size))
            return False
        pending = _FileFrames(file, frames)
        try:
            if pending.send(self.socket):
                return True
        except OSError as e:
            self._file_frames = pending
            self._send_error = e
            self.startWriting()  # doWrite reports the loss through the reactor, as a failed write does
            return False
        self._file_frames = pending
        self.startWriting()
        return False

    def doWrite(self):
        pending = self._file_frames
        if pending is None:
            return super().doWrite()
        error = getattr(self, "_send_error", None)
        if error is None:
            try:
                done = pending.send(self.socket)
            except OSError as e:
                error = e
        if error is not None:
            self._file_frames = None
            return main.CONNECTION_LOST
        if not done:
            return None
        self._file_frames = None
        if self._buffered():
            return super().doWrite()  # bytes written while the frames were queued
        self.stopWriting()
        if self.producer is not None:
            self.producerPaused = False
            self.producer.resumeProducing()
        elif self.disconnecting:
            return self._postLoseConnection()
        return None


class HAPort(tcp.Port):
    transport = FileFrameServer


class RecvIntoClient(tcp.Client):
    """tcp.Client reading into one reused buffer; small writes go out at once when nothing is queued."""

    _recv_buf: bytearray | None = None

    def doRead(self):
        buf = self._recv_buf
        if buf is None:
            buf = self._recv_buf = bytearray(max(self.bufferSize, RECV_BUFFER))
        # Read until the socket is empty (or the buffer full) before handing anything up: with the
        # reference's 64 KiB socket buffers one recv brings at most ~100 KiB, and the master refills
        # the window while we read, so this stores and reports once per burst instead of per recv.
        view = memoryview(buf)
        n, size, result = 0, len(buf), None
        recv_into = self.socket.recv_into
        while n < size:
            try:
                got = recv_into(view[n:])
            except BlockingIOError:
                break
            except InterruptedError:
                continue
            except OSError:
                result = main.CONNECTION_LOST
                break
            if not got:
                result = main.CONNECTION_DONE
                break
            n += got
        if n:
            self.protocol.dataReceived(view[:n])
        return result

    def write(self, data) -> None:
        if (self.connected and not self._writeDisconnected and not self.disconnecting
                and len(self.dataBuffer) - self.offset + self._tempDataLen == 0):
            try:
                n = self.socket.send(data)
            except (BlockingIOError, InterruptedError):
                n = 0
            except OSError:
                n = 0  # let the ordinary path meet the error and report the loss
            if n == len(data):
                return
            data = bytes(data[n:])
        super().write(data)


class HAConnector(tcp.Connector):
    def _makeTransport(self):
        return RecvIntoClient(self.host, self.port, self.bindAddress, self, self.reactor)


def _real(reactor) -> bool:
    return isinstance(reactor, PosixReactorBase)


def listen_tcp(reactor, port: int, factory, backlog: int = 50, interface: str = ""):
    if not _real(reactor):
        return reactor.listenTCP(port, factory, backlog=backlog, interface=interface)
    p = HAPort(port, factory, backlog, interface, reactor)
    p.startListening()
    return p


def connect_tcp(reactor, host: str, port: int, factory, timeout: float = 30):
    if not _real(reactor):
        return reactor.connectTCP(host, port, factory, timeout=timeout)
    c = HAConnector(host, port, factory, timeout, None, reactor)
    c.connect()
    return c
