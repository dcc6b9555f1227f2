"""Hostile traffic against a live SYNC_MASTER and its SLAVE (real processes, the official client).

Name server, master and slave are single local processes from rmqha/cluster/standalone.py;
the official client runs in a child process through test_official_client's worker. The test sends
messages and records the acknowledged ones, then for ATTACK_S seconds fires, at both brokers' client
ports and HA ports at once: garbage, malformed and truncated frames, oversized length prefixes, deeply
nested JSON, lone-surrogate names ("G\\ud800" as a JSON escape), path-traversal group and topic names,
a 4 MiB batch of empty messages, idle and half-frame connections, fake slaves, and peers that never read.
Then every check runs and ALL failures are reported together:

* both processes alive, GET_ALL_TOPIC_CONFIG answered SUCCESS, the official client still gets SEND_OK;
* every acknowledged message (before and after) readable on the master and on the slave, and the
  slave's commit log byte-identical to the master's up to the master's max offset;
* no file created outside the store directories; no illegal topic or group name persisted;
* each broker's RSS within RSS_BOUND_MIB of what it was before the attack.

    python -m tests.integration.test_hostile_traffic --large-frames

measures a master's RSS around 200 connections that each send a 15 MiB frame and close, and around
one idle connection whose last request was 15 MiB (figures for the issue, not a pass/fail check).
"""

from __future__ import annotations

import json
import os
import random
import re
import socket
import struct
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from rmqha.broker.ha import wire
from rmqha.broker.remoting import codec
from rmqha.broker.remoting.codec import FrameDecoder, FrameError
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.store import record
from rmqha.cluster.standalone import BrokerProcess, NameServerProcess, rpc
from rmqha.cluster.wait import wait_until

from .processes import master_and_slave

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

ATTACK_S = 15.0
# RSS may grow by this much over its pre-attack figure, at the attack's peak and after it. What the
# attack may legitimately cost: the commit log pages the attack's own stored messages touch (the
# files are mmap'd, and file pages count in VmRSS: a 4 MiB batch of empty items is ~190k records,
# ~20 MiB), one 16 MiB frame per connection while it is being read (a few at a time here), the
# consume-queue units and HA send buffers for those records, and the allocator keeping freed
# memory. 150 MiB is several times that; what it catches is growth per connection or per request
# (hundreds of idle or half-frame connections holding buffers, responses queued for a peer that
# never reads, a batch expanded into 190k objects at once).
RSS_BOUND_MIB = 150
VALID_NAME = re.compile(r"[%|a-zA-Z0-9_-]+\Z")  # RocketMQ's TopicValidator / group name characters
MAX_TOPIC_LEN, MAX_GROUP_LEN = 127, 255  # %RETRY%/%DLQ% topics: 255 (docs/operations.md, "Hostile input")
IDLE_CLIENT_CONNS, IDLE_HA_CONNS, HALF_FRAME_CONNS = 200, 50, 50
NON_READER_MAX_REQUESTS = 60_000


# ---- frames -------------------------------------------------------------------------------------


def encoded(code: int, ext: dict | None = None, body: bytes = b"", opaque: int = 1) -> bytes:
    """A well-formed request from our own codec."""
    return codec.encode(RemotingCommand.request(code, ext or {}, body=body, opaque=opaque))


def escaped(code: int, ext: dict, body: bytes = b"", opaque: int = 1) -> bytes:
    """A request whose JSON header is written with ASCII escapes, so a lone surrogate in a name goes
    on the wire as the six characters \\ud800 (our codec cannot write one: no UTF-8 has it)."""
    header = json.dumps(
        {"code": code, "extFields": ext, "flag": 0, "language": "JAVA", "opaque": opaque, "version": 409},
        ensure_ascii=True,
    ).encode()
    return struct.pack(">II", 4 + len(header) + len(body), len(header)) + header + body


def raw_header_frame(header: bytes, body: bytes = b"", type_byte: int = 0) -> bytes:
    return struct.pack(">II", 4 + len(header) + len(body), (type_byte << 24) | len(header)) + header + body


def heartbeat_body(client: str, group: str, topic: str, producer: str) -> bytes:
    return json.dumps(
        {
            "clientID": client,
            "producerDataSet": [{"groupName": producer}],
            "consumerDataSet": [
                {
                    "groupName": group,
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                    "unitMode": False,
                    "subscriptionDataSet": [
                        {
                            "topic": topic,
                            "subString": "*",
                            "tagsSet": [],
                            "codeSet": [],
                            "subVersion": 1,
                            "classFilterMode": False,
                            "expressionType": "TAG",
                        }
                    ],
                }
            ],
        },
        ensure_ascii=True,
    ).encode()


def send_fields(topic: str, group: str = "PG") -> dict:
    return {
        "a": group,
        "b": topic,
        "c": "TBW102",
        "d": 4,
        "e": 0,
        "f": 0,
        "g": int(time.time() * 1000),
        "h": 0,
        "i": "",
        "j": 0,
        "k": False,
        "m": False,
    }


def pull_fields(group: str, topic: str, queue_id: int = 0, offset: int = 0, max_msgs: int = 32) -> dict:
    # sysFlag 4: the subscription is in the request (no heartbeat needed); no commit, no suspension.
    return {
        "consumerGroup": group,
        "topic": topic,
        "queueId": queue_id,
        "queueOffset": offset,
        "maxMsgNums": max_msgs,
        "sysFlag": 4,
        "commitOffset": 0,
        "suspendTimeoutMillis": 0,
        "subscription": "*",
        "subVersion": 0,
    }


def nested(depth: int, opener: bytes = b"[", closer: bytes = b"]", inner: bytes = b"0") -> bytes:
    return opener * depth + inner + closer * depth


def empty_batch(total_bytes: int) -> bytes:
    """A SEND_BATCH_MESSAGE body of empty items (docs/formats.md §6.8: 22 bytes each), total_bytes at most."""
    item = struct.pack(">iiiii", 22, 0, 0, 0, 0) + struct.pack(">h", 0)
    return item * (total_bytes // len(item))


def hostile_requests(topic: str, marker: str) -> list[tuple[str, bytes]]:
    """Well-formed frames with hostile names and sizes: (what, frame)."""
    lone = "G\ud800"
    up = [f"hostile/../../../{marker}", f"hostile/../../../../{marker}"]  # store dir / its parent
    out = [
        (
            "heartbeat lone surrogate",
            encoded(RequestCode.HEART_BEAT, body=heartbeat_body("c\ud800", lone, "T\ud800", "P\ud800")),
        ),
        (
            "update offset lone surrogate group",
            escaped(
                RequestCode.UPDATE_CONSUMER_OFFSET,
                {"consumerGroup": lone, "topic": topic, "queueId": "0", "commitOffset": "1"},
            ),
        ),
        (
            "update offset lone surrogate topic",
            escaped(
                RequestCode.UPDATE_CONSUMER_OFFSET,
                {"consumerGroup": "G", "topic": "T\ud800", "queueId": "0", "commitOffset": "1"},
            ),
        ),
        (
            "send lone surrogate topic",
            escaped(RequestCode.SEND_MESSAGE_V2, {k: str(v) for k, v in send_fields("T\ud800", lone).items()}, b"x"),
        ),
        (
            "pull lone surrogate",
            escaped(RequestCode.PULL_MESSAGE, {k: str(v) for k, v in pull_fields(lone, "T\ud800").items()}),
        ),
        ("nested JSON header", raw_header_frame(b'{"code":34,"extFields":{"a":' + nested(5000) + b"}}")),
        ("nested JSON header object", raw_header_frame(b'{"code":34,"version":' + nested(5000, b'{"a":', b"}") + b"}")),
        ("nested heartbeat body", encoded(RequestCode.HEART_BEAT, body=nested(5000))),
        (
            "nested heartbeat body with a surrogate",
            encoded(RequestCode.HEART_BEAT, body=nested(600, inner=b'"G\\ud800"')),
        ),
        ("huge numbers", raw_header_frame(b'{"code":34,"opaque":' + b"9" * 5000 + b',"flag":1e999}')),
    ]
    for name in up:
        out += [
            (
                f"send-back group {name}",
                encoded(
                    RequestCode.CONSUMER_SEND_MSG_BACK,
                    {
                        "group": name,
                        "offset": 0,
                        "delayLevel": 0,
                        "originMsgId": "x",
                        "originTopic": topic,
                        "maxReconsumeTimes": 16,
                        "unitMode": False,
                    },
                ),
            ),
            (
                f"heartbeat group {name}",
                encoded(RequestCode.HEART_BEAT, body=heartbeat_body("hostile@1", name, f"%RETRY%{name}", name)),
            ),
            (
                f"update offset group {name}",
                encoded(
                    RequestCode.UPDATE_CONSUMER_OFFSET,
                    {"consumerGroup": name, "topic": topic, "queueId": 0, "commitOffset": 1},
                ),
            ),
            (f"send topic {name}", encoded(RequestCode.SEND_MESSAGE_V2, send_fields(name + "-t"), b"x")),
            (f"pull topic {name}", encoded(RequestCode.PULL_MESSAGE, pull_fields("G", name + "-t"))),
        ]
    return out


MALFORMED = [
    ("length 0", struct.pack(">I", 0)),
    ("length 3", struct.pack(">I", 3) + b"abc"),
    ("header longer than frame", struct.pack(">II", 8, 100) + b"{}{}"),
    ("unknown serialize type", raw_header_frame(b'{"code":34}', type_byte=7)),
    ("JSON array header", raw_header_frame(b"[1,2,3]")),
    ("not JSON", raw_header_frame(b"{code:34")),
    ("invalid UTF-8", raw_header_frame(b'{"code":34,"remark":"\xff\xfe"}')),
    ("binary header truncated", raw_header_frame(b"\x00\x22\x00", type_byte=1)),
    ("binary header negative lengths", raw_header_frame(struct.pack(">hBhiii", 34, 0, 0, 1, 0, -5), type_byte=1)),
    ("length 0xFFFFFFFF", struct.pack(">I", 0xFFFFFFFF) + b"x" * 64),
    ("length 0x7FFFFFFF", struct.pack(">I", 0x7FFFFFFF) + b"x" * 64),
    ("length 16 MiB + 1", struct.pack(">I", 16 * 1024 * 1024 + 1) + b"x" * 64),
]


# ---- sockets --------------------------------------------------------------------------------------


def connect(port: int, timeout: float = 2.0, rcvbuf: int | None = None) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(timeout)
    s.connect(("127.0.0.1", port))
    return s


def abort(s: socket.socket) -> None:
    """Close with a reset: thousands of graceful closes would leave this side's ports in TIME_WAIT."""
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    s.close()


def read_reply(s: socket.socket, timeout: float = 2.0) -> str:
    """The response code to what was sent, or how the connection ended."""
    dec = FrameDecoder()
    end = time.monotonic() + timeout
    try:
        while time.monotonic() < end:
            s.settimeout(max(0.05, end - time.monotonic()))
            data = s.recv(65536)
            if not data:
                return "closed"
            for cmd in dec.feed(data):
                if cmd.is_response:
                    return (
                        ResponseCode(cmd.code).name
                        if cmd.code in ResponseCode._value2member_map_
                        else f"code {cmd.code}"
                    )
    except (socket.timeout, TimeoutError):
        return "no answer"
    except ConnectionResetError:
        return "reset"
    except FrameError as e:
        return f"bad reply frame: {e}"
    return "no answer"


def rss_kib(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


# ---- the attack -------------------------------------------------------------------------------------


class Attack:
    """Runs every attack kind against every target until the deadline; keeps what it must hold open."""

    def __init__(self, nodes: dict[str, BrokerProcess], topic: str, marker: str, seconds: float):
        self.nodes = nodes
        self.topic = topic
        self.marker = marker
        self.deadline = time.monotonic() + seconds
        self.stats: Counter = Counter()
        self.replies: dict[str, Counter] = {}
        self.held: list[socket.socket] = []
        self.lock = threading.Lock()
        self.errors: list[str] = []

    def count(self, key: str, n: int = 1) -> None:
        with self.lock:
            self.stats[key] += n

    def reply(self, what: str, code: str) -> None:
        with self.lock:
            self.replies.setdefault(what, Counter())[code] += 1

    def hold(self, s: socket.socket) -> None:
        with self.lock:
            self.held.append(s)

    def live(self) -> bool:
        return time.monotonic() < self.deadline

    # -- client port ------------------------------------------------------------------------------
    def garbage_connection(
        self, what: str, port: int, rng: random.Random, max_bytes: int, timeout: float = 2.0
    ) -> None:
        """One connection that sends 1..max_bytes random bytes and is reset: "<what> connections" or
        "<what> refused" in the stats."""
        try:
            s = connect(port, timeout=timeout)
            s.sendall(rng.randbytes(rng.randint(1, max_bytes)))
            abort(s)
            self.count(f"{what} connections")
        except OSError:
            self.count(f"{what} refused")
            time.sleep(0.05)

    def garbage(self, node: str, port: int) -> None:
        rng = random.Random(f"garbage-{node}")
        while self.live():
            self.garbage_connection(f"{node} garbage", port, rng, 4096)

    def malformed(self, node: str, port: int) -> None:
        rng = random.Random(f"malformed-{node}")
        frames = MALFORMED + [
            (f"truncated {w}", f[: rng.randint(1, len(f) - 1)])
            for w, f in hostile_requests(self.topic, self.marker)[:6]
        ]
        while self.live():
            for what, frame in frames:
                try:
                    s = connect(port)
                    s.sendall(frame)
                    if not what.startswith("truncated"):
                        self.reply(f"{node}: {what}", read_reply(s, 1.0))
                    abort(s)
                except OSError as e:
                    self.reply(f"{node}: {what}", type(e).__name__)

    def named(self, node: str, port: int) -> None:
        requests = hostile_requests(self.topic, self.marker)
        while self.live():
            for what, frame in requests:
                try:
                    s = connect(port)
                    s.sendall(frame)
                    self.reply(f"{node}: {what}", read_reply(s))
                    abort(s)
                except OSError as e:
                    self.reply(f"{node}: {what}", type(e).__name__)

    def batch(self, node: str, port: int) -> None:
        body = empty_batch(4 * 1024 * 1024)
        fields = send_fields("HostileBatch")
        fields["m"] = True
        try:
            s = connect(port, timeout=30)
            s.sendall(encoded(RequestCode.SEND_BATCH_MESSAGE, fields, body))
            self.reply(f"{node}: 4 MiB batch of {len(body) // 22} empty items", read_reply(s, 30))
            abort(s)
        except OSError as e:
            self.reply(f"{node}: 4 MiB batch", type(e).__name__)

    def idle_and_half(self, node: str, port: int, ha: bool) -> None:
        frame = encoded(RequestCode.GET_ALL_TOPIC_CONFIG, body=b"z" * 4096)
        for i in range(IDLE_HA_CONNS if ha else IDLE_CLIENT_CONNS):
            try:
                self.hold(connect(port))
                self.count(f"{node} idle{' HA' if ha else ''} held")
            except OSError:
                self.count(f"{node} idle{' HA' if ha else ''} refused")
        for i in range(HALF_FRAME_CONNS):
            try:
                s = connect(port)
                s.sendall(b"\0\0\0" if ha else frame[: len(frame) // 2])  # a report or a frame, half of it
                self.hold(s)
                self.count(f"{node} half-frame{' HA' if ha else ''} held")
            except OSError:
                self.count(f"{node} half-frame{' HA' if ha else ''} refused")

    def non_reader(self, node: str, port: int) -> None:
        """Sends requests and never reads a response."""
        frame = encoded(RequestCode.GET_ALL_TOPIC_CONFIG)
        try:
            s = connect(port, timeout=0.5, rcvbuf=4096)
        except OSError:
            self.count(f"{node} non-reader refused")
            return
        self.hold(s)
        sent = 0
        while self.live() and sent < NON_READER_MAX_REQUESTS:
            try:
                s.sendall(frame * 100)
                sent += 100
            except (socket.timeout, TimeoutError):
                time.sleep(0.2)  # the broker stopped reading: back-pressure, as it should
            except OSError:
                break
        self.count(f"{node} non-reader requests sent", sent)

    # -- HA port ------------------------------------------------------------------------------------
    def fake_slaves(self, node: str, port: int) -> None:
        reports = [2**62, 2**63 - 1, -1, -(2**63), 1 << 40]
        rng = random.Random(f"ha-{node}")
        while self.live():
            for offset in reports:
                try:
                    s = connect(port, timeout=1.0)
                    s.sendall(wire.encode_report(offset))
                    self.reply(f"{node} HA: report {offset}", read_until_closed(s, 1.0))
                    abort(s)
                except OSError as e:
                    self.reply(f"{node} HA: report {offset}", type(e).__name__)
                    time.sleep(0.05)
            self.garbage_connection(f"{node} HA garbage", port, rng, 1000, timeout=1.0)

    def ha_non_reader(self, node: str, port: int) -> None:
        """A fake slave that asks for the log from 0 (valid) and never reads what the master pushes."""
        try:
            s = connect(port, timeout=1.0, rcvbuf=4096)
            s.sendall(wire.encode_report(0))
            self.hold(s)
            self.count(f"{node} HA non-reader held")
        except OSError:
            self.count(f"{node} HA non-reader refused")

    def run(self) -> None:
        threads = []
        for node, b in self.nodes.items():
            client, ha = b.port, b.port + 1
            for fn, args in (
                (self.garbage, (node, client)),
                (self.malformed, (node, client)),
                (self.named, (node, client)),
                (self.batch, (node, client)),
                (self.idle_and_half, (node, client, False)),
                (self.non_reader, (node, client)),
                (self.fake_slaves, (node, ha)),
                (self.idle_and_half, (node, ha, True)),
                (self.ha_non_reader, (node, ha)),
            ):
                threads.append(threading.Thread(target=self._guard, args=(fn, args), daemon=True))
        for t in threads:
            t.start()
        for t in threads:
            t.join(max(0.0, self.deadline - time.monotonic()) + 40)

    def _guard(self, fn, args) -> None:
        try:
            fn(*args)
        except Exception as e:  # an attacker bug must show, not vanish in a thread
            with self.lock:
                self.errors.append(f"{fn.__name__}{args}: {e!r}")

    def release(self) -> None:
        for s in self.held:
            abort(s)
        self.held.clear()


def read_until_closed(s: socket.socket, timeout: float) -> str:
    end = time.monotonic() + timeout
    got = 0
    try:
        while time.monotonic() < end:
            s.settimeout(max(0.05, end - time.monotonic()))
            data = s.recv(65536)
            if not data:
                return "closed" if not got else f"closed after {got} bytes"
            got += len(data)
    except (socket.timeout, TimeoutError):
        return "still open" if not got else f"still open, sent {got} bytes"
    except ConnectionResetError:
        return "reset"
    return "still open"


# ---- checks -------------------------------------------------------------------------------------


def pulled(addr: str, topic: str, queues: int) -> dict[str, bytes]:
    """UNIQ_KEY -> body of every message in the topic, read with PULL_MESSAGE."""
    out = {}
    for q in range(queues):
        offset = 0
        while True:
            resp = rpc(addr, RequestCode.PULL_MESSAGE, pull_fields("hostile-check", topic, q, offset))
            if resp.code != ResponseCode.SUCCESS:
                break
            for _, r in record.iter_records(resp.body, 0, check_crc=True):
                if r.kind == record.Scan.MESSAGE:
                    out[r.message.uniq_key] = r.message.body
            offset = int(resp.ext_fields["nextBeginOffset"])
    return out


def tree(root: Path, skip: set[Path]) -> set[str]:
    """Every path under root, skipping the store directories' contents."""
    out = set()
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = [d for d in dirnames if here / d not in skip]
        out.update(str((here / n).relative_to(root)) for n in dirnames + filenames)
    return out


def persisted(store: Path) -> tuple[list[str], list[str]]:
    """Topic names in config/topics.json and topic@group keys in config/consumerOffset.json."""

    def table(name: str, key: str) -> list[str]:
        path = store / "config" / name
        return list(json.loads(path.read_text()).get(key, {})) if path.exists() else []

    return table("topics.json", "topicConfigTable"), table("consumerOffset.json", "offsetTable")


def legal_topic(name: str) -> bool:
    limit = 255 if name.startswith(("%RETRY%", "%DLQ%")) else MAX_TOPIC_LEN
    return bool(VALID_NAME.match(name)) and len(name) <= limit


def illegal_names(store: Path) -> list[str]:
    bad = []
    topics, offset_keys = persisted(store)
    bad += [f"topics.json: topic {name!r}" for name in topics if not legal_topic(name)]
    for key in offset_keys:
        topic, _, group = key.rpartition("@")
        if not legal_topic(topic) or not VALID_NAME.match(group) or len(group) > MAX_GROUP_LEN:
            bad.append(f"consumerOffset.json: {key!r}")
    return bad


# ---- the test ------------------------------------------------------------------------------------


@pytest.fixture
def sync_pair(tmp_path):
    with master_and_slave(tmp_path, "broker-h", role="SYNC_MASTER", wait_connected=True) as (ns, master, slave):
        yield ns, master, slave, tmp_path


def test_hostile_traffic_leaves_both_brokers_serving_and_consistent(sync_pair):
    from .processes import unique_name
    from .test_official_client import SEND_OK, msgs, produce

    ns, master, slave, tmp = sync_pair
    topic = unique_name("Hostile")
    marker = f"pwned-{uuid.uuid4().hex[:8]}"
    problems: list[str] = []

    before = produce(ns.addr, [{"mode": "sync", "topic": topic, "messages": msgs("before", 16)}])
    acked = {r["msg_id"] for r in before if r.get("status") == SEND_OK}
    assert len(acked) == 16, f"the official client's sends before the attack: {before}"
    sent_bodies = {f"before-{i}-small" for i in range(16)}
    # A legitimate offset commit: after the attack it must still be in the master's persisted table
    # (a table that could not be written at all would hide any illegal name in it).
    commit = rpc(
        master.addr,
        RequestCode.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": "HostileCheckGroup", "topic": topic, "queueId": 0, "commitOffset": 1},
    )
    assert commit.code == ResponseCode.SUCCESS, commit

    stores = {master.store_dir, slave.store_dir}
    tree_before = tree(tmp, stores)
    rss_before = {n: rss_kib(b.proc.pid) for n, b in (("master", master), ("slave", slave))}
    rss_peak = dict(rss_before)

    attack = Attack({"master": master, "slave": slave}, topic, marker, ATTACK_S)
    runner = threading.Thread(target=attack.run, daemon=True)
    t0 = time.monotonic()
    runner.start()
    while runner.is_alive():
        for n, b in (("master", master), ("slave", slave)):
            if b.running:
                rss_peak[n] = max(rss_peak[n], rss_kib(b.proc.pid))
        runner.join(0.25)
    attack_s = time.monotonic() - t0
    attack.release()
    assert not attack.errors, f"the attack itself failed: {attack.errors}"

    # Alive, and still answering.
    for n, b in (("master", master), ("slave", slave)):
        if not b.running:
            problems.append(f"{n} died during the attack (exit {b.proc.returncode})\n{b.log_tail(30)}")
    alive = master.running and slave.running
    if alive:
        for n, b in (("master", master), ("slave", slave)):
            try:
                code = rpc(b.addr, RequestCode.GET_ALL_TOPIC_CONFIG, timeout=5).code
                if code != ResponseCode.SUCCESS:
                    problems.append(f"{n}: GET_ALL_TOPIC_CONFIG answered {code}, not SUCCESS")
            except (OSError, TimeoutError) as e:
                problems.append(f"{n}: GET_ALL_TOPIC_CONFIG got no answer after the attack: {e!r}")
        after = produce(ns.addr, [{"mode": "sync", "topic": topic, "messages": msgs("after", 8)}])
        ok = [r for r in after if r.get("status") == SEND_OK]
        if len(ok) != 8:
            problems.append(f"official client after the attack: {len(ok)}/8 SEND_OK: {after}")
        acked |= {r["msg_id"] for r in ok}
        sent_bodies |= {f"after-{i}-small" for i in range(8)}

        # Every acknowledged message readable on both; the slave's log byte-identical to the master's.
        try:
            wait_until(
                lambda: slave.status()["maxPhyOffset"] == master.status()["maxPhyOffset"],
                30,
                "the slave caught up with the master",
            )
        except AssertionError as e:
            problems.append(str(e).splitlines()[0])
        end = master.status()["maxPhyOffset"]
        m_log, s_log = master.commitlog_bytes(end), slave.commitlog_bytes(end)
        if m_log != s_log:
            diff = next((i for i, (a, b) in enumerate(zip(m_log, s_log)) if a != b), min(len(m_log), len(s_log)))
            problems.append(
                f"slave commit log differs from the master's at byte {diff} (master max offset {end}, "
                f"slave has {len(s_log)} bytes of it)"
            )
        queues = 8
        for n, b in (("master", master), ("slave", slave)):
            got = pulled(b.addr, topic, queues)
            missing = acked - set(got)
            if missing:
                problems.append(
                    f"{n}: {len(missing)} of {len(acked)} acknowledged messages not readable: {sorted(missing)[:5]}"
                )
            wrong = {k for k in acked & set(got) if got[k].decode(errors="replace") not in sent_bodies}
            if wrong:
                problems.append(f"{n}: acknowledged messages with bodies we did not send: {sorted(wrong)[:5]}")

    rss_after = {n: rss_kib(b.proc.pid) for n, b in (("master", master), ("slave", slave)) if b.running}

    # Persisted state and the file system, after a clean stop (which writes every table).
    master.stop()
    slave.stop()
    strays = sorted(p for p in tree(tmp, stores) - tree_before if not p.endswith(".log"))
    if strays:
        problems.append(f"files created outside the store directories under {tmp}: {strays[:10]}")
    # The traversal names climb 3 and 4 levels from a store subfolder: into tmp and its parent.
    found = [
        p
        for root in (tmp, tmp.parent)
        for p in root.glob(f"**/{marker}*")
        if not any(store in p.parents for store in stores)
    ]
    if found:
        problems.append(f"path traversal: created {sorted(set(map(str, found)))[:6]}")
    topics, offset_keys = persisted(master.store_dir)
    if topic not in topics or f"{topic}@HostileCheckGroup" not in offset_keys:
        problems.append(
            f"master: the legitimate topic or offset is not in config/topics.json / "
            f"consumerOffset.json after a clean stop (a table that failed to persist?): "
            f"topic listed: {topic in topics}, offset listed: {f'{topic}@HostileCheckGroup' in offset_keys}"
        )
    for n, store in (("master", master.store_dir), ("slave", slave.store_dir)):
        bad = illegal_names(store)
        if bad:
            problems.append(f"{n}: illegal names persisted: {bad[:8]}")

    bound = RSS_BOUND_MIB * 1024
    for n in rss_before:
        grew_peak = rss_peak[n] - rss_before[n]
        grew_after = rss_after.get(n, rss_before[n]) - rss_before[n]
        if grew_peak > bound or grew_after > bound:
            problems.append(
                f"{n}: RSS {rss_before[n] // 1024} MiB before the attack, peak "
                f"{rss_peak[n] // 1024} MiB, {rss_after.get(n, 0) // 1024} MiB after: more than "
                f"{RSS_BOUND_MIB} MiB over"
            )

    summary = (
        f"attack {attack_s:.1f} s; RSS KiB before {rss_before} peak {rss_peak} after {rss_after}\n"
        f"counts: {dict(sorted(attack.stats.items()))}\n"
        + "\n".join(f"  {what}: {dict(c)}" for what, c in sorted(attack.replies.items()))
    )
    print(summary)
    assert not problems, "\n".join(problems) + "\n--- what the attack saw ---\n" + summary


# ---- memory figures for large frames (run by hand) ------------------------------------------------


def measure_large_frames(workdir: Path, connections: int = 200, concurrent: int = 20) -> dict:
    """RSS of a master around big frames, each part on a fresh master: (a) `connections` connections
    that each send one 15 MiB frame and close, `concurrent` at a time; (b) one connection whose last
    request was 15 MiB, left idle, then closed."""
    frame = encoded(RequestCode.GET_ALL_TOPIC_CONFIG, body=bytes(15 * 1024 * 1024))
    out = {}

    def one():
        s = connect(master.port, timeout=30)
        s.sendall(frame)
        abort(s)

    for part in ("a", "b"):
        ns = NameServerProcess(workdir / part).start()
        master = BrokerProcess(workdir / part, "broker-m", ns.addr, role="SYNC_MASTER").start()
        pid = master.proc.pid
        try:
            time.sleep(1)
            out[f"{part}_before"] = rss_kib(pid)
            if part == "a":
                peak = out["a_before"]
                for _ in range(connections // concurrent):
                    threads = [threading.Thread(target=one) for _ in range(concurrent)]
                    for t in threads:
                        t.start()
                    while any(t.is_alive() for t in threads):
                        peak = max(peak, rss_kib(pid))
                        time.sleep(0.05)
                out["a_peak"] = peak
                time.sleep(3)
                out["a_after_3s"] = rss_kib(pid)
            else:
                s = connect(master.port, timeout=30)
                s.sendall(frame)
                out["b_reply"] = read_reply(s, 30)
                time.sleep(3)
                out["b_idle_3s_after_reply"] = rss_kib(pid)
                abort(s)
                time.sleep(2)
                out["b_2s_after_close"] = rss_kib(pid)
        finally:
            master.stop()
            ns.stop()
    return out


if __name__ == "__main__":
    import argparse
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--large-frames", action="store_true", required=True)
    ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        for k, v in measure_large_frames(Path(d)).items():
            print(f"{k:24} {v if isinstance(v, str) else f'{v / 1024:.0f} MiB'}")
