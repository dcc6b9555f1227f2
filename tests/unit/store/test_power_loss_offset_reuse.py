"""A consumer may read queue offsets that a power loss then hands to new messages (issue 23).

Run mx-as-l2 lost 12 acknowledged sends this way. Power loss #8 cut broker-a's commit log back to
its last fsync (1329344), dropping 12 records (queue offsets 714-718) that were never acknowledged
but that its slave already held. The consumer pulled them from the slave, so its next offsets were
719/718/717/718. After #11 the master wrote 12 new, acknowledged messages at those same queue
offsets, and the consumer, pulling from 719/718/717/718, never saw them.

Two facts of the store make this possible, and 4.9.8 has both: a pull serves records that are not
yet durable (the consume queue is fed before the fsync), and recovery reuses the queue offsets of
the records it drops. The first test pins the first fact; the second reproduces the reuse, which this
store no longer does: every queue offset is leased durably before it is given, and after an unclean
restart a queue's next message goes past its lease (rmqha/broker/store/offset_lease.py). The rest show
that the records that come back with their own offsets (recovery's fetch, a slave's copy) still take
them, and what the lease costs.
"""

import os

import pytest

from rmqha.broker.store import record
from rmqha.broker.store.mapped_file import StoreError
from rmqha.broker.store.offset_lease import QueueOffsetLease

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


# -- the fix: queue offsets are leased durably before they are given (rmqha/broker/store/offset_lease.py) --


def honest_power_loss(store, tmp_path, durable, queues_at_flush):
    """Power loss as a crash-consistency filesystem shows it: the commit log's un-fsynced tail AND the
    consume queues' un-fsynced units are gone (queues_at_flush: their bytes at the last fsync)."""
    power_loss(store, tmp_path, durable)
    for path, data in queues_at_flush.items():
        with open(path, "r+b") as fh:
            fh.write(data + bytes(os.path.getsize(path) - len(data)))


def queue_files(tmp_path):
    root = tmp_path / "consumequeue"
    return {p: p.read_bytes() for p in root.rglob("0" * 20)}


def drain(store, offset, topic="T", qid=0):
    """What a consumer at `offset` reads to the end, and where it ends (it steps over fillers)."""
    bodies = []
    while True:
        got = store.get_messages(topic, qid, offset, 32)
        if got.next_begin_offset <= offset:
            return bodies, offset
        bodies += [record.scan(b).message.body for b in got.records]
        offset = got.next_begin_offset


def test_an_honest_cut_of_the_queues_too_still_gives_no_served_offset_again(tmp_path):
    # The consume queue's own unsynced units are lost in the same cut: only the lease, written durably
    # before the offsets were given, says how far they went.
    s = open_store(tmp_path)
    for i in range(3):
        s.put_message(msg(i))
    durable = s.flush()
    at_flush = queue_files(tmp_path)
    for i in range(3, 40):
        s.put_message(msg(i))
    served = s.get_messages("T", 0, 3, 32)
    assert served.records
    honest_power_loss(s, tmp_path, durable, at_flush)
    s = open_store(tmp_path)
    try:
        assert s.max_queue_offset("T", 0) == 3, "the queue lost its unsynced units with the log"
        new = [s.put_message(msg(100 + i)) for i in range(3)]
        assert new[0].queue_offset >= 40, new[0]
        # a consumer that read up to 35 before the cut, and one that read only the durable part, both get
        # every new message (the offsets between are fillers they step over)
        for start in (served.next_begin_offset, 3):
            got, end = drain(s, start)
            assert got == [m.body for m in (msg(100), msg(101), msg(102))] and end == new[-1].queue_offset + 1
    finally:
        s.shutdown()


def test_the_mx_as_l2_story_a_consumer_of_the_lost_tail_reads_every_new_message(tmp_path):
    """A consumer pulls past the durable offset, the master loses power, new sends come: the consumer,
    resuming where it was, reads all of them (the run lost 12 this way)."""
    s = open_store(tmp_path)
    for i in range(10):
        s.put_message(msg(i))
    durable = s.flush()
    for i in range(10, 22):
        s.put_message(msg(i))
    consumer, _ = drain(s, 0)
    assert len(consumer) == 22
    _, resume_at = drain(s, 0)
    power_loss(s, tmp_path, durable)
    s = open_store(tmp_path)
    try:
        acked = [s.put_message(msg(200 + i)) for i in range(12)]
        got, _ = drain(s, resume_at)
        assert got == [msg(200 + i).body for i in range(12)]
        assert all(r.queue_offset >= resume_at for r in acked)
    finally:
        s.shutdown()


def copy_log(src, dst, start=0):
    """dst (a slave, or the recovery fetch) takes src's commit log from `start` as raw replicated bytes,
    then dispatches it: the records keep their own queue offsets."""
    at = start
    while at < src.max_offset:
        chunk = src.commitlog.read(at, 1 << 20)
        dst.append_replicated(at, chunk)
        at += len(chunk)
    while dst.dispatch():
        pass


def test_records_that_come_back_take_their_own_offsets_and_only_then_the_rest_is_filled(tmp_path):
    """Recovery mode: the master restarts behind its slave, fetches the slave's tail (append_replicated +
    dispatch, as RecoveryFetcher does), and only then takes writes. The fetched records must land at
    their own queue offsets (the reverted filler fix had filled those offsets at recovery, so the fetched
    units were refused as misplaced and a late consumer group lost them)."""
    master = open_store(tmp_path / "m")
    slave = open_store(tmp_path / "s")
    for i in range(5):
        master.put_message(msg(i))
    durable = master.flush()
    for i in range(5, 30):
        master.put_message(msg(i))
    copy_log(master, slave)
    power_loss(master, tmp_path / "m", durable)
    master = open_store(tmp_path / "m")
    try:
        assert master.max_queue_offset("T", 0) == 5
        copy_log(slave, master, start=master.max_offset)  # the recovery fetch
        assert master.max_queue_offset("T", 0) == 30 and master.queues[("T", 0)].misplaced == 0
        got, _ = drain(master, 0)
        assert got == [msg(i).body for i in range(30)], "the fetched records are served at their offsets"
        bound = master.lease.bound(("T", 0))
        assert bound > 30
        assert master.pad_leased_queues() == bound - 30  # the master takes writes: the rest is filled
        new = master.put_message(msg(99))
        assert new.queue_offset == bound
        # the slave copies the new record: its queue jumps the same gap and serves it at the same offset
        copy_log(master, slave, start=slave.max_offset)
        assert slave.get_messages("T", 0, bound, 32).records == master.get_messages("T", 0, bound, 32).records
        got, _ = drain(slave, 30)
        assert got == [msg(99).body]
    finally:
        master.shutdown()
        slave.shutdown()


def test_a_slave_that_lost_its_tail_takes_the_same_records_back_at_their_offsets(tmp_path):
    """A slave never leases or pads: after its own power loss it copies its master's records again, and
    each takes its own queue offset (group power loss, slave-then-master)."""
    master = open_store(tmp_path / "m")
    slave = open_store(tmp_path / "s")
    for i in range(10):
        master.put_message(msg(i))
    copy_log(master, slave)
    assert not os.path.exists(tmp_path / "s" / "queueOffsetLease.json")
    durable = slave.flush()
    for i in range(10, 18):
        master.put_message(msg(i))
    copy_log(master, slave, start=slave.max_offset)
    power_loss(slave, tmp_path / "s", durable)
    slave = open_store(tmp_path / "s")
    try:
        copy_log(master, slave, start=slave.max_offset)
        got, end = drain(slave, 0)
        assert got == [msg(i).body for i in range(18)] and end == 18
        assert slave.queues[("T", 0)].misplaced == 0
    finally:
        master.shutdown()
        slave.shutdown()


def test_a_clean_restart_skips_nothing_and_a_crash_skips_at_most_the_lease(tmp_path):
    s = open_store(tmp_path)
    for i in range(5):
        s.put_message(msg(i))
    s.shutdown()
    s = open_store(tmp_path)
    assert s.put_message(msg(5)).queue_offset == 5, "a clean shutdown tightens the lease to the queue's end"
    bound = s.lease.bound(("T", 0))
    crash(s)
    s = open_store(tmp_path)
    try:
        assert s.put_message(msg(6)).queue_offset == bound, "after a crash: the lease's bound, no further"
    finally:
        s.shutdown()


def test_a_lease_that_cannot_be_written_refuses_the_send_instead_of_giving_an_unleased_offset(tmp_path):
    s = open_store(tmp_path)
    try:
        os.mkdir(tmp_path / "queueOffsetLease.json.tmp")  # the durable write fails (EISDIR)
        r = s.put_message(msg(0))
        assert not r.status.stored and "cannot lease queue offsets" in r.remark, r
        assert s.max_offset == 0 and s.max_queue_offset("T", 0) == 0, "nothing stored"
        os.rmdir(tmp_path / "queueOffsetLease.json.tmp")
        assert s.put_message(msg(0)).queue_offset == 0
    finally:
        s.shutdown()


@pytest.mark.parametrize("content", [b"{", b'{"queues": {"T": {"0": -1}}}', b'{"queues": {"../x": {"0": 5}}}', b"[]"])
def test_a_damaged_lease_stops_the_store_naming_it(tmp_path, content):
    open_store(tmp_path).shutdown()
    (tmp_path / "queueOffsetLease.json").write_bytes(content)
    with pytest.raises(StoreError, match="queueOffsetLease.json is not a queue-offset lease table"):
        open_store(tmp_path)


def test_the_lease_grows_its_step_for_a_busy_queue_and_shrinks_it_for_a_slow_one(tmp_path):
    lease = QueueOffsetLease(str(tmp_path / "lease.json"))
    key = ("T", 0)
    lease.extend({key: 1}, now_ms=0)
    first = lease.bound(key) - 1
    lease.extend({key: lease.bound(key) + 1}, now_ms=500)  # within a second: a busy queue
    assert lease.steps[key] == 2 * first
    lease.extend({key: lease.bound(key) + 1}, now_ms=60_000)  # a minute later: slow again
    assert lease.steps[key] == first
    again = QueueOffsetLease(str(tmp_path / "lease.json"))
    again.load()
    assert again.bounds == lease.bounds and lease.writes == 3


def test_a_destroyed_queue_leaves_the_lease(tmp_path):
    from rmqha.broker.processors.topic_admin import destroy_queue

    s = open_store(tmp_path)
    s.put_message(msg(0))
    destroy_queue(s, "T", 0)
    s.put_message(msg(1, topic="U"))  # the next lease write drops it
    crash(s)
    s = open_store(tmp_path)
    try:
        assert ("T", 0) not in s.lease.bounds and ("U", 0) in s.lease.bounds
    finally:
        s.shutdown()


def test_a_queue_that_lost_everything_still_starts_at_0_for_a_new_group(tmp_path):
    """The lease's fillers do not move a queue's min offset: a new consumer group asks QUERY_CONSUMER_OFFSET,
    which answers 0 only while the queue starts at 0; past 0 the official C++ client starts at the queue's
    end and skips every message in it (seen in the repair run: a late group got none of broker-a's 178
    re-sent messages)."""
    s = open_store(tmp_path)
    for i in range(6):
        s.put_message(msg(i))
    power_loss(s, tmp_path, 0)  # nothing was fsynced
    s = open_store(tmp_path)
    try:
        assert s.max_queue_offset("T", 0) == 0
        new = [s.put_message(msg(100 + i)) for i in range(3)]
        assert new[0].queue_offset >= 6 and s.min_queue_offset("T", 0) == 0
        got, _ = drain(s, 0)
        assert got == [msg(100 + i).body for i in range(3)]
    finally:
        s.shutdown()
    s = open_store(tmp_path)  # and after a restart, read back from the files
    try:
        assert s.min_queue_offset("T", 0) == 0 and drain(s, 0)[0] == [msg(100 + i).body for i in range(3)]
    finally:
        s.shutdown()
