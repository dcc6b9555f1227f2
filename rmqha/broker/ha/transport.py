"""TCP transports for the HA port that keep commit-log bytes out of Python.

Master: `FileFrameServer` sends a data frame as its 12-byte header (send with MSG_MORE) followed
by the body straight from the commit-log file with os.sendfile: the bytes go page cache -> socket
in the kernel, never through a Python object. Frames are written whole and in order: a frame the
socket did not take completely is finished on the next writable event before anything else, and
bytes written with the ordinary `write()` meanwhile (a heartbeat) go after it.

Slave: `SpliceClient` (Linux, the default) never reads frame bodies into Python either: splice(2)
moves what the socket holds into a pipe, the session reads the 12-byte headers from the pipe and has
each body spliced on into its commit-log file, so the bytes are copied once, into the page cache
(recv_into + pwrite copies them twice; README "Benchmarks" has the figures). `RecvIntoClient`, the fallback
(`haSlaveZeroCopy=false`, or no splice), reads into one reused buffer (recv_into) and hands the
protocol a memoryview valid only during dataReceived. Both send a report at once when nothing is
queued ahead of it instead of a reactor turn later.

The splice loop itself (read a header, splice its body, again) runs in C when `_frames.c` is built
(`SplicePipe.store_frames`): a 32 KiB frame then costs two system calls instead of ~5 us of Python on
top of them. The C loop takes only frames that continue the log inside the current file and hands
every other header back to SlaveSession.drain, which stays the one place that decides.

Both are used only on a real POSIX reactor; test reactors keep Twisted's own transports, and the
wire is the same either way.
"""

from __future__ import annotations

import errno
import functools
import fcntl
import os
import socket
from collections.abc import Callable
from typing import Any

from twisted.internet import main, tcp
from twisted.internet.posixbase import PosixReactorBase
from twisted.python.failure import Failure

from rmqha.broker.store.mapped_file import MappedFile

from .master_session import FileFrame

HEADER_FLAGS = getattr(socket, "MSG_MORE", 0)  # header and body leave in one segment
RECV_BUFFER = 1 << 20  # the reference slave reads into a 4 MiB buffer; 1 MiB covers any socket read here
PIPE_SIZE = 1 << 20  # the default pipe (64 KiB) would take less than one socket read
MAX_FILLS = 16  # pipe fills per readable event, so one busy link cannot keep the reactor from others
CAN_SPLICE = hasattr(os, "splice")

try:
    from . import _frames  # type: ignore[attr-defined]  # the C extension (_frames.c), no stub
except ImportError:  # not built here (no C compiler at install time): the Python loop does it all
    _frames = None


class FileGone(OSError):
    """The commit-log file of a queued frame was closed (deleted) before the frame went out."""


class _FileFrames:
    """Frames queued for one file: [(header, file position, size)], and how far the first one went."""

    __slots__ = ("file", "frames", "index", "header_sent", "body_sent")

    def __init__(self, file: MappedFile, frames: list[FileFrame]):
        self.file = file
        self.frames = frames
        self.index = 0
        self.header_sent = 0
        self.body_sent = 0

    def send(self, sock: socket.socket) -> bool:
        """Write what the socket takes; True when every frame is out. Raises OSError on a dead link."""
        out_fd = sock.fileno()
        frames = self.frames
        while self.index < len(frames):
            header, pos, size = frames[self.index]
            try:
                while self.header_sent < len(header):
                    self.header_sent += sock.send(header[self.header_sent :], HEADER_FLAGS if size else 0)
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

    def write_file_frames(self, file: MappedFile, frames: list[FileFrame]) -> bool:
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
            self._hold(pending)
            self._send_error = e
            self.startWriting()  # doWrite reports the loss through the reactor, as a failed write does
            return False
        self._hold(pending)
        self.startWriting()
        return False

    def _hold(self, pending: _FileFrames) -> None:
        """Queued frames hold their file: retention waits for them (at most destroyMapedFileIntervalForcibly)."""
        pending.file.holds += 1
        self._file_frames = pending

    def _release(self) -> None:
        if self._file_frames is not None:
            self._file_frames.file.holds -= 1
            self._file_frames = None

    def connectionLost(self, reason: Failure) -> None:
        self._release()
        super().connectionLost(reason)

    def doWrite(self) -> Any:  # what tcp.Server.doWrite returns (unannotated)
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
            self._release()
            return main.CONNECTION_LOST
        if not done:
            return None
        self._release()
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


def _read_some(read: Callable[[], int]) -> tuple[int, BaseException | None]:
    """One non-blocking read: (bytes read, None); (0, None) when the socket holds nothing now; or
    (0, why) when the link ended (Twisted's CONNECTION_DONE or CONNECTION_LOST)."""
    while True:
        try:
            got = read()
        except BlockingIOError:
            return 0, None
        except InterruptedError:
            continue
        except OSError:
            return 0, main.CONNECTION_LOST
        return (got, None) if got else (0, main.CONNECTION_DONE)


class RecvIntoClient(tcp.Client):
    """tcp.Client reading into one reused buffer; small writes go out at once when nothing is queued."""

    _recv_buf: bytearray | None = None

    # ignore[override]: tcp._AbortingMixin types doRead by assigning it a lambda that returns None
    def doRead(self) -> BaseException | None:  # type: ignore[override]
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
            got, result = _read_some(functools.partial(recv_into, view[n:]))
            if not got:
                break
            n += got
        if n:
            # IProtocol is a zope interface: mypy reads its methods as taking no self (no mypy-zope)
            self.protocol.dataReceived(view[:n])  # type: ignore[call-arg, misc]
        return result

    def write(self, data: bytes) -> None:
        if (
            self.connected
            and not self._writeDisconnected
            and not self.disconnecting
            and len(self.dataBuffer) - self.offset + self._tempDataLen == 0
        ):
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


class SplicePipe:
    """The pipe between the HA socket and the commit log, seen by SlaveSession.drain as a source:
    `available` bytes, `take(n)` reads (headers), `store(file, pos, n)` splices on into a file."""

    def __init__(self, size: int = PIPE_SIZE, compiled: bool = True):
        self.r, self.w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        if not (compiled and _frames is not None):
            # SlaveSession.drain then reads every header itself (it looks store_frames up with getattr)
            self.store_frames = None  # type: ignore[method-assign, assignment]
        try:
            fcntl.fcntl(self.w, fcntl.F_SETPIPE_SZ, size)
        except OSError:
            pass  # above /proc/sys/fs/pipe-max-size: the default size works, with more fills per read
        self.capacity = fcntl.fcntl(self.w, fcntl.F_GETPIPE_SZ)
        self.available = 0

    def fill(self, sock_fd: int) -> int:
        """Move what the socket holds (up to the pipe's room) into the pipe; 0 at end of stream.
        Raises BlockingIOError when the socket holds nothing."""
        n = os.splice(sock_fd, self.w, self.capacity - self.available, flags=os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK)
        self.available += n
        return n

    def take(self, n: int) -> bytes:
        data = os.read(self.r, min(n, self.available))
        self.available -= len(data)
        return data

    def store(self, file: MappedFile, pos: int, n: int) -> int:
        moved = file.splice_in(self.r, pos, min(n, self.available))
        self.available -= moved
        return moved

    def store_frames(
        self, file: MappedFile, pos: int, body_left: int, body_size: int, next_offset: int, file_end: int, max_body: int
    ) -> tuple[Any, ...]:
        """Run _frames.splice_frames over what the pipe holds (see its doc); the pipe's count follows.
        A failed system call is raised as the Python loop raises it, once the state it returns is applied
        by the caller: the error comes back as `err` in the tuple. A closed file (fd -1) fails in the
        splice with EBADF, as splice_in does, and only if a body is to go into it."""
        out: tuple[Any, ...] = _frames.splice_frames(
            self.r, self.available, file.fd, pos, body_left, body_size, next_offset, file_end, max_body
        )
        self.available = out[0]
        return out

    def close(self) -> None:
        for fd in (self.r, self.w):
            os.close(fd)
        self.r = self.w = -1


class SpliceClient(RecvIntoClient):
    """tcp.Client whose protocol gets the stream as a SplicePipe (pipeReceived), not as bytes."""

    _pipe: SplicePipe | None = None

    @property
    def compiled_frames(self) -> bool:
        """Whether the frame loop runs in C (_frames is built and the connector allows it)."""
        return _frames is not None and bool(getattr(self.connector, "compiled_frames", True))

    def doRead(self) -> BaseException | None:  # type: ignore[override]  # as RecvIntoClient.doRead
        pipe = self._pipe
        if pipe is None:
            pipe = self._pipe = SplicePipe(compiled=self.compiled_frames)
        fd = self.socket.fileno()
        result: BaseException | None = None
        filled = False
        for _ in range(MAX_FILLS):
            if pipe.available == pipe.capacity:
                break  # the protocol stopped draining (it is closing the connection)
            n, result = _read_some(lambda: pipe.fill(fd))
            if not n:
                break
            filled = True
            self.protocol.pipeReceived(pipe)
            if self.disconnecting or not self.connected or self._aborting:
                return None  # the protocol closed the link: nothing more is read from it
        if filled:
            self.protocol.readDone()  # one report for everything this read stored
        return result

    def connectionLost(self, reason: Failure) -> None:
        try:
            super().connectionLost(reason)
        finally:
            if self._pipe is not None:
                self._pipe.close()
                self._pipe = None


class HAConnector(tcp.Connector):
    zero_copy = CAN_SPLICE
    compiled_frames = True

    def _makeTransport(self) -> RecvIntoClient:
        kind = SpliceClient if self.zero_copy else RecvIntoClient
        return kind(self.host, self.port, self.bindAddress, self, self.reactor)


def _real(reactor: object) -> bool:
    return isinstance(reactor, PosixReactorBase)


def listen_tcp(reactor: Any, port: int, factory: Any, backlog: int = 50, interface: str = "") -> Any:
    if not _real(reactor):
        return reactor.listenTCP(port, factory, backlog=backlog, interface=interface)
    p = HAPort(port, factory, backlog, interface, reactor)
    p.startListening()
    return p


def connect_tcp(
    reactor: Any,
    host: str,
    port: int,
    factory: Any,
    timeout: float = 30,
    zero_copy: bool = True,
    compiled_frames: bool = True,
) -> Any:
    """zero_copy: the slave's stream goes socket -> pipe -> commit log with splice (where there is one);
    compiled_frames: its frame loop in C (where _frames is built)."""
    if not _real(reactor):
        return reactor.connectTCP(host, port, factory, timeout=timeout)
    c = HAConnector(host, port, factory, timeout, None, reactor)
    c.zero_copy = zero_copy and CAN_SPLICE
    c.compiled_frames = compiled_frames
    c.connect()
    return c
