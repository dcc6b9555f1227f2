"""Mixed DLedger groups: our nodes and Apache RocketMQ 4.9.x's in one three-node group (issue 35).

`make test-apache ROCKETMQ_HOME=<dir>`; skipped without a 4.9.x distribution. Two groups on the local
backend: two of ours with one 4.9 node, and one of ours with two 4.9 nodes (and 4.9's name server).

Leadership is moved on purpose, across implementations both ways (ours -> 4.9, then 4.9 -> ours, or the
reverse), by crashes alone, and deterministically: Raft's vote rule makes the one node whose log is longer
than the other survivor's the only one that can win. A move from leader F to node T (the third node O):

1. kill O; acknowledged sends to F are on F and T (the quorum), so T's log is ahead of O's;
2. kill T; sends to F now are appended on F alone and cannot be acknowledged (no quorum);
3. kill F; start T and O: T wins (O's log is behind T's); once T is master (a 4.9 node: brokerId 0, not
   its file's role before its first role event: docs/dledger.md, 4.9.8 takes sends then and can give a
   taken queue offset), acknowledged sends to T, more entries than F's unacknowledged tail, written
   where that tail was;
4. start F: it must truncate its tail (entries of its old term) and take T's entries.

After each move (and before the first) the test waits until the three nodes hold the same log, and
checks, from the files: the DLedger index files (dledger-<id>/index: index, term, position, size of each
entry) and data files (dledger-<id>/data) are byte-identical up to the end of the log, every entry of it
committed by then (every send acknowledged or its leader gone); the topic's consume-queue files
(consumequeue/<topic>/<queue>/) are identical and hold one unit per message; every acknowledged send is
in the log, once; none of F's unacknowledged tail is (F did hold it: read from F's files after the kill).
"""

from __future__ import annotations

import os
import socket
import struct
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from rmqha.broker.dledger.entry import INDEX_UNIT_SIZE, decode_entry, decode_index
from rmqha.broker.remoting.codec import decode_frame, encode
from rmqha.broker.store import record
from rmqha.cluster.implementations import parse_choice, unavailable_reason
from rmqha.cluster.requests import props, send_v1
from rmqha.rmqkit import RocketMQCluster

HOME = os.environ.get("ROCKETMQ_HOME")
WHY = "ROCKETMQ_HOME is not set: run `make test-apache ROCKETMQ_HOME=<dir of an Apache RocketMQ 4.9.x distribution>`"
if HOME:
    WHY = unavailable_reason(parse_choice("apache", home=HOME)) or ""

pytestmark = [
    pytest.mark.integration,
    pytest.mark.apache,
    pytest.mark.timeout(600),
    pytest.mark.skipif(bool(WHY), reason=WHY),
]

GROUP = "RaftNode00"
TOPIC = "MixedDLedger"
QUEUES = 4
CQ_UNIT = 20
JVM_S = 180.0  # a 4.9 broker's start (JVM, store recovery) on a loaded 2-core machine
ELECTION_S = 180.0  # the survivors' election after starts of up to JVM_S
SYNC_S = 120.0
ACKED_PER_STEP = 6  # acknowledged sends in each step of a move
TAIL = 3  # unacknowledged sends to the isolated leader


def call(addr: str, cmd, timeout: float):
    """One request on a fresh connection; the response (raises OSError/TimeoutError when none came)."""
    host, _, port = addr.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(encode(cmd))
        head = b""
        while len(head) < 4:
            chunk = s.recv(4 - len(head))
            if not chunk:
                raise ConnectionError(f"{addr} closed the connection")
            head += chunk
        (n,) = struct.unpack(">I", head)
        body = b""
        while len(body) < n:
            chunk = s.recv(n - len(body))
            if not chunk:
                raise ConnectionError(f"{addr} closed the connection mid-reply")
            body += chunk
    return decode_frame(body)


class Sends:
    """Every send of the test by its UNIQ_KEY: the acknowledged ones (SEND_OK) and the rest."""

    def __init__(self):
        self.n = 0
        self.acked: set[str] = set()
        self.unacked: set[str] = set()
        self.lock = threading.Lock()

    def one(self, addr: str, timeout: float = 10.0) -> bool:
        with self.lock:
            n, self.n = self.n, self.n + 1
        key = f"MX{n:05d}"
        cmd = send_v1(TOPIC, key.encode(), n % QUEUES, props(TAGS="mixed", KEYS=key, UNIQ_KEY=key, WAIT="true"))
        try:
            ok = call(addr, cmd, timeout).code == 0
        except OSError:
            ok = False
        with self.lock:
            (self.acked if ok else self.unacked).add(key)
        return ok

    def acked_to(self, h, node: str, count: int) -> None:
        """count acknowledged sends to node (a send not acknowledged is sent again under a new key)."""
        for _ in range(count):
            h.wait_until(lambda: self.one(h.addr(node)), SYNC_S, f"an acknowledged send to {node}", node=node)


def self_id(node: str) -> str:
    return node.rpartition("-")[2]  # broker-n0 -> n0 (compose/dledger's dLegerSelfId)


def mapped_files(folder: Path) -> list[tuple[int, Path]]:
    """(start offset, path) of a mapped-file queue's files (20-digit names), in order."""
    return sorted((int(p.name), p) for p in folder.iterdir() if p.name.isdigit()) if folder.is_dir() else []


def read_units(folder: Path, unit: int) -> bytes:
    """The files of a mapped-file queue read as one, up to the first all-zero unit (preallocated, never
    written) or a gap."""
    out = bytearray()
    for start, path in mapped_files(folder):
        if start != len(out):
            break
        with open(path, "rb") as fh:
            while True:
                chunk = fh.read(unit * 2048)
                n = 0
                while n + unit <= len(chunk) and chunk[n : n + unit] != bytes(unit):
                    n += unit
                out += chunk[:n]
                if n < len(chunk) or not chunk:
                    return bytes(out)
    return bytes(out)


@dataclass
class Log:
    index: bytes  # the index files' units of entries 0..end
    data: bytes  # the data files' bytes up to the end of entry `end`
    messages: list  # (UNIQ_KEY, topic) of each entry's record, in log order
    terms: list  # each entry's term


def read_log(store: Path, sid: str) -> Log:
    """A node's DLedger log from its files: the index units while each names its own index, then the
    data they point at (decoded: each entry's body is one classic record)."""
    d = store / f"dledger-{sid}"
    units = read_units(d / "index", INDEX_UNIT_SIZE)
    entries = []
    for i in range(len(units) // INDEX_UNIT_SIZE):
        e = decode_index(units, i * INDEX_UNIT_SIZE)
        if e.index != i:
            break
        entries.append(e)
    index = units[: len(entries) * INDEX_UNIT_SIZE]
    end = entries[-1].pos + entries[-1].size if entries else 0
    data = bytearray()
    for start, path in mapped_files(d / "data"):
        if start >= end:
            break
        with open(path, "rb") as fh:
            data += fh.read(end - start)
    data = bytes(data)
    messages, terms = [], []
    for e in entries:
        entry = decode_entry(data, e.pos)
        assert (entry.index, entry.term, entry.size) == (e.index, e.term, e.size), f"{d}: entry {e.index}"
        r = record.scan(entry.body, 0)
        assert r.kind == record.Scan.MESSAGE, f"{d}: entry {e.index}'s body is no record ({r.reason})"
        messages.append((r.message.uniq_key, r.message.topic))
        terms.append(e.term)
    return Log(index, data, messages, terms)


def consume_queues(store: Path) -> list[bytes]:
    return [read_units(store / "consumequeue" / TOPIC / str(q), CQ_UNIT) for q in range(QUEUES)]


def same_everywhere(h, nodes: list[str]) -> Log:
    """The log every node holds, once all hold the same one (index, data, consume queues); raises else."""
    logs = {n: read_log(h.store_path(n), self_id(n)) for n in nodes}
    first, ref = nodes[0], logs[nodes[0]]
    for n in nodes[1:]:
        lg = logs[n]
        if len(lg.index) != len(ref.index):
            raise AssertionError(
                f"entries: {first} {len(ref.index) // INDEX_UNIT_SIZE}, {n} {len(lg.index) // INDEX_UNIT_SIZE}"
            )
        if lg.index != ref.index:
            raise AssertionError(f"index files of {first} and {n} differ")
        if lg.data != ref.data:
            raise AssertionError(f"data files of {first} and {n} differ ({len(ref.data)} bytes)")
    messages = sum(1 for _, topic in ref.messages if topic == TOPIC)
    cqs = {n: consume_queues(h.store_path(n)) for n in nodes}
    units = sum(len(b) for b in cqs[first]) // CQ_UNIT
    if units != messages:
        raise AssertionError(f"{first}'s consume queues hold {units} units, its log {messages} messages")
    for n in nodes[1:]:
        if cqs[n] != cqs[first]:
            raise AssertionError(f"consume queues of {first} and {n} differ")
    return ref


def check(h, sends: Sends, gone: set[str] = frozenset()) -> Log:
    nodes = list(h.nodes)
    log = h.wait_until(
        lambda: same_everywhere(h, nodes), SYNC_S, "the same log, index and consume queues on every node"
    )
    keys = [k for k, topic in log.messages if topic == TOPIC]
    assert len(keys) == len(set(keys)), "a message stored twice"
    missing = sends.acked - set(keys)
    assert not missing, f"acknowledged sends not stored: {sorted(missing)}"
    back = gone & set(keys)
    assert not back, f"the old leader's unacknowledged tail was not truncated: {sorted(back)}"
    return log


def move(h, sends: Sends, frm: str, to: str) -> dict:
    """Leadership from frm to `to` by crashes (module docstring); returns what it saw."""
    (other,) = [n for n in h.nodes if n not in (frm, to)]
    h.kill(other)
    sends.acked_to(h, frm, ACKED_PER_STEP)  # on frm and `to`, the quorum
    h.kill(to)
    before = len(read_log(h.store_path(frm), self_id(frm)).messages)
    unacked = set(sends.unacked)
    with ThreadPoolExecutor(TAIL) as pool:  # at once: frm is leader until it misses its followers' heartbeats
        addr = h.addr(frm)
        oks = list(pool.map(lambda _: sends.one(addr, timeout=5.0), range(TAIL)))
    assert not any(oks), f"{frm} acknowledged a send with both followers dead"
    tried = sends.unacked - unacked
    h.wait_until(
        lambda: len(read_log(h.store_path(frm), self_id(frm)).messages) > before,
        30,
        f"{frm} appends a send it cannot replicate",
        node=frm,
    )
    h.kill(frm)
    tail = {k for k, topic in read_log(h.store_path(frm), self_id(frm)).messages[before:] if topic == TOPIC}
    assert tail and tail <= tried, f"{frm}'s unreplicated tail: {sorted(tail)}"
    h.start(to, wait=False)
    h.start(other, wait=False)
    for n in (to, other):
        h.wait_up(n, JVM_S)
    # only `to` can win: `other`'s log is behind (a 4.9 node answers as master until its first election,
    # so a claim of `other`'s is not taken for a win: it would keep `to` from leading, and this times out)
    h.wait_until(lambda: h.dledger_leader(GROUP) == to, ELECTION_S, f"{to} elected (the longer log)")
    sends.acked_to(h, to, len(tail) + ACKED_PER_STEP)  # over where frm's tail was
    h.start(frm, timeout=JVM_S)
    return {"from": frm, "to": to, "tail": tail}


def kinds(h) -> dict[str, str]:
    return {n: h.node(n)["implementation"] for n in h.nodes}


@pytest.mark.parametrize(
    "spec,expect",
    [
        ("ours,broker-n2=apache", ["ours", "ours", "apache"]),
        ("apache,broker-n0=ours", ["ours", "apache", "apache"]),
    ],
    ids=["two-ours-one-apache", "one-ours-two-apache"],
)
def test_mixed_dledger_group_moves_leadership_across_implementations(tmp_path, spec, expect):
    with RocketMQCluster("dledger", "local", broker=spec, rocketmq_home=HOME, run_root=tmp_path) as c:
        h = c.handle
        impl = kinds(h)
        assert [impl[n] for n in h.nodes] == expect
        # on the leader (4.9 and ours refuse it on a slave); the followers copy it from their master, and a
        # leader without it creates it from TBW102 at the first send
        h.create_topic(TOPIC, queues=QUEUES)
        sends = Sends()
        first = h.wait_until(lambda: h.dledger_leader(GROUP), ELECTION_S, "a DLedger leader")
        sends.acked_to(h, first, ACKED_PER_STEP)
        check(h, sends)
        gone: set[str] = set()
        leader, seen = first, []
        for _ in range(2):  # to the other implementation, then back
            to = next(n for n in h.nodes if impl[n] != impl[leader])
            moved = move(h, sends, leader, to)
            gone |= moved["tail"]
            log = check(h, sends, gone)
            seen.append((impl[leader], impl[to]))
            leader = to
        assert sorted(seen) == [("apache", "ours"), ("ours", "apache")], seen
        assert len(set(log.terms)) >= 3, f"terms in the log: {sorted(set(log.terms))}"
        assert sends.acked and len(gone) >= 2
