import json
import struct

import pytest

from rmqha.broker.remoting.codec import FrameDecoder, FrameError, decode, decode_frame, encode
from rmqha.broker.remoting.codes import FLAG_RESPONSE, RequestCode, ResponseCode, SerializeType
from rmqha.broker.remoting.command import RemotingCommand

# docs/formats.md §1.6: what the C++ 2.x client sends for GET_ROUTEINFO_BY_TOPIC "TopicTest", opaque 1.
CPP_ROUTE_HEADER = (
    b'{"code":105,"extFields":{"AccessKey":"","OnsChannel":"","Signature":"","topic":"TopicTest"},'
    b'"flag":0,"language":"CPP","opaque":1,"remark":"","version":333}\n'
)


def frame(header: bytes, body: bytes = b"", type_byte: int = 0) -> bytes:
    return struct.pack(">II", 4 + len(header) + len(body), (type_byte << 24) | len(header)) + header + body


def sample(serialize_type=SerializeType.JSON, **kw) -> RemotingCommand:
    args = dict(
        code=RequestCode.SEND_MESSAGE_V2,
        language="CPP",
        version=333,
        opaque=77,
        flag=0,
        remark="hé",
        ext_fields={"a": "group", "b": "Topic", "i": "KEYS\x01k\x02", "empty": ""},
        body=b"\x00\x01payload\xff",
        serialize_type=serialize_type,
    )
    args.update(kw)
    return RemotingCommand(**args)


# ---- the C++ worked example ---------------------------------------------------------------------


def test_cpp_route_request_worked_example():
    assert len(CPP_ROUTE_HEADER) == 156
    data = frame(CPP_ROUTE_HEADER)
    assert data[:8] == bytes.fromhex("000000A00000009C")
    cmd = decode(data)
    assert cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC
    assert cmd.language == "CPP"
    assert cmd.version == 333
    assert cmd.opaque == 1
    assert cmd.flag == 0
    assert cmd.remark == ""
    assert cmd.ext_fields == {"AccessKey": "", "OnsChannel": "", "Signature": "", "topic": "TopicTest"}
    assert cmd.body == b""
    assert cmd.serialize_type == SerializeType.JSON
    assert not cmd.is_response and not cmd.is_oneway


def test_cpp_mixed_ext_field_types_become_java_strings():
    header = (
        json.dumps(
            {
                "code": 310,
                "flag": 0,
                "language": "CPP",
                "opaque": 5,
                "remark": "",
                "version": 333,
                "extFields": {
                    "a": "g",
                    "d": 4,
                    "e": 0,
                    "f": -1,
                    "g": "1700000000000",
                    "k": "0",
                    "big": 12345678901234,
                    "t": True,
                    "n": None,
                    "x": 1.5,
                },
            }
        ).encode()
        + b"\n"
    )
    cmd = decode(frame(header))
    assert cmd.ext_fields == {
        "a": "g",
        "d": "4",
        "e": "0",
        "f": "-1",
        "g": "1700000000000",
        "k": "0",
        "big": "12345678901234",
        "t": "true",
        "x": "1.5",
    }
    assert cmd.get_int("d") == 4
    assert cmd.get_long("g") == 1700000000000


def test_escaped_control_characters_in_header():
    header = (
        b'{"code":310,"extFields":{"i":"TAGS\\u0001t\\u0002"},"flag":0,"language":"CPP","opaque":1,"version":333}\n'
    )
    assert decode(frame(header)).ext_fields["i"] == "TAGS\x01t\x02"


# ---- round trips --------------------------------------------------------------------------------


@pytest.mark.parametrize("stype", [SerializeType.JSON, SerializeType.ROCKETMQ])
def test_round_trip(stype):
    cmd = sample(stype)
    assert decode(encode(cmd)) == cmd


@pytest.mark.parametrize("stype", [SerializeType.JSON, SerializeType.ROCKETMQ])
def test_round_trip_minimal(stype):
    cmd = RemotingCommand(code=0, flag=FLAG_RESPONSE, opaque=2**31 - 1, serialize_type=stype)
    assert decode(encode(cmd)) == cmd


def test_binary_header_negative_code_and_empty_remark():
    cmd = sample(SerializeType.ROCKETMQ, code=-1, remark="")
    back = decode(encode(cmd))
    assert back.code == -1
    assert back.remark is None  # length 0 means null in the ROCKETMQ format


def test_json_encoding_is_compact_sorted_strings_only():
    cmd = RemotingCommand(
        code=0,
        flag=FLAG_RESPONSE,
        opaque=9,
        language="JAVA",
        version=409,
        ext_fields={"queueOffset": 12, "queueId": 3, "msgId": "AB", "flag": True},
    )
    data = encode(cmd)
    (length, word) = struct.unpack(">II", data[:8])
    assert word >> 24 == 0
    header = data[8 : 8 + word]
    assert header == (
        b'{"code":0,"extFields":{"flag":"true","msgId":"AB","queueId":"3","queueOffset":"12"},'
        b'"flag":1,"language":"JAVA","opaque":9,"serializeTypeCurrentRPC":"JSON","version":409}'
    )
    assert length == len(data) - 4


def test_json_encoding_leaves_out_null_remark_and_empty_ext():
    header = encode(RemotingCommand(code=17, opaque=1))[8:]
    obj = json.loads(header)
    assert "remark" not in obj and "extFields" not in obj


def test_binary_type_byte():
    data = encode(sample(SerializeType.ROCKETMQ))
    assert data[4] == 1


def test_response_keeps_request_type_and_opaque():
    req = sample(SerializeType.ROCKETMQ)
    resp = req.make_response(ResponseCode.TOPIC_NOT_EXIST, "no topic", {"x": 1})
    assert resp.opaque == 77 and resp.flag == FLAG_RESPONSE
    assert resp.serialize_type == SerializeType.ROCKETMQ
    assert resp.ext_fields == {"x": "1"}
    assert decode(encode(resp)) == resp


def test_large_body():
    cmd = sample(body=bytes(range(256)) * 4096)
    assert decode(encode(cmd)).body == cmd.body


# ---- stream framing -----------------------------------------------------------------------------


def test_split_at_every_byte_boundary():
    stream = encode(sample()) + frame(CPP_ROUTE_HEADER) + encode(sample(SerializeType.ROCKETMQ, opaque=3))
    for cut in range(len(stream) + 1):
        dec = FrameDecoder()
        got = list(dec.feed(stream[:cut])) + list(dec.feed(stream[cut:]))
        assert [c.opaque for c in got] == [77, 1, 3], cut
        assert dec.buffered == 0


def test_byte_by_byte():
    stream = encode(sample()) * 3
    dec = FrameDecoder()
    got = []
    for i in range(len(stream)):
        got += dec.feed(stream[i : i + 1])
    assert got == [sample()] * 3


def test_coalesced_frames_in_one_feed():
    frames = [encode(sample(opaque=i)) for i in range(50)]
    got = list(FrameDecoder().feed(b"".join(frames)))
    assert [c.opaque for c in got] == list(range(50))


def test_partial_frame_stays_buffered():
    data = encode(sample())
    dec = FrameDecoder()
    assert list(dec.feed(data[:-1])) == []
    assert dec.buffered == len(data) - 1
    assert len(list(dec.feed(data[-1:]))) == 1


# ---- malformed frames ---------------------------------------------------------------------------


def feed_all(data: bytes, **kw):
    return list(FrameDecoder(**kw).feed(data))


@pytest.mark.parametrize("length", [0, 1, 3])
def test_length_less_than_4(length):
    with pytest.raises(FrameError, match="less than 4"):
        feed_all(struct.pack(">I", length) + b"\x00" * length)


def test_header_length_beyond_frame():
    with pytest.raises(FrameError, match="header length 10 exceeds"):
        feed_all(struct.pack(">II", 8, 10) + b"{}{}")


def test_header_not_json():
    with pytest.raises(FrameError, match="not valid JSON"):
        feed_all(frame(b"{code:1"))


def test_header_not_utf8():
    with pytest.raises(FrameError, match="not valid JSON"):
        feed_all(frame(b'{"code":1,"remark":"\xff"}'))


@pytest.mark.parametrize("header", [b"[1,2]", b'"code"', b"7"])
def test_header_not_object(header):
    with pytest.raises(FrameError, match="not an object"):
        feed_all(frame(header))


def test_header_without_code():
    with pytest.raises(FrameError, match="no code"):
        feed_all(frame(b'{"opaque":1}'))


def test_ext_fields_not_object():
    with pytest.raises(FrameError, match="extFields"):
        feed_all(frame(b'{"code":1,"extFields":[1]}'))


def test_unknown_serialize_type():
    with pytest.raises(FrameError, match="serialize type 7"):
        feed_all(frame(b'{"code":1}', type_byte=7))


@pytest.mark.parametrize("cut", [0, 5, 12, 16, 17, 20, 22])
def test_binary_header_truncated(cut):
    full = encode(RemotingCommand(code=1, remark="abc", ext_fields={"k": "v"}, serialize_type=SerializeType.ROCKETMQ))
    header = full[8:]
    with pytest.raises(FrameError, match="binary header truncated"):
        feed_all(frame(header[:cut], type_byte=1))


def test_binary_header_negative_length():
    header = struct.pack(">hBhiii", 1, 0, 0, 0, 0, -5)
    with pytest.raises(FrameError, match="truncated"):
        decode_frame(struct.pack(">I", (1 << 24) | len(header)) + header)


def test_oversize_length_rejected_before_body_arrives():
    dec = FrameDecoder(max_frame_length=1024)
    with pytest.raises(FrameError, match="exceeds the maximum frame size 1024"):
        list(dec.feed(struct.pack(">I", 1021)))


def test_default_max_is_16_mib():
    ok = struct.pack(">I", 16 * 1024 * 1024 - 4)
    assert list(FrameDecoder().feed(ok)) == []  # waits for the rest
    with pytest.raises(FrameError, match="exceeds"):
        list(FrameDecoder().feed(struct.pack(">I", 16 * 1024 * 1024 - 3)))


def test_good_frames_before_a_bad_one_are_delivered_and_error_sticks():
    dec = FrameDecoder()
    it = dec.feed(encode(sample()) + struct.pack(">I", 2) + b"\x00\x00" + encode(sample()))
    assert next(it) == sample()
    with pytest.raises(FrameError):
        next(it)
    with pytest.raises(FrameError):
        list(dec.feed(encode(sample())))


@pytest.mark.parametrize(
    "header",
    [
        # Found by `make fuzz` (json_header): a lone surrogate escape decodes to a str that encode() could
        # not turn into UTF-8 (UnicodeEncodeError when the reply or a forwarded request was encoded).
        b'{"code":34,"opaque":5,"flag":0,"language":"G\\ud800"}',
        b'{"code":34,"opaque":5,"flag":0,"remark":"\\udc00x"}',
        b'{"code":34,"opaque":5,"flag":0,"extFields":{"consumerGroup":"G\\ud800","k\\udfff":"v"}}',
    ],
)
@pytest.mark.parametrize("serialize_type", [SerializeType.JSON, SerializeType.ROCKETMQ])
def test_lone_surrogates_in_a_json_header_survive_re_encoding(header, serialize_type):
    cmd = decode(frame(header))
    cmd.serialize_type = serialize_type
    back = decode(encode(cmd))
    assert (back.code, back.opaque, back.flag) == (34, 5, 0)
    assert back.ext_fields == cmd.ext_fields


@pytest.mark.parametrize(
    "header",
    [
        # Found by `make fuzz` (json_header): nesting past the interpreter's recursion limit raised
        # RecursionError out of decode_frame instead of FrameError.
        b'{"code":10,"extFields":{"a":' + b"[" * 5000 + b"]" * 5000 + b"}}",
        b'{"code":10,"version":' + b'{"a":' * 5000 + b"0" + b"}" * 5000 + b"}",
        b"[" * 100_000,
    ],
)
def test_deeply_nested_json_header_is_a_frame_error(header):
    with pytest.raises(FrameError):
        decode_frame(frame(header)[4:])
    with pytest.raises(FrameError):
        list(FrameDecoder().feed(frame(header)))
