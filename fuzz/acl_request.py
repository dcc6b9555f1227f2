"""Target: the ACL check a broker with aclEnable runs on every request before any processor
(rmqha/broker/acl/rules.py AclConfig.validate), on a decoded JSON header and a body from the input.

The AccessKey and Signature fields are chosen from real and hostile values (not ASCII, lone surrogates,
empty, a right signature with one byte changed). Contract: validate returns or raises AclError (4.9's
refusal); anything else escapes into the remoting layer (a non-ASCII Signature once did, 40 times a
second, and the connection was dropped).
"""

from __future__ import annotations

import struct

from rmqha.broker.acl import rules as acl
from rmqha.broker.acl.rules import AclConfig, AclError
from rmqha.broker.remoting import codec
from rmqha.broker.remoting.codec import FrameError
from rmqha.broker.remoting.codes import RequestCode
from fuzz import jsongen
from fuzz.provider import Input

CONFIG = AclConfig.from_dict(
    {
        "globalWhiteRemoteAddresses": ["10.10.103.*"],
        "accounts": [
            {"accessKey": "user", "secretKey": "12345678", "topicPerms": ["T=PUB|SUB"], "groupPerms": ["G=SUB"]},
            {"accessKey": "admin", "secretKey": "87654321", "admin": True},
            {"accessKey": "é", "secretKey": "签名签名签名", "whiteRemoteAddress": "192.168.1.*"},
        ],
    }
)
CODES = (
    RequestCode.SEND_MESSAGE,
    RequestCode.SEND_MESSAGE_V2,
    RequestCode.SEND_BATCH_MESSAGE,
    RequestCode.PULL_MESSAGE,
    RequestCode.HEART_BEAT,
    RequestCode.CONSUMER_SEND_MSG_BACK,
    RequestCode.UPDATE_CONSUMER_OFFSET,
    RequestCode.UPDATE_AND_CREATE_TOPIC,
    RequestCode.QUERY_MESSAGE,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP,
    RequestCode.UNREGISTER_CLIENT,
    26,
)
KEYS = ("user", "admin", "é", "", "ghost", "\udc80", "user\x00")
ADDRESSES = ("127.0.0.1", "10.10.103.4", "192.168.1.9", "::1", "", "not-an-ip")


def TestOneInput(data: bytes) -> None:
    inp = Input(data)
    head = jsongen.header(inp)
    body = jsongen.value(inp) if inp.flag() else inp.take(inp.byte())
    frame = struct.pack(">I", len(head)) + head
    try:
        cmd = codec.decode_frame(frame)
    except FrameError:
        return
    fields = dict(cmd.ext_fields)
    code = inp.pick(CODES)
    if inp.byte() % 4:
        fields[acl.ACCESS_KEY] = inp.pick(KEYS)
    how = inp.byte() % 4
    if how == 0:  # signed right (then perhaps one character changed)
        secret = {"user": "12345678", "admin": "87654321", "é": "签名签名签名"}.get(fields.get(acl.ACCESS_KEY, ""), "x")
        fields = acl.sign(fields, body, fields.get(acl.ACCESS_KEY, ""), secret)
        if inp.flag():
            sig = fields[acl.SIGNATURE]
            at = inp.below(len(sig))
            fields[acl.SIGNATURE] = sig[:at] + inp.pick(("é", "\ud800", "A", "\x00")) + sig[at + 1 :]
    elif how == 1:
        fields[acl.SIGNATURE] = inp.pick(("é", "签名", "\udc80", "x\ud800", "", " ") + jsongen.NASTY_STRINGS)
    try:
        CONFIG.validate(code, fields, body, inp.pick(ADDRESSES))
    except AclError:
        return
