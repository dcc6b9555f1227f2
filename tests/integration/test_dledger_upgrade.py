"""The upgrade from a classic commit log to DLedger on a real broker process (docs/dledger.md "Upgrade from a
classic commit log"): a broker started classic takes N messages and a consumer commits part of them; it is
stopped and started again on the same store with enableDLegerCommitLog=true as a one-node DLedger group.
The consumer's committed offsets are still there, the rest of the old messages are pulled from them, M new
ones continue every queue's offsets, and the old and new messages are found by offset (VIEW_MESSAGE_BY_ID)
and by key (QUERY_MESSAGE); nothing is lost or delivered twice. The broker is driven with the project's
remoting client (rmqha.cluster.standalone.rpc), as test_dledger_broker.py does."""

import pytest

from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.store import record
from rmqha.cluster.requests import props, send_v1
from rmqha.cluster.standalone import BrokerProcess, NameServerProcess, free_ports, rpc

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TOPIC = "UpgradeTopic"
GROUP = "upgrade-consumer"
QUEUES = 4
N, M = 60, 24
FILE = 1 << 20  # mappedFileSizeCommitLog: the classic files and then the DLedger data files


def send(addr: str, i: int) -> tuple[int, int, int]:
    """(queue id, queue offset, commit-log offset) of a SEND_OK."""
    p = props(TAGS="t", KEYS=f"key-{i}", UNIQ_KEY=f"U{i:05d}", WAIT="true")
    body = f"body-{i}".encode() * 20
    r = rpc(addr, RequestCode.SEND_MESSAGE, send_v1(TOPIC, body, i % QUEUES, p).ext_fields, body=body, timeout=10)
    assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
    phys = record.parse_offset_msg_id(r.ext_fields["msgId"])[1]
    return int(r.ext_fields["queueId"]), int(r.ext_fields["queueOffset"]), phys


def pull(addr: str, q: int, offset: int, max_msgs: int = 32) -> tuple[list[record.Message], int, int]:
    """(messages, nextBeginOffset, response code) of one PULL_MESSAGE."""
    r = rpc(
        addr,
        RequestCode.PULL_MESSAGE,
        {
            "consumerGroup": GROUP,
            "topic": TOPIC,
            "queueId": q,
            "queueOffset": offset,
            "maxMsgNums": max_msgs,
            "sysFlag": 4,
            "commitOffset": 0,
            "suspendTimeoutMillis": 0,
            "subscription": "*",
            "subVersion": 0,
        },
    )
    msgs = [
        x.message for _, x in record.iter_records(r.body or b"", 0, check_crc=True) if x.kind == record.Scan.MESSAGE
    ]
    return msgs, int(r.ext_fields.get("nextBeginOffset", offset)), r.code


def consume(addr: str, q: int, offset: int, limit: int | None = None) -> tuple[list[record.Message], int]:
    """Pull from `offset` until the queue's end (or `limit` messages); commit where it stopped."""
    got: list[record.Message] = []
    while limit is None or len(got) < limit:
        msgs, nxt, code = pull(addr, q, offset, 32 if limit is None else min(32, limit - len(got)))
        if code != ResponseCode.SUCCESS:
            break
        got += msgs
        offset = nxt
    r = rpc(
        addr,
        RequestCode.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": GROUP, "topic": TOPIC, "queueId": q, "commitOffset": offset},
    )
    assert r.code == ResponseCode.SUCCESS, r.remark
    return got, offset


def committed(addr: str, q: int) -> int:
    r = rpc(addr, RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": GROUP, "topic": TOPIC, "queueId": q})
    assert r.code == ResponseCode.SUCCESS, r.remark
    return int(r.ext_fields["offset"])


def view(addr: str, phys: int) -> record.Message:
    r = rpc(addr, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": phys})
    assert r.code == ResponseCode.SUCCESS, r.remark
    return record.scan(r.body, 0).message


def by_key(addr: str, key: str) -> list[str]:
    fields = {"topic": TOPIC, "key": key, "maxNum": 32, "beginTimestamp": 0, "endTimestamp": 2**62}
    r = rpc(addr, RequestCode.QUERY_MESSAGE, fields)
    assert r.code == ResponseCode.SUCCESS, r.remark
    return [x.message.uniq_key for _, x in record.iter_records(r.body or b"", 0) if x.kind == record.Scan.MESSAGE]


def test_a_classic_broker_restarted_on_dledger_keeps_its_messages_and_offsets(tmp_path):
    ns = NameServerProcess(tmp_path).start()
    extra = {"mappedFileSizeCommitLog": str(FILE)}
    b = BrokerProcess(tmp_path, "UpgradeBroker", ns.addr, role="ASYNC_MASTER", extra=extra)
    try:
        # 1. classic: N messages, a consumer takes and commits about half of each queue
        b.start()
        r = rpc(
            b.addr,
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {
                "topic": TOPIC,
                "defaultTopic": "TBW102",
                "readQueueNums": QUEUES,
                "writeQueueNums": QUEUES,
                "perm": 6,
                "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": 0,
                "order": "false",
            },
        )
        assert r.code == ResponseCode.SUCCESS, r.remark
        old = {f"U{i:05d}": send(b.addr, i) for i in range(N)}
        assert sorted(v[:2] for v in old.values()) == sorted((i % QUEUES, i // QUEUES) for i in range(N))
        consumed: dict[str, tuple[int, int]] = {}
        commits = {}
        for q in range(QUEUES):
            got, commits[q] = consume(b.addr, q, 0, limit=q + 5)  # a different point in each queue
            consumed.update({m.uniq_key: (m.queue_id, m.queue_offset) for m in got})
        assert commits == {q: q + 5 for q in range(QUEUES)}
        old_end = max(v[2] for v in old.values())
        b.stop()
        assert b.proc.returncode is not None

        # 2. the same store as a one-node DLedger group: brokerId 0 once it leads (wait_ready)
        dl_port = free_ports(1)
        b2 = BrokerProcess(
            tmp_path,
            "UpgradeBroker",
            ns.addr,
            role="ASYNC_MASTER",
            extra={
                **extra,
                "enableDLegerCommitLog": "true",
                "dLegerGroup": "UpgradeBroker",
                "dLegerPeers": f"n0-127.0.0.1:{dl_port}",
                "dLegerSelfId": "n0",
            },
        )
        assert b2.store_dir == b.store_dir
        b = b2
        b.start()
        st = b.status()
        divided = st["dledger"]["dividedCommitlogOffset"]
        assert divided == FILE  # the old data's file ends at the divide (one 1 MiB file here)
        assert old_end < divided

        # 3. the committed offsets survived; the rest of the old messages come from them
        assert {q: committed(b.addr, q) for q in range(QUEUES)} == commits
        for q in range(QUEUES):
            got, _end = consume(b.addr, q, commits[q])
            for m in got:
                assert m.uniq_key not in consumed, f"{m.uniq_key} delivered twice"
                consumed[m.uniq_key] = (m.queue_id, m.queue_offset)
        assert consumed == {k: v[:2] for k, v in old.items()}  # every old message once

        # 4. M new messages: queue offsets continue, physical offsets after the divide
        new = {f"U{i:05d}": send(b.addr, i) for i in range(N, N + M)}
        assert sorted(v[:2] for v in new.values()) == sorted((i % QUEUES, i // QUEUES) for i in range(N, N + M))
        assert min(v[2] for v in new.values()) == divided + 48  # the first DLedger entry's message
        for q in range(QUEUES):
            got, end = consume(b.addr, q, committed(b.addr, q))
            assert end == (N + M) // QUEUES
            for m in got:
                assert m.uniq_key not in consumed, f"{m.uniq_key} delivered twice"
                consumed[m.uniq_key] = (m.queue_id, m.queue_offset)
        sent = {**old, **new}
        assert consumed == {k: v[:2] for k, v in sent.items()}
        # every queue holds 0..end without a gap, old below the new
        for q in range(QUEUES):
            offs = sorted(o for qq, o in consumed.values() if qq == q)
            assert offs == list(range(len(offs)))

        # 5. by offset and by key, on both sides of the divide
        for i in (0, N - 1, N, N + M - 1):
            key = f"U{i:05d}"
            assert view(b.addr, sent[key][2]).uniq_key == key
            assert by_key(b.addr, f"key-{i}") == [key]
    finally:
        b.stop()
        ns.stop()
