"""The master's dispatch after the append (MessageStore.dispatch_pending, the reference's
ReputMessageService): put_message appends and takes the queue offset from the topic-queue table; the
consume-queue units and index keys of everything appended since the last dispatch are built in one
batch. Before it a message is not visible to reads; after it, the queues and the index hold exactly what
building them one record at a time gives (the same bytes), at the queue offsets the puts answered; a
crash in between is rebuilt from the commit log."""

from __future__ import annotations

import random

import pytest

from rmqha.broker.store import consume_queue, index, record
from rmqha.broker.store.mapped_file import DiskFullError
from rmqha.broker.store.message_store import GetStatus

from .index_oracle import Clock, crash, fail_index_write, index_files, message, open_store

T0 = 1_700_000_000_000
FAR = 2**62


def deferred(store):
    """A store whose dispatch waits for dispatch_pending(), as on a live master; counts the requests."""
    asked = []
    store.dispatch_soon = lambda: asked.append(1)
    return asked


def msgs(n, queues=3, seed=7):
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        m = message(i, keys=f"k{i % 5} common", size=rnd.randrange(20, 300))
        m.queue_id = rnd.randrange(queues)
        m.properties["TAGS"] = f"t{i % 2}"
        out.append(m)
    return out


def queue_bytes(root) -> dict[str, bytes]:
    d = root / "consumequeue"
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def put_all(store, clock, messages, dispatch_every=None, rnd=None, start=0):
    """Put the messages numbered start, start + 1, ... at store times T0 + 1000 * number; dispatch
    after every `dispatch_every` puts (or at random, with `rnd`)."""
    out = []
    for i, m in enumerate(messages):
        clock.t = T0 + 1000 * (start + i)
        r = store.put_message(m)
        assert r.status == "PUT_OK"
        out.append(r)
        if rnd is not None and rnd.random() < 0.3:
            store.dispatch_pending()
        elif dispatch_every and (i + 1) % dispatch_every == 0:
            store.dispatch_pending()
    return out


def test_a_message_is_not_visible_before_its_dispatch(tmp_path):
    clock = Clock(T0)
    s = open_store(tmp_path / "s", clock)
    asked = deferred(s)
    s.dispatch_pending()  # nothing pending: nothing to do
    woken = []
    s.dispatch_listeners.append(lambda topic, qid: woken.append((topic, qid)))
    m = message(0, keys="k")
    res = s.put_message(m)
    assert res.status == "PUT_OK" and res.queue_offset == 0 and asked == [1]
    assert s.max_offset == res.next_offset > s.reput_offset
    got = s.get_messages("T", 0, 0, 32)
    assert got.status in (GetStatus.NO_MATCHED_LOGIC_QUEUE, GetStatus.NO_MESSAGE_IN_QUEUE) and not got.records
    assert s.max_queue_offset("T", 0) == 0
    assert s.index.query("T", "k", 32, 0, FAR).phy_offsets == []
    assert not woken
    res2 = s.put_message(message(1, keys="k"))
    assert res2.queue_offset == 1 and asked == [1]  # one request for the whole batch
    assert s.dispatch_pending() == 2
    assert woken == [("T", 0)]  # once per queue that grew
    got = s.get_messages("T", 0, 0, 32)
    assert got.status == GetStatus.FOUND and [record.scan(r).message.body for r in got.records] == [
        message(0).body,
        message(1).body,
    ]
    assert s.index.query("T", "k", 32, 0, FAR).phy_offsets == [res2.wrote_offset, res.wrote_offset]
    assert s.reput_offset == s.max_offset
    s.shutdown()


@pytest.mark.parametrize("how", ["every-7", "random", "once"])
def test_batches_give_the_bytes_and_queue_offsets_of_one_by_one(tmp_path, how):
    """Consume queues and index files are byte for byte those of a store dispatching each put at once,
    and every put's queue offset is the one its unit holds."""
    messages = msgs(60)
    clock = Clock(T0)
    ref = open_store(tmp_path / "ref", clock, slots=11, items=23)  # 22 items per file: files roll mid-batch
    want = put_all(ref, clock, msgs(60))
    ref.shutdown()
    clock = Clock(T0)
    s = open_store(tmp_path / "s", clock, slots=11, items=23)
    deferred(s)
    got = put_all(
        s,
        clock,
        messages,
        dispatch_every=7 if how == "every-7" else None,
        rnd=random.Random(3) if how == "random" else None,
    )
    s.dispatch_pending()
    assert [(r.wrote_offset, r.queue_offset) for r in got] == [(r.wrote_offset, r.queue_offset) for r in want]
    for m, r in zip(messages, got):
        assert s.queue("T", m.queue_id).get(r.queue_offset)[:2] == (r.wrote_offset, r.wrote_bytes)
        assert (
            record.scan(s.commitlog.read_record(r.wrote_offset, r.wrote_bytes)).message.queue_offset == r.queue_offset
        )
    s.shutdown()
    assert queue_bytes(tmp_path / "s") == queue_bytes(tmp_path / "ref")
    assert list(index_files(tmp_path / "s").values()) == list(index_files(tmp_path / "ref").values())


def test_a_crash_between_append_and_dispatch_is_rebuilt_by_recovery(tmp_path):
    """Records appended, never dispatched, then the process dies: the restart builds their units and
    index keys from the commit log, the same bytes as a store that dispatched them."""
    clock = Clock(T0)
    ref = open_store(tmp_path / "ref", clock, slots=11, items=23)
    want = put_all(ref, clock, msgs(40))
    ref.shutdown()
    clock = Clock(T0)
    root = tmp_path / "s"
    s = open_store(root, clock, slots=11, items=23)
    deferred(s)
    put_all(s, clock, msgs(40)[:25], dispatch_every=10)  # 20 dispatched, 5 not
    put_all(s, clock, msgs(40)[25:], start=25)  # ... and 15 more, never dispatched
    assert s.reput_offset < s.max_offset
    crash(s)
    s = open_store(root, clock, slots=11, items=23)
    assert s.reput_offset == s.max_offset == want[-1].next_offset
    for q in range(3):
        assert s.max_queue_offset("T", q) == ref_max(want, msgs(40), q)
    assert s.index.query("T", "common", 64, 0, FAR).phy_offsets[0] == want[-1].wrote_offset
    s.shutdown()
    assert queue_bytes(root) == queue_bytes(tmp_path / "ref")
    # after the crash the next message goes past the queue's lease, not to the rebuilt end: a crash
    # cannot tell the offsets it took from the ones it kept (test_power_loss_offset_reuse.py); the clean
    # shutdown in between wrote nothing to the queue, so its lease still stands
    s = open_store(root, clock, slots=11, items=23)
    bound = s.lease.bound(("T", 0))
    assert bound > ref_max(want, msgs(40), 0)
    assert s.put_message(message(99)).queue_offset == bound
    s.shutdown()


def ref_max(results, messages, queue_id):
    return sum(1 for m in messages if m.queue_id == queue_id)


def test_transaction_halves_and_rollbacks_take_no_queue_offset(tmp_path):
    clock = Clock(T0)
    s = open_store(tmp_path / "s", clock)
    deferred(s)
    a = s.put_message(message(0))
    half = s.put_message(message(1, sys_flag=record.TRANSACTION_PREPARED))
    rollback = s.put_message(message(2, sys_flag=record.TRANSACTION_ROLLBACK))
    commit = s.put_message(message(3, sys_flag=record.TRANSACTION_COMMIT))
    assert [r.queue_offset for r in (a, half, rollback, commit)] == [0, 0, 0, 1]
    s.dispatch_pending()
    assert s.max_queue_offset("T", 0) == 2
    assert [u[0] for u in s.queue("T", 0).units(0, 10)] == [a.wrote_offset, commit.wrote_offset]
    # The index takes prepared messages, not rollbacks (the reference's buildIndex).
    assert [s.index.query("T", f"U{i:05d}", 8, 0, FAR).phy_offsets for i in range(4)] == [
        [a.wrote_offset],
        [half.wrote_offset],
        [],
        [commit.wrote_offset],
    ]
    s.shutdown()


def test_a_reused_message_object_keeps_each_puts_own_offsets(tmp_path):
    """What dispatching needs is taken at the put: a caller putting the same object twice (the planted
    duplicate-store bug) gets two units at two queue offsets."""
    s = open_store(tmp_path / "s", Clock(T0))
    deferred(s)
    m = message(0)
    r1, r2 = s.put_message(m), s.put_message(m)
    s.dispatch_pending()
    assert (r1.queue_offset, r2.queue_offset) == (0, 1)
    assert [u[0] for u in s.queue("T", 0).units(0, 10)] == [r1.wrote_offset, r2.wrote_offset]
    s.shutdown()


def test_a_record_opening_a_new_file_dispatches_the_ones_before(tmp_path):
    """Undispatched records never span more than the commit log's last two files (recovery walks from
    the third-last one)."""
    clock = Clock(T0)
    s = open_store(tmp_path / "s", clock, file_size=4096)
    deferred(s)
    results = []
    while not results or results[-1].wrote_offset < 4096:
        results.append(s.put_message(message(len(results), size=300)))
    assert s.reput_offset == s.max_offset  # the one that opened file 2 dispatched everything
    s.put_message(message(99, size=300))
    assert s.reput_offset < s.max_offset
    s.shutdown()


def test_a_full_disk_keeps_units_for_the_next_dispatch(tmp_path, monkeypatch):
    """A consume-queue write that finds the disk full loses nothing: the units wait, in order, before
    any later unit of their queue, and go out at the next dispatch."""
    s = open_store(tmp_path / "s", Clock(T0))
    deferred(s)
    real = consume_queue.ConsumeQueue.put_many
    fail = [True]

    def put_many(self, units):
        if fail[0]:
            raise DiskFullError("no space left (test)")
        return real(self, units)

    monkeypatch.setattr(consume_queue.ConsumeQueue, "put_many", put_many)
    first = [s.put_message(message(i)) for i in range(3)]
    s.dispatch_pending()
    assert s.max_queue_offset("T", 0) == 0
    fail[0] = False
    later = [s.put_message(message(i)) for i in range(3, 5)]
    s.dispatch_pending()
    assert [u[0] for u in s.queue("T", 0).units(0, 10)] == [r.wrote_offset for r in first + later]
    s.shutdown()


@pytest.mark.parametrize("nth_write", range(6))
def test_an_index_batch_stopped_part_way_is_undone_and_rebuilt(tmp_path, monkeypatch, nth_write):
    """A write fails part way through a batch (items of several records written, some of their slots,
    the header not; a crash there leaves the same bytes): after a restart the index is the one an
    uninterrupted build gives."""
    clock = Clock(T0)
    ref = open_store(tmp_path / "ref", clock, slots=11, items=23)
    put_all(ref, clock, msgs(30))
    ref.shutdown()
    want = list(index_files(tmp_path / "ref").values())
    clock = Clock(T0)
    root = tmp_path / "s"
    s = open_store(root, clock, slots=11, items=23)
    deferred(s)
    put_all(s, clock, msgs(30)[:12])
    s.dispatch_pending()
    put_all(s, clock, msgs(30)[12:], start=12)
    heal = fail_index_write(monkeypatch, nth_write)
    s.dispatch_pending()
    assert s.index.error.startswith("index build stopped at commit-log offset")
    crash(s)
    heal()
    s = open_store(root, clock, slots=11, items=23)
    assert not s.index.error and s.index.recovery.undone == 0
    s.shutdown()
    assert list(index_files(root).values()) == want


def test_key_hashes_are_the_hashes_of_the_built_keys():
    """index.key_hashes (the batch's way) gives key_hash of every "topic#key" keys_of builds."""
    from .index_oracle import key_with_min_value_hash

    rnd = random.Random(11)
    alphabet = "abcXYZ019-_#é中\U0001f600 "
    for i in range(500):
        topic = rnd.choice(["T", "BenchSend", "%RETRY%g", "tópico", "x" * 127])
        uniq = rnd.choice([None, "", "".join(rnd.choice(alphabet) for _ in range(rnd.randrange(40)))])
        keys = rnd.choice([None, "", "  ", "".join(rnd.choice(alphabet) for _ in range(rnd.randrange(60)))])
        assert index.key_hashes(topic, uniq, keys) == [index.key_hash(k) for k in index.keys_of(topic, uniq, keys)], (
            topic,
            uniq,
            keys,
        )
    special = key_with_min_value_hash("T#")[2:]  # "T#" + it hashes to Integer.MIN_VALUE: slot 0
    assert index.key_hashes("T", special, None) == [0] == [index.key_hash("T#" + special)]
    long_key = "k" * 5000
    assert index.key_hashes("T", None, long_key) == [index.key_hash("T#" + long_key)]
