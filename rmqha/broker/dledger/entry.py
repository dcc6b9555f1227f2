"""The DLedger entry and index-entry byte layouts (dledger 0.3.1.2 DLedgerEntry / DLedgerEntryCoder).

All integers are big-endian (java.nio.ByteBuffer's default). One data entry::

    offset  size  field
         0     4  magic      1 (MAGIC_1, CURRENT_MAGIC); -1 marks the blank that pads a data file's end
         4     4  size       the whole entry, header included: BODY_OFFSET + len(body)
         8     8  index      0, 1, 2, ... with no gaps
        16     8  term       the leader's term when it appended the entry
        24     8  pos        the entry's physical offset in the data file list (POS_OFFSET = 24)
        32     4  channel    reserved, 0
        36     4  chainCrc   never set by 0.3.1.2, 0
        40     4  bodyCrc    never set by 0.3.1.2, 0
        44     4  bodySize   (HEADER_SIZE = 44)
        48     n  body       (BODY_OFFSET = 48): in RocketMQ's DLedgerCommitLog, one 4.x message

One index entry (INDEX_UNIT_SIZE = 32 bytes, the entry of index i at i * 32 in the index files)::

    magic int, pos long, size int, index long, term long

A data file's unused tail is a blank: magic -1, then the int length of the tail (MmapFileList.preAppend,
BLANK_MAGIC_CODE, MIN_BLANK_LEN = 8). Equality (`==`) follows DLedgerEntry.equals: size, magic,
index, term, channel, pos and body; the two CRCs are not compared.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

POS_OFFSET = 4 + 4 + 8 + 8  # 24
HEADER_SIZE = POS_OFFSET + 8 + 4 + 4 + 4  # 44
BODY_OFFSET = HEADER_SIZE + 4  # 48
INDEX_UNIT_SIZE = 32
MAGIC_1 = 1
CURRENT_MAGIC = MAGIC_1
BLANK_MAGIC_CODE = -1
MIN_BLANK_LEN = 8

_HEADER = struct.Struct(">iiqqqiiii")  # magic size index term pos channel chainCrc bodyCrc bodySize
_INDEX = struct.Struct(">iqiqq")  # magic pos size index term
# their sizes are BODY_OFFSET and INDEX_UNIT_SIZE: test_entry.py checks it

_I32 = (-(1 << 31), (1 << 31) - 1)
_I64 = (-(1 << 63), (1 << 63) - 1)


class EntryFormatError(ValueError):
    """Bytes that are not a well-formed DLedger entry or index entry, or a field out of its Java range."""


def _check(name: str, value, bounds) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise EntryFormatError(f"{name} must be an int, got {type(value).__name__}")
    if not bounds[0] <= value <= bounds[1]:
        bits = 32 if bounds is _I32 else 64
        raise EntryFormatError(f"{name}={value} does not fit a signed {bits}-bit field")


@dataclass(eq=False)
class DLedgerEntry:
    body: bytes = b""
    index: int = -1
    term: int = -1
    pos: int = -1
    magic: int = CURRENT_MAGIC
    channel: int = 0
    chain_crc: int = 0
    body_crc: int = 0
    size: int = 0  # set by compute_size(), as computeSizeInBytes does on every encode

    def compute_size(self) -> int:
        self.size = BODY_OFFSET + len(self.body)
        return self.size

    def __eq__(self, other) -> bool:  # DLedgerEntry.equals: no CRCs
        if not isinstance(other, DLedgerEntry):
            return NotImplemented
        return (
            self.size == other.size
            and self.magic == other.magic
            and self.index == other.index
            and self.term == other.term
            and self.channel == other.channel
            and self.pos == other.pos
            and bytes(self.body) == bytes(other.body)
        )

    __hash__ = None  # mutable, like the Java object's fields

    def copy(self) -> "DLedgerEntry":
        return DLedgerEntry(
            bytes(self.body),
            self.index,
            self.term,
            self.pos,
            self.magic,
            self.channel,
            self.chain_crc,
            self.body_crc,
            self.size,
        )


def encode_entry(entry: DLedgerEntry) -> bytes:
    """DLedgerEntryCoder.encode: sets entry.size, returns the entry's bytes."""
    if not isinstance(entry.body, (bytes, bytearray, memoryview)):
        raise EntryFormatError(f"body must be bytes, got {type(entry.body).__name__}")
    body = bytes(entry.body)
    size = entry.compute_size()
    _check("size", size, _I32)
    for name in ("magic", "channel", "chain_crc", "body_crc"):
        _check(name, getattr(entry, name), _I32)
    for name in ("index", "term", "pos"):
        _check(name, getattr(entry, name), _I64)
    return (
        _HEADER.pack(
            entry.magic,
            size,
            entry.index,
            entry.term,
            entry.pos,
            entry.channel,
            entry.chain_crc,
            entry.body_crc,
            len(body),
        )
        + body
    )


def decode_entry(buf, offset: int = 0, *, read_body: bool = True, strict: bool = True) -> DLedgerEntry:
    """DLedgerEntryCoder.decode of the entry at buf[offset:].

    With strict (the default) the checks DLedgerMmapFileStore.recover makes are made too: a known
    magic (a blank raises), bodySize + BODY_OFFSET == size, and the body present in full.
    Without strict, only the header must be there, as in the Java decoder.
    """
    view = memoryview(buf)
    if offset < 0 or len(view) - offset < BODY_OFFSET:
        raise EntryFormatError(f"need {BODY_OFFSET} header bytes at offset {offset}, have {max(0, len(view) - offset)}")
    magic, size, index, term, pos, channel, chain_crc, body_crc, body_size = _HEADER.unpack_from(view, offset)
    if strict:
        if magic == BLANK_MAGIC_CODE:
            raise EntryFormatError(f"blank (magic -1, {size} bytes) at offset {offset}, not an entry")
        if not MAGIC_1 <= magic <= CURRENT_MAGIC:
            raise EntryFormatError(f"unknown magic={magic}")
        if size <= HEADER_SIZE:
            raise EntryFormatError(f"size {size} should > {HEADER_SIZE}")
        if body_size + BODY_OFFSET != size:
            raise EntryFormatError(f"size {size} != {body_size} + {BODY_OFFSET}")
        if body_size < 0:
            raise EntryFormatError(f"negative bodySize {body_size}")
    entry = DLedgerEntry(b"", index, term, pos, magic, channel, chain_crc, body_crc, size)
    entry.body = None
    # the Java decoder reads the body only when bodySize < size
    if read_body and 0 <= body_size < size:
        start = offset + BODY_OFFSET
        if len(view) - start < body_size:
            raise EntryFormatError(f"body of {body_size} bytes truncated to {len(view) - start}")
        entry.body = bytes(view[start : start + body_size])
    return entry


def read_pos(buf, offset: int = 0) -> int:
    """DLedgerEntryCoder.getPos."""
    return struct.unpack_from(">q", buf, offset + POS_OFFSET)[0]


def set_pos(buf: bytearray, pos: int, offset: int = 0) -> None:
    """DLedgerEntryCoder.setPos: patch the pos of an encoded entry in place."""
    _check("pos", pos, _I64)
    struct.pack_into(">q", buf, offset + POS_OFFSET, pos)


def set_index_term(buf: bytearray, index: int, term: int, magic: int, offset: int = 0) -> None:
    """DLedgerEntryCoder.setIndexTerm: patch magic, index and term (size is left alone)."""
    _check("magic", magic, _I32)
    _check("index", index, _I64)
    _check("term", term, _I64)
    struct.pack_into(">i", buf, offset, magic)
    struct.pack_into(">qq", buf, offset + 8, index, term)


@dataclass(frozen=True)
class IndexEntry:
    magic: int
    pos: int
    size: int
    index: int
    term: int


def encode_index(pos: int, size: int, magic: int, index: int, term: int) -> bytes:
    """DLedgerEntryCoder.encodeIndex (note the argument order, as in Java; the bytes are magic first)."""
    _check("magic", magic, _I32)
    _check("size", size, _I32)
    for name, value in (("pos", pos), ("index", index), ("term", term)):
        _check(name, value, _I64)
    return _INDEX.pack(magic, pos, size, index, term)


def decode_index(buf, offset: int = 0) -> IndexEntry:
    if offset < 0 or len(buf) - offset < INDEX_UNIT_SIZE:
        raise EntryFormatError(
            f"need {INDEX_UNIT_SIZE} index bytes at offset {offset}, have {max(0, len(buf) - offset)}"
        )
    return IndexEntry(*_INDEX.unpack_from(buf, offset))


def index_entry_for(entry: DLedgerEntry) -> bytes:
    """The index entry the store writes for an appended entry."""
    return encode_index(entry.pos, entry.compute_size(), entry.magic, entry.index, entry.term)


def encode_blank(length: int) -> bytes:
    """The blank MmapFileList.preAppend writes over a data file's tail that the next entry does not fit."""
    if length < MIN_BLANK_LEN:
        raise EntryFormatError(f"blank {length} should ge {MIN_BLANK_LEN}")
    _check("length", length, _I32)
    return struct.pack(">ii", BLANK_MAGIC_CODE, length) + bytes(length - 8)


def is_blank(buf, offset: int = 0) -> bool:
    return len(buf) - offset >= 4 and struct.unpack_from(">i", buf, offset)[0] == BLANK_MAGIC_CODE
