"""Message-trace records (RocketMQ's trace format), read from a node's store where a client wrote them.

A client with trace on sends, per traced operation, a message to the trace topic (RMQ_SYS_TRACE_TOPIC,
created by a broker with traceTopicEnable) whose body holds records separated by \\x02, fields by \\x01:
  Pub       timestamp, region, group, topic, msgId, tags, keys, storeHost, bodyLength, costTime, msgType,
            offsetMsgId, success
  SubBefore timestamp, region, group, requestId, msgId, retryTimes, keys
  SubAfter  requestId, msgId, costTime, success, keys[, contextCode]
The audit reads them from the trace topic's consume queue (no walk of the whole log) and writes, per
traced message, the client's send, the broker's store and the first consume time (REPORT/trace.jsonl),
with their percentiles in the report.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

from rmqha.broker.store import record

from .dledger_log import find_dir

TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
DETAIL_FILE = "trace.jsonl"
CONTENT, FIELD = "\x01", "\x02"
UNIT = struct.Struct(">qiq")  # consume-queue unit: commit-log offset, size, tags code


@dataclass
class TraceRecord:
    kind: str  # Pub, SubBefore, SubAfter, ...
    timestamp_ms: int = 0  # when the client began the operation (Pub, SubBefore)
    group: str = ""
    topic: str = ""
    msg_id: str = ""  # the client's message id (UNIQ_KEY)
    keys: str = ""
    store_host: str = ""
    cost_ms: int = 0
    offset_msg_id: str = ""
    success: bool = True


def parse(body: bytes | str) -> list[TraceRecord]:
    """Every record of one trace message's body; fields that do not parse are left at their defaults."""
    text = body.decode("utf-8", "replace") if isinstance(body, (bytes, bytearray)) else body
    out = []
    for raw in text.split(FIELD):
        f = raw.split(CONTENT)
        if not f or not f[0].strip():
            continue
        kind = f[0].strip()
        r = TraceRecord(kind)
        if kind == "Pub" and len(f) >= 13:
            r.timestamp_ms, r.group, r.topic, r.msg_id = _int(f[1]), f[3], f[4], f[5]
            r.keys, r.store_host, r.cost_ms, r.offset_msg_id = f[7], f[8], _int(f[10]), f[12]
            r.success = f[13].strip().lower() != "false" if len(f) > 13 else True
        elif kind == "SubBefore" and len(f) >= 7:
            r.timestamp_ms, r.group, r.msg_id, r.keys = _int(f[1]), f[3], f[5], f[7] if len(f) > 7 else ""
        elif kind == "SubAfter" and len(f) >= 5:
            r.msg_id, r.cost_ms, r.success = f[2], _int(f[3]), f[4].strip().lower() != "false"
            r.keys = f[5] if len(f) > 5 else ""
        out.append(r)
    return out


def _int(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        return 0


def read_store(store_dir: str | Path, end: int | None = None, topic: str = TRACE_TOPIC) -> list[TraceRecord]:
    """The trace records a store holds, found through the trace topic's consume queues."""
    store = Path(store_dir)
    cq_root = store / "consumequeue" / topic
    log_files = _log_files(store)
    if not cq_root.is_dir() or not log_files:
        return []
    out: list[TraceRecord] = []
    for qdir in sorted(p for p in cq_root.iterdir() if p.is_dir()):
        for cq in sorted(qdir.iterdir()):
            data = cq.read_bytes()
            for pos in range(0, len(data) - UNIT.size + 1, UNIT.size):
                phys, size, _tags = UNIT.unpack_from(data, pos)
                if size <= 0 or (end is not None and phys + size > end):
                    continue
                raw = _read(log_files, phys, size)
                r = record.scan(raw, 0) if raw else None
                if r is not None and r.kind == record.Scan.MESSAGE and r.message.topic == topic:
                    out += parse(r.message.body)
    return out


def _log_files(store: Path) -> list[Path]:
    """The files that hold the store's physical offsets, in offset order. A DLedger node's records live in
    dledger-<selfId>/data (each entry's record at its consume-queue offset: pos + 48 is the record); an
    upgraded node's older records in commitlog/ below its first DLedger file (rmqha/broker/store/dledger_commitlog.py)."""
    files = sorted((store / "commitlog").glob("[0-9]" * 20)) if (store / "commitlog").is_dir() else []
    dl = find_dir(str(store))
    data = sorted((Path(dl) / "data").glob("[0-9]" * 20)) if dl else []
    if data:
        files = [f for f in files if int(f.name) < int(data[0].name)] + data
    return files


def _read(files: list[Path], offset: int, size: int) -> bytes:
    base_file = None
    for f in files:
        if int(f.name) <= offset:
            base_file = f
    if base_file is None:
        return b""
    with open(base_file, "rb") as fh:
        fh.seek(offset - int(base_file.name))
        return fh.read(size)


def per_message(records: list[TraceRecord], store_ms: dict[str, int]) -> list[dict]:
    """One row per traced send: its produce (client send), store (broker) and first consume (client
    SubBefore) times in ms, each None where no record or stored copy says it."""
    consumed: dict[str, int] = {}
    for r in records:
        if r.kind == "SubBefore" and r.msg_id and r.timestamp_ms:
            consumed[r.msg_id] = min(consumed.get(r.msg_id, r.timestamp_ms), r.timestamp_ms)
    rows = []
    for r in records:
        if r.kind == "Pub" and r.msg_id:
            rows.append(
                {
                    "msgId": r.msg_id,
                    "topic": r.topic,
                    "group": r.group,
                    "success": r.success,
                    "producedMs": r.timestamp_ms or None,
                    "storedMs": store_ms.get(r.msg_id),
                    "consumedMs": consumed.get(r.msg_id),
                }
            )
    return rows


def summary(records: list[TraceRecord], store_ms: dict[str, int]) -> dict:
    """Pub records matched to the stored messages (UNIQ_KEY -> store timestamp) and to the consumers'
    SubBefore records: how many, and the ms from send to store and from store to consume."""
    rows = per_message(records, store_ms)
    pubs = [r for r in records if r.kind == "Pub"]
    send_store = sorted(x["storedMs"] - x["producedMs"] for x in rows if x["storedMs"] and x["producedMs"])
    store_consume = sorted(x["consumedMs"] - x["storedMs"] for x in rows if x["consumedMs"] and x["storedMs"])

    def pcts(lat):
        def pct(q: float):
            return lat[min(len(lat) - 1, int(q * len(lat)))] if lat else None

        return {"p50": pct(0.5), "p99": pct(0.99), "max": lat[-1] if lat else None}

    return {
        "records": len(records),
        "pub": len(pubs),
        "sub": sum(1 for r in records if r.kind.startswith("Sub")),
        "matched": len(send_store),
        "consumed": len(store_consume),
        "failedSends": sum(1 for r in pubs if not r.success),
        "produceToStoreMs": pcts(send_store),
        "storeToConsumeMs": pcts(store_consume),
    }


def exists(store_dir: str | Path, topic: str = TRACE_TOPIC) -> bool:
    return os.path.isdir(os.path.join(str(store_dir), "consumequeue", topic))
