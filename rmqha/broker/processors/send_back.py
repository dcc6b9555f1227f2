"""CONSUMER_SEND_MSG_BACK (36): a consumer hands back a message it failed to consume.

As RocketMQ 4.9's consumerSendMsgBack: the message is stored again in %RETRY%<group> (created with
one queue) with reconsumeTimes + 1, RETRY_TOPIC = its original topic, ORIGIN_MESSAGE_ID = the first
message's id, and DELAY = the level asked for, or 3 + reconsumeTimes when the consumer asked for 0
(RECONSUME_LATER), so the store parks it in SCHEDULE_TOPIC_XXXX and the schedule service delivers
it to %RETRY%<group> when due (level 3 = 10 s by default). When its reconsumeTimes has reached
maxReconsumeTimes (header, default 16) or the level is negative, it goes to %DLQ%<group> (queue 0)
at once, without DELAY. The new record is not waited for (WAIT=false), as in the reference.

The subscription group must exist (it is auto-created as for pulls), else SUBSCRIPTION_GROUP_NOT_EXIST;
its retryMaxTimes is the limit unless the client is V3_4_9 or newer and sends maxReconsumeTimes (4.9).

Reply: SUCCESS, or SYSTEM_ERROR when the original message is not in the store or storing failed.
"""
from __future__ import annotations

import logging

from twisted.internet import defer

from rmqha.broker import validation
from rmqha.broker.remoting.codes import PERM_READ, PERM_WRITE, RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.store import queries, record
from rmqha.broker.store.message_store import PutStatus

from .topics import dlq_topic, retry_topic

log = logging.getLogger("broker.sendback")

DEFAULT_MAX_RECONSUME_TIMES = 16
V3_4_9 = 121  # MQVersion ordinal from which 4.9 takes maxReconsumeTimes from the header
FAQ = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."


class SendBackProcessor:
    def __init__(self, config, controller, topics):
        self.config = config
        self.controller = controller
        self.topics = topics
        self.groups = None  # SubscriptionGroupManager, set by the server: the group must exist, as in 4.9

    def register(self, registry) -> None:
        registry.register(RequestCode.CONSUMER_SEND_MSG_BACK, self.process)

    def process(self, req: RemotingCommand, ctx):
        if not self.config.is_master:
            return req.make_response(ResponseCode.SERVICE_NOT_AVAILABLE,
                                     "broker is a slave; send the message back to its master")
        group = validation.check_group(req.get_str("group"))
        phys = req.get_long("offset")
        delay_level = req.get_int("delayLevel", 0)
        max_times = DEFAULT_MAX_RECONSUME_TIMES
        if self.groups is not None:
            sg = self.groups.find_or_create(group)
            if sg is None:
                return req.make_response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                         f"subscription group not exist, {group} {FAQ}")
            max_times = sg.retryMaxTimes
        if req.version >= V3_4_9 or self.groups is None:
            max_times = req.get_int("maxReconsumeTimes", max_times)
        found = queries.record_at(self.controller.store, phys)
        if found is None:
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {phys}")
        orig = found[1]
        props = dict(orig.properties)
        props.setdefault("RETRY_TOPIC", orig.topic)
        props.pop("WAIT", None)
        origin_id = props.get("ORIGIN_MESSAGE_ID") or req.get_str("originMsgId", "") or orig.msg_id
        props["ORIGIN_MESSAGE_ID"] = origin_id
        if orig.reconsume_times >= max_times or delay_level < 0:
            topic = dlq_topic(group)
            self.topics.create_in_send_back(topic, 1, PERM_READ | PERM_WRITE)  # 4.9.8: a readable DLQ
            props.pop("DELAY", None)
        else:
            topic = retry_topic(group)
            self.topics.create_in_send_back(topic, 1, PERM_READ | PERM_WRITE)
            props["DELAY"] = str(delay_level if delay_level > 0 else 3 + orig.reconsume_times)
        msg = record.Message(topic=topic, body=orig.body, queue_id=0, flag=orig.flag,
                             sys_flag=orig.sys_flag & ~(record.FLAG_BORNHOST_V6 | record.FLAG_STOREHOST_V6),
                             born_timestamp=orig.born_timestamp, born_host=orig.born_host,
                             reconsume_times=orig.reconsume_times + 1, properties=props)
        d = defer.maybeDeferred(self.controller.put_message, msg, False)

        def done(res):
            if res.status == PutStatus.PUT_OK:
                self.controller.stats.table.on_send_back(group, props["RETRY_TOPIC"])
                log.info("message %s of group %s sent back to %s (reconsumeTimes %d)",
                         origin_id, group, topic, msg.reconsume_times)
                return req.make_response()
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"{res.status}: {res.remark}")

        return d.addCallback(done)
