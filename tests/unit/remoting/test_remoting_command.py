import pytest

from rmqha.broker.remoting import json_body
from rmqha.broker.remoting.codes import FLAG_ONEWAY, ResponseCode
from rmqha.broker.remoting.command import HeaderFieldError, RemotingCommand


def cmd(**ext) -> RemotingCommand:
    return RemotingCommand.request(10, ext)


def test_request_stringifies_and_drops_none():
    c = RemotingCommand.request(105, {"topic": "T", "n": 3, "b": False, "skip": None})
    assert c.ext_fields == {"topic": "T", "n": "3", "b": "false"}


def test_flags():
    c = RemotingCommand(code=1, flag=FLAG_ONEWAY)
    assert c.is_oneway and not c.is_response
    r = c.make_response()
    assert r.is_response and not r.is_oneway and r.code == ResponseCode.SUCCESS


def test_int_and_long_parse_the_java_way():
    c = cmd(a="42", b="-7", c="+3", d=" 4", e="4_0", f="2147483648", g="9223372036854775807", h="")
    assert c.get_int("a") == 42 and c.get_int("b") == -7 and c.get_int("c") == 3
    for bad in ("d", "e", "f", "h"):
        with pytest.raises(HeaderFieldError):
            c.get_int(bad)
    assert c.get_long("f") == 2147483648
    assert c.get_long("g") == 2**63 - 1


def test_missing_field():
    c = cmd()
    with pytest.raises(HeaderFieldError, match="<topic> is null"):
        c.get_str("topic")
    assert c.get_int("queueId", -1) == -1
    assert c.get_bool("order", False) is False
    assert c.get_str("x", None) is None


def test_java_boolean_only_true_is_true():
    c = cmd(a="true", b="TRUE", c="1", d="0", e="yes", f="false")
    assert [c.get_bool(k) for k in "abcdef"] == [True, True, False, False, False, False]


def test_lenient_boolean_takes_cpp_one():
    c = cmd(a="true", b="1", c="0", d="false", e="")
    assert [c.get_lenient_bool(k) for k in "abcde"] == [True, True, False, False, False]


def test_repr_does_not_dump_body():
    assert "1000000B" in repr(RemotingCommand(code=1, body=b"x" * 1000000))


def test_json_body_quotes_fastjson_integer_keys():
    text = '{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},"s":"{3:4}","t":{"a@b":{ -1 :5,7:8}}}'
    assert json_body.loads(text.encode()) == {
        "brokerAddrs": {"0": "10.0.0.1:10911", "1": "10.0.0.2:10911"},
        "s": "{3:4}",
        "t": {"a@b": {"-1": 5, "7": 8}},
    }


def test_json_body_string_with_escaped_quote_untouched():
    text = '{"a":"x\\",1:\\"y",2:[1,2]}'
    assert json_body.loads(text) == {"a": 'x",1:"y', "2": [1, 2]}


def test_json_body_dumps_sorted_compact():
    assert json_body.dumps({"b": 1, "a": {"0": "x"}}) == b'{"a":{"0":"x"},"b":1}'


@pytest.mark.parametrize(
    "text",
    [
        # Found by `make fuzz` (register_body, through json_body.loads): nesting within json.loads's limit
        # but with a lone surrogate somewhere: scrubbing the surrogates recursed past the limit and
        # RecursionError escaped, where loads() promises ValueError for JSON nested too deeply.
        "[" * 600 + '"G\\ud800"' + "]" * 600,
        '{"a":' * 600 + '"\\udfff"' + "}" * 600,
        "[" * 5000 + "]" * 5000,
    ],
)
def test_json_body_loads_raises_value_error_for_deep_nesting(text):
    # (this test used to pass when nothing was raised at all: issue 27)
    with pytest.raises(ValueError, match="JSON nested too deeply"):
        json_body.loads(text)


def test_json_body_loads_scrubs_a_surrogate_within_the_nesting_limit():
    got = json_body.loads("[" * 50 + '"G\\ud800"' + "]" * 50)
    for _ in range(50):
        assert isinstance(got, list) and len(got) == 1
        got = got[0]
    assert got == "G?"
