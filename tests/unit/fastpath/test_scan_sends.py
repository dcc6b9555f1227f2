"""The compiled scan (rmqha/broker/fastpath) against the Python codec and send processor it accelerates.

Whatever scan_sends takes, the Python path must read the same way: the same numbers, topic, stored
properties and body. Whatever it does not take it must leave in the buffer untouched, and it must take
what real clients send (else the fast path is dead code that passes every test).
"""

from __future__ import annotations

import random
import struct

import pytest

from rmqha.broker import fastpath
from rmqha.broker.remoting.codec import encode
from rmqha.broker.remoting.codes import DEFAULT_MAX_FRAME_LENGTH, DEFAULT_MAX_HEADER_LENGTH, RequestCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.store import record
from fuzz.send_fastpath import check_records, check_send
from tests.unit.processors.harness import props, send_v1, send_v2

pytestmark = pytest.mark.skipif(not fastpath.available(), reason="the compiled accelerator is not built here")

CLUSTER = "DefaultCluster"


def scan(data: bytes, limit: int = 1000, max_frame=DEFAULT_MAX_FRAME_LENGTH, max_header=DEFAULT_MAX_HEADER_LENGTH):
    return fastpath.native.scan_sends(bytearray(data), 0, len(data), max_frame, max_header, CLUSTER, limit)


def assert_same_reading(frame: bytes, t: tuple):
    check_send(frame, t)


def frame_of(cmd: RemotingCommand) -> bytes:
    return encode(cmd)


def raw_frame(header: bytes, body: bytes = b"", serialize: int = 0) -> bytes:
    return struct.pack(">II", 4 + len(header) + len(body), serialize << 24 | len(header)) + header + body


def v2_with(**ext) -> RemotingCommand:
    """A V2 send with more header fields than send_v2 keeps."""
    cmd = send_v2()
    cmd.ext_fields.update(ext)
    return cmd


CLIENT_FRAMES = [
    send_v1(),
    send_v2(),
    send_v2(body=b""),
    send_v2(body=bytes(range(256)) * 40),
    send_v2(topic="T_1-x%y|z", queue_id=7),
    send_v2(properties=""),
    send_v2(properties=props(WAIT="false")),
    send_v2(properties=props(WAIT="TRUE", KEYS="a b c")),
    send_v2(properties=props(UNIQ_KEY="é\u4e2d\U0001f600", KEYS='k"e\\y/\n')),
    send_v2(properties="\x02\x02a\x01b\x02\x01x\x02y\x01\x02c\x01d"),  # empty segments, as Java skips them
    send_v2(properties=props(MAX_RECONSUME_TIMES="3")),
    send_v2(bornTimestamp=-1, sysFlag=3, flag=-7, reconsumeTimes=2, maxReconsumeTimes=9),
    send_v2(bornTimestamp="9223372036854775807", queueId="0007", defaultTopicQueueNums="+8"),
    send_v2(bornTimestamp="-9223372036854775808"),
    send_v1(batch="false"),
    send_v1(batch="FALSE"),
    send_v1(batch=""),
    send_v1(unitMode="true", brokerName="b"),
    # what the C++ 1.0.1 client inside PyPI rocketmq really sends: ACL fields the send does not read
    send_v1(AccessKey="", OnsChannel="ALIYUN", Signature="5qugCmcesiDjivbyb07Kh5nH1fQ=", sysFlag=1),
    v2_with(AccessKey="x", b2="ignored", z="ignored"),
]


@pytest.mark.parametrize("cmd", CLIENT_FRAMES, ids=range(len(CLIENT_FRAMES)))
def test_takes_what_clients_send_and_reads_it_as_the_python_path(cmd):
    cmd.opaque = 4242
    frame = frame_of(cmd)
    sends, pos = scan(frame)
    assert pos == len(frame) and len(sends) == 1
    assert_same_reading(frame, sends[0])


def test_the_raw_producers_frames_are_taken():
    """bench/bench_send.py's pre-encoded frames: the benchmark measures the fast path."""
    from bench.bench_send import raw_frames

    frames = raw_frames({"size": 1024, "group": "PG", "topic": "BenchSend", "tag": "AB"}, count=8)
    data = b"".join(frames)
    sends, pos = scan(data)
    assert len(sends) == 8 and pos == len(data)
    for f, t in zip(frames, sends):
        assert_same_reading(
            f,
            fastpath.native.scan_sends(
                bytearray(f), 0, len(f), DEFAULT_MAX_FRAME_LENGTH, DEFAULT_MAX_HEADER_LENGTH, CLUSTER, 1
            )[0][0],
        )


NOT_PLAIN = {
    "batch flag": send_v1(batch="1"),
    "batch true": send_v2(batch="true"),
    "batch code": RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, send_v2().ext_fields, body=b"x"),
    "half message": send_v2(properties=props(TRAN_MSG="true")),
    "tran false still checked by python": send_v2(properties=props(TRAN_MSG="false")),
    "delay": send_v2(properties=props(DELAY="3")),
    "client cluster": send_v2(properties=props(CLUSTER="x")),
    "duplicate property": send_v2(properties="a\x01b\x02a\x01c"),
    "value with a name separator": send_v2(properties="a\x01b\x01c"),
    "no topic": send_v2(topic=None),
    "no queue id": RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"b": "T"}),
    "queue id not a number": send_v2(queueId="x"),
    "queue id out of range": send_v2(queueId=str(2**31)),
    "born timestamp out of range": send_v2(bornTimestamp=str(2**63)),
    "long names on V2": RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"topic": "T", "queueId": "0"}),
    "short names on V1": RemotingCommand.request(RequestCode.SEND_MESSAGE, {"b": "T", "e": "0"}),
    "a long name among the short ones on V2": v2_with(producerGroup="PG2"),
    "more ext fields than a scan reads": v2_with(**{f"x{i}": "v" for i in range(40)}),
    "pull": RemotingCommand.request(RequestCode.PULL_MESSAGE, {"topic": "T"}),
    "empty topic": send_v2(topic=""),
    "topic too long": send_v2(topic="t" * 128),
}


@pytest.mark.parametrize("name", sorted(NOT_PLAIN))
def test_leaves_anything_else_to_the_python_path(name):
    frame = frame_of(NOT_PLAIN[name])
    sends, pos = scan(frame)
    assert (sends, pos) == ([], 0)


def test_oneway_sends_are_taken_responses_are_not():
    for flag, taken in ((1, False), (2, True), (3, False), (4, False)):
        cmd = send_v2()
        cmd.flag = flag
        sends, _ = scan(frame_of(cmd))
        assert bool(sends) == taken
        if taken:
            assert sends[0][fastpath.ONEWAY] is True
            assert_same_reading(frame_of(cmd), sends[0])


HEADER_CASES = {
    # (header text, taken?)
    "integers in extFields": (
        b'{"code":310,"extFields":{"b":"T","e":0,"f":-3,"g":9223372036854775807},"flag":0}',
        True,
    ),
    "minus zero in extFields": (b'{"code":310,"extFields":{"b":-0,"e":-0},"flag":0}', True),
    "a float in extFields": (b'{"code":310,"extFields":{"b":"T","e":0.0},"flag":0}', False),
    "20 digits in extFields": (b'{"code":310,"extFields":{"b":"T","e":"0","g":10000000000000000000}}', False),
    "true in extFields": (b'{"code":310,"extFields":{"b":"T","e":"0","m":true}}', False),
    "null in extFields": (b'{"code":310,"extFields":{"b":"T","e":"0","c":null}}', False),
    # the C++ 1.0.1 client in PyPI rocketmq, byte for byte (numbers as JSON numbers, no
    # serializeTypeCurrentRPC, ACL fields, a trailing newline)
    "the official client's header": (
        b'{"code":10,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","Signature":"3xb4/++MFwnxXXaJ3DVKJeMMt4Y=",'
        b'"batch":"0","bornTimestamp":"1795418853406","defaultTopic":"TBW102","defaultTopicQueueNums":4,"flag":0,'
        b'"producerGroup":"PG","properties":"KEYS\\u0001s-key-5\\u0002TAGS\\u0001tagA\\u0002UNIQ_KEY\\u0001'
        b'0100007F0000A33B00009EF242780600\\u0002WAIT\\u0001true\\u0002seq\\u00015\\u0002up\\u0001v5\\u0002",'
        b'"queueId":1,"reconsumeTimes":"0","sysFlag":0,"topic":"X39b43f35","unitMode":"0"},"flag":0,'
        b'"language":"CPP","opaque":8,"remark":"","version":63}\n',
        True,
    ),
    "float code": (b'{"code":310.0,"extFields":{"b":"T","e":"0"},"flag":0}', False),
    "exponent opaque": (b'{"code":310,"opaque":1e3,"extFields":{"b":"T","e":"0"},"flag":0}', False),
    "leading zero opaque": (b'{"code":310,"opaque":01,"extFields":{"b":"T","e":"0"},"flag":0}', False),
    "opaque over 32 bits": (b'{"code":310,"opaque":2147483648,"extFields":{"b":"T","e":"0"}}', False),
    "null code": (b'{"code":null,"extFields":{"b":"T","e":"0"}}', False),
    "duplicate key": (b'{"code":310,"code":310,"extFields":{"b":"T","e":"0"}}', False),
    "duplicate ext key": (b'{"code":310,"extFields":{"b":"T","b":"U","e":"0"}}', False),
    "unknown key": (b'{"code":310,"x":1,"extFields":{"b":"T","e":"0"}}', False),
    "trailing garbage": (b'{"code":310,"extFields":{"b":"T","e":"0"}}x', False),
    "lone surrogate": (b'{"code":310,"extFields":{"b":"T\\ud800","e":"0"}}', False),
    "raw control char": (b'{"code":310,"extFields":{"b":"T\x01","e":"0"}}', False),
    "bad utf-8": (b'{"code":310,"extFields":{"b":"T\xc3","e":"0"}}', False),
    "overlong utf-8": (b'{"code":310,"extFields":{"b":"T\xc0\xaf","e":"0"}}', False),
    "encoded surrogate": (b'{"code":310,"extFields":{"b":"T\xed\xa0\x80","e":"0"}}', False),
    "bom": (b'\xef\xbb\xbf{"code":310,"extFields":{"b":"T","e":"0"}}', False),
    "unterminated": (b'{"code":310,"extFields":{"b":"T","e":"0"}', False),
    "bad escape": (b'{"code":310,"extFields":{"b":"T\\x","e":"0"}}', False),
    "minimal": (b'{"code":310,"extFields":{"b":"T","e":"0"}}', True),
    "whitespace and newline": (b' {\n "code" : 310 ,\t"extFields" : { "b" : "T" , "e" : "0" } }\n', True),
    "escaped key and values": (b'{"\\u0063ode":310,"extFields":{"\\u0062":"\\u00e9T\\/","e":"0"}}', True),
    "null remark, strings kept out": (
        b'{"code":310,"remark":null,"language":"JAVA","version":1,'
        b'"serializeTypeCurrentRPC":"JSON","extFields":{"b":"T","e":"0"}}',
        True,
    ),
    "negative opaque": (b'{"code":310,"opaque":-2147483648,"extFields":{"b":"T","e":"0"}}', True),
}


@pytest.mark.parametrize("name", sorted(HEADER_CASES))
def test_json_edge_cases(name):
    header, taken = HEADER_CASES[name]
    frame = raw_frame(header, b"body")
    sends, pos = scan(frame)
    assert bool(sends) == taken
    if taken:
        assert_same_reading(frame, sends[0])
    else:
        assert pos == 0


def test_framing_limits_stop_the_scan_without_judging():
    good = frame_of(send_v2())
    # a serialize type other than JSON, a header length past the frame, over the header limit
    rocketmq = bytearray(good)
    rocketmq[4] = 1
    assert scan(bytes(rocketmq)) == ([], 0)
    long_header = bytearray(good)
    long_header[5:8] = (len(good)).to_bytes(3, "big")
    assert scan(bytes(long_header)) == ([], 0)
    assert scan(good, max_header=10) == ([], 0)
    assert scan(good, max_frame=len(good) - 1) == ([], 0)
    assert scan(b"\x00\x00\x00\x03abc") == ([], 0)  # a length under 4: the codec's error, not ours
    # incomplete: every cut of a frame takes nothing, then the whole one is taken
    for cut in range(len(good)):
        assert scan(good[:cut]) == ([], 0)


def test_runs_stop_before_the_first_frame_not_taken_and_respect_the_limit():
    a, b = frame_of(send_v2(topic="A")), frame_of(send_v2(topic="B"))
    other = frame_of(NOT_PLAIN["pull"])
    data = a + b + other + a
    sends, pos = scan(data)
    assert [s[fastpath.TOPIC] for s in sends] == ["A", "B"] and pos == len(a) + len(b)
    sends, pos = fastpath.native.scan_sends(
        bytearray(data), pos + len(other), len(data), DEFAULT_MAX_FRAME_LENGTH, DEFAULT_MAX_HEADER_LENGTH, CLUSTER, 10
    )
    assert len(sends) == 1 and pos == len(data) and sends[0][fastpath.START] == len(a) + len(b) + len(other)
    sends, pos = scan(a * 5, limit=3)
    assert len(sends) == 3 and pos == 3 * len(a)


def test_properties_over_the_limit_are_left_to_the_python_path():
    assert scan(frame_of(send_v2(properties=props(K="v" * 32000))))[0]
    assert scan(frame_of(send_v2(properties=props(K="v" * 32767)))) == ([], 0)


def test_mutated_frames_are_never_read_differently():
    """Random byte flips, insertions and cuts of client frames: whatever the scan still takes, the
    Python path must decode and read identically (the fuzzer, fuzz/targets, does this for longer)."""
    rng = random.Random(7)
    bases = [frame_of(c) for c in CLIENT_FRAMES[:12]]
    taken = 0
    for _ in range(4000):
        frame = bytearray(rng.choice(bases))
        for _ in range(rng.randint(1, 3)):
            op = rng.random()
            i = rng.randrange(8, len(frame))
            if op < 0.6:
                frame[i] = rng.choice(
                    [rng.randrange(256), ord('"'), ord("\\"), ord("{"), ord(","), 0x01, 0x02, ord("0"), ord("-")]
                )
            elif op < 0.8:
                frame.insert(i, rng.randrange(256))
            else:
                del frame[i]
        frame[0:4] = struct.pack(">I", len(frame) - 4)
        hl = int.from_bytes(frame[5:8], "big")
        if hl > len(frame) - 8:
            continue
        sends, pos = scan(bytes(frame))
        if sends:
            taken += 1
            assert pos == len(frame)
            assert_same_reading(bytes(frame), sends[0])
    assert taken > 100  # the mutations that keep a plain send (a body byte, a digit) are still taken


def test_encode_records_reads_only_exact_ints_in_range():
    """A caller's int subclass could run Python code between the encoder's passes (a review found a
    heap overflow that way): only exact ints are taken, and values are range-checked as struct.pack
    would, before any byte is written."""
    frame = frame_of(send_v2(body=b"x"))
    (sent,), _ = scan(frame)
    src = bytearray(frame)
    host = record.encode_host(("127.0.0.1", 1))
    sends = [sent, sent]

    class Evil(int):
        def __index__(self):
            sends[1] = None
            return 0

    with pytest.raises(TypeError):
        fastpath.native.encode_records(src, sends, 0, 2, [Evil(0), 0], 0, 1 << 40, 0, host, host)
    with pytest.raises(ValueError):
        fastpath.native.encode_records(src, [sent], 0, 1, [2**63], 0, 1 << 40, 0, host, host)
    bad = list(sent)
    bad[fastpath.QUEUE_ID] = 2**32 + 1
    with pytest.raises(ValueError):
        fastpath.native.encode_records(src, [tuple(bad)], 0, 1, [0], 0, 1 << 40, 0, host, host)
    bad = list(sent)
    bad[fastpath.END] = len(src) + 1  # a body past the buffer
    with pytest.raises(ValueError):
        fastpath.native.encode_records(src, [tuple(bad)], 0, 1, [0], 0, 1 << 40, 0, host, host)
    out, n, sizes, needed = fastpath.native.encode_records(src, [sent], 0, 1, [3], 100, 1 << 40, 7, host, host)
    assert n == 1 and needed == 0 and len(out) == sizes[0]
    check_records(src, [sent])


def test_encode_records_stops_where_the_file_ends():
    frame = frame_of(send_v2(body=b"y" * 100))
    (sent,), _ = scan(frame)
    host = record.encode_host(("127.0.0.1", 1))
    size = fastpath.native.encode_records(bytearray(frame), [sent], 0, 1, [0], 0, 1 << 40, 0, host, host)[2][0]
    # room for two records and the 8-byte end-of-file blank, not three
    out, n, sizes, needed = fastpath.native.encode_records(
        bytearray(frame), [sent] * 3, 0, 3, [0, 1, 2], 0, 2 * size + 8, 0, host, host
    )
    assert (n, needed, sizes) == (2, size, [size, size])
    out, n, _, needed = fastpath.native.encode_records(
        bytearray(frame), [sent] * 3, 0, 3, [0, 1, 2], 0, 2 * size + 7, 0, host, host
    )
    assert (n, needed) == (1, size)
