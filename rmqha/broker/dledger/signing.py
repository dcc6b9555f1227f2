"""Signed DLedger peer traffic (ours, opt-in: a cluster secret, the broker's clusterSecretFile). IO-free.

DLedger 0.3.1.2 authenticates nothing: whoever reaches a node's DLedger port and names a configured
peer can vote, heartbeat, push, truncate or ask for a leadership transfer. With a secret, every request
a node sends carries three remoting ext fields, and every node refuses a request without them or with
a wrong signature, one signed outside its time window, or one not newer than the last from that peer:

* dledgerSignTime: microseconds since the epoch on the signer's clock, strictly increasing per signer
  (SignClock), so it is also the per-sender counter;
* dledgerSignNonce: 64 random bits (what tells apart requests from senders that are not peers);
* dledgerSignature: base64 HMAC-SHA256, with the secret, of a format tag, "req", the request code,
  the time, the nonce and the body (the JSON that names group, sender, receiver and term).

Answers are signed too, bound to their request: the same tag, "resp", the answer's remoting code, the
request's nonce and the answer's body, so that no one on the path can forge a vote grant or a push
acknowledgement. A sender treats an unsigned or wrongly signed answer as a network error.

The ext fields sit in the remoting header, where a 0.3.1.2 peer ignores them (it reads only the code and
the JSON body), so a signed request still parses there; without a secret nothing is added and the bytes
are 0.3.1.2's.

Replay: a request is refused when its time is more than the window (30 s by default, well above
DLedger's 3 s RPC timeout, after which the sender has given up on it anyway, plus the skew of
NTP-kept clocks) from the receiver's clock either way, and, from a configured peer, when its time is
not after the last one taken from that peer (each peer's requests to one node travel in order on one
connection). From anyone else (an admin tool signing a LeadershipTransferRequest) the nonce must be new
within the window. A receiver that restarts forgets the last times: a request captured before can be
replayed once within the window.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

from rmqha.broker.support.validation import signature_matches

SIGN_TIME = "dledgerSignTime"
SIGN_NONCE = "dledgerSignNonce"
SIGNATURE = "dledgerSignature"
FORMAT = b"rmqha-dledger/1"
DEFAULT_WINDOW_MS = 30_000
MAX_NONCES = 10_000  # requests from senders that are not peers remembered within the window

# refusal reasons, the keys of the counters in the DLedger status
UNSIGNED, BAD_SIGNATURE, STALE, REPLAYED = "unsigned", "bad_signature", "stale", "replayed"


class Refused(Exception):
    """A request refused by the guard: `reason` is one of the four above, the message says why."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def _mac(secret: str, *parts: bytes) -> str:
    content = b"|".join(parts)
    return base64.b64encode(hmac.new(secret.encode("utf-8"), content, hashlib.sha256).digest()).decode("ascii")


def request_signature(secret: str, code: int, time_us: int, nonce: str, body: bytes | None) -> str:
    return _mac(secret, FORMAT, b"req", b"%d" % code, b"%d" % time_us, nonce.encode("ascii"), body or b"")


def response_signature(secret: str, code: int, request_nonce: str, body: bytes | None) -> str:
    return _mac(secret, FORMAT, b"resp", b"%d" % code, request_nonce.encode("ascii"), body or b"")


def sign_request(secret: str, code: int, body: bytes | None, time_us: int, nonce: str | None = None) -> dict:
    """The ext fields that sign a request of `code` with `body` at `time_us`."""
    nonce = nonce if nonce is not None else os.urandom(8).hex()
    return {
        SIGN_TIME: str(time_us),
        SIGN_NONCE: nonce,
        SIGNATURE: request_signature(secret, code, time_us, nonce, body),
    }


def sign_response(secret: str, code: int, body: bytes | None, request_nonce: str) -> dict:
    return {SIGNATURE: response_signature(secret, code, request_nonce, body)}


def response_ok(secret: str, code: int, body: bytes | None, request_nonce: str, ext_fields: dict | None) -> bool:
    got = (ext_fields or {}).get(SIGNATURE)
    return isinstance(got, str) and signature_matches(response_signature(secret, code, request_nonce, body), got)


def is_signed(ext_fields: dict | None) -> bool:
    return bool(ext_fields) and SIGNATURE in ext_fields  # type: ignore[operator]


class SignClock:
    """A signer's dledgerSignTime: its clock in microseconds, always after the last one it gave (a burst
    within one microsecond, or a clock stepped back, does not repeat a time)."""

    def __init__(self, seconds):
        self.seconds = seconds  # callable: the reactor's (the wall clock in production)
        self.last = 0

    def next_us(self) -> int:
        self.last = max(int(self.seconds() * 1_000_000), self.last + 1)
        return self.last


class Guard:
    """What a node remembers to refuse replays: the last time taken per peer, and the nonces of other
    senders' requests within the window (bounded: past MAX_NONCES, such a request is refused as stale
    until older ones expire)."""

    def __init__(self, secret: str, peers, window_ms: int = DEFAULT_WINDOW_MS, max_nonces: int = MAX_NONCES):
        self.secret = secret
        self.peers = frozenset(peers)
        self.window_us = int(window_ms) * 1000
        self.max_nonces = max_nonces
        self.last: dict[str, int] = {}
        self.nonces: dict[str, int] = {}  # nonce -> its time

    def check_signature(self, code: int, ext_fields: dict | None, body: bytes | None) -> tuple[int, str]:
        """(time, nonce) of a request whose signature is right, else Refused (unsigned, bad_signature)."""
        fields = ext_fields or {}
        if not is_signed(fields):
            raise Refused(
                UNSIGNED,
                "DLedger request refused: not signed with the cluster secret (this node runs with "
                f"clusterSecretFile; {SIGNATURE} missing)",
            )
        raw_time, nonce, got = fields.get(SIGN_TIME, ""), fields.get(SIGN_NONCE, ""), fields.get(SIGNATURE, "")
        ok_time = raw_time.isascii() and raw_time.isdigit() and len(raw_time) <= 19  # "²".isdigit(), int("²") raises
        if not (ok_time and 0 < len(nonce) <= 64 and nonce.isascii()):
            raise Refused(BAD_SIGNATURE, f"DLedger request refused: bad {SIGN_TIME} or {SIGN_NONCE}")
        time_us = int(raw_time)
        if not signature_matches(request_signature(self.secret, code, time_us, nonce, body), got):
            raise Refused(
                BAD_SIGNATURE, "DLedger request refused: the signature does not match (another cluster secret?)"
            )
        return time_us, nonce

    def check_fresh(self, sender: str | None, time_us: int, nonce: str, now_s: float) -> None:
        """Refused (stale, replayed) unless within the window and new; a request that passes is taken."""
        now_us = int(now_s * 1_000_000)
        if abs(now_us - time_us) > self.window_us:
            raise Refused(
                STALE,
                f"DLedger request refused: signed {(time_us - now_us) / 1e6:+.3f} s from this node's clock "
                f"(window {self.window_us / 1e6:g} s)",
            )
        if sender in self.peers:
            last = self.last.get(sender, 0)
            if time_us <= last:
                raise Refused(
                    REPLAYED, f"DLedger request refused: replayed (signed at or before the last from {sender})"
                )
            self.last[sender] = time_us
            return
        if nonce in self.nonces:
            raise Refused(REPLAYED, "DLedger request refused: replayed (nonce seen)")
        self._expire(now_us)
        if len(self.nonces) >= self.max_nonces:
            raise Refused(STALE, "DLedger request refused: too many signed requests from non-peers in the window")
        self.nonces[nonce] = time_us

    def _expire(self, now_us: int) -> None:
        for n in [n for n, t in self.nonces.items() if now_us - t > self.window_us]:
            del self.nonces[n]
