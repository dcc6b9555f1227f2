"""rmqha/broker/acl/rules.py: 4.9's PlainAccessValidator rules, IO-free (the official client against a real broker is
tests/integration/test_acl.py)."""

import pytest

from rmqha.broker.acl import rules as acl
from rmqha.broker.acl.rules import DENY, PUB, SUB, AclConfig, AclConfigError, AclError, AddressMatcher
from rmqha.broker.remoting.codes import RequestCode as R

CFG = {
    "globalWhiteRemoteAddresses": ["10.10.103.*"],
    "accounts": [
        {
            "accessKey": "user",
            "secretKey": "12345678",
            "whiteRemoteAddress": "192.168.1.{1,2}",
            "defaultTopicPerm": "DENY",
            "defaultGroupPerm": "SUB",
            "topicPerms": ["topicA=DENY", "topicB=PUB|SUB", "topicC=SUB"],
            "groupPerms": ["groupA=DENY"],
        },
        {"accessKey": "admin", "secretKey": "87654321", "admin": True},
    ],
}


def check(cfg, code, fields, body=b"", ip="127.0.0.1", ak="user", sk="12345678", signed=True):
    ext = acl.sign(fields, body, ak, sk) if signed else dict(fields)
    cfg.validate(code, ext, body, ip)


@pytest.fixture
def cfg():
    return AclConfig.from_dict(CFG)


def test_perm_strings_and_checks_are_4_9s():
    assert [acl.parse_perm(x) for x in ("PUB", "sub", "PUB|SUB", "SUB|PUB", "DENY", None, "bogus")] == [
        PUB,
        SUB,
        PUB | SUB,
        PUB | SUB,
        DENY,
        DENY,
        DENY,
    ]
    assert acl.check_perm(PUB, PUB | SUB) and not acl.check_perm(PUB, SUB) and not acl.check_perm(SUB, DENY | SUB)
    assert acl.check_perm(acl.ANY, SUB) and not acl.check_perm(acl.ANY, DENY)


def test_the_signature_is_hmac_sha1_of_sorted_values_then_body():
    # Base64(HmacSHA1("ab" + "x" + body, key)) with the fields b=x, a=ab (sorted: a, b), Signature excluded
    content = acl.request_content({"b": "x", "a": "ab", "Signature": "zzz"}, b"BODY")
    assert content == b"abxBODY"
    # (the expected value from openssl: printf abxBODY | openssl dgst -sha1 -hmac 12345678 -binary | base64)
    assert acl.signature(b"abxBODY", "12345678") == "lxBCXoK5tFMn/DUlW9PEYrf5Q14="


@pytest.mark.parametrize(
    "code, fields, ok",
    [
        (R.SEND_MESSAGE, {"topic": "topicB"}, True),
        (R.SEND_MESSAGE, {"topic": "topicC"}, False),  # SUB only
        (R.SEND_MESSAGE, {"topic": "topicA"}, False),  # DENY
        (R.SEND_MESSAGE, {"topic": "other"}, False),  # defaultTopicPerm DENY
        (R.SEND_MESSAGE_V2, {"b": "topicB"}, True),
        (R.PULL_MESSAGE, {"topic": "topicC", "consumerGroup": "g"}, True),  # group by defaultGroupPerm SUB
        (R.PULL_MESSAGE, {"topic": "topicC", "consumerGroup": "groupA"}, False),
        (R.UPDATE_CONSUMER_OFFSET, {"topic": "topicB", "consumerGroup": "g"}, True),
        (R.CONSUMER_SEND_MSG_BACK, {"originTopic": "topicB", "group": "g"}, True),
        (R.GET_MAX_OFFSET, {"topic": "topicA"}, True),  # a code 4.9 maps to no resource: signature only
        (R.UPDATE_AND_CREATE_TOPIC, {"topic": "x"}, False),  # admin only
    ],
)
def test_resources_and_perms(cfg, code, fields, ok):
    if ok:
        check(cfg, code, fields)
    else:
        with pytest.raises(AclError):
            check(cfg, code, fields)


# Where 4.9.8's PlainAccessValidator.parse maps a request differently from "PUB on the topic":
# a send-back needs SUB on the group's retry topic only; a send to a %RETRY% topic needs SUB on the
# sender's group (V2: "a"; v1: a "group" field its header lacks, so nothing); a trace record (PUB on
# RMQ_SYS_TRACE_TOPIC) skips the perm check, a named trace topic does not. The account "consumer" has
# no PUB anywhere, so each True below needs 4.9's mapping.
CONSUMER = {
    "accessKey": "consumer",
    "secretKey": "12345678",
    "defaultTopicPerm": "SUB",
    "defaultGroupPerm": "SUB",
    "topicPerms": ["topicS=SUB", "MyTrace=SUB"],
    "groupPerms": ["groupD=DENY"],
}


@pytest.mark.parametrize(
    "code, fields, ok",
    [
        (R.CONSUMER_SEND_MSG_BACK, {"originTopic": "topicS", "group": "g", "offset": "0"}, True),
        (R.CONSUMER_SEND_MSG_BACK, {"originTopic": "topicS", "group": "groupD", "offset": "0"}, False),
        (R.SEND_MESSAGE_V2, {"a": "g", "b": "%RETRY%g"}, True),
        (R.SEND_MESSAGE_V2, {"a": "groupD", "b": "%RETRY%groupD"}, False),
        (R.SEND_BATCH_MESSAGE, {"a": "g", "b": "%RETRY%g"}, True),
        (R.SEND_MESSAGE, {"producerGroup": "groupD", "topic": "%RETRY%groupD"}, True),  # no "group": unchecked
        (R.SEND_MESSAGE, {"group": "groupD", "topic": "%RETRY%groupD"}, False),
        (R.SEND_MESSAGE, {"group": "g", "topic": "%RETRY%g"}, True),
        (R.SEND_MESSAGE_V2, {"a": "g", "b": "topicS"}, False),  # an ordinary send still needs PUB
        (R.SEND_MESSAGE_V2, {"a": "g", "b": "RMQ_SYS_TRACE_TOPIC"}, True),  # trace records: not checked
        (R.SEND_MESSAGE, {"producerGroup": "g", "topic": "RMQ_SYS_TRACE_TOPIC"}, True),
        (R.SEND_MESSAGE_V2, {"a": "g", "b": "MyTrace"}, False),  # only 4.9's default name skips
    ],
)
def test_send_back_retry_and_trace_sends_map_as_4_9_8(code, fields, ok):
    cfg = AclConfig.from_dict({"accounts": [CONSUMER]})
    if ok:
        check(cfg, code, fields, ak="consumer")
    else:
        with pytest.raises(AclError, match="^No default permission for (topic|group):"):
            check(cfg, code, fields, ak="consumer")


def test_a_denied_trace_topic_is_still_skipped_and_a_bad_signature_is_not():
    # 4.9.8 skips the perm check even when the account DENYs the trace topic, but only after the signature
    cfg = AclConfig.from_dict({"accounts": [dict(CONSUMER, topicPerms=["RMQ_SYS_TRACE_TOPIC=DENY"])]})
    check(cfg, R.SEND_MESSAGE_V2, {"a": "g", "b": "RMQ_SYS_TRACE_TOPIC"}, ak="consumer")
    with pytest.raises(AclError, match="Check signature"):
        check(cfg, R.SEND_MESSAGE_V2, {"a": "g", "b": "RMQ_SYS_TRACE_TOPIC"}, ak="consumer", sk="wrong-key")


def test_heartbeat_needs_sub_on_each_group_and_subscribed_topic(cfg):
    body = b'{"clientID":"c","consumerDataSet":[{"groupName":"g","subscriptionDataSet":[{"topic":"topicA"}]}]}'
    with pytest.raises(AclError, match="^No default permission for topic:topicA$"):
        check(cfg, R.HEART_BEAT, {}, body)
    check(cfg, R.HEART_BEAT, {}, body.replace(b"topicA", b"topicC"))


def test_refusal_order_and_reasons(cfg):
    with pytest.raises(AclError, match="^No accessKey is configured$"):
        check(cfg, R.SEND_MESSAGE, {"topic": "topicB"}, signed=False)
    with pytest.raises(AclError, match="^No acl config for ghost$"):
        check(cfg, R.SEND_MESSAGE, {"topic": "topicB"}, ak="ghost")
    with pytest.raises(AclError, match="^Check signature failed for accessKey=user$"):
        check(cfg, R.SEND_MESSAGE, {"topic": "topicB"}, sk="wrong-key")
    ext = acl.sign({"topic": "topicB"}, b"body", "user", "12345678")
    with pytest.raises(AclError, match="Check signature"):  # the body is signed too
        cfg.validate(R.SEND_MESSAGE, ext, b"other", "127.0.0.1")
    with pytest.raises(AclError, match="^Need admin permission for request code=17, but accessKey=user is not$"):
        check(cfg, R.UPDATE_AND_CREATE_TOPIC, {"topic": "x"})
    check(cfg, R.UPDATE_AND_CREATE_TOPIC, {"topic": "x"}, ak="admin", sk="87654321")  # admin, no perms: anything
    check(cfg, R.SEND_MESSAGE, {"topic": "anything"}, ak="admin", sk="87654321")


@pytest.mark.parametrize(
    "code, fields, ak, sk, remark",
    [
        # 4.9.8: "No default permission for" in both branches (PlainAccessResource.printStr: "topic:T",
        # "group:G"), then RemotingHelper.exceptionSimpleDesc's ", <first stack frame>"
        (
            R.SEND_MESSAGE,
            {"topic": "other"},
            "user",
            "12345678",
            "No default permission for topic:other, org.apache.rocketmq.acl.plain.PlainPermissionManager"
            ".checkPerm(PlainPermissionManager.java:606)",
        ),
        (
            R.SEND_MESSAGE,
            {"topic": "topicA"},
            "user",
            "12345678",
            "No default permission for topic:topicA, org.apache.rocketmq.acl.plain.PlainPermissionManager"
            ".checkPerm(PlainPermissionManager.java:611)",
        ),
        (
            R.PULL_MESSAGE,
            {"topic": "topicC", "consumerGroup": "groupA"},
            "user",
            "12345678",
            "No default permission for group:groupA, org.apache.rocketmq.acl.plain.PlainPermissionManager"
            ".checkPerm(PlainPermissionManager.java:611)",
        ),
        (
            R.SEND_MESSAGE,
            {"topic": "topicB"},
            "user",
            "wrong-key",
            "Check signature failed for accessKey=user, org.apache.rocketmq.acl.plain.PlainPermissionManager"
            ".validate(PlainPermissionManager.java:684)",
        ),
        (
            R.UPDATE_AND_CREATE_TOPIC,
            {"topic": "x"},
            "user",
            "12345678",
            "Need admin permission for request code=17, but accessKey=user is not, "
            "org.apache.rocketmq.acl.plain.PlainPermissionManager.checkPerm(PlainPermissionManager.java:581)",
        ),
    ],
)
def test_the_refusal_remark_is_4_9_8s_text(cfg, code, fields, ak, sk, remark):
    from rmqha.broker.remoting.command import RemotingCommand

    ext = acl.sign(fields, b"", ak, sk)
    with pytest.raises(AclError) as e:
        cfg.validate(code, ext, b"", "127.0.0.1")
    r = acl.refusal(RemotingCommand.request(code, ext), e.value)
    assert r.remark == f"org.apache.rocketmq.acl.common.AclException: {remark}"


def test_white_addresses_skip_the_signature(cfg):
    cfg.validate(R.SEND_MESSAGE, {"topic": "topicA"}, b"", "10.10.103.7")  # global: not even a key needed
    cfg.validate(R.SEND_MESSAGE, {"topic": "topicA", "AccessKey": "user"}, b"", "192.168.1.2")  # the account's
    with pytest.raises(AclError):
        cfg.validate(R.SEND_MESSAGE, {"topic": "topicA", "AccessKey": "user"}, b"", "192.168.1.3")


@pytest.mark.parametrize(
    "pattern, yes, no",
    [
        ("*", ["1.2.3.4", "::1"], []),
        ("192.168.0.*", ["192.168.0.9"], ["192.168.1.9"]),
        ("192.168.1.1-10", ["192.168.1.1", "192.168.1.10"], ["192.168.1.11"]),
        ("192.168.1.{3,5}", ["192.168.1.5"], ["192.168.1.4"]),
        ("10.0.0.1,10.0.0.2", ["10.0.0.2"], ["10.0.0.3"]),
        ("::1", ["::1"], ["127.0.0.1"]),
    ],
)
def test_address_patterns(pattern, yes, no):
    m = AddressMatcher(pattern)
    assert all(m.match(ip) for ip in yes) and not any(m.match(ip) for ip in no)


@pytest.mark.parametrize(
    "doc, why",
    [
        ({"accounts": [{"accessKey": "a"}]}, "accessKey and secretKey are required"),
        ({"accounts": [{"accessKey": "a", "secretKey": "12345"}]}, "shorter than 6"),
        ({"accounts": [{"accessKey": "a", "secretKey": "123456", "admn": True}]}, "unknown key.*admn"),
        ({"acounts": []}, "unknown key.*acounts"),
        ({"accounts": [{"accessKey": "a", "secretKey": "123456", "topicPerms": ["t=RW"]}]}, "is not DENY, PUB"),
        ({"globalWhiteRemoteAddresses": ["300.1.1.1"]}, "not a byte"),
        (
            {"accounts": [{"accessKey": "a", "secretKey": "123456"}, {"accessKey": "a", "secretKey": "123456"}]},
            "appears twice",
        ),
    ],
)
def test_a_bad_file_is_refused_naming_what_is_wrong(doc, why):
    with pytest.raises(AclConfigError, match=why):
        AclConfig.from_dict(doc)


def test_yaml_errors_are_config_errors():
    with pytest.raises(AclConfigError, match="not valid YAML"):
        AclConfig.from_yaml("accounts: [ broken")
    assert AclConfig.from_yaml("").accounts == {}


@pytest.mark.parametrize("sig", ["é", "签名", "\udc80", "lxBCXoK5tFMn/DUlW9PEYrf5Q14=\u00a0"])
def test_a_signature_that_is_not_ascii_is_4_9s_signature_refusal(cfg, sig):
    # hmac.compare_digest raises TypeError on a str that is not ASCII: the request was once dropped with
    # an unhandled error instead of being answered as 4.9 answers any wrong signature.
    ext = acl.sign({"topic": "topicB"}, b"", "user", "12345678")
    ext["Signature"] = sig
    with pytest.raises(AclError, match="^Check signature failed for accessKey=user$") as e:
        cfg.validate(R.SEND_MESSAGE, ext, b"", "127.0.0.1")
    assert e.value.frame == acl.FRAME_SIGNATURE


def test_a_lone_surrogate_in_a_signed_field_is_signed_as_java_encodes_it(cfg):
    # A JSON header may carry "\ud800" (a lone surrogate); Java's String.getBytes(UTF-8) makes it "?",
    # so the content signed is the same as with "?" there, and nothing raises.
    assert acl.request_content({"topic": "a\ud800b"}, b"") == b"a?b"
    ext = acl.sign({"topic": "topicB", "k": "x\ud800"}, b"", "user", "12345678")
    cfg.validate(R.SEND_MESSAGE, ext, b"", "127.0.0.1")


def test_a_non_ascii_signature_over_the_wire_is_answered_and_the_connection_kept(tmp_path):
    """Through the broker's remoting layer: 4.9's refusal comes back, nothing is logged as unhandled,
    and the same connection serves the next (well signed) request."""
    import yaml
    from twisted.internet.address import IPv4Address
    from twisted.internet.task import Clock
    from twisted.internet.testing import StringTransport

    from rmqha.broker.acl.service import AclService
    from rmqha.broker.remoting.codec import FrameDecoder, encode
    from rmqha.broker.remoting.codes import ResponseCode
    from rmqha.broker.remoting.command import RemotingCommand
    from rmqha.broker.remoting.protocol import ProcessorRegistry, RemotingProtocol

    path = tmp_path / "plain_acl.yml"
    path.write_text(yaml.safe_dump(CFG))
    service = AclService(str(path), Clock())
    reg = ProcessorRegistry()
    reg.register(R.SEND_MESSAGE, lambda r, ctx: r.make_response(remark="served"))
    reg.acl = service.check
    proto = RemotingProtocol(reg, clock=Clock())
    transport = StringTransport(peerAddress=IPv4Address("TCP", "127.0.0.1", 40000))
    proto.makeConnection(transport)
    bad = acl.sign({"topic": "topicB"}, b"", "user", "12345678")
    bad["Signature"] = "签名"
    proto.dataReceived(encode(RemotingCommand.request(R.SEND_MESSAGE, bad, opaque=1)))
    good = acl.sign({"topic": "topicB"}, b"", "user", "12345678")
    proto.dataReceived(encode(RemotingCommand.request(R.SEND_MESSAGE, good, opaque=2)))
    first, second = FrameDecoder().feed(transport.value())
    assert first.opaque == 1 and first.code == ResponseCode.SYSTEM_ERROR
    assert first.remark == f"{acl.EXCEPTION}: Check signature failed for accessKey=user, {acl.FRAME_SIGNATURE}"
    assert second.opaque == 2 and second.code == ResponseCode.SUCCESS and second.remark == "served"
    assert not transport.disconnecting and service.refused == 1
