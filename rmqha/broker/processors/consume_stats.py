"""Consumption as the admin tools see it: GET_CONSUME_STATS (208), GET_BROKER_CONSUME_STATS (317),
QUERY_TOPIC_CONSUME_BY_WHO (300), QUERY_CONSUME_TIME_SPAN (303), QUERY_CONSUME_QUEUE (321) and
CLONE_GROUP_OFFSET (314), as 4.9.8's AdminBrokerProcessor answers them.

A group's topics are those it has consumer offsets in (4.9's whichTopicByConsumer, so its %RETRY%
topic is there once a retry was consumed). A topic is left out of a group's stats when the group is
online with subscriptions and none of them is that topic. Maps keyed by MessageQueue go out in
fastjson's object-key form (rmqha/broker/remoting/object_keys.py).
"""

from __future__ import annotations

from rmqha.broker.support import validation
from rmqha.broker.remoting import json_body, object_keys
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.remoting.handlers import Processors, handles
from rmqha.broker.remoting.object_keys import ObjectKeyed, message_queue
from rmqha.broker.observability.stats import GROUP_GET_NUMS
from rmqha.broker.store import queries

from .topic_admin import store_time

MAX_QUEUE_UNITS = 1000  # ours: QUERY_CONSUME_QUEUE's count; 4.9 stops at the end of one file


class ConsumeStatsProcessors(Processors):
    def __init__(self, config, topics, offsets, store, clients, groups, stats=None, clock=None):
        self.config = config
        self.topics = topics
        self.offsets = offsets
        self.store = store
        self.clients = clients  # ClientManager: who is online, with which subscriptions
        self.groups = groups  # SubscriptionGroupManager: GET_BROKER_CONSUME_STATS walks its groups
        self.stats = stats  # BrokerStats: consumeTps
        self.clock = clock

    # -- what the processors share --------------------------------------------------------------------
    def _subscriptions(self, group: str) -> dict:
        info = self.clients.consumer_groups.get(group) if self.clients is not None else None
        return info.subscriptions if info is not None else {}

    def _unsubscribed(self, group: str, topic: str) -> bool:
        """4.9: findSubscriptionData(group, topic) is null while the group has subscriptions."""
        subs = self._subscriptions(group)
        return bool(subs) and topic not in subs

    def _tps(self, group: str, topic: str) -> float:
        if self.stats is None:
            return 0.0
        item = self.stats.table.item(GROUP_GET_NUMS, f"{topic}@{group}")
        return float(item.window("minute")["tps"]) if item is not None else 0.0

    def _consume_stats(self, group: str, topic: str, queue_nums: int) -> tuple[list, float, int]:
        """(offsetTable pairs, consumeTps, total diff) of one topic for one group."""
        pairs, diff = [], 0
        for queue_id in range(queue_nums):
            broker_offset = max(self.store.max_queue_offset(topic, queue_id), 0)
            consumer_offset = max(self.offsets.query(group, topic, queue_id), 0)
            # pullOffset is 5.x's (max of the consumer's and the pull offset; this broker keeps no separate
            # pull offset); 4.9's tools ignore it, clients modelled on 5.x require it
            wrapper = {
                "brokerOffset": broker_offset,
                "consumerOffset": consumer_offset,
                "lastTimestamp": 0,
                "pullOffset": consumer_offset,
            }
            if consumer_offset > 0:
                last = store_time(self.store, topic, queue_id, consumer_offset - 1)
                if last > 0:
                    wrapper["lastTimestamp"] = last
            pairs.append((message_queue(topic, self.config.brokerName, queue_id), wrapper))
            diff += broker_offset - consumer_offset
        return pairs, self._tps(group, topic), diff

    # -- GET_CONSUME_STATS --------------------------------------------------------------------------
    @handles(RequestCode.GET_CONSUME_STATS)
    def get_consume_stats(self, req: RemotingCommand, ctx) -> RemotingCommand:
        group = req.get_str("consumerGroup")
        topic = req.get_str("topic", "")
        topics = [topic] if topic.strip() else sorted(self.offsets.topics_of_group(group))
        pairs, tps = [], 0.0
        for t in topics:
            tc = self.topics.get(t)
            if tc is None or self._unsubscribed(group, t):
                continue
            p, topic_tps, _ = self._consume_stats(group, t, tc.read_queue_nums)
            pairs += p
            tps += topic_tps
        return req.make_response(body=object_keys.dumps({"consumeTps": tps, "offsetTable": ObjectKeyed(pairs)}))

    # -- GET_BROKER_CONSUME_STATS -------------------------------------------------------------------
    @handles(RequestCode.GET_BROKER_CONSUME_STATS)
    def get_broker_consume_stats(self, req: RemotingCommand, ctx) -> RemotingCommand:
        only_order = req.get_bool("isOrder")
        stats_list, total_diff = [], 0
        for group in sorted(self.groups.table):
            per_topic = []
            for t in sorted(self.offsets.topics_of_group(group)):
                tc = self.topics.get(t)
                if tc is None or (only_order and not tc.order) or self._unsubscribed(group, t):
                    continue
                # 4.9 walks writeQueueNums here (readQueueNums in GET_CONSUME_STATS)
                pairs, tps, diff = self._consume_stats(group, t, tc.write_queue_nums)
                per_topic.append({"consumeTps": tps, "offsetTable": ObjectKeyed(pairs)})
                total_diff += diff
            stats_list.append({group: per_topic})
        # totalInflightDiff is 5.x's (pullOffset - consumerOffset summed: 0 here, see _consume_stats)
        body = {
            "brokerAddr": self.config.broker_addr,
            "consumeStatsList": stats_list,
            "totalDiff": total_diff,
            "totalInflightDiff": 0,
        }
        return req.make_response(body=object_keys.dumps(body))

    # -- QUERY_TOPIC_CONSUME_BY_WHO -----------------------------------------------------------------
    @handles(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO)
    def query_topic_consume_by_who(self, req: RemotingCommand, ctx) -> RemotingCommand:
        topic = req.get_str("topic")
        online = set()
        if self.clients is not None:
            online = {g for g, info in self.clients.consumer_groups.items() if topic in info.subscriptions}
        groups = online | self.offsets.groups_of_topic(topic)
        return req.make_response(body=json_body.dumps({"groupList": sorted(groups)}))

    # -- QUERY_CONSUME_TIME_SPAN --------------------------------------------------------------------
    @handles(RequestCode.QUERY_CONSUME_TIME_SPAN)
    def query_consume_time_span(self, req: RemotingCommand, ctx) -> RemotingCommand:
        topic = req.get_str("topic")
        group = req.get_str("group")
        tc = self.topics.get(topic)
        if tc is None:
            return req.make_response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{validation.shown(topic)}] not exist")
        now_ms = int(self.clock.seconds() * 1000)
        spans = []
        for queue_id in range(tc.write_queue_nums):
            earliest = queries.earliest_msg_store_time(self.store, topic, queue_id)
            min_time = -1 if earliest is None else earliest
            max_offset = self.store.max_queue_offset(topic, queue_id)
            consumer_offset = self.offsets.query(group, topic, queue_id)
            span = {
                "messageQueue": message_queue(topic, self.config.brokerName, queue_id),
                "minTimeStamp": min_time,
                "maxTimeStamp": store_time(self.store, topic, queue_id, max_offset - 1),
                "consumeTimeStamp": (
                    store_time(self.store, topic, queue_id, consumer_offset - 1) if consumer_offset > 0 else min_time
                ),
                "delayTime": 0,
            }
            if consumer_offset < max_offset:
                span["delayTime"] = now_ms - store_time(self.store, topic, queue_id, consumer_offset)
            spans.append(span)
        return req.make_response(body=json_body.dumps({"consumeTimeSpanSet": spans}))

    # -- QUERY_CONSUME_QUEUE ------------------------------------------------------------------------
    @handles(RequestCode.QUERY_CONSUME_QUEUE)
    def query_consume_queue(self, req: RemotingCommand, ctx) -> RemotingCommand:
        # No header field is required in 4.9: a missing one is null or 0.
        topic = req.get_str("topic", "null")
        queue_id = req.get_int("queueId", 0)
        index = req.get_long("index", 0)
        count = req.get_int("count", 0)
        group = req.get_str("consumerGroup", None)
        cq = self.store.queues.get((topic, queue_id))
        if cq is None:
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"{queue_id}@{topic} is not exist!")
        body = {"maxQueueIndex": cq.max_index, "minQueueIndex": cq.min_index}
        if group is not None:
            sub = self._subscriptions(group).get(topic)
            if sub is None:
                body["filterData"] = f"{group}@{topic} is not online!"
            else:
                body["subscriptionData"] = sub
                body["filterData"] = "null"  # tag subscriptions have no ConsumerFilterData
        if not cq.min_index <= index < cq.max_index:
            return req.make_response(remark=f"Index {index} of {queue_id}@{topic} is not exist!")
        units = cq.units(index, min(max(count, 0), MAX_QUEUE_UNITS))
        body["queueData"] = [
            {"eval": False, "physicOffset": phys, "physicSize": size, "tagsCode": tags} for phys, size, tags in units
        ]
        return req.make_response(body=json_body.dumps(body))

    # -- CLONE_GROUP_OFFSET -------------------------------------------------------------------------
    @handles(RequestCode.CLONE_GROUP_OFFSET)
    def clone_group_offset(self, req: RemotingCommand, ctx) -> RemotingCommand:
        src = req.get_str("srcGroup")
        dest = validation.check_group(req.get_str("destGroup"))
        topic = req.get_str("topic", "")
        offline = req.get_bool("offline", False)
        topics = [topic] if topic.strip() else sorted(self.offsets.topics_of_group(src))
        for t in topics:
            if self.topics.get(t) is None:
                continue
            if not offline and self._unsubscribed(src, t):
                continue
            # 4.9.8 passes the header's topic here even when it is blank (then nothing is cloned);
            # we clone the topic the loop is at, which is what the blank-topic case means.
            self.offsets.clone(src, dest, t)
        return req.make_response()
