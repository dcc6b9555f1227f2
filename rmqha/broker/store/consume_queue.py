"""Consume queues: per topic and queue id, 20-byte units (physical offset i8, size i4, tagsCode i8).

Unit i sits at byte i*20 and is the message with queue offset i (WIRE-FACTS §6.6). A queue whose data
starts at a non-zero index (a slave that copied only the master's last file) is padded at the front
with filler units (offset 0, size 0x7FFFFFFF), as RocketMQ does. Fillers also hold queue offsets no
record will take: those a power cut may have taken from consumers (pad_to, rmqha/broker/store/
offset_lease.py), and a slave's gap up to the next offset its master gave.
"""

from __future__ import annotations

import logging
import os
import struct

from rmqha.broker.support import validation

from .mapped_file import MappedFileQueue, StoreError

log = logging.getLogger("rmqha.broker.store.consumequeue")

UNIT = struct.Struct(">qiq")
UNIT_SIZE = 20
FILLER_SIZE = 0x7FFFFFFF
FILLER = UNIT.pack(0, FILLER_SIZE, 0)
# A filler for offsets a master's lease skips (pad_to): a pull steps over it as over any filler, but it
# does not move the queue's min offset, so a new consumer group still starts the queue at its start (a
# queue whose min offset is past 0 answers QUERY_CONSUMER_OFFSET with "not found", and the official C++
# client then starts at the queue's end, skipping every message in it).
LEASE_FILLER = UNIT.pack(0, FILLER_SIZE, 1)


class ConsumeQueue:
    def __init__(self, root: str, topic: str, queue_id: int, file_size: int):
        # The topic and queue id become directory names: whatever sent them (a producer, a
        # master's replicated record), nothing outside <root>/<valid topic>/<queue id> is created.
        why = validation.topic_problem(topic)
        if why or not 0 <= queue_id <= 0x7FFFFFFF:
            raise StoreError(
                f"no consume queue for topic {validation.shown(topic)} queue {queue_id}: "
                f"{why or 'queue id out of range'}"
            )
        self.topic = topic
        self.queue_id = queue_id
        file_size -= file_size % UNIT_SIZE
        self.files = MappedFileQueue(os.path.join(root, topic, str(queue_id)), file_size, use_mmap=True)
        # first non-filler unit whose record is still in the commit log (a LEASE_FILLER counts as no filler:
        # it is no gap at the front)
        self.min_index = 0
        self.min_phys = 0  # the commit log's first offset, as the store last said (correct_min_offset)
        self.max_phys_end = 0  # end of the last record this queue points at
        self.misplaced = 0  # units put_many could not place: their queue offset held another record

    def load(self) -> None:
        self.files.load()

    def recover(self) -> None:
        """Keep units while offset >= 0 and size > 0 (RocketMQ's rule); truncate at the first bad one."""
        fq = self.files
        if not fq.files:
            return
        start = max(0, len(fq.files) - 3)
        for f in fq.files[:start]:
            f.wrote = f.size
        end = fq.files[start].base
        for f in fq.files[start:]:
            data = f.read(0, f.size)
            good = 0
            for pos in range(0, len(data) - UNIT_SIZE + 1, UNIT_SIZE):
                offset, size, _ = UNIT.unpack_from(data, pos)
                if offset < 0 or size <= 0:
                    break
                good = pos + UNIT_SIZE
            f.wrote = f.size  # provisional; truncate() fixes it
            end = f.base + good
            if good < f.size:
                break
        fq.truncate(end)
        self._refresh()

    def _refresh(self) -> None:
        self.min_index = self._first_real_index()
        self.max_phys_end = 0
        last = self.max_index - 1
        while last >= self.min_index:  # the last real unit: fillers point at no record
            unit = self.get(last)
            if unit is None:  # in a file that is gone: nothing to learn below it
                break
            off, size, _ = unit
            if size != FILLER_SIZE:
                self.max_phys_end = off + size
                break
            last -= 1

    def _first_real_index(self) -> int:
        """The first unit that is not a filler and whose record starts at or after min_phys
        (ConsumeQueue.correctMinOffset); the first file's end when it holds none."""
        fq = self.files
        if not fq.files:
            return 0
        first = fq.files[0]
        # Fillers only ever sit at the front of the first file.
        data = first.read(0, first.wrote)
        i = 0
        while i + UNIT_SIZE <= len(data) and data[i : i + UNIT_SIZE] == FILLER:
            i += UNIT_SIZE
        while self.min_phys and i + UNIT_SIZE <= len(data) and UNIT.unpack_from(data, i)[0] < self.min_phys:
            i += UNIT_SIZE
        return (first.base + i) // UNIT_SIZE

    def correct_min_offset(self, min_phys: int) -> None:
        """The commit log now starts at min_phys: units pointing below it are not readable any more."""
        self.min_phys = min_phys
        self.min_index = self._first_real_index()

    def delete_expired(self, min_phys: int) -> int:
        """ConsumeQueue.deleteExpiredFile: delete the files (never the last) whose last unit points below
        the commit log's first offset, then correct_min_offset. Returns the files deleted."""
        fq = self.files
        n = 0
        while len(fq.files) > 1:
            f = fq.files[0]
            (last_phys, _size, _tags) = UNIT.unpack(f.read(f.size - UNIT_SIZE, UNIT_SIZE))
            if last_phys >= min_phys:
                break
            fq.files.pop(0)
            f.destroy()
            n += 1
        if n:
            log.info(
                "consume queue %s-%d: deleted %d file(s) below commit-log offset %d",
                self.topic,
                self.queue_id,
                n,
                min_phys,
            )
        self.correct_min_offset(min_phys)
        return n

    @property
    def max_index(self) -> int:
        """Next queue offset: the number of units written (GET_MAX_OFFSET)."""
        return self.files.max_offset // UNIT_SIZE

    def put(self, index: int, phys: int, size: int, tags_code: int) -> bool:
        """Store the unit for queue offset `index`. Idempotent: a unit already present is skipped."""
        current = self.max_index
        if index < current:
            return False
        if index > current:
            if current > 0 or self.files.files:
                # a master skips the offsets a power cut may have served (rmqha/broker/store/offset_lease.py)
                log.warning(
                    "consume queue %s-%d: gap, expected offset %d got %d; padding with fillers",
                    self.topic,
                    self.queue_id,
                    current,
                    index,
                )
            self._pad(current, index)
        f = self.files.writable_file(at=index * UNIT_SIZE)
        f.append(UNIT.pack(phys, size, tags_code))
        self.max_phys_end = phys + size
        return True

    def put_many(
        self, units: list[tuple[int, int, int, int]], misplaced: list[tuple[int, int, int, int]] | None = None
    ) -> int:
        """put() for a run of (queue_offset, phys, size, tags_code) in order; one write per file.

        A unit below max_index is a repeat when the slot holds the same record (or, where the slot
        cannot be read, when the record ends within what this queue already covers: 4.9's
        putMessagePositionInfo "build consume queue repeatedly" rule), and is skipped quietly. Any other
        unit below max_index is a different record claiming a taken queue offset: it cannot be placed
        without moving the one there, so it is not written, but never silently: it is logged, counted
        in `misplaced`, and appended to the `misplaced` list when one is given, for the caller to fail
        the send it belongs to (4.9 logs it as a repeat and drops it)."""
        current = self.max_index
        if units and units[0][0] < current:
            fresh = []
            for u in units:
                if u[0] >= current:
                    fresh.append(u)
                elif not self._is_repeat(*u):
                    self.misplaced += 1
                    log.error(
                        "consume queue %s-%d: queue offset %d is taken (by %s), record at %d (size %d) not placed",
                        self.topic,
                        self.queue_id,
                        u[0],
                        self.get(u[0]),
                        u[1],
                        u[2],
                    )
                    if misplaced is not None:
                        misplaced.append(u)
            units = fresh
        if not units:
            return 0
        written = 0
        i = 0
        while i < len(units):
            index = units[i][0]
            if index < self.max_index:  # out of order within the run: placed as above
                if not self._is_repeat(*units[i]):
                    self.misplaced += 1
                    log.error(
                        "consume queue %s-%d: queue offset %d is taken, record at %d not placed",
                        self.topic,
                        self.queue_id,
                        index,
                        units[i][1],
                    )
                    if misplaced is not None:
                        misplaced.append(units[i])
                i += 1
                continue
            if index != self.max_index:
                self.put(*units[i])  # a gap: put() pads and logs it
                i += 1
                written += 1
                continue
            f = self.files.writable_file(at=index * UNIT_SIZE)
            room = f.free // UNIT_SIZE
            run = [units[i]]
            while len(run) < room and i + len(run) < len(units) and units[i + len(run)][0] == index + len(run):
                run.append(units[i + len(run)])
            f.append(b"".join(UNIT.pack(p, s, t) for _, p, s, t in run))
            last = run[-1]
            self.max_phys_end = last[1] + last[2]
            i += len(run)
            written += len(run)
        return written

    def _is_repeat(self, index: int, phys: int, size: int, _tags_code: int) -> bool:
        unit = self.get(index)
        if unit is None:  # its file is gone (deleted or never copied): 4.9's maxPhysicOffset rule
            return phys + size <= self.max_phys_end
        return unit[0] == phys

    def pad_to(self, index: int) -> int:
        """Fill [max_index, index) with lease fillers, so the next unit takes queue offset `index` (an empty
        queue is filled from 0). Returns how many were written (MessageStore pads a queue up to its lease
        before its first new message)."""
        start = current = self.max_index
        while current < index:
            f = self.files.writable_file(at=current * UNIT_SIZE)
            n = min(index - current, f.free // UNIT_SIZE)
            f.append(LEASE_FILLER * n)
            current += n
        return current - start

    def _pad(self, current: int, index: int) -> None:
        fq = self.files
        if not fq.files:
            # Start the first file where `index` falls; fill its front.
            start = index * UNIT_SIZE
            f = fq.writable_file(at=start)
            current = f.base // UNIT_SIZE
            self.min_index = index
        while current < index:
            f = fq.writable_file(at=current * UNIT_SIZE)
            n = min(index - current, f.free // UNIT_SIZE)
            f.append(LEASE_FILLER * n)
            current += n

    def get(self, index: int) -> tuple[int, int, int] | None:
        f = self.files.find(index * UNIT_SIZE)
        if f is None:
            return None
        pos = index * UNIT_SIZE - f.base
        if pos + UNIT_SIZE > f.wrote:
            return None
        return UNIT.unpack(f.read(pos, UNIT_SIZE))

    def units(self, index: int, max_count: int) -> list[tuple[int, int, int]]:
        """Up to max_count units from index, within one file."""
        f = self.files.find(index * UNIT_SIZE)
        if f is None:
            return []
        pos = index * UNIT_SIZE - f.base
        n = min(max_count * UNIT_SIZE, f.wrote - pos)
        if n <= 0:
            return []
        data = f.read(pos, n)
        return [UNIT.unpack_from(data, p) for p in range(0, len(data) - UNIT_SIZE + 1, UNIT_SIZE)]

    def truncate_beyond(self, phys_end: int) -> int:
        """Drop trailing units whose record does not end within the commit log, and trailing fillers (a
        master's lease fills them again, a slave's next record does). Returns units dropped."""
        dropped = 0
        idx = self.max_index
        while idx > self.min_index:
            unit = self.get(idx - 1)
            if unit is None or (unit[1] != FILLER_SIZE and unit[0] + unit[1] <= phys_end):
                break
            idx -= 1
            dropped += 1
        if dropped:
            self.files.truncate(idx * UNIT_SIZE)
            if self.max_index <= self.min_index and idx == self.min_index:
                # Only fillers left: nothing real remains.
                self.files.truncate(self.files.min_offset)
            self._refresh()
        return dropped

    def flush(self) -> None:
        self.files.flush()

    def close(self) -> None:
        self.files.close()
