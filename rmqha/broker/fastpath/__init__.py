"""The send path's compiled accelerator (`_fastsend.c`), when it is built and allowed.

A plain send (SEND_MESSAGE or SEND_MESSAGE_V2 with the usual header and properties) costs the pure-Python
path ~25 µs in the codec alone (RemotingCommand, json.loads, the reply's JSON) and as much again for the
record; the broker's target is 25 µs for all of it. `scan_sends` reads runs of such requests straight
from a connection's buffer into tuples (FIELDS) and `encode_records` writes their commit-log records in
one buffer, so the per-message work left in Python is the checks and the bookkeeping.

It only ever accepts a subset: anything else stops the scan and goes through the Python path
(rmqha/broker/remoting/codec.py, rmqha/broker/processors/send.py), which stays the reference. Tests compare the two
byte for byte (tests/unit/fastpath) and `make fuzz` compares them on mutated frames.

`sendFastPath=false` in the broker's config turns it off; without a C compiler at install time the
module is simply absent (setup.py builds it as optional) and every send takes the Python path.
"""

from __future__ import annotations

# The tuple scan_sends() returns for each request (positions are in the buffer it scanned).
FIELDS = (
    "start",
    "end",
    "body",
    "topic",
    "default_topic",
    "max_reconsume_times",
    "opaque",
    "default_topic_queue_nums",
    "queue_id",
    "sys_flag",
    "born_timestamp",
    "flag",
    "reconsume_times",
    "wait_store_ok",
    "properties",
    "tags",
    "keys",
    "uniq_key",
    "key_hashes",
    "oneway",
)
(
    START,
    END,
    BODY,
    TOPIC,
    DEFAULT_TOPIC,
    MAX_RECONSUME,
    OPAQUE,
    DEFAULT_QUEUES,
    QUEUE_ID,
    SYS_FLAG,
    BORN_TS,
    FLAG,
    RECONSUME,
    WAIT,
    PROPERTIES,
    TAGS,
    KEYS,
    UNIQ,
    KEY_HASHES,
    ONEWAY,
) = range(len(FIELDS))

# Requests one scan takes at most: bounds how long one connection holds the reactor.
SCAN_LIMIT = 256

try:
    from . import _fastsend as native
except ImportError:  # not built here (no compiler at install time): the Python path serves every send
    native = None


def available() -> bool:
    return native is not None
