"""Consume-queue units of a node's store, read for the audit (the unit layout is rmqha/broker/store/consume_queue.py's).

    <store>/consumequeue/<topic>/<queue id>/<20-digit file>   file name = byte offset of its first unit

read_node_queues(store_dir) yields (topic, queue_id, queue_offset, physical_offset, size) per real unit.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

from rmqha.broker.store.consume_queue import FILLER, UNIT, UNIT_SIZE

_FILE = re.compile(r"^\d{20}$")
_FILLER_SIZE = UNIT.unpack(FILLER)[1]


def read_node_queues(store_dir: str) -> Iterator[tuple[str, int, int, int, int]]:
    root = os.path.join(store_dir, "consumequeue")
    if not os.path.isdir(root):
        return
    for topic in sorted(os.listdir(root)):
        tdir = os.path.join(root, topic)
        if not os.path.isdir(tdir):
            continue
        for qname in sorted(os.listdir(tdir)):
            if not qname.isdigit():
                continue
            yield from _queue(topic, int(qname), os.path.join(tdir, qname))


def _queue(topic: str, qid: int, qdir: str):
    for name in sorted(n for n in os.listdir(qdir) if _FILE.match(n)):
        first = int(name) // UNIT_SIZE
        with open(os.path.join(qdir, name), "rb") as fh:
            data = fh.read()
        for i in range(len(data) // UNIT_SIZE):
            phys, size, _ = UNIT.unpack_from(data, i * UNIT_SIZE)
            if size == _FILLER_SIZE:
                continue
            if size <= 0 or phys < 0:
                break
            yield topic, qid, first + i, phys, size
