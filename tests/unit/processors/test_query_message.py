"""QUERY_MESSAGE (12) and VIEW_MESSAGE_BY_ID (33) through the broker's processors, on a master and on a
slave fed replicated bytes (the reference's QueryMessageProcessor; rmqha/broker/processors/query_message.py)."""

from __future__ import annotations

import pytest

from rmqha.broker.support.errors import BadRequest
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.store import record

from .harness import TOPIC, Broker, decode_records, props, send_v1
from .test_hostile_requests import Wire

T0 = 1_700_000_000_000
FAR = 2**62
SMALL = {"maxHashSlotNum": 101, "maxIndexNum": 400}


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path / "a", **SMALL)
    yield b
    b.stop()


def send(b, i, keys, ts, topic=TOPIC):
    b.store.now_ms = lambda: ts
    r = b.call(
        send_v1(
            topic=topic,
            body=f"body-{i}".encode(),
            queue_id=i % 4,
            properties=props(KEYS=keys, UNIQ_KEY=f"UNIQ{i:04d}", TAGS="t"),
        )
    )
    assert r.code == ResponseCode.SUCCESS, r.remark
    return r


def query(b, key, max_num=32, begin=0, end=FAR, topic=TOPIC, **extra):
    return b.call(
        RemotingCommand.request(
            RequestCode.QUERY_MESSAGE,
            {"topic": topic, "key": key, "maxNum": max_num, "beginTimestamp": begin, "endTimestamp": end, **extra},
        )
    )


def view(b, offset):
    return b.call(RemotingCommand.request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": offset}))


def test_query_by_key_answers_the_raw_records_oldest_first(broker):
    sent = [send(broker, i, f"order-{i % 2} all", T0 + 1000 * i) for i in range(5)]
    r = query(broker, "order-1")
    assert r.code == ResponseCode.SUCCESS
    got = decode_records(r.body)
    assert [m.body for m in got] == [b"body-1", b"body-3"]
    # the body is the stored records byte for byte, as VIEW_MESSAGE_BY_ID serves each one
    phys = [record.parse_offset_msg_id(s.ext_fields["msgId"])[1] for s in sent]
    assert r.body == view(broker, phys[1]).body + view(broker, phys[3]).body
    assert got[0].msg_id == sent[1].ext_fields["msgId"]
    # where the index ended: the last key put (the last record's)
    assert r.ext_fields["indexLastUpdateTimestamp"] == str(T0 + 4000)
    assert r.ext_fields["indexLastUpdatePhyoffset"] == str(phys[4])
    assert len(decode_records(query(broker, "all").body)) == 5
    assert decode_records(query(broker, "UNIQ0002").body)[0].body == b"body-2"


def test_nothing_found_is_query_not_found_with_the_index_end_at_zero(broker):
    send(broker, 0, "k", T0)
    for r in (
        query(broker, "other"),
        query(broker, "k", topic="OtherTopic"),
        query(broker, "k", begin=T0 + 1),
        query(broker, "k", max_num=0),
    ):
        assert r.code == ResponseCode.QUERY_NOT_FOUND == 22
        assert r.remark == "can not find message, maybe time range not correct"
        assert r.ext_fields["indexLastUpdateTimestamp"] == "0" and r.ext_fields["indexLastUpdatePhyoffset"] == "0"
        assert r.body in (b"", None)


def test_time_range_and_max_num(broker):
    for i in range(70):
        send(broker, i, "hot", T0 + 1000 * i)
    bodies = lambda r: [m.body for m in decode_records(r.body)]  # noqa: E731
    assert bodies(query(broker, "hot", begin=T0 + 10_000, end=T0 + 12_000)) == [b"body-10", b"body-11", b"body-12"]
    assert bodies(query(broker, "hot", max_num=3)) == [b"body-67", b"body-68", b"body-69"]  # newest, sorted
    assert len(decode_records(query(broker, "hot", max_num=1000).body)) == 64  # maxMsgsNumBatch
    # a query by UNIQ_KEY (_UNIQUE_KEY_QUERY=true) takes defaultQueryMaxNum (32) whatever maxNum says
    assert len(decode_records(query(broker, "hot", max_num=1, _UNIQUE_KEY_QUERY="true").body)) == 32
    assert len(decode_records(query(broker, "hot", max_num=1, _UNIQUE_KEY_QUERY="false").body)) == 1


def test_hash_collisions_are_returned_as_the_reference_does(broker):
    send(broker, 0, "Aa", T0)
    send(broker, 1, "BB", T0)  # String.hashCode("Aa") == hashCode("BB"): one index key hash
    assert [m.body for m in decode_records(query(broker, "Aa").body)] == [b"body-0", b"body-1"]


def test_bad_query_requests_are_refused(broker):
    send(broker, 0, "k", T0)
    with pytest.raises(BadRequest, match="illegal characters"):
        query(broker, "k", topic="bad/topic")
    with pytest.raises(BadRequest, match="blank"):
        query(broker, "k", topic="")
    with pytest.raises(BadRequest, match="more than any stored key"):
        query(broker, "k" * 40_000)
    with pytest.raises(BadRequest, match="maxNum"):
        query(broker, "k", max_num="lots")
    with pytest.raises(BadRequest, match="maxNum"):
        query(broker, "k", max_num=2**31)
    with pytest.raises(BadRequest, match="endTimestamp"):
        query(broker, "k", end="tomorrow")
    with pytest.raises(BadRequest, match="<key> is null"):
        broker.call(
            RemotingCommand.request(
                RequestCode.QUERY_MESSAGE, {"topic": TOPIC, "maxNum": 1, "beginTimestamp": 0, "endTimestamp": 1}
            )
        )
    # through the remoting server: a SYSTEM_ERROR reply saying why, the connection kept
    w = Wire(broker)
    r = w.request(
        RemotingCommand.request(
            RequestCode.QUERY_MESSAGE,
            {"topic": "a\nb", "key": "k", "maxNum": 1, "beginTimestamp": 0, "endTimestamp": 1},
        )
    )
    assert r.code == ResponseCode.SYSTEM_ERROR and "illegal characters" in r.remark
    r = w.request(
        RemotingCommand.request(
            RequestCode.QUERY_MESSAGE,
            {"topic": TOPIC, "key": "k", "maxNum": 1, "beginTimestamp": 0, "endTimestamp": FAR},
        )
    )
    assert r.code == ResponseCode.SUCCESS


def test_view_message_by_id_and_hostile_offsets(broker):
    a = send(broker, 0, "k", T0)
    b = send(broker, 1, "k", T0)
    _host, phys = record.parse_offset_msg_id(a.ext_fields["msgId"])
    r = view(broker, phys)
    assert r.code == ResponseCode.SUCCESS and decode_records(r.body)[0].body == b"body-0"
    end = broker.store.max_offset
    for bad in (
        -1,
        phys + 1,
        end,
        end + 1,
        2**63 - 1,
        -(2**63),
        record.parse_offset_msg_id(b.ext_fields["msgId"])[1] - 3,
    ):
        r = view(broker, bad)
        assert r.code == ResponseCode.SYSTEM_ERROR and r.remark == f"can not find message by the offset, {bad}"
    for bad in ("x", str(2**63), "", " 1"):
        with pytest.raises(BadRequest, match="offset"):
            view(broker, bad)


def test_a_slave_answers_from_the_index_it_built_from_replicated_bytes(tmp_path):
    """The slave indexes the records it dispatches: same files as the master's, same answers."""
    m = Broker(tmp_path / "m", **SMALL)
    s = Broker(tmp_path / "s", brokerRole="SLAVE", **SMALL)
    try:
        for i in range(150):  # 300 keys: the first file (399 items) holds them; then more to roll
            send(m, i, f"k{i % 7}", T0 + 100 * i)
        for i in range(150, 260):
            send(m, i, f"k{i % 7}", T0 + 100 * i)
        assert len(m.store.index.files) == 2
        pos = 0
        while pos < m.store.max_offset:  # replicate in odd slices, records cut across them
            chunk = m.store.commitlog.read(pos, 7777)
            s.store.append_replicated(pos, chunk)
            s.store.dispatch()  # what the controller's dispatch step does (with a record cut: up to it)
            pos += len(chunk)
        s.clock.advance(0)
        assert s.store.reput_offset == m.store.max_offset
        mine = [f.backing.view[:] for f in m.store.index.files]
        theirs = [f.backing.view[:] for f in s.store.index.files]
        assert mine == theirs
        for key in ("k0", "k3", "UNIQ0001", "UNIQ0259", "none"):
            a, b = query(m, key), query(s, key)
            assert (a.code, a.body, a.ext_fields) == (b.code, b.body, b.ext_fields), key
        r = query(s, "k3", max_num=64)  # from both files
        assert [x.body for x in decode_records(r.body)] == [f"body-{i}".encode() for i in range(260) if i % 7 == 3]
        phys = record.parse_offset_msg_id(decode_records(query(m, "UNIQ0007").body)[0].msg_id)[1]
        assert view(s, phys).body == view(m, phys).body
    finally:
        s.stop()
        m.stop()
