"""gRPC messages to remoting commands and back, with no I/O (tests: tests/unit/test_proxy_convert.py).

What SendMessageActivity (rocketmq-proxy 5.x) puts in a stored message's properties: UNIQ_KEY is the
client's message id, TAGS, KEYS (space-joined), PGROUP (the producer group: the topic, which is what the
server's transaction check is routed by), __SHARDINGKEY (the FIFO message group), TRAN_MSG and
CHECK_IMMUNITY_TIME_IN_SECONDS for a transactional half, TIMER_DELIVER_MS plus DELAY (the delivery
timestamp rounded up to a delay level: the proxy's useDelayLevel mode, since these brokers have no timer
wheel; README.md), and the user properties.
"""

from __future__ import annotations

import time
import zlib

from google.protobuf import duration_pb2, timestamp_pb2

from rmqha.broker.remoting.codes import RequestCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.store import record
from rmqha.proxy.third_party.rocketmq_apis.v2 import definition_pb2 as d

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
MAX_DELAY_MS = 24 * 3600 * 1000  # ProxyConfig.maxDelayTimeMills
MAX_TRANSACTION_RECOVERY_S = 3600  # ProxyConfig.maxTransactionRecoverySecond

# Properties the server owns: a user property with one of these names is refused (ILLEGAL_MESSAGE_PROPERTY_KEY).
SYSTEM_KEYS = frozenset(
    "KEYS TAGS WAIT DELAY RETRY_TOPIC REAL_TOPIC REAL_QID TRAN_MSG PGROUP MIN_OFFSET MAX_OFFSET BUYER_ID "
    "ORIGIN_MESSAGE_ID TRANSFER_FLAG CORRECTION_FLAG MQ2_FLAG RECONSUME_TIME MSG_REGION TRACE_ON UNIQ_KEY "
    "MAX_RECONSUME_TIMES CONSUME_START_TIME POP_CK POP_CK_OFFSET 1ST_POP_TIME TRAN_PREPARED_QUEUE_OFFSET "
    "DUP_INFO EXTEND_UNIQ_INFO INSTANCE_ID CORRELATION_ID REPLY_TO_CLIENT TTL ARRIVE_TIME PUSH_REPLY_TIME "
    "CLUSTER MSG_TYPE __SHARDINGKEY TIMER_DELIVER_MS TIMER_DELAY_SEC TIMER_DELAY_MS TIMER_OUT_MS "
    "TIMER_ENQUEUE_MS TIMER_DEQUEUE_MS TIMER_ROLL_TIMES TIMER_DEL_UNIQKEY BORN_HOST BORN_TIMESTAMP "
    "CHECK_IMMUNITY_TIME_IN_SECONDS TRACE_CONTEXT".split()
)


class Invalid(Exception):
    """The client's request breaks a rule 5.x's proxy enforces; code is the gRPC Code to answer with."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def millis(ts: timestamp_pb2.Timestamp) -> int:
    return ts.seconds * 1000 + ts.nanos // 1_000_000


def duration_ms(du: duration_pb2.Duration) -> int:
    return du.seconds * 1000 + du.nanos // 1_000_000


def timestamp(ms: int) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def delay_level(deliver_ms: int, now_ms: int, levels_ms: tuple[int, ...]) -> int:
    """ProxyConfig.computeDelayLevel: the first level longer than the wait, else the last."""
    wait = deliver_ms - now_ms
    for i, level in enumerate(levels_ms):
        if level > wait:
            return i + 1
    return len(levels_ms)


def send_properties(msg: d.Message, now_ms: int, levels_ms: tuple[int, ...], born_host: str = "") -> dict[str, str]:
    sp = msg.system_properties
    if not sp.message_id:
        raise Invalid(d.ILLEGAL_MESSAGE_ID, "message id cannot be empty")
    props: dict[str, str] = {}
    for k, v in msg.user_properties.items():
        if k in SYSTEM_KEYS:
            raise Invalid(d.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property is used by system: {k}")
        props[k] = v
    props["UNIQ_KEY"] = sp.message_id
    if sp.HasField("tag") and sp.tag:
        props["TAGS"] = sp.tag
    if sp.keys:
        props["KEYS"] = " ".join(sp.keys)
    topic = msg.topic.name
    props["PGROUP"] = topic  # SendMessageActivity: the topic is the producer group
    if sp.message_type == d.TRANSACTION:
        props["TRAN_MSG"] = "true"
        if sp.HasField("orphaned_transaction_recovery_duration"):
            seconds = sp.orphaned_transaction_recovery_duration.seconds
            if seconds > MAX_TRANSACTION_RECOVERY_S:
                raise Invalid(
                    d.BAD_REQUEST,
                    f"the max transaction recovery time of message is too large, max is {MAX_TRANSACTION_RECOVERY_S}",
                )
            props["CHECK_IMMUNITY_TIME_IN_SECONDS"] = str(seconds)
    if sp.HasField("delivery_timestamp"):
        deliver = millis(sp.delivery_timestamp)
        if deliver - now_ms > MAX_DELAY_MS:
            raise Invalid(d.ILLEGAL_DELIVERY_TIME, f"the max delay time of message is too large, max is {MAX_DELAY_MS}")
        props["DELAY"] = str(delay_level(deliver, now_ms, levels_ms))
        props["TIMER_DELIVER_MS"] = str(deliver)
    if sp.HasField("message_group") and sp.message_group:
        props["__SHARDINGKEY"] = sp.message_group
    if sp.HasField("trace_context") and sp.trace_context:
        props["TRACE_CONTEXT"] = sp.trace_context
    host = sp.born_host or born_host
    if host:
        props["BORN_HOST"] = host
    if sp.HasField("born_timestamp"):
        props["BORN_TIMESTAMP"] = str(millis(sp.born_timestamp))
    return props


def send_request(
    msg: d.Message, queue_id: int, now_ms: int, levels_ms: tuple[int, ...], born_host: str = ""
) -> RemotingCommand:
    """SEND_MESSAGE (10) with the long header names, as the proxy's remoting client sends one message."""
    if not msg.body:
        raise Invalid(d.MESSAGE_BODY_EMPTY, "message body cannot be empty")
    props = send_properties(msg, now_ms, levels_ms, born_host)
    sys_flag = record.TRANSACTION_PREPARED if props.get("TRAN_MSG") == "true" else 0
    born = millis(msg.system_properties.born_timestamp) if msg.system_properties.HasField("born_timestamp") else now_ms
    fields = {
        "producerGroup": msg.topic.name,
        "topic": msg.topic.name,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": 4,
        "queueId": queue_id,
        "sysFlag": sys_flag,
        "bornTimestamp": born,
        "flag": 0,
        "properties": record.encode_properties(props),
        "reconsumeTimes": msg.system_properties.delivery_attempt
        if msg.system_properties.HasField("delivery_attempt")
        else 0,
        "unitMode": False,
        "batch": False,
    }
    return RemotingCommand.request(RequestCode.SEND_MESSAGE, fields, body=msg.body, language="JAVA")


def stored_message(
    m: record.Message,
    receipt_handle: str | None = None,
    invisible_ms: int | None = None,
    delivery_attempt: int | None = None,
    topic: str | None = None,
) -> d.Message:
    """A stored message as a gRPC client receives it (GrpcConverter.buildMessage's fields)."""
    props = dict(m.properties)
    user = {k: v for k, v in props.items() if k not in SYSTEM_KEYS and not k.startswith("__") and k not in _POP_KEYS}
    sp = d.SystemProperties(
        message_id=props.get("UNIQ_KEY") or record.offset_msg_id(m.store_host, m.physical_offset),
        body_encoding=d.IDENTITY,
        body_digest=d.Digest(type=d.CRC32, checksum=format(zlib.crc32(m.body) & 0xFFFFFFFF, "08X")),
        born_timestamp=timestamp(m.born_timestamp),
        born_host=props.get("BORN_HOST") or f"{m.born_host[0]}:{m.born_host[1]}",
        store_timestamp=timestamp(m.store_timestamp),
        store_host=f"{m.store_host[0]}:{m.store_host[1]}",
        queue_id=m.queue_id,
        queue_offset=m.queue_offset,
    )
    if props.get("TAGS"):
        sp.tag = props["TAGS"]
    if props.get("KEYS"):
        sp.keys.extend(props["KEYS"].split(" "))
    if props.get("__SHARDINGKEY"):
        sp.message_group = props["__SHARDINGKEY"]
        sp.message_type = d.FIFO
    elif props.get("TIMER_DELIVER_MS"):
        sp.message_type = d.DELAY
        sp.delivery_timestamp.CopyFrom(timestamp(int(props["TIMER_DELIVER_MS"])))
    elif props.get("TRAN_MSG") == "true":
        sp.message_type = d.TRANSACTION
    else:
        sp.message_type = d.NORMAL
    if props.get("TRACE_CONTEXT"):
        sp.trace_context = props["TRACE_CONTEXT"]
    if receipt_handle is not None:
        sp.receipt_handle = receipt_handle
    if invisible_ms is not None:
        sp.invisible_duration.CopyFrom(
            duration_pb2.Duration(seconds=invisible_ms // 1000, nanos=(invisible_ms % 1000) * 1_000_000)
        )
    sp.delivery_attempt = delivery_attempt if delivery_attempt is not None else m.reconsume_times + 1
    name = topic or props.get("RETRY_TOPIC") or m.topic
    return d.Message(topic=d.Resource(name=name), user_properties=user, system_properties=sp, body=m.body)


_POP_KEYS = frozenset({"POP_CK", "POP_CK_OFFSET", "1ST_POP_TIME", "REAL_TOPIC", "REAL_QID", "ORIGIN_MESSAGE_ID"})


def now_ms() -> int:
    return int(time.time() * 1000)
