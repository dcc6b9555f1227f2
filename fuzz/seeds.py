"""Writes the seed corpora (fuzz/corpus/<target>/) from the project's own encoders.

    python -m fuzz.seeds [target ...]

Each seed is a harness input: the harness's control bytes (mode, cut points...) followed by frames,
bodies or records that our encoders produce, so the fuzzer starts from the valid shapes and mutates.
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

from rmqha.broker.ha import wire
from rmqha.broker.namesrv.register_body import RegisterBrokerBody, TopicConfig
from rmqha.broker.remoting import codec
from rmqha.broker.remoting.codes import RequestCode, ResponseCode, SerializeType
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.store import record
from rmqha.broker.store.record import Message

CORPUS = Path(__file__).with_name("corpus")


def _commands() -> list[RemotingCommand]:
    heartbeat = json.dumps(
        {
            "clientID": "127.0.0.1@1",
            "consumerDataSet": [
                {
                    "groupName": "G",
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                    "subscriptionDataSet": [
                        {"topic": "T", "subString": "*", "tagsSet": [], "codeSet": [], "subVersion": 1}
                    ],
                }
            ],
            "producerDataSet": [{"groupName": "PG"}],
        }
    ).encode()
    send = RemotingCommand.request(
        RequestCode.SEND_MESSAGE_V2,
        {
            "a": "PG",
            "b": "TopicTest",
            "c": "TBW102",
            "d": 4,
            "e": 1,
            "f": 0,
            "g": 1700000000000,
            "h": 0,
            "i": "UNIQ_KEY\x01ABC\x02TAGS\x01TagA",
            "j": 0,
            "k": False,
            "m": False,
        },
        body=b"hello",
    )
    send.opaque = 7
    pull = RemotingCommand.request(
        RequestCode.PULL_MESSAGE,
        {
            "consumerGroup": "G",
            "topic": "T",
            "queueId": 0,
            "queueOffset": 0,
            "maxMsgNums": 32,
            "sysFlag": 2,
            "commitOffset": 0,
            "suspendTimeoutMillis": 15000,
            "subscription": "*",
            "subVersion": 1,
        },
    )
    offset = RemotingCommand.request(
        RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": "T", "queueId": 1, "commitOffset": 5}
    )
    offset.mark_oneway()
    binary = RemotingCommand.request(
        RequestCode.GET_MAX_OFFSET, {"topic": "T", "queueId": 3}, opaque=9, serialize_type=SerializeType.ROCKETMQ
    )
    reply = send.make_response(
        ResponseCode.SUCCESS, "ok", {"msgId": "7F00000100002A9F0000000000000000", "queueId": 1, "queueOffset": 0}
    )
    return [
        RemotingCommand.request(RequestCode.HEART_BEAT, body=heartbeat),
        send,
        pull,
        offset,
        binary,
        reply,
        RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG),
    ]


def remoting_frame() -> dict[str, bytes]:
    cmds = _commands()
    out = {f"frame-{i}": b"\0\0" + codec.encode(c) for i, c in enumerate(cmds)}
    stream = b"".join(codec.encode(c) for c in cmds[:3])
    out["stream-cut"] = b"\x03" + struct.pack(">HHH", 3, 40, 200) + b"\0" + stream
    out["stream-small-max"] = b"\0\x03" + stream
    return out


def json_header() -> dict[str, bytes]:
    # type byte pick (0 -> JSON), header shape 7 (raw text), its length, the text, an empty body.
    out = {}
    for i, c in enumerate(_commands()):
        head = codec.encode_header(c) if c.serialize_type == SerializeType.JSON else b"{}"
        if len(head) < 256:
            out[f"header-{i}"] = b"\0\x07" + bytes([len(head)]) + head + b"\0"
    return out


def register_body() -> dict[str, bytes]:
    body = RegisterBrokerBody(
        {
            "TopicTest": TopicConfig("TopicTest", 4, 4, 6),
            "%RETRY%G": TopicConfig("%RETRY%G", 1, 1, 6, "MULTI_TAG", 0, True),
        },
        {"counter": 3, "timestamp": 1700000000123},
        ["10.0.0.1:1"],
    )
    return {
        "plain": b"\0" + body.encode(False),
        "compressed": b"\x01" + body.encode(True),
        "inner": b"\x02" + zlib.decompress(body.encode(True)),
        "shaped": b"\x03" + bytes(range(64)),
    }


def ha_wire() -> dict[str, bytes]:
    reports = b"".join(wire.encode_report(o) for o in (0, 4096, 1 << 33))
    frames = wire.encode_header(1024, 5) + b"hello" + wire.encode_header(1029, 0) + wire.encode_header(1029, 3) + b"abc"
    frames_at_file = (
        wire.encode_header(4096, 5) + b"hello" + wire.encode_header(4101, 0) + wire.encode_header(4101, 3) + b"abc"
    )
    # bodies across 64-byte files: 40 + 24 fill the first, then 10, a heartbeat, 5 in the next
    files_of_64 = b"".join(
        wire.encode_header(o, n) + bytes([65 + k]) * n
        for k, (o, n) in enumerate(((0, 40), (40, 24), (64, 10), (74, 0), (74, 5)))
    )
    master_params = b"\x01" + (1 << 20).to_bytes(5, "big") + (0).to_bytes(5, "big") + (32768).to_bytes(2, "big")
    return {
        "reports": b"\0\x02\0\x05\0\x0b" + reports,
        "frames": b"\x01\0\x01\0\x07" + frames,
        "master": b"\x02" + master_params + b"\x01\0\x03" + wire.encode_report(0) + wire.encode_report(4096),
        "master-resume": b"\x02" + master_params + b"\0" + wire.encode_report(1 << 19),
        "slave": b"\x03\x01" + (1024).to_bytes(5, "big") + b"\0\x01\0\x09" + frames,
        "slave-empty": b"\x03\0\x01\0" + frames,
        "zero-copy-empty": b"\x04\0\x01\0\0\x02\x02\0\x05\0\x0e" + frames_at_file,
        "zero-copy-resume": b"\x04\x01" + (4096).to_bytes(3, "big") + b"\x01\x02\0\x07\x01\0\x14" + frames_at_file,
        "compiled-empty": b"\x05\0\x01\0\x02\0\x05\0\x0e" + frames_at_file,
        "compiled-resume": b"\x05\x01" + (4096).to_bytes(8, "big") + b"\0\x01\0\x01\0\x14" + frames_at_file,
        "compiled-top": b"\x05\x01"
        + ((1 << 63) - 4096).to_bytes(8, "big")
        + b"\0\x01\0\0"
        + wire.encode_header((1 << 63) - 4096, 3)
        + b"abc"
        + wire.encode_header((1 << 63) - 4093, 2)
        + b"de",
        "compiled-files": b"\x05\0\0\0\0" + files_of_64,
    }


def record_scan() -> dict[str, bytes]:
    msgs = [
        Message(topic="TopicTest", body=b"hello", queue_id=1, properties={"TAGS": "TagA", "UNIQ_KEY": "U1"}),
        Message(topic="T", body=b"", born_host=("::1", 1), properties={"KEYS": "k"}),
        Message(topic="%RETRY%G", body=bytes(100), store_host=("fe80::1", 10911), sys_flag=record.TRANSACTION_PREPARED),
    ]
    buf = bytearray()
    for m in msgs:
        buf += record.encode(m).finish(0, len(buf))
    blank = bytes(buf) + record.blank(64) + bytes(56)
    return {
        "records": b"\x01\0\0" + bytes(buf),
        "records-nocrc": b"\0\0\0" + bytes(buf),
        "blank": b"\x01\0\0" + blank,
        "second": b"\x03" + struct.pack(">H", len(record.encode(msgs[0]).buf)) + bytes(buf),
        "built": b"\x05\0\0\x02" + bytes(range(1, 80)),
    }


def send_fastpath() -> dict[str, bytes]:
    # mode 0: the rest of the input is the stream itself: client frames, one after another.
    from rmqha.cluster.requests import props, send_v1, send_v2

    frames = [
        codec.encode(c)
        for c in (
            send_v2(),
            send_v1(),
            send_v2(properties=props(WAIT="false", KEYS="a b")),
            send_v2(topic="%RETRY%G", body=b""),
        )
    ]
    return {
        "v2": b"\0" + frames[0],
        "v1": b"\0" + frames[1],
        "run": b"\0" + b"".join(frames),
        "cut": b"\0" + b"".join(frames)[:-7],
    }


def _dledger_frame(request, opaque: int, response: bool = False) -> bytes:
    from rmqha.broker.dledger.protocol import request_code
    from rmqha.broker.remoting.codes import FLAG_RESPONSE

    code = 200 if response else int(request_code(request))
    cmd = RemotingCommand.request(code, body=request.to_json_bytes(), opaque=opaque)
    if response:
        cmd.flag |= FLAG_RESPONSE
    frame = codec.encode(cmd)
    return b"\0" + struct.pack(">H", len(frame)) + frame  # no clock step, the length, the frame


def dledger_rpc() -> dict[str, bytes]:
    # node n0 of group g, term 3, entries 0-2 (terms 2, 2, 3; bodies e0-e2 at pos 0, 50, 100), committed 1
    from rmqha.broker.dledger import protocol as p
    from rmqha.broker.dledger.entry import DLedgerEntry

    def head(role: int, flags: int = 0) -> bytes:
        return bytes([role, flags, 3, 3, 2])

    def base(cls, frm="n1", term=3, **kw):
        return cls(group="g", remoteId="n0", localId=frm, leaderId=frm, term=term, **kw)

    def entry(index, term, pos, body):
        e = DLedgerEntry(body=body, index=index, term=term, pos=pos)
        e.compute_size()
        return e

    def push(type_, e=None, commit=2):
        return base(p.PushEntryRequest, type=type_, entry=e, commitIndex=commit)

    candidate, follower, leader = 0, 1, 2
    vote = base(p.VoteRequest, term=4, ledgerEndIndex=2, ledgerEndTerm=3)
    beat = base(p.HeartBeatRequest)
    append = push(p.PushType.APPEND, entry(3, 3, 150, b"x"))
    append_next = push(p.PushType.APPEND, entry(4, 3, 199, b"yy"), commit=3)
    commit = push(p.PushType.COMMIT, commit=3)
    compare = push(p.PushType.COMPARE, entry(2, 3, 100, b"e2"))
    truncate = push(p.PushType.TRUNCATE, entry(1, 2, 50, b"e1"))
    transfer = base(p.LeadershipTransferRequest, frm="n2", transferId="n0", transfereeId="n1")
    take = base(p.LeadershipTransferRequest, transferId="n1", transfereeId="n0", takeLeadershipLedgerIndex=2)
    take_later = base(p.LeadershipTransferRequest, transferId="n1", transfereeId="n0", takeLeadershipLedgerIndex=9)
    client = dict(group="g", remoteId="n0", localId="c1")
    f = _dledger_frame
    return {
        "vote": head(candidate) + f(vote, 1),
        "vote-then-beat": head(candidate) + f(vote, 1) + f(base(p.HeartBeatRequest, term=4), 2),
        "beat": head(candidate) + f(beat, 1),
        "push-append": head(follower) + f(append, 1) + f(append_next, 2) + f(commit, 3),
        "push-gap": head(follower) + f(append_next, 1) + b"\x40" + f(append, 2),
        "push-compare-truncate": head(follower) + f(compare, 1) + f(truncate, 2) + f(append, 3),
        "push-files": head(follower, 1) + f(truncate, 1) + f(append, 2) + f(compare, 3) + f(commit, 4),
        "push-not-follower": head(leader) + f(append, 1) + f(compare, 2),
        "push-later-term": head(follower, 1) + f(push(p.PushType.APPEND, entry(3, 9, 150, b"x")), 1) + f(append, 2),
        "transfer-leader": head(leader) + f(transfer, 1),
        "transfer-take": head(follower) + f(take, 1),
        "transfer-take-later": head(follower, 1) + f(take_later, 1) + f(take, 2),
        "metadata-pull-get": head(follower)
        + f(p.MetadataRequest(**client), 1)
        + f(p.PullEntriesRequest(nodeId="n1", beginIndex=0, **client), 2)
        + f(p.GetEntriesRequest(beginIndex=0, maxSize=4, **client), 3),
        "append": head(leader, 2) + f(p.AppendEntryRequest(body=b"hello", **client), 1),
        "append-refused": head(leader) + f(p.AppendEntryRequest(body=b"hello", **client), 1),
        "batch-append": head(leader, 2) + f(p.BatchAppendEntryRequest(batchMsgs=[b"a", b"b"], **client), 1),
        "append-file": head(leader, 3) + f(p.AppendEntryRequest(body=b"hello", **client), 1),
        "response-on-server": head(candidate, 8)
        + b"\xff\0\0"
        + f(p.VoteResponse(group="g", term=3, voteResult=p.VoteResult.ACCEPT), 1, response=True),
        "old-rules": head(follower, 9) + f(compare, 1) + f(truncate, 2) + f(append, 3) + f(commit, 4),
    }


def dledger_entry() -> dict[str, bytes]:
    import os
    import tempfile

    from fuzz.dledger_entry import DATA_FILE, INDEX_FILE
    from rmqha.broker.dledger import entry as de
    from rmqha.broker.dledger.file_store import FileStore

    def files(folder: str, sub: str) -> list[bytes]:
        path = os.path.join(folder, "dledger-n0", sub)
        return [open(os.path.join(path, n), "rb").read() for n in sorted(os.listdir(path))]

    def store_input(folder: str, cut: int | None = None) -> bytes:
        datas, indexes = files(folder, "data"), files(folder, "index")
        datas = [d.rstrip(b"\0") for d in datas]
        if cut is not None:
            datas[-1] = datas[-1][:cut]
        indexes = [i.rstrip(b"\0") for i in indexes]
        cp = open(os.path.join(folder, "dledger-n0", "checkpoint"), "rb").read()
        term = open(os.path.join(folder, "dledger-n0", "currterm"), "rb").read()
        out = b"\x01" + bytes([len(datas) - 1, len(indexes) - 1, 0])
        out += b"".join(struct.pack(">H", len(d)) + d for d in datas)
        out += b"".join(struct.pack(">H", len(i)) + i for i in indexes)
        return out + bytes([len(cp)]) + cp + bytes([len(term)]) + term

    e = de.DLedgerEntry(body=b"hello", index=7, term=3, pos=4096)
    out = {
        "entry": b"\0\0" + de.encode_entry(e),
        "entry-offset": b"\0\x05" + bytes(5) + de.encode_entry(e),
        "index": b"\0\0" + de.index_entry_for(e),
        "blank": b"\0\0" + de.encode_blank(16),
    }
    with tempfile.TemporaryDirectory() as folder:
        fs = FileStore(folder, "n0", data_file_size=DATA_FILE, index_file_size=INDEX_FILE)
        for i in range(7):  # 148-byte entries: three a data file, then a blank
            fs.append_as_leader(bytes([65 + i]) * 100, 1 + i // 3)
        fs.set_committed_index(5)
        fs.persist_term(3, "n1")
        fs.close()
        out["store"] = store_input(folder)
        out["store-torn"] = store_input(folder, cut=100)
    return out


def acl_request() -> dict[str, bytes]:
    # header shape 7 (raw text), its length, the text; then the body choice and the field choices
    out = {}
    for i, c in enumerate(_commands()):
        head = codec.encode_header(c) if c.serialize_type == SerializeType.JSON else b"{}"
        if len(head) < 256:
            for how in range(4):
                out[f"header-{i}-{how}"] = b"\x07" + bytes([len(head)]) + head + b"\0\0\0\x01\0" + bytes([how, 1, 0])
    return out


def main(argv: list[str] | None = None) -> None:
    import sys

    only = set(sys.argv[1:] if argv is None else argv)  # target names: rewrite just those
    for target, make in (
        ("remoting_frame", remoting_frame),
        ("json_header", json_header),
        ("register_body", register_body),
        ("ha_wire", ha_wire),
        ("record_scan", record_scan),
        ("send_fastpath", send_fastpath),
        ("dledger_rpc", dledger_rpc),
        ("dledger_entry", dledger_entry),
        ("acl_request", acl_request),
    ):
        if only and target not in only:
            continue
        folder = CORPUS / target
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.iterdir():
            old.unlink()
        seeds = make()
        for name, data in seeds.items():
            (folder / name).write_bytes(data)
        print(f"{target}: {len(seeds)} seeds, {sum(map(len, seeds.values()))} bytes -> {folder}")


if __name__ == "__main__":
    main()
