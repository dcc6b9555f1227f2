"""A TRUNCATE that cuts entries already dispatched (committed entries: 4.9's rules or a power cut can make a
leader truncate them) takes their consume-queue units with them (rmqha/broker/store/dledger_commitlog.py
_log_truncated). Without it the units past the cut point at the new leader's bytes: 4.9.8's pause-leader
cell failed that way (docs/guarantees.md), and so did ours before (docs/dledger.md)."""

import pytest
from twisted.internet import task

from rmqha.broker.dledger.entry import DLedgerEntry
from rmqha.broker.store.outcome import PutStatus

from .test_dledger_upgrade import dledger_store, pulled, put, run, until

pytestmark = pytest.mark.fast


def _leader_with(tmp_path, n):
    clock = task.Clock()
    s, c = dledger_store(tmp_path / "n0", clock)
    run(s, c, clock)
    until(clock, lambda: s.master_term is not None)
    for i in range(n):
        assert put(clock, s, i).status == PutStatus.PUT_OK
    until(clock, lambda: len(pulled(s)[0]) == n)
    return clock, s


def test_a_truncate_of_dispatched_entries_drops_their_consume_queue_units(tmp_path):
    clock, s = _leader_with(tmp_path, 6)
    try:
        assert s.max_queue_offset("T", 0) == 6
        cut_at = _entry_of(s, 3)
        # the new leader's entry at the same index and position, with other bytes
        theirs = DLedgerEntry(body=cut_at.body[:-4] + b"XXXX", index=cut_at.index, term=cut_at.term + 1, pos=cut_at.pos)
        theirs.compute_size()
        assert s.fs.truncate(theirs) == cut_at.index
        assert s.max_queue_offset("T", 0) == 3, "units 3..5 point past the cut"
        assert s.truncated_units == 3
        assert s.next_dispatch_index <= cut_at.index
        bodies, _ = pulled(s)
        assert [m.body for m in bodies] == [b"new0", b"new1", b"new2"]
    finally:
        s.shutdown()


def _entry_of(s, queue_offset):
    """The DLedger entry whose message the consume queue holds at this offset (its unit's position - 48)."""
    phys = s.queues[("T", 0)].get(queue_offset)[0]
    for index in range(s.fs.begin_index, s.fs.end_index + 1):
        e = s.fs.get(index)
        if e.pos + 48 == phys:
            return e
    raise AssertionError(f"no entry at {phys - 48}")
