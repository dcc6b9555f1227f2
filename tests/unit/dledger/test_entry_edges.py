"""entry.py's edges (the mutation run of rmqha.broker.dledger.entry showed them unpinned): every value Java
cannot hold is an EntryFormatError naming its width, never a struct.error; the non-strict decoder's
body rule; offsets; the index entry and the blank."""

import struct

import pytest

from rmqha.broker.dledger.entry import (
    DLedgerEntry,
    EntryFormatError,
    decode_entry,
    decode_index,
    encode_blank,
    encode_entry,
    encode_index,
    index_entry_for,
    is_blank,
    read_pos,
    set_index_term,
    set_pos,
)

pytestmark = pytest.mark.fast

I32_PAST, I64_PAST = 1 << 31, 1 << 63


def raw(body=b"hi", **kw):
    return encode_entry(DLedgerEntry(body=body, index=kw.get("index", 3), term=2, pos=kw.get("pos", 100)))


def test_the_error_names_the_fields_width():
    with pytest.raises(EntryFormatError, match="magic=2147483648 does not fit a signed 32-bit field"):
        encode_entry(DLedgerEntry(b"", 0, 0, 0, magic=I32_PAST))
    with pytest.raises(EntryFormatError, match="index=9223372036854775808 does not fit a signed 64-bit field"):
        encode_entry(DLedgerEntry(b"", I64_PAST, 0, 0))


def test_equality_with_something_else_is_not_implemented():
    e = DLedgerEntry(b"x", 1, 1, 0)
    assert e.__eq__(5) is NotImplemented
    assert (e == 5) is False and (e != 5) is True


def test_copy_is_equal_and_separate():
    e = DLedgerEntry(bytearray(b"x"), 1, 2, 3, chain_crc=7)
    c = e.copy()
    assert c == e and c is not e and c.chain_crc == 7 and type(c.body) is bytes
    e.body[0] = 0x79
    assert c.body == b"x"


def test_a_size_past_int32_is_refused_clearly():
    class Huge(DLedgerEntry):
        def compute_size(self):  # a 2 GiB body without allocating one
            self.size = I32_PAST
            return self.size

    with pytest.raises(EntryFormatError, match="size=2147483648"):
        encode_entry(Huge(b"", 0, 0, 0))


def test_a_header_past_the_buffers_end_at_an_offset_is_refused():
    with pytest.raises(EntryFormatError, match="need 48 header bytes at offset 20, have 40"):
        decode_entry(bytes(60), offset=20)
    with pytest.raises(EntryFormatError, match="need 48"):
        decode_entry(raw(), offset=-1)


def test_without_read_body_there_is_no_body():
    e = decode_entry(raw(), read_body=False)
    assert e.body is None and e.size == 50 and e.index == 3


def test_an_empty_body_reads_as_empty():
    assert decode_entry(raw(b"")).body == b""
    assert decode_entry(raw(b""), strict=False).body == b""


def test_the_non_strict_decoder_reads_the_body_only_when_body_size_is_below_size():
    header = struct.pack(">iiqqqiiii", 1, 10, 0, 0, 0, 0, 0, 0, 10) + bytes(10)  # bodySize == size
    assert decode_entry(header, strict=False).body is None
    header = struct.pack(">iiqqqiiii", 1, 10, 0, 0, 0, 0, 0, 0, 9) + b"abcdefghij"
    assert decode_entry(header, strict=False).body == b"abcdefghi"
    header = struct.pack(">iiqqqiiii", 1, 10, 0, 0, 0, 0, 0, 0, -1)
    assert decode_entry(header, strict=False).body is None


def test_read_pos_at_the_start_and_at_an_offset():
    assert read_pos(raw(pos=4096)) == 4096
    assert read_pos(b"\0" * 5 + raw(pos=77), 5) == 77


def test_set_pos_refuses_a_pos_past_int64():
    buf = bytearray(raw())
    with pytest.raises(EntryFormatError, match="pos="):
        set_pos(buf, I64_PAST)
    assert buf == raw()


def test_set_index_term_patches_magic_index_and_term():
    buf = bytearray(raw())
    set_index_term(buf, 9, 4, 2)
    assert struct.unpack_from(">iiqq", buf) == (2, 50, 9, 4)
    for kw, name in (
        (dict(magic=I32_PAST), "magic"),
        (dict(index=I64_PAST), "index"),
        (dict(term=-I64_PAST - 1), "term"),
    ):
        args = dict(index=1, term=1, magic=1) | kw
        with pytest.raises(EntryFormatError, match=f"{name}="):
            set_index_term(buf, **args)
    assert struct.unpack_from(">iiqq", buf) == (2, 50, 9, 4)


@pytest.mark.parametrize(
    "args, name",
    [
        ((0, 48, I32_PAST, 0, 0), "magic"),
        ((0, I32_PAST, 1, 0, 0), "size"),
        ((I64_PAST, 48, 1, 0, 0), "pos"),
        ((0, 48, 1, -I64_PAST - 1, 0), "index"),
        ((0, 48, 1, 0, I64_PAST), "term"),
    ],
)
def test_encode_index_refuses_values_java_cannot_hold(args, name):
    with pytest.raises(EntryFormatError, match=f"{name}="):
        encode_index(*args)


def test_decode_index_bounds_and_offset():
    unit = encode_index(4096, 50, 1, 7, 3)
    assert len(unit) == 32
    ie = decode_index(unit)
    assert (ie.magic, ie.pos, ie.size, ie.index, ie.term) == (1, 4096, 50, 7, 3)
    assert decode_index(b"\0" * 8 + unit, 8) == ie
    for buf, offset in ((unit[:31], 0), (unit, -1), (bytes(40), 20)):
        with pytest.raises(EntryFormatError, match="index bytes"):
            decode_index(buf, offset)


def test_index_entry_for_computes_the_size():
    e = DLedgerEntry(b"abc", index=5, term=2, pos=640)
    assert index_entry_for(e) == encode_index(640, 51, 1, 5, 2) and e.size == 51


def test_the_blank_bytes():
    assert encode_blank(16) == b"\xff\xff\xff\xff\x00\x00\x00\x10" + bytes(8)
    assert encode_blank(8) == b"\xff\xff\xff\xff\x00\x00\x00\x08"
    with pytest.raises(EntryFormatError, match="should ge 8"):
        encode_blank(7)
    with pytest.raises(EntryFormatError, match="length="):
        encode_blank(I32_PAST)


def test_is_blank():
    assert is_blank(encode_blank(8)) is True
    assert is_blank(b"\xff" * 4) is True
    assert is_blank(b"\0" + b"\xff" * 4, 1) is True
    assert is_blank(b"\xff" * 3) is False
    assert is_blank(b"\xff\xff\xff\xff\0", 3) is False
    assert is_blank(raw()) is False
