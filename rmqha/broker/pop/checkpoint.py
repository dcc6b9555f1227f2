"""The revive topic's records, in 5.x's JSON field names (PopCheckPoint, AckMsg), and POP_CK's extra
info (ExtraInfoUtil). IO-free (tests: tests/unit/processors/test_pop.py).

A checkpoint records one pop of one queue: startOffset (so), popTime (pt), invisibleTime (it), the
queue offsets popped as differences from so (d), the group (c), the real topic (t: the topic or its
retry topic), queueId (q), brokerName (bn), and our reviveTime (rt = pt + it). Its tag is "ck".
An ack names the checkpoint by (c, t, q, so, pt) and the acked queue offset (ao); its tag is "ack".
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

REVIVE_TOPIC_PREFIX = "rmq_sys_REVIVE_LOG_"
REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"
CK_TAG, ACK_TAG = "ck", "ack"
NORMAL_TOPIC, RETRY_TOPIC = "0", "1"
PROPERTY_POP_CK = "POP_CK"
PROPERTY_FIRST_POP_TIME = "1ST_POP_TIME"
MAX_POP_NUMS = 32  # 5.x: maxMsgNums over 32 is refused


def revive_topic(cluster: str) -> str:
    return REVIVE_TOPIC_PREFIX + cluster


def retry_topic(group: str, topic: str) -> str:
    """KeyBuilder.buildPopRetryTopicV1."""
    return f"%RETRY%{group}_{topic}"


class BadRecord(ValueError):
    pass


@dataclass
class CheckPoint:
    group: str
    topic: str  # the real topic popped: the topic or its retry topic
    queue_id: int
    start_offset: int
    pop_time: int
    invisible_time: int
    diffs: list[int] = field(default_factory=list)
    broker_name: str = ""

    @property
    def revive_time(self) -> int:
        return self.pop_time + self.invisible_time

    @property
    def key(self) -> tuple:
        return (self.group, self.topic, self.queue_id, self.start_offset, self.pop_time)

    def offsets(self) -> list[int]:
        return [self.start_offset + d for d in self.diffs]

    def encode(self) -> bytes:
        return json.dumps(
            {
                "so": self.start_offset,
                "pt": self.pop_time,
                "it": self.invisible_time,
                "bm": 0,
                "n": len(self.diffs),
                "q": self.queue_id,
                "t": self.topic,
                "c": self.group,
                "ro": 0,
                "d": self.diffs,
                "bn": self.broker_name,
                "rt": self.revive_time,
            },
            separators=(",", ":"),
        ).encode()


@dataclass(frozen=True)
class Ack:
    group: str
    topic: str
    queue_id: int
    start_offset: int
    pop_time: int
    ack_offset: int
    broker_name: str = ""

    @property
    def key(self) -> tuple:
        return (self.group, self.topic, self.queue_id, self.start_offset, self.pop_time)

    def encode(self) -> bytes:
        return json.dumps(
            {
                "ao": self.ack_offset,
                "so": self.start_offset,
                "c": self.group,
                "t": self.topic,
                "q": self.queue_id,
                "pt": self.pop_time,
                "bn": self.broker_name,
            },
            separators=(",", ":"),
        ).encode()


def decode(tag: str | None, body: bytes) -> CheckPoint | Ack:
    try:
        o = json.loads(body)
        if tag == CK_TAG:
            return CheckPoint(
                str(o["c"]),
                str(o["t"]),
                int(o["q"]),
                int(o["so"]),
                int(o["pt"]),
                int(o["it"]),
                [int(x) for x in o["d"]],
                str(o.get("bn", "")),
            )
        if tag == ACK_TAG:
            return Ack(
                str(o["c"]), str(o["t"]), int(o["q"]), int(o["so"]), int(o["pt"]), int(o["ao"]), str(o.get("bn", ""))
            )
    except (ValueError, KeyError, TypeError) as e:
        raise BadRecord(f"revive record ({tag}): {e}") from None
    raise BadRecord(f"revive record with tag {tag!r}")


def extra_info(ck: CheckPoint, revive_qid: int, kind: str, queue_offset: int) -> str:
    """POP_CK of a popped message: ExtraInfoUtil.buildExtraInfo's 8 fields."""
    return " ".join(
        str(v)
        for v in (
            ck.start_offset,
            ck.pop_time,
            ck.invisible_time,
            revive_qid,
            kind,
            ck.broker_name,
            ck.queue_id,
            queue_offset,
        )
    )


@dataclass(frozen=True)
class ExtraInfo:
    start_offset: int
    pop_time: int
    invisible_time: int
    revive_qid: int
    kind: str
    broker_name: str
    queue_id: int


def parse_extra_info(text: str) -> ExtraInfo:
    """The 7 (or 8) fields an ACK_MESSAGE / CHANGE_MESSAGE_INVISIBLETIME carries back."""
    p = text.split(" ")
    if len(p) < 7:
        raise BadRecord(f"extraInfo has {len(p)} fields, 7 expected")
    try:
        return ExtraInfo(int(p[0]), int(p[1]), int(p[2]), int(p[3]), p[4], p[5], int(p[6]))
    except ValueError as e:
        raise BadRecord(f"extraInfo: {e}") from None
