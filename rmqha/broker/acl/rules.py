"""ACL as RocketMQ 4.9's PlainAccessValidator has it (aclEnable, plain_acl.yml), IO-free.

A request is checked before any processor sees it, in 4.9's order:
  1. the sender's address is in globalWhiteRemoteAddresses: served, unsigned;
  2. it carries no AccessKey ext field: "No accessKey is configured";
  3. no account has that key: "No acl config for <key>";
  4. the sender's address matches that account's whiteRemoteAddress: served, unsigned;
  5. the Signature ext field is not Base64(HmacSHA1(content, secretKey)), where content is the values of
     every other ext field in key order (the client's signing hook sorts them the same way), then the
     body: "Check signature failed for accessKey=<key>";
  6. the request code is an admin one (create/update topic, update broker config, delete topic,
     create/update or delete a subscription group; here also the ACL admin requests 50-53, which
     4.9.8 does not guard) and the account is not admin: "Need admin
     permission for request code=<code>, but accessKey=<key> is not";
  7. a request that needs exactly PUB on RMQ_SYS_TRACE_TOPIC (a traced client's trace records) is
     served without a perm check, as 4.9.8 skips it (only that name: a named msgTraceTopicName needs PUB);
  8. each resource the request touches (topics; groups as their %RETRY% topic, as 4.9 keys them) needs
     PUB or SUB: the account's own perm for it, else its defaultTopicPerm / defaultGroupPerm (DENY when
     unset); an admin account with no perms of its own may do anything: "No default permission for
     topic:<T>" or "group:<G>" (4.9 says "default" whether the perm was the account's own or not).
A refusal is answered as 4.9's remoting layer answers an RPC hook's exception (exceptionSimpleDesc):
SYSTEM_ERROR with "org.apache.rocketmq.acl.common.AclException: <reason>, <first stack frame>", the frame
being the 4.9.8 source line that throws that reason (AclError.frame), so a client matching 4.9's text
matches ours.

plain_acl.yml:
    globalWhiteRemoteAddresses: ["10.10.103.*", "192.168.0.*"]
    accounts:
      - accessKey: RocketMQ
        secretKey: "12345678"
        whiteRemoteAddress:
        admin: false
        defaultTopicPerm: DENY
        defaultGroupPerm: SUB
        topicPerms: ["topicA=DENY", "topicB=PUB|SUB", "topicC=SUB"]
        groupPerms: ["groupA=DENY", "groupB=PUB|SUB", "groupC=SUB"]
Address patterns: "*" (any), an exact IPv4 or IPv6 address, "a.b.c.*" (any in a segment), "a.b.c.1-100"
(a range), "a.b.c.{1,2,3}" (a list in the last segment), several patterns comma-separated.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import re
from dataclasses import dataclass, field

from rmqha.broker.config.properties import ConfigError
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.support.validation import signature_matches

DENY, ANY, PUB, SUB = 1, 2, 4, 8
RETRY_PREFIX = "%RETRY%"
ACCESS_KEY, SIGNATURE, SECURITY_TOKEN = "AccessKey", "Signature", "SecurityToken"
UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"  # not signed by 4.9's clients (MixAll.UNIQUE_MSG_QUERY_FLAG)
EXCEPTION = "org.apache.rocketmq.acl.common.AclException"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"  # 4.9's TopicValidator.RMQ_SYS_TRACE_TOPIC
# Where 4.9.8 throws each reason: the first stack frame its remark ends with.
_PPM = "org.apache.rocketmq.acl.plain.PlainPermissionManager"
FRAME_NO_KEY = f"{_PPM}.validate(PlainPermissionManager.java:664)"
FRAME_NO_ACCOUNT = f"{_PPM}.validate(PlainPermissionManager.java:668)"
FRAME_SIGNATURE = f"{_PPM}.validate(PlainPermissionManager.java:684)"
FRAME_ADMIN = f"{_PPM}.checkPerm(PlainPermissionManager.java:581)"
FRAME_DEFAULT_PERM = f"{_PPM}.checkPerm(PlainPermissionManager.java:606)"
FRAME_OWN_PERM = f"{_PPM}.checkPerm(PlainPermissionManager.java:611)"
FRAME_PARSE = "org.apache.rocketmq.acl.plain.PlainAccessValidator.parse(PlainAccessValidator.java:134)"

# 4.9.8's Permission.ADMIN_CODE, and the ACL admin requests (50-53), which 4.9.8 leaves to any signed
# account: there a non-admin key can make itself admin or rewrite the white list.
ADMIN_CODES = frozenset(
    {
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        RequestCode.UPDATE_BROKER_CONFIG,
        RequestCode.DELETE_TOPIC_IN_BROKER,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        RequestCode.DELETE_SUBSCRIPTIONGROUP,
        RequestCode.UPDATE_AND_CREATE_ACL_CONFIG,
        RequestCode.DELETE_ACL_CONFIG,
        RequestCode.GET_BROKER_CLUSTER_ACL_INFO,
        RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
    }
)
ACCOUNT_KEYS = frozenset(
    {
        "accessKey",
        "secretKey",
        "whiteRemoteAddress",
        "admin",
        "defaultTopicPerm",
        "defaultGroupPerm",
        "topicPerms",
        "groupPerms",
    }
)
MAX_ACCOUNTS = 10_000


class AclError(Exception):
    """A request the ACL refuses; str() is 4.9's reason, frame where 4.9.8 throws it."""

    def __init__(self, reason: str, frame: str):
        super().__init__(reason)
        self.frame = frame


class AclConfigError(ConfigError):
    """plain_acl.yml is not what 4.9 reads: what is wrong, and where."""


def parse_perm(text) -> int:
    """4.9's Permission.parsePermFromString: anything else (unset included) is DENY."""
    t = str(text).strip().upper() if text is not None else ""
    return {"PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB}.get(t, DENY)


def check_perm(needed: int, owned: int) -> bool:
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


def signature(content: bytes, secret_key: str) -> str:
    return base64.b64encode(hmac.new(secret_key.encode("utf-8"), content, hashlib.sha1).digest()).decode()


def request_content(ext_fields: dict, body: bytes | None) -> bytes:
    """What is signed: the ext fields' values in key order (Signature and the unique-key flag left out),
    then the body."""
    text = "".join(str(ext_fields[k]) for k in sorted(ext_fields) if k not in (SIGNATURE, UNIQUE_MSG_QUERY_FLAG))
    # "replace": a lone surrogate (a JSON header may carry "\ud800") becomes "?", as Java's
    # String.getBytes(UTF-8) makes it, instead of raising
    return text.encode("utf-8", "replace") + (body or b"")


def sign(ext_fields: dict, body: bytes | None, access_key: str, secret_key: str) -> dict:
    """The ext fields a client's signing hook sends (for tests and our own tools)."""
    out = {k: str(v) for k, v in ext_fields.items()}
    out[ACCESS_KEY] = access_key
    out[SIGNATURE] = signature(request_content(out, body), secret_key)
    return out


def sign_request(cmd, access_key: str, secret_key: str):
    """cmd (a RemotingCommand) signed in place, as a client's signing hook would; returns it."""
    cmd.ext_fields = sign(cmd.ext_fields, cmd.body, access_key, secret_key)
    return cmd


# -- addresses -------------------------------------------------------------------------------------

_SEGMENT = re.compile(r"\*|\d{1,3}|\d{1,3}-\d{1,3}|\{\d{1,3}(,\d{1,3})*\}\Z")


class AddressMatcher:
    """One whiteRemoteAddress / globalWhiteRemoteAddresses entry (comma-separated patterns)."""

    def __init__(self, text: str):
        self.text = text
        self._any = False
        self._exact: set[str] = set()
        self._ipv4: list[list[set[int] | None]] = []
        for part in _split_patterns(text):
            if part in ("*", "*.*.*.*"):
                self._any = True
                continue
            try:
                self._exact.add(str(ipaddress.ip_address(part)))
                continue
            except ValueError:
                pass
            segs = part.split(".")
            if len(segs) != 4 or not all(_SEGMENT.match(s) for s in segs):
                raise AclConfigError(
                    f"address pattern {part!r}: expected *, an IP address, a.b.c.*, a.b.c.1-100 or a.b.c.{{1,2}}"
                )
            self._ipv4.append([_segment(s, part) for s in segs])

    def match(self, ip: str) -> bool:
        if self._any:
            return True
        if ip in self._exact:
            return True
        parts = ip.split(".")
        if len(parts) != 4 or not all(p.isdigit() for p in parts):
            return False
        nums = [int(p) for p in parts]
        return any(all(s is None or n in s for s, n in zip(p, nums)) for p in self._ipv4)


def _split_patterns(text: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "{"
        depth -= ch == "}"
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    out.append(cur.strip())
    return [p for p in out if p]


def _segment(s: str, part: str) -> set[int] | None:
    if s == "*":
        return None
    if s.startswith("{"):
        vals = {int(x) for x in s[1:-1].split(",")}
    elif "-" in s:
        lo, hi = (int(x) for x in s.split("-"))
        if lo > hi:
            raise AclConfigError(f"address pattern {part!r}: range {s} is empty")
        vals = set(range(lo, hi + 1))
    else:
        vals = {int(s)}
    if any(v > 255 for v in vals):
        raise AclConfigError(f"address pattern {part!r}: {s} is not a byte")
    return vals


# -- the configuration -----------------------------------------------------------------------------


@dataclass
class Account:
    access_key: str
    secret_key: str
    white: AddressMatcher | None = None
    admin: bool = False
    default_topic_perm: int = DENY
    default_group_perm: int = DENY
    perms: dict[str, int] = field(default_factory=dict)  # topic, or %RETRY%group -> perm


@dataclass
class AclConfig:
    global_white: list[AddressMatcher] = field(default_factory=list)
    accounts: dict[str, Account] = field(default_factory=dict)

    @classmethod
    def from_yaml(cls, text: str, where: str = "plain_acl.yml") -> "AclConfig":
        import yaml

        try:
            doc = yaml.safe_load(text) or {}
        except yaml.YAMLError as e:
            raise AclConfigError(f"{where} is not valid YAML: {e}") from None
        return cls.from_dict(doc, where)

    @classmethod
    def from_dict(cls, doc, where: str = "plain_acl.yml") -> "AclConfig":
        if not isinstance(doc, dict):
            raise AclConfigError(f"{where}: expected a mapping with globalWhiteRemoteAddresses and accounts")
        unknown = set(doc) - {"globalWhiteRemoteAddresses", "accounts", "dataVersion"}
        if unknown:
            raise AclConfigError(
                f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}; known: "
                "globalWhiteRemoteAddresses, accounts"
            )
        cfg = cls()
        for a in _list(doc.get("globalWhiteRemoteAddresses"), f"{where}: globalWhiteRemoteAddresses"):
            cfg.global_white.append(AddressMatcher(str(a)))
        accounts = _list(doc.get("accounts"), f"{where}: accounts")
        if len(accounts) > MAX_ACCOUNTS:
            raise AclConfigError(f"{where}: {len(accounts)} accounts; at most {MAX_ACCOUNTS}")
        for i, a in enumerate(accounts):
            what = f"{where}: accounts[{i}]"
            if not isinstance(a, dict):
                raise AclConfigError(f"{what} is not a mapping")
            bad = set(a) - ACCOUNT_KEYS
            if bad:
                raise AclConfigError(
                    f"{what}: unknown key(s) {', '.join(sorted(map(str, bad)))}; known: "
                    f"{', '.join(sorted(ACCOUNT_KEYS))}"
                )
            ak, sk = a.get("accessKey"), a.get("secretKey")
            if not ak or not sk:
                raise AclConfigError(f"{what}: accessKey and secretKey are required")
            ak, sk = str(ak), str(sk)
            if len(sk) < 6:  # 4.9 refuses shorter secret keys (AclUtils.checkSecretKey)
                raise AclConfigError(f"{what} ({ak}): secretKey is shorter than 6 characters")
            if ak in cfg.accounts:
                raise AclConfigError(f"{what}: accessKey {ak!r} appears twice")
            acc = Account(
                ak,
                sk,
                admin=bool(a.get("admin")),
                default_topic_perm=parse_perm(a.get("defaultTopicPerm")),
                default_group_perm=parse_perm(a.get("defaultGroupPerm")),
            )
            white = a.get("whiteRemoteAddress")
            if white not in (None, ""):
                acc.white = AddressMatcher(str(white))
            for item in _list(a.get("topicPerms"), f"{what}: topicPerms"):
                name, perm = _perm_item(item, f"{what}: topicPerms")
                acc.perms[name] = perm
            for item in _list(a.get("groupPerms"), f"{what}: groupPerms"):
                name, perm = _perm_item(item, f"{what}: groupPerms")
                acc.perms[RETRY_PREFIX + name] = perm
            cfg.accounts[ak] = acc
        return cfg

    # -- checking a request -----------------------------------------------------------------------
    def validate(self, code: int, ext_fields: dict, body: bytes | None, remote_ip: str) -> None:
        """Raise AclError with 4.9's reason, or return when the request may be served."""
        if any(m.match(remote_ip) for m in self.global_white):
            return
        ak = ext_fields.get(ACCESS_KEY)
        if ak is None:
            raise AclError("No accessKey is configured", FRAME_NO_KEY)
        acc = self.accounts.get(ak)
        if acc is None:
            raise AclError(f"No acl config for {ak}", FRAME_NO_ACCOUNT)
        if acc.white is not None and acc.white.match(remote_ip):
            return
        expected = signature(request_content(ext_fields, body), acc.secret_key)
        if not signature_matches(expected, ext_fields.get(SIGNATURE, "")):
            raise AclError(f"Check signature failed for accessKey={ak}", FRAME_SIGNATURE)
        if code in ADMIN_CODES and not acc.admin:
            raise AclError(f"Need admin permission for request code={code}, but accessKey={ak} is not", FRAME_ADMIN)
        needed = resources(code, ext_fields, body)
        if needed.get(TRACE_TOPIC) == PUB:  # 4.9.8: trace records are not perm-checked
            return
        if not needed or (acc.admin and not acc.perms):
            return
        for resource, perm in needed.items():
            group = resource.startswith(RETRY_PREFIX)
            owned = acc.perms.get(resource)
            if owned is None:
                owned = acc.default_group_perm if group else acc.default_topic_perm
            if not check_perm(perm, owned):
                what = f"group:{resource[len(RETRY_PREFIX) :]}" if group else f"topic:{resource}"
                raise AclError(
                    f"No default permission for {what}", FRAME_OWN_PERM if resource in acc.perms else FRAME_DEFAULT_PERM
                )


def _list(value, what: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise AclConfigError(f"{what}: expected a list")
    return value


def _perm_item(item, what: str) -> tuple[str, int]:
    name, sep, perm = str(item).partition("=")
    if not sep or not name.strip():
        raise AclConfigError(f"{what}: {item!r} is not NAME=PERM (PERM: DENY, PUB, SUB or PUB|SUB)")
    if perm.strip().upper() not in ("DENY", "PUB", "SUB", "PUB|SUB", "SUB|PUB"):
        raise AclConfigError(f"{what}: {item!r}: {perm.strip()!r} is not DENY, PUB, SUB or PUB|SUB")
    return name.strip(), parse_perm(perm)


def resources(code: int, f: dict, body: bytes | None) -> dict[str, int]:
    """The topics and groups (%RETRY%group) a request touches and the perm each needs (4.9's parse)."""
    out: dict[str, int] = {}

    def add(name, perm):
        if name:
            out[str(name)] = out.get(str(name), 0) | perm

    if code == RequestCode.SEND_MESSAGE:
        # A send to a retry topic (a consumer's send-back fallback) needs SUB on the group, not PUB.
        # 4.9 reads the group from a "group" field, which the v1 send header does not have (it has
        # producerGroup): such a send is checked on its signature only, there as here.
        if str(f.get("topic", "")).startswith(RETRY_PREFIX):
            add(_retry(f.get("group")), SUB)
        else:
            add(f.get("topic"), PUB)
    elif code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        # (4.9 leaves batches unchecked; checked here as a V2 send, whose header they share)
        topic = f.get("b", f.get("topic"))
        if str(topic or "").startswith(RETRY_PREFIX):
            add(_retry(f.get("a")), SUB)  # "a" is the producer group
        else:
            add(topic, PUB)
    elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
        add(_retry(f.get("group")), SUB)  # only the group, as 4.9: not the origin topic
    elif code == RequestCode.PULL_MESSAGE:
        add(f.get("topic"), SUB)
        add(_retry(f.get("consumerGroup")), SUB)
    elif code == RequestCode.QUERY_MESSAGE:
        add(f.get("topic"), SUB)
    elif code == RequestCode.HEART_BEAT:
        from rmqha.broker.remoting import json_body

        try:
            data = json_body.loads(body or b"{}")
        except (UnicodeDecodeError, ValueError):
            raise AclError("the HEART_BEAT body is not valid JSON", FRAME_PARSE) from None
        for cd in (data.get("consumerDataSet") or []) if isinstance(data, dict) else []:
            if not isinstance(cd, dict):
                continue
            add(_retry(cd.get("groupName")), SUB)
            for sub in cd.get("subscriptionDataSet") or []:
                if isinstance(sub, dict):
                    add(sub.get("topic"), SUB)
    elif code in (RequestCode.UNREGISTER_CLIENT, RequestCode.GET_CONSUMER_LIST_BY_GROUP):
        add(_retry(f.get("consumerGroup")), SUB)
    elif code == RequestCode.UPDATE_CONSUMER_OFFSET:
        add(_retry(f.get("consumerGroup")), SUB)
        add(f.get("topic"), SUB)
    return out


def _retry(group) -> str | None:
    return RETRY_PREFIX + str(group) if group else None


def refusal(request, error: AclError):
    """The reply 4.9 gives to a refused request: RemotingHelper.exceptionSimpleDesc of the exception."""
    return request.make_response(ResponseCode.SYSTEM_ERROR, f"{EXCEPTION}: {error}, {error.frame}")
