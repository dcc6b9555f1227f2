"""The compiled summary walk (rmqha.broker.store.summary_columns) against record.scan_summary(), the reference:
over the same bytes, the rows it takes are exactly the rows scan_summary gives, and it never takes a
record scan_summary would not (damaged, partial, misplaced, odd UTF-8, empty property values...). Records
are built by hand (test_record_oracle.hand), damaged at random with fixed seeds."""

import os
import random
import struct
import zlib

import pytest

pytest.importorskip("numba")
pytestmark = pytest.mark.compiles  # numba compiles the walk on first use (about 25 s on a fresh checkout)

from rmqha.broker.store import record  # noqa: E402
from rmqha.broker.store import summary_columns as sc  # noqa: E402

from .test_record_oracle import BLANK, hand  # noqa: E402

_PHYS = record.SUMMARY_FIELDS.index("physical_offset")
_HOST = record.SUMMARY_FIELDS.index("store_host_raw")


def _as_row(f):
    """A scan_summary tuple as Columns.rows_as_summaries() gives it (msg_id for the store host bytes)."""
    return tuple(record.msg_id_prefix(v) + f"{f[_PHYS]:016X}" if k == _HOST else v for k, v in enumerate(f))


def reference(buf, lim, at=0):
    """(rows, where it stopped): scan_summary from 0 while valid messages sit at their own position."""
    rows, i = [], 0
    while i < lim:
        f = record.scan_summary(buf, i)[2]
        if f is None or f[_PHYS] != at + i:
            break
        rows.append(_as_row(f))
        i += f[0]
    return rows, i


def compiled(buf, lim, at=0, rows=1 << 16, string_bytes=1 << 16):
    """The same walk through Columns: walk() runs, scan_summary() only for what it hands back.
    Returns (rows, where it stopped, how many records were handed back)."""
    cols = sc.Columns(rows, string_bytes)
    i, handed, out = 0, 0, []
    while True:
        i, why = cols.walk(buf, i, lim, at)
        if why == sc.FULL:
            out += cols.rows_as_summaries()
            cols = sc.Columns(rows, string_bytes)
            continue
        if why == sc.DONE or i >= lim:
            break
        handed += 1
        f = record.scan_summary(buf, i)[2]
        if f is None or f[_PHYS] != at + i:
            break
        cols.append(f)
        i += f[0]
    return out + cols.rows_as_summaries(), i, handed


def _log(specs, at=0):
    """Records one after another, each naming its own position (PHYSICALOFFSET = at + index)."""
    out = bytearray()
    for kw in specs:
        out += hand(phys=at + len(out), **kw)
    return bytes(out)


def _plain(n, rnd):
    return [
        dict(
            topic=b"TopicTest",
            body=rnd.randbytes(rnd.choice([0, 1, 15, 16, 63, 64, 65, 200, 1000, 4100])),
            props=b"UNIQ_KEY\x01U%05d\x02KEYS\x01k%d\x02TAGS\x01tg" % (k, k),
            queue_id=k % 4,
            queue_offset=k,
            born_ts=1700000000000 + k,
            store_ts=1700000000100 + k,
            store=("10.0.0.9", 10911),
        )
        for k in range(n)
    ]


ODD_PROPS = [
    b"",
    b"TAGS\x01",
    b"TAGS\x01\x02TAGS\x01x",
    b"TAGS\x01x\x02TAGS\x01",
    b"XTAGS\x01no",
    b"TAGS\x01a\x01b",
    b"KEYS\x01k1 k2\x02KEYS\x01k3",
    b"UNIQ_KEY\x01\xe4\xb8\xad\xe6\x96\x87",
    b"KEYS\x01\xff\xfe",
    b"TAGS\x01t\x02\x02\x02",
    b"\x02\x02",
    b"TAGS",
    b"KEYS\x01\xed\xa0\x80",
    b"TAGS\x01\xf0\x9f\x98\x80",
    b"UNIQ_KEY\x01u\x02KEYS\x01\x02TAGS\x01t",
    b"a\x01b\x02c\x01d",
    b"TAGS\x01x" * 3,
    b"\x00TAGS\x01z",
    b"TAGS\x01\xc3\xa9t\xc3\xa9",
    b"KEYS\x01\xc0\xaf",
    b"KEYS\x01\xf4\x90\x80\x80",
    b"KEYS\x01\xe0\x80\x80",
]
ODD_TOPICS = [b"T", b"T\xc3\xb6pic", b"\xe4\xb8\xbb\xe9\xa2\x98", b"x" * 127, b"a\x00b", b"\xf0\x9f\x98\x80"]
BAD_TOPICS = [b"bad\xff", b"\xed\xbf\xbf", b"\xc3"]  # not UTF-8: scan() calls the record invalid


def _odd(rnd, n=200, topics=ODD_TOPICS):
    specs = []
    for k in range(n):
        v6 = rnd.randrange(4)
        specs.append(
            dict(
                topic=rnd.choice(topics),
                body=rnd.randbytes(rnd.randrange(0, 300)),
                props=rnd.choice(ODD_PROPS),
                sysflag=(v6 << 4) | rnd.choice([0, 1, 2, 4, 8, 12]),
                queue_id=rnd.randrange(-5, 1 << 31),
                queue_offset=rnd.randrange(-(1 << 40), 1 << 62),
                born_ts=rnd.randrange(-1, 1 << 45),
                store_ts=rnd.randrange(-1, 1 << 45),
                born=("::1" if v6 & 1 else "10.1.2.3", rnd.randrange(65536)),
                store=("fe80::1:2" if v6 & 2 else "192.168.0.%d" % rnd.randrange(256), rnd.randrange(-5, 65536)),
            )
        )
    return specs


def test_crc32_is_zlib_crc32_for_every_length_and_start_value():
    rnd = random.Random(1)
    for n in list(range(0, 300)) + [1000, 4096, 4097, 65536 + 13]:
        data = rnd.randbytes(n)
        value = rnd.getrandbits(32)
        assert sc.zlib_crc32(data, value) == zlib.crc32(data, value), n
        assert sc.zlib_crc32(data) == zlib.crc32(data), n


def test_the_fast_multiply_mod_p_is_the_bitwise_one():
    """crc32_combine's multiply (one carry-less multiply and four table steps) against the bit loop."""
    from numba import njit

    @njit
    def fast(a, b):
        return sc._mulmod_fast(a, b, sc._TABLES)

    rnd = random.Random(5)
    edges = [0, 1, 2, 1 << 31, (1 << 31) | 1, 0xFFFFFFFF, 0x80000001]
    pairs = [(a, b) for a in edges for b in edges] + [(rnd.getrandbits(32), rnd.getrandbits(32)) for _ in range(5000)]
    for a, b in pairs:
        assert fast(a, b) == sc._mulmod(a, b), (a, b)


def test_the_separator_search_finds_the_first_2_in_every_window():
    """_find2 reads eight bytes at a time: bytes just below and above 2 (1, 3, 0x82) and zeros must not
    fool it, at any alignment and any window end."""
    import numpy as np
    from numba import njit

    @njit
    def find(b, s, e):
        return sc._find2(b, s, e)

    rnd = random.Random(6)
    for _ in range(20000):
        data = bytes(rnd.choice([0, 1, 2, 3, 0x82, 0xFE, 0xFF, 65]) for _ in range(rnd.randrange(0, 40)))
        s = rnd.randrange(0, len(data) + 1)
        e = rnd.randrange(s, len(data) + 1)
        want = data.find(b"\x02", s, e)
        assert find(np.frombuffer(data, np.uint8), s, e) == (e if want < 0 else want), (data, s, e)


def test_plain_records_are_all_taken_in_one_walk_with_scan_summarys_fields():
    buf = _log(_plain(300, random.Random(2)))
    want, end = reference(buf, len(buf))
    got, stop, handed = compiled(buf, len(buf))
    assert (got, stop) == (want, end) and end == len(buf) and len(got) == 300
    assert handed == 0  # nothing plain goes back to Python
    assert got[0][record.SUMMARY_FIELDS.index("record_crc")] == zlib.crc32(buf[: got[0][0]])


def test_odd_properties_topics_and_hosts_give_the_reference_rows():
    rnd = random.Random(3)
    buf = _log(_odd(rnd, 400))
    want, end = reference(buf, len(buf))
    got, stop, handed = compiled(buf, len(buf))
    assert (got, stop) == (want, end)
    assert len(want) == 400 and 0 < handed < 200  # some odd ones go back, most are taken


def test_a_topic_that_is_not_utf8_stops_both():
    rnd = random.Random(9)
    for bad in BAD_TOPICS:
        specs = _odd(rnd, 20)
        specs[11]["topic"] = bad
        buf = _log(specs)
        want, end = reference(buf, len(buf))
        assert len(want) == 11 and compiled(buf, len(buf))[:2] == (want, end)


@pytest.mark.parametrize("seed", range(6))
def test_damaged_logs_stop_where_the_reference_stops_with_the_same_rows(seed):
    rnd = random.Random(100 + seed)
    specs = _plain(60, rnd) + _odd(rnd, 60, ODD_TOPICS + BAD_TOPICS)
    rnd.shuffle(specs)
    clean = _log(specs, at=1 << 30)
    for trial in range(40):
        buf = bytearray(clean)
        kind = trial % 6
        pos = rnd.randrange(len(buf))
        if kind == 0:
            buf[pos] ^= 1 << rnd.randrange(8)  # a flipped bit anywhere
        elif kind == 1:
            buf[pos : pos + rnd.randrange(1, 64)] = bytes(len(buf[pos : pos + 64]))[
                : len(buf[pos : pos + 63]) + 1
            ]  # zeros
        elif kind == 2:
            del buf[pos:]  # a torn tail
        elif kind == 3:
            buf[pos : pos + 8] = struct.pack(">iI", len(buf) - pos, BLANK)[: len(buf) - pos]  # a blank
        elif kind == 4:
            buf[pos] = rnd.randrange(256)  # any byte
        else:
            for _ in range(5):
                buf[rnd.randrange(len(buf))] ^= 0xFF
        buf = bytes(buf)
        for lim in (len(buf), rnd.randrange(len(buf) + 1)):
            want, end = reference(buf, lim, at=1 << 30)
            got, stop, _ = compiled(buf, lim, at=1 << 30)
            assert (got, stop) == (want, end), (seed, trial)


def test_a_record_not_at_its_own_position_is_handed_back():
    buf = _log(_plain(5, random.Random(4)))
    assert compiled(buf, len(buf), at=1) == ([], 0, 1)
    cols = sc.Columns(8)
    assert cols.walk(buf, 0, len(buf), 1) == (0, sc.HANDBACK) and cols.n == 0


def test_single_mutated_records_are_taken_only_as_scan_summary_takes_them():
    """Every byte of a record, set to interesting values, one at a time."""
    rnd = random.Random(5)
    base = hand(topic=b"T\xc3\xb6", body=b"abc" * 30, props=b"UNIQ_KEY\x01u\x02KEYS\x01k\x02TAGS\x01t", phys=0)
    taken = 0
    for pos in range(len(base)):
        for value in (0, 1, 2, 0x7F, 0x80, 0xFF, rnd.randrange(256), base[pos] ^ 1):
            buf = bytearray(base)
            buf[pos] = value
            buf = bytes(buf)
            want, end = reference(buf, len(buf))
            got, stop, _ = compiled(buf, len(buf))
            assert (got, stop) == (want, end), (pos, value)
            taken += bool(got)
    assert taken > len(base)  # the unchanged and harmless changes (timestamps, ids) are taken


def test_rows_and_string_capacity_fill_up_and_continue():
    rnd = random.Random(6)
    specs = _plain(50, rnd)
    specs[7]["props"] = b"KEYS\x01" + b"k" * 30000
    buf = _log(specs)
    want, end = reference(buf, len(buf))
    for rows, string_bytes in ((1, 1), (7, 16), (50, 1 << 16)):
        assert compiled(buf, len(buf), rows=rows, string_bytes=string_bytes)[:2] == (want, end)


def test_the_window_limit_and_a_record_past_the_buffer():
    buf = _log(_plain(20, random.Random(7)))
    sizes = [r[0] for r in reference(buf, len(buf))[0]]
    third = sum(sizes[:3])
    cols = sc.Columns(100)
    assert cols.walk(buf, 0, third, 0) == (third, sc.DONE) and cols.n == 3  # stops at lim
    assert cols.walk(buf, 0, third + 1, 0) == (third + sizes[3], sc.DONE)  # a record starting before lim
    cut = buf[: third + 10]
    assert sc.Columns(100).walk(cut, 0, len(cut), 0) == (third, sc.HANDBACK)  # partial: Python decides


def test_utf8_rules_are_pythons():
    """Topics of random bytes (biased to multi-byte sequences): taken exactly when Python decodes them."""
    rnd = random.Random(8)
    lead = [0xC2, 0xDF, 0xE0, 0xE1, 0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF4, 0xF5, 0xC0, 0xC1, 0x80, 0xBF]
    tails = [0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0x41]
    for _ in range(3000):
        topic = bytes(rnd.choice(lead + tails + [0x61]) for _ in range(rnd.randrange(1, 6)))
        props = b"KEYS\x01" + topic
        buf = hand(topic=topic, props=props, phys=0)
        want, end = reference(buf, len(buf))
        got, stop, _ = compiled(buf, len(buf))
        assert (got, stop) == (want, end), topic
        try:
            topic.decode("utf-8")
        except UnicodeDecodeError:
            continue
        assert sc.Columns(2).walk(buf, 0, len(buf), 0) == (len(buf), sc.DONE), topic


def test_a_real_store_file(tmp_path):
    from rmqha.broker.store.message_store import MessageStore

    store = MessageStore(str(tmp_path / "store"), commitlog_file_size=1 << 20)
    store.start()
    for k in range(500):
        store.put_message(
            record.Message(
                topic="T",
                body=os.urandom(k % 300),
                queue_id=k % 3,
                properties={"UNIQ_KEY": f"U{k}", "KEYS": f"k{k} x", "TAGS": "t"},
            )
        )
    store.shutdown()
    d = tmp_path / "store" / "commitlog"
    (name,) = os.listdir(d)
    buf = (d / name).read_bytes()
    want, end = reference(buf, len(buf))
    assert len(want) == 500
    assert compiled(buf, len(buf)) == (want, end, 1)  # the zeros after the last record go back
