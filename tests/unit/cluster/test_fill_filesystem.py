"""fill_filesystem writes until the filesystem refuses, and returns what it wrote: the refusal must not
escape when the filler file is closed (a buffered file still holding bytes raised there, and the
nemesis reported a disk-full fault as failed)."""

import os
import resource
import signal

from rmqha.cluster import disk


def test_a_refused_write_ends_the_fill_without_raising(tmp_path, monkeypatch):
    limit = (2 << 20) + 12345  # a file size limit stands in for a full filesystem: writes past it fail
    real = os.statvfs

    class Vfs:
        f_frsize = 4096
        f_bavail = (64 << 20) // 4096  # "64 MiB free": more than can be written

    monkeypatch.setattr(disk.os, "statvfs", lambda p: Vfs() if str(p) == str(tmp_path) else real(p))
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    old_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, old_limit[1]))
    try:
        info = disk.fill_filesystem(tmp_path)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
        signal.signal(signal.SIGXFSZ, old_handler)
    assert info["filled"] == limit == (tmp_path / disk.FILLER).stat().st_size
    freed = disk.free_filesystem(tmp_path)
    assert freed["freed"] == limit and not (tmp_path / disk.FILLER).exists()
