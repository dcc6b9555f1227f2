"""The send processor over a DLedger store (rmqha/broker/processors/send.py on DLedgerMessageStore): the
busy remark is exactly 4.9.8's, and a batch (SEND_BATCH_MESSAGE) is stored as 4.9.8's
DLedgerCommitLog.asyncPutMessages stores it: one DLedger entry per message, consecutive queue offsets,
one wait on the last entry's quorum, all SEND_OK or all failed."""

import struct
from types import SimpleNamespace

from rmqha.broker.observability.metrics import Registry
from rmqha.broker.processors.send import SendProcessor
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.store import record
from rmqha.broker.store.message_store import PutStatus
from rmqha.cluster.requests import props, send_v1

from ..processors.harness import batch_body
from .test_dledger_commitlog import IDS, advance, elect

BUSY_49 = "[PC_SYNCHRONIZED]broker busy, start flow control for a while"  # SendMessageProcessor.java:514


class Ctx:
    peer_address = "127.0.0.1:50001"


def processor(store, config):
    topics = SimpleNamespace(get=lambda _t: SimpleNamespace(perm=6, write_queue_nums=4, read_queue_nums=4))
    controller = SimpleNamespace(
        metrics=Registry(),
        store=store,
        bugs=None,
        writes_held=False,
        put=lambda m, wait_store_ok=True: store.put_async(m),
        stats=SimpleNamespace(table=SimpleNamespace(on_put=lambda *a: None)),
    )
    return SendProcessor(config, controller, topics)


def answer(proc, req):
    res = proc.process(req, Ctx())
    if isinstance(res, RemotingCommand):
        return [res]
    out = []
    res.addCallback(out.append)
    return out


def batch_request(n, queue_id=1):
    items = [(f"b{i}".encode(), {"UNIQ_KEY": f"B{i}", "KEYS": f"k{i}"}) for i in range(n)]
    fields = dict(send_v1("T", b"", queue_id, props(WAIT="true")).ext_fields, batch="true")
    return RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, fields, body=batch_body(items))


def test_busy_off_the_leader_answers_exactly_4_9s_remark(group):
    lead = elect(group)
    s, c = next(group.nodes[i] for i in IDS if i != lead)
    c.brokerRole = "SYNC_MASTER"  # as a node with no role event yet (the file's role): it takes sends
    [resp] = answer(processor(s, c), send_v1("T", b"x", 0))
    assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR, BUSY_49)
    [resp] = answer(processor(s, c), batch_request(3))
    assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR, BUSY_49)


def test_busy_after_max_wait_ack_answers_exactly_4_9s_remark(group):
    lead = elect(group)
    s, c = group.nodes[lead]
    group.net.cut.update(i for i in IDS if i != lead)
    out = answer(processor(s, c), send_v1("T", b"x", 0))
    advance(group.clock, 2.6)  # maxWaitAckTimeMs 2500
    [resp] = out
    assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR, BUSY_49)


def test_a_batch_is_one_entry_per_message_with_one_quorum_wait(group):
    lead = elect(group)
    s, c = group.nodes[lead]
    proc = processor(s, c)
    solo = answer(proc, send_v1("T", b"solo", 1))
    advance(group.clock, 0.2)
    assert (solo[0].code, solo[0].ext_fields["queueOffset"]) == (ResponseCode.SUCCESS, "0")
    end_before = s.fs.end_index
    out = answer(proc, batch_request(3))
    assert out == []  # answered on the last entry's quorum, not before
    assert s.fs.end_index == end_before + 3  # one entry per message
    assert len(s.node.pusher.pending_acks[s.node.term]) == 1  # one pending ack, on the last entry
    advance(group.clock, 0.2)
    [resp] = out
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    ids = resp.ext_fields["msgId"].split(",")
    entries = [s.fs.get(end_before + 1 + k) for k in range(3)]
    assert [record.parse_offset_msg_id(m)[1] for m in ids] == [e.pos + 48 for e in entries]
    assert int(resp.ext_fields["queueOffset"]) == 1  # the solo send took offset 0 of queue 1
    for k, e in enumerate(entries):
        assert struct.unpack_from(">q", e.body, 28)[0] == e.pos + 48  # PHYSICALOFFSET
        assert struct.unpack_from(">q", e.body, 20)[0] == 1 + k  # QUEUEOFFSET, consecutive
    advance(group.clock, 2)  # followers learn the commit
    for f, _c in group.nodes.values():
        assert f.max_queue_offset("T", 1) == 4
        got = [record.scan(r).message.uniq_key for r in f.get_messages("T", 1, 1, 3).records]
        assert got == ["B0", "B1", "B2"]


def test_a_batch_without_a_quorum_fails_whole_and_its_offsets_stay_taken(group):
    lead = elect(group)
    s, c = group.nodes[lead]
    group.net.cut.update(i for i in IDS if i != lead)
    out = answer(processor(s, c), batch_request(2, queue_id=2))
    advance(group.clock, 2.6)
    [resp] = out
    assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR, BUSY_49)
    assert s.max_queue_offset("T", 2) == 0  # never committed: nothing dispatched
    res = s.put_batch_async([record.Message(topic="T", body=b"z", queue_id=2)] * 2)
    assert not isinstance(res, list)  # appended, waiting
    # 4.9 moves the queue's next offset at append time, even for a batch that later fails
    assert s.queue_offsets[("T", 2)] == 4


def test_a_batch_with_a_transaction_type_or_delay_is_illegal_as_4_9():
    from rmqha.broker.store.dledger_commitlog import DLedgerMessageStore

    s = DLedgerMessageStore.__new__(DLedgerMessageStore)
    s.closed = False
    prepared = record.Message(topic="T", body=b"p", sys_flag=record.TRANSACTION_PREPARED)
    [r] = s.put_batch_async([prepared, prepared])
    assert r.status == PutStatus.MESSAGE_ILLEGAL
    delayed = record.Message(topic="T", body=b"d", properties={"DELAY": "3"})
    [r] = s.put_batch_async([delayed, delayed])
    assert r.status == PutStatus.MESSAGE_ILLEGAL
