"""An in-process BrokerServer on a fake clock (no sockets), and helpers to call its processors."""

from __future__ import annotations

import os

from twisted.internet import defer
from twisted.internet.testing import MemoryReactorClock

from rmqha.broker.config.properties import BrokerConfig
from rmqha.broker.remoting.codes import RequestCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.server import BrokerServer
from rmqha.broker.store import record
from rmqha.cluster.requests import props, send_v1, send_v2
from rmqha.controls.planted import seams_for

__all__ = [
    "TOPIC",
    "Broker",
    "FakeContext",
    "batch_body",
    "decode_records",
    "file_exists",
    "make_config",
    "now_thread",
    "props",
    "pull",
    "send_v1",
    "send_v2",
]  # props and send_*: rmqha/cluster/requests.py

TOPIC = "TopicTest"


def make_config(root, **overrides) -> BrokerConfig:
    settings = {
        "brokerClusterName": "DefaultCluster",
        "brokerName": "broker-a",
        "brokerId": "0",
        "brokerRole": "ASYNC_MASTER",
        "storePathRootDir": str(root),
        "brokerIP1": "127.0.0.1",
        "listenPort": "10911",
        "mappedFileSizeCommitLog": str(1 << 20),
        "mappedFileSizeConsumeQueue": str(20 * 1000),
    }
    if overrides.get("brokerRole") == "SLAVE":
        settings["brokerId"] = "1"
    settings.update({k: str(v) for k, v in overrides.items()})
    return BrokerConfig.from_properties(settings)


def now_thread(fn):
    """run_in_thread replacement: run at once on the calling thread."""
    return defer.maybeDeferred(fn)


class Broker:
    """A started BrokerServer (listen=False) on a MemoryReactorClock."""

    def __init__(self, root, **overrides):
        self.root = str(root)
        self.clock = MemoryReactorClock()
        self.config = make_config(root, **overrides)
        # plantBug: the controls installed as the process entry installs them (rmqha/broker/__main__.py)
        seams = seams_for(self.config.plantBug) if self.config.plantBug else None
        self.server = BrokerServer(self.config, self.clock, clock=self.clock, run_in_thread=now_thread, seams=seams)
        self.server.start(listen=False)

    @property
    def store(self):
        return self.server.controller.store

    def stop(self):
        d = self.server.stop()
        self.clock.advance(0)
        return d

    def call(self, req: RemotingCommand, ctx=None):
        """Run the processor for req.code; returns the response, or the Deferred if it has not fired."""
        ctx = ctx or FakeContext()
        proc = self.server.registry.get(req.code)
        assert proc is not None, f"no processor for code {req.code}"
        result = proc(req, ctx)
        self.clock.advance(0)
        if isinstance(result, defer.Deferred):
            out = []

            def keep(r):
                out.append(r)
                return r

            result.addBoth(keep)
            if out:
                if isinstance(out[0], Exception) or hasattr(out[0], "raiseException"):
                    out[0].raiseException()
                return out[0]
            return result
        return result


class FakeContext:
    def __init__(self, peer="127.0.0.1:50001"):
        self.peer_address = peer
        self.local_address = "127.0.0.1:10911"
        self.closed = False
        self.attributes = {}
        self.hooks = []
        self.sent = []  # oneway requests the broker sent to this client

    def add_close_hook(self, hook):
        if self.closed:
            hook(self)
        else:
            self.hooks.append(hook)

    def send_oneway(self, cmd):
        self.sent.append(cmd)

    def send_request(self, cmd, timeout=3.0):
        self.sent.append(cmd)
        return defer.Deferred()

    def close(self):
        if not self.closed:
            self.closed = True
            hooks, self.hooks = self.hooks, []
            for h in hooks:
                h(self)

    def __hash__(self):
        return id(self)


def pull(
    topic=TOPIC,
    queue_id=0,
    offset=0,
    sys_flag=0x2 | 0x4,
    subscription="*",
    group="CG",
    commit_offset=0,
    suspend_ms=15000,
    max_msgs=32,
) -> RemotingCommand:
    return RemotingCommand.request(
        RequestCode.PULL_MESSAGE,
        {
            "consumerGroup": group,
            "topic": topic,
            "queueId": queue_id,
            "queueOffset": offset,
            "maxMsgNums": max_msgs,
            "sysFlag": sys_flag,
            "commitOffset": commit_offset,
            "suspendTimeoutMillis": suspend_ms,
            "subscription": subscription,
            "subVersion": 1,
        },
    )


def decode_records(body: bytes) -> list[record.Message]:
    out, pos = [], 0
    while pos < len(body):
        r = record.scan(body, pos)
        assert r.kind == record.Scan.MESSAGE, r.reason
        out.append(r.message)
        pos += r.size
    return out


def batch_body(items) -> bytes:
    """docs/formats.md §6.8 batch encoding of (body, properties dict) items."""
    import struct

    out = bytearray()
    for body, p in items:
        pb = record.encode_properties(p).encode()
        total = 20 + len(body) + 2 + len(pb)
        out += struct.pack(">iiiii", total, 0, 0, 0, len(body)) + body + struct.pack(">h", len(pb)) + pb
    return bytes(out)


def file_exists(root, *parts) -> bool:
    return os.path.exists(os.path.join(str(root), *parts))
