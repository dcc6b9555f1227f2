"""Transactional messages end to end on a local master and slave (real processes).

The producer side is tests/integration/tx_producer.py (the project's remoting codec, behaving as the
Java TransactionMQProducer): PyPI rocketmq 0.4.4 has no transactional producer in its Python API. The
consumer is the official client. (The second client's own transactional producer is tested in
test_rust_client_transactions.py.)

One half message is committed, one rolled back, one left for the broker to ask about: the check-back
arrives after transactionTimeOut and the producer answers COMMIT. The official consumer then sees the two
committed messages once each and never the rolled-back one; the slave's commit log is the master's byte
for byte (half, op and committed records alike), it holds the check's progress (CID_RMQ_SYS_TRANS
offsets) copied from the master, and it refuses END_TRANSACTION.
"""

from __future__ import annotations

import json

import pytest

from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.store import record
from rmqha.cluster.standalone import BrokerProcess, rpc
from rmqha.cluster.wait import wait_until

from .processes import master_and_slave, unique_name
from .test_official_client import run_worker
from .tx_producer import COMMIT, ROLLBACK, UNKNOW, TxProducer

pytestmark = pytest.mark.integration
pytest.importorskip("rocketmq.client")

HALF, OP, CID = "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "CID_RMQ_SYS_TRANS"
TIMEOUT_MS, INTERVAL_MS = 2000, 1000


@pytest.fixture
def pair(tmp_path):
    extra = {"transactionTimeOut": str(TIMEOUT_MS), "transactionCheckInterval": str(INTERVAL_MS)}
    with master_and_slave(tmp_path, "broker-tx", extra=extra) as pair:
        yield pair


def records(data: bytes) -> list[record.Message]:
    out = []
    for _offset, r in record.iter_records(data):
        if r.kind != record.Scan.MESSAGE:
            break
        out.append(r.message)
    return out


def cid_offsets(broker: BrokerProcess) -> dict:
    reply = rpc(broker.addr, RequestCode.GET_ALL_CONSUMER_OFFSET)
    table = json.loads(reply.body)["offsetTable"] if reply.body else {}
    return {k: v for k, v in table.items() if k.endswith("@" + CID)}


def test_commit_rollback_and_check_back_across_ha(pair):
    ns, master, slave = pair
    topic = unique_name("Tx")
    producer = TxProducer(master.addr, "PG-tx")
    try:
        producer.heartbeat()
        committed = producer.send_half(topic, "commit-me")
        rolled_back = producer.send_half(topic, "roll-me-back")
        asked = producer.send_half(topic, "ask-me")
        for _uniq, reply in (committed, rolled_back, asked):
            assert reply.code == ResponseCode.SUCCESS, reply
        assert master.total_messages(topic, 4) == 0  # half messages are not in their topic
        producer.end(*committed, COMMIT)
        producer.end(*rolled_back, ROLLBACK)
        # No END_TRANSACTION for "ask-me": after transactionTimeOut the broker asks the producer.
        answers = {asked[0]: COMMIT}
        producer.serve_checks(
            lambda m: answers.get(m.properties.get("UNIQ_KEY"), UNKNOW),
            until=lambda: any(c.ext_fields.get("msgId") == asked[0] for c in producer.checks),
            deadline_s=15,
        )
    finally:
        producer.close()
    # One check, or more if a run came before the answer (the broker then only marks the copy done).
    check = next(c for c in producer.checks if c.ext_fields.get("msgId") == asked[0])
    assert check.ext_fields["transactionId"] == asked[0]
    shown = record.scan(check.body).message
    assert (shown.topic, shown.body, shown.properties["TRANSACTION_CHECK_TIMES"]) == (topic, b"ask-me", "1")
    # The committed and rolled-back halves were never asked about.
    assert {c.ext_fields.get("msgId") for c in producer.checks} == {asked[0]}

    lines = run_worker(
        "consume",
        {
            "namesrv": ns.addr,
            "topic": topic,
            "group": "G-tx",
            "expect": 2,
            "deadline_s": 40,
            "linger_s": 3,
            "props": ["TRAN_MSG", "REAL_TOPIC", "PGROUP", "UNIQ_KEY"],
        },
        70,
    )
    got = [line for line in lines if "body" in line]
    assert sorted(m["body"] for m in got) == ["ask-me", "commit-me"], got
    for m in got:  # 4.9.8's committed record keeps the half's properties
        assert m["props"]["TRAN_MSG"] == "true" and m["props"]["REAL_TOPIC"] == topic
        assert m["props"]["PGROUP"] == "PG-tx"
    assert master.total_messages(topic, 4) == 2

    # HA: the slave holds the master's bytes: halves, op messages and the committed copies.
    wait_until(lambda: slave.status()["maxPhyOffset"] == master.status()["maxPhyOffset"], 20, "slave caught up")
    end = master.status()["maxPhyOffset"]
    data = slave.commitlog_bytes(end)
    assert data == master.commitlog_bytes(end)
    on_slave = records(data)
    final = [m for m in on_slave if m.topic == topic]
    assert sorted(m.body for m in final) == [b"ask-me", b"commit-me"]
    assert all(m.transaction_type == record.TRANSACTION_COMMIT for m in final)
    ops = [m.body for m in on_slave if m.topic == OP]
    assert ops[:2] == [b"0", b"1"] and b"2" not in ops  # commit, rollback; then the checked copy (3, ...)
    assert slave.total_messages(topic, 4) == 2
    # The check's progress, copied by the slave with the other consumer offsets (every 10 s).
    halves = master.max_offset(HALF, 0)
    wait_until(
        lambda: cid_offsets(master).get(f"{HALF}@{CID}") == {"0": halves},
        15,
        "the master's check walked past every half",
    )
    wait_until(lambda: cid_offsets(slave) == cid_offsets(master), 25, "the slave copied CID_RMQ_SYS_TRANS's offsets")
    # A slave refuses END_TRANSACTION.
    _host, offset = record.parse_offset_msg_id(asked[1].ext_fields["msgId"])
    reply = rpc(
        slave.addr,
        RequestCode.END_TRANSACTION,
        {
            "producerGroup": "PG-tx",
            "tranStateTableOffset": "2",
            "commitLogOffset": str(offset),
            "commitOrRollback": str(COMMIT),
            "msgId": asked[0],
        },
    )
    assert reply.code == ResponseCode.SLAVE_NOT_AVAILABLE
