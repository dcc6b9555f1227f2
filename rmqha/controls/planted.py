"""Planted bugs: deliberate defects a test switches on to show that the audit's checkers can fail.

A checker that has never seen the bug it looks for may pass vacuously. Each entry of PLANTED breaks one
guarantee the audit checks, the way a real broker bug would; `plantBug=<name>[,<name>...]` in
broker.properties switches them on (never set it outside such a test: the broker logs an ERROR at
start and shows `plantedBugs` in /status). tests/integration/test_planted_bugs.py runs each one through
a chaos run and asserts the verdict it must turn to FAIL.

The broker never imports this module (an import contract in pyproject.toml). Its process entry loads it
by name (rmqha/broker/support/seams.py CONTROLS_INSTALLER) only when plantBug= is set and calls
seams_for(), which fills the broker's named seams (flush wait, replication wait, store flush, before
recovery, store started, post-put hook, replica store, serving wrapper): each bug is a Bug whose install
sets the seams it needs. Adding a bug is one entry in PLANTED (its description and its install).
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from rmqha.broker.support.seams import Seams

log = logging.getLogger("rmqha.broker.planted")
broker_log = logging.getLogger("rmqha.broker")  # the controller's: its PLANTED BUG lines read as they always did

LOST_TAIL_BYTES = 16 << 10
SKIP_UNIT_EVERY = 50
TRUNCATE_AFTER_PUTS = 300
LIE_REAL_EVERY = 40  # lie-about-fsync: one real flush in 40 (every 20 s at the default 500 ms)


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
    unknown = sorted(names - PLANTED.keys())
    if unknown:
        raise ValueError(f"unknown planted bug(s) {', '.join(unknown)}; known: {', '.join(PLANTED)}")
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


# -- bugs of the serving path: what a consumer gets, not what is stored -------------------------------
# Each changes only PULL_MESSAGE answers (or the consumer-offset table), on user topics; the commit log and
# the consume queues stay correct, so only the delivery verdicts can see them.

SERVING_BUGS = ("reorder-pull", "duplicate-pull", "offset-regression", "phantom-pull")
REORDER_EVERY = 10
REORDER_HOLD_MS = 3000  # hold back a fresh n for its n+1 only this long (the run's last n is served alone)
DUPLICATE_EVERY = 10
REGRESS_PAST = 40
REGRESS_BY = 20
REGRESS_HOLD_S = 2.0
PHANTOM_EVERY = 10
PHANTOM_WAIT_MS = 500  # the real message behind a phantom is served this long after it: a consumer that
# keys what it pulled by queue offset (the C++ orderly one) must not replace the
# phantom with it before handing it on
SYSTEM_TOPIC_PREFIXES = ("%RETRY%", "%DLQ%", "RMQ_SYS_", "SCHEDULE_TOPIC", "TBW102", "rmq_sys_")
_QUEUE_OFFSET = slice(20, 28)  # QUEUEOFFSET in a stored record (rmqha/broker/store/record.py)


def _user_topic(topic: str) -> bool:
    return not topic.startswith(SYSTEM_TOPIC_PREFIXES)


def record_queue_offset(rec) -> int:
    return int.from_bytes(bytes(rec[_QUEUE_OFFSET]), "big", signed=True)


def relabel(rec, queue_offset: int) -> bytes:
    """The record with its QUEUEOFFSET field set to queue_offset."""
    b = bytearray(rec)
    b[_QUEUE_OFFSET] = queue_offset.to_bytes(8, "big", signed=True)
    return bytes(b)


def phantom_of(rec, n: int, node: str = "") -> bytes:
    """A message nobody sent, in the place of `rec`: same topic, queue and offsets, new KEYS, UNIQ_KEY, body."""
    from rmqha.broker.store import record

    msg = record.scan(rec, check_crc=False).message
    msg.properties = {k: v for k, v in msg.properties.items() if k not in ("KEYS", "UNIQ_KEY")}
    salt = zlib.crc32(node.encode())  # two nodes' phantoms never share a key
    msg.properties["KEYS"] = f"planted-phantom-{node}-{n}"
    msg.properties["UNIQ_KEY"] = f"FFFFFFFF{salt:08X}{n:016X}"
    msg.body = f"planted-phantom-{node}-{n} ".encode() + b"p" * 32
    return bytes(record.encode(msg).finish(msg.queue_offset, msg.physical_offset))


class PlantedServing:
    """The store as PULL_MESSAGE sees it, with the serving bugs of `bugs` (reorder-pull, duplicate-pull,
    phantom-pull); everything else is the store's."""

    def __init__(self, store, bugs, now_ms, node: str = ""):
        self._store = store
        self._node = node
        self._bugs = frozenset(bugs)
        self._now_ms = now_ms
        self._again: dict = {}  # (topic, queue) -> offsets duplicate-pull serves again with the next answer
        self._phantoms = 0
        self._phantom_at: dict = {}  # (topic, queue, offset) of a phantom served -> when its real message is due

    def __getattr__(self, name):
        return getattr(self._store, name)

    def get_messages(self, topic, queue_id, offset, max_msgs, tag_codes=None, **kw):
        from rmqha.broker.store.message_store import GetResult, GetStatus

        res = self._store.get_messages(topic, queue_id, offset, max_msgs, tag_codes, **kw)
        if res.status != GetStatus.FOUND or not _user_topic(topic) or tag_codes is not None:
            return res
        key = (topic, queue_id)
        if self._now_ms() < self._phantom_at.get((topic, queue_id, offset), 0):
            # the real message behind a phantom just served: not yet
            return GetResult(GetStatus.OFFSET_FOUND_NULL, offset, res.min_offset, res.max_offset, [])
        records = list(res.records)
        nxt = res.next_begin_offset
        if "duplicate-pull" in self._bugs:
            # what an earlier answer served, served again in front of this one; then what this one serves of
            # every 10th message is due again
            again = []
            for o in sorted(self._again.pop(key, ())):
                r = self._store.get_messages(topic, queue_id, o, 1, None)
                again += r.records if o < offset and r.status == GetStatus.FOUND else []
            self._again[key] = {o for o in map(record_queue_offset, records) if o % DUPLICATE_EVERY == 0}
            records = again + records
        if "reorder-pull" in self._bugs:
            offs = [record_queue_offset(r) for r in records]
            for i, o in enumerate(offs):
                if o % REORDER_EVERY != REORDER_EVERY - 1 or o < offset:
                    continue
                if i + 1 < len(offs) and offs[i + 1] == o + 1:
                    records[i], records[i + 1] = relabel(records[i + 1], o), relabel(records[i], o + 1)
                elif i + 1 == len(offs) and self._fresh(records[i]):
                    if all(x < offset for x in offs[:i]):
                        # only o to serve: answer "nothing yet" (the pull is held until o + 1 is stored)
                        return GetResult(GetStatus.OFFSET_FOUND_NULL, offset, res.min_offset, res.max_offset, [])
                    records, nxt = records[:i], o
        if "phantom-pull" in self._bugs:
            for i, r in enumerate(records):
                o = record_queue_offset(r)
                if (
                    o % PHANTOM_EVERY != PHANTOM_EVERY - 1
                    or o < offset
                    or (topic, queue_id, o) in self._phantom_at
                    or not self._fresh(r)
                ):
                    # fresh only: the pull that waits for the real message is woken by the next message stored
                    # (a queue no longer written would hold it for the client's whole long-poll timeout)
                    continue
                self._phantoms += 1
                records, nxt = records[:i] + [phantom_of(r, self._phantoms, self._node)], o
                self._phantom_at[(topic, queue_id, o)] = self._now_ms() + PHANTOM_WAIT_MS
                log.info("planted phantom %d served at %s q%d@%d", self._phantoms, topic, queue_id, o)
                break
        return GetResult(res.status, nxt, res.min_offset, res.max_offset, records)

    def _fresh(self, rec) -> bool:
        from rmqha.broker.store import record

        ts = record.store_timestamp(rec)
        return ts is not None and ts > self._now_ms() - REORDER_HOLD_MS


def regressing_commit(offsets, clock):
    """offset-regression: ConsumerOffsetManager.commit that, the first time a (topic@group, queue) whose stored
    offset is past REGRESS_PAST gets a commit, stores REGRESS_BY below the stored offset instead, and ignores
    that queue's commits for REGRESS_HOLD_S (every sample in between sees the lower offset)."""
    commit = offsets.commit
    done: dict = {}  # (group, topic, queue) -> when the regression was made

    def planted_commit(group, topic, queue_id, offset):
        k = (group, topic, queue_id)
        at = done.get(k)
        if at is not None:
            if clock.seconds() - at < REGRESS_HOLD_S:
                return None
            return commit(group, topic, queue_id, offset)
        stored = offsets.query(group, topic, queue_id)
        if _user_topic(topic) and stored > REGRESS_PAST:
            done[k] = clock.seconds()
            return commit(group, topic, queue_id, min(stored, offset) - REGRESS_BY)
        return commit(group, topic, queue_id, offset)

    return planted_commit


def install_serving(server, bugs) -> None:
    """Switch the serving bugs of `bugs` on in a started BrokerServer (its pull processor and offsets)."""
    bugs = frozenset(bugs) & frozenset(SERVING_BUGS)
    if not bugs:
        return
    if bugs - {"offset-regression"}:
        node = f"{server.config.brokerName}-{server.config.brokerId}"
        server.pull.store = PlantedServing(server.pull.store, bugs, lambda: int(server.clock.seconds() * 1000), node)
    if "offset-regression" in bugs and server.config.is_master:
        server.offsets.commit = regressing_commit(server.offsets, server.clock)


# -- the table: one entry per bug, installed into the broker's seams (rmqha/broker/support/seams.py) ------


@dataclass(frozen=True)
class Bug:
    """One planted bug: what it breaks (and what catches it), and how it fills the broker's seams.
    install(seams, names) is called once, with every name plantBug switches on."""

    breaks: str
    install: Callable[[Seams, frozenset[str]], None]


def _no_replication_wait(seams: Seams, names: frozenset[str]) -> None:
    seams.replication_wait = False


def _no_flush(seams: Seams, names: frozenset[str]) -> None:
    seams.flush_wait = False


def _store_twice(seams: Seams, names: frozenset[str]) -> None:
    seams.after_put.append(lambda controller, msg: controller.store.put_message(msg))


def _corrupt_replicas(seams: Seams, names: frozenset[str]) -> None:
    seams.replica_store.append(CorruptingStore)


def _lose_tail(seams: Seams, names: frozenset[str]) -> None:
    def before_recovery(controller) -> None:
        c = controller.config
        if c.is_master:
            broker_log.error(
                "PLANTED BUG lose-tail-on-restart: dropped the last %d bytes of the commit log before recovery",
                cut_tail(c.commitlog_dir),
            )

    seams.before_recovery.append(before_recovery)


def _skip_units(seams: Seams, names: frozenset[str]) -> None:
    def store_started(controller) -> None:
        if controller.config.is_master:
            controller.store.unit_filter = lambda queue_offset: queue_offset % SKIP_UNIT_EVERY != SKIP_UNIT_EVERY - 1

    seams.store_started.append(store_started)


def _truncate_once(seams: Seams, names: frozenset[str]) -> None:
    def store_started(controller) -> None:
        if not controller.config.is_master:
            return
        left = [TRUNCATE_AFTER_PUTS]

        def after_put(controller, msg) -> None:
            if not left[0]:
                return
            left[0] -= 1
            if not left[0]:  # after this put is answered: acknowledged, then cut
                controller.clock.callLater(
                    0,
                    lambda: broker_log.error(
                        "PLANTED BUG ack-then-truncate: cut %d bytes of acknowledged log",
                        truncate_live(controller.store),
                    ),
                )

        seams.after_put.append(after_put)

    seams.store_started.append(store_started)


def lie_about_fsync(store, real_every: int = LIE_REAL_EVERY) -> None:
    """lie-about-fsync: store.flush() claims the whole log durable and really syncs only one call in
    `real_every` (the first included, so the files and their preallocated sizes are on disk and the broker
    can start again after a power cut); the checkpoint is written every time, so it carries the lie too."""
    real_flush = store.flush
    calls = [0]

    def flush() -> int:
        calls[0] += 1
        if calls[0] % real_every == 1:
            real_flush()
        claimed = store.commitlog.max_offset
        store._durable_offset = claimed
        store._write_checkpoint()
        return claimed

    store.flush = flush
    log.error("PLANTED BUG lie-about-fsync: the store reports bytes durable that it never fdatasyncs")


def _lie_about_fsync(seams: Seams, names: frozenset[str]) -> None:
    def store_flush(store, flush):
        if not hasattr(store, "commitlog"):  # the classic store only
            return flush
        lie_about_fsync(store)
        return store.flush

    seams.store_flush.append(store_flush)


class _ServingHook:
    """The serving wrapper: one PlantedServing (and the regressing commit) for every serving bug switched on."""

    def __init__(self, names: frozenset[str]):
        self.names = names

    def __call__(self, server) -> None:
        install_serving(server, self.names)


def _serve_badly(seams: Seams, names: frozenset[str]) -> None:
    if not any(isinstance(hook, _ServingHook) for hook in seams.serving):
        seams.serving.append(_ServingHook(names))


PLANTED: dict[str, Bug] = {
    "ack-before-replication": Bug(
        "a SYNC_MASTER answers SEND_OK without waiting for a slave (caught by: no acknowledged send lost, after a master power loss)",
        _no_replication_wait,
    ),
    "skip-flush": Bug(
        "SYNC_FLUSH answers SEND_OK at once and nothing is ever fdatasync'ed (caught by: no acknowledged send lost, after a power loss)",
        _no_flush,
    ),
    "duplicate-store": Bug(
        "every message is appended to the commit log twice (caught by: no UNIQ_KEY stored twice)",
        _store_twice,
    ),
    "corrupt-replication": Bug(
        "the slave flips one byte of each replicated chunk before storing it (caught by: the replica comparison and the slave's log integrity)",
        _corrupt_replicas,
    ),
    "lose-tail-on-restart": Bug(
        "a master drops the last 16 KiB of its commit log every time it starts, as a broken recovery would: a fork without any power loss (caught by: the replica comparison, a fork no fault allows, and the delivery verdicts lost-after-delivery / stranded)",
        _lose_tail,
    ),
    "skip-queue-entry": Bug(
        "a master never writes the consume-queue unit of every 50th message of a queue: the record is stored, acknowledged and replicated, and no consumer can pull it (caught by: queues.consistent on the master, delivery.lost with reason unqueued)",
        _skip_units,
    ),
    "ack-then-truncate": Bug(
        "a master running normally cuts the last 16 KiB of its commit log once, after its 300th stored message, and goes on writing at the cut: messages acknowledged, perhaps consumed and replicated, then gone from it (caught by: the replica comparison, lost-after-delivery / stranded, lost)",
        _truncate_once,
    ),
    "lie-about-fsync": Bug(
        "the store's flush reports every appended byte durable (/status durableOffset, the "
        "checkpoint, SYNC_FLUSH answers) and really fdatasyncs once in 40 flushes: a power cut on crashfs loses "
        "acknowledged "
        "sends, the old cut at the reported offset cannot see it (caught by: no acknowledged send lost, after a "
        "power loss with --power-model fs; passes with --power-model reported)",
        _lie_about_fsync,
    ),
    "reorder-pull": Bug(
        "a pull answer swaps two consecutive messages of a queue (offsets n, n+1 with n % 10 == 9) and their queue offsets, so a client that sorts by offset still gets them swapped; a fresh n with no n+1 yet is held back until n+1 is stored (caught by: delivery.reordered for an orderly consumer)",
        _serve_badly,
    ),
    "duplicate-pull": Bug(
        "every 10th message of a queue (offset n, n % 10 == 0) is served twice: in its pull answer and again in front of the next one (caught by: delivery.duplicate)",
        _serve_badly,
    ),
    "offset-regression": Bug(
        "a master moves a committed consumer offset back: the first commit to a queue whose stored offset is past 40 stores 20 below it, and that queue's commits are ignored for 2 s (caught by: delivery.offset-regression, no fault)",
        _serve_badly,
    ),
    "phantom-pull": Bug(
        "in front of every 10th message of a queue (offset n, n % 10 == 9) a pull answer serves a message nobody sent at offset n (new KEYS, UNIQ_KEY and body) and ends there, while n is fresh (stored in the last 3 s); the real n is served 0.5 s later (caught by: delivery.unexpected, nothing received that was never sent)",
        _serve_badly,
    ),
}
PLANTED_BUGS: dict[str, str] = {name: bug.breaks for name, bug in PLANTED.items()}


def seams_for(value: str) -> Seams:
    """The broker's seams with the bugs `value` (a plantBug setting) names; ValueError names unknown ones."""
    names = parse(value)
    seams = Seams()
    for name, bug in PLANTED.items():  # in the table's order: the post-put hooks run in it
        if name in names:
            seams.installed[name] = bug.breaks
            bug.install(seams, names)
    return seams
