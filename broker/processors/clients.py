"""Client channels, producer and consumer groups: HEART_BEAT (34), UNREGISTER_CLIENT (35),
GET_CONSUMER_LIST_BY_GROUP (38), LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42).

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

from broker.remoting import json_body
from broker.remoting.codes import RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand
from broker.supervision import PeriodicService

from .topics import retry_topic

log = logging.getLogger("broker.clients")

CHANNEL_EXPIRED_S = 120.0
SCAN_INTERVAL_S = 10.0
LOCK_MAX_LIVE_S = 60.0


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
        self.consumer_groups: dict[str, ConsumerGroupInfo] = {}
        self.producer_groups: dict[str, dict] = {}  # group -> {ctx: ClientChannel}
        self.locks: dict[str, dict[tuple, tuple[str, float]]] = {}  # group -> mq -> (clientId, time)
        self._watched: set = set()
        self._scan = PeriodicService("client_scan", self.scan_not_active_channels, SCAN_INTERVAL_S, clock, metrics,
                                     logger=log)
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

    # -- queries used by other processors ----------------------------------------------------------
    def subscription_of(self, group: str, topic: str) -> str | None:
        info = self.consumer_groups.get(group)
        if info is None:
            return None
        sub = info.subscriptions.get(topic)
        return None if sub is None else str(sub.get("subString", "*"))

    def client_count(self) -> int:
        return len({ch.ctx for g in self.consumer_groups.values() for ch in g.channels.values()}
                   | {ctx for g in self.producer_groups.values() for ctx in g})

    # -- heartbeat ----------------------------------------------------------------------------------
    def heart_beat(self, req: RemotingCommand, ctx) -> RemotingCommand:
        data = json_body.loads(req.body) if req.body else {}
        client_id = str(data.get("clientID", ""))
        now = self.clock.seconds()
        self._watch(ctx)
        channel = ClientChannel(ctx, client_id, req.language, req.version, now)
        for pd in data.get("producerDataSet") or []:
            group = str(pd.get("groupName", ""))
            if group:
                self.producer_groups.setdefault(group, {})[ctx] = channel
        for cd in data.get("consumerDataSet") or []:
            group = str(cd.get("groupName", ""))
            if not group:
                continue
            if self.topics is not None and self.config.is_master:
                self.topics.create_in_send_back(retry_topic(group))
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
            log.warning("consumer group %s: connection %s changed client id %s -> %s", group,
                        channel.ctx.peer_address, old.client_id, channel.client_id)
        info.channels[channel.ctx] = channel
        subs = {str(s.get("topic")): s for s in cd.get("subscriptionDataSet") or []}
        changed = {t: s.get("subString") for t, s in subs.items()} != {
            t: s.get("subString") for t, s in info.subscriptions.items()}
        info.subscriptions = subs
        if new_channel:
            log.info("new consumer connected, group: %s clientId: %s %s", group, channel.client_id,
                     channel.ctx.peer_address)
        if new_channel or changed:
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
            self._remove_consumer(consumer_group, ctx, "unregistered")
        return req.make_response()

    def _remove_consumer(self, group: str, ctx, why: str) -> None:
        info = self.consumer_groups.get(group)
        if info is None or ctx not in info.channels:
            return
        ch = info.channels.pop(ctx)
        log.info("consumer %s left group %s (%s)", ch.client_id, group, why)
        if not info.channels:
            del self.consumer_groups[group]
            self.locks.pop(group, None)
            return
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
                log.warning("client %s sent no heartbeat for %.0f s: closing its connection",
                            ctx.peer_address, CHANNEL_EXPIRED_S)
                self.channel_closed(ctx)
                ctx.close()
            except Exception:
                if error is None:
                    error = Failure()
        if error is not None:
            error.raiseException()

    # -- notification -------------------------------------------------------------------------------
    def _notify(self, info: ConsumerGroupInfo) -> None:
        for ctx in list(info.channels):
            if ctx.closed:
                continue
            cmd = RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                          {"consumerGroup": info.group})
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

    # -- orderly consumers' queue locks -------------------------------------------------------------
    @staticmethod
    def _mq_key(mq: dict) -> tuple:
        return (str(mq.get("topic")), str(mq.get("brokerName")), int(mq.get("queueId", 0)))

    @staticmethod
    def _mq_json(key: tuple) -> dict:
        return {"brokerName": key[1], "queueId": key[2], "topic": key[0]}

    def lock_batch_mq(self, req: RemotingCommand, ctx) -> RemotingCommand:
        body = json_body.loads(req.body) if req.body else {}
        group, client_id = str(body.get("consumerGroup", "")), str(body.get("clientId", ""))
        table = self.locks.setdefault(group, {})
        now = self.clock.seconds()
        ok = []
        for mq in body.get("mqSet") or []:
            key = self._mq_key(mq)
            holder = table.get(key)
            if holder is None or holder[0] == client_id or now - holder[1] > LOCK_MAX_LIVE_S:
                table[key] = (client_id, now)
                ok.append(self._mq_json(key))
        return req.make_response(body=json_body.dumps({"lockOKMQSet": ok}))

    def unlock_batch_mq(self, req: RemotingCommand, ctx) -> RemotingCommand:
        body = json_body.loads(req.body) if req.body else {}
        group, client_id = str(body.get("consumerGroup", "")), str(body.get("clientId", ""))
        table = self.locks.get(group, {})
        for mq in body.get("mqSet") or []:
            key = self._mq_key(mq)
            if table.get(key, (None,))[0] == client_id:
                del table[key]
        return req.make_response()
