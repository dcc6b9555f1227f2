"""A consumer may read queue offsets that a power loss then hands to new messages (issue 23).

Run mx-as-l2 lost 12 acknowledged sends this way. Power loss #8 cut broker-a's commit log back to
its last fsync (1329344), dropping 12 records (queue offsets 714-718) that were never acknowledged
but that its slave already held. The consumer pulled them from the slave, so its next offsets were
719/718/717/718. After #11 the master wrote 12 new, acknowledged messages at those same queue
offsets, and the consumer, pulling from 719/718/717/718, never saw them.

Two facts of the store make this possible, and 4.9.8 has both: a pull serves records that are not
yet durable (the consume queue is fed before the fsync), and recovery reuses the queue offsets of
the records it drops. The first test pins the first fact; the second reproduces the reuse and is
xfail until the store stops reusing an offset a consumer may have seen.
"""

import os

import pytest

from .conftest import msg, open_store


def crash(store):
    """Stop as a killed process would: no flush, no checkpoint, the abort file stays."""
    store.commitlog.close()
    for cq in store.queues.values():
        cq.close()
    os.close(store._lock_fd)
    store.closed = True


def power_loss(store, tmp_path, durable):
    """Crash, then lose the page cache: every commit-log byte past the last fsync reads as zero."""
    crash(store)
    path = tmp_path / "commitlog" / f"{0:020d}"
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.seek(durable)
        fh.write(bytes(size - durable))


def test_pull_serves_records_past_the_durable_offset(tmp_path):
    s = open_store(tmp_path)
    for i in range(3):
        s.put_message(msg(i))
    durable = s.flush()
    tail = [s.put_message(msg(i)) for i in range(3, 6)]
    assert tail[0].wrote_offset >= durable, "the tail is written after the last fsync"
    got = s.get_messages("T", 0, 3, 32)
    # 4.9.8 does the same: getMessage reads up to the consume queue's max, which the reput
    # service advances from the written (not flushed) commit log.
    assert len(got.records) == 3 and got.next_begin_offset == 6
    s.shutdown()


@pytest.mark.xfail(
    strict=True,
    reason="issue 23: after a power loss recovery hands the dropped records' queue offsets to new "
    "messages; a consumer that read the dropped tail (from the master before its fsync, or from "
    "a slave that held it) skips the new ones. 4.9.8 does the same.",
)
def test_power_loss_does_not_reuse_a_queue_offset_a_pull_served(tmp_path):
    s = open_store(tmp_path)
    for i in range(3):
        s.put_message(msg(i))
    durable = s.flush()
    for i in range(3, 6):
        s.put_message(msg(i))
    served = s.get_messages("T", 0, 0, 32)
    assert served.next_begin_offset == 6
    power_loss(s, tmp_path, durable)

    s = open_store(tmp_path)
    try:
        assert s.max_offset == durable, "the un-fsynced tail is gone"
        new = s.put_message(msg(100))
        # The consumer resumes at served.next_begin_offset; a new message below it is never read.
        assert new.queue_offset >= served.next_begin_offset, (
            f"new message got queue offset {new.queue_offset}, below the next offset "
            f"{served.next_begin_offset} a pull already handed out: the consumer skips it"
        )
    finally:
        s.shutdown()
