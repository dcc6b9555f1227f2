"""What the name server accepts from a peer, and from whom: limits in bytes and in work, validation of
everything it stores, and (ours, opt-in) signed registration.

A 4.9 name server serves anyone who can open a TCP connection: any peer may register a broker (and so
point a slave that takes its master's address from the name server at a fake master), unregister one,
or write KV config (which goes into every REGISTER_BROKER reply). Here, with a cluster secret set
(`--cluster-secret-file`, and the brokers' `clusterSecretFile`), REGISTER_BROKER, UNREGISTER_BROKER,
PUT_KV_CONFIG, DELETE_KV_CONFIG, DELETE_TOPIC_IN_NAMESRV, WIPE_WRITE_PERM_OF_BROKER,
ADD_WRITE_PERM_OF_BROKER and UPDATE_NAMESRV_CONFIG (every request that changes routes or config) must be
signed with it, as the ACL signs client requests (broker/acl.py: HmacSHA1 over the sorted ext fields and
the body, AccessKey CLUSTER_KEY; mqadmin signs so with accessKey rmqha-cluster and the secret as
secretKey). Reads stay open, as in 4.9. Without a secret the name server behaves as 4.9's, within the
limits below.
"""
from __future__ import annotations

import ipaddress

from broker import validation
from broker.acl import ACCESS_KEY, AclError, sign
from broker.errors import BadRequest
from broker.remoting.codes import RequestCode

CLUSTER_KEY = "rmqha-cluster"  # the AccessKey of signed cluster requests
SIGNED_CODES = frozenset({RequestCode.REGISTER_BROKER, RequestCode.UNREGISTER_BROKER, RequestCode.PUT_KV_CONFIG,
                          RequestCode.DELETE_KV_CONFIG, RequestCode.DELETE_TOPIC_IN_NAMESRV,
                          RequestCode.WIPE_WRITE_PERM_OF_BROKER, RequestCode.ADD_WRITE_PERM_OF_BROKER,
                          RequestCode.UPDATE_NAMESRV_CONFIG})

MAX_TOPICS_PER_BROKER = 65_536      # topic configs one registration may carry
MAX_BROKERS = 1024                  # broker addresses the name server keeps alive at once
MAX_BROKER_ID = 1024
NAME_MAX_BYTES = 127                # cluster and broker names


class Unsigned(BadRequest):
    """A request that must be signed with the cluster secret and is not (or is signed wrong)."""


def check_signed(code: int, ext_fields: dict, body: bytes | None, secret: str | None) -> None:
    if secret is None or code not in SIGNED_CODES:
        return
    if ext_fields.get(ACCESS_KEY) != CLUSTER_KEY:
        raise Unsigned(f"request code {code} changes the name server's routes or config and must be signed "
                       "with the cluster secret (this name server runs with --cluster-secret-file)")
    from broker.acl import AclConfig, Account
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


def check_topics(names, max_topics: int) -> None:
    n = len(names)
    if n > max_topics:
        raise BadRequest(f"the register body carries {n} topic configs; this name server takes at most "
                         f"{max_topics} per broker (--max-topics-per-broker)")
    for name in names:
        why = validation.topic_problem(name)
        if why:
            raise BadRequest(f"the register body names an invalid topic: {why}")


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
