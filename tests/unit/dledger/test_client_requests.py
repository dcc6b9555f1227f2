"""METADATA (50000) and GET (50002), the requests DLedger 0.3.1.2's own client (DLedgerClient) sends, answered
as DLedgerServer.handleMetadata and handleGet answer them: the client finds its leader through METADATA (it
was answered UNSUPPORTED, 303). Through the JSON bytes both ways, as on the wire."""

import json

from rmqha.broker.dledger.effects import Reply
from rmqha.broker.dledger.election import FOLLOWER
from rmqha.broker.dledger.protocol import (
    GetEntriesRequest,
    MetadataRequest,
    RequestCode,
    ResponseCode,
    decode_request,
    decode_response,
)

from .sim import Cluster


def elected(appends: int = 3) -> Cluster:
    c = Cluster(seed=7)
    c.run_until(5000)
    leader = c.leader()
    assert leader is not None
    for _ in range(appends):
        c.client_append(leader)
    c.run_until(c.now + 3000)
    return c


def ask(c: Cluster, node_id: str, code: RequestCode, request) -> dict:
    """The request as its JSON bytes arrive, the answer as the JSON a Java client reads."""
    node = c.boxes[node_id].node
    request = decode_request(code, request.to_json_bytes())
    replies = [e for e in node.handle_request(request, c.now) if isinstance(e, Reply)]
    assert len(replies) == 1
    body = replies[0].response.to_json_bytes()
    decode_response(code, body)  # what our own client would make of it
    return json.loads(body)


def test_metadata_names_the_group_its_peers_and_the_leader_on_every_member():
    c = elected()
    leader = c.leader()
    peers = dict(p.split("-", 1) for p in c.peers.split(";"))
    for node_id in c.ids:
        # DLedgerClient's MetadataRequest: group and remoteId; no term, no localId
        answer = ask(c, node_id, RequestCode.METADATA, MetadataRequest(group="g", remoteId=node_id))
        assert answer == {"code": 200, "group": "g", "leaderId": leader, "peers": peers, "term": -1}


def test_metadata_for_another_group_or_member_is_refused_with_the_leader():
    c = elected()
    leader = c.leader()
    answer = ask(c, "n0", RequestCode.METADATA, MetadataRequest(group="other", remoteId="n0"))
    assert (answer["code"], answer["leaderId"]) == (ResponseCode.UNKNOWN_GROUP, leader)
    answer = ask(c, "n0", RequestCode.METADATA, MetadataRequest(group="g", remoteId="n1"))
    assert answer["code"] == ResponseCode.UNKNOWN_MEMBER


def test_get_answers_the_entry_at_begin_index_from_the_leader():
    c = elected(appends=3)
    leader = c.leader()
    log = c.boxes[leader].log
    want = log.get(1)
    answer = ask(c, leader, RequestCode.GET, GetEntriesRequest(group="g", remoteId=leader, beginIndex=1))
    assert answer["code"] == 200 and answer["group"] == "g"
    (entry,) = answer["entries"]
    assert (entry["index"], entry["term"], entry["pos"]) == (1, want.term, want.pos)
    assert entry["body"] and entry["size"] == want.size


def test_get_from_a_follower_is_not_leader_and_names_the_leader():
    c = elected()
    leader = c.leader()
    follower = next(i for i in c.ids if c.boxes[i].node.role == FOLLOWER)
    answer = ask(c, follower, RequestCode.GET, GetEntriesRequest(group="g", remoteId=follower, beginIndex=0))
    assert (answer["code"], answer["leaderId"], answer.get("entries", [])) == (ResponseCode.NOT_LEADER, leader, [])


def test_get_past_the_log_is_index_out_of_range():
    c = elected(appends=2)
    leader = c.leader()
    end = c.boxes[leader].log.end_index
    answer = ask(c, leader, RequestCode.GET, GetEntriesRequest(group="g", remoteId=leader, beginIndex=end + 5))
    assert answer["code"] == ResponseCode.INDEX_OUT_OF_RANGE
