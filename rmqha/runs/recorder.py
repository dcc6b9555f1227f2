"""The history recorder around the official client (rocketmq 0.4.4): every send try, answer, receive
and subscription of a workload, written in the history format of rmqha/runs/history.py (its one owner:
field table, writer, reader).
"""

from __future__ import annotations

import itertools
import os
import uuid

from rmqha.runs.history import (
    ERROR,
    FROM_FIRST,
    FROM_NOW,
    INVOKE,
    OFFICIAL_LIBRARY,
    RECEIVE,
    RECEIVED,
    SEND,
    SUBSCRIBE,
    UNSUBSCRIBE,
    HistoryWriter,
    now_ms,
)


def status_name(status) -> str:
    """rocketmq.client.SendStatus (or its int / C++ name) -> the history's status text."""
    names = {0: "SEND_OK", 1: "FLUSH_DISK_TIMEOUT", 2: "FLUSH_SLAVE_TIMEOUT", 3: "SLAVE_NOT_AVAILABLE"}
    if isinstance(status, int):  # SendStatus is an IntEnum
        return names.get(int(status), f"UNKNOWN_{int(status)}")
    text = str(status).rsplit(".", 1)[-1].upper()
    text = {
        "OK": "SEND_OK",
        "SEND_FLUSH_DISK_TIMEOUT": "FLUSH_DISK_TIMEOUT",
        "SEND_FLUSH_SLAVE_TIMEOUT": "FLUSH_SLAVE_TIMEOUT",
        "SEND_SLAVE_NOT_AVAILABLE": "SLAVE_NOT_AVAILABLE",
        "SLAVE_NOT_AVAILABE": "SLAVE_NOT_AVAILABLE",
    }.get(text, text)
    return text


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

    def push_consumer(
        self,
        group: str,
        topic: str,
        namesrv: str,
        ordered: bool = False,
        expression: str = "*",
        threads: int | None = None,
        on_message=None,
        drop_every: int = 0,
    ):
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

    def send_record(
        self, topic: str, send_id: str, attempt: int, body_len: int, shard=None, queue_id: int | None = None
    ) -> dict:
        """The fields every record of one send try shares; invoked() writes its "invoke" line."""
        return {
            "client": self.client,
            "op": SEND,
            "group": self.producer_group,
            "topic": topic,
            "send_id": send_id,
            "attempt": attempt,
            "queue_id": queue_id,
            "body_len": body_len,
            "shard": None if shard is None else str(shard),
        }

    def invoked(self, rec: dict, append=None) -> None:
        """Write the "invoke" line of a try about to be handed to the client, and stamp its start."""
        rec["start_ms"] = now_ms()
        (append or self.writer.append)(rec | {"op": INVOKE, "end_ms": rec["start_ms"]})

    @staticmethod
    def answered(rec: dict, res) -> dict:
        """The "send" line of a try the broker answered (a rocketmq.client SendResult)."""
        uniq = res.msg_id.decode() if isinstance(res.msg_id, bytes) else res.msg_id
        return rec | {
            "end_ms": now_ms(),
            "status": status_name(res.status),
            "uniq_key": uniq or None,
            "queue_offset": res.offset,
        }

    @staticmethod
    def failed(rec: dict, exc: BaseException) -> dict:
        """The "send" line of a try the client raised for: ERROR, the client does not know."""
        return rec | {"end_ms": now_ms(), "status": ERROR, "error": f"{type(exc).__name__}: {exc}"}

    def record_call(self, call, msg, rec: dict, append=None):
        """call(msg), recorded: its "invoke" line, then its answer or its error (raised again)."""
        append = append or self.writer.append
        self.invoked(rec, append)
        try:
            res = call(msg)
        except Exception as e:  # the client raises MQClientException-like errors
            append(self.failed(rec, e))
            raise
        append(self.answered(rec, res))
        return res

    def _record_send(
        self,
        call,
        topic: str,
        body: bytes,
        send_id: str | None,
        attempt: int,
        queue_id: int | None,
        tags,
        properties,
        shard=None,
    ):
        send_id = send_id or self.new_send_id()
        rec = self.send_record(topic, send_id, attempt, len(body), shard, queue_id)
        msg = self._message(topic, body, send_id, tags, properties)
        return self.record_call(call, msg, rec)

    def send(
        self,
        producer,
        topic: str,
        body: bytes,
        send_id: str | None = None,
        attempt: int = 1,
        tags: str | None = None,
        properties: dict | None = None,
    ):
        """producer.send_sync, recorded. Raises what the client raises (after recording it)."""
        return self._record_send(producer.send_sync, topic, body, send_id, attempt, None, tags, properties)

    def send_orderly(
        self,
        producer,
        topic: str,
        body: bytes,
        shard: int,
        send_id: str | None = None,
        attempt: int = 1,
        tags: str | None = None,
        properties: dict | None = None,
        retry_times: int = 0,
        selector=None,
    ):
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
        return self.writer.append(
            {
                "client": self.client,
                "op": SUBSCRIBE,
                "group": group,
                "topic": topic,
                "ordered": ordered,
                "status": FROM_FIRST if from_first else FROM_NOW,
                "start_ms": t,
                "end_ms": t,
            }
        )

    def unsubscribed(self, group: str) -> dict:
        """A consumer of the group shut down for good: once every consumer of a group that subscribed has,
        sends acknowledged after the last one are no longer owed to it."""
        t = now_ms()
        return self.writer.append(
            {"client": self.client, "op": UNSUBSCRIBE, "group": group, "start_ms": t, "end_ms": t}
        )

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
        return self.writer.append(
            {
                "client": self.client,
                "op": RECEIVE,
                "group": group,
                "topic": get("topic"),
                "send_id": get("keys") or None,
                "uniq_key": get("id") or None,
                "status": RECEIVED,
                "queue_id": get("queue_id"),
                "queue_offset": get("queue_offset"),
                "commit_log_offset": get("commit_log_offset"),
                "store_timestamp": get("store_timestamp"),
                "ordered": ordered,
                "start_ms": t,
                "end_ms": t,
                "body_len": len(body) if body is not None else None,
            }
        )

    def consumer_callback(self, ordered: bool = False, on_message=None, group: str | None = None, drop_every: int = 0):
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


# Under ACL the kit hands its clients the cluster's credentials in the environment (rmqha/cluster/acl.py env_of).
ENV_AK, ENV_SK = "RMQHA_ACCESS_KEY", "RMQHA_SECRET_KEY"


def credentials_from_env() -> tuple[str, str] | None:
    ak, sk = os.environ.get(ENV_AK), os.environ.get(ENV_SK)
    return (ak, sk) if ak and sk else None


def _sign(client) -> None:
    """A client signed with the cluster's credentials from the environment, when there are any."""
    creds = credentials_from_env()
    if creds:
        client.set_session_credentials(creds[0], creds[1], "")
