"""protocol.py's decoding edges, one test per rule a peer's body reaches (the mutation run of
rmqha.broker.dledger.protocol showed them unpinned): Java's int and long ranges, enum ordinals, nulls,
the metadata map, entry defaults, batch pushes, and which class each code decodes to."""

import pytest

from rmqha.broker.dledger.entry import DLedgerEntry
from rmqha.broker.dledger.protocol import (
    INT32,
    INT64,
    AppendEntryRequest,
    AppendEntryResponse,
    DLedgerError,
    GetEntriesRequest,
    GetEntriesResponse,
    HeartBeatRequest,
    MetadataResponse,
    ProtocolError,
    PullEntriesResponse,
    PushEntryRequest,
    PushEntryResponse,
    PushType,
    RequestCode,
    ResponseCode,
    VoteRequest,
    VoteResponse,
    VoteResult,
    check_index,
    decode_request,
    decode_response,
    entry_from_json,
    request_code,
)

pytestmark = pytest.mark.fast


def test_dledger_error_text_and_code():
    e = DLedgerError(ResponseCode.NOT_LEADER, "n1 leads")
    assert str(e) == "NOT_LEADER: n1 leads" and e.code == ResponseCode.NOT_LEADER
    assert str(DLedgerError(ResponseCode.DISK_FULL)) == "DISK_FULL"


@pytest.mark.parametrize(
    "value, result",
    [(0, VoteResult.UNKNOWN), (1, VoteResult.ACCEPT), (11, VoteResult.REJECT_TAKING_LEADERSHIP)],
)
def test_an_enum_ordinal_in_range_is_its_member(value, result):
    assert VoteResponse.from_json({"voteResult": value}).voteResult == result


@pytest.mark.parametrize("value", [-1, 12, True, False, 1.0, None, [1]])
def test_an_enum_value_that_is_no_ordinal_is_refused(value):
    with pytest.raises(ProtocolError, match="voteResult"):
        VoteResponse.from_json({"voteResult": value})


def test_int_fields_take_javas_int_range():
    lo, hi = INT32
    assert [VoteRequest.from_json({"code": v}).code for v in (lo, hi)] == [lo, hi]
    assert [PushEntryRequest.from_json({"entry": {"size": v}}).entry.size for v in (lo, hi)] == [lo, hi]
    for bad in (lo - 1, hi + 1):
        with pytest.raises(ProtocolError, match="out of range"):
            VoteRequest.from_json({"code": bad})
        with pytest.raises(ProtocolError, match="out of range"):
            PushEntryRequest.from_json({"entry": {"size": bad}})


@pytest.mark.parametrize("field", ["term", "ledgerEndIndex"])
def test_long_fields_take_javas_long_range(field):
    lo, hi = INT64
    assert [getattr(VoteRequest.from_json({field: v}), field) for v in (lo, hi, 1 << 40)] == [lo, hi, 1 << 40]
    for bad in (lo - 1, hi + 1):
        with pytest.raises(ProtocolError, match="out of range"):
            VoteRequest.from_json({field: bad})


def test_an_entrys_long_fields_take_the_long_range():
    assert entry_from_json({"index": 1 << 40, "pos": (1 << 63) - 1}).pos == (1 << 63) - 1
    with pytest.raises(ProtocolError, match="out of range"):
        entry_from_json({"magic": 1 << 31})


def test_null_is_refused_where_java_has_a_primitive():
    with pytest.raises(ProtocolError, match="integer expected"):
        VoteRequest.from_json({"term": None})
    with pytest.raises(ProtocolError, match="integer expected"):
        entry_from_json({"index": None})
    with pytest.raises(ProtocolError, match="integer expected"):
        GetEntriesRequest.from_json({"indexList": [1, None]})
    # ...and taken where Java has a boxed Long
    assert PushEntryResponse.from_json({"index": None}).index is None
    assert GetEntriesRequest.from_json({"beginIndex": None, "indexList": [3]}).indexList == [3]


def test_a_missing_entry_field_is_javas_default_zero():
    e = entry_from_json({"index": 4, "body": "AQI="})
    assert (e.index, e.term, e.pos, e.magic, e.channel, e.chain_crc, e.body_crc, e.size) == (4, 0, 0, 0, 0, 0, 0, 0)
    assert e.body == b"\x01\x02"
    assert entry_from_json(None) is None


def test_metadata_peers_are_a_map_of_strings():
    assert MetadataResponse.from_json({"peers": {"n0": "h:1"}}).peers == {"n0": "h:1"}
    assert MetadataResponse.from_json({"peers": None}).peers is None
    assert MetadataResponse.from_json({}).peers is None
    for bad in ({"n0": 1}, ["n0"], "n0"):
        with pytest.raises(ProtocolError, match="object of strings"):
            MetadataResponse.from_json({"peers": bad})


def test_entry_lists():
    assert PullEntriesResponse.from_json({"entries": None}).entries == []
    got = GetEntriesResponse.from_json({"entries": [{"index": 1}, {"index": 2}]}).entries
    assert [e.index for e in got] == [1, 2]
    with pytest.raises(ProtocolError, match="array expected"):
        GetEntriesResponse.from_json({"entries": {"index": 1}})
    r = PushEntryRequest(batchEntry=[DLedgerEntry(b"a", index=5), DLedgerEntry(b"b", index=6)])
    assert [e["index"] for e in r.to_json()["batchEntry"]] == [5, 6]


def _entry(index, size=0):
    e = DLedgerEntry(b"x" * size, index=index)
    e.compute_size()
    return e


def test_a_batch_push_and_its_derived_getters():
    r = PushEntryRequest()
    assert (r.is_batch, r.first_entry_index, r.last_entry_index, r.count, r.total_size) == (False, -1, -1, 0, 0)
    r.add_entry(_entry(7, 2))
    r.add_entry(_entry(8, 3))
    r.add_entry(_entry(9, 0))
    assert (r.is_batch, r.first_entry_index, r.last_entry_index, r.count, r.total_size) == (True, 7, 9, 3, 48 * 3 + 5)
    assert r.to_json()["batch"] is True and r.to_json()["count"] == 3
    with pytest.raises(DLedgerError, match="wrong order"):
        r.add_entry(_entry(9))
    with pytest.raises(DLedgerError, match="wrong order"):
        r.add_entry(_entry(11))
    assert r.count == 3


def test_a_single_entry_push():
    r = PushEntryRequest(type=PushType.COMPARE, entry=_entry(4))
    assert (r.is_batch, r.first_entry_index, r.last_entry_index, r.count) == (False, 4, 4, 1)
    r = PushEntryRequest(type=PushType.COMPARE, entry=_entry(0))
    assert (r.first_entry_index, r.last_entry_index) == (0, 0)


def test_base_info_and_copies():
    req = VoteRequest(group="g", remoteId="n0", localId="n1", leaderId="n1", term=5, code=201)
    assert req.base_info() == "info[group=g,term=5,code=201,local=n1,remote=n0,leader=n1]"
    resp = VoteResponse().copy_base_info(req)
    assert (resp.group, resp.term, resp.code, resp.localId, resp.remoteId, resp.leaderId) == (
        "g",
        5,
        201,
        "n1",
        "n0",
        "n1",
    )
    v = VoteResponse.for_request(req, 6, VoteResult.ACCEPT)
    assert isinstance(v, VoteResponse) and (v.term, v.voteResult, v.group) == (6, VoteResult.ACCEPT, "g")


@pytest.mark.parametrize(
    "code, request_class, response_class",
    [
        (RequestCode.VOTE, VoteRequest, VoteResponse),
        (RequestCode.HEART_BEAT, HeartBeatRequest, None),
        (RequestCode.APPEND, AppendEntryRequest, AppendEntryResponse),
        (RequestCode.PUSH, PushEntryRequest, PushEntryResponse),
    ],
)
def test_each_code_decodes_to_its_classes(code, request_class, response_class):
    got = decode_request(int(code), b'{"term":3}')
    assert type(got) is request_class and got.term == 3
    assert request_code(got) == code
    answer = decode_response(int(code), b'{"term":4}')
    assert answer.term == 4 and type(answer) is not request_class
    if response_class is not None:
        assert type(answer) is response_class


def test_check_index_bounds_and_codes():
    for index in (0, 2, 5):
        check_index(index, 0, 5)  # both ends are inside
    check_index(3, 3, 3)
    for index, begin, end, code in (
        (-1, -1, 5, ResponseCode.INDEX_OUT_OF_RANGE),
        (2, 3, 5, ResponseCode.INDEX_LESS_THAN_LOCAL_BEGIN),
        (6, 0, 5, ResponseCode.INDEX_OUT_OF_RANGE),
    ):
        with pytest.raises(DLedgerError) as e:
            check_index(index, begin, end)
        assert e.value.code == code
