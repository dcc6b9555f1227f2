"""What the name server accepts from a peer, and from whom: limits in bytes and in work, validation of
everything it stores, and (ours, opt-in) signed registration.

A 4.9 name server serves anyone who can open a TCP connection: any peer may register a broker (and so
point a slave that takes its master's address from the name server at a fake master), unregister one,
or write KV config (which goes into every REGISTER_BROKER reply). Here, with a cluster secret set
(`--cluster-secret-file`, and the brokers' `clusterSecretFile`), REGISTER_BROKER, UNREGISTER_BROKER,
PUT_KV_CONFIG, DELETE_KV_CONFIG, DELETE_TOPIC_IN_NAMESRV, WIPE_WRITE_PERM_OF_BROKER,
ADD_WRITE_PERM_OF_BROKER and UPDATE_NAMESRV_CONFIG (every request that changes routes or config) must be
signed with it, as the ACL signs client requests (rmqha/broker/acl.py: HmacSHA1 over the sorted ext fields and
the body, AccessKey CLUSTER_KEY; mqadmin signs so with accessKey rmqha-cluster and the secret as
secretKey). Reads stay open, as in 4.9. Without a secret the name server behaves as 4.9's, within the
limits below.
"""
from __future__ import annotations

import hmac
import ipaddress

from rmqha.broker import validation
from rmqha.broker.acl import ACCESS_KEY, SIGNATURE, AclError, request_content, sign, signature
from rmqha.broker.errors import BadRequest
from rmqha.broker.namesrv import route_info
from rmqha.broker.remoting.codes import RequestCode

CLUSTER_KEY = "rmqha-cluster"  # the AccessKey of signed cluster requests
SIGNED_CODES = frozenset({RequestCode.REGISTER_BROKER, RequestCode.UNREGISTER_BROKER, RequestCode.PUT_KV_CONFIG,
                          RequestCode.DELETE_KV_CONFIG, RequestCode.DELETE_TOPIC_IN_NAMESRV,
                          RequestCode.WIPE_WRITE_PERM_OF_BROKER, RequestCode.ADD_WRITE_PERM_OF_BROKER,
                          RequestCode.UPDATE_NAMESRV_CONFIG})

MAX_TOPICS_PER_BROKER = 65_536      # topic configs one registration may carry
MAX_BROKERS = 1024                  # broker addresses the name server keeps alive at once
MAX_BROKER_ID = 1024
NAME_MAX_BYTES = 127                # cluster and broker names
# Filter-server addresses one registration may carry. A 4.9 broker reports one per filter-server process
# it starts (filterServerNums, default 0; the filtersrv module left the distribution in 4.3), so real
# brokers send none or a few. Each address goes into every route of the broker's topics: 16,000 of 1 KB
# from three fake brokers once made a route reply of 48 MB, past the 16 MiB frame.
MAX_FILTER_SERVERS = 8
MAX_QUEUE_NUMS = 1024               # read/write queue numbers of a topic config (the broker's own bound)
MAX_PERM = 7                        # PERM_PRIORITY | PERM_READ | PERM_WRITE (PERM_INHERIT is 1)
MAX_TOPIC_ROUTES = route_info.MAX_TOPIC_ROUTES  # --max-topic-routes


class Unsigned(BadRequest):
    """A request that must be signed with the cluster secret and is not (or is signed wrong)."""


def check_signed(code: int, ext_fields: dict, body: bytes | None, secret: str | None) -> None:
    if secret is None or code not in SIGNED_CODES:
        return
    if ext_fields.get(ACCESS_KEY) != CLUSTER_KEY:
        raise Unsigned(f"request code {code} changes the name server's routes or config and must be signed "
                       "with the cluster secret (this name server runs with --cluster-secret-file)")
    from rmqha.broker.acl import AclConfig, Account
    cfg = AclConfig(accounts={CLUSTER_KEY: Account(CLUSTER_KEY, secret, admin=True)})
    try:
        cfg.validate(code, ext_fields, body, "")
    except AclError as e:
        raise Unsigned(f"request code {code}: {e} (not signed with this name server's cluster secret)") from None


def sign_cluster(ext_fields: dict, body: bytes | None, secret: str) -> dict:
    return sign(ext_fields, body, CLUSTER_KEY, secret)


def check_name(value: str, what: str) -> str:
    if not value or len(value.encode("utf-8")) > NAME_MAX_BYTES or validation.has_illegal_chars(value):
        raise BadRequest(f"{what} {validation.shown(value or '')!r} is not a name (1..{NAME_MAX_BYTES} of "
                         f"{validation.ALLOWED})")
    return value


def check_addr(value: str, what: str, allow_empty: bool = False) -> str:
    """host:port with a port in 1..65535 and a host that is an IP address or a DNS name."""
    if not value and allow_empty:
        return value
    host, sep, port = (value or "").rpartition(":")
    host = host.strip("[]")
    ok = bool(sep) and port.isdigit() and 0 < int(port) < 65536 and 0 < len(host) <= 253
    if ok:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            ok = all(p and len(p) <= 63 and p.replace("-", "").isalnum() and p.isascii()
                     for p in host.split("."))
    if not ok:
        raise BadRequest(f"{what} {validation.shown(value or '')!r} is not host:port")
    return value


def check_broker_id(value: int) -> int:
    if not 0 <= value <= MAX_BROKER_ID:
        raise BadRequest(f"brokerId {value} is out of range 0..{MAX_BROKER_ID}")
    return value


def check_topics(configs: dict, max_topics: int) -> None:
    """The topic configs of a register body (name -> TopicConfig): count, names, queue numbers, perm."""
    n = len(configs)
    if n > max_topics:
        raise BadRequest(f"the register body carries {n} topic configs; this name server takes at most "
                         f"{max_topics} per broker (--max-topics-per-broker)")
    for name, tc in configs.items():
        why = validation.topic_problem(name)
        if why:
            raise BadRequest(f"the register body names an invalid topic: {why}")
        for field, value, top in (("readQueueNums", tc.read_queue_nums, MAX_QUEUE_NUMS),
                                  ("writeQueueNums", tc.write_queue_nums, MAX_QUEUE_NUMS),
                                  ("perm", tc.perm, MAX_PERM)):
            if not 0 <= value <= top:
                raise BadRequest(f"topic {validation.shown(name)!r} of the register body: {field} {value} "
                                 f"is out of range 0..{top}")


def check_filter_servers(addrs: list[str]) -> None:
    if len(addrs) > MAX_FILTER_SERVERS:
        raise BadRequest(f"the register body lists {len(addrs)} filter servers; a broker runs at most "
                         f"{MAX_FILTER_SERVERS} (filterServerNums)")
    for addr in addrs:
        check_addr(addr, "filter server")


def is_signed(ext_fields: dict, body: bytes | None, secret: str) -> bool:
    """True when the request carries a valid signature with the cluster secret (any code)."""
    if ext_fields.get(ACCESS_KEY) != CLUSTER_KEY:
        return False
    expected = signature(request_content(ext_fields, body), secret)
    return hmac.compare_digest(expected, str(ext_fields.get(SIGNATURE, "")))


def read_secret(path: str) -> str:
    """The cluster secret: the file's first line, at least 16 characters (ValueError says what is wrong)."""
    try:
        with open(path, encoding="utf-8") as fh:
            secret = fh.readline().strip()
    except OSError as e:
        raise ValueError(f"cannot read the cluster secret file {path}: {e.strerror}") from None
    if len(secret) < 16:
        raise ValueError(f"the cluster secret in {path} is shorter than 16 characters")
    return secret
