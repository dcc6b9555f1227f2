"""Receipt handles and POP's extra info, in 5.x's text formats (tests: tests/unit/test_proxy_convert.py).

The broker stamps each popped message with POP_CK, the extra info ExtraInfoUtil builds: ckQueueOffset,
popTime, invisibleTime, reviveQid, topic kind ("0" the topic, "1" its v1 retry topic %RETRY%group_topic),
brokerName, queueId, queue offset, space-separated. A client's receipt handle is ReceiptHandle.encode:
the same eight fields plus the commit-log offset. ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME carry the
first seven back as extraInfo, with the offset as its own field.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass

SEP = " "
NORMAL_TOPIC, RETRY_TOPIC = "0", "1"
EXTRA_INFO_FIELDS = 7  # start_offset .. queue_id


class BadHandle(ValueError):
    pass


@dataclass(frozen=True)
class Handle:
    start_offset: int
    pop_time: int
    invisible_time: int
    revive_qid: int
    topic_kind: str
    broker_name: str
    queue_id: int
    offset: int
    commit_log_offset: int = -1

    def encode(self) -> str:
        """ReceiptHandle.encode: every field, in the order above."""
        return SEP.join(str(v) for v in astuple(self))

    def extra_info(self) -> str:
        """What ACK_MESSAGE / CHANGE_MESSAGE_INVISIBLETIME send back (ExtraInfoUtil.buildExtraInfo): the
        first EXTRA_INFO_FIELDS fields, up to the queue id."""
        return SEP.join(str(v) for v in astuple(self)[:EXTRA_INFO_FIELDS])

    @property
    def retry(self) -> bool:
        return self.topic_kind == RETRY_TOPIC


def decode(text: str) -> Handle:
    parts = text.split(SEP)
    if len(parts) < 8:
        raise BadHandle(f"receipt handle has {len(parts)} fields, at least 8 expected")
    try:
        return Handle(
            int(parts[0]),
            int(parts[1]),
            int(parts[2]),
            int(parts[3]),
            parts[4],
            parts[5],
            int(parts[6]),
            int(parts[7]),
            int(parts[8]) if len(parts) > 8 else -1,
        )
    except ValueError as e:
        raise BadHandle(f"receipt handle field is not a number: {e}") from None


def from_pop_ck(pop_ck: str, commit_log_offset: int) -> Handle:
    """The handle of a popped message from its POP_CK property (8 fields) and commit-log offset."""
    h = decode(pop_ck)
    return Handle(
        h.start_offset,
        h.pop_time,
        h.invisible_time,
        h.revive_qid,
        h.topic_kind,
        h.broker_name,
        h.queue_id,
        h.offset,
        commit_log_offset,
    )


def retry_topic(group: str, topic: str) -> str:
    """KeyBuilder.buildPopRetryTopicV1."""
    return f"%RETRY%{group}_{topic}"


def real_topic(topic: str, group: str, kind: str) -> str:
    return retry_topic(group, topic) if kind == RETRY_TOPIC else topic
