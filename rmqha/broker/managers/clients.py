"""Client channels, producer and consumer groups: HEART_BEAT (34), UNREGISTER_CLIENT (35),
GET_CONSUMER_LIST_BY_GROUP (38), LOCK_BATCH_MQ (41), UNLOCK_BATCH_MQ (42) and
GET_CONSUMER_CONNECTION_LIST (203). Producer groups are shown by producers.py; requests the broker
sends to a client and awaits are in client_calls.py.

As RocketMQ's ConsumerManager / ProducerManager / RebalanceLockManager:
* a heartbeat registers (or refreshes) the connection under every producer and consumer group it
  names; for consumer groups it records the subscriptions and, on a master, creates
  %RETRY%<group> (1 queue, READ|WRITE);
* when a consumer group gains a connection or its subscriptions change, and when a member leaves
  (UNREGISTER_CLIENT, its connection closes, or 120 s pass without a heartbeat), every remaining
  member gets NOTIFY_CONSUMER_IDS_CHANGED (40, oneway, header consumerGroup) and rebalances;
* queue locks for orderly consumers live 60 s unless renewed.

Enum fields may come as ordinals (C++) or names (Java); both are kept as sent.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from twisted.python.failure import Failure

from rmqha.broker.support import validation
from rmqha.broker.remoting import json_body

from rmqha.broker.managers import client_views as client_info
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.command import BadRequest, RemotingCommand
from rmqha.broker.support.supervision import PeriodicService

log = logging.getLogger("rmqha.broker.clients")

CHANNEL_EXPIRED_S = 120.0
SCAN_INTERVAL_S = 10.0
LOCK_MAX_LIVE_S = 60.0
# ours: one client process rarely holds more than a few producers and consumers; every consumer
# group also becomes a persisted %RETRY% topic, so a heartbeat naming thousands is refused.
MAX_GROUPS_PER_HEARTBEAT = 1000


@dataclass
class ClientChannel:
    ctx: object
    client_id: str
    language: str
    version: int
    last_update: float


@dataclass
class ConsumerGroupInfo:
    group: str
    consume_type: object = None
    message_model: object = None
    consume_from_where: object = None
    channels: dict = field(default_factory=dict)  # ctx -> ClientChannel
    subscriptions: dict = field(default_factory=dict)  # topic -> subscription dict as sent

    def client_ids(self) -> list[str]:
        return [ch.client_id for ch in self.channels.values()]


class ClientManager:
    def __init__(self, config, clock, topics=None, metrics=None):
        self.config = config
        self.clock = clock
        self.topics = topics
        self.groups = None  # SubscriptionGroupManager, set by the server: a heartbeat creates the groups
        self.consumer_groups: dict[str, ConsumerGroupInfo] = {}
        self.producer_groups: dict[str, dict] = {}  # group -> {ctx: ClientChannel}
        self.locks: dict[str, dict[tuple, tuple[str, float]]] = {}  # group -> mq -> (clientId, time)
        self._watched: set = set()
        self._scan = PeriodicService(
            "client_scan", self.scan_not_active_channels, SCAN_INTERVAL_S, clock, metrics, logger=log
        )
        self.notifications_sent = 0

    def start(self) -> None:
        self._scan.start()

    def stop(self) -> None:
        self._scan.stop()

    def register(self, registry) -> None:
        registry.register(RequestCode.HEART_BEAT, self.heart_beat)
        registry.register(RequestCode.UNREGISTER_CLIENT, self.unregister_client)
        registry.register(RequestCode.GET_CONSUMER_LIST_BY_GROUP, self.get_consumer_list_by_group)
        registry.register(RequestCode.LOCK_BATCH_MQ, self.lock_batch_mq)
        registry.register(RequestCode.UNLOCK_BATCH_MQ, self.unlock_batch_mq)
        registry.register(RequestCode.GET_CONSUMER_CONNECTION_LIST, self.get_consumer_connection_list)

    # -- queries used by other processors ----------------------------------------------------------
    def subscription_of(self, group: str, topic: str) -> str | None:
        info = self.consumer_groups.get(group)
        if info is None:
            return None
        sub = info.subscriptions.get(topic)
        return None if sub is None else str(sub.get("subString", "*"))

    def find_consumer(self, group: str, client_id: str) -> ClientChannel | None:
        """ConsumerManager.findChannel: the group's connection of that client id."""
        info = self.consumer_groups.get(group)
        if info is None:
            return None
        return next((ch for ch in info.channels.values() if ch.client_id == client_id), None)

    def client_count(self) -> int:
        return len(
            {ch.ctx for g in self.consumer_groups.values() for ch in g.channels.values()}
            | {ctx for g in self.producer_groups.values() for ctx in g}
        )

    # -- heartbeat ----------------------------------------------------------------------------------
    def heart_beat(self, req: RemotingCommand, ctx) -> RemotingCommand:
        data = json_body.loads_request(req.body, "HEART_BEAT")
        producers = [(validation.check_group(g), pd) for g, pd in _groups(data, "producerDataSet")]
        consumers = [(validation.check_group(g), cd) for g, cd in _groups(data, "consumerDataSet")]
        if len(producers) + len(consumers) > MAX_GROUPS_PER_HEARTBEAT:
            raise BadRequest(
                f"a heartbeat may name at most {MAX_GROUPS_PER_HEARTBEAT} groups, "
                f"this one names {len(producers) + len(consumers)}"
            )
        for _group, cd in consumers:
            for sub in _list(cd, "subscriptionDataSet"):
                validation.check_topic(str(sub.get("topic", "")) if isinstance(sub, dict) else "")
        # Everything is valid: only now does anything change.
        client_id = str(data.get("clientID", ""))
        now = self.clock.seconds()
        self._watch(ctx)
        channel = ClientChannel(ctx, client_id, req.language, req.version, now)
        for group, _pd in producers:
            self.producer_groups.setdefault(group, {})[ctx] = channel
        if self.groups is not None:  # 4.9's heartBeat: findSubscriptionGroupConfig (auto-creates)
            self.groups.find_or_create_many([group for group, _cd in consumers])
        if self.topics is not None and self.config.is_master:
            self.topics.create_retry_topics([group for group, _cd in consumers])
        for group, cd in consumers:
            self._register_consumer(group, cd, channel)
        return req.make_response()

    def _register_consumer(self, group: str, cd: dict, channel: ClientChannel) -> None:
        info = self.consumer_groups.get(group)
        if info is None:
            info = self.consumer_groups[group] = ConsumerGroupInfo(group)
        info.consume_type = cd.get("consumeType")
        info.message_model = cd.get("messageModel")
        info.consume_from_where = cd.get("consumeFromWhere")
        old = info.channels.get(channel.ctx)
        new_channel = old is None
        if old is not None and old.client_id != channel.client_id:
            log.warning(
                "consumer group %s: connection %s changed client id %s -> %s",
                group,
                channel.ctx.peer_address,
                old.client_id,
                channel.client_id,
            )
        info.channels[channel.ctx] = channel
        subs = {str(s.get("topic")): s for s in _list(cd, "subscriptionDataSet")}
        changed = {t: s.get("subString") for t, s in subs.items()} != {
            t: s.get("subString") for t, s in info.subscriptions.items()
        }
        info.subscriptions = subs
        if new_channel:
            log.info(
                "new consumer connected, group: %s clientId: %s %s", group, channel.client_id, channel.ctx.peer_address
            )
        if (new_channel or changed) and self._group_notifies(group):
            self._notify(info)

    # -- leaving ------------------------------------------------------------------------------------
    def unregister_client(self, req: RemotingCommand, ctx) -> RemotingCommand:
        producer_group = req.get_str("producerGroup", "")
        consumer_group = req.get_str("consumerGroup", "")
        if producer_group:
            members = self.producer_groups.get(producer_group)
            if members is not None:
                members.pop(ctx, None)
                if not members:
                    del self.producer_groups[producer_group]
        if consumer_group:
            self._remove_consumer(consumer_group, ctx, "unregistered", self._group_notifies(consumer_group))
        return req.make_response()

    def _remove_consumer(self, group: str, ctx, why: str, notify: bool = True) -> None:
        info = self.consumer_groups.get(group)
        if info is None or ctx not in info.channels:
            return
        ch = info.channels.pop(ctx)
        log.info("consumer %s left group %s (%s)", ch.client_id, group, why)
        if not info.channels:
            del self.consumer_groups[group]
            self.locks.pop(group, None)
            return
        if notify:
            self._notify(info)

    def _watch(self, ctx) -> None:
        if ctx not in self._watched:
            self._watched.add(ctx)
            ctx.add_close_hook(self.channel_closed)

    def channel_closed(self, ctx) -> None:
        self._watched.discard(ctx)
        for group in list(self.producer_groups):
            members = self.producer_groups[group]
            if members.pop(ctx, None) is not None and not members:
                del self.producer_groups[group]
        for group in list(self.consumer_groups):
            self._remove_consumer(group, ctx, "connection closed")

    def scan_not_active_channels(self) -> None:
        now = self.clock.seconds()
        stale = set()
        for info in self.consumer_groups.values():
            stale |= {ctx for ctx, ch in info.channels.items() if now - ch.last_update > CHANNEL_EXPIRED_S}
        for members in self.producer_groups.values():
            stale |= {ctx for ctx, ch in members.items() if now - ch.last_update > CHANNEL_EXPIRED_S}
        error = None
        for ctx in stale:  # one connection's error does not keep the others open; the first is raised
            try:
                log.warning(
                    "client %s sent no heartbeat for %.0f s: closing its connection",
                    ctx.peer_address,
                    CHANNEL_EXPIRED_S,
                )
                self.channel_closed(ctx)
                ctx.close()
            except Exception:
                if error is None:
                    error = Failure()
        if error is not None:
            error.raiseException()

    # -- notification -------------------------------------------------------------------------------
    def _group_notifies(self, group: str) -> bool:
        """The group's notifyConsumerIdsChangedEnable, which 4.9 reads on a heartbeat and an unregister
        (a closed connection notifies whatever the group says)."""
        sg = self.groups.get(group) if self.groups is not None else None
        return getattr(sg, "notifyConsumerIdsChangedEnable", True)

    def _notify(self, info: ConsumerGroupInfo) -> None:
        if not self.config.notifyConsumerIdsChangedEnable:  # 4.9's listener: the broker-wide switch
            return
        for ctx in list(info.channels):
            if ctx.closed:
                continue
            cmd = RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": info.group})
            try:
                ctx.send_oneway(cmd)
                self.notifications_sent += 1
            except Exception as e:  # a dying connection: its close hook cleans up
                log.debug("notify %s failed: %s", ctx.peer_address, e)

    # -- consumer list ------------------------------------------------------------------------------
    def get_consumer_list_by_group(self, req: RemotingCommand, ctx) -> RemotingCommand:
        group = req.get_str("consumerGroup")
        info = self.consumer_groups.get(group)
        ids = info.client_ids() if info else []
        if not ids:
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}")
        return req.make_response(body=json_body.dumps({"consumerIdList": ids}))

    def get_consumer_connection_list(self, req: RemotingCommand, ctx) -> RemotingCommand:
        """ConsumerConnection of a group, enums and subscriptions as 4.9 writes them (client_info.py);
        mqadmin consumerConnection and consumerProgress (its OFFLINE column) read it."""
        group = req.get_str("consumerGroup")
        info = self.consumer_groups.get(group)
        if info is None:
            return req.make_response(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")
        now_ms = int(self.clock.seconds() * 1000)
        body = {
            "connectionSet": [client_info.connection_json(ch) for ch in info.channels.values()],
            "consumeFromWhere": client_info.enum_name(info.consume_from_where, client_info.CONSUME_FROM_WHERE),
            "consumeType": client_info.enum_name(info.consume_type, client_info.CONSUME_TYPES),
            "messageModel": client_info.enum_name(info.message_model, client_info.MESSAGE_MODELS),
            "subscriptionTable": {
                t: client_info.subscription_json(s, now_ms)
                for t, s in info.subscriptions.items()
                if isinstance(s, dict)
            },
        }
        return req.make_response(body=json_body.dumps({k: v for k, v in body.items() if v is not None}))

    # -- orderly consumers' queue locks -------------------------------------------------------------
    @staticmethod
    def _mq_key(mq) -> tuple:
        if not isinstance(mq, dict):
            raise BadRequest(f"a message queue in mqSet is a JSON {type(mq).__name__}, not an object")
        queue_id = mq.get("queueId", 0)
        if type(queue_id) is not int:
            raise BadRequest(
                f"queueId of a message queue in mqSet is not an integer: {validation.shown(str(queue_id))}"
            )
        return (validation.check_topic(str(mq.get("topic", ""))), str(mq.get("brokerName")), queue_id)

    @staticmethod
    def _mq_json(key: tuple) -> dict:
        return {"brokerName": key[1], "queueId": key[2], "topic": key[0]}

    def lock_batch_mq(self, req: RemotingCommand, ctx) -> RemotingCommand:
        body = json_body.loads_request(req.body, "LOCK_BATCH_MQ")
        group = validation.check_group(str(body.get("consumerGroup", "")))
        client_id = str(body.get("clientId", ""))
        keys = [self._mq_key(mq) for mq in _list(body, "mqSet")]
        table = self.locks.setdefault(group, {})
        now = self.clock.seconds()
        ok = []
        for key in keys:
            holder = table.get(key)
            if holder is None or holder[0] == client_id or now - holder[1] > LOCK_MAX_LIVE_S:
                table[key] = (client_id, now)
                ok.append(self._mq_json(key))
        return req.make_response(body=json_body.dumps({"lockOKMQSet": ok}))

    def unlock_batch_mq(self, req: RemotingCommand, ctx) -> RemotingCommand:
        body = json_body.loads_request(req.body, "UNLOCK_BATCH_MQ")
        group = validation.check_group(str(body.get("consumerGroup", "")))
        client_id = str(body.get("clientId", ""))
        keys = [self._mq_key(mq) for mq in _list(body, "mqSet")]
        table = self.locks.get(group, {})
        for key in keys:
            if table.get(key, (None,))[0] == client_id:
                del table[key]
        return req.make_response()


def _list(obj: dict, key: str) -> list:
    """A JSON array field of a request body (missing or null: empty), or BadRequest."""
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise BadRequest(f"{key} is a JSON {type(value).__name__}, not an array")
    return value


def _groups(data: dict, key: str) -> list[tuple[str, dict]]:
    """(groupName, entry) of each object in a heartbeat's producer or consumer data set."""
    out = []
    for entry in _list(data, key):
        if not isinstance(entry, dict):
            raise BadRequest(f"an entry of {key} is a JSON {type(entry).__name__}, not an object")
        group = str(entry.get("groupName") or "")
        if group:  # an entry without a group registers nothing, as before
            out.append((group, entry))
    return out
