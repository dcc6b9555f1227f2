"""A broker with the fast path and one without, fed the same bytes: the same replies, byte for byte, and
the same commit log, consume queues and index on disk.

The frames mix plain sends (which the fast path stores) with every kind it must leave to the Python
path (new topics, retries into a DLQ, delays, half messages, batches, refusals, oneway, other codes),
cut into reads of any size, across commit-log files, on an ASYNC_MASTER and a SYNC_MASTER, and with a
disk that fills up part way.
"""

from __future__ import annotations

import os
import random

import pytest
from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport

from rmqha.broker import fastpath
from rmqha.broker.remoting.codec import FrameDecoder, encode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.remoting.protocol import RemotingProtocol
from rmqha.broker.store import mapped_file
from tests.unit.processors.harness import Broker, props, send_v1, send_v2

pytestmark = pytest.mark.skipif(not fastpath.available(), reason="the compiled accelerator is not built here")


def request_mix(n: int, seed: int = 1) -> list[bytes]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        body = bytes([i % 251]) * rng.choice([0, 10, 700, 3000])
        p = props(TAGS=f"t{i % 3}", KEYS=f"k{i} k{i + 1}", UNIQ_KEY=f"U{i:08X}", WAIT="true")
        kind = rng.random()
        if kind < 0.55:
            cmd = send_v2(topic="TopicTest", queue_id=i % 4, body=body, properties=p)
        elif kind < 0.65:
            cmd = send_v1(topic="TopicTest", queue_id=i % 4, body=body, properties=p)
        elif kind < 0.70:
            cmd = send_v2(topic="TopicTest", queue_id=1, body=body, properties=props(WAIT="false", KEYS="w"))
        elif kind < 0.74:
            cmd = send_v2(topic=f"New{i % 5}", queue_id=0, body=body, properties=p)
        elif kind < 0.77:
            cmd = send_v2(topic="%RETRY%CG", queue_id=0, body=body, properties=p, reconsumeTimes=rng.choice([0, 20]))
        elif kind < 0.80:
            cmd = send_v2(topic="TopicTest", queue_id=2, body=body, properties=props(DELAY="2", KEYS="d"))
        elif kind < 0.82:
            cmd = send_v2(topic="TopicTest", queue_id=2, body=body, properties=props(TRAN_MSG="true", KEYS="h"))
        elif kind < 0.84:
            cmd = send_v2(topic="TopicTest", queue_id=0, body=body * 3, properties=p)  # over maxMessageSize
        elif kind < 0.86:
            cmd = send_v2(topic="TopicTest", queue_id=9, body=body, properties=p)  # queue id out of range
        elif kind < 0.88:
            cmd = send_v2(topic="bad topic!", queue_id=0, body=body, properties=p)
        elif kind < 0.90:
            cmd = send_v2(topic="TopicTest", queue_id=0, body=body, properties=p)
            cmd.flag = 2  # oneway: stored, not answered
        elif kind < 0.92:
            cmd = RemotingCommand.request(999)  # not a code the broker serves: answered so
        elif kind < 0.94:
            cmd = send_v2(topic="TopicTest", queue_id=3, body=body, properties=p, sysFlag=4)  # a prepared type
        else:
            cmd = send_v2(topic="TopicTest", queue_id=3, body=body, properties=p, sysFlag=1 | 2, flag=5)
        cmd.opaque = i + 1
        out.append(encode(cmd))
    return out


def chunks_of(data: bytes, rng: random.Random | None) -> list[bytes]:
    if rng is None:
        return [data]
    out, i = [], 0
    while i < len(data):
        n = rng.randint(1, 9000)
        out.append(data[i : i + n])
        i += n
    return out


def by_opaque(replies: bytes) -> dict[int, RemotingCommand]:
    out = {}
    for cmd in FrameDecoder().feed(replies):
        assert cmd.opaque not in out
        out[cmd.opaque] = cmd
    return out


def store_files(root: str) -> dict[str, bytes]:
    out = {}
    store = os.path.join(root, "store")
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            if (
                rel.split(os.sep)[0] in ("commitlog", "consumequeue", "index")
                or "commitlog" in rel
                or "consumequeue" in rel
                or os.sep + "index" + os.sep in os.sep + rel
            ):
                with open(path, "rb") as fh:
                    out[rel] = fh.read().rstrip(b"\0")
    assert out, f"no store files under {root} ({store})"
    return out


def serve(root, fast: bool, frames: list[bytes], rng: random.Random | None, **overrides):
    overrides.setdefault("mappedFileSizeCommitLog", 1 << 18)
    # small index files: several of them fill up and roll over in one test (and the default 400 MB
    # file would be most of the test's time to compare)
    overrides.setdefault("maxHashSlotNum", 97)
    overrides.setdefault("maxIndexNum", 400)
    b = Broker(root, sendFastPath=str(fast).lower(), maxMessageSize=5000, **overrides)
    proto = RemotingProtocol(b.server.registry, b.clock)
    transport = StringTransport(peerAddress=IPv4Address("TCP", "10.1.2.3", 40000))
    proto.makeConnection(transport)
    for chunk in chunks_of(b"".join(frames), rng):
        proto.dataReceived(chunk)
        b.clock.advance(0)
    b.clock.advance(5)  # SYNC_MASTER waits end (no slave: at once; else their timeout)
    b.clock.advance(0)
    replies = transport.value()
    b.stop()
    return replies, store_files(str(root))


def numbered_sends(n: int) -> list[bytes]:
    out = []
    for i in range(n):
        cmd = send_v2(topic="TopicTest", queue_id=i % 4, body=bytes(900), properties=props(KEYS=f"k{i}", WAIT="true"))
        cmd.opaque = i + 1
        out.append(encode(cmd))
    return out


@pytest.fixture
def encode_calls(monkeypatch):
    calls = []
    real = fastpath.native.encode_records

    def counting(*args):
        out = real(*args)
        calls.append(out[1])
        return out

    monkeypatch.setattr(fastpath.native, "encode_records", counting)
    return calls


@pytest.mark.parametrize("cut", [None, 3], ids=["one-read", "random-reads"])
@pytest.mark.parametrize("role", ["ASYNC_MASTER", "SYNC_MASTER"])
def test_fast_and_python_paths_store_and_answer_the_same(tmp_path, encode_calls, role, cut):
    frames = request_mix(450, seed=cut or 0)
    slow = serve(tmp_path / "slow", False, frames, random.Random(cut) if cut else None, brokerRole=role)
    assert not encode_calls
    fast = serve(tmp_path / "fast", True, frames, random.Random(cut) if cut else None, brokerRole=role)
    assert sum(encode_calls) > 200, "the fast path stored (almost) nothing: this test would prove nothing"
    if role == "ASYNC_MASTER":
        assert fast[0] == slow[0]
    else:
        # A run's sends that do not wait are answered before those that do (process() answers each
        # as it goes): the same replies, matched by opaque as clients match them.
        assert by_opaque(fast[0]) == by_opaque(slow[0])
    assert fast[1].keys() == slow[1].keys()
    assert len([k for k in fast[1] if "commitlog" in k]) >= 2  # runs crossed a file end
    for name in slow[1]:
        assert fast[1][name] == slow[1][name], name


def test_a_full_disk_part_way_answers_the_same(tmp_path, encode_calls, monkeypatch):
    """Writes past 384 KiB of commit log fail with ENOSPC: the fast path's run that crosses it stores
    nothing itself, and the Python path stores what fits and answers the rest 'disk full', as the
    broker without the fast path does."""
    real = mapped_file.MappedFile.write_at
    limit = (1 << 18) + (1 << 17)

    def full_disk(self, pos, data):
        if "commitlog" in self.path and self.base + pos + len(data) > limit:
            raise mapped_file.DiskFullError(f"no space left writing {len(data)} bytes (test)")
        return real(self, pos, data)

    monkeypatch.setattr(mapped_file.MappedFile, "write_at", full_disk)
    frames = numbered_sends(600)
    slow = serve(tmp_path / "slow", False, frames, None)
    fast = serve(tmp_path / "fast", True, frames, None)
    assert encode_calls
    assert fast == slow
    assert b"disk is full" in slow[0]


@pytest.mark.parametrize("fast", [True, False])
def test_status_says_which_path_serves_plain_sends(tmp_path, fast):
    b = Broker(tmp_path, sendFastPath=str(fast).lower())
    try:
        assert b.server._status_extra()["sendPath"] == ("compiled" if fast else "python")
    finally:
        b.stop()


def test_a_full_disk_at_a_new_file_answers_the_same(tmp_path, encode_calls, monkeypatch):
    """The disk fills up where a new commit-log file must be created (preallocated files: the common
    way a real disk runs out). A run that stored its first records in the old file and then cannot
    open the next one must answer exactly those as stored, and nothing stored twice."""
    real = mapped_file.MappedFileQueue.new_file

    def no_second_file(self, base):
        if "commitlog" in self.directory and base >= self.file_size:
            raise mapped_file.DiskFullError("no space left for a new commit-log file (test)")
        return real(self, base)

    monkeypatch.setattr(mapped_file.MappedFileQueue, "new_file", no_second_file)
    frames = numbered_sends(400)
    for role in ("ASYNC_MASTER", "SYNC_MASTER"):
        slow = serve(tmp_path / f"slow-{role}", False, frames, None, brokerRole=role)
        fast = serve(tmp_path / f"fast-{role}", True, frames, None, brokerRole=role)
        assert encode_calls
        assert by_opaque(fast[0]) == by_opaque(slow[0])
        assert fast[1] == slow[1]
        assert b"disk is full" in slow[0]
