"""JSON-ish text built from fuzz input: what a hostile peer can put in a header or a body.

Mostly valid JSON with the values that hurt: lone UTF-16 surrogates as escapes ("G\\ud800"), numbers
past every integer width and past Python's 4300-digit limit, 1e999, nesting thousands deep, keys that
repeat, non-string values where strings belong, and now and then raw bytes that are not JSON at all.
"""

from __future__ import annotations

from fuzz.provider import Input

# String bodies as they appear between the quotes in JSON source.
NASTY_STRINGS = (
    r"G\ud800",
    r"\ud800",
    r"\udfff",
    r"\udc00\ud800",
    r"\ud83d\ude00",
    r"\u0000",
    r"a\u0000b",
    "hostile/../../../x",
    "..",
    "/",
    r"\\..\\x",
    "%RETRY%G",
    "",
    " ",
    r"\"",
    r"\\",
    "é",
    "日本",
    r"\x",
    "TopicTest",
    "DefaultCluster",
    "12",
    "-1",
    " 7",
    "true",
    "TRUE",
    "1",
    "0",
    "9223372036854775808",
    "-9223372036854775809",
    "2147483648",
    "1" * 5000,
    "A" * 300,
)
FLOATS = (
    "1.5",
    "-0.0",
    "1e999",
    "-1e999",
    "1E-400",
    "0.1e1",
    "12345678901234567890.5",
    "NaN",
    "Infinity",
    "-Infinity",
    "1e309",
    "4.9e-324",
)
INTS = (
    0,
    1,
    -1,
    10,
    11,
    15,
    34,
    36,
    310,
    320,
    2**15,
    2**31 - 1,
    2**31,
    -(2**31) - 1,
    2**63 - 1,
    2**63,
    -(2**63) - 1,
    2**64,
    10**30,
)
MAX_DEPTH = 12  # ordinary recursion; the deep-nesting kind below goes far deeper without recursion


def string(inp: Input) -> bytes:
    kind = inp.byte() % 3
    if kind == 0:
        return b'"' + inp.pick(NASTY_STRINGS).encode() + b'"'
    if kind == 1:  # arbitrary UTF-16 code units as escapes: lone surrogates, controls, anything
        return b'"' + b"".join(b"\\u%04x" % inp.uint(2) for _ in range(inp.byte() % 8)) + b'"'
    raw = inp.take(inp.byte() % 24)  # raw bytes: quotes, backslashes, invalid UTF-8
    return b'"' + raw + b'"'


def number(inp: Input) -> bytes:
    kind = inp.byte() % 4
    if kind == 0:
        return str(inp.pick(INTS)).encode()
    if kind == 1:
        return str(inp.uint(4) - 2**31).encode()
    if kind == 2:  # long numbers: past int64, past Python's int/str conversion limit
        digits = 1 + inp.uint(2) % 6000
        return (b"-" if inp.flag() else b"") + b"9" * digits
    return inp.pick(FLOATS).encode()


def nested(inp: Input) -> bytes:
    """Arrays or objects nested up to ~8000 deep, balanced or not."""
    depth = inp.uint(2) % 8000
    opener, closer = inp.pick(((b"[", b"]"), (b'{"a":', b"}"), (b'{"extFields":', b"}")))
    closers = closer * depth if inp.byte() % 4 else closer * (depth // 2)
    return opener * depth + b"0" + closers


def value(inp: Input, depth: int = 0) -> bytes:
    kind = inp.byte() % 11
    if kind in (0, 1):
        return number(inp)
    if kind in (2, 3):
        return string(inp)
    if kind == 4:
        return inp.pick((b"true", b"false", b"null"))
    if kind == 5 and depth < MAX_DEPTH:
        return b"[" + b",".join(value(inp, depth + 1) for _ in range(inp.byte() % 5)) + b"]"
    if kind == 6 and depth < MAX_DEPTH:
        return obj(inp, depth + 1)
    if kind == 7:
        return nested(inp)
    if kind == 8:
        return inp.take(inp.byte() % 16)  # not JSON at all
    if kind == 9:
        return b'"' + str(inp.pick(INTS)).encode() + b'"'  # a number as a string, as Java writes ext values
    return string(inp)


def obj(inp: Input, depth: int = 0, keys=None) -> bytes:
    members = []
    for _ in range(inp.byte() % 6):
        key = b'"' + inp.pick(keys).encode() + b'"' if keys and inp.flag() else string(inp)
        members.append(key + b":" + value(inp, depth))
    return b"{" + b",".join(members) + b"}"


HEADER_FIELDS = ("code", "flag", "opaque", "language", "version", "remark", "extFields", "serializeTypeCurrentRPC")
EXT_KEYS = (
    "topic",
    "group",
    "consumerGroup",
    "producerGroup",
    "queueId",
    "commitOffset",
    "offset",
    "brokerName",
    "clientID",
    "a",
    "b",
    "bornTimestamp",
    "properties",
    "batch",
    "compressed",
)


def typical(inp: Input, name: str) -> bytes:
    """A value of the kind a real client puts in field `name`, or (1 in 4) any value at all."""
    if inp.byte() % 4 == 0:
        return value(inp)
    if name in ("code", "flag", "opaque", "version"):
        return number(inp)
    if name == "language":
        return inp.pick((b'"JAVA"', b'"CPP"', b'"PYTHON"', b'"G\\ud800"', b"1", b"99", b"-1", b"true"))
    if name == "remark":
        return string(inp)
    if name == "extFields":
        return obj(inp, 1, EXT_KEYS)
    return number(inp)


def header(inp: Input) -> bytes:
    """A remoting JSON header: usually an object with the real field names, sometimes anything."""
    shape = inp.byte() % 8
    if shape == 6:
        return value(inp)
    if shape == 7:
        return inp.take(inp.byte())
    names = [n for n in HEADER_FIELDS if inp.byte() % 4]
    if names:
        turn = inp.byte() % len(names)
        names = names[turn:] + names[:turn]
    if names and inp.byte() % 8 == 0:
        names.append(inp.pick(names))  # a repeated key: the last one wins in Python, first in fastjson
    members = [b'"' + n.encode() + b'":' + typical(inp, n) for n in names]
    text = b"{" + b",".join(members) + b"}"
    if inp.byte() % 4 == 0:
        text = b" \n" + text + b"\n"  # jsoncpp's writer ends headers with a newline
    return text
