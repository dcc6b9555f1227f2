"""The codec's fast paths write and read exactly what the general code does."""

from __future__ import annotations

import json
import random

from rmqha.broker.remoting import codec
from rmqha.broker.remoting.codes import RequestCode, ResponseCode, SerializeType
from rmqha.broker.remoting.command import RemotingCommand

ODD_TEXT = [
    "",
    "plain",
    'quo"te',
    "back\\slash",
    "nl\nand\ttab",
    "\x01\x02ctl",
    "é ü 中文",
    "\ud800lone",
    "emoji \U0001f600",
    "</script>",
    "a" * 300,
]


def commands(seed=5, n=400):
    rnd = random.Random(seed)
    for i in range(n):
        ext = {}
        for _ in range(rnd.randrange(0, 8)):
            key = rnd.choice(ODD_TEXT + ["msgId", "queueId", "a", "b", "Z", "zz"]) or "k"
            ext[key] = rnd.choice(ODD_TEXT + [str(rnd.randrange(-(10**12), 10**12))])
        if rnd.random() < 0.2:
            ext["n"] = rnd.randrange(100)  # not a str: stringified the Java way
            ext["b"] = True
            ext["none"] = None
        yield RemotingCommand(
            code=rnd.choice([0, 1, 310, -5, ResponseCode.SUCCESS, RequestCode.SEND_MESSAGE_V2]),
            language=rnd.choice(["JAVA", "CPP", "PYTHON", 'we"ird']),
            version=rnd.randrange(-(2**31), 2**31),
            opaque=rnd.randrange(-(2**31), 2**31),
            flag=rnd.randrange(0, 4),
            remark=rnd.choice([None] + ODD_TEXT),
            ext_fields=ext,
        )


def test_the_json_header_fast_path_writes_the_general_bytes():
    for cmd in commands():
        assert codec._encode_json_header(cmd) == codec._encode_json_header_generic(cmd), cmd


def test_unusual_field_types_take_the_general_path():
    cmd = RemotingCommand(code=True, language="JAVA", remark=None)
    assert codec._encode_json_header(cmd) == codec._encode_json_header_generic(cmd)
    assert json.loads(codec._encode_json_header(cmd))["code"] is True


def test_frames_round_trip_through_the_fast_paths():
    for cmd in commands(seed=9, n=100):
        cmd.body = b"body" * (cmd.opaque % 7)
        frame = codec.encode(cmd)
        back = codec.decode(frame)
        assert (back.code, back.opaque, back.flag, back.version, back.body) == (
            int(cmd.code),
            cmd.opaque,
            cmd.flag,
            cmd.version,
            cmd.body,
        )
        assert back.serialize_type == SerializeType.JSON
        assert len(frame) == 4 + int.from_bytes(frame[:4], "big")
