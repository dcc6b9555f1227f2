"""The audit's columns are the pipeline's: each valid-message column comes from the record summary field of
the same name (record.SUMMARY_FIELDS), whatever order record.py keeps its tuple in. No Spark needed."""

import pytest

from rmqha.broker.store import record
from rmqha.pipeline import decode


def _record(**kw):
    m = record.Message(
        topic="T\u00f6pic",
        body=b"payload",
        queue_id=3,
        sys_flag=record.TRANSACTION_COMMIT,
        born_timestamp=11,
        store_timestamp=22,
        born_host=("10.0.0.5", 1),
        store_host=("::1", 10911),
        properties={"UNIQ_KEY": "U1", "KEYS": "k1 k2", "TAGS": "tg"},
        **kw,
    )
    return bytes(record.encode(m).finish(7, 1 << 33))


def test_ok_row_takes_each_column_from_the_summary_field_of_that_name():
    buf = _record()
    fields = record.scan_summary(buf)[2]
    named = dict(zip(record.SUMMARY_FIELDS, fields))
    row = dict(zip([c for c, _ in decode.COLUMNS], decode._ok_row(("n", "b", 0, "MASTER"), "f", fields)))
    m = record.scan(buf).message
    assert row["msg_id"] == m.msg_id
    assert (row["status"], row["valid"], row["reason"], row["file"], row["node"]) == ("ok", True, None, "f", "n")
    for column in set(row) & set(named):
        assert row[column] == named[column], column
    assert (row["physical_offset"], row["size"], row["queue_offset"], row["tags"]) == (1 << 33, len(buf), 7, "tg")
    assert set(row) - set(named) == {
        "node",
        "broker_name",
        "broker_id",
        "role",
        "file",
        "status",
        "valid",
        "reason",
        "msg_id",
    }


def test_arrow_batch_matches_the_row_path():
    pa = pytest.importorskip("pyarrow")
    fields = [record.scan_summary(_record())[2]]
    batch = decode._ok_batch(
        pa, decode.arrow_schema(), decode._summary_struct(pa), decode._constants(("n", "b", 0, "MASTER"), "f"), fields
    )
    assert [tuple(r.values()) for r in batch.to_pylist()] == [decode._ok_row(("n", "b", 0, "MASTER"), "f", fields[0])]
