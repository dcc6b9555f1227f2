"""The one place that knows RocketMQ 4.x's commit-log record layout (WIRE-FACTS §6.1-6.4).

Everything that reads or writes commit-log bytes goes through here: the send path, the HA slave's
dispatcher, recovery, the store's queries, and the pipeline's decoder (through scan_summary(), whose
tuple is in the record's terms; the audit's columns are the pipeline's). All integers are big-endian.

Record layout, IPv4 hosts (offsets in bytes):
    0 TOTALSIZE i4 | 4 MAGICCODE i4 | 8 BODYCRC i4 | 12 QUEUEID i4 | 16 FLAG i4 | 20 QUEUEOFFSET i8
    28 PHYSICALOFFSET i8 | 36 SYSFLAG i4 | 40 BORNTIMESTAMP i8 | 48 BORNHOST 4+4 (or 16+4)
    STORETIMESTAMP i8 | STOREHOST 4+4 (or 16+4) | RECONSUMETIMES i4 | PREPARED_TX_OFFSET i8
    BODYLEN i4 + body | TOPICLEN i1 + topic | PROPLEN i2 + properties
"""

from __future__ import annotations

import array
import functools
import ipaddress
import operator
import socket
import struct
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TypeAlias

MESSAGE_MAGIC = 0xDAA320A7
BLANK_MAGIC = 0xCBD43194
END_FILE_MIN_BLANK_LENGTH = 8
# The fixed part of a record with IPv4 hosts: TOTALSIZE = 91 + body + topic + properties.
FIXED_SIZE_IPV4 = 91
IPV6_EXTRA = 12
MAX_TOPIC_BYTES = 127
MAX_PROPERTIES_BYTES = 32767

# Message sysflag bits (§6.4)
FLAG_COMPRESSED = 0x1
FLAG_MULTI_TAGS = 0x2
TRANSACTION_MASK = 0xC
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED = 0x4
TRANSACTION_COMMIT = 0x8
TRANSACTION_ROLLBACK = 0xC
FLAG_BORNHOST_V6 = 0x10
FLAG_STOREHOST_V6 = 0x20

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

_HEAD = struct.Struct(">iIiiiqqiq")  # TOTALSIZE .. BORNTIMESTAMP: 48 bytes
_I4 = struct.Struct(">i")
_I8 = struct.Struct(">q")
_I2 = struct.Struct(">h")
_BLANK = struct.Struct(">iI")

# For readers that look at raw bytes before (or instead of) decoding a record:
HEAD_SIZE = _BLANK.size  # TOTALSIZE + MAGICCODE: enough to tell a message, a blank and garbage apart
MAGIC_AT = 4  # MAGICCODE's offset in a record (after TOTALSIZE): where a search for a record start looks
MESSAGE_MAGIC_BYTES = MESSAGE_MAGIC.to_bytes(4, "big")
BLANK_MAGIC_BYTES = BLANK_MAGIC.to_bytes(4, "big")
STORE_TIMESTAMP_PEEK = _HEAD.size + 20 + 8  # a record's first bytes that hold STORETIMESTAMP (IPv6 born host)


# What the decoders read: the stored bytes, a buffer being filled, or a view into either.
BytesLike: TypeAlias = bytes | bytearray | memoryview


class RecordError(ValueError):
    """A record that cannot be stored as asked (too long a topic, properties over 32767 bytes...)."""


def body_crc(body: bytes) -> int:
    return zlib.crc32(body) & 0x7FFFFFFF


_HASH_POWERS = [pow(31, k, 1 << 32) for k in range(4096)]  # 31^k mod 2^32


def java_string_hash(s: str) -> int:
    """Java's String.hashCode() over UTF-16 code units, 32-bit wrap, returned signed.

    h = sum(c[i] * 31^(n-1-i)) mod 2^32, the products summed in C for up to 4096 code units (the
    tags and index keys hashed per message), Horner's loop beyond."""
    if s.isascii() and len(s) <= len(_HASH_POWERS):  # one code unit per byte
        h: int = sum(map(operator.mul, s.encode()[::-1], _HASH_POWERS)) & 0xFFFFFFFF
        return h - (1 << 32) if h & 0x80000000 else h
    units = array.array("H")
    units.frombytes(s.encode("utf-16-le"))
    if sys.byteorder == "big":
        units.byteswap()
    if len(units) <= len(_HASH_POWERS):
        h = sum(map(operator.mul, reversed(units), _HASH_POWERS)) & 0xFFFFFFFF
    else:
        h = 0
        for c in units:
            h = (31 * h + c) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def tags_code(tags: str | None) -> int:
    return java_string_hash(tags) if tags else 0


# -- properties (§6.2) -------------------------------------------------------------------------


def decode_properties(text: str | bytes | None) -> dict[str, str]:
    """Parse name\\x01value\\x02... the Java way: skip segments with an empty name or value."""
    if not text:
        return {}
    if isinstance(text, (bytes, bytearray, memoryview)):
        text = bytes(text).decode("utf-8", errors="replace")
    props: dict[str, str] = {}
    for item in text.split(PROPERTY_SEPARATOR):
        name, sep, value = item.partition(NAME_VALUE_SEPARATOR)
        if sep and name and value:
            props[name] = value
    return props


def encode_properties(props: dict[str, str]) -> str:
    """Serialize as Java does when it stores a message: no trailing separator."""
    return PROPERTY_SEPARATOR.join(f"{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in props.items())


def properties_round_trip(props: dict[str, str]) -> bool:
    """Whether decoding the stored text gives these properties back (less any empty name or value):
    true unless a name or a value holds a separator."""
    return _separators_match(encode_properties(props), len(props))


def _separators_match(text: str, n: int) -> bool:
    """The encoded text of n properties holds exactly their n name-value and n - 1 property separators."""
    return text.count(NAME_VALUE_SEPARATOR) == n and text.count(PROPERTY_SEPARATOR) == max(n - 1, 0)


# -- hosts ----------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1024)
def _packed_ip(ip: str) -> bytes:
    """The 4 or 16 address bytes of an IP (cached: ipaddress parsing costs microseconds per call)."""
    return ipaddress.ip_address(ip).packed


def encode_host(host: tuple[str, int]) -> bytes:
    ip, port = host
    return _packed_ip(ip) + _I4.pack(port)


def decode_host(raw: BytesLike) -> tuple[str, int]:
    return str(ipaddress.ip_address(bytes(raw[:-4]))), _I4.unpack_from(raw, len(raw) - 4)[0]


def offset_msg_id(store_host: tuple[str, int], physical_offset: int) -> str:
    """offsetMsgId (§4.2): store IP + port (i4) + physical offset (i8), uppercase hex."""
    return _host_hex(tuple(store_host)) + format(physical_offset & 0xFFFFFFFFFFFFFFFF, "016X")


@functools.lru_cache(maxsize=256)
def _host_hex(store_host: tuple[str, int]) -> str:
    return encode_host(store_host).hex().upper()


def parse_offset_msg_id(msg_id: str) -> tuple[tuple[str, int], int]:
    raw = bytes.fromhex(msg_id)
    if len(raw) not in (16, 28):
        raise ValueError(f"offsetMsgId must be 32 or 56 hex characters, got {len(msg_id)}")
    return decode_host(raw[:-8]), _I8.unpack_from(raw, len(raw) - 8)[0]


# -- the record ---------------------------------------------------------------------------------


@dataclass
class Message:
    """A message as stored in the commit log. Fields the broker assigns default to 0."""

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    store_timestamp: int = 0
    store_host: tuple[str, int] = ("127.0.0.1", 0)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    # Assigned at store time, read back on decode.
    queue_offset: int = 0
    physical_offset: int = 0
    total_size: int = 0
    body_crc: int = 0

    @property
    def tags(self) -> str | None:
        return self.properties.get("TAGS")

    @property
    def keys(self) -> str | None:
        return self.properties.get("KEYS")

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get("UNIQ_KEY")

    @property
    def transaction_type(self) -> int:
        return self.sys_flag & TRANSACTION_MASK

    @property
    def gets_queue_entry(self) -> bool:
        """Prepared and rollback transaction messages get no consume-queue entry (§6.4)."""
        return self.transaction_type in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT)

    @property
    def msg_id(self) -> str:
        return offset_msg_id(self.store_host, self.physical_offset)


def encoded_size(body_len: int, topic_len: int, props_len: int, sys_flag: int = 0) -> int:
    size = FIXED_SIZE_IPV4 + body_len + topic_len + props_len
    if sys_flag & FLAG_BORNHOST_V6:
        size += IPV6_EXTRA
    if sys_flag & FLAG_STOREHOST_V6:
        size += IPV6_EXTRA
    return size


class EncodedRecord:
    """A record serialized except for the two fields fixed at append time (queue and physical offset).

    plain_properties: the stored properties text decodes back to the message's properties (no
    separator inside a name or value; properties_round_trip), so a reader of the message's dict sees
    what a reader of the bytes sees."""

    __slots__ = ("buf", "size", "crc", "plain_properties")

    def __init__(self, buf: bytearray, crc: int, plain_properties: bool = False):
        self.buf = buf
        self.size = len(buf)
        self.crc = crc
        self.plain_properties = plain_properties

    def finish(self, queue_offset: int, physical_offset: int) -> bytearray:
        _I8.pack_into(self.buf, 20, queue_offset)
        _I8.pack_into(self.buf, 28, physical_offset)
        return self.buf


# TOTALSIZE .. BODYLEN in one pack, indexed by (born host IPv6) | (store host IPv6) << 1.
_ENCODE_LAYOUTS = tuple(struct.Struct(f">iIiiiqqiq{16 if v & 1 else 4}siq{16 if v & 2 else 4}siiqi") for v in range(4))


def encode(msg: Message) -> EncodedRecord:
    """Serialize a message. The queue and physical offsets are patched in by `finish()`."""
    topic = msg.topic.encode("utf-8")
    if not topic or len(topic) > MAX_TOPIC_BYTES:
        raise RecordError(f"topic must be 1..{MAX_TOPIC_BYTES} bytes, got {len(topic)}")
    text = encode_properties(msg.properties)
    plain = _separators_match(text, len(msg.properties))
    props = text.encode("utf-8")
    if len(props) > MAX_PROPERTIES_BYTES:
        raise RecordError(f"properties are {len(props)} bytes, over the limit of {MAX_PROPERTIES_BYTES}")
    born_name, born_port = msg.born_host
    store_name, store_port = msg.store_host
    born_ip = _packed_ip(born_name)
    store_ip = _packed_ip(store_name)
    v6 = (len(born_ip) == 16) | (len(store_ip) == 16) << 1
    sys_flag = (msg.sys_flag & ~(FLAG_BORNHOST_V6 | FLAG_STOREHOST_V6)) | (v6 << 4)  # the two host bits
    body = bytes(msg.body)
    crc = body_crc(body)
    size = encoded_size(len(body), len(topic), len(props), sys_flag)
    buf = bytearray(size)
    head = _ENCODE_LAYOUTS[v6]
    head.pack_into(
        buf,
        0,
        size,
        MESSAGE_MAGIC,
        crc,
        msg.queue_id,
        msg.flag,
        msg.queue_offset,
        msg.physical_offset,
        sys_flag,
        msg.born_timestamp,
        born_ip,
        born_port,
        msg.store_timestamp,
        store_ip,
        store_port,
        msg.reconsume_times,
        msg.prepared_transaction_offset,
        len(body),
    )
    p = head.size
    buf[p : p + len(body)] = body
    p += len(body)
    buf[p] = len(topic)
    buf[p + 1 : p + 1 + len(topic)] = topic
    p += 1 + len(topic)
    _I2.pack_into(buf, p, len(props))
    buf[p + 2 :] = props
    assert len(buf) == size
    return EncodedRecord(buf, crc, plain)


def blank(length: int) -> bytes:
    """The end-of-file marker (§6.3): TOTALSIZE = the rest of the file, blank magic; the rest stays zero."""
    return _BLANK.pack(length, BLANK_MAGIC)


# -- decoding -----------------------------------------------------------------------------------


class Scan:
    """What sits at a position in the commit log."""

    MESSAGE = "message"
    BLANK = "blank"  # end-of-file marker: skip to the next file
    PARTIAL = "partial"  # a record header or body not all here yet (only meaningful at the tail)
    INVALID = "invalid"  # zeros, garbage, a CRC or length mismatch: valid data ends here


@dataclass
class ScanResult:
    kind: str
    size: int = 0
    message: Message | None = None
    reason: str = ""


def scan(buf: BytesLike, pos: int = 0, check_crc: bool = True, decode_body: bool = True) -> ScanResult:
    """Validate and decode the record at buf[pos:]. Never raises on bad bytes."""
    avail = len(buf) - pos
    if avail < 8:
        # The caller knows whether more bytes can come (a growing tail) or not (a torn file end).
        return ScanResult(Scan.PARTIAL, reason=f"{avail} bytes, fewer than a record head")
    total, magic = _BLANK.unpack_from(buf, pos)
    if magic == BLANK_MAGIC:
        if total < END_FILE_MIN_BLANK_LENGTH:
            return ScanResult(Scan.INVALID, reason=f"blank record with length {total}")
        return ScanResult(Scan.BLANK, size=total)
    if magic != MESSAGE_MAGIC:
        return ScanResult(Scan.INVALID, reason=f"magic {magic:#010x}" if (total or magic) else "zeros")
    if total < FIXED_SIZE_IPV4:
        return ScanResult(Scan.INVALID, reason=f"TOTALSIZE {total} below the minimum {FIXED_SIZE_IPV4}")
    if avail < total:
        return ScanResult(Scan.PARTIAL, size=total, reason=f"record of {total} bytes, {avail} present")
    try:
        msg = _decode_fields(buf, pos, total, check_crc, decode_body)
    except _Mismatch as e:
        return ScanResult(Scan.INVALID, reason=str(e))
    except (struct.error, UnicodeDecodeError, ValueError, IndexError) as e:  # IndexError: a field past the buffer
        return ScanResult(Scan.INVALID, reason=f"unparseable record: {e}")
    return ScanResult(Scan.MESSAGE, size=total, message=msg)


class _Mismatch(Exception):
    pass


def _decode_fields(buf: BytesLike, pos: int, total: int, check_crc: bool, decode_body: bool) -> Message:
    (_, _, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts) = _HEAD.unpack_from(buf, pos)
    p = pos + _HEAD.size
    born_len = 20 if sys_flag & FLAG_BORNHOST_V6 else 8
    born_host = decode_host(buf[p : p + born_len])
    p += born_len
    store_ts = _I8.unpack_from(buf, p)[0]
    p += 8
    store_len = 20 if sys_flag & FLAG_STOREHOST_V6 else 8
    store_host = decode_host(buf[p : p + store_len])
    p += store_len
    reconsume = _I4.unpack_from(buf, p)[0]
    p += 4
    prepared = _I8.unpack_from(buf, p)[0]
    p += 8
    body_len = _I4.unpack_from(buf, p)[0]
    p += 4
    if body_len < 0 or p + body_len > pos + total:
        raise _Mismatch(f"body length {body_len} does not fit in TOTALSIZE {total}")
    body = bytes(buf[p : p + body_len])
    p += body_len
    if check_crc and body_crc(body) != crc:
        raise _Mismatch(f"body CRC {body_crc(body)} != stored {crc}")
    topic_len = buf[p]
    p += 1
    if topic_len > MAX_TOPIC_BYTES:
        raise _Mismatch(f"topic length {topic_len}")
    topic = bytes(buf[p : p + topic_len]).decode("utf-8")
    p += topic_len
    props_len = _I2.unpack_from(buf, p)[0]
    p += 2
    if props_len < 0:
        raise _Mismatch(f"properties length {props_len}")
    props_raw = bytes(buf[p : p + props_len])
    p += props_len
    expected = encoded_size(body_len, topic_len, props_len, sys_flag)
    if expected != total or p != pos + total:
        raise _Mismatch(f"TOTALSIZE {total} != size computed from the fields {expected}")
    return Message(
        topic=topic,
        body=body if decode_body else b"",
        queue_id=queue_id,
        flag=flag,
        sys_flag=sys_flag,
        born_timestamp=born_ts,
        born_host=born_host,
        store_timestamp=store_ts,
        store_host=store_host,
        reconsume_times=reconsume,
        prepared_transaction_offset=prepared,
        properties=decode_properties(props_raw),
        queue_offset=queue_offset,
        physical_offset=phys,
        total_size=total,
        body_crc=crc,
    )


def iter_records(buf: BytesLike, base_offset: int = 0, check_crc: bool = True) -> Iterator[tuple[int, ScanResult]]:
    """Yield (physical_offset, ScanResult) for each record in a buffer holding part of one file.

    Stops after a blank, an invalid record or a partial tail (yielded last so callers can tell why).
    """
    pos = 0
    while pos < len(buf):
        r = scan(buf, pos, check_crc)
        yield base_offset + pos, r
        if r.kind != Scan.MESSAGE:
            return
        pos += r.size


def message_size(head: BytesLike) -> int:
    """TOTALSIZE of the message whose first bytes (HEAD_SIZE or more) are `head`; 0 when they are not
    a message's (too few bytes, a blank, garbage, a TOTALSIZE that is not positive)."""
    if len(head) < HEAD_SIZE:
        return 0
    total: int
    total, magic = _BLANK.unpack_from(head)
    return total if magic == MESSAGE_MAGIC and total > 0 else 0


def store_timestamp(head: BytesLike) -> int | None:
    """STORETIMESTAMP of the message whose first bytes are `head` (STORE_TIMESTAMP_PEEK of them are
    always enough); None when they are not a message's head or too few to reach the field."""
    if len(head) < _HEAD.size:
        return None
    _, magic, _, _, _, _, _, sys_flag, _ = _HEAD.unpack_from(head)
    if magic != MESSAGE_MAGIC:
        return None
    p = _HEAD.size + (20 if sys_flag & FLAG_BORNHOST_V6 else 8)
    return _I8.unpack_from(head, p)[0] if len(head) >= p + 8 else None


def host_of(addr: str) -> tuple[str, int]:
    """'ip:port' -> (ip, port), resolving a host name once (store host must be an IP)."""
    host, _, port = addr.rpartition(":")
    host = host.strip("[]")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        host = socket.gethostbyname(host)
    return host, int(port)


# -- the fast path: what building a consume queue needs, without decoding the whole record ---------

_IDX_HEAD = struct.Struct(">iIiiiqqi")  # TOTALSIZE MAGIC BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSOFFSET SYSFLAG
_TAGS_KEY = b"TAGS" + NAME_VALUE_SEPARATOR.encode()
_UNIQ_KEY_BYTES = b"UNIQ_KEY" + NAME_VALUE_SEPARATOR.encode()
_KEYS_BYTES = b"KEYS" + NAME_VALUE_SEPARATOR.encode()


class IndexInfo:
    """The fields of a record a consume-queue unit, the message index and recovery need."""

    __slots__ = (
        "size",
        "topic",
        "queue_id",
        "queue_offset",
        "physical_offset",
        "sys_flag",
        "store_timestamp",
        "tags_code",
        "props",
    )

    def __init__(
        self,
        size: int,
        topic: str,
        queue_id: int,
        queue_offset: int,
        physical_offset: int,
        sys_flag: int,
        store_timestamp: int,
        tags_code: int,
        props: bytes = b"",
    ):
        self.size = size
        self.topic = topic
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.physical_offset = physical_offset
        self.sys_flag = sys_flag
        self.store_timestamp = store_timestamp
        self.tags_code = tags_code
        self.props = props  # the raw PROPERTIES bytes, parsed only when asked (index_keys)

    @property
    def gets_queue_entry(self) -> bool:
        return (self.sys_flag & TRANSACTION_MASK) in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT)

    def index_keys(self) -> tuple[str | None, str | None]:
        """(UNIQ_KEY, KEYS) as the reference's dispatch reads them (decode_properties' rules: the last
        segment of a name with a non-empty value); None when absent."""
        if _UNIQ_KEY_BYTES not in self.props and _KEYS_BYTES not in self.props:
            return None, None
        props = decode_properties(self.props)
        return props.get("UNIQ_KEY"), props.get("KEYS")


def _tags_code_from_props(props: bytes) -> int:
    """tagsCode straight from the raw properties bytes, by decode_properties()'s (and Java's) rules: the
    LAST segment named TAGS with a non-empty value wins; searched from the end, so usually one rfind."""
    end = len(props)
    while True:
        i = props.rfind(_TAGS_KEY, 0, end)
        if i < 0:
            return 0
        if i == 0 or props[i - 1] == 0x02:  # a segment starts here (not "XTAGS" nor a value's "TAGS\x01")
            v = i + len(_TAGS_KEY)
            j = props.find(b"\x02", v)
            if j < 0:
                j = len(props)
            if j > v:
                return java_string_hash(props[v:j].decode("utf-8", errors="replace"))
        end = i  # an empty value is skipped, as Java does: an earlier TAGS may still count


def scan_index(buf: BytesLike, pos: int = 0, check_crc: bool = True) -> tuple[str, int, IndexInfo | None, str]:
    """Like scan(), but returns (kind, size, IndexInfo, reason) and decodes only what indexing needs.

    Validation is the same as scan()'s: magic, TOTALSIZE against the field lengths, body CRC.
    """
    avail = len(buf) - pos
    if avail < 8:
        return Scan.PARTIAL, 0, None, f"{avail} bytes, fewer than a record head"
    total, magic = _BLANK.unpack_from(buf, pos)
    if magic == BLANK_MAGIC:
        if total < END_FILE_MIN_BLANK_LENGTH:
            return Scan.INVALID, 0, None, f"blank record with length {total}"
        return Scan.BLANK, total, None, ""
    if magic != MESSAGE_MAGIC:
        return Scan.INVALID, 0, None, (f"magic {magic:#010x}" if (total or magic) else "zeros")
    if total < FIXED_SIZE_IPV4:
        return Scan.INVALID, 0, None, f"TOTALSIZE {total} below the minimum {FIXED_SIZE_IPV4}"
    if avail < total:
        return Scan.PARTIAL, total, None, f"record of {total} bytes, {avail} present"
    _, _, crc, queue_id, _, queue_offset, phys, sys_flag = _IDX_HEAD.unpack_from(buf, pos)
    p = pos + 48 + (20 if sys_flag & FLAG_BORNHOST_V6 else 8)
    store_ts = _I8.unpack_from(buf, p)[0]
    p += 8 + (20 if sys_flag & FLAG_STOREHOST_V6 else 8) + 12
    end = pos + total
    if p + 4 > end:  # IPv6 hosts in a record too short for them: BODYLEN would be read past it
        return Scan.INVALID, 0, None, f"TOTALSIZE {total} leaves no room for BODYLEN"
    body_len = _I4.unpack_from(buf, p)[0]
    p += 4
    if body_len < 0 or p + body_len + 3 > end:
        return Scan.INVALID, 0, None, f"body length {body_len} does not fit in TOTALSIZE {total}"
    if check_crc:
        actual = zlib.crc32(memoryview(buf)[p : p + body_len]) & 0x7FFFFFFF
        if actual != crc:
            return Scan.INVALID, 0, None, f"body CRC {actual} != stored {crc}"
    p += body_len
    topic_len = buf[p]
    if topic_len > MAX_TOPIC_BYTES or p + 1 + topic_len + 2 > end:
        return Scan.INVALID, 0, None, f"topic length {topic_len}"
    topic_raw = bytes(buf[p + 1 : p + 1 + topic_len])
    p += 1 + topic_len
    props_len = _I2.unpack_from(buf, p)[0]
    p += 2
    if props_len < 0 or p + props_len != end:
        return Scan.INVALID, 0, None, "TOTALSIZE does not match the size computed from the fields"
    try:
        topic = topic_raw.decode("utf-8")
    except UnicodeDecodeError:
        return Scan.INVALID, 0, None, "topic is not UTF-8"
    props = bytes(buf[p:end]) if props_len else b""
    tags = _tags_code_from_props(props) if props_len else 0
    return (
        Scan.MESSAGE,
        total,
        IndexInfo(total, topic, queue_id, queue_offset, phys, sys_flag, store_ts, tags, props),
        "",
    )


# -- the summary fast path: a record's main fields as a plain tuple, for bulk readers -------------------

# What scan_summary()'s tuple holds, position by position: fields in the record's own order (TOTALSIZE,
# BODYCRC, QUEUEID, QUEUEOFFSET, PHYSICALOFFSET, SYSFLAG, BORNTIMESTAMP, STORETIMESTAMP, the STOREHOST bytes
# as stored, TOPIC), then the UNIQ_KEY, KEYS and TAGS properties (None when absent), then the CRC32 of the
# whole record's bytes (BODYCRC covers the body only). A reader picks positions by these names; its own
# columns and their order are its business (the audit's live in rmqha/pipeline/decode.py).
SUMMARY_FIELDS = (
    "size",
    "body_crc",
    "queue_id",
    "queue_offset",
    "physical_offset",
    "sys_flag",
    "born_timestamp",
    "store_timestamp",
    "store_host_raw",
    "topic",
    "uniq_key",
    "keys",
    "tags",
    "record_crc",
)

# TOTALSIZE .. BODYLEN in one unpack, indexed by SYSFLAG's host bits >> 4 (bit 0: born host IPv6, bit 1:
# store host IPv6). The host bytes are skipped except STOREHOST, kept raw; FLAG is skipped.
_SUMMARY_LAYOUTS = tuple(struct.Struct(f">iIii4xqqiq{20 if v & 1 else 8}xq{20 if v & 2 else 8}s12xi") for v in range(4))
_UNIQ_NEEDLE = PROPERTY_SEPARATOR + "UNIQ_KEY" + NAME_VALUE_SEPARATOR
_KEYS_NEEDLE = PROPERTY_SEPARATOR + "KEYS" + NAME_VALUE_SEPARATOR
_TAGS_NEEDLE = PROPERTY_SEPARATOR + "TAGS" + NAME_VALUE_SEPARATOR


@functools.lru_cache(maxsize=4096)
def msg_id_prefix(store_host_raw: bytes) -> str:
    """The store-host part of an offsetMsgId (IP + port as stored, uppercase hex), cached per host."""
    return store_host_raw.hex().upper()


@functools.lru_cache(maxsize=4096)
def decode_host_cached(raw: bytes) -> tuple[str, int]:
    """decode_host() with the result cached on the raw bytes (ipaddress is slow)."""
    return decode_host(raw)


# scan_summary()'s fields, in SUMMARY_FIELDS order.
Summary: TypeAlias = tuple[int, int, int, int, int, int, int, int, bytes, str, str | None, str | None, str | None, int]


def _summary_of(msg: Message, store_host_raw: bytes, record_crc: int) -> Summary:
    props = msg.properties
    return (
        msg.total_size,
        msg.body_crc,
        msg.queue_id,
        msg.queue_offset,
        msg.physical_offset,
        msg.sys_flag,
        msg.born_timestamp,
        msg.store_timestamp,
        store_host_raw,
        msg.topic,
        props.get("UNIQ_KEY"),
        props.get("KEYS"),
        props.get("TAGS"),
        record_crc,
    )


def _scan_summary_slow(buf: BytesLike, pos: int, check_crc: bool) -> tuple[str, int, Summary | None, str]:
    """scan() itself, for whatever the fast path did not accept: same verdicts, same reasons."""
    try:
        r = scan(buf, pos, check_crc, False)
    except IndexError as e:  # a field read past the end of a buffer that ends inside the record
        return Scan.INVALID, 0, None, f"unparseable record: {e}"
    if r.kind != Scan.MESSAGE:
        return r.kind, r.size, None, r.reason
    m = r.message
    assert m is not None  # a MESSAGE scan carries its message
    raw = encode_host(m.store_host)
    return Scan.MESSAGE, r.size, _summary_of(m, raw, zlib.crc32(memoryview(buf)[pos : pos + r.size])), ""


def scan_summary(buf: BytesLike, pos: int = 0, check_crc: bool = True) -> tuple[str, int, Summary | None, str]:
    """Like scan(), but returns (kind, size, fields, reason) with fields a tuple in SUMMARY_FIELDS order.

    Accepts exactly what scan() accepts (magic, TOTALSIZE against the field lengths, body CRC, a UTF-8
    topic); whatever the fast path does not accept is handed to scan(), so verdicts and reasons are
    scan()'s. UNIQ_KEY, KEYS and TAGS come straight from the properties text (Java's rules: the last
    segment with that name and a non-empty value); no Message, no ipaddress. `buf` may be bytes, bytearray
    or a memoryview.
    """
    avail = len(buf) - pos
    if avail < 40:
        return _scan_summary_slow(buf, pos, check_crc)
    layout = _SUMMARY_LAYOUTS[(buf[pos + 39] >> 4) & 3]
    p = pos + layout.size  # where the body starts
    if p > len(buf):
        return _scan_summary_slow(buf, pos, check_crc)
    (total, magic, crc, queue_id, queue_offset, phys, sys_flag, born_ts, store_ts, host, body_len) = layout.unpack_from(
        buf, pos
    )
    end = pos + total
    q = p + body_len  # the topic length byte
    if (
        magic != MESSAGE_MAGIC
        or total < FIXED_SIZE_IPV4
        or total > avail
        or body_len < 0
        or q + 3 > end
        or (check_crc and zlib.crc32(buf[p:q]) & 0x7FFFFFFF != crc)
    ):
        return _scan_summary_slow(buf, pos, check_crc)
    r = q + 1 + buf[q]  # PROPLEN
    if buf[q] > MAX_TOPIC_BYTES or r + 2 > end or r + 2 + ((buf[r] << 8) | buf[r + 1]) != end:
        # (a PROPLEN over 32767 is negative as Java reads it and fails TOTALSIZE in scan() too)
        return _scan_summary_slow(buf, pos, check_crc)
    try:
        topic = str(buf[q + 1 : r], "utf-8")
    except UnicodeDecodeError:
        return _scan_summary_slow(buf, pos, check_crc)
    uniq = keys = tags = None
    if r + 2 < end:
        s = f"\x02{str(buf[r + 2 : end], 'utf-8', 'replace')}\x02"
        i = s.rfind(_UNIQ_NEEDLE)
        if i >= 0:
            uniq = s[i + 10 : s.find("\x02", i + 10)]
        i = s.rfind(_KEYS_NEEDLE)
        if i >= 0:
            keys = s[i + 6 : s.find("\x02", i + 6)]
        i = s.rfind(_TAGS_NEEDLE)
        if i >= 0:
            tags = s[i + 6 : s.find("\x02", i + 6)]
        if uniq == "" or keys == "" or tags == "":
            # The last segment of that name has an empty value; Java skips it: the full parse decides.
            props = decode_properties(bytes(buf[r + 2 : end]))
            uniq, keys, tags = props.get("UNIQ_KEY"), props.get("KEYS"), props.get("TAGS")
    return (
        Scan.MESSAGE,
        total,
        (
            total,
            crc,
            queue_id,
            queue_offset,
            phys,
            sys_flag,
            born_ts,
            store_ts,
            host,
            topic,
            uniq,
            keys,
            tags,
            zlib.crc32(buf[pos:end]),
        ),
        "",
    )
