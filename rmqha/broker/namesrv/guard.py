"""What the name server accepts from a peer, and from whom: limits in bytes and in work, validation of
everything it stores, and (ours, opt-in) signed registration.

A 4.9 name server serves anyone who can open a TCP connection: any peer may register a broker (and so
point a slave that takes its master's address from the name server at a fake master), unregister one,
or write KV config (which goes into every REGISTER_BROKER reply). Here, with a cluster secret set
(`--cluster-secret-file`, and the brokers' `clusterSecretFile`), REGISTER_BROKER, UNREGISTER_BROKER,
PUT_KV_CONFIG, DELETE_KV_CONFIG, DELETE_TOPIC_IN_NAMESRV, WIPE_WRITE_PERM_OF_BROKER,
ADD_WRITE_PERM_OF_BROKER and UPDATE_NAMESRV_CONFIG (every request that changes routes or config) must be
signed with it, as the ACL signs client requests (rmqha/broker/acl/rules.py: HmacSHA1 over the sorted ext fields and
the body, AccessKey CLUSTER_KEY; mqadmin signs so with accessKey rmqha-cluster and the secret as
secretKey). Reads stay open, as in 4.9. Without a secret the name server behaves as 4.9's, within the
limits below.

Replay. The ACL signature covers no time, so a captured signed request can be sent again later: a master's
REGISTER_BROKER replayed after that master moved or died points its slaves at a stale address. Brokers
therefore sign REGISTER_BROKER and UNREGISTER_BROKER "timed" (`sign_cluster_timed`): three more signed
fields, clusterSignTime (ms since the epoch on the signer's clock, strictly increasing per signer, so it is
also the per-broker counter), clusterSignNonce (64 random bits) and clusterSignAudience (the name-server
instance the copy is for: each name server draws one at start and says it in its replies), over an
unambiguous content: a format tag, the request code and header version (a REGISTER_BROKER re-sent as
UNREGISTER_BROKER must not verify), then each key and value length-prefixed (the ACL's bare concatenation
of values lets characters move between adjacent fields, brokerAddr "h:10911" + brokerId "0" signs as
"h:1091" + "10"), then the body. `ReplayGuard` refuses a timed request signed for another instance (a copy
relayed from the path to another name server, or one signed before this name server restarted), one whose
time is more than the window (--signed-request-window-seconds, default 120) from the name server's clock
either way, or whose time is not after the last one it took from the same brokerAddr. For these two codes
an untimed signature is refused. The other signed codes take a timed signature (checked the same way) or
the ACL's untimed one, since mqadmin's signing hook cannot add fields; those untimed admin writes stay
replayable (a replay sets again what a holder of the secret once set).
"""

from __future__ import annotations

import base64
import hashlib
import heapq
import hmac
import ipaddress
import os

from rmqha.broker.support import validation
from rmqha.broker.acl.rules import ACCESS_KEY, SIGNATURE, AclError, request_content, sign, signature
from rmqha.broker.support.errors import BadRequest
from rmqha.broker.namesrv import route_info
from rmqha.broker.remoting.codes import VERSION_V4_9_8, RequestCode
from rmqha.broker.remoting.command import stringify_fields

CLUSTER_KEY = "rmqha-cluster"  # the AccessKey of signed cluster requests
SIGNED_CODES = frozenset(
    {
        RequestCode.REGISTER_BROKER,
        RequestCode.UNREGISTER_BROKER,
        RequestCode.PUT_KV_CONFIG,
        RequestCode.DELETE_KV_CONFIG,
        RequestCode.DELETE_TOPIC_IN_NAMESRV,
        RequestCode.WIPE_WRITE_PERM_OF_BROKER,
        RequestCode.ADD_WRITE_PERM_OF_BROKER,
        RequestCode.UPDATE_NAMESRV_CONFIG,
    }
)

SIGN_TIME = "clusterSignTime"  # ms since the epoch on the signer's clock, strictly increasing per signer
SIGN_NONCE = "clusterSignNonce"  # 16 hex digits, random per signed request
# The name-server instance a timed request is for: 16 random hex digits each name server draws at start and
# puts in its replies to REGISTER/UNREGISTER_BROKER (and in a refusal for a wrong or unknown one). A copy
# taken on the way to one name server is refused at another, and at the same one once it restarted.
SIGN_AUDIENCE = "clusterSignAudience"
# Codes only brokers send (ours sign them timed): an untimed signature is refused for them.
TIMED_CODES = frozenset({RequestCode.REGISTER_BROKER, RequestCode.UNREGISTER_BROKER})
# How far a timed request's clusterSignTime may be from the name server's clock, either way. 120 s is
# the name server's broker expiry (BROKER_CHANNEL_EXPIRED_MS, four registration periods of 30 s): a
# registration older than that describes a broker the name server would have dropped already. It also
# bounds what ReplayGuard keeps (the nonces and times of the last 2 x 120 s), and it is far above the
# skew of hosts kept by NTP (milliseconds) plus transit and queueing (a registration times out at 6 s).
# Replays inside the window are refused by nonce and per-broker time, not by the window.
SIGNED_WINDOW_S = 120
MAX_SIGNED_WINDOW_S = 3600
MAX_REMEMBERED_NONCES = 100_000  # timed requests without a brokerAddr (admin writes) taken within 2 x window
MAX_REMEMBERED_BROKERS = 4096  # brokerAddrs whose latest signing time is kept (4 x --max-brokers)

MAX_TOPICS_PER_BROKER = 65_536  # topic configs one registration may carry
MAX_BROKERS = 1024  # broker addresses the name server keeps alive at once
MAX_BROKER_ID = 1024
NAME_MAX_BYTES = 127  # cluster and broker names
# Filter-server addresses one registration may carry. A 4.9 broker reports one per filter-server process
# it starts (filterServerNums, default 0; the filtersrv module left the distribution in 4.3), so real
# brokers send none or a few. Each address goes into every route of the broker's topics: 16,000 of 1 KB
# from three fake brokers once made a route reply of 48 MB, past the 16 MiB frame.
MAX_FILTER_SERVERS = 8
MAX_QUEUE_NUMS = 1024  # read/write queue numbers of a topic config (the broker's own bound)
MAX_PERM = 7  # PERM_PRIORITY | PERM_READ | PERM_WRITE (PERM_INHERIT is 1)
MAX_TOPIC_ROUTES = route_info.MAX_TOPIC_ROUTES  # --max-topic-routes


class Unsigned(BadRequest):
    """A request that must be signed with the cluster secret and is not (or is signed wrong)."""


class Stale(Unsigned):
    """A timed request signed outside the window of the name server's clock."""


class Replayed(Unsigned):
    """A timed request whose nonce was taken already, or whose time is not after the sender's last."""


class Duplicate(Replayed):
    """The very request last taken from that brokerAddr (its time and nonce), delivered once more."""


class WrongAudience(Unsigned):
    """A timed request signed for another name-server instance (another name server, or this one before
    a restart), or for none."""


class Busy(Unsigned):
    """More timed requests within the window than ReplayGuard remembers (only holders of the secret)."""


def check_signed(
    code: int, ext_fields: dict, body: bytes | None, secret: str | None, version: int = VERSION_V4_9_8
) -> None:
    """Raises Unsigned unless the request needs no signature or carries a valid one (the signature only:
    freshness is ReplayGuard's)."""
    if secret is None or code not in SIGNED_CODES:
        return
    if ext_fields.get(ACCESS_KEY) != CLUSTER_KEY:
        raise Unsigned(
            f"request code {code} changes the name server's routes or config and must be signed "
            "with the cluster secret (this name server runs with --cluster-secret-file)"
        )
    if SIGN_TIME in ext_fields:
        if not _timed_signature_ok(code, version, ext_fields, body, secret):
            raise Unsigned(
                f"request code {code}: signature of the timed request does not match (not signed "
                "with this name server's cluster secret)"
            )
        return
    if code in TIMED_CODES:
        raise Unsigned(
            f"request code {code} must be signed with {SIGN_TIME} and {SIGN_NONCE} (a broker of "
            "this version signs so; an untimed signature could be replayed)"
        )
    from rmqha.broker.acl.rules import AclConfig, Account

    cfg = AclConfig(accounts={CLUSTER_KEY: Account(CLUSTER_KEY, secret, admin=True)})
    try:
        cfg.validate(code, ext_fields, body, "")
    except AclError as e:
        raise Unsigned(f"request code {code}: {e} (not signed with this name server's cluster secret)") from None


def sign_cluster(ext_fields: dict, body: bytes | None, secret: str) -> dict:
    """Untimed, as mqadmin's signing hook signs (accessKey rmqha-cluster): taken for every signed code but
    REGISTER_BROKER and UNREGISTER_BROKER."""
    return sign(ext_fields, body, CLUSTER_KEY, secret)


TIMED_FORMAT = b"rmqha-timed/2"  # the first bytes of what a timed signature covers (/1 covered no code)


def timed_content(code: int, version: int, ext_fields: dict, body: bytes | None) -> bytes:
    """What a timed signature covers: a format tag, the request code and the header version (the code says
    what the request does: a REGISTER_BROKER re-sent as UNREGISTER_BROKER carries every field an unregister
    needs; the version picks how a register body is decoded), then every ext field but Signature, as key and
    value each prefixed with its length in bytes, in key order, then the body."""
    out = bytearray(b"%s|%d|%d|" % (TIMED_FORMAT, int(code), int(version)))
    for k in sorted(ext_fields):
        if k == SIGNATURE:
            continue
        for part in (k.encode("utf-8", "replace"), str(ext_fields[k]).encode("utf-8", "replace")):
            out += b"%d:" % len(part) + part
    return bytes(out) + b"|" + (body or b"")


def _timed_signature(content: bytes, secret: str) -> str:
    return base64.b64encode(hmac.new(secret.encode("utf-8"), content, hashlib.sha256).digest()).decode("ascii")


def _timed_signature_ok(code: int, version: int, ext_fields: dict, body: bytes | None, secret: str) -> bool:
    expected = _timed_signature(timed_content(code, version, ext_fields, body), secret)
    return validation.signature_matches(expected, ext_fields.get(SIGNATURE, ""))


def sign_cluster_timed(
    ext_fields: dict,
    body: bytes | None,
    secret: str,
    at_ms: int,
    nonce: str | None = None,
    *,
    code: int,
    audience: str,
    version: int = VERSION_V4_9_8,
) -> dict:
    """ext_fields (stringified as they go on the wire) signed with the time `at_ms` (the caller keeps it
    strictly increasing), a nonce and the name-server instance `audience` ("" when not known yet: refused,
    and the refusal says the instance), for a request of `code` sent with header `version`."""
    out = stringify_fields(ext_fields)
    out[ACCESS_KEY] = CLUSTER_KEY
    out[SIGN_TIME] = str(int(at_ms))
    out[SIGN_NONCE] = nonce if nonce is not None else os.urandom(8).hex()
    out[SIGN_AUDIENCE] = audience
    out.pop(SIGNATURE, None)
    out[SIGNATURE] = _timed_signature(timed_content(code, version, out, body), secret)
    return out


class SignClock:
    """A signer's clusterSignTime: its clock in ms, but always after the last one it gave (a clock
    stepped back by NTP does not make a broker's requests look replayed)."""

    def __init__(self, seconds):
        self.seconds = seconds  # callable, e.g. reactor.seconds (the wall clock)
        self.last = 0

    def next_ms(self) -> int:
        self.last = max(int(self.seconds() * 1000), self.last + 1)
        return self.last


def new_audience() -> str:
    """A name-server instance's audience: 64 random bits, drawn at every start."""
    return os.urandom(8).hex()


class ReplayGuard:
    """The name server's memory of timed requests (IO-free). It refuses one signed for another audience
    (another name-server instance), one signed more than the window from now either way, and one whose
    time is not after the last it took from the same brokerAddr. Times per brokerAddr strictly increase
    (SignClock), so that last time is all it keeps per broker: an exact replay, or one held back, is not
    after it. So one broker re-registering fast (a client auto-creating topics) keeps one entry and denies
    no other broker; the brokerAddrs kept are bounded by max_brokers (a new one past it is Busy). Timed
    requests without a brokerAddr (admin writes signed timed) are told apart by nonce, in a bounded
    memory of their own. Everything is forgotten once a request carrying it would fail the window; a
    restart forgets everything, and the new audience refuses whatever was signed before it."""

    def __init__(
        self,
        window_s: float = SIGNED_WINDOW_S,
        max_nonces: int = MAX_REMEMBERED_NONCES,
        max_brokers: int = MAX_REMEMBERED_BROKERS,
        audience: str | None = None,
    ):
        self.window_ms = int(window_s * 1000)
        self.max_nonces = max_nonces
        self.max_brokers = max_brokers
        self.audience = audience if audience is not None else new_audience()
        self.nonces: dict[str, int] = {}  # requests without a brokerAddr
        self.last_by_broker: dict[str, tuple[int, str]] = {}  # brokerAddr -> (time, nonce) last taken
        self._nonce_times: list[tuple[int, str]] = []  # heaps of (time, nonce) and (time, brokerAddr: one
        self._broker_times: list[tuple[int, str]] = []  # each, maybe older than its last), for pruning

    def check(self, code: int, ext_fields: dict, now_ms: int) -> None:
        """Raises WrongAudience, Stale, Replayed (Duplicate), Busy or Unsigned (malformed time or nonce);
        else takes the request."""
        raw, nonce = str(ext_fields.get(SIGN_TIME, "")), str(ext_fields.get(SIGN_NONCE, ""))
        if not (raw.isascii() and raw.isdigit()) or len(raw) > 15:
            raise Unsigned(f"request code {code}: {SIGN_TIME} {validation.shown(raw)!r} is not ms since the epoch")
        if not 8 <= len(nonce) <= 64:
            raise Unsigned(f"request code {code}: {SIGN_NONCE} must be 8..64 characters")
        audience = str(ext_fields.get(SIGN_AUDIENCE, ""))
        if audience != self.audience:
            raise WrongAudience(
                f"request code {code} was signed for name server instance "
                f"{validation.shown(audience) or '(none)'!r}, this one is {self.audience} (a copy "
                "meant for another name server, or for this one before it restarted; a broker "
                "signs again for the instance in this reply)"
            )
        at = int(raw)
        skew = at - now_ms
        if abs(skew) > self.window_ms:
            where = "ahead of" if skew > 0 else "behind"
            raise Stale(
                f"request code {code} was signed {abs(skew) / 1000:.1f} s {where} this name server's "
                f"clock, outside its window of {self.window_ms / 1000:.0f} s (a replay, or clocks out of "
                "sync: check NTP on both hosts)"
            )
        self._prune(now_ms)
        broker = str(ext_fields.get("brokerAddr", ""))
        if not broker:
            self._take_nonce(code, nonce, at)
            return
        last = self.last_by_broker.get(broker)
        if last is not None and at <= last[0]:
            if (at, nonce) == last:
                raise Duplicate(
                    f"request code {code}: {SIGN_TIME} {at} and nonce {validation.shown(nonce)} from "
                    f"brokerAddr {validation.shown(broker)} were taken already (a replayed request)"
                )
            raise Replayed(
                f"request code {code}: {SIGN_TIME} {at} from brokerAddr {validation.shown(broker)} is "
                f"not after the last taken ({last[0]}): a replayed or reordered request, or that "
                "broker's clock went back across a restart"
            )
        if last is None and len(self.last_by_broker) >= self.max_brokers:
            raise Busy(
                f"request code {code}: signed requests from {self.max_brokers} brokerAddrs taken within "
                f"the window already; brokerAddr {validation.shown(broker)} is new: try again later"
            )
        self.last_by_broker[broker] = (at, nonce)
        if last is None:  # one heap entry per broker, moved on when pruned (a fast broker does not grow it)
            heapq.heappush(self._broker_times, (at, broker))

    def _take_nonce(self, code: int, nonce: str, at: int) -> None:
        if nonce in self.nonces:
            raise Replayed(
                f"request code {code}: nonce {validation.shown(nonce)} was taken already (a replayed request)"
            )
        if len(self.nonces) >= self.max_nonces:
            raise Busy(
                f"request code {code}: {self.max_nonces} signed requests without a brokerAddr taken "
                "within the window already; try again later"
            )
        self.nonces[nonce] = at
        heapq.heappush(self._nonce_times, (at, nonce))

    def _prune(self, now_ms: int) -> None:
        """Forget what no request can match any more: a time below now - window fails the window check."""
        floor = now_ms - self.window_ms
        while self._nonce_times and self._nonce_times[0][0] < floor:
            _, nonce = heapq.heappop(self._nonce_times)
            self.nonces.pop(nonce, None)
        while self._broker_times and self._broker_times[0][0] < floor:
            _, broker = heapq.heappop(self._broker_times)
            last = self.last_by_broker.get(broker)
            if last is None:
                continue
            if last[0] < floor:
                del self.last_by_broker[broker]
            else:
                heapq.heappush(self._broker_times, (last[0], broker))


def check_name(value: str, what: str) -> str:
    if not value or len(value.encode("utf-8")) > NAME_MAX_BYTES or validation.has_illegal_chars(value):
        raise BadRequest(
            f"{what} {validation.shown(value or '')!r} is not a name (1..{NAME_MAX_BYTES} of {validation.ALLOWED})"
        )
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
            ok = all(p and len(p) <= 63 and p.replace("-", "").isalnum() and p.isascii() for p in host.split("."))
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
        raise BadRequest(
            f"the register body carries {n} topic configs; this name server takes at most "
            f"{max_topics} per broker (--max-topics-per-broker)"
        )
    for name, tc in configs.items():
        why = validation.topic_problem(name)
        if why:
            raise BadRequest(f"the register body names an invalid topic: {why}")
        for field, value, top in (
            ("readQueueNums", tc.read_queue_nums, MAX_QUEUE_NUMS),
            ("writeQueueNums", tc.write_queue_nums, MAX_QUEUE_NUMS),
            ("perm", tc.perm, MAX_PERM),
        ):
            if not 0 <= value <= top:
                raise BadRequest(
                    f"topic {validation.shown(name)!r} of the register body: {field} {value} is out of range 0..{top}"
                )


def check_filter_servers(addrs: list[str]) -> None:
    if len(addrs) > MAX_FILTER_SERVERS:
        raise BadRequest(
            f"the register body lists {len(addrs)} filter servers; a broker runs at most "
            f"{MAX_FILTER_SERVERS} (filterServerNums)"
        )
    for addr in addrs:
        check_addr(addr, "filter server")


def is_signed(code: int, version: int, ext_fields: dict, body: bytes | None, secret: str) -> bool:
    """True when the request carries a valid signature with the cluster secret (any code; timed or not)."""
    if ext_fields.get(ACCESS_KEY) != CLUSTER_KEY:
        return False
    if SIGN_TIME in ext_fields:
        return _timed_signature_ok(code, version, ext_fields, body, secret)
    expected = signature(request_content(ext_fields, body), secret)
    return validation.signature_matches(expected, ext_fields.get(SIGNATURE, ""))


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
