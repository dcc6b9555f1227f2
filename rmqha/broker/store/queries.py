"""Read-only questions the request processors ask of a MessageStore, beyond get_messages().

Everything here reads consume-queue units and, where a store time is needed, the record's
STORETIMESTAMP from the head of the record in the commit log (record.store_timestamp: record.py owns
the layout). Nothing here writes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import record

if TYPE_CHECKING:
    from .consume_queue import ConsumeQueue
    from .message_store import MessageStore

_FILLER_SIZE = 0x7FFFFFFF


def store_timestamp_at(store: MessageStore, phys: int, size: int) -> int | None:
    """STORETIMESTAMP of the record at `phys`, or None when it is gone or unreadable."""
    if phys < store.commitlog.min_offset or size <= 0 or size == _FILLER_SIZE:
        return None
    return record.store_timestamp(store.commitlog.read(phys, record.STORE_TIMESTAMP_PEEK))


def _unit_time(store: MessageStore, cq: ConsumeQueue, index: int) -> int | None:
    unit = cq.get(index)
    if unit is None:
        return None
    return store_timestamp_at(store, unit[0], unit[1])


def queue_store_time(store: MessageStore, topic: str, queue_id: int, offset: int) -> int | None:
    """Store time of the message at logical `offset` of a queue (None if there is none)."""
    cq = store.queues.get((topic, queue_id))
    if cq is None or not cq.min_index <= offset < cq.max_index:
        return None
    return _unit_time(store, cq, offset)


def earliest_msg_store_time(store: MessageStore, topic: str, queue_id: int) -> int | None:
    """GET_EARLIEST_MSG_STORETIME: store time of the first message still readable in the queue."""
    cq = store.queues.get((topic, queue_id))
    if cq is None:
        return None
    for index in range(cq.min_index, cq.max_index):
        ts = _unit_time(store, cq, index)
        if ts is not None:
            return ts
    return None


def search_offset_by_timestamp(store: MessageStore, topic: str, queue_id: int, timestamp: int) -> int:
    """SEARCH_OFFSET_BY_TIMESTAMP, as RocketMQ 4.x answers it.

    Binary search over the queue's readable units for the first message stored at or after
    `timestamp` (store times are non-decreasing along a queue). When every message is older the
    answer is the max offset; when every message is newer it is the first readable offset; an
    empty or unknown queue answers 0.
    """
    cq = store.queues.get((topic, queue_id))
    if cq is None or cq.max_index == 0:
        return 0
    lo = cq.min_index
    # Skip units whose records were deleted from the commit log.
    first: int | None = None
    while lo < cq.max_index:
        first = _unit_time(store, cq, lo)
        if first is not None:
            break
        lo += 1
    hi = cq.max_index - 1
    if first is None:  # lo > hi: no unit's record is still readable
        return cq.max_index
    if timestamp <= first:
        return lo
    last = _unit_time(store, cq, hi)
    if last is None or timestamp > last:
        return cq.max_index
    # Invariant: time(lo) < timestamp <= time(hi); find the first index with time >= timestamp.
    while hi - lo > 1:
        mid = (lo + hi) // 2
        ts = _unit_time(store, cq, mid)
        if ts is None or ts < timestamp:
            lo = mid
        else:
            hi = mid
    return hi


def record_at(store: MessageStore, phys: int) -> tuple[bytes, record.Message] | None:
    """The raw record at commit-log offset `phys` and its decoded form, if a message is stored there."""
    if phys < store.commitlog.min_offset or phys >= store.commitlog.max_offset:
        return None
    size = record.message_size(store.commitlog.read(phys, record.HEAD_SIZE))
    if size == 0:
        return None
    raw = store.commitlog.read_record(phys, size)
    if len(raw) != size:
        return None
    r = record.scan(raw, 0, check_crc=False)
    if r.kind != record.Scan.MESSAGE or r.message is None:
        return None
    return raw, r.message


def record_by_offset_msg_id(store: MessageStore, msg_id: str) -> tuple[bytes, record.Message] | None:
    """The record an offsetMsgId names (its host part is not checked), if still stored."""
    _host, phys = record.parse_offset_msg_id(msg_id)
    return record_at(store, phys)


class QueryMessageResult:
    """DefaultMessageStore.queryMessage's answer: the raw records found (oldest first) and where the
    index ended when it was read."""

    def __init__(self) -> None:
        self.records: list[bytes] = []
        self.index_last_update_timestamp = 0
        self.index_last_update_phyoffset = 0
        self.size = 0


def query_message(
    store: MessageStore, topic: str, key: str, max_num: int, begin: int, end: int, max_bytes: int | None = None
) -> QueryMessageResult:
    """QUERY_MESSAGE, as DefaultMessageStore.queryMessage answers it: up to three rounds of the index
    query, each one's offsets sorted ascending; the records still stored are returned raw. A round
    that found offsets but no readable record retries with the end time moved back to the store time
    of the oldest of them. The index matches key hashes, not keys: a record whose key only collides
    is returned too (clients filter, as the reference's do).

    max_bytes (ours): stop adding records past this many bytes (the first record is always kept), so
    a reply stays below the frame size clients accept.
    """
    result = QueryMessageResult()
    last_time = end
    for _round in range(3):
        found = store.index.query(topic, key, max_num, begin, last_time)
        if not found.phy_offsets:
            break
        result.index_last_update_timestamp = found.index_last_update_timestamp
        result.index_last_update_phyoffset = found.index_last_update_phyoffset
        for m, phys in enumerate(sorted(found.phy_offsets)):
            got = record_at(store, phys)
            if got is None:
                continue
            raw, msg = got
            if m == 0:
                last_time = msg.store_timestamp
            if max_bytes is not None and result.records and result.size + len(raw) > max_bytes:
                break
            result.records.append(bytes(raw))
            result.size += len(raw)
        if result.size > 0 or last_time < begin:
            break
    return result
