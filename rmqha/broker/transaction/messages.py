"""The records of a transaction, as RocketMQ 4.9.8 builds them: pure functions on record.Message.

Sources (rocketmq-all-4.9.8): TransactionalMessageBridge (parseHalfMessageInner, makeOpMessageInner,
addRemoveTagInTransactionOp, renewHalfMessageInner, renewImmunityHalfMessageInner),
EndTransactionProcessor.endMessageTransaction, DefaultTransactionalMessageCheckListener
.toMessageExtBrokerInner, AbstractTransactionalMessageCheckListener.sendCheckMessage,
Broker2Client.checkProducerTransactionState, MessageDecoder.encode, TopicValidator, MixAll, MessageConst.
"""

from __future__ import annotations

import dataclasses

from rmqha.broker.remoting.codes import RequestCode
from rmqha.broker.remoting.command import RemotingCommand, java_parse_boolean, java_parse_int
from rmqha.broker.store import record

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
CHECK_GROUP = "CID_RMQ_SYS_TRANS"  # MixAll.CID_SYS_RMQ_TRANS: the consumer group of the check's progress
REMOVE_TAG = "d"  # TransactionalMessageUtil.REMOVETAG
CHECK_MAX_TIME_QUEUE_NUMS = 1  # AbstractTransactionalMessageCheckListener.TCMT_QUEUE_NUMS

PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_WAIT = "WAIT"
PROPERTY_TAGS = "TAGS"
PROPERTY_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
PROPERTY_CHECK_IMMUNITY_TIME = "CHECK_IMMUNITY_TIME_IN_SECONDS"


class HalfError(ValueError):
    """A half message whose REAL_TOPIC / REAL_QID cannot be used (the reference throws on it)."""


def is_half(properties: dict[str, str]) -> bool:
    """SendMessageProcessor's test: Boolean.parseBoolean(TRAN_MSG). The sysflag plays no part (a
    message with only the PREPARED sysflag is stored in its own topic, where it gets no queue entry)."""
    return java_parse_boolean(properties.get(PROPERTY_TRANSACTION_PREPARED, ""))


def _with_transaction_type(sys_flag: int, kind: int) -> int:
    return (sys_flag & ~record.TRANSACTION_MASK) | kind


def to_half(msg: record.Message, wait: str | None = None) -> record.Message:
    """parseHalfMessageInner: the half message a transactional send stores.

    `wait` is the WAIT property the send path took out: the reference serializes the half's properties
    again from a map it has put WAIT back into, so a half record keeps WAIT (its commit does too).
    """
    props = dict(msg.properties)
    if wait is not None:
        props[PROPERTY_WAIT] = wait
    props[PROPERTY_REAL_TOPIC] = msg.topic
    props[PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
    return dataclasses.replace(
        msg,
        topic=HALF_TOPIC,
        queue_id=0,
        properties=props,
        sys_flag=_with_transaction_type(msg.sys_flag, record.TRANSACTION_NOT_TYPE),
    )


def real_destination(half: record.Message) -> tuple[str, int]:
    """(REAL_TOPIC, REAL_QID) of a half message, or HalfError."""
    from rmqha.broker.support import validation

    topic = half.properties.get(PROPERTY_REAL_TOPIC, "")
    why = validation.topic_problem(topic)
    if why:
        raise HalfError(f"the half message's {PROPERTY_REAL_TOPIC}: {why}")
    try:
        queue_id = java_parse_int(half.properties.get(PROPERTY_REAL_QUEUE_ID, ""))
    except ValueError as e:
        raise HalfError(f"the half message's {PROPERTY_REAL_QUEUE_ID} {e}") from None
    if queue_id < 0:
        raise HalfError(f"the half message's {PROPERTY_REAL_QUEUE_ID} is negative: {queue_id}")
    return topic, queue_id


def committed(half: record.Message) -> record.Message:
    """EndTransactionProcessor.endMessageTransaction + processRequest: the message COMMIT stores.

    Real topic and queue, body, flag, born time and host, reconsume times and sysflag of the half, with
    the COMMIT transaction type; PREPARED_TRANSACTION_OFFSET = the half's commit-log offset. The stored
    properties are the half's, unchanged: 4.9.8 clears REAL_TOPIC, REAL_QID and TRAN_MSG from the
    message's property map only after it has serialized the properties string the commit log writes,
    so the committed record still carries them.
    """
    topic, queue_id = real_destination(half)
    return record.Message(
        topic=topic,
        body=half.body,
        queue_id=queue_id,
        flag=half.flag,
        sys_flag=_with_transaction_type(half.sys_flag, record.TRANSACTION_COMMIT),
        born_timestamp=half.born_timestamp,
        born_host=half.born_host,
        reconsume_times=half.reconsume_times,
        prepared_transaction_offset=half.physical_offset,
        properties=dict(half.properties),
    )


def op_message(half: record.Message, now_ms: int, broker_host: tuple[str, int]) -> record.Message:
    """addRemoveTagInTransactionOp + makeOpMessageInner: the op message saying a half is resolved.

    new Message(OP_TOPIC, "d", body) puts TAGS=d and WAIT=true into a HashMap, whose order (bucket 13
    for WAIT, 14 for TAGS) is the stored order; the UNIQ_KEY set afterwards never reaches the record.
    """
    return record.Message(
        topic=OP_TOPIC,
        body=str(half.queue_offset).encode("utf-8"),
        queue_id=half.queue_id,
        born_timestamp=now_ms,
        born_host=broker_host,
        properties={PROPERTY_WAIT: "true", PROPERTY_TAGS: REMOVE_TAG},
    )


def op_half_offset(op: record.Message) -> int | None:
    """The half queue offset an op message names (its body), or None when its tag is not "d" or its body
    is not a number (the reference logs those and skips them)."""
    if op.properties.get(PROPERTY_TAGS) != REMOVE_TAG:
        return None
    try:
        return java_parse_int(op.body.decode("utf-8", "replace"), (-(1 << 63), (1 << 63) - 1))
    except ValueError:
        return None


def check_times(half: record.Message) -> int | None:
    """TRANSACTION_CHECK_TIMES as Integer.parseInt reads it (-1 when it is not a number), None if absent."""
    text = half.properties.get(PROPERTY_CHECK_TIMES)
    if text is None:
        return None
    try:
        return java_parse_int(text)
    except ValueError:
        return -1


def renewed(half: record.Message) -> record.Message:
    """renewHalfMessageInner: the half stored again at the end of the half queue before a check.

    Topic, body, queue id, sysflag, properties (with the check count the caller put in), born time and
    host; the reference copies neither the flag nor the reconsume times, so the copy has 0 for both.
    """
    return record.Message(
        topic=half.topic,
        body=half.body,
        queue_id=half.queue_id,
        sys_flag=half.sys_flag,
        born_timestamp=half.born_timestamp,
        born_host=half.born_host,
        properties=dict(half.properties),
    )


def immunity_renewed(half: record.Message) -> record.Message:
    """renewImmunityHalfMessageInner: a half still inside its CHECK_IMMUNITY_TIME_IN_SECONDS, stored
    again with TRAN_PREPARED_QUEUE_OFFSET = the queue offset of its first copy."""
    msg = renewed(half)
    msg.properties.setdefault(PROPERTY_PREPARED_QUEUE_OFFSET, str(half.queue_offset))
    return msg


def discarded(half: record.Message) -> record.Message:
    """DefaultTransactionalMessageCheckListener.toMessageExtBrokerInner: a half checked too often, as
    stored in TRANS_CHECK_MAX_TIME_TOPIC (one queue): renewed's copy, with the flag and the reconsume
    times kept too."""
    msg = renewed(half)
    msg.topic, msg.queue_id = CHECK_MAX_TIME_TOPIC, 0
    msg.flag, msg.reconsume_times = half.flag, half.reconsume_times
    return msg


def check_request(
    half: record.Message, queue_offset: int, commit_log_offset: int, offset_msg_id: str
) -> RemotingCommand:
    """CHECK_TRANSACTION_STATE (39) for a half just stored again at (queue_offset, commit_log_offset).

    Header (CheckTransactionStateRequestHeader; null fields left out, as Java does): tranStateTableOffset,
    commitLogOffset, offsetMsgId of the new copy; msgId and transactionId = UNIQ_KEY. Body
    (MessageDecoder.encode of the half as read, with the new offsets): the record layout with
    REAL_TOPIC / REAL_QID as topic and queue id and the properties with the new check count.
    """
    topic, queue_id = real_destination(half)
    fields = {"tranStateTableOffset": queue_offset, "commitLogOffset": commit_log_offset, "offsetMsgId": offset_msg_id}
    uniq = half.properties.get(PROPERTY_UNIQ_KEY)
    if uniq is not None:
        fields["msgId"] = uniq
        fields["transactionId"] = uniq
    shown = dataclasses.replace(half, topic=topic, queue_id=queue_id)
    body = bytes(record.encode(shown).finish(queue_offset, commit_log_offset))
    return RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, fields, body=body)
