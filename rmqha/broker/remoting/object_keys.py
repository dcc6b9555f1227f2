"""fastjson's maps keyed by objects, as 4.9 writes ConsumeStats, TopicStatsTable and the like.

A Java HashMap<MessageQueue, X> comes out of fastjson with each key written as a JSON object:
``{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"t"}:{"minOffset":0,...}}}``. That is not JSON,
but it is what Java's admin tools (and clients modelled on them) parse, so such bodies are written
here by hand: `ObjectKeyed` holds (key object, value) pairs and `dumps` writes everything else as
json_body does (sorted keys, compact). `loads` reads such a body back (tests, peers) by turning
each object key into a string holding its JSON.
"""

from __future__ import annotations

import json
import re

from rmqha.broker.remoting import json_body


class ObjectKeyed:
    """A map whose keys are JSON objects: [(key dict, value), ...], written in the given order."""

    def __init__(self, pairs):
        self.pairs = list(pairs)


def message_queue(topic: str, broker_name: str, queue_id: int) -> dict:
    return {"brokerName": broker_name, "queueId": queue_id, "topic": topic}


def _encode(obj) -> str:
    if isinstance(obj, ObjectKeyed):
        return "{" + ",".join(f"{_encode(k)}:{_encode(v)}" for k, v in obj.pairs) + "}"
    if isinstance(obj, dict):
        return "{" + ",".join(f"{json.dumps(str(k), ensure_ascii=False)}:{_encode(obj[k])}" for k in sorted(obj)) + "}"
    if isinstance(obj, (list, tuple)):
        return "[" + ",".join(_encode(v) for v in obj) + "]"
    return json.dumps(obj, ensure_ascii=False)


def dumps(obj) -> bytes:
    return json_body.encode_utf8(_encode(obj))


# An object key: "{" or "," then a flat object (no nested braces, strings may hold anything) then ":".
_OBJECT_KEY = re.compile(r'"(?:[^"\\]|\\.)*"|([{,])\s*(\{(?:"(?:[^"\\]|\\.)*"|[^{}"])*\})\s*:', re.DOTALL)


def loads(data: bytes | str):
    """Parse a body with object keys; each such key becomes the string of its compact sorted JSON."""
    text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data

    def quote(m: re.Match) -> str:
        if m.group(1) is None:
            return m.group(0)
        key = json.dumps(json.loads(m.group(2)), separators=(",", ":"), sort_keys=True)
        return f"{m.group(1)}{json.dumps(key)}:"

    return json_body.loads(_OBJECT_KEY.sub(quote, text))
