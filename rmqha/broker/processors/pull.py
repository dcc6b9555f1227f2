"""PULL_MESSAGE (11) with long polling — WIRE-FACTS §5.

* Topic unknown to the topic config -> TOPIC_NOT_EXIST, except that a queue the store holds is
  served anyway (a slave whose copy of the master's topic config is older than its data must go on
  serving consumers when the master is gone). queueId >= readQueueNums -> SYSTEM_ERROR.
* Tag filter: the request's subscription when the SUBSCRIPTION bit is set, else the subscription the
  group registered by heartbeat (refused when there is none, below); "*" or "" matches all, else the consume
  queue's tagsCode must be one of the Java String.hashCode()s of the "||"-separated tags.
* Store status -> code as in §5; the body is the raw stored records, concatenated. Compressed bodies
  (sysflag bit 0) were stored as sent and go out as stored.
* PULL_OFFSET_MOVED on a SLAVE becomes PULL_RETRY_IMMEDIATELY (RocketMQ's offsetCheckInSlave=false):
  a consumer reading a lagging slave must not reset its offset.
* SUSPEND bit set and nothing to read (PULL_NOT_FOUND): the request is held until a consume-queue
  unit is added to that queue (store.dispatch_listeners: the send path on a master, the replication
  dispatcher on a slave) or suspendTimeoutMillis passes on the reactor clock, then it is answered
  from the store again (19 if still nothing). Held requests of a closed connection are dropped.
* COMMIT_OFFSET bit (master only): commitOffset is stored as the group's consumer offset.
* suggestWhichBrokerId is always 0 (the master).
* The subscription group is found or auto-created first (subscription_groups.py): none ->
  SUBSCRIPTION_GROUP_NOT_EXIST, consumeEnable=false -> NO_PERMISSION. Without the SUBSCRIPTION bit the
  group must be online with a subscription to the topic, as 4.9.8 checks: no group ->
  SUBSCRIPTION_NOT_EXIST, no subscription to the topic -> SUBSCRIPTION_NOT_EXIST, an older subVersion
  than the request's -> SUBSCRIPTION_NOT_LATEST, a broadcasting group where consumeBroadcastEnable
  is false -> NO_PERMISSION.
"""

from __future__ import annotations

import logging

from twisted.internet import defer

from rmqha.broker.support import validation
from rmqha.broker.remoting.codes import PERM_READ, RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.remoting.handlers import Processors, handles
from rmqha.broker.store import record
from rmqha.broker.store.message_store import GetStatus

log = logging.getLogger("rmqha.broker.pull")

FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4
FLAG_CLASS_FILTER = 0x8

MAX_SUSPEND_S = 60.0  # cap on a client's suspendTimeoutMillis (its own request timeout is 30 s)
FAQ = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."  # 4.9's FAQUrl.suggestTodo
BROADCASTING = ("BROADCASTING", 0, "0")  # MessageModel by name (Java) or ordinal (C++)


def parse_subscription(sub: str | None) -> set[int] | None:
    """Tag hash codes to match, or None for "all"."""
    if sub is None:
        return None
    sub = sub.strip()
    if not sub or sub == "*":
        return None
    tags = {t.strip() for t in sub.split("||") if t.strip()}
    if not tags or "*" in tags:
        return None
    return {record.java_string_hash(t) for t in tags}


class _Held:
    __slots__ = ("req", "ctx", "deferred", "offset", "timer")

    def __init__(self, req, ctx, deferred, offset):
        self.req, self.ctx, self.deferred, self.offset = req, ctx, deferred, offset
        self.timer = None


class PullRequestHoldService:
    """Suspended pulls per (topic, queueId), woken by new consume-queue units or their timeout."""

    def __init__(self, clock, store, answer, max_held: int = 10000):
        self.clock = clock
        self.store = store
        self.answer = answer  # (req, ctx) -> RemotingCommand, never suspending
        self.max_held = max_held
        self.held: dict[tuple[str, int], list[_Held]] = {}
        self.count = 0
        self.refused = 0  # pulls answered at once because max_held were held
        self._wake_scheduled: set[tuple[str, int]] = set()
        store.dispatch_listeners.append(self.on_dispatch)

    def __len__(self) -> int:
        return self.count

    def hold(self, req, ctx, topic: str, queue_id: int, offset: int, timeout_s: float) -> defer.Deferred | None:
        """A Deferred for the answer, or None when max_held pulls are held already (answer now)."""
        if self.count >= self.max_held:
            self.refused += 1
            return None
        d = defer.Deferred()
        h = _Held(req, ctx, d, offset)
        key = (topic, queue_id)
        self.held.setdefault(key, []).append(h)
        self.count += 1
        h.timer = self.clock.callLater(timeout_s, self._expire, key, h)
        # One close hook per connection, however many pulls it holds over its life.
        mine = ctx.attributes.get("held_pulls")
        if mine is None:
            mine = ctx.attributes["held_pulls"] = {}
            ctx.add_close_hook(self._connection_closed)
        mine[h] = key
        return d

    def _connection_closed(self, ctx) -> None:
        for h, key in list(ctx.attributes.pop("held_pulls", {}).items()):
            self._drop(key, h)

    def _remove(self, key, h) -> bool:
        lst = self.held.get(key)
        if not lst or h not in lst:
            return False
        lst.remove(h)
        self.count -= 1
        if not lst:
            del self.held[key]
        mine = h.ctx.attributes.get("held_pulls")
        if mine is not None:
            mine.pop(h, None)
        return True

    def _drop(self, key, h) -> None:
        if self._remove(key, h) and h.timer is not None and h.timer.active():
            h.timer.cancel()

    def _expire(self, key, h) -> None:
        if self._remove(key, h):
            self._fire(h)

    def _fire(self, h) -> None:
        try:
            response = self.answer(h.req, h.ctx)
        except Exception as e:  # answer() is plain code; report it to the client like the registry would
            log.exception("answering a held pull failed")
            response = h.req.make_response(ResponseCode.SYSTEM_ERROR, str(e))
        h.deferred.callback(response)

    def on_dispatch(self, topic: str, queue_id: int) -> None:
        key = (topic, queue_id)
        if key in self.held and key not in self._wake_scheduled:
            # Answer after the current call stack (the send path) has finished its bookkeeping.
            self._wake_scheduled.add(key)
            self.clock.callLater(0, self._wake, key)

    def _wake(self, key) -> None:
        self._wake_scheduled.discard(key)
        max_offset = self.store.max_queue_offset(*key)
        for h in list(self.held.get(key, [])):
            if max_offset > h.offset and self._remove(key, h):
                if h.timer is not None and h.timer.active():
                    h.timer.cancel()
                self._fire(h)

    def stop(self) -> None:
        """Answer every held pull now (on shutdown), so clients do not wait for a dead broker."""
        for key in list(self.held):
            for h in list(self.held.get(key, [])):
                self._drop(key, h)
                if not h.ctx.closed:
                    self._fire(h)


class PullProcessor(Processors):
    def __init__(self, config, store, topics, offsets, consumers, clock, served=None, stats=None, groups=None):
        self.config = config
        self.groups = groups  # SubscriptionGroupManager (None: every group may consume)
        self.stats = stats  # rmqha.broker.observability.stats_service.BrokerStats: 4.9's get counts
        self.served = served  # rmqha.broker.observability.served.ServedLog: which ranges this node returned
        self.store = store
        self.topics = topics
        self.offsets = offsets
        self.consumers = consumers
        self.clock = clock
        self.hold_service = PullRequestHoldService(
            clock, store, self._answer_after_hold, max_held=config.maxHeldPullRequests
        )

    def install_metrics(self, reg) -> None:
        self.responses = reg.counter("pull_responses_total", "PULL_MESSAGE replies by response code")
        reg.gauge("pull_requests_held", "long-polling pulls waiting for a message", lambda: len(self.hold_service))
        reg.gauge(
            "pull_requests_not_held",
            "long polls answered at once: maxHeldPullRequests were held",
            lambda: self.hold_service.refused,
        )

    responses = None

    def _count(self, response):
        if self.responses is not None and isinstance(response, RemotingCommand):
            self.responses.inc(code=int(response.code))
        return response

    # 5.x clients' lite-pull consumers send 361 with PULL_MESSAGE's header (and sysFlag bit 16, which
    # changes nothing here): the Java 5.x broker serves both with one processor.
    @handles(RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE)
    def process(self, req: RemotingCommand, ctx):
        result = self._process(req, ctx, allow_suspend=True)
        if isinstance(result, defer.Deferred):
            return result.addCallback(self._count)
        return self._count(result)

    def _answer_after_hold(self, req, ctx) -> RemotingCommand:
        return self._process(req, ctx, allow_suspend=False)

    def _registered_subscription(self, req, group: str, topic: str, sg):
        """(subscription expression, None) from the group's heartbeat, or (None, refusal) as 4.9.8."""
        info = self.consumers.consumer_groups.get(group) if self.consumers is not None else None
        if info is None:
            return None, req.make_response(
                ResponseCode.SUBSCRIPTION_NOT_EXIST, "the consumer's group info not exist" + FAQ
            )
        if sg is not None and not sg.consumeBroadcastEnable and info.message_model in BROADCASTING:
            return None, req.make_response(
                ResponseCode.NO_PERMISSION, f"the consumer group[{group}] can not consume by broadcast way"
            )
        data = info.subscriptions.get(topic)
        if data is None:
            return None, req.make_response(
                ResponseCode.SUBSCRIPTION_NOT_EXIST, "the consumer's subscription not exist" + FAQ
            )
        try:
            registered_version = int(data.get("subVersion", 0))
        except (TypeError, ValueError):
            registered_version = 0
        if registered_version < req.get_long("subVersion", 0):
            return None, req.make_response(
                ResponseCode.SUBSCRIPTION_NOT_LATEST, "the consumer's subscription not latest"
            )
        return str(data.get("subString", "*")), None

    def _process(self, req: RemotingCommand, ctx, allow_suspend: bool):
        c = self.config
        if not c.brokerPermission & PERM_READ:
            return req.make_response(
                ResponseCode.NO_PERMISSION, f"the broker[{c.broker_ip}] pulling message is forbidden"
            )
        group = validation.check_group(req.get_str("consumerGroup"))
        topic = validation.check_topic(req.get_str("topic"))
        queue_id = req.get_int("queueId")
        offset = req.get_long("queueOffset")
        max_msgs = req.get_int("maxMsgNums", 32)
        sys_flag = req.get_int("sysFlag", 0)
        commit_offset = req.get_long("commitOffset", -1)
        suspend_ms = req.get_long("suspendTimeoutMillis", 15000)

        sg, refused = self._subscription_group(req, group)
        if refused is not None:
            return refused
        refused = self._check_topic_queue(req, ctx, topic, queue_id)
        if refused is not None:
            return refused
        if sys_flag & FLAG_SUBSCRIPTION:
            sub = req.get_str("subscription", "*")
        else:
            sub, refused = self._registered_subscription(req, group, topic, sg)
            if refused is not None:
                return refused
        tag_codes = parse_subscription(sub)

        res = self.store.get_messages(topic, queue_id, offset, max_msgs, tag_codes)
        if self.stats is not None:
            self.stats.store.on_get(len(res.records) if res.status == GetStatus.FOUND else 0)
        code = self._pull_code(res.status, offset)

        if allow_suspend and sys_flag & FLAG_COMMIT_OFFSET and c.is_master and commit_offset >= 0:
            self.offsets.commit(group, topic, queue_id, commit_offset)

        if code == ResponseCode.PULL_NOT_FOUND and allow_suspend and sys_flag & FLAG_SUSPEND:
            timeout_s = min(max(suspend_ms, 0) / 1000.0, MAX_SUSPEND_S)
            held = self.hold_service.hold(req, ctx, topic, queue_id, offset, timeout_s)
            if held is not None:
                return held

        body = self._found_body(group, topic, queue_id, offset, res) if code == ResponseCode.SUCCESS else b""
        ext = {
            "suggestWhichBrokerId": 0,
            "nextBeginOffset": res.next_begin_offset,
            "minOffset": res.min_offset,
            "maxOffset": res.max_offset,
        }
        return req.make_response(code, res.status, ext_fields=ext, body=body)

    def _subscription_group(self, req: RemotingCommand, group: str):
        """(the group's config, created if it may be; None without a group manager), or the refusal."""
        if self.groups is None:
            return None, None
        sg = self.groups.find_or_create(group)
        if sg is None:
            return None, req.make_response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group [{group}] does not exist, {FAQ}"
            )
        if not sg.consumeEnable:
            return None, req.make_response(ResponseCode.NO_PERMISSION, f"subscription group no permission, {group}")
        return sg, None

    def _check_topic_queue(self, req: RemotingCommand, ctx, topic: str, queue_id: int):
        """The refusal when the topic is unknown (and the store has no such queue), unreadable, or has no
        such read queue; None when the pull may go on."""
        tc = self.topics.get(topic)
        if tc is None:
            if (topic, queue_id) not in self.store.queues:
                return req.make_response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
            return None
        if not tc.perm & PERM_READ:
            return req.make_response(ResponseCode.NO_PERMISSION, f"the topic[{topic}] pulling message is forbidden")
        if queue_id < 0 or queue_id >= tc.read_queue_nums:
            return req.make_response(
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{queue_id}] is illegal, topic:[{topic}] "
                f"topicConfig.readQueueNums:[{tc.read_queue_nums}] "
                f"consumer:[{ctx.peer_address}]",
            )
        return None

    def _pull_code(self, status, offset: int) -> int:
        """The response code for the store's answer; on a slave, OFFSET_MOVED becomes RETRY_IMMEDIATELY."""
        if status == GetStatus.FOUND:
            code = ResponseCode.SUCCESS
        elif status in (GetStatus.NO_MATCHED_MESSAGE, GetStatus.MESSAGE_WAS_REMOVING):
            code = ResponseCode.PULL_RETRY_IMMEDIATELY
        elif status in (GetStatus.NO_MATCHED_LOGIC_QUEUE, GetStatus.NO_MESSAGE_IN_QUEUE):
            code = ResponseCode.PULL_OFFSET_MOVED if offset != 0 else ResponseCode.PULL_NOT_FOUND
        elif status in (GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_OVERFLOW_BADLY):
            code = ResponseCode.PULL_OFFSET_MOVED
        else:  # OFFSET_OVERFLOW_ONE, OFFSET_FOUND_NULL
            code = ResponseCode.PULL_NOT_FOUND
        if code == ResponseCode.PULL_OFFSET_MOVED and not self.config.is_master:
            code = ResponseCode.PULL_RETRY_IMMEDIATELY
        return code

    def _found_body(self, group: str, topic: str, queue_id: int, offset: int, res) -> bytes:
        """The records found, as the body; counted in the statistics and the served log."""
        body = b"".join(bytes(r) for r in res.records)
        if self.stats is not None:
            self.stats.table.on_get(group, topic, len(res.records), len(body))
        if self.served is not None:
            self.served.record(
                int(self.clock.seconds() * 1000),
                group,
                topic,
                queue_id,
                offset,
                res.next_begin_offset,
                len(res.records),
            )
        return body
