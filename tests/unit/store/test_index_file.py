"""The message index's files, byte for byte, against a hand-built oracle of RocketMQ 4.9's layout; its hash,
chains, rollover and time-range rules (rmqha/broker/store/index.py)."""

from __future__ import annotations

import os
import struct

import pytest

from rmqha.broker.store import index, record
from rmqha.broker.store.index import IndexFile, IndexSettings, MemoryBacking
from rmqha.broker.store.index_service import IndexService
from rmqha.broker.store.mapped_file import StoreError

from .index_oracle import (
    Clock,
    OracleIndex,
    abs_hash,
    crash,
    index_files,
    java_hash,
    key_with_min_value_hash,
    message,
    name_at,
    open_store,
)

FAR = 2**62


def put_all(store, clock, msgs, step_ms=1000, oracle=None):
    out = []
    for m in msgs:
        clock.t += step_ms
        r = store.put_message(m)
        assert r.status == "PUT_OK"
        if oracle is not None:
            oracle.record(m.topic, r.wrote_offset, r.store_timestamp, m.properties, clock.t, m.sys_flag)
        out.append(r)
    return out


# -- the hash ---------------------------------------------------------------------------------------


def test_test_oracle_hash_matches_known_java_values():
    # Values Java gives: "hello".hashCode(), the classic Integer.MIN_VALUE string, a classic collision.
    assert java_hash("hello") == 99162322
    assert java_hash("polygenelubricants") == -(2**31)
    assert java_hash("Aa") == java_hash("BB") == 2112
    assert java_hash("\U0001f600") == 0xD83D * 31 + 0xDE00  # a surrogate pair is two code units


@pytest.mark.parametrize(
    "key",
    [
        "T#k",
        "TopicTest#ORDER-1",
        "T#ключ",
        "T#\U0001f600",
        "polygenelubricants",
        "x" * 300,
        key_with_min_value_hash("T#"),
    ],
)
def test_key_hash_is_abs_of_java_hash_with_min_value_as_zero(key):
    assert index.key_hash(key) == abs_hash(key)
    assert 0 <= index.key_hash(key) <= 2**31 - 1
    assert index.key_hash("polygenelubricants") == 0


def test_keys_of_a_record_in_the_references_order():
    assert index.keys_of("T", "U1", "a b") == ["T#U1", "T#a", "T#b"]
    assert index.keys_of("T", None, "  a  b ") == ["T#a", "T#b"]  # empty entries dropped
    assert index.keys_of("T", "U1", None) == ["T#U1"]
    assert index.keys_of("T", None, "") == []
    assert index.keys_of("T", "U1", "a\tb") == ["T#U1", "T#a\tb"]  # only a space separates


# -- exact bytes ------------------------------------------------------------------------------------


def test_file_bytes_follow_the_layout_literally(tmp_path):
    """Three keys, written out by hand from the layout: 4 slots, 4 items."""
    clock = Clock(1_700_000_000_000)
    s = open_store(tmp_path, clock, slots=4, items=4)
    t0 = clock.t
    r1 = s.put_message(message(1, uniq=False, keys="Aa"))
    clock.t = t0 + 1500
    r2 = s.put_message(message(2, uniq=False, keys="BB"))
    clock.t = t0 + 61_000
    r3 = s.put_message(message(3, uniq=False, keys="x"))
    s.shutdown()
    ((name, data),) = index_files(tmp_path).items()
    assert name == name_at(t0)
    assert len(data) == 40 + 4 * 4 + 4 * 20
    h = abs_hash("T#Aa")  # "Aa" and "BB" collide: same hash, same slot
    hx = abs_hash("T#x")
    same_slot = hx % 4 == h % 4
    slot_count = 1 if same_slot else 2
    header = struct.pack(">qqqqii", t0, t0 + 61_000, r1.wrote_offset, r3.wrote_offset, slot_count, 4)
    slots = [0, 0, 0, 0]
    slots[h % 4] = 2
    slots[hx % 4] = 3
    items = [
        bytes(20),
        struct.pack(">iqii", h, r1.wrote_offset, 0, 0),  # first item: timeDiff 0, no predecessor
        struct.pack(">iqii", h, r2.wrote_offset, 1, 1),  # 1.5 s after begin: 1; chained to item 1
        struct.pack(">iqii", hx, r3.wrote_offset, 61, 2 if same_slot else 0),
    ]
    assert data == header + b"".join(struct.pack(">i", v) for v in slots) + b"".join(items)


def test_many_records_with_rollover_match_the_oracle(tmp_path):
    """UNIQ_KEY and two KEYS per record, 7 slots (many collisions), 5 items per file (4 usable): every file,
    its name and every byte as the oracle builds them, including the first item of each rolled file,
    whose timeDiff is taken against the previous file's end time (the reference's order of updates)."""
    clock = Clock(1_700_000_000_000)
    s = open_store(tmp_path, clock, slots=7, items=5)
    oracle = OracleIndex(7, 5)
    msgs = [message(i, keys=f"order-{i % 3} common") for i in range(10)]
    msgs.insert(4, message(99, uniq=False))  # a record with no key at all
    put_all(s, clock, msgs, step_ms=700, oracle=oracle)
    s.shutdown()
    got = index_files(tmp_path)
    assert len(oracle.files) == 8 and list(got) == [f.name for f in oracle.files]
    for f in oracle.files:
        assert got[f.name] == f.bytes(), f.name


def test_a_file_is_taken_for_every_record_even_without_keys(tmp_path):
    """buildIndex gets (or creates) the last file before it looks at the keys: a keyless record after a
    full file creates the next one, which starts at the full one's end with both counts still 0 on disk."""
    clock = Clock(1_700_000_000_000)
    s = open_store(tmp_path, clock, slots=5, items=3)
    oracle = OracleIndex(5, 3)
    put_all(s, clock, [message(0, uniq=False), message(1, keys="a"), message(2, uniq=False)], oracle=oracle)
    s.shutdown()
    got = index_files(tmp_path)
    assert [f.name for f in oracle.files] == list(got) and len(got) == 2
    for f in oracle.files:
        assert got[f.name] == f.bytes()
    first, second = got.values()
    _bt, et, _bp, ep, _slots, count = struct.unpack_from(">qqqqii", first)
    assert count == 3 and struct.unpack_from(">qqqqii", second) == (et, et, ep, ep, 0, 0)


def test_same_millisecond_rollover_gets_the_next_name(tmp_path):
    clock = Clock(1_700_000_000_000)
    s = open_store(tmp_path, clock, slots=3, items=2)  # one item per file
    for i in range(3):
        s.put_message(message(i))  # the clock does not move
    s.shutdown()
    base = int(name_at(clock.t))
    assert list(index_files(tmp_path)) == [str(base), str(base + 1), str(base + 2)]


def test_min_value_hash_is_stored_as_zero_in_slot_zero(tmp_path):
    key = key_with_min_value_hash("T#")[2:]
    clock = Clock()
    s = open_store(tmp_path, clock, slots=5, items=4)
    r = s.put_message(message(1, uniq=False, keys=key))
    f = s.index.files[-1]
    assert struct.unpack_from(">i", f.backing.view, 40)[0] == 1  # slot 0
    assert f.item(1) == (0, r.wrote_offset, 0, 0)
    assert s.index.query("T", key, 10, 0, FAR).phy_offsets == [r.wrote_offset]
    s.shutdown()


def test_the_core_on_memory_agrees_with_the_oracle():
    from .index_oracle import OracleFile

    f = IndexFile("x", MemoryBacking(40 + 4 * 3 + 20 * 6), 3, 6)
    f.start(0, 0)
    o = OracleFile("x", 3, 6)
    for i, (k, ts) in enumerate([("a", 10_000), ("b", 12_000), ("Aa", 13_999), ("BB", 500), ("a", 99_000)]):
        assert f.put_key(k, 100 * i, ts) and o.put(k, 100 * i, ts)
    assert not f.put_key("c", 9, 1) and not o.put("c", 9, 1)
    assert bytes(f.backing.view) == o.bytes()


# -- chains, collisions, time ranges -----------------------------------------------------------------


def test_collisions_are_chained_through_prev_index(tmp_path):
    """With one slot every key shares one chain; a query walks it newest first and keeps the items whose
    full hash matches: a different key in the same slot is skipped, a key with the same hash is not
    (the reference's broker returns hash matches; clients compare keys)."""
    clock = Clock()
    s = open_store(tmp_path, clock, slots=1, items=20)
    res = put_all(
        s,
        clock,
        [
            message(0, uniq=False, keys="x"),
            message(1, uniq=False, keys="Aa"),
            message(2, uniq=False, keys="y"),
            message(3, uniq=False, keys="BB"),
            message(4, uniq=False, keys="x"),
        ],
    )
    f = s.index.files[-1]
    assert [f.item(i)[3] for i in range(1, 6)] == [0, 1, 2, 3, 4]  # each item points to the one before
    assert f.slot(0) == 5 and f.slot_count == 1
    offs = [r.wrote_offset for r in res]
    assert s.index.query("T", "x", 10, 0, FAR).phy_offsets == [offs[4], offs[0]]
    assert s.index.query("T", "Aa", 10, 0, FAR).phy_offsets == [offs[3], offs[1]]  # "BB" has Aa's hash
    assert s.index.query("T", "y", 10, 0, FAR).phy_offsets == [offs[2]]
    assert s.index.query("T", "z", 10, 0, FAR).phy_offsets == []
    assert s.index.query("U", "x", 10, 0, FAR).phy_offsets == []  # the topic is part of the key
    s.shutdown()


def test_time_range_filters_in_whole_seconds_across_files(tmp_path):
    clock = Clock(1_700_000_000_000)
    t0 = clock.t
    s = open_store(tmp_path, clock, slots=11, items=4)  # 3 items per file
    res = put_all(s, clock, [message(i, uniq=False, keys="k") for i in range(7)], step_ms=10_000)
    assert len(s.index.files) == 3
    offs = [r.wrote_offset for r in res]
    times = [r.store_timestamp for r in res]
    assert times == [t0 + 10_000 * (i + 1) for i in range(7)]

    def q(begin, end, n=64):
        return s.index.query("T", "k", n, begin, end).phy_offsets

    assert q(0, FAR) == offs[::-1]
    assert q(times[2], times[4]) == [offs[4], offs[3], offs[2]]
    assert q(times[2] + 1, times[4]) == [offs[4], offs[3]]
    assert q(times[6] + 1, FAR) == []
    assert q(0, times[0] - 1) == []
    assert q(0, FAR, n=2) == [offs[6], offs[5]]  # maxNum
    assert q(0, FAR, n=0) == []
    r = s.index.query("T", "k", 64, 0, FAR)
    assert (r.index_last_update_timestamp, r.index_last_update_phyoffset) == (times[6], offs[6])
    s.shutdown()


def test_time_is_kept_in_seconds_after_the_files_begin(tmp_path):
    """timeDiff is whole seconds: a record stored 1.9 s after the file's first reads back as 1 s after it."""
    clock = Clock(1_700_000_000_000)
    s = open_store(tmp_path, clock, slots=11, items=10)
    a = s.put_message(message(0, uniq=False, keys="k"))
    clock.t += 1900
    b = s.put_message(message(1, uniq=False, keys="k"))
    assert s.index.files[-1].item(2)[2] == 1
    assert s.index.query("T", "k", 64, a.store_timestamp + 1000, FAR).phy_offsets == [b.wrote_offset]
    assert s.index.query("T", "k", 64, a.store_timestamp + 1001, FAR).phy_offsets == []
    s.shutdown()


def test_max_num_is_bounded_by_max_msgs_num_batch(tmp_path):
    clock = Clock()
    s = open_store(tmp_path, clock, slots=101, items=200)
    put_all(s, clock, [message(i, uniq=False, keys="hot") for i in range(70)], step_ms=1)
    assert len(s.index.query("T", "hot", 1000, 0, FAR).phy_offsets) == index.MAX_MSGS_NUM_BATCH == 64
    s.shutdown()


def test_a_damaged_chain_cannot_loop(tmp_path):
    clock = Clock()
    s = open_store(tmp_path, clock, slots=1, items=10)
    put_all(s, clock, [message(i, uniq=False, keys=f"k{i}") for i in range(3)])
    f = s.index.files[-1]
    h, phy, diff, _prev = f.item(1)
    f.backing.write(f.items_at + 20, struct.pack(">iqii", h, phy, diff, 3))  # item 1 -> item 3 -> 2 -> 1 ...
    assert s.index.query("T", "nothing", 64, 0, FAR).phy_offsets == []
    s.shutdown()


# -- what gets indexed ------------------------------------------------------------------------------


def test_rollback_records_are_skipped_prepared_ones_indexed(tmp_path):
    """IndexService.buildIndex returns early for TRANSACTION_ROLLBACK_TYPE only (4.9.8)."""
    clock = Clock()
    s = open_store(tmp_path, clock)
    rb = s.put_message(message(1, keys="rb", sys_flag=record.TRANSACTION_ROLLBACK))
    pr = s.put_message(message(2, keys="pr", sys_flag=record.TRANSACTION_PREPARED))
    cm = s.put_message(message(3, keys="cm", sys_flag=record.TRANSACTION_COMMIT))
    assert rb.status == pr.status == cm.status == "PUT_OK"
    assert s.index.query("T", "rb", 64, 0, FAR).phy_offsets == []
    assert s.index.query("T", "pr", 64, 0, FAR).phy_offsets == [pr.wrote_offset]
    assert s.index.query("T", "cm", 64, 0, FAR).phy_offsets == [cm.wrote_offset]
    assert s.index.query("T", "U00001", 64, 0, FAR).phy_offsets == []
    s.shutdown()


def test_index_disabled_builds_nothing(tmp_path):
    clock = Clock()
    s = open_store(tmp_path, clock, enable=False)
    put_all(s, clock, [message(i, keys="k") for i in range(3)])
    assert s.index.files == [] and not (tmp_path / "index").exists()
    assert s.index.query("T", "k", 64, 0, FAR).phy_offsets == []
    s.shutdown()


def test_a_file_of_another_size_is_refused_with_the_fix(tmp_path):
    clock = Clock()
    s = open_store(tmp_path, clock, slots=16, items=8)
    s.put_message(message(1))
    s.shutdown()
    with pytest.raises(StoreError, match="maxHashSlotNum and maxIndexNum"):
        open_store(tmp_path, clock, slots=32, items=8)


@pytest.mark.parametrize(
    "slots,items,what", [(0, 8, "maxHashSlotNum"), (4, 1, "maxIndexNum"), (5_000_000, 200_000_000, "2147483647")]
)
def test_settings_that_cannot_be_laid_out_are_refused(tmp_path, slots, items, what):
    with pytest.raises(StoreError, match=what):
        IndexService(str(tmp_path), IndexSettings(True, slots, items))


def test_reference_defaults():
    s = IndexSettings()
    assert (s.enable, s.max_hash_slot_num, s.max_index_num) == (True, 5_000_000, 20_000_000)
    assert s.file_size == 40 + 20_000_000 + 400_000_000


def test_checkpoint_carries_the_end_time_of_the_last_full_file(tmp_path):
    clock = Clock(1_700_000_000_000)
    s = open_store(tmp_path, clock, slots=5, items=3)  # two items per file
    res = put_all(s, clock, [message(i) for i in range(3)])
    s.flush()
    with open(tmp_path / "checkpoint", "rb") as fh:
        assert struct.unpack(">qqq", fh.read(24))[2] == res[1].store_timestamp
    crash(s)
    s = open_store(tmp_path, clock, slots=5, items=3)
    assert s.index.checkpoint_timestamp == res[1].store_timestamp
    s.shutdown()


def test_files_are_sparse_and_full_size(tmp_path):
    clock = Clock()
    s = open_store(tmp_path, clock, slots=50_000, items=200_000)
    s.put_message(message(1, keys="a b"))
    s.shutdown()
    (p,) = (tmp_path / "index").iterdir()
    st = os.stat(p)
    assert st.st_size == 40 + 50_000 * 4 + 200_000 * 20
    assert st.st_blocks * 512 < st.st_size // 10


def test_repair_of_a_record_at_offset_zero_whose_first_key_hashes_to_zero():
    """The one case where a written item is all zeros (keyHash 0, offset 0, timeDiff 0, no predecessor):
    repair still puts its slot back, and the record's next key's."""
    size = 40 + 4 * 3 + 20 * 6

    class FailingHeader(MemoryBacking):
        def write(self, pos, data):
            if pos == 0 and self.writes >= 1:
                raise OSError("disk full")
            super().write(pos, data)

    backing = FailingHeader(size)
    f = IndexFile("x", backing, 3, 6)
    f.start(0, 0)
    fresh = bytes(backing.view)
    keys = [key_with_min_value_hash("T#"), "T#x"]
    with pytest.raises(OSError):
        f.put_keys([index.key_hash(k) for k in keys], 0, 1_700_000_000_000)
    assert f.item(1) == (0, 0, 0, 0) and f.slot(0) == 1 and f.slot(index.key_hash("T#x")) == 2
    again = IndexFile("x", backing, 3, 6)
    again.load()
    assert again.repair() == 2
    assert bytes(backing.view) == fresh


@pytest.mark.parametrize(
    "props",
    [
        {"UNIQ_KEY": "U1", "A": "x\x02UNIQ_KEY\x01smuggled", "KEYS": "k"},  # a value holding a separator
        {"KEYS\x01x": "y", "UNIQ_KEY": ""},  # a name holding one; an empty value
        {"UNIQ_KEY": "U2", "KEYS": "a b"},  # the usual case
    ],
)
def test_master_and_slave_index_the_keys_the_stored_text_holds(tmp_path, props):
    """The master takes the keys from the message it stored unless its text would read back otherwise;
    either way it indexes what a slave reads from the replicated bytes."""
    clock = Clock()
    m = open_store(tmp_path / "m", clock)
    r = m.put_message(record.Message(topic="T", body=b"b", properties=dict(props)))
    s = open_store(tmp_path / "s", clock)
    s.append_replicated(0, m.commitlog.read(0, m.max_offset))
    s.dispatch()
    assert s.reput_offset == m.max_offset
    stored = record.scan(m.commitlog.read(r.wrote_offset, r.wrote_bytes)).message
    m.shutdown()
    s.shutdown()
    assert index_files(tmp_path / "m") == index_files(tmp_path / "s")
    expect = index.keys_of("T", stored.properties.get("UNIQ_KEY"), stored.properties.get("KEYS"))
    (data,) = index_files(tmp_path / "m").values()
    assert [struct.unpack_from(">iqii", data, 40 + 16 * 4 + 20 * i)[0] for i in range(1, 1 + len(expect))] == [
        index.key_hash(k) for k in expect
    ]


def test_config_keys_and_their_limits():
    from rmqha.broker.config.properties import BrokerConfig, ConfigError

    base = {"brokerName": "b", "storePathRootDir": "/tmp/x"}
    c = BrokerConfig.from_properties(base)
    assert (c.messageIndexEnable, c.maxHashSlotNum, c.maxIndexNum) == (True, 5_000_000, 20_000_000)
    c = BrokerConfig.from_properties(
        {**base, "messageIndexEnable": "false", "maxHashSlotNum": "50000", "maxIndexNum": "200000"}
    )
    assert (c.messageIndexEnable, c.maxHashSlotNum, c.maxIndexNum) == (False, 50_000, 200_000)
    assert c.ignored_keys == []
    with pytest.raises(ConfigError, match="maxHashSlotNum=5000000 and maxIndexNum=200000000"):
        BrokerConfig.from_properties({**base, "maxIndexNum": "200000000"})
    with pytest.raises(ConfigError, match="maxIndexNum=1"):
        BrokerConfig.from_properties({**base, "maxIndexNum": "1"})


def test_a_slave_dispatching_in_small_slices_writes_the_masters_index_files(tmp_path):
    """The slave's dispatch batches index items per slice, as the master batches per turn; across
    slices, several index files and records without keys the files come out byte for byte the same."""
    clock = Clock()
    m = open_store(tmp_path / "m", clock, slots=7, items=40)
    for i in range(150):
        props = {"UNIQ_KEY": f"U{i}", "KEYS": f"k{i % 7} shared"} if i % 5 else {}
        m.put_message(record.Message(topic=("T", "Other")[i % 2], body=b"x" * (i % 50), properties=props))
    m.dispatch_pending()
    s = open_store(tmp_path / "s", clock, slots=7, items=40)
    s.append_replicated(0, m.commitlog.read(0, m.max_offset))
    while s.dispatch(max_bytes=700):
        pass
    assert s.reput_offset == m.max_offset
    m.shutdown()
    s.shutdown()
    files = index_files(tmp_path / "m")
    assert len(files) > 3 and index_files(tmp_path / "s") == files
