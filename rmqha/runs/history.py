"""Client histories: every operation a workload did and what it saw, one JSON object per line.

The one owner of the format: the recorder around the official client (rmqha/runs/recorder.py), the Rust
client (clients/rust), the audit (pipeline/) and the pytest plugin (rmqkit/) all write or read it here.

A history file is `RUN/history/<client>.jsonl` (any *.jsonl under RUN/history is read). Each line:

    field            type        meaning
    client           str         who did it (a producer or consumer id; unique in the run)
    seq              int         position of this line in the recorder (orders ops of one client)
    op               str         "invoke" (a send try handed to the client, written BEFORE the call, so a
                                 try that never gets an answer is still in the history), "send" (its
                                 answer), "receive", "subscribe" (a consumer group starting on a topic;
                                 status FROM_FIRST: every send to it is owed to the group, FROM_NOW: those
                                 acknowledged from then on), "unsubscribe" (a consumer of the group shut
                                 down; after the group's last one, nothing more is owed to it) or "ack"
                                 (a POP consumer, the 5.x client's, acked a message it received: status
                                 ACKED, or ERROR when the ack failed)
    group            str|null    the producer group (invoke/send) or consumer group (receive/subscribe);
                                 the delivery checker judges every consumer group on its own. Histories
                                 without it (older ones) count each consumer client as its own group
    shard            str|null    send_orderly: the sharding key (orderly consumers are judged per key)
    topic            str
    send_id          str         the LOGICAL send: one id per message the workload meant to send. Every
                                 try of it (our own retries, each with a new UNIQ_KEY under the C++
                                 client) has the same send_id. The recorder puts it in the message's
                                 KEYS, so stored copies and received messages carry it too.
    attempt          int         send: 1, 2, ... for the tries of one send_id; receive: the delivery attempt
                                 a POP consumer (the 5.x client) was given (1, then 2, ... each time the
                                 message came back unacked); null for push/pull consumers. The delivery
                                 checker counts a POP consumer's receive as a duplicate only after the
                                 group's first ACKED of that message
    uniq_key         str|null    UNIQ_KEY property (C++ SendResult.msg_id / RecvMessage.id)
    status           str         send: SEND_OK | FLUSH_DISK_TIMEOUT | FLUSH_SLAVE_TIMEOUT |
                                 SLAVE_NOT_AVAILABLE | ERROR (then see `error`); receive: RECEIVED
    error            str|null    exception text when status is ERROR
    offset_msg_id    str|null    the broker's offsetMsgId, when the client exposes it (PyPI rocketmq
                                 0.4.4 does not; the pipeline finds the stored copy by uniq_key)
    broker_name      str|null    the broker group the try went to, when the client says so (the Rust client, for
                                 answered tries); the pipeline resolves an answered try from its stored copy
                                 otherwise. The official client (rocketmq 0.4.4) never says so: its send result has only
                                 status, msg id and offset, its async error only code/file/line/text (the
                                 text is empty), and a queue selector is given only the number of queues,
                                 not which broker each is; so a failed try of it has none
    queue_id         int|null    receive: the queue; send: the queue when known
    queue_offset     int|null    send: SendResult.offset; receive: the message's queue offset
    commit_log_offset int|null   receive: the message's physical offset
    store_timestamp  int|null    receive: the broker's store timestamp (ms)
    ordered          bool        receive: whether this consumer promised per-queue order
    start_ms, end_ms int         wall clock (ms since the epoch) around the call; for a receive both
                                 are the moment the callback ran
    body_len         int|null
    library          str|null    the client library that did it: "rocketmq 0.4.4 (C++ 1.0.1)" (the official
                                 client, rmqha/runs/recorder.py) or "rocketmq-client-rust 1.0.0" (clients/rust, whose
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

SEND_STATUSES = ("SEND_OK", "FLUSH_DISK_TIMEOUT", "FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE")
ERROR = "ERROR"
RECEIVED = "RECEIVED"
ACKED = "ACKED"  # an "ack" line's status (a POP consumer's ack succeeded)
PYTHON5_LIBRARY = "rocketmq-python-client 5.1.2"
INVOKE, SEND, RECEIVE, SUBSCRIBE, UNSUBSCRIBE, ACK = "invoke", "send", "receive", "subscribe", "unsubscribe", "ack"
FROM_FIRST, FROM_NOW = "FROM_FIRST", "FROM_NOW"  # a subscribe line's status: which sends the group is owed
FIELDS = (
    "client",
    "seq",
    "op",
    "group",
    "shard",
    "topic",
    "send_id",
    "attempt",
    "uniq_key",
    "status",
    "error",
    "offset_msg_id",
    "broker_name",
    "queue_id",
    "queue_offset",
    "commit_log_offset",
    "store_timestamp",
    "ordered",
    "start_ms",
    "end_ms",
    "body_len",
    "library",
)
OFFICIAL_LIBRARY = "rocketmq 0.4.4 (C++ 1.0.1)"


def now_ms() -> int:
    return int(time.time() * 1000)


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
