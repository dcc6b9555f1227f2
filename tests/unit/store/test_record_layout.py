"""record.py is the one module that knows the record layout: the head peeks other modules use, and the
fast parsers agreeing with the full decoder (last TAGS wins)."""

import pytest

from rmqha.broker.store import queries, record
from rmqha.broker.store.record import Scan

from .conftest import open_store
from .test_record import _raw_props, make


@pytest.mark.parametrize(
    "props",
    [
        b"TAGS\x01first\x02TAGS\x01last",  # the last one wins, as in a Java HashMap
        b"TAGS\x01first\x02KEYS\x01k\x02TAGS\x01last\x02",  # ... with a trailing separator
        b"TAGS\x01kept\x02TAGS\x01",  # an empty last value is skipped: the earlier counts
        b"TAGS\x01a\x02X\x01TAGS\x01not-a-segment\x02XTAGS\x01no",  # only a segment named TAGS counts
        b"TAGS\x01a\x01b\x02TAGS\x01c\x01d",  # a value may hold \x01
        b"\x01TAGS\x01x\x02TAGS\x01\xe9t\xe9",  # invalid UTF-8, replaced as decode_properties does
        b"TAGS\x01\x02TAGS\x01",  # no value at all: tagsCode 0
    ],
)
def test_scan_index_tags_code_is_the_full_decoders_last_tags(props):
    buf = _raw_props(props)
    want = record.tags_code(record.decode_properties(props).get("TAGS"))
    kind, _, info, _ = record.scan_index(buf)
    assert kind == Scan.MESSAGE and info.tags_code == want
    assert record.scan(buf).message.tags == record.decode_properties(props).get("TAGS")
    fields = dict(zip(record.SUMMARY_FIELDS, record.scan_summary(buf)[2]))
    assert fields["tags"] == record.decode_properties(props).get("TAGS")


def test_the_last_of_two_tags_decides_the_tags_code():
    buf = _raw_props(b"TAGS\x01TagA\x02TAGS\x01TagB")
    assert record.scan_index(buf)[2].tags_code == record.java_string_hash("TagB") != record.java_string_hash("TagA")


@pytest.mark.parametrize("born", [("10.0.0.5", 1), ("::1", 5)])
def test_head_peeks(born):
    buf = bytes(record.encode(make(born_host=born, store_timestamp=1700000000123)).finish(1, 2))
    assert record.message_size(buf[: record.HEAD_SIZE]) == len(buf)
    assert record.store_timestamp(buf[: record.STORE_TIMESTAMP_PEEK]) == 1700000000123
    assert record.store_timestamp(buf[:50]) is None
    assert buf[record.MAGIC_AT : record.MAGIC_AT + 4] == record.MESSAGE_MAGIC_BYTES
    blank = record.blank(100)
    assert record.message_size(blank) == 0 and record.store_timestamp(blank + bytes(92)) is None
    assert blank[record.MAGIC_AT :] == record.BLANK_MAGIC_BYTES
    assert record.message_size(bytes(8)) == 0 and record.message_size(buf[:5]) == 0


def test_queries_read_store_times_of_ipv4_and_ipv6_born_hosts(tmp_path):
    now = [0]
    s = open_store(tmp_path / "s", file_size=1 << 16, now_ms=lambda: now[0])
    try:
        for i, born in enumerate([("10.0.0.5", 1), ("::1", 5), ("10.0.0.6", 2)]):
            now[0] = 1000 * (i + 1)
            s.put_message(make(topic="Q", queue_id=0, born_host=born))
        assert [queries.queue_store_time(s, "Q", 0, i) for i in range(3)] == [1000, 2000, 3000]
        assert queries.search_offset_by_timestamp(s, "Q", 0, 1500) == 1
        phys = s.queues[("Q", 0)].get(1)[0]
        raw, m = queries.record_at(s, phys)
        assert m.born_host == ("::1", 5) and len(raw) == m.total_size
    finally:
        s.shutdown()
