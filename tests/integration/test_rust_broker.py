"""The kit on rocketmq-rust's broker (crates.io rocketmq-broker 1.0.0, built by `make peer-broker`).

Skipped until it is built (about an hour of 2 cores, cached in ~/.cache/rocketmq-ha-refcluster). What is
pinned here is what the kit says about that broker (rmqha/cluster/implementations/rust.py): why the
official C++ client reports "No route info" against it, and that the status it reads from it names what
such a broker does not serve instead of showing zeros.
"""

from __future__ import annotations

import json
import socket
import struct

import pytest

from rmqha.cluster.implementations import parse_choice, unavailable_reason
from rmqha.rmqkit import RocketMQCluster

WHY = unavailable_reason(parse_choice("rust"))

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(240),
    pytest.mark.skipif(bool(WHY), reason=WHY or ""),
]

TOPIC = "RustCppFrames"


def cpp_header(opaque: int, *, serialize_type: bool, numbers_as_strings: bool, java_booleans: bool = False) -> bytes:
    """SEND_MESSAGE as the C++ 1.0.1 client in PyPI rocketmq 0.4.4 writes it, byte for byte (captured:
    tests/unit/fastpath/test_scan_sends.py): no serializeTypeCurrentRPC, numbers as JSON numbers, batch
    and unitMode as "0", a trailing newline; or with any of the three as a Java client writes it."""
    ext = {
        "AccessKey": "",
        "OnsChannel": "ALIYUN",
        "Signature": "3xb4/++MFwnxXXaJ3DVKJeMMt4Y=",
        "batch": "0",
        "bornTimestamp": "1795418853406",
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": 4,
        "flag": 0,
        "producerGroup": "PG",
        "properties": "KEYS\x01k1\x02UNIQ_KEY\x010100007F0000A33B00009EF242780600\x02WAIT\x01true\x02",
        "queueId": 0,
        "reconsumeTimes": "0",
        "sysFlag": 0,
        "topic": TOPIC,
        "unitMode": "0",
    }
    if numbers_as_strings:
        ext = {k: str(v) for k, v in ext.items()}
    if java_booleans:
        ext.update(batch="false", unitMode="false")
    head = {"code": 10, "extFields": ext, "flag": 0, "language": "CPP", "opaque": opaque, "remark": ""}
    if serialize_type:
        head["serializeTypeCurrentRPC"] = "JSON"
    head["version"] = 63
    return json.dumps(head, separators=(",", ":")).encode() + b"\n"


def exchange(addr: str, header: bytes, body: bytes = b"hello", timeout: float = 15.0) -> dict | None:
    """The reply's JSON header, or None when the broker closed the connection without one."""
    host, _, port = addr.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(struct.pack(">II", 4 + len(header) + len(body), len(header)) + header + body)
        data = b""
        try:
            while len(data) < 8 or len(data) < 4 + struct.unpack(">I", data[:4])[0]:
                chunk = s.recv(65536)
                if not chunk:
                    return None
                data += chunk
        except ConnectionResetError:
            return None
    (head_len,) = struct.unpack(">I", data[4:8])
    return json.loads(data[8 : 8 + (head_len & 0xFFFFFF)])


def test_the_official_clients_sends_get_no_answer_or_a_refusal_and_that_is_no_route_info(tmp_path):
    """rocketmq-rust closes the connection on the C++ client's headers (no serializeTypeCurrentRPC, or a
    number in extFields, is each enough); with both as 4.9 writes them it refuses the send for batch and
    unitMode "0" (Java's Boolean.parseBoolean reads them as false). Only with all three changed is the
    send stored. The route the name server serves is not the cause."""
    with RocketMQCluster("2m-noslave", "local", broker="rust", run_root=tmp_path) as c:
        h = c.handle
        h.create_topic(TOPIC, ["broker-a"], 4)
        addr = h.addr("broker-a")
        answers = {
            (st, ns): exchange(addr, cpp_header(7, serialize_type=st, numbers_as_strings=ns))
            for st in (False, True)
            for ns in (False, True)
        }
        assert answers[(False, False)] is None, answers  # exactly what the client writes
        assert answers[(True, False)] is None, answers  # serializeTypeCurrentRPC given, numbers kept
        assert answers[(False, True)] is None, answers  # strings only, no serializeTypeCurrentRPC
        refused = answers[(True, True)]
        assert refused is not None and refused["opaque"] == 7, answers
        assert (refused["code"], refused["remark"]) == (29, "Request header is invalid"), refused
        stored = exchange(addr, cpp_header(8, serialize_type=True, numbers_as_strings=True, java_booleans=True))
        assert stored is not None and stored["code"] == 0 and stored["extFields"]["queueOffset"] == "0", stored
        # the kit's own requests (our codec writes serializeTypeCurrentRPC and strings, as 4.9) are answered
        node = next(n for n in h.cluster_status().nodes if n.name == "broker-a")
        assert node.error is None and node.status["implementation"] == "rust", node


def test_the_status_of_a_rust_master_and_slave_says_unavailable_never_zero(tmp_path):
    with RocketMQCluster("2m-2s-sync", "local", broker="rust", run_root=tmp_path) as c:
        h = c.handle
        table = h.cluster_status()
        by = {n.name: n for n in table.nodes}
        for name in ("broker-a", "broker-a-s"):
            assert by[name].error is None, (name, by[name].error)
        master = by["broker-a"].status
        assert master["ha"]["connectionCount"] == 1  # its slave's HA connection, seen on the process
        for figure in ("ha.slaves[].slaveAckOffset", "ha.push2SlaveMaxOffset", "durableOffset"):
            assert figure in master["unavailable"], master["unavailable"]
