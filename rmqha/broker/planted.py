"""Planted bugs: deliberate defects a test switches on to show that the audit's checkers can fail.

A checker that has never seen the bug it looks for may pass vacuously. Each entry here breaks one
guarantee the audit checks, the way a real broker bug would; `plantBug=<name>[,<name>...]` in
broker.properties switches them on (never set it outside such a test: the broker logs an ERROR at
start and shows `plantedBugs` in /status). tests/integration/test_planted_bugs.py runs each one through
a chaos run and asserts the verdict it must turn to FAIL.
"""
from __future__ import annotations

PLANTED_BUGS: dict[str, str] = {
    "ack-before-replication": "a SYNC_MASTER answers SEND_OK without waiting for a slave "
                              "(caught by: no acknowledged send lost, after a master power loss)",
    "skip-flush": "SYNC_FLUSH answers SEND_OK at once and nothing is ever fdatasync'ed "
                  "(caught by: no acknowledged send lost, after a power loss)",
    "duplicate-store": "every message is appended to the commit log twice "
                       "(caught by: no UNIQ_KEY stored twice)",
    "corrupt-replication": "the slave flips one byte of each replicated chunk before storing it "
                           "(caught by: the replica comparison and the slave's log integrity)",
    "lose-tail-on-restart": "a master drops the last 16 KiB of its commit log every time it starts, as a broken "
                            "recovery would: a fork without any power loss (caught by: the replica comparison, "
                            "a fork no fault allows, and the delivery verdicts lost-after-delivery / stranded)",
    "skip-queue-entry": "a master never writes the consume-queue unit of every 50th message of a queue: the "
                        "record is stored, acknowledged and replicated, and no consumer can pull it (caught by: "
                        "queues.consistent on the master, delivery.lost with reason unqueued)",
    "ack-then-truncate": "a master running normally cuts the last 16 KiB of its commit log once, after its 300th "
                         "stored message, and goes on writing at the cut: messages acknowledged, perhaps "
                         "consumed and replicated, then gone from it (caught by: the replica comparison, "
                         "lost-after-delivery / stranded, lost)",
}

LOST_TAIL_BYTES = 16 << 10
SKIP_UNIT_EVERY = 50
TRUNCATE_AFTER_PUTS = 300


def truncate_live(store, nbytes: int = LOST_TAIL_BYTES) -> int:
    """ack-then-truncate: cut the running store's commit log at the last record boundary at least `nbytes`
    below its end (not below its last file's start), with the consume queues; returns the bytes cut."""
    store.dispatch_pending()
    end = store.max_offset
    start = store.commitlog.last_file_start()
    cut = start
    for at, _kind, size, _info, _reason in store.commitlog.walk(start, end, check_crc=False):
        if at + size > end - nbytes:
            break
        cut = at + size
    store.commitlog.truncate(cut)
    for cq in store.queues.values():
        cq.truncate_beyond(cut)
    store.reput_offset = cut
    store.queue_offsets.clear()
    return end - cut


def cut_tail(commitlog_dir: str, nbytes: int = LOST_TAIL_BYTES) -> int:
    """lose-tail-on-restart: zero the last `nbytes` written bytes of the newest non-empty commit-log file
    (recovery then ends at the last whole record before them). Returns the bytes zeroed."""
    import os

    from rmqha.broker.store.mapped_file import list_files
    for _base, path in reversed(list_files(commitlog_dir)):
        with open(path, "r+b") as fh:
            data = fh.read()
            end = len(data.rstrip(b"\0"))
            if end == 0:
                continue
            start = max(0, end - nbytes)
            fh.seek(start)
            fh.write(bytes(end - start))
            fh.flush()
            os.fsync(fh.fileno())
            return end - start
    return 0


def parse(value: str) -> frozenset[str]:
    """The names in a plantBug value; ValueError names the unknown ones and the known ones."""
    names = frozenset(n.strip() for n in value.split(",") if n.strip())
    unknown = sorted(names - PLANTED_BUGS.keys())
    if unknown:
        raise ValueError(f"unknown planted bug(s) {', '.join(unknown)}; known: {', '.join(PLANTED_BUGS)}")
    return names


def corrupt(chunk) -> bytes:
    """corrupt-replication: the chunk with its middle byte's lowest bit flipped."""
    b = bytearray(chunk)
    if b:
        b[len(b) // 2] ^= 0x01
    return bytes(b)


class CorruptingStore:
    """corrupt-replication: the slave's store as its HA client sees it, flipping a byte of each chunk."""

    def __init__(self, store):
        self._store = store

    def __getattr__(self, name):
        return getattr(self._store, name)

    def append_replicated(self, offset: int, data) -> None:
        chunks = [data] if isinstance(data, (bytes, bytearray, memoryview)) else list(data)
        self._store.append_replicated(offset, [corrupt(chunks[0])] + chunks[1:])

    def replica_written(self, offset: int, size: int) -> None:
        # The zero-copy slave spliced the chunk into the file already: flip it there before it counts.
        f = self._store.commitlog.replica_file(offset, size)
        if size:
            at = f.wrote + size // 2
            f.write_at(at, corrupt(f.read(at, 1)))
        self._store.replica_written(offset, size)
