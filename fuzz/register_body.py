"""Target: the name server's REGISTER_BROKER body decoder (RegisterBrokerBody.decode).

Input: a mode byte, then
  0: the body as sent, plain JSON      1: the body as sent, compressed (zlib)
  2: the compressed form's inner parts, zlib-compressed here so mutations get past zlib
  3: a JSON body built by fuzz.jsongen in the shape brokers send (topicConfigTable entries with
     hostile names and values)
Contract: RegisterBodyError (a ValueError) or a well-typed RegisterBrokerBody, nothing else.
"""

from __future__ import annotations

import zlib

from rmqha.broker.namesrv import register_body
from rmqha.broker.namesrv.register_body import RegisterBrokerBody, TopicConfig
from fuzz import jsongen
from fuzz.provider import Input

TOPIC_KEYS = ("topicName", "readQueueNums", "writeQueueNums", "perm", "topicFilterType", "topicSysFlag", "order")


def shaped_json(inp: Input) -> bytes:
    entries = []
    for _ in range(inp.byte() % 4):
        name = jsongen.string(inp)
        entries.append(name + b":" + (jsongen.obj(inp, 1, TOPIC_KEYS) if inp.byte() % 4 else jsongen.value(inp)))
    table = b"{" + b",".join(entries) + b"}"
    version = jsongen.obj(inp, 1, ("counter", "timestamp")) if inp.byte() % 4 else jsongen.value(inp)
    wrapper = b'{"dataVersion":' + version + b',"topicConfigTable":' + table + b"}"
    if inp.byte() % 8 == 0:
        wrapper = jsongen.value(inp)
    filters = jsongen.value(inp) if inp.byte() % 4 == 0 else b'["10.0.0.1:1"]'
    return b'{"filterServerList":' + filters + b',"topicConfigSerializeWrapper":' + wrapper + b"}"


def check_body(body) -> None:
    assert isinstance(body, RegisterBrokerBody), type(body)
    assert isinstance(body.data_version, dict), f"data_version is a {type(body.data_version).__name__}"
    assert all(type(s) is str for s in body.filter_servers), body.filter_servers
    for name, tc in body.topic_configs.items():
        assert type(name) is str and isinstance(tc, TopicConfig), (name, tc)
        assert name == tc.topic_name
        for field in ("read_queue_nums", "write_queue_nums", "perm", "topic_sys_flag"):
            assert type(getattr(tc, field)) is int, f"{field} is {getattr(tc, field)!r}"
        assert type(tc.topic_filter_type) is str and type(tc.order) is bool


def TestOneInput(data: bytes) -> None:
    inp = Input(data)
    mode = inp.byte() % 4
    if mode == 2:
        payload, compressed = zlib.compress(inp.rest()), True
    elif mode == 3:
        payload, compressed = shaped_json(inp), False
    else:
        payload, compressed = inp.rest(), mode == 1
    try:
        body = RegisterBrokerBody.decode(payload, compressed)
    except register_body.RegisterBodyError:
        return
    check_body(body)
