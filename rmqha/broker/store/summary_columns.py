"""record.scan_summary() over a whole window at once, compiled (numba), into column arrays.

The audit decodes every record of every commit log; record.scan_summary() costs a few microseconds of
Python per record, most of a core for ~300 MB/s. This module walks a run of valid messages in one call
of a numba-compiled function and writes their summary fields straight into numpy columns (string columns
as Arrow-style offsets + UTF-8 data), so the caller does per-window, not per-record, work.

It is a twin of record.scan_summary(), kept exactly equal by tests over damaged data
(tests/unit/store/test_summary_columns.py): the walk ACCEPTS ONLY WHAT scan_summary ACCEPTS, with the
same fields, and stops at the first record it is not sure about (anything damaged or partial, a
PHYSICALOFFSET that is not the record's position, a topic or properties that are not valid UTF-8, a
property whose last segment has an empty value...). The caller hands that record to scan_summary(), the
reference, and resumes the walk after it. The record layout is record.py's (WIRE-FACTS §6.1); the offsets
below are that layout's, read with the same rules as record._SUMMARY_LAYOUTS.

CRC-32 (java.util.zip.CRC32 = zlib.crc32) is the cost that matters: every record needs the body's CRC
(the BODYCRC check) and the whole record's (the `record_crc` that the audit compares between replicas).
Both come from one pass over the record: the body's CRC, the prefix's and the suffix's, joined with
crc32_combine arithmetic (multiplication by x^(8n) mod P). The pass folds 64 bytes at a time with the
carry-less multiply instruction (PCLMULQDQ, through an LLVM intrinsic), ~6 GB/s per core here against
~2 GB/s for zlib.crc32; CPUs without it get a software multiply (slow, still exact). Everything stays in
Python source: numba compiles it on first use and caches the machine code next to this file.

Importing this module needs numba (rmqha.pipeline.decode falls back to scan_summary() alone without it).
"""

from __future__ import annotations

import os

import numpy as np
from llvmlite import binding, ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from . import record

# numba keeps the machine code beside this file (__pycache__), or in its user-wide cache; code shipped to
# Spark executors in a zip compiles once per worker process instead.
_CACHE = os.path.isfile(__file__)

# String columns: SUMMARY_FIELDS' texts plus msg_id, the offsetMsgId (record.offset_msg_id(): store host
# bytes as stored, then PHYSICALOFFSET as 16 hex digits, uppercase), which stands in for store_host_raw.
STR_FIELDS = ("topic", "uniq_key", "keys", "tags", "msg_id")
# Integer columns, rows of COLUMNS.ints (int64 each): SUMMARY_FIELDS' numbers, in its order (size ..
# store_timestamp, record_crc).
INT_FIELDS = tuple(f for f in record.SUMMARY_FIELDS if f != "store_host_raw" and f not in STR_FIELDS)

# Why walk() stopped.
DONE = 0  # reached `lim` (the next record starts at or past it)
HANDBACK = 1  # the record at the returned position is not one the walk takes: ask scan_summary()
FULL = 2  # no room for another row, or for its strings: take() or grow, then walk again

_POLY = 0xEDB88320  # CRC-32 (IEEE 802.3), bit-reflected


def _mulmod(a: int, b: int) -> int:
    """a * b mod P for bit-reflected 32-bit polynomials (x^0 is bit 31)."""
    p = 0
    m = 1 << 31
    while m:
        if a & m:
            p ^= b
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1
        m >>= 1
    return p


def _xpow(n: int) -> int:
    """x^n mod P, reflected."""
    r, sq = 1 << 31, 1 << 30
    while n:
        if n & 1:
            r = _mulmod(r, sq)
        sq = _mulmod(sq, sq)
        n >>= 1
    return r


def _crc_tables() -> np.ndarray:
    """Slice-by-16 tables: t[k*256 + b] is the register after byte b followed by k zero bytes."""
    t = np.zeros(16 * 256, np.uint32)
    for b in range(256):
        c = b
        for _ in range(8):
            c = (c >> 1) ^ (_POLY if c & 1 else 0)
        t[b] = c
    for b in range(256):
        c = int(t[b])
        for k in range(1, 16):
            c = (c >> 8) ^ int(t[c & 0xFF])
            t[k * 256 + b] = c
    return t


def _fold_constants() -> np.ndarray:
    """Pairs for folding a 128-bit chunk forward by 64, 48, 32 and 16 bytes.

    A chunk X (16 message bytes, little-endian words lo, hi; reflected, so lo holds the higher powers) at
    d bytes before Y is worth X * x^(8d) = lo * x^(8d+64) + hi * x^(8d) mod P at Y. A carry-less product
    of two reflected 64-bit words comes out one power short (bit k means x^(126-k), not x^(127-k)), so
    the constants are x^(8d+63) and x^(8d-1) mod P, each a 32-bit reflected value in the top half of a
    64-bit word."""
    out = []
    for d in (64, 48, 32, 16):
        out += [_xpow(8 * d + 63) << 32, _xpow(8 * d - 1) << 32]
    return np.array(out, np.uint64)


def _x2n_table() -> np.ndarray:
    """x^(2^k) mod P, to build x^(8n) (crc32_combine) from the bits of 8n (n < 2^31, so k < 34)."""
    return np.array([_xpow(1 << k) for k in range(40)], np.int64)


def _have_pclmul() -> bool:
    """Whether numba compiles for this CPU and it has PCLMULQDQ (code for another CPU name or feature set
    must not use it: LLVM aborts the process when it cannot select the instruction)."""
    if os.environ.get("NUMBA_CPU_NAME", "host") != "host" or os.environ.get("NUMBA_CPU_FEATURES"):
        return False
    try:
        import platform

        return (
            platform.machine().lower() in ("x86_64", "amd64") and "+pclmul" in binding.get_host_cpu_features().flatten()
        )
    except Exception:
        return False


@intrinsic
def _load_le64(typingctx, arr, idx):
    """8 bytes of a uint8 array at idx as a little-endian uint64, one unaligned load."""
    sig = types.uint64(arr, types.intp)

    def codegen(context, builder, signature, args):
        a = context.make_array(signature.args[0])(context, builder, value=args[0])
        p = builder.bitcast(builder.gep(a.data, [args[1]]), ir.IntType(64).as_pointer())
        return builder.load(p, align=1)

    return sig, codegen


@intrinsic
def _pclmul(typingctx, a, b):
    """The 128-bit carry-less product of two uint64 as (low, high) (x86 PCLMULQDQ)."""
    sig = types.UniTuple(types.uint64, 2)(types.uint64, types.uint64)

    def codegen(context, builder, signature, args):
        i64, i32 = ir.IntType(64), ir.IntType(32)
        vt = ir.VectorType(i64, 2)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(vt, [vt, vt, ir.IntType(8)]), "llvm.x86.pclmulqdq"
        )
        zero = ir.Constant(vt, [ir.Constant(i64, 0), ir.Constant(i64, 0)])
        va = builder.insert_element(zero, args[0], ir.Constant(i32, 0))
        vb = builder.insert_element(zero, args[1], ir.Constant(i32, 0))
        r = builder.call(fn, [va, vb, ir.Constant(ir.IntType(8), 0)])
        return context.make_tuple(
            builder,
            signature.return_type,
            [builder.extract_element(r, ir.Constant(i32, 0)), builder.extract_element(r, ir.Constant(i32, 1))],
        )

    return sig, codegen


def _clmul(a, b):
    """The 128-bit carry-less product of two uint64 as (low, high): PCLMULQDQ where the CPU has it."""


@intrinsic
def _ctz64(typingctx, x):
    """Trailing zero bits of a non-zero uint64 (one instruction)."""
    sig = types.uint64(types.uint64)

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i64, [i64, ir.IntType(1)]), "llvm.cttz.i64")
        return builder.call(fn, [args[0], ir.Constant(ir.IntType(1), 1)])

    return sig, codegen


HAVE_PCLMUL = _have_pclmul()
if HAVE_PCLMUL:

    @overload(_clmul)
    def _clmul_hw(a, b):
        return lambda a, b: _pclmul(a, b)
else:

    @overload(_clmul)
    def _clmul_sw(a, b):
        def soft(a, b):
            lo = np.uint64(0)
            hi = np.uint64(0)
            for k in range(64):
                if (b >> np.uint64(k)) & np.uint64(1):
                    lo ^= a << np.uint64(k)
                    if k:
                        hi ^= a >> np.uint64(64 - k)
            return lo, hi

        return soft


_U8, _FF = np.uint64(0xFF), np.uint32(0xFF)


@njit
def _fold(lo, hi, ka, kb):
    a0, a1 = _clmul(lo, ka)
    b0, b1 = _clmul(hi, kb)
    return a0 ^ b0, a1 ^ b1


@njit
def _table16(t, lo, hi):
    """The register after the 16 bytes lo, hi starting from register 0."""
    return (
        t[15 * 256 + (lo & _U8)]
        ^ t[14 * 256 + ((lo >> np.uint64(8)) & _U8)]
        ^ t[13 * 256 + ((lo >> np.uint64(16)) & _U8)]
        ^ t[12 * 256 + ((lo >> np.uint64(24)) & _U8)]
        ^ t[11 * 256 + ((lo >> np.uint64(32)) & _U8)]
        ^ t[10 * 256 + ((lo >> np.uint64(40)) & _U8)]
        ^ t[9 * 256 + ((lo >> np.uint64(48)) & _U8)]
        ^ t[8 * 256 + (lo >> np.uint64(56))]
        ^ t[7 * 256 + (hi & _U8)]
        ^ t[6 * 256 + ((hi >> np.uint64(8)) & _U8)]
        ^ t[5 * 256 + ((hi >> np.uint64(16)) & _U8)]
        ^ t[4 * 256 + ((hi >> np.uint64(24)) & _U8)]
        ^ t[3 * 256 + ((hi >> np.uint64(32)) & _U8)]
        ^ t[2 * 256 + ((hi >> np.uint64(40)) & _U8)]
        ^ t[256 + ((hi >> np.uint64(48)) & _U8)]
        ^ t[hi >> np.uint64(56)]
    )


@njit(boundscheck=False, cache=_CACHE)
def crc32(b, i, j, crc, t, k):
    """zlib.crc32(b[i:j], crc) for a uint8 array b. t: _crc_tables(), k: _fold_constants()."""
    c = np.uint32(crc) ^ np.uint32(0xFFFFFFFF)  # the raw register
    if j - i >= 64:
        # Four 16-byte lanes, each folded 64 bytes forward per step; the initial register is
        # XORed into the first 4 message bytes (same remainder).
        l0 = _load_le64(b, i) ^ np.uint64(c)
        h0 = _load_le64(b, i + 8)
        l1 = _load_le64(b, i + 16)
        h1 = _load_le64(b, i + 24)
        l2 = _load_le64(b, i + 32)
        h2 = _load_le64(b, i + 40)
        l3 = _load_le64(b, i + 48)
        h3 = _load_le64(b, i + 56)
        i += 64
        while j - i >= 64:
            x, y = _fold(l0, h0, k[0], k[1])
            l0, h0 = x ^ _load_le64(b, i), y ^ _load_le64(b, i + 8)
            x, y = _fold(l1, h1, k[0], k[1])
            l1, h1 = x ^ _load_le64(b, i + 16), y ^ _load_le64(b, i + 24)
            x, y = _fold(l2, h2, k[0], k[1])
            l2, h2 = x ^ _load_le64(b, i + 32), y ^ _load_le64(b, i + 40)
            x, y = _fold(l3, h3, k[0], k[1])
            l3, h3 = x ^ _load_le64(b, i + 48), y ^ _load_le64(b, i + 56)
            i += 64
        x0, y0 = _fold(l0, h0, k[2], k[3])
        x1, y1 = _fold(l1, h1, k[4], k[5])
        x2, y2 = _fold(l2, h2, k[6], k[7])
        lo, hi = x0 ^ x1 ^ x2 ^ l3, y0 ^ y1 ^ y2 ^ h3
    elif j - i >= 16:
        lo, hi = _load_le64(b, i) ^ np.uint64(c), _load_le64(b, i + 8)
        i += 16
    else:
        while i < j:
            c = (c >> np.uint32(8)) ^ t[(c ^ b[i]) & _FF]
            i += 1
        return c ^ np.uint32(0xFFFFFFFF)
    while j - i >= 16:
        x, y = _fold(lo, hi, k[6], k[7])
        lo, hi = x ^ _load_le64(b, i), y ^ _load_le64(b, i + 8)
        i += 16
    c = _table16(t, lo, hi)
    while i < j:
        c = (c >> np.uint32(8)) ^ t[(c ^ b[i]) & _FF]
        i += 1
    return c ^ np.uint32(0xFFFFFFFF)


@njit
def _mulmod_nb(a, b):
    p = 0
    m = 1 << 31
    while m:
        if a & m:
            p ^= b
        if b & 1:
            b = (b >> 1) ^ _POLY
        else:
            b >>= 1
        m >>= 1
    return p


@njit
def _mulmod_fast(a, b, t):
    """_mulmod_nb(a, b) for 32-bit reflected values by one carry-less multiply: the 63-bit product,
    shifted so x^0 is bit 63, is x^0..x^31 in its high word and x^32..x^63 in its low word; the low word
    times x^32 mod P is four zero-byte steps of the CRC register (each multiplies by x^8 mod P)."""
    lo, _ = _clmul(np.uint64(a), np.uint64(b))
    p = lo << np.uint64(1)
    r = np.uint32(p & np.uint64(0xFFFFFFFF))
    for _ in range(4):
        r = (r >> np.uint32(8)) ^ t[r & _FF]
    return np.int64(np.uint32(p >> np.uint64(32)) ^ r)


@njit
def _x8n(n, x2n):
    """x^(8n) mod P."""
    r = 1 << 31
    e = 8 * n
    k = 0
    while e:
        if e & 1:
            r = _mulmod_nb(r, x2n[k])
        e >>= 1
        k += 1
    return r


@njit
def _be32(b, i):
    return (np.int64(b[i]) << 24) | (np.int64(b[i + 1]) << 16) | (np.int64(b[i + 2]) << 8) | np.int64(b[i + 3])


@njit
def _be32s(b, i):
    v = _be32(b, i)
    return v - (1 << 32) if v >= (1 << 31) else v


@njit
def _be64s(b, i):
    return np.int64((np.uint64(_be32(b, i)) << np.uint64(32)) | np.uint64(_be32(b, i + 4)))


@njit
def _utf8_ok(b, i, j):
    """Whether b[i:j] is UTF-8 as Python's strict decoder takes it (no surrogates, no overlongs,
    nothing above U+10FFFF)."""
    while i + 8 <= j and not (_load_le64(b, i) & np.uint64(0x8080808080808080)):
        i += 8  # ASCII, eight bytes at a time
    while i < j:
        c = b[i]
        if c < 0x80:
            i += 1
            continue
        if 0xC2 <= c <= 0xDF:
            n, lo, hi = 1, 0x80, 0xBF
        elif c == 0xE0:
            n, lo, hi = 2, 0xA0, 0xBF
        elif c == 0xED:
            n, lo, hi = 2, 0x80, 0x9F
        elif 0xE1 <= c <= 0xEF:
            n, lo, hi = 2, 0x80, 0xBF
        elif c == 0xF0:
            n, lo, hi = 3, 0x90, 0xBF
        elif c == 0xF4:
            n, lo, hi = 3, 0x80, 0x8F
        elif 0xF1 <= c <= 0xF3:
            n, lo, hi = 3, 0x80, 0xBF
        else:
            return False
        if i + n >= j:
            return False
        d = b[i + 1]
        if d < lo or d > hi:
            return False
        for m in range(2, n + 1):
            d = b[i + m]
            if d < 0x80 or d > 0xBF:
                return False
        i += n + 1
    return True


_ONES, _HIGHS, _TWOS = np.uint64(0x0101010101010101), np.uint64(0x8080808080808080), np.uint64(0x0202020202020202)


@njit
def _find2(b, s, end):
    """The index of the first byte 2 (the property separator) in b[s:end], or end: eight bytes at a
    time. In x = word ^ 0x02.., (x - 0x01..) & ~x & 0x80.. flags every zero byte of x and may flag bytes
    above the first zero (a borrow), never below it, so its lowest flag is exactly the first 2."""
    while s + 8 <= end:
        x = _load_le64(b, s) ^ _TWOS
        z = (x - _ONES) & ~x & _HIGHS
        if z:
            return s + np.int64(_ctz64(z) >> np.uint64(3))
        s += 8
    while s < end and b[s] != 2:
        s += 1
    return s


@njit
def _named(b, s, end):
    """Whether the segment at s starts with one of the names (plus \\x01) and where: 1 UNIQ_KEY, 2 KEYS,
    3 TAGS, 0 none. Returns (which, value start)."""
    n = end - s
    if (
        n >= 9
        and b[s] == 85
        and b[s + 1] == 78
        and b[s + 2] == 73
        and b[s + 3] == 81
        and b[s + 4] == 95
        and b[s + 5] == 75
        and b[s + 6] == 69
        and b[s + 7] == 89
        and b[s + 8] == 1
    ):  # UNIQ_KEY\x01
        return 1, s + 9
    if n >= 5 and b[s + 4] == 1:
        if b[s] == 75 and b[s + 1] == 69 and b[s + 2] == 89 and b[s + 3] == 83:  # KEYS
            return 2, s + 5
        if b[s] == 84 and b[s + 1] == 65 and b[s + 2] == 71 and b[s + 3] == 83:  # TAGS
            return 3, s + 5
    return 0, 0


_HEXD = np.frombuffer(b"0123456789ABCDEF", np.uint8).copy()
_MAGIC = record.MESSAGE_MAGIC
_FIXED = record.FIXED_SIZE_IPV4
_MAX_TOPIC = record.MAX_TOPIC_BYTES


@njit
def _put_text(b, s, e, d, col, n, fill, offs, valid):
    """Row n of string column col: b[s:e] appended to its data d, or null when s < 0."""
    if s >= 0:
        f = fill[col]
        d[f : f + e - s] = b[s:e]
        fill[col] = f + e - s
    offs[col, n + 1] = fill[col]
    valid[col, n] = s >= 0


@njit(boundscheck=False, cache=_CACHE)
def walk(b, i, lim, at, t, k, x2n, ints, offs, valid, d0, d1, d2, d3, d4, fill, n):
    """Walk valid messages from b[i] while they start before lim; return (i, n, why).

    ints (len(INT_FIELDS), rows) int64, offs (5, rows + 1) int32, valid (5, rows) uint8, d0..d4 the
    string columns' data (STR_FIELDS order), fill (5,) int64 their used bytes; n rows are used."""
    rows = ints.shape[1]
    nb = b.shape[0]
    last_len = -1
    last_pow = 0
    while i < lim:
        avail = nb - i
        if avail < _FIXED:
            return i, n, HANDBACK
        v = (b[i + 39] >> 4) & 3
        born = 20 if v & 1 else 8
        store = 20 if v & 2 else 8
        p = i + 48 + born + 8 + store + 12 + 4  # the body
        if p > nb:
            return i, n, HANDBACK
        total = _be32s(b, i)
        if _be32(b, i + 4) != _MAGIC or total < _FIXED or total > avail:
            return i, n, HANDBACK
        end = i + total
        phys = _be64s(b, i + 28)
        if phys != at + i:
            return i, n, HANDBACK
        body_len = _be32s(b, p - 4)
        if body_len < 0:
            return i, n, HANDBACK
        q = p + body_len  # TOPICLEN
        if q + 3 > end:
            return i, n, HANDBACK
        tl = np.int64(b[q])
        r = q + 1 + tl  # PROPLEN
        if tl > _MAX_TOPIC or r + 2 > end or r + 2 + ((np.int64(b[r]) << 8) | np.int64(b[r + 1])) != end:
            return i, n, HANDBACK
        body_crc = np.int64(crc32(b, p, q, 0, t, k))
        if (body_crc & 0x7FFFFFFF) != _be32s(b, i + 8):
            return i, n, HANDBACK
        if not _utf8_ok(b, q + 1, r):
            return i, n, HANDBACK
        # UNIQ_KEY, KEYS, TAGS: the last segment of each name, its value up to the next \x02.
        us = ue = ks = ke = gs = ge = -1
        s0 = r + 2
        if s0 < end:
            if not _utf8_ok(b, s0, end):
                return i, n, HANDBACK
            s = s0
            while True:
                e = _find2(b, s, end)
                which, vs = _named(b, s, e)
                if which == 1:
                    us, ue = vs, e
                elif which == 2:
                    ks, ke = vs, e
                elif which == 3:
                    gs, ge = vs, e
                if e >= end:
                    break
                s = e + 1
            if ue == us and us >= 0 or ke == ks and ks >= 0 or ge == gs and gs >= 0:
                return i, n, HANDBACK  # an empty value: Java skips it; scan_summary parses it all
        idlen = store * 2 + 16  # store host hex + 16 digits
        if (
            n >= rows
            or fill[0] + tl > d0.shape[0]
            or fill[1] + max(ue - us, 0) > d1.shape[0]
            or fill[2] + max(ke - ks, 0) > d2.shape[0]
            or fill[3] + max(ge - gs, 0) > d3.shape[0]
            or fill[4] + idlen > d4.shape[0]
        ):
            return i, n, FULL
        # The whole record's CRC: prefix, then the body's (already known), then the rest.
        c = np.int64(crc32(b, i, p, 0, t, k))
        if body_len != last_len:
            last_len = body_len
            last_pow = _x8n(body_len, x2n)
        c = _mulmod_fast(c, last_pow, t) ^ body_crc
        rec_crc = np.int64(crc32(b, q, end, c, t, k))
        ints[0, n] = total
        ints[1, n] = _be32s(b, i + 8)
        ints[2, n] = _be32s(b, i + 12)
        ints[3, n] = _be64s(b, i + 20)
        ints[4, n] = phys
        ints[5, n] = _be32s(b, i + 36)
        ints[6, n] = _be64s(b, i + 40)
        ints[7, n] = _be64s(b, i + 48 + born)
        ints[8, n] = rec_crc
        # strings
        _put_text(b, q + 1, r, d0, 0, n, fill, offs, valid)
        _put_text(b, us, ue, d1, 1, n, fill, offs, valid)
        _put_text(b, ks, ke, d2, 2, n, fill, offs, valid)
        _put_text(b, gs, ge, d3, 3, n, fill, offs, valid)
        f = fill[4]
        h = i + 48 + born + 8  # STOREHOST
        for m in range(store):
            d4[f] = _HEXD[b[h + m] >> 4]
            d4[f + 1] = _HEXD[b[h + m] & 15]
            f += 2
        for m in range(16):
            d4[f + m] = _HEXD[(phys >> (60 - 4 * m)) & 15]
        fill[4] = f + 16
        offs[4, n + 1] = fill[4]
        valid[4, n] = 1
        n += 1
        i = end
    return i, n, DONE


# -- the Python side ------------------------------------------------------------------------------

_TABLES = _crc_tables()
_FOLDS = _fold_constants()
_X2N = _x2n_table()


def zlib_crc32(data, value: int = 0) -> int:
    """zlib.crc32(data, value) by this module's CRC (for tests)."""
    b = np.frombuffer(bytes(data), np.uint8)
    return int(crc32(b, 0, len(b), value, _TABLES, _FOLDS))


class Columns:
    """Up to `rows` valid-message rows as columns: `ints` (INT_FIELDS x rows, int64) and, per STR_FIELDS,
    Arrow string buffers (int32 offsets, UTF-8 data, a validity byte per row). Filled by walk() and,
    for the records walk() hands back, by append() from a scan_summary() tuple."""

    def __init__(self, rows: int, string_bytes: int = 1 << 20):
        self.rows = rows
        self.n = 0
        self.ints = np.empty((len(INT_FIELDS), rows), np.int64)
        self.offs = np.zeros((len(STR_FIELDS), rows + 1), np.int32)
        self.valid = np.zeros((len(STR_FIELDS), rows), np.uint8)
        self.data = [np.empty(string_bytes, np.uint8) for _ in STR_FIELDS]
        self.fill = np.zeros(len(STR_FIELDS), np.int64)

    def __len__(self):
        return self.n

    @property
    def full(self) -> bool:
        return self.n >= self.rows

    def walk(self, buf, i: int, lim: int, at: int) -> tuple[int, int]:
        """Take the valid messages from buf[i] on while they start before lim; (where it stopped, why).

        buf: bytes-like (the window), at: the physical offset of buf[0]. Stops (HANDBACK) at the first
        record it does not take: not a valid message at its own position (at + index), partial in buf,
        or anything record.scan_summary() must judge; FULL when this object has no room left (take the
        rows; a record whose strings do not fit makes the string buffers grow)."""
        b = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, np.uint8)
        if b.flags.writeable:  # one compiled version (numba's readonly arrays are another type)
            b = b.view()
            b.flags.writeable = False
        while True:
            d = self.data
            i, self.n, why = walk(
                b,
                i,
                lim,
                at,
                _TABLES,
                _FOLDS,
                _X2N,
                self.ints,
                self.offs,
                self.valid,
                d[0],
                d[1],
                d[2],
                d[3],
                d[4],
                self.fill,
                self.n,
            )
            if why != FULL or self.full:
                return i, why
            self._grow()

    def _grow(self):
        """Double every string buffer (a record's strings are never longer than the record)."""
        for k, d in enumerate(self.data):
            bigger = np.empty(2 * len(d), np.uint8)
            bigger[: self.fill[k]] = d[: self.fill[k]]
            self.data[k] = bigger

    def append(self, f: tuple) -> None:
        """One row from a record.scan_summary() tuple (a record walk() handed back)."""
        n = self.n
        if n >= self.rows:
            raise IndexError("Columns is full")
        at = _SUMMARY_AT
        for k, name in enumerate(INT_FIELDS):
            self.ints[k, n] = f[at[name]]
        texts = [f[at[name]] for name in STR_FIELDS[:-1]]
        texts.append(record.msg_id_prefix(f[at["store_host_raw"]]) + f"{f[at['physical_offset']]:016X}")
        for k, text in enumerate(texts):
            raw = b"" if text is None else text.encode("utf-8")
            while self.fill[k] + len(raw) > len(self.data[k]):
                self._grow()
            start = self.fill[k]
            self.data[k][start : start + len(raw)] = np.frombuffer(raw, np.uint8)
            self.fill[k] = start + len(raw)
            self.offs[k, n + 1] = self.fill[k]
            self.valid[k, n] = text is not None
        self.n = n + 1

    def strings(self, name: str):
        """(offsets int32[n + 1], data uint8, valid bool[n]) of a string column, views of the first n rows."""
        k = STR_FIELDS.index(name)
        return self.offs[k, : self.n + 1], self.data[k][: self.fill[k]], self.valid[k, : self.n].view(bool)

    def ints_of(self, name: str):
        """The first n values of an integer column (int64)."""
        return self.ints[INT_FIELDS.index(name), : self.n]

    def rows_as_summaries(self) -> list[tuple]:
        """The rows as (scan_summary()-like) tuples with msg_id for store_host_raw: for tests."""
        cols = {name: self.ints_of(name).tolist() for name in INT_FIELDS}
        for name in STR_FIELDS:
            offs, data, valid = self.strings(name)
            raw = data.tobytes()
            cols[name] = [raw[offs[r] : offs[r + 1]].decode("utf-8") if valid[r] else None for r in range(self.n)]
        names = [("msg_id" if name == "store_host_raw" else name) for name in record.SUMMARY_FIELDS]
        return list(zip(*(cols[name] for name in names)))


_SUMMARY_AT = {name: k for k, name in enumerate(record.SUMMARY_FIELDS)}
