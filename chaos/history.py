"""Client histories: every operation a workload did and what it saw, one JSON object per line.

A history file is `RUN/history/<client>.jsonl` (any *.jsonl under RUN/history is read). Each line:

    field            type        meaning
    client           str         who did it (a producer or consumer id; unique in the run)
    seq              int         position of this line in the recorder (orders ops of one client)
    op               str         "invoke" (a send try handed to the client, written BEFORE the call, so a
                                 try that never gets an answer is still in the history), "send" (its
                                 answer), "receive", "subscribe" (a consumer group starting on a topic;
                                 status FROM_FIRST: every send to it is owed to the group, FROM_NOW: those
                                 acknowledged from then on) or "unsubscribe" (a consumer of the group shut
                                 down; after the group's last one, nothing more is owed to it)
    group            str|null    the producer group (invoke/send) or consumer group (receive/subscribe);
                                 the delivery checker judges every consumer group on its own. Histories
                                 without it (older ones) count each consumer client as its own group
    shard            str|null    send_orderly: the sharding key (orderly consumers are judged per key)
    topic            str
    send_id          str         the LOGICAL send: one id per message the workload meant to send. Every
                                 try of it (our own retries, each with a new UNIQ_KEY under the C++
                                 client) has the same send_id. The recorder puts it in the message's
                                 KEYS, so stored copies and received messages carry it too.
    attempt          int         1, 2, ... for the tries of one send_id (send only)
    uniq_key         str|null    UNIQ_KEY property (C++ SendResult.msg_id / RecvMessage.id)
    status           str         send: SEND_OK | FLUSH_DISK_TIMEOUT | FLUSH_SLAVE_TIMEOUT |
                                 SLAVE_NOT_AVAILABLE | ERROR (then see `error`); receive: RECEIVED
    error            str|null    exception text when status is ERROR
    offset_msg_id    str|null    the broker's offsetMsgId, when the client exposes it (PyPI rocketmq
                                 0.4.4 does not; the pipeline finds the stored copy by uniq_key)
    broker_name      str|null    when known (the pipeline resolves it from the stored copy otherwise)
    queue_id         int|null    receive: the queue; send: the queue when known
    queue_offset     int|null    send: SendResult.offset; receive: the message's queue offset
    commit_log_offset int|null   receive: the message's physical offset
    store_timestamp  int|null    receive: the broker's store timestamp (ms)
    ordered          bool        receive: whether this consumer promised per-queue order
    start_ms, end_ms int         wall clock (ms since the epoch) around the call; for a receive both
                                 are the moment the callback ran
    body_len         int|null
    library          str|null    the client library that did it: "rocketmq 0.4.4 (C++ 1.0.1)" (the official
                                 client, this module) or "rocketmq-client-rust 1.0.0" (clients/rust, whose
                                 `workload` command writes the same format)

The "acknowledged" sends are those with status SEND_OK. The other three statuses mean "stored on the
master, replication/flush not confirmed". ERROR means the client does not know.
"""
from __future__ import annotations

import itertools
import json
import os
import threading
import time
import uuid

SEND_STATUSES = ("SEND_OK", "FLUSH_DISK_TIMEOUT", "FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE")
ERROR = "ERROR"
RECEIVED = "RECEIVED"
INVOKE, SEND, RECEIVE, SUBSCRIBE, UNSUBSCRIBE = "invoke", "send", "receive", "subscribe", "unsubscribe"
FROM_FIRST, FROM_NOW = "FROM_FIRST", "FROM_NOW"  # a subscribe line's status: which sends the group is owed
FIELDS = ("client", "seq", "op", "group", "shard", "topic", "send_id", "attempt", "uniq_key", "status", "error",
          "offset_msg_id", "broker_name", "queue_id", "queue_offset", "commit_log_offset",
          "store_timestamp", "ordered", "start_ms", "end_ms", "body_len", "library")
OFFICIAL_LIBRARY = "rocketmq 0.4.4 (C++ 1.0.1)"


def now_ms() -> int:
    return int(time.time() * 1000)


def status_name(status) -> str:
    """rocketmq.client.SendStatus (or its int / C++ name) -> the history's status text."""
    names = {0: "SEND_OK", 1: "FLUSH_DISK_TIMEOUT", 2: "FLUSH_SLAVE_TIMEOUT", 3: "SLAVE_NOT_AVAILABLE"}
    if isinstance(status, int):  # SendStatus is an IntEnum
        return names.get(int(status), f"UNKNOWN_{int(status)}")
    text = str(status).rsplit(".", 1)[-1].upper()
    text = {"OK": "SEND_OK", "SEND_FLUSH_DISK_TIMEOUT": "FLUSH_DISK_TIMEOUT",
            "SEND_FLUSH_SLAVE_TIMEOUT": "FLUSH_SLAVE_TIMEOUT",
            "SEND_SLAVE_NOT_AVAILABLE": "SLAVE_NOT_AVAILABLE",
            "SLAVE_NOT_AVAILABE": "SLAVE_NOT_AVAILABLE"}.get(text, text)
    return text


class HistoryWriter:
    """Appends records to one JSONL file; thread-safe (client callbacks run on C++ threads)."""

    def __init__(self, path: str, library: str | None = None):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.path = path
        self.library = library
        self._fh = open(path, "a", buffering=1)
        self._lock = threading.Lock()
        self._seq = itertools.count()

    def append(self, rec: dict) -> dict:
        with self._lock:
            rec = {k: rec.get(k) for k in FIELDS} | {"seq": next(self._seq)}
            if rec["library"] is None:
                rec["library"] = self.library
            self._fh.write(json.dumps(rec, separators=(",", ":")) + "\n")
        return rec

    def close(self) -> None:
        with self._lock:
            self._fh.close()


def read_history(path: str) -> list[dict]:
    with open(path) as fh:
        return [json.loads(line) for line in fh if line.strip()]


class HistoryRecorder:
    """Wraps an official-client producer and consumer callbacks and records every operation.

        rec = HistoryRecorder("RUN/history/p1.jsonl", client="p1")
        producer = rec.producer("PG", namesrv="127.0.0.1:9876")         # started rocketmq Producer
        rec.send(producer, "TopicTest", b"body")                          # send_sync
        rec.send_orderly(producer, "TopicTest", b"body", shard=3)         # selector: shard % queues
        consumer = rec.push_consumer("CG", "TopicTest", namesrv=..., ordered=False)

    The rocketmq package is imported only when a client is built, so this module (and the pipeline)
    import without it.
    """

    def __init__(self, path: str, client: str | None = None):
        self.client = client or os.path.splitext(os.path.basename(path))[0]
        self.writer = HistoryWriter(path, library=OFFICIAL_LIBRARY)
        self._ids = itertools.count(1)
        self.producer_group: str | None = None

    # -- ids --------------------------------------------------------------------------------------
    def new_send_id(self) -> str:
        return f"{self.client}-{next(self._ids)}-{uuid.uuid4().hex[:8]}"

    # -- building clients -------------------------------------------------------------------------
    def producer(self, group: str, namesrv: str, timeout_ms: int | None = None):
        from rocketmq.client import Producer
        self.producer_group = group
        p = Producer(group, timeout=timeout_ms)
        p.set_namesrv_addr(namesrv)
        _sign(p)
        p.start()
        return p

    def push_consumer(self, group: str, topic: str, namesrv: str, ordered: bool = False,
                      expression: str = "*", threads: int | None = None, on_message=None, drop_every: int = 0):
        """A started PushConsumer whose callback records each message (then calls on_message).

        drop_every=N > 0 plants a consumer bug for the checkers' own tests: every Nth message is
        acknowledged to the broker but never recorded nor handed on, as an application that swallows it."""
        from rocketmq.client import PushConsumer
        c = PushConsumer(group, orderly=ordered)
        c.set_namesrv_addr(namesrv)
        _sign(c)
        if threads:
            c.set_thread_count(threads)
        self.subscribed(group, topic, ordered)
        c.subscribe(topic, self.consumer_callback(ordered, on_message, group, drop_every), expression)
        c.start()
        return c

    # -- sending ----------------------------------------------------------------------------------
    def _message(self, topic: str, body: bytes, send_id: str, tags: str | None, properties: dict | None):
        from rocketmq.client import Message
        msg = Message(topic)
        msg.set_keys(send_id)
        if tags:
            msg.set_tags(tags)
        for k, v in (properties or {}).items():
            msg.set_property(k, v)
        msg.set_body(body)
        return msg

    def send_record(self, topic: str, send_id: str, attempt: int, body_len: int, shard=None,
                    queue_id: int | None = None) -> dict:
        """The fields every record of one send try shares; invoked() writes its "invoke" line."""
        return {"client": self.client, "op": SEND, "group": self.producer_group, "topic": topic,
                "send_id": send_id, "attempt": attempt, "queue_id": queue_id, "body_len": body_len,
                "shard": None if shard is None else str(shard)}

    def invoked(self, rec: dict) -> None:
        """Write the "invoke" line of a try about to be handed to the client, and stamp its start."""
        rec["start_ms"] = now_ms()
        self.writer.append(rec | {"op": INVOKE, "end_ms": rec["start_ms"]})

    def _record_send(self, call, topic: str, body: bytes, send_id: str | None, attempt: int,
                     queue_id: int | None, tags, properties, shard=None):
        send_id = send_id or self.new_send_id()
        rec = self.send_record(topic, send_id, attempt, len(body), shard, queue_id)
        msg = self._message(topic, body, send_id, tags, properties)
        self.invoked(rec)
        try:
            res = call(msg)
        except Exception as e:  # the client raises MQClientException-like errors
            rec.update(end_ms=now_ms(), status=ERROR, error=f"{type(e).__name__}: {e}")
            self.writer.append(rec)
            raise
        uniq = res.msg_id.decode() if isinstance(res.msg_id, bytes) else res.msg_id
        rec.update(end_ms=now_ms(), status=status_name(res.status), uniq_key=uniq or None,
                   queue_offset=res.offset)
        self.writer.append(rec)
        return res

    def send(self, producer, topic: str, body: bytes, send_id: str | None = None, attempt: int = 1,
             tags: str | None = None, properties: dict | None = None):
        """producer.send_sync, recorded. Raises what the client raises (after recording it)."""
        return self._record_send(producer.send_sync, topic, body, send_id, attempt, None, tags, properties)

    def send_orderly(self, producer, topic: str, body: bytes, shard: int, send_id: str | None = None,
                     attempt: int = 1, tags: str | None = None, properties: dict | None = None,
                     retry_times: int = 0, selector=None):
        """producer.send_orderly with a queue selector (default: shard % number of queues)."""
        def call(msg):
            if selector is None:
                return producer.send_orderly(msg, shard, retry_times=retry_times)
            return producer.send_orderly(msg, shard, retry_times=retry_times, queue_selector=selector)
        return self._record_send(call, topic, body, send_id, attempt, None, tags, properties, shard=shard)

    # -- receiving --------------------------------------------------------------------------------
    def subscribed(self, group: str, topic: str, ordered: bool = False, from_first: bool = True) -> dict:
        """A consumer group starts on a topic: acknowledged sends to the topic are owed to it from now on
        (from_first=False: status FROM_NOW) or all of them (FROM_FIRST: a new group reads the queues from
        their start, as a 4.9 broker lets it while the messages are in memory). The delivery checker
        judges the group even if it received nothing."""
        t = now_ms()
        return self.writer.append({"client": self.client, "op": SUBSCRIBE, "group": group, "topic": topic,
                                   "ordered": ordered, "status": FROM_FIRST if from_first else FROM_NOW,
                                   "start_ms": t, "end_ms": t})

    def unsubscribed(self, group: str) -> dict:
        """A consumer of the group shut down for good: once every consumer of a group that subscribed has,
        sends acknowledged after the last one are no longer owed to it."""
        t = now_ms()
        return self.writer.append({"client": self.client, "op": UNSUBSCRIBE, "group": group, "start_ms": t,
                                   "end_ms": t})

    def record_receive(self, msg, ordered: bool = False, group: str | None = None) -> dict:
        """Record one received message (a rocketmq.client.RecvMessage or anything with its attributes)."""
        t = now_ms()

        def get(attr):
            try:
                value = getattr(msg, attr)
            except Exception:
                return None
            # rocketmq 0.4.4's RecvMessage returns bytes for its text fields.
            return value.decode("utf-8", "replace") if isinstance(value, bytes) and attr != "body" else value
        body = get("body")
        return self.writer.append({
            "client": self.client, "op": RECEIVE, "group": group, "topic": get("topic"), "send_id": get("keys") or None,
            "uniq_key": get("id") or None, "status": RECEIVED, "queue_id": get("queue_id"),
            "queue_offset": get("queue_offset"), "commit_log_offset": get("commit_log_offset"),
            "store_timestamp": get("store_timestamp"), "ordered": ordered, "start_ms": t, "end_ms": t,
            "body_len": len(body) if body is not None else None})

    def consumer_callback(self, ordered: bool = False, on_message=None, group: str | None = None,
                          drop_every: int = 0):
        seen = itertools.count(1)

        def callback(msg):
            if drop_every and next(seen) % drop_every == 0:
                return  # planted: consumed (the client acks it) and thrown away
            self.record_receive(msg, ordered, group)
            if on_message is not None:
                on_message(msg)
        return callback

    def close(self) -> None:
        self.writer.close()


def _sign(client) -> None:
    """Under ACL the kit hands its clients the cluster's credentials in the environment (cluster/acl.py)."""
    from cluster.acl import credentials_from_env
    creds = credentials_from_env()
    if creds:
        client.set_session_credentials(creds[0], creds[1], "")
