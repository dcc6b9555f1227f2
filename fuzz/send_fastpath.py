"""Target: the send path's compiled scan and record encoder (rmqha/broker/fastpath) against the Python path.

Input: a stream of remoting frames, either raw bytes or send requests built from hostile parts (both
namings, any code and flag, fuzz.jsongen values, properties from separators, special names, escapes
and bad UTF-8), cut anywhere. Contract: scan_sends never raises; every send it takes starts where the
previous one ended and is read by the Python path (codec.decode_frame + send.header_view + the
processor's property rules) exactly as the scan read it; and encode_records writes, for what it took,
the bytes record.encode writes for the same message.
"""

from __future__ import annotations

import struct

from rmqha.broker import fastpath
from rmqha.broker.processors import send
from rmqha.broker.remoting.codec import FrameError, decode_frame
from rmqha.broker.remoting.codes import FLAG_ONEWAY, RequestCode
from rmqha.broker.remoting.command import HeaderFieldError, read_numbers
from rmqha.broker.store import index, record
from fuzz import jsongen
from fuzz.provider import Input

CLUSTER = "DefaultCluster"
# What the stream is handed to the scan in: fuzz.native swaps in a buffer that ends at an unreadable
# page, so a read one byte past the data faults.
BUFFER = bytearray
MAX_FRAME = 1 << 16
MAX_HEADER = 1 << 14

PROP_NAMES = (
    "TAGS",
    "KEYS",
    "UNIQ_KEY",
    "WAIT",
    "DELAY",
    "TRAN_MSG",
    "CLUSTER",
    "MAX_RECONSUME_TIMES",
    "a",
    "",
    "é",
    "K\\u0001",
    "W\\u0002",
)
PROP_VALUES = (
    "v",
    "",
    "true",
    "TRUE",
    "false",
    "1",
    "k1 k2",
    "\\u0001",
    "\\u0002",
    "é",
    "\\ud800",
    "\\u0000",
    'x\\"y',
    "\\\\",
)


def python_reading(frame: bytes, cluster: str = CLUSTER) -> dict | None:
    """What the Python path reads from one frame (length prefix included), in the scan's terms (its
    FIELDS, with the body's bytes); None when it would not store it as a plain send."""
    try:
        cmd = decode_frame(frame[4:], MAX_HEADER)
    except FrameError:
        return None
    if cmd.code not in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2) or cmd.flag not in (0, FLAG_ONEWAY):
        return None
    fields, (k_topic, k_default, k_props, k_batch, k_numbers) = send.header_view(cmd)
    topic = fields.get(k_topic)
    if topic is None:
        return None
    try:
        numbers = read_numbers(fields, k_numbers)
    except HeaderFieldError:
        return None
    if send.lenient_parse_boolean(fields.get(k_batch, "")):
        return None
    p = record.decode_properties(fields.get(k_props, ""))
    wait = p.pop("WAIT", None)
    p["CLUSTER"] = cluster
    dqn, qid, sys_flag, born, flag, reconsume, max_reconsume = numbers
    return {
        "topic": topic,
        "default_topic": fields.get(k_default),
        "default_topic_queue_nums": dqn,
        "queue_id": qid,
        "sys_flag": sys_flag,
        "born_timestamp": born,
        "flag": flag,
        "reconsume_times": reconsume,
        "max_reconsume_times": max_reconsume,
        "opaque": cmd.opaque,
        "wait_store_ok": wait is None or wait.lower() == "true",
        "properties": record.encode_properties(p).encode(),
        "tags": p.get("TAGS"),
        "keys": p.get("KEYS"),
        "uniq_key": p.get("UNIQ_KEY"),
        "body": cmd.body,
        "key_hashes": index.key_hashes(topic, p.get("UNIQ_KEY") or None, p.get("KEYS")),
        "oneway": cmd.flag == FLAG_ONEWAY,
    }


def scan_reading(data: bytes, t: tuple) -> dict:
    out = dict(zip(fastpath.FIELDS, t))
    out["body"] = bytes(data[out.pop("body") : out["end"]])
    del out["start"], out["end"]
    return out


def check_send(data: bytes, t: tuple) -> None:
    frame = bytes(data[t[fastpath.START] : t[fastpath.END]])
    py = python_reading(frame)
    if py is None:
        raise AssertionError(f"the scan took a frame the Python path does not store as a plain send: {frame[:300]!r}")
    got = scan_reading(data, t)
    if got != py:
        diff = {k: (got[k], py[k]) for k in py if got.get(k) != py[k]}
        raise AssertionError(f"the scan read a frame differently from the Python path (scan, python): {diff}")


def check_records(data, sends: list, store_host=("10.0.0.9", 10911), born_host=("127.0.0.1", 4000)) -> None:
    """encode_records against record.encode for the sends the scan took (those a record can hold)."""
    sends = [s for s in sends if len(s[fastpath.TOPIC].encode()) <= record.MAX_TOPIC_BYTES]
    if not sends:
        return
    qoffs = list(range(5, 5 + len(sends)))
    out, n, sizes, needed = fastpath.native.encode_records(
        data,
        sends,
        0,
        len(sends),
        qoffs,
        1000,
        1 << 40,
        1700000000000,
        record.encode_host(born_host),
        record.encode_host(store_host),
    )
    assert n == len(sends) and needed == 0 and sum(sizes) == len(out)
    pos, phys = 0, 1000
    for s, qo, size in zip(sends, qoffs, sizes):
        r = scan_reading(data, s)
        props = record.decode_properties(r["properties"])
        msg = record.Message(
            topic=r["topic"],
            body=r["body"],
            queue_id=r["queue_id"],
            flag=r["flag"],
            sys_flag=r["sys_flag"] & ~(record.FLAG_BORNHOST_V6 | record.FLAG_STOREHOST_V6),
            born_timestamp=r["born_timestamp"],
            born_host=born_host,
            store_timestamp=1700000000000,
            store_host=store_host,
            reconsume_times=r["reconsume_times"],
            properties=props,
        )
        want = bytes(record.encode(msg).finish(qo, phys))
        if bytes(out[pos : pos + size]) != want:
            raise AssertionError(f"encode_records wrote a different record for {r!r}")
        pos += size
        phys += size


def _ext_value(inp: Input, name: str) -> bytes:
    if name in ("properties", "i"):
        pairs = []
        for _ in range(inp.byte() % 6):
            sep = inp.pick(("\\u0001", "\\u0001", "", "\\u0002"))
            pairs.append(inp.pick(PROP_NAMES) + sep + inp.pick(PROP_VALUES))
        text = "\\u0002".join(pairs) + ("\\u0002" if inp.flag() else "")
        return b'"' + text.encode() + b'"'
    if inp.byte() % 3 == 0:
        return jsongen.value(inp)
    return b'"' + inp.pick(jsongen.NASTY_STRINGS + ("0", "3", "-1", "false", "T", "+7", "0009")).encode() + b'"'


def send_header(inp: Input) -> bytes:
    short = inp.flag()
    code = inp.pick((310, 310, 10, 10, 320, 11)) if inp.byte() % 8 else inp.uint(2)
    names = list(send.V2_NAMES) if short else list(send.V2_NAMES.values())
    if inp.byte() % 8 == 0:
        names = list(send.V2_NAMES.values()) if short else list(send.V2_NAMES)  # the other naming
    ext = []
    for n in names:
        if n in ("b", "topic", "e", "queueId") or inp.byte() % 3:
            ext.append(b'"' + n.encode() + b'":' + _ext_value(inp, n))
    for _ in range(inp.byte() % 4):  # names a send does not read (the C++ client's ACL fields)
        ext.append(
            b'"'
            + inp.pick(("AccessKey", "Signature", "OnsChannel", "b", "topic", "z")).encode()
            + b'":'
            + _ext_value(inp, "x")
        )
    if inp.byte() % 8 == 0 and ext:
        ext.append(inp.pick(ext))  # a repeated key
    members = [b'"code":' + str(code).encode(), b'"extFields":{' + b",".join(ext) + b"}"]
    if inp.flag():
        members.append(b'"flag":' + (inp.pick((b"0", b"2")) if inp.byte() % 4 else jsongen.number(inp)))
    for key in ("opaque", "version", "language", "remark", "serializeTypeCurrentRPC"):
        if inp.flag():
            members.append(b'"' + key.encode() + b'":' + jsongen.typical(inp, key))
    turn = inp.byte() % len(members)
    members = members[turn:] + members[:turn]
    return b"{" + b",".join(members) + b"}"


def stream(inp: Input) -> bytes:
    out = bytearray()
    for _ in range(1 + inp.byte() % 4):
        head = send_header(inp) if inp.byte() % 8 else jsongen.header(inp)
        body = inp.take(inp.byte())
        if inp.byte() % 4 == 0:
            # A header cut short, its lengths still consistent, and no body: a parser that reads past
            # the header's end (an escape, a number, a keyword at the cut) reads past the stream's.
            head, body = head[: inp.uint(2) % (len(head) + 1)], b""
        serialize = 0 if inp.byte() % 16 else 1
        out += struct.pack(">II", 4 + len(head) + len(body), serialize << 24 | len(head)) + head + body
    return bytes(out)


def TestOneInput(data: bytes) -> None:
    if fastpath.native is None:
        return
    inp = Input(data)
    mode = inp.byte() % 4
    buf = inp.take(len(data)) if mode == 0 else stream(inp)
    cut = inp.uint(2) % (len(buf) + 1) if mode == 3 else len(buf)
    buf = BUFFER(buf[:cut] if mode == 3 and cut % 2 else buf)  # half the cuts end the buffer there
    sends, pos = fastpath.native.scan_sends(buf, 0, cut, MAX_FRAME, MAX_HEADER, CLUSTER, 64)
    at = 0
    for s in sends:
        if s[fastpath.START] != at or not s[fastpath.START] < s[fastpath.BODY] <= s[fastpath.END] <= cut:
            raise AssertionError(f"send positions out of order: {s[:3]} after {at}")
        at = s[fastpath.END]
        check_send(buf, s)
    if pos != at:
        raise AssertionError(f"scan returned position {pos}, its last send ended at {at}")
    check_records(buf, sends)
