"""Client requests as the official clients send them, built for the tests, the fuzz seeds and the
benchmarks (the broker's side of them is rmqha/broker/processors/send.py).

    send_v1(topic="T", body=b"x")     SEND_MESSAGE (10), long header names, the C++ 1.0.1 client's way
    send_v2(topic="T", body=b"x")     SEND_MESSAGE_V2 (310), the short names a..m (C++ 2.x)
    props(TAGS="a", KEYS="k")         a properties string as the C++ client writes it
"""

from __future__ import annotations

from rmqha.broker.remoting.codes import RequestCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.store import record

TOPIC = "TopicTest"


def props(**kw) -> str:
    return record.encode_properties(kw) + record.PROPERTY_SEPARATOR  # C++ keeps a trailing 0x02


def send_v1(topic=TOPIC, body=b"hello", queue_id=0, properties=None, **extra) -> RemotingCommand:
    """SEND_MESSAGE (10) the way the C++ 1.0.1 client sends it (long names, everything a string)."""
    fields = {
        "producerGroup": "PG",
        "topic": topic,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": 4,
        "queueId": queue_id,
        "sysFlag": 0,
        "bornTimestamp": 1700000000000,
        "flag": 0,
        "properties": properties
        if properties is not None
        else props(TAGS="tagA", KEYS="k1", UNIQ_KEY="U1", WAIT="true"),
        "reconsumeTimes": 0,
        "unitMode": "0",
        "batch": "0",
    }
    fields.update(extra)
    return RemotingCommand.request(RequestCode.SEND_MESSAGE, fields, body=body, language="CPP", version=63)


def send_v2(topic=TOPIC, body=b"hello", queue_id=0, properties=None, **extra) -> RemotingCommand:
    """SEND_MESSAGE_V2 (310) with the short names a..m (C++ 2.x)."""
    from rmqha.broker.processors.send import V2_NAMES

    long = send_v1(topic, body, queue_id, properties, **extra).ext_fields
    short = {s: long[n] for s, n in V2_NAMES.items() if n in long}
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, short, body=body, language="CPP", version=333)
