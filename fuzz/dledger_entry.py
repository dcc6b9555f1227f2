"""Target: DLedger's entries and index entries read back from disk (rmqha/broker/dledger/entry.py, and the
file store's recovery in file_store.py).

Input: a mode byte, then
  0: bytes and an offset: decode_entry (strict and not) and decode_index of whatever is there
  1: a store directory written from the input: 1-3 data files of 512 bytes, 1-2 index files of 512
     (each a 2-byte length, then that many bytes, the rest zeros; the first data file may start at a
     later offset), then the `checkpoint` and `currterm` texts (a length byte each); FileStore opens it
Contract:
  0: EntryFormatError or an entry; a strict decode re-encodes to the same bytes, an index entry too.
  1: opening recovers, never raises (a data file is always the configured size here); what it keeps is
     a log: get() reads every index from begin to end, indexes follow one another, terms never fall,
     the committed index is within it. load_term returns a term a node can use and write again, or
     raises ValueError (a currterm file that is not a number: the node must not guess a vote). An
     entry appended then, and the store reopened, reads back the same log.
"""

from __future__ import annotations

import os
import shutil
import tempfile

from rmqha.broker.dledger.entry import (
    INDEX_UNIT_SIZE,
    EntryFormatError,
    decode_entry,
    decode_index,
    encode_entry,
    encode_index,
    read_pos,
)
from rmqha.broker.dledger.node import MAX_TERM
from rmqha.broker.dledger.file_store import CHECK_POINT_FILE, TERM_PERSIST_FILE, FileStore, offset_to_file_name
from fuzz.provider import Input

DATA_FILE = 512
INDEX_FILE = 32 * 16
SMOKE_INPUTS = 600  # tests/unit/test_fuzz_smoke.py: half of them write and reopen a store twice
SHM = "/dev/shm" if os.path.isdir("/dev/shm") else None


def decode(inp: Input) -> None:
    offset = inp.byte() % 64
    buf = inp.rest()
    try:
        e = decode_entry(buf, offset)
    except EntryFormatError:
        pass
    else:
        assert encode_entry(e.copy()) == buf[offset : offset + e.size], "a strict decode does not re-encode"
    try:
        e = decode_entry(buf, offset, read_body=bool(offset & 1), strict=False)
    except EntryFormatError:
        pass
    else:
        assert e.body is None or len(e.body) < e.size  # bodySize bytes, read only when below size
        assert read_pos(buf, offset) == e.pos
    try:
        ie = decode_index(buf, offset)
    except EntryFormatError:
        return
    assert encode_index(ie.pos, ie.size, ie.magic, ie.index, ie.term) == buf[offset : offset + INDEX_UNIT_SIZE]


def _file(path: str, content: bytes, size: int) -> None:
    with open(path, "wb") as f:
        f.write(content[:size].ljust(size, b"\0"))


def check_store(store: FileStore) -> list:
    entries = store.entries()
    for prev, e in zip(entries, entries[1:]):
        assert e.index == prev.index + 1, f"indexes {prev.index} then {e.index}"
        assert e.term >= prev.term, f"terms fall: {prev.term} then {e.term}"
    if entries:
        assert (entries[0].index, entries[-1].index) == (store.begin_index, store.end_index)
        assert store.end_term == entries[-1].term
    else:
        assert store.end_index == -1
    assert -1 <= store.committed_index <= store.end_index
    return entries


def recovery(inp: Input) -> None:
    n_data, n_index = inp.byte() % 3 + 1, inp.byte() % 2 + 1
    first = inp.byte() % 4 * DATA_FILE
    datas = [inp.take(inp.uint(2)) for _ in range(n_data)]
    indexes = [inp.take(inp.uint(2)) for _ in range(n_index)]
    checkpoint, currterm = inp.take(inp.byte()), inp.take(inp.byte())
    folder = tempfile.mkdtemp(prefix="fuzz-dledger-entry-", dir=SHM)
    try:
        base = os.path.join(folder, "dledger-n0")
        os.makedirs(os.path.join(base, "data"))
        os.makedirs(os.path.join(base, "index"))
        for i, content in enumerate(datas):
            _file(os.path.join(base, "data", offset_to_file_name(first + i * DATA_FILE)), content, DATA_FILE)
        for i, content in enumerate(indexes):
            _file(os.path.join(base, "index", offset_to_file_name(i * INDEX_FILE)), content, INDEX_FILE)
        for name, text in ((CHECK_POINT_FILE, checkpoint), (TERM_PERSIST_FILE, currterm)):
            if text:
                with open(os.path.join(base, name), "wb") as f:
                    f.write(text)
        store = FileStore(folder, "n0", data_file_size=DATA_FILE, index_file_size=INDEX_FILE)
        try:
            entries = check_store(store)
            try:
                term, vote = store.load_term()
            except ValueError:
                term, vote = None, None
            if term is not None:
                assert 0 <= term <= MAX_TERM, f"currterm {term} loaded"
                store.persist_term(term, vote)
                assert store.load_term() == (term, vote), "currterm does not read back as written"
            added = store.append_as_leader(b"fuzz", max(store.end_term, term or 0, 0))
            assert store.get(added.index) == added
            entries = check_store(store)
        finally:
            store.release()
        again = FileStore(folder, "n0", data_file_size=DATA_FILE, index_file_size=INDEX_FILE)
        try:
            assert check_store(again) == entries, "a reopened store does not hold the same entries"
        finally:
            again.release()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


MODES = (decode, recovery)


def TestOneInput(data: bytes) -> None:
    inp = Input(data)
    MODES[inp.byte() % len(MODES)](inp)
