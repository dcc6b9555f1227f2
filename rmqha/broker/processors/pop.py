"""POP_MESSAGE (200050), ACK_MESSAGE (200051) and CHANGE_MESSAGE_INVISIBLETIME (200053): RocketMQ 5.x's
POP consumption over remoting, for the 5.x gRPC proxy (rmqha/proxy). The work is rmqha/broker/pop/.

POP_MESSAGE header (PopMessageRequestHeader): consumerGroup, topic, queueId (-1: every read queue),
maxMsgNums (1..32), invisibleTime (ms), pollTime (ms of long polling), bornTime, initMode, expType and
exp (TAG filter; SQL is not served), order (FIFO pops are served as ordinary ones: README), attemptId.
Reply (PopMessageResponseHeader): popTime, invisibleTime, reviveQid, restNum, startOffsetInfo,
msgOffsetInfo, orderCountInfo; the body is the messages in the commit-log format, each with POP_CK.
Nothing: PULL_NOT_FOUND at once with pollTime 0, else POLLING_TIMEOUT (210) when the long poll ends.

ACK_MESSAGE (AckMessageRequestHeader): consumerGroup, topic (the real topic: the retry topic for a
retried message), queueId, extraInfo, offset. CHANGE_MESSAGE_INVISIBLETIME adds invisibleTime and
answers popTime, invisibleTime, reviveQid (ChangeInvisibleTimeResponseHeader). Both on a master only.
"""

from __future__ import annotations

import logging

from twisted.internet import defer

from rmqha.broker.support import validation
from rmqha.broker.pop import checkpoint as cp
from rmqha.broker.pop.service import REVIVE_QID, PopError, PopService
from rmqha.broker.remoting.codes import ResponseCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.remoting.handlers import Processors, handles
from rmqha.broker.store import record

from .pull import parse_subscription

log = logging.getLogger("rmqha.broker.pop")

POP_MESSAGE = 200050
ACK_MESSAGE = 200051
CHANGE_MESSAGE_INVISIBLETIME = 200053
POLLING_TIMEOUT = 210  # 5.x ResponseCode
MAX_POLL_MS = 60_000


class _Waiter:
    __slots__ = ("topics", "deferred", "timer")

    def __init__(self, topics, deferred, timer):
        self.topics, self.deferred, self.timer = topics, deferred, timer


class PopProcessors(Processors):
    def __init__(self, config, service: PopService, topics, groups, store, clock):
        self.config = config
        self.service = service
        self.topics = topics
        self.groups = groups
        self.clock = clock
        self._rotate = 0
        self._waiters: list[_Waiter] = []
        store.dispatch_listeners.append(self._on_dispatch)

    # ---- long polling: one timer per waiter, woken by a new message on one of its topics ----------------

    def _on_dispatch(self, topic: str, queue_id: int) -> None:
        for w in [w for w in self._waiters if topic in w.topics]:
            self._wake(w)

    def _wake(self, w: _Waiter) -> None:
        if w in self._waiters:
            self._waiters.remove(w)
            if w.timer.active():
                w.timer.cancel()
            self.clock.callLater(0, w.deferred.callback, True)

    def _wait(self, topics: set[str], ms: int) -> defer.Deferred:
        d: defer.Deferred = defer.Deferred()
        w = _Waiter(topics, d, None)
        w.timer = self.clock.callLater(ms / 1000.0, self._expire, w)
        self._waiters.append(w)
        return d

    def _expire(self, w: _Waiter) -> None:
        if w in self._waiters:
            self._waiters.remove(w)
            w.deferred.callback(False)

    # ---- POP_MESSAGE ----------------------------------------------------------------------------------

    def _refusal(self, req: RemotingCommand, group: str, topic: str) -> RemotingCommand | None:
        if not self.config.is_master:
            return req.make_response(ResponseCode.SERVICE_NOT_AVAILABLE, "the broker is a slave: pop from its master")
        if self.topics.get(topic) is None:
            return req.make_response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        if self.groups is not None and self.groups.find_or_create(group) is None:
            return req.make_response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group [{group}] does not exist"
            )
        return None

    @handles(POP_MESSAGE)
    @defer.inlineCallbacks
    def pop(self, req: RemotingCommand, ctx):
        group = validation.check_group(req.get_str("consumerGroup"))
        topic = validation.check_topic(req.get_str("topic"))
        queue_id = req.get_int("queueId")
        max_nums = req.get_int("maxMsgNums")
        invisible = req.get_long("invisibleTime")
        poll_ms = min(max(0, req.get_long("pollTime", 0)), MAX_POLL_MS)
        if not 0 < max_nums <= cp.MAX_POP_NUMS:
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"maxMsgNums {max_nums} is not in 1..{cp.MAX_POP_NUMS}")
        if invisible <= 0:
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"invisibleTime {invisible} must be positive")
        refused = self._refusal(req, group, topic)
        if refused is not None:
            return refused
        if req.ext_fields.get("expType", "TAG") not in ("TAG", ""):
            return req.make_response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, "only TAG filters are served")
        tags = parse_subscription(req.ext_fields.get("exp", "*"))
        deadline = self.clock.seconds() + poll_ms / 1000.0
        while True:
            self._rotate += 1
            try:
                pop_time, msgs, rest = yield self.service.pop(
                    group, topic, queue_id, max_nums, invisible, tags, self._rotate
                )
            except PopError as e:
                return req.make_response(e.code, str(e))
            if msgs:
                return self._found(req, pop_time, invisible, msgs, rest)
            left = deadline - self.clock.seconds()
            if left <= 0:
                code = POLLING_TIMEOUT if poll_ms else ResponseCode.PULL_NOT_FOUND
                return req.make_response(
                    code,
                    "no new message",
                    {"popTime": pop_time, "invisibleTime": invisible, "reviveQid": REVIVE_QID, "restNum": 0},
                )
            yield self._wait({topic, cp.retry_topic(group, topic)}, int(left * 1000))

    def _found(self, req, pop_time: int, invisible: int, msgs: list[record.Message], rest: int) -> RemotingCommand:
        body = b"".join(bytes(record.encode(m).finish(m.queue_offset, m.physical_offset)) for m in msgs)
        starts: dict[str, int] = {}
        offsets: dict[str, list[int]] = {}
        for m in msgs:
            extra = m.properties[cp.PROPERTY_POP_CK].split(" ")
            key = f"{extra[4]} {m.queue_id}"  # kind and queue, as ExtraInfoUtil's "retry queueId" keys
            starts.setdefault(key, int(extra[0]))
            offsets.setdefault(key, []).append(m.queue_offset)
        fields = {
            "popTime": pop_time,
            "invisibleTime": invisible,
            "reviveQid": REVIVE_QID,
            "restNum": rest,
            "startOffsetInfo": ";".join(f"{k} {v}" for k, v in starts.items()),
            "msgOffsetInfo": ";".join(f"{k} {','.join(map(str, v))}" for k, v in offsets.items()),
        }
        return req.make_response(ResponseCode.SUCCESS, None, fields, body=body)

    # ---- ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME ------------------------------------------------------

    def _ack_header(self, req: RemotingCommand):
        group = validation.check_group(req.get_str("consumerGroup"))
        topic = validation.check_topic(req.get_str("topic"))
        try:
            extra = cp.parse_extra_info(req.get_str("extraInfo"))
        except cp.BadRecord as e:
            return None, req.make_response(ResponseCode.SYSTEM_ERROR, str(e))
        if not self.config.is_master:
            return None, req.make_response(
                ResponseCode.SERVICE_NOT_AVAILABLE, "the broker is a slave: ack on its master"
            )
        if self.topics.get(topic) is None:
            return None, req.make_response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        return (group, topic, req.get_int("queueId"), extra, req.get_long("offset")), None

    @handles(ACK_MESSAGE)
    @defer.inlineCallbacks
    def ack(self, req: RemotingCommand, ctx):
        args, refused = self._ack_header(req)
        if refused is not None:
            return refused
        try:
            yield self.service.ack(*args)
        except PopError as e:
            return req.make_response(e.code, str(e))
        return req.make_response()

    @handles(CHANGE_MESSAGE_INVISIBLETIME)
    @defer.inlineCallbacks
    def change_invisible(self, req: RemotingCommand, ctx):
        args, refused = self._ack_header(req)
        if refused is not None:
            return refused
        invisible = req.get_long("invisibleTime")
        if invisible < 0:
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"invisibleTime {invisible} is negative")
        try:
            ck = yield self.service.change_invisible(*args, invisible)
        except PopError as e:
            return req.make_response(e.code, str(e))
        return req.make_response(
            ResponseCode.SUCCESS,
            None,
            {"popTime": ck.pop_time, "invisibleTime": ck.invisible_time, "reviveQid": REVIVE_QID},
        )
