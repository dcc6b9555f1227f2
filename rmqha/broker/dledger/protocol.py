"""DLedger's RPC: request codes, response codes and the JSON bodies (dledger 0.3.1.2, protocol/*.java).

Each request travels as a RocketMQ remoting command whose code is a `RequestCode` and whose body is
the request object serialized by fastjson (`JSON.toJSONBytes`); the response is a remoting command
with code SUCCESS (200) whose body is the response object, its own `code` field saying how it went.

fastjson writes every public getter: so the attribute names here are the Java property names
(camelCase, on purpose), keys come out sorted (fastjson's default SortField), null values are left
out, byte[] is a base64 string, enums are their names, and derived getters appear too
(PushEntryRequest's batch, count, firstEntryIndex, lastEntryIndex, totalSize). On the way in,
unknown keys are ignored (fastjson has no setter for them) and enums may be names or ordinals.
"""

from __future__ import annotations

import base64
import binascii
import enum
import json
from dataclasses import dataclass, field, fields

from rmqha.broker.support.beans import bean_json
from .entry import DLedgerEntry


class RequestCode(enum.IntEnum):
    UNKNOWN = -1
    METADATA = 50000
    APPEND = 50001
    GET = 50002
    VOTE = 51001
    HEART_BEAT = 51002
    PULL = 51003
    PUSH = 51004
    LEADERSHIP_TRANSFER = 51005


class ResponseCode(enum.IntEnum):
    UNKNOWN = -1
    SUCCESS = 200
    TIMEOUT = 300
    METADATA_ERROR = 301
    NETWORK_ERROR = 302
    UNSUPPORTED = 303
    UNKNOWN_GROUP = 400
    UNKNOWN_MEMBER = 401
    UNEXPECTED_MEMBER = 402
    EXPIRED_TERM = 403
    NOT_LEADER = 404
    NOT_FOLLOWER = 405
    INCONSISTENT_STATE = 406
    INCONSISTENT_TERM = 407
    INCONSISTENT_INDEX = 408
    INCONSISTENT_LEADER = 409
    INDEX_OUT_OF_RANGE = 410
    UNEXPECTED_ARGUMENT = 411
    REPEATED_REQUEST = 412
    REPEATED_PUSH = 413
    DISK_ERROR = 414
    DISK_FULL = 415
    TERM_NOT_READY = 416
    FALL_BEHIND_TOO_MUCH = 417
    TAKE_LEADERSHIP_FAILED = 418
    INDEX_LESS_THAN_LOCAL_BEGIN = 419
    REQUEST_WITH_EMPTY_BODYS = 420
    PUSH_REQUEST_IS_FULL = 421
    INTERNAL_ERROR = 500
    TERM_CHANGED = 501
    WAIT_QUORUM_ACK_TIMEOUT = 502
    LEADER_PENDING_FULL = 503
    ILLEGAL_MEMBER_STATE = 504
    LEADER_NOT_READY = 505
    LEADER_TRANSFERRING = 506


class VoteResult(enum.Enum):  # VoteResponse.RESULT, in declaration order (fastjson may send ordinals)
    UNKNOWN = "UNKNOWN"
    ACCEPT = "ACCEPT"
    REJECT_UNKNOWN_LEADER = "REJECT_UNKNOWN_LEADER"
    REJECT_UNEXPECTED_LEADER = "REJECT_UNEXPECTED_LEADER"
    REJECT_EXPIRED_VOTE_TERM = "REJECT_EXPIRED_VOTE_TERM"
    REJECT_ALREADY_VOTED = "REJECT_ALREADY_VOTED"
    REJECT_ALREADY_HAS_LEADER = "REJECT_ALREADY_HAS_LEADER"
    REJECT_TERM_NOT_READY = "REJECT_TERM_NOT_READY"
    REJECT_TERM_SMALL_THAN_LEDGER = "REJECT_TERM_SMALL_THAN_LEDGER"
    REJECT_EXPIRED_LEDGER_TERM = "REJECT_EXPIRED_LEDGER_TERM"
    REJECT_SMALL_LEDGER_END_INDEX = "REJECT_SMALL_LEDGER_END_INDEX"
    REJECT_TAKING_LEADERSHIP = "REJECT_TAKING_LEADERSHIP"


class ParseResult(enum.Enum):  # VoteResponse.ParseResult: what a candidate makes of one round of votes
    WAIT_TO_REVOTE = "WAIT_TO_REVOTE"
    REVOTE_IMMEDIATELY = "REVOTE_IMMEDIATELY"
    PASSED = "PASSED"
    WAIT_TO_VOTE_NEXT = "WAIT_TO_VOTE_NEXT"


class PushType(enum.Enum):  # PushEntryRequest.Type
    APPEND = "APPEND"
    COMMIT = "COMMIT"
    COMPARE = "COMPARE"
    TRUNCATE = "TRUNCATE"


class ProtocolError(ValueError):
    """A body that is not valid JSON for the class it should be."""


class DLedgerError(Exception):
    """A failed precondition, with the response code DLedger answers it with (DLedgerException)."""

    def __init__(self, code: ResponseCode, message: str = ""):
        super().__init__(f"{code.name}: {message}" if message else code.name)
        self.code = code


def check_index(index: int, begin_index: int, end_index: int) -> None:
    """DLedger's bounds check for reading entry `index` of a log holding [begin_index, end_index], with
    its response codes and messages (both log implementations use it)."""
    if index < 0:
        raise DLedgerError(ResponseCode.INDEX_OUT_OF_RANGE, f"{index} should gt 0")
    if index < begin_index:
        raise DLedgerError(ResponseCode.INDEX_LESS_THAN_LOCAL_BEGIN, f"{index} < {begin_index}")
    if index > end_index:
        raise DLedgerError(ResponseCode.INDEX_OUT_OF_RANGE, f"{index} should between {begin_index}-{end_index}")


# --- JSON helpers -------------------------------------------------------------------------------


def _b64(data) -> str:
    return base64.b64encode(bytes(data)).decode("ascii")


def _unb64(value, name):
    if value is None:
        return None
    if not isinstance(value, str):
        raise ProtocolError(f"{name}: base64 string expected, got {type(value).__name__}")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as e:
        raise ProtocolError(f"{name}: bad base64: {e}") from None


def _enum(cls, value, name):
    members = list(cls)
    if isinstance(value, str):
        try:
            return cls[value]
        except KeyError:
            raise ProtocolError(f"{name}: unknown {cls.__name__} {value!r}") from None
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(members):
        return members[value]
    raise ProtocolError(f"{name}: bad {cls.__name__} {value!r}")


# Java's ranges (DLedger's fields are int or long; fastjson refuses a value that does not fit)
INT32 = (-(1 << 31), (1 << 31) - 1)
INT64 = (-(1 << 63), (1 << 63) - 1)
# the int (32-bit) fields of DLedger's requests, responses and entries; every other integer is a long
_INT32_FIELDS = frozenset({"code", "magic", "channel", "chainCrc", "bodyCrc", "size", "count", "maxSize"})


def _int(value, name, nullable=False):
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProtocolError(f"{name}: integer expected, got {value!r}")
    lo, hi = INT32 if name.rsplit(".", 1)[-1] in _INT32_FIELDS else INT64
    if not lo <= value <= hi:
        raise ProtocolError(f"{name}: {value} is out of range [{lo}, {hi}]")
    return value


def _str(value, name):
    if value is not None and not isinstance(value, str):
        raise ProtocolError(f"{name}: string expected, got {value!r}")
    return value


def _str_map(value, name):
    if value is None:
        return None
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ProtocolError(f"{name}: object of strings expected")
    return dict(value)


def entry_to_json(e: DLedgerEntry) -> dict:
    d = {
        "bodyCrc": e.body_crc,
        "chainCrc": e.chain_crc,
        "channel": e.channel,
        "index": e.index,
        "magic": e.magic,
        "pos": e.pos,
        "size": e.size,
        "term": e.term,
    }
    if e.body is not None:
        d["body"] = _b64(e.body)
    return d


def entry_from_json(d, name="entry") -> DLedgerEntry | None:
    if d is None:
        return None
    if not isinstance(d, dict):
        raise ProtocolError(f"{name}: object expected")
    g = lambda k: _int(d.get(k, 0), f"{name}.{k}")  # noqa: E731  (Java int/long defaults are 0)
    return DLedgerEntry(
        body=_unb64(d.get("body"), f"{name}.body"),
        index=g("index"),
        term=g("term"),
        pos=g("pos"),
        magic=g("magic"),
        channel=g("channel"),
        chain_crc=g("chainCrc"),
        body_crc=g("bodyCrc"),
        size=g("size"),
    )


# --- the bodies ---------------------------------------------------------------------------------


@dataclass
class RequestOrResponse:
    group: str | None = None
    remoteId: str | None = None
    localId: str | None = None
    code: int = ResponseCode.SUCCESS
    leaderId: str | None = None
    term: int = -1

    # (json name -> (to_json, from_json)) for fields that are not plain ints/strings
    _special = {}

    def to_json(self) -> dict:
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in self._special:
                value = self._special[f.name][0](value) if value is not None else None
            elif isinstance(value, enum.IntEnum):
                value = int(value)
            if value is not None:
                out[f.name] = value
        out.update(self._derived())
        return out

    def _derived(self) -> dict:
        return {}

    def to_json_bytes(self) -> bytes:
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":")).encode("utf-8")

    @classmethod
    def from_json(cls, data):
        if isinstance(data, (bytes, bytearray, memoryview)):
            try:
                data = bytes(data).decode("utf-8")
            except UnicodeDecodeError as e:
                raise ProtocolError(f"{cls.__name__}: body is not UTF-8: {e}") from None
        if isinstance(data, str):
            try:
                data = json.loads(data)
            except json.JSONDecodeError as e:
                raise ProtocolError(f"{cls.__name__}: bad JSON: {e}") from None
        if not isinstance(data, dict):
            raise ProtocolError(f"{cls.__name__}: JSON object expected, got {type(data).__name__}")
        kwargs = {}
        for f in fields(cls):
            if f.name not in data:
                continue
            value = data[f.name]
            name = f"{cls.__name__}.{f.name}"
            if f.name in cls._special:
                kwargs[f.name] = cls._special[f.name][1](value, name)
            elif str(f.type).startswith("str"):
                kwargs[f.name] = _str(value, name)
            else:
                kwargs[f.name] = _int(value, name, nullable=(f.default is None))
        return cls(**kwargs)

    def copy_base_info(self, other: "RequestOrResponse"):
        self.group, self.term, self.code = other.group, other.term, other.code
        self.localId, self.remoteId, self.leaderId = other.localId, other.remoteId, other.leaderId
        return self

    def base_info(self) -> str:
        return (
            f"info[group={self.group},term={self.term},code={int(self.code)},local={self.localId},"
            f"remote={self.remoteId},leader={self.leaderId}]"
        )


@dataclass
class VoteRequest(RequestOrResponse):
    ledgerEndIndex: int = -1
    ledgerEndTerm: int = -1


@dataclass
class VoteResponse(RequestOrResponse):
    voteResult: VoteResult = VoteResult.UNKNOWN
    _special = {"voteResult": (lambda v: v.name, lambda v, n: _enum(VoteResult, v, n))}

    @classmethod
    def for_request(cls, request: VoteRequest, term: int, result: VoteResult) -> "VoteResponse":
        r = cls().copy_base_info(request)
        r.term, r.voteResult = term, result
        return r


@dataclass
class HeartBeatRequest(RequestOrResponse):
    pass


@dataclass
class HeartBeatResponse(RequestOrResponse):
    pass


def _entries_to_json(v):
    return [entry_to_json(e) for e in v]


def _entries_from_json(v, name):
    if v is None:
        return []
    if not isinstance(v, list):
        raise ProtocolError(f"{name}: array expected")
    return [entry_from_json(e, f"{name}[{i}]") for i, e in enumerate(v)]


@dataclass
class PushEntryRequest(RequestOrResponse):
    commitIndex: int = -1
    type: PushType = PushType.APPEND
    entry: DLedgerEntry | None = None
    batchEntry: list = field(default_factory=list)
    _special = {
        "type": (lambda v: v.name, lambda v, n: _enum(PushType, v, n)),
        "entry": (entry_to_json, entry_from_json),
        "batchEntry": (_entries_to_json, _entries_from_json),
    }

    def add_entry(self, e: DLedgerEntry) -> None:
        if self.batchEntry and self.batchEntry[0].index + len(self.batchEntry) != e.index:
            raise DLedgerError(ResponseCode.UNKNOWN, "batch push wrong order")
        self.batchEntry.append(e)

    @property
    def is_batch(self) -> bool:
        return bool(self.batchEntry)

    @property
    def first_entry_index(self) -> int:
        if self.batchEntry:
            return self.batchEntry[0].index
        return self.entry.index if self.entry is not None else -1

    @property
    def last_entry_index(self) -> int:
        if self.batchEntry:
            return self.batchEntry[-1].index
        return self.entry.index if self.entry is not None else -1

    @property
    def count(self) -> int:
        if self.batchEntry:
            return len(self.batchEntry)
        return 1 if self.entry is not None else 0

    @property
    def total_size(self) -> int:
        return sum(e.size for e in self.batchEntry)

    def _derived(self) -> dict:
        return bean_json(self, "batch=is_batch count first_entry_index last_entry_index total_size")


@dataclass
class PushEntryResponse(RequestOrResponse):
    index: int | None = None  # a java.lang.Long: absent for COMMIT
    beginIndex: int = 0
    endIndex: int = 0
    count: int = 0


@dataclass
class AppendEntryRequest(RequestOrResponse):
    body: bytes | None = None
    _special = {"body": (_b64, _unb64)}


@dataclass
class BatchAppendEntryRequest(AppendEntryRequest):
    batchMsgs: list | None = None
    _special = {
        "body": (_b64, _unb64),
        "batchMsgs": (lambda v: [_b64(b) for b in v], lambda v, n: None if v is None else [_unb64(b, n) for b in v]),
    }


@dataclass
class AppendEntryResponse(RequestOrResponse):
    index: int = -1
    pos: int = -1


@dataclass
class LeadershipTransferRequest(RequestOrResponse):
    transferId: str | None = None
    transfereeId: str | None = None
    takeLeadershipLedgerIndex: int = 0


@dataclass
class LeadershipTransferResponse(RequestOrResponse):
    pass


@dataclass
class MetadataRequest(RequestOrResponse):
    pass


@dataclass
class MetadataResponse(RequestOrResponse):
    peers: dict | None = None
    _special = {"peers": (dict, lambda v, n: _str_map(v, n))}


@dataclass
class GetEntriesRequest(RequestOrResponse):
    beginIndex: int | None = None
    maxSize: int = 0
    indexList: list | None = None
    _special = {"indexList": (list, lambda v, n: None if v is None else [_int(x, n) for x in v])}


@dataclass
class GetEntriesResponse(RequestOrResponse):
    entries: list = field(default_factory=list)
    _special = {"entries": (_entries_to_json, _entries_from_json)}


@dataclass
class PullEntriesRequest(RequestOrResponse):
    nodeId: str | None = None
    beginIndex: int | None = None


@dataclass
class PullEntriesResponse(RequestOrResponse):
    entries: list = field(default_factory=list)
    _special = {"entries": (_entries_to_json, _entries_from_json)}


REQUEST_TYPES = {
    RequestCode.METADATA: (MetadataRequest, MetadataResponse),
    RequestCode.APPEND: (AppendEntryRequest, AppendEntryResponse),
    RequestCode.GET: (GetEntriesRequest, GetEntriesResponse),
    RequestCode.VOTE: (VoteRequest, VoteResponse),
    RequestCode.HEART_BEAT: (HeartBeatRequest, HeartBeatResponse),
    RequestCode.PULL: (PullEntriesRequest, PullEntriesResponse),
    RequestCode.PUSH: (PushEntryRequest, PushEntryResponse),
    RequestCode.LEADERSHIP_TRANSFER: (LeadershipTransferRequest, LeadershipTransferResponse),
}
_CODE_OF = {req: code for code, (req, _resp) in REQUEST_TYPES.items()}
_CODE_OF[BatchAppendEntryRequest] = RequestCode.APPEND


def request_code(request: RequestOrResponse) -> RequestCode:
    try:
        return _CODE_OF[type(request)]
    except KeyError:
        raise ProtocolError(f"{type(request).__name__} is not a DLedger request") from None


def decode_request(code: int, body) -> RequestOrResponse:
    try:
        cls = REQUEST_TYPES[RequestCode(code)][0]
    except (ValueError, KeyError):
        raise ProtocolError(f"unknown DLedger request code {code}") from None
    return cls.from_json(body)


def decode_response(code: int, body) -> RequestOrResponse:
    try:
        cls = REQUEST_TYPES[RequestCode(code)][1]
    except (ValueError, KeyError):
        raise ProtocolError(f"unknown DLedger request code {code}") from None
    return cls.from_json(body)
