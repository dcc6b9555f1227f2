"""Client channels, producer and consumer groups: the ClientManager. The requests that change it (HEART_BEAT,
UNREGISTER_CLIENT, the queue locks) and read it (GET_CONSUMER_LIST_BY_GROUP, GET_CONSUMER_CONNECTION_LIST) are
rmqha/broker/processors/client_manage.py; producer groups are shown by processors/producers.py; requests the
broker sends to a client and awaits are processors/client_calls.py.

As RocketMQ's ConsumerManager / ProducerManager / RebalanceLockManager:
* a heartbeat registers (or refreshes) the connection under every producer and consumer group it
  names; for consumer groups it records the subscriptions and, on a master, creates
  %RETRY%<group> (1 queue, READ|WRITE);
* when a consumer group gains a connection or its subscriptions change, and when a member leaves
  (UNREGISTER_CLIENT, its connection closes, or 120 s pass without a heartbeat), every remaining
  member gets NOTIFY_CONSUMER_IDS_CHANGED (40, oneway, header consumerGroup) and rebalances;
* queue locks for orderly consumers live 60 s unless renewed.

Fields are kept as the client sent them (client_views.py shows them as 4.9 does).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from twisted.python.failure import Failure

from rmqha.broker.remoting.codes import RequestCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.support.supervision import PeriodicService

log = logging.getLogger("rmqha.broker.clients")

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
    def heartbeat(self, ctx, client_id: str, language, version: int, producers: list[str], consumers: list) -> None:
        """A heartbeat already checked (rmqha/broker/processors/client_manage.py): register or refresh the
        connection under its producer groups and its consumer groups, `consumers` as (group, consumer
        data, subscriptions)."""
        now = self.clock.seconds()
        self._watch(ctx)
        channel = ClientChannel(ctx, client_id, language, version, now)
        for group in producers:
            self.producer_groups.setdefault(group, {})[ctx] = channel
        if self.groups is not None:  # 4.9's heartBeat: findSubscriptionGroupConfig (auto-creates)
            self.groups.find_or_create_many([group for group, _cd, _subs in consumers])
        if self.topics is not None and self.config.is_master:
            self.topics.create_retry_topics([group for group, _cd, _subs in consumers])
        for group, cd, subs in consumers:
            self._register_consumer(group, cd, subs, channel)

    def _register_consumer(self, group: str, cd: dict, sub_list: list, channel: ClientChannel) -> None:
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
        subs = {str(s.get("topic")): s for s in sub_list}
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
    def unregister(self, ctx, producer_group: str, consumer_group: str) -> None:
        """UNREGISTER_CLIENT: the connection leaves the producer group and the consumer group it names."""
        if producer_group:
            members = self.producer_groups.get(producer_group)
            if members is not None:
                members.pop(ctx, None)
                if not members:
                    del self.producer_groups[producer_group]
        if consumer_group:
            self._remove_consumer(consumer_group, ctx, "unregistered", self._group_notifies(consumer_group))

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

    # -- orderly consumers' queue locks -------------------------------------------------------------
    def lock(self, group: str, client_id: str, keys: list[tuple]) -> list[tuple]:
        """LOCK_BATCH_MQ: the queues (topic, brokerName, queueId) now locked by `client_id`: free ones,
        its own, and those whose holder did not renew within LOCK_MAX_LIVE_S."""
        table = self.locks.setdefault(group, {})
        now = self.clock.seconds()
        ok = []
        for key in keys:
            holder = table.get(key)
            if holder is None or holder[0] == client_id or now - holder[1] > LOCK_MAX_LIVE_S:
                table[key] = (client_id, now)
                ok.append(key)
        return ok

    def unlock(self, group: str, client_id: str, keys: list[tuple]) -> None:
        """UNLOCK_BATCH_MQ: the queues of `keys` that `client_id` holds are free again."""
        table = self.locks.get(group, {})
        for key in keys:
            if table.get(key, (None,))[0] == client_id:
                del table[key]
