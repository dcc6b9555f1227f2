"""Fixed-size store files named by their 20-digit start offset, as RocketMQ lays them out (WIRE-FACTS §6.5).

We write with pwrite and read with pread instead of mmap: on a full disk a write into a sparse mapped
page kills the process with SIGBUS, while pwrite fails with ENOSPC, which we can answer cleanly
without losing anything already stored. Files are still created at their full configured size, so
a RocketMQ tool reading the directory sees the layout it expects.
"""

from __future__ import annotations

import errno
import mmap
import os
from collections.abc import Sequence

from .record import BytesLike

ZERO_CHUNK = bytes(1 << 20)
SPLICE_FLAGS = getattr(os, "SPLICE_F_MOVE", 0)


class StoreError(Exception):
    """The store cannot go on as asked: wrong file size, another broker holds the lock, ..."""


class DiskFullError(StoreError):
    """A write did not fit. Nothing already stored was touched; the write position did not move."""


def _reserve(fd: int, size: int) -> None:
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as e:
        if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise
        os.ftruncate(fd, size)  # a filesystem without fallocate: sparse, as RocketMQ makes them


def fsync_directory(path: str) -> None:
    """Make the entries of a directory durable: a file created, renamed or deleted in it survives a power
    cut only after this (POSIX; a crash-consistency filesystem drops it otherwise)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def create_durably(path: str) -> None:
    """Create (or keep) an empty file whose name survives a power cut: its directory is fsynced."""
    with open(path, "a"):
        pass
    fsync_directory(os.path.dirname(path) or ".")


def make_dirs(directory: str, sync: bool = False) -> list[str]:
    """os.makedirs; returns the directories whose entries changed (the parent of each one created),
    fsynced first with sync=True."""
    missing = []
    d = os.path.abspath(directory)
    while not os.path.isdir(d):
        missing.append(d)
        d = os.path.dirname(d)
    os.makedirs(directory, exist_ok=True)
    changed = [os.path.dirname(m) for m in missing]
    for parent in changed if sync else ():
        fsync_directory(parent)
    return changed


def file_name(offset: int) -> str:
    return f"{offset:020d}"


def list_files(directory: str) -> list[tuple[int, str]]:
    """(start offset, path) of every store file in a directory, oldest first; other names are ignored."""
    if not os.path.isdir(directory):
        return []
    out = []
    for name in os.listdir(directory):
        if len(name) == 20 and name.isdigit():
            out.append((int(name), os.path.join(directory, name)))
    return sorted(out)


class MappedFile:
    """One store file. `wrote` is the end of valid data within it, as a file position."""

    def __init__(
        self,
        directory: str,
        base: int,
        size: int,
        create: bool = False,
        use_mmap: bool = False,
        preallocate: bool = False,
    ):
        """use_mmap: for small, hot files (consume queues). Their blocks are reserved with
        posix_fallocate first, so a full disk shows up here as DiskFullError, never as SIGBUS.
        preallocate: reserve a new file's blocks too (writes into a sparse file are ~15x slower
        here, and a full disk then fails at file creation instead of in the middle of a record)."""
        self.base = base
        self.size = size
        self.path = os.path.join(directory, file_name(base))
        # A new file is sized and fsynced under a temporary name and only then renamed into place: a
        # directory fsync (a flush on its thread) must never make its name durable before its length, or
        # a cut leaves a short file that the next start's load() refuses.
        fresh = create and not os.path.exists(self.path)
        opened = self.path + ".new" if fresh else self.path
        flags = os.O_RDWR | (os.O_CREAT if create else 0) | (os.O_TRUNC if fresh else 0)
        self.fd = os.open(opened, flags, 0o644)
        self.mm: mmap.mmap | None = None
        actual = os.fstat(self.fd).st_size
        try:
            if create and actual == 0:
                if use_mmap or preallocate:
                    _reserve(self.fd, size)
                else:
                    os.ftruncate(self.fd, size)
                os.fsync(self.fd)
                if fresh:
                    os.rename(opened, self.path)
            elif actual != size:
                raise StoreError(
                    f"{self.path} is {actual} bytes but the configured file size is {size}: "
                    "was this store written with another mappedFileSize? Set the same value again "
                    "(RocketMQ refuses to load such a store too)."
                )
            elif use_mmap:
                _reserve(self.fd, size)
            if use_mmap:
                self.mm = mmap.mmap(self.fd, size)
        except OSError as e:
            os.close(self.fd)
            if create and actual == 0:
                os.unlink(opened if fresh and not os.path.exists(self.path) else self.path)
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DiskFullError(f"{self.path}: {os.strerror(e.errno)} reserving {size} bytes") from e
            raise
        except StoreError:
            os.close(self.fd)
            raise
        self.wrote = 0
        self.flushed = 0
        self.holds = 0  # senders with frames of this file queued (HA): retention waits for them

    @property
    def end(self) -> int:
        return self.base + self.size

    @property
    def free(self) -> int:
        return self.size - self.wrote

    def write_at(self, pos: int, data: BytesLike) -> None:
        """Write all of data at file position pos, or raise DiskFullError and leave `wrote` as it was."""
        if self.mm is not None:
            self.mm[pos : pos + len(data)] = data
            return
        try:
            if os.pwritev(self.fd, [data], pos) == len(data):  # the usual case: all of it in one call
                return
        except OSError:
            pass  # _pwritev retries and says what went wrong
        self._pwritev(pos, [data], len(data))

    def append(self, data: BytesLike) -> int:
        pos = self.wrote
        self.write_at(pos, data)
        self.wrote = pos + len(data)
        return pos

    def append_many(self, buffers: Sequence[BytesLike], total: int) -> int:
        """Append several buffers with one pwritev; total is their summed length."""
        pos = self.wrote
        self._pwritev(pos, buffers, total)
        self.wrote = pos + total
        return pos

    def _pwritev(self, pos: int, buffers: Sequence[BytesLike], total: int) -> None:
        done = 0
        bufs = [memoryview(b) for b in buffers]
        while bufs:
            try:
                n = os.pwritev(self.fd, bufs, pos + done)
            except OSError as e:
                self._raise_if_full(e, total, pos)
                raise
            if n == 0:
                raise DiskFullError(f"{self.path}: short write at {self.base + pos}")
            done += n
            while bufs and n >= len(bufs[0]):
                n -= len(bufs[0])
                bufs.pop(0)
            if n:
                bufs[0] = bufs[0][n:]

    def splice_in(self, pipe_fd: int, pos: int, n: int) -> int:
        """Move up to n bytes from a pipe into this file at pos with splice(2): the bytes go from
        the pipe's pages to the page cache without entering Python. Returns the bytes moved; does
        not move `wrote` (the caller counts them once a whole frame is in). DiskFullError as pwrite."""
        if pos < 0 or pos + n > self.size:
            raise StoreError(f"{self.path}: {n} bytes at file position {pos} do not fit in {self.size}")
        try:
            moved = os.splice(pipe_fd, self.fd, n, offset_dst=pos, flags=SPLICE_FLAGS)
        except OSError as e:
            self._raise_if_full(e, n, pos)
            raise
        if moved == 0:
            self.raise_splice_error(-1, pos, n)
        return moved

    def raise_splice_error(self, err: int, pos: int, n: int) -> None:
        """Raise what splice_in raises for a splice of n bytes into this file at pos that failed with
        errno err (-1: it moved nothing), for the compiled frame loop (rmqha/broker/ha/_frames.c)."""
        if err == -1:
            raise DiskFullError(f"{self.path}: short write at {self.base + pos}")
        e = OSError(err, os.strerror(err))
        self._raise_if_full(e, n, pos)
        raise e

    def _raise_if_full(self, e: OSError, nbytes: int, pos: int) -> None:
        """A failed write on a full disk or quota is a DiskFullError (nothing moved `wrote`: the caller
        can answer cleanly); any other OSError is the caller's to re-raise."""
        if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise DiskFullError(
                f"{self.path}: {os.strerror(e.errno)} writing {nbytes} bytes at {self.base + pos}"
            ) from e

    def read(self, pos: int, n: int) -> bytes:
        n = max(0, min(n, self.size - pos))
        if self.mm is not None:
            return self.mm[pos : pos + n]
        return os.pread(self.fd, n, pos)

    def flush(self) -> int:
        """fdatasync if there is unflushed data; returns the file position the sync covered.

        Runs on a worker thread while the reactor appends: the position is read BEFORE the sync,
        so the answer never counts bytes written during it (they may or may not be on disk).
        """
        wrote = self.wrote
        if wrote > self.flushed:
            if self.mm is not None:
                self.mm.flush()
            else:
                os.fdatasync(self.fd)
            self.flushed = wrote
        return wrote

    def sync(self) -> None:
        """fdatasync (msync) whatever the file holds, `flushed` or not (after a wipe)."""
        if self.mm is not None:
            self.mm.flush()
        else:
            os.fdatasync(self.fd)

    def wipe_after(self, pos: int) -> int:
        """Zero every byte that holds data after pos, so nothing stale can look valid later.

        Uses SEEK_DATA/SEEK_HOLE to skip the sparse (never written) regions. Returns bytes zeroed.
        """
        if self.mm is not None:
            tail = self.mm[pos : self.size]
            zeroed = len(tail) - tail.count(0)
            if zeroed:
                self.mm[pos : self.size] = bytes(self.size - pos)
            return zeroed
        zeroed = 0
        cur = pos
        while cur < self.size:
            try:
                start = os.lseek(self.fd, cur, os.SEEK_DATA)
                stop = min(os.lseek(self.fd, start, os.SEEK_HOLE), self.size)
            except OSError as e:
                if e.errno == errno.ENXIO:  # no data after cur
                    break
                start, stop = cur, self.size  # filesystem without SEEK_DATA: zero it all
            while start < stop:
                chunk = os.pread(self.fd, min(len(ZERO_CHUNK), stop - start), start)
                if chunk.count(0) != len(chunk):
                    self.write_at(start, ZERO_CHUNK[: len(chunk)])
                    zeroed += len(chunk)
                start += len(chunk) or (stop - start)
            cur = stop
        return zeroed

    def close(self) -> None:
        if self.mm is not None:
            self.mm.close()
            self.mm = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def destroy(self) -> None:
        self.close()
        os.unlink(self.path)


class MappedFileQueue:
    """The ordered files of one log (the commit log, or one consume queue)."""

    def __init__(self, directory: str, file_size: int, use_mmap: bool = False, preallocate: bool = False):
        self.directory = directory
        self.file_size = file_size
        self.use_mmap = use_mmap
        self.preallocate = preallocate
        self.files: list[MappedFile] = []
        # directories whose entries changed since the last flush (a file or a directory created in them):
        # flush() fsyncs them, so a file it reports durable cannot vanish in a power cut
        self.unsynced_dirs: set[str] = set()

    def load(self) -> None:
        for base, _path in list_files(self.directory):
            if base % self.file_size:
                raise StoreError(
                    f"{_path}: start offset {base} is not a multiple of the file size "
                    f"{self.file_size}; was mappedFileSize changed?"
                )
            self.files.append(MappedFile(self.directory, base, self.file_size, use_mmap=self.use_mmap))
        for a, b in zip(self.files, self.files[1:]):
            if b.base != a.end:
                raise StoreError(f"{self.directory}: gap between {a.path} and {b.path}; a file is missing")

    @property
    def min_offset(self) -> int:
        return self.files[0].base if self.files else 0

    @property
    def max_offset(self) -> int:
        return self.files[-1].base + self.files[-1].wrote if self.files else 0

    @property
    def last(self) -> MappedFile | None:
        return self.files[-1] if self.files else None

    def new_file(self, base: int) -> MappedFile:
        created = make_dirs(self.directory)
        try:
            f = MappedFile(
                self.directory, base, self.file_size, create=True, use_mmap=self.use_mmap, preallocate=self.preallocate
            )
        finally:  # marked once the name is there: a flush that syncs them meanwhile leaves them marked
            self.unsynced_dirs.update(created)
            self.unsynced_dirs.add(self.directory)
        self.files.append(f)
        return f

    def writable_file(self, at: int | None = None) -> MappedFile:
        """The file to append into; a new one when the last is full (or when empty, at `at`)."""
        last = self.last
        if last is None:
            start = at if at is not None else 0
            return self.new_file(start - start % self.file_size)
        if last.wrote >= last.size:
            return self.new_file(last.end)
        return last

    def find(self, offset: int) -> MappedFile | None:
        if not self.files or offset < self.files[0].base:
            return None
        idx = (offset - self.files[0].base) // self.file_size
        if idx >= len(self.files):
            return None
        return self.files[idx]

    def truncate(self, offset: int) -> tuple[int, int]:
        """Make `offset` the end: delete files that start at or after it, wipe stale bytes in the one
        that holds it. Returns (files deleted, non-zero bytes wiped)."""
        deleted = 0
        while self.files and self.files[-1].base >= offset:
            self.files.pop().destroy()
            deleted += 1
        if deleted:  # before the wipe is synced: a cut between must not bring the later files back after it
            fsync_directory(self.directory)
        wiped = 0
        if self.files:
            f = self.files[-1]
            pos = offset - f.base
            if pos < f.size:
                wiped = f.wipe_after(pos)
            f.wrote = min(pos, f.size)
            f.flushed = min(f.flushed, f.wrote)
            if wiped:  # durable at once: a power cut must not bring the stale bytes back as records
                f.sync()
        return deleted, wiped

    def flush(self) -> int:
        """fdatasync every file with unsynced data; returns the log offset durable up to.

        Safe against the reactor appending meanwhile: the files are taken as they are now, and each
        one's position is captured before its fdatasync, so the offset returned is exactly what was
        synced (never max_offset read afterwards). Only the last file is still being written.
        """
        files = list(self.files)
        if not files:
            return 0
        for f in files[:-1]:
            f.flush()
        last = files[-1]
        end = last.base + last.flush()
        for d in sorted(self.unsynced_dirs, key=len, reverse=True):
            # taken off before its fsync: a file the reactor creates in d meanwhile puts d back, and the
            # next flush syncs it again (taken off after, that file's name would never be synced)
            self.unsynced_dirs.discard(d)
            fsync_directory(d)
        return end

    def close(self) -> None:
        for f in self.files:
            f.close()
