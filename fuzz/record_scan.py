"""Target: the commit-log record scanners (rmqha/broker/store/record.py): scan, scan_index, scan_summary and
iter_records, at any position, with check_crc True and False, over bytes, bytearray or memoryview.

Input: a flags byte (check_crc, fix the body CRC at the position, make TOTALSIZE end at the buffer's end,
buffer type, how to build it), two
bytes for the position, then either the raw buffer or records encoded here from fuzz-chosen fields
and then damaged (overwritten bytes, a cut end). Contract: never raises; the kind is one of the four;
MESSAGE has a size that fits between the position and the buffer's end and is at least the fixed part;
BLANK at least 8; PARTIAL only when the record does not fit; the three scanners agree on kind and size;
a walk (iter_records) makes progress and stops at the first non-message.
"""

from __future__ import annotations

import zlib

from rmqha.broker.store import record
from rmqha.broker.store.record import FIXED_SIZE_IPV4, Message, Scan
from fuzz.provider import Input

HOSTS = (("127.0.0.1", 10911), ("10.1.2.3", 0), ("::1", 9876), ("fe80::1", 65535))
KINDS = (Scan.MESSAGE, Scan.BLANK, Scan.PARTIAL, Scan.INVALID)


def build(inp: Input) -> bytearray:
    """One to three well-formed records (maybe a blank after them), then up to four damaged bytes and a cut."""
    out = bytearray()
    for _ in range(1 + inp.byte() % 3):
        topic = inp.take(1 + inp.byte() % 8).decode("utf-8", "replace") or "T"
        props = {}
        for key in ("TAGS", "KEYS", "UNIQ_KEY", "x")[: inp.byte() % 5]:
            props[key] = inp.take(inp.byte() % 6).decode("utf-8", "replace")
        msg = Message(
            topic=topic[:40],
            body=inp.take(inp.byte() % 64),
            queue_id=inp.byte(),
            flag=inp.uint(2),
            sys_flag=inp.byte() & 0x0F,
            born_host=inp.pick(HOSTS),
            store_host=inp.pick(HOSTS),
            properties={k: v for k, v in props.items()},
        )
        try:
            rec = record.encode(msg)
        except record.RecordError:
            continue
        out += rec.finish(inp.uint(2), len(out))
    if inp.flag():
        out += record.blank(8 + inp.byte()) + bytes(inp.byte() % 16)
    for _ in range(inp.byte() % 5):
        if out:
            out[inp.uint(2) % len(out)] = inp.byte()
    if inp.flag() and out:
        del out[inp.uint(2) % len(out) :]
    return out


def fix_crc(buf: bytearray, pos: int) -> None:
    """Write the right body CRC into the record at pos, if its layout can be followed that far."""
    if len(buf) - pos < 40:
        return
    sys_flag = int.from_bytes(buf[pos + 36 : pos + 40], "big")
    p = pos + 48 + (20 if sys_flag & record.FLAG_BORNHOST_V6 else 8) + 8
    p += (20 if sys_flag & record.FLAG_STOREHOST_V6 else 8) + 12
    if p + 4 > len(buf):
        return
    body_len = int.from_bytes(buf[p : p + 4], "big", signed=True)
    if 0 <= body_len <= len(buf) - p - 4:
        buf[pos + 8 : pos + 12] = (zlib.crc32(bytes(buf[p + 4 : p + 4 + body_len])) & 0x7FFFFFFF).to_bytes(4, "big")


def check_verdict(what: str, kind: str, size: int, pos: int, n: int) -> None:
    avail = n - pos
    assert kind in KINDS, f"{what}: unknown kind {kind!r}"
    if kind == Scan.MESSAGE:
        assert FIXED_SIZE_IPV4 <= size <= avail, f"{what}: MESSAGE of size {size} at {pos} in {n} bytes"
    elif kind == Scan.BLANK:
        assert size >= record.END_FILE_MIN_BLANK_LENGTH, f"{what}: BLANK of size {size}"
    elif kind == Scan.PARTIAL:
        assert (size == 0 and avail < 8) or size > avail, f"{what}: PARTIAL of size {size} with {avail} bytes"


def TestOneInput(data: bytes) -> None:
    inp = Input(data)
    flags = inp.byte()
    check_crc = bool(flags & 1)
    pos_raw = inp.uint(2)
    raw = build(inp) if flags & 4 else bytearray(inp.rest())
    pos = pos_raw % (len(raw) + 1)
    if flags & 0x20 and len(raw) - pos >= 8:
        raw[pos : pos + 4] = min(len(raw) - pos, 0x7FFFFFFF).to_bytes(4, "big")  # the record ends at the buffer's end
    if flags & 2:
        fix_crc(raw, pos)
    buf = (bytes(raw), raw, memoryview(raw))[((flags >> 3) & 3) % 3]
    n = len(buf)

    r = record.scan(buf, pos, check_crc)
    check_verdict("scan", r.kind, r.size, pos, n)
    assert (r.message is not None) == (r.kind == Scan.MESSAGE)
    kind, size, info, _ = record.scan_index(buf, pos, check_crc)
    check_verdict("scan_index", kind, size, pos, n)
    assert (kind, size) == (r.kind, r.size), f"scan_index says {kind}/{size}, scan says {r.kind}/{r.size}: {r.reason}"
    assert (info is not None) == (kind == Scan.MESSAGE)
    kind, size, _, _ = record.scan_summary(buf, pos, check_crc)
    check_verdict("scan_summary", kind, size, pos, n)
    assert (kind, size) == (r.kind, r.size), f"scan_summary says {kind}/{size}, scan says {r.kind}/{r.size}: {r.reason}"

    # A walk from pos, as recovery and dispatch do: every step moves forward and stays in the buffer.
    p = pos
    while True:
        kind, size, _, _ = record.scan_index(buf, p, check_crc)
        check_verdict("scan_index walk", kind, size, p, n)
        if kind != Scan.MESSAGE:
            break
        p += size
    last = None
    for offset, res in record.iter_records(buf[pos:], base_offset=pos, check_crc=check_crc):
        assert last is None or (last[1].kind == Scan.MESSAGE and offset == last[0] + last[1].size), (
            "iter_records went on after a non-message or skipped bytes"
        )
        check_verdict("iter_records", res.kind, res.size, offset, n)
        last = (offset, res)
