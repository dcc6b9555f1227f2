"""DLedger request codes and JSON bodies (protocol/*.java, fastjson's rules)."""

import json

import pytest

from rmqha.broker.dledger.entry import DLedgerEntry
from rmqha.broker.dledger.protocol import (
    REQUEST_TYPES,
    AppendEntryRequest,
    AppendEntryResponse,
    HeartBeatRequest,
    LeadershipTransferRequest,
    ProtocolError,
    PushEntryRequest,
    PushEntryResponse,
    PushType,
    RequestCode,
    ResponseCode,
    VoteRequest,
    VoteResponse,
    VoteResult,
    decode_request,
    decode_response,
    request_code,
)


def test_request_codes_are_dledgers():
    assert {c.name: c.value for c in RequestCode} == {
        "UNKNOWN": -1,
        "METADATA": 50000,
        "APPEND": 50001,
        "GET": 50002,
        "VOTE": 51001,
        "HEART_BEAT": 51002,
        "PULL": 51003,
        "PUSH": 51004,
        "LEADERSHIP_TRANSFER": 51005,
    }


def test_some_response_codes():
    assert (
        ResponseCode.SUCCESS,
        ResponseCode.NETWORK_ERROR,
        ResponseCode.INCONSISTENT_STATE,
        ResponseCode.TERM_NOT_READY,
        ResponseCode.LEADER_TRANSFERRING,
    ) == (200, 302, 406, 416, 506)
    assert len(ResponseCode) == 35  # as many as DLedgerResponseCode declares


def test_vote_results_keep_javas_order():  # fastjson may write an enum as its ordinal
    assert [r.name for r in VoteResult][:3] == ["UNKNOWN", "ACCEPT", "REJECT_UNKNOWN_LEADER"]
    assert list(VoteResult)[11] == VoteResult.REJECT_TAKING_LEADERSHIP
    assert [t.name for t in PushType] == ["APPEND", "COMMIT", "COMPARE", "TRUNCATE"]


def test_vote_request_json_is_fastjsons():
    req = VoteRequest(group="g", remoteId="n1", localId="n0", leaderId="n0", term=3, ledgerEndIndex=10, ledgerEndTerm=2)
    assert req.to_json_bytes() == (
        b'{"code":200,"group":"g","leaderId":"n0","ledgerEndIndex":10,'
        b'"ledgerEndTerm":2,"localId":"n0","remoteId":"n1","term":3}'
    )
    assert VoteRequest.from_json(req.to_json_bytes()) == req


def test_nulls_are_left_out():
    assert json.loads(HeartBeatRequest().to_json_bytes()) == {"code": 200, "term": -1}


def test_vote_response_result_by_name_or_ordinal():
    r = VoteResponse.for_request(VoteRequest(group="g", leaderId="n0", term=4), 5, VoteResult.REJECT_ALREADY_VOTED)
    d = json.loads(r.to_json_bytes())
    assert d["voteResult"] == "REJECT_ALREADY_VOTED" and d["term"] == 5 and d["leaderId"] == "n0"
    assert VoteResponse.from_json({"voteResult": 1, "term": 2}).voteResult == VoteResult.ACCEPT
    with pytest.raises(ProtocolError, match="voteResult"):
        VoteResponse.from_json({"voteResult": "MAYBE"})


def test_push_request_carries_the_entry_and_fastjsons_derived_getters():
    e = DLedgerEntry(body=b"hello", index=7, term=3, pos=1024)
    e.compute_size()
    req = PushEntryRequest(
        group="g", remoteId="n1", localId="n0", leaderId="n0", term=3, commitIndex=6, type=PushType.APPEND, entry=e
    )
    d = json.loads(req.to_json_bytes())
    assert d["type"] == "APPEND" and d["commitIndex"] == 6
    assert d["entry"] == {
        "body": "aGVsbG8=",
        "bodyCrc": 0,
        "chainCrc": 0,
        "channel": 0,
        "index": 7,
        "magic": 1,
        "pos": 1024,
        "size": 53,
        "term": 3,
    }
    assert (d["batch"], d["count"], d["firstEntryIndex"], d["lastEntryIndex"], d["totalSize"], d["batchEntry"]) == (
        False,
        1,
        7,
        7,
        0,
        [],
    )
    back = PushEntryRequest.from_json(req.to_json_bytes())  # the derived keys are ignored on the way in
    assert back.entry == e and back.type == PushType.APPEND and back.commitIndex == 6


def test_commit_push_has_no_entry():
    req = PushEntryRequest(group="g", term=2, type=PushType.COMMIT, commitIndex=4)
    d = json.loads(req.to_json_bytes())
    assert "entry" not in d and d["count"] == 0 and d["firstEntryIndex"] == -1
    assert PushEntryRequest.from_json({"type": 1}).type == PushType.COMMIT


def test_push_response_index_is_a_nullable_long():
    assert "index" not in json.loads(PushEntryResponse(code=200, term=1).to_json_bytes())
    r = PushEntryResponse.from_json(b'{"code":406,"index":5,"beginIndex":0,"endIndex":3,"count":1,"term":2}')
    assert (r.code, r.index, r.beginIndex, r.endIndex, r.count, r.term) == (406, 5, 0, 3, 1, 2)


def test_append_body_is_base64():
    req = AppendEntryRequest(group="g", remoteId="n0", body=b"\x00\xffmsg")
    assert json.loads(req.to_json_bytes())["body"] == "AP9tc2c="
    assert AppendEntryRequest.from_json(req.to_json_bytes()).body == b"\x00\xffmsg"
    assert AppendEntryResponse.from_json(b"{}") == AppendEntryResponse(index=-1, pos=-1)


def test_leadership_transfer_fields():
    req = LeadershipTransferRequest(group="g", term=3, transferId="n0", transfereeId="n2", takeLeadershipLedgerIndex=9)
    d = json.loads(req.to_json_bytes())
    assert (d["transferId"], d["transfereeId"], d["takeLeadershipLedgerIndex"]) == ("n0", "n2", 9)


@pytest.mark.parametrize(
    "body, message",
    [
        (b"not json", "bad JSON"),
        (b"[1, 2]", "JSON object expected"),
        (b'{"term": "three"}', "integer expected"),
        (b'{"term": true}', "integer expected"),
        (b'{"group": 5}', "string expected"),
        (b"\xff\xfe", "not UTF-8"),
    ],
)
def test_bad_bodies_raise_protocol_errors(body, message):
    with pytest.raises(ProtocolError, match=message):
        VoteRequest.from_json(body)


def test_bad_base64_and_bad_entries():
    with pytest.raises(ProtocolError, match="bad base64"):
        AppendEntryRequest.from_json({"body": "***"})
    with pytest.raises(ProtocolError, match="entry: object expected"):
        PushEntryRequest.from_json({"entry": 5})


def test_decode_by_request_code():
    for code, (req_cls, resp_cls) in REQUEST_TYPES.items():
        assert request_code(req_cls()) == code
        assert isinstance(decode_request(int(code), b"{}"), req_cls)
        assert isinstance(decode_response(int(code), b"{}"), resp_cls)
    with pytest.raises(ProtocolError, match="unknown DLedger request code 12"):
        decode_request(12, b"{}")
