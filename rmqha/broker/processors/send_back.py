"""CONSUMER_SEND_MSG_BACK (36): a consumer hands back a message it failed to consume.

As RocketMQ 4.9.8's asyncConsumerSendMsgBack, in its order:
* the subscription group must exist (auto-created as for pulls), else SUBSCRIPTION_GROUP_NOT_EXIST;
* a broker whose brokerPermission has no WRITE answers NO_PERMISSION;
* a group whose retryQueueNums is 0 (or less) wants no retries: SUCCESS and nothing is stored;
* %RETRY%<group> is created (if it is not there) with the group's retryQueueNums queues, READ|WRITE
  (and the unit-sub flag when the header's unitMode is true), and the message goes to one of its
  queues picked at random, so a group's retries are spread over its retry queues; a retry topic that
  is not writable is NO_PERMISSION;
* the message is stored again with reconsumeTimes + 1, RETRY_TOPIC = its original topic,
  ORIGIN_MESSAGE_ID = the first message's id, and DELAY = the level asked for, or 3 + reconsumeTimes
  when the consumer asked for 0 (RECONSUME_LATER), so the store parks it in SCHEDULE_TOPIC_XXXX and
  the schedule service delivers it to its %RETRY%<group> queue when due (level 3 = 10 s by default);
* when its reconsumeTimes has reached maxReconsumeTimes or the level is negative it goes at once,
  without DELAY, to %DLQ%<group>, which has one queue (4.9's DLQ_NUMS_PER_GROUP), queue 0, created
  READ|WRITE as 4.9.8 creates it (a DLQ can be read back). The limit is the group's retryMaxTimes, or
  the header's maxReconsumeTimes when the client is V3_4_9 or newer;
* the new record is not waited for (WAIT=false), as in the reference.

Ours, safer than 4.9: the retry queue is picked among min(retryQueueNums, the retry topic's
readQueueNums and writeQueueNums), and a retry topic with none answers SYSTEM_ERROR (the client keeps
the message and consumes it again). 4.9 picks among retryQueueNums even when the topic already exists with fewer queues
(a group whose retryQueueNums was raised after its retry topic was made), and the retries it stores in
a queue outside the topic's route are never consumed.

Reply: SUCCESS, or SYSTEM_ERROR when the original message is not in the store or storing failed.
"""

from __future__ import annotations

import logging
import random

from twisted.internet import defer

from rmqha.broker.support import validation
from rmqha.broker.remoting.codes import PERM_READ, PERM_WRITE, RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.remoting.handlers import Processors, handles
from rmqha.broker.store import queries, record
from rmqha.broker.store.message_store import PutStatus

from rmqha.broker.managers.topics import MAX_QUEUE_NUMS, dlq_topic, is_writeable, retry_topic

log = logging.getLogger("rmqha.broker.sendback")

DEFAULT_MAX_RECONSUME_TIMES = 16
DLQ_NUMS_PER_GROUP = 1  # 4.9's AbstractSendMessageProcessor: a dead-letter topic has one queue
TOPIC_FLAG_UNIT_SUB = 0x2  # TopicSysFlag.buildSysFlag(false, true): a unit-mode consumer's retry topic
V3_4_9 = 121  # MQVersion ordinal from which 4.9 takes maxReconsumeTimes from the header
FAQ = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."


class SendBackProcessor(Processors):
    def __init__(self, config, controller, topics, rng: random.Random | None = None):
        self.config = config
        self.controller = controller
        self.topics = topics
        self.random = rng or random.Random()  # picks the retry queue; a test gives a seeded one
        self.groups = None  # SubscriptionGroupManager, set by the server: the group must exist, as in 4.9

    @handles(RequestCode.CONSUMER_SEND_MSG_BACK)
    def process(self, req: RemotingCommand, ctx):
        if not self.config.is_master:
            return req.make_response(
                ResponseCode.SERVICE_NOT_AVAILABLE, "broker is a slave; send the message back to its master"
            )
        group = validation.check_group(req.get_str("group"))
        phys = req.get_long("offset")
        delay_level = req.get_int("delayLevel", 0)
        max_times, retry_queue_nums, refused = self._group_retry_settings(req, group)
        if refused is not None:
            return refused
        if not is_writeable(self.config.brokerPermission):
            return req.make_response(
                ResponseCode.NO_PERMISSION, f"the broker[{self.config.brokerIP1}] sending message is forbidden"
            )
        if retry_queue_nums <= 0:  # 4.9: the group wants no retries; the message is dropped
            log.info("group %s has retryQueueNums %d: message at %d not sent back", group, retry_queue_nums, phys)
            return req.make_response()
        topic, queue_id, refused = self._retry_queue(req, group, retry_queue_nums)
        if refused is not None:
            return refused
        if req.version >= V3_4_9 or self.groups is None:
            max_times = req.get_int("maxReconsumeTimes", max_times)
        found = queries.record_at(self.controller.store, phys)
        if found is None:
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {phys}")
        msg, origin_id = self._message_back(found[1], group, topic, queue_id, max_times, delay_level)
        # read now: the store moves a delayed message to SCHEDULE_TOPIC_XXXX in place
        topic, queue_id, props = msg.topic, msg.queue_id, msg.properties
        d = defer.maybeDeferred(self.controller.put_message, msg, False)

        def done(res):
            if res.status == PutStatus.PUT_OK:
                self.controller.stats.table.on_send_back(group, props["RETRY_TOPIC"])
                log.info(
                    "message %s of group %s sent back to %s queue %d (reconsumeTimes %d)",
                    origin_id,
                    group,
                    topic,
                    queue_id,
                    msg.reconsume_times,
                )
                return req.make_response()
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"{res.status}: {res.remark}")

        return d.addCallback(done)

    def _group_retry_settings(self, req: RemotingCommand, group: str):
        """(max reconsume times, retry queue count, refusal): the group's own when groups are kept (it must
        exist or be creatable, as in 4.9), else the defaults."""
        if self.groups is None:
            return DEFAULT_MAX_RECONSUME_TIMES, 1, None
        sg = self.groups.find_or_create(group)
        if sg is None:
            return (
                DEFAULT_MAX_RECONSUME_TIMES,
                1,
                req.make_response(
                    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group} {FAQ}"
                ),
            )
        return sg.retryMaxTimes, sg.retryQueueNums, None

    def _retry_queue(self, req: RemotingCommand, group: str, retry_queue_nums: int):
        """(the group's retry topic, created if new; a random queue of it both readable and writable; refusal)."""
        sys_flag = TOPIC_FLAG_UNIT_SUB if req.get_bool("unitMode", False) else 0
        topic = retry_topic(group)
        tc = self.topics.create_in_send_back(
            topic, min(retry_queue_nums, MAX_QUEUE_NUMS), PERM_READ | PERM_WRITE, sys_flag
        )
        if not is_writeable(tc.perm):
            return (
                topic,
                0,
                req.make_response(ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden"),
            )
        choices = retry_queue_choices(retry_queue_nums, tc.read_queue_nums, tc.write_queue_nums)
        if choices <= 0:  # stored there, a retry would sit where no consumer reads: the client retries locally
            return (
                topic,
                0,
                req.make_response(
                    ResponseCode.SYSTEM_ERROR, f"the topic[{topic}] has no queue that is both readable and writable"
                ),
            )
        return topic, self.random.randrange(choices), None

    def _message_back(self, orig, group: str, topic: str, queue_id: int, max_times: int, delay_level: int):
        """(the message to store, its origin id): the original again, delayed on the retry topic, or on the
        group's DLQ once it was reconsumed max_times (or the client asks for the DLQ: delay level < 0)."""
        props = dict(orig.properties)
        props.setdefault("RETRY_TOPIC", orig.topic)
        props.pop("WAIT", None)
        # as 4.9.8: the stored message's own ORIGIN_MESSAGE_ID, else its id; the header's originMsgId is
        # the client's word (4.9 hands it to the consume hook only) and is never stored
        origin_id = props.get("ORIGIN_MESSAGE_ID") or orig.msg_id
        props["ORIGIN_MESSAGE_ID"] = origin_id
        if orig.reconsume_times >= max_times or delay_level < 0:
            topic = dlq_topic(group)
            queue_id = 0  # 4.9: random % DLQ_NUMS_PER_GROUP, which is 1
            self.topics.create_in_send_back(topic, DLQ_NUMS_PER_GROUP, PERM_READ | PERM_WRITE)  # 4.9.8: readable
            props.pop("DELAY", None)
        else:
            props["DELAY"] = str(delay_level if delay_level > 0 else 3 + orig.reconsume_times)
        msg = record.Message(
            topic=topic,
            body=orig.body,
            queue_id=queue_id,
            flag=orig.flag,
            sys_flag=orig.sys_flag & ~(record.FLAG_BORNHOST_V6 | record.FLAG_STOREHOST_V6),
            born_timestamp=orig.born_timestamp,
            born_host=orig.born_host,
            reconsume_times=int32(orig.reconsume_times + 1),
            properties=props,
        )
        return msg, origin_id


def retry_queue_choices(retry_queue_nums: int, read_queue_nums: int, write_queue_nums: int) -> int:
    """How many retry queues a send-back picks among: the group's retryQueueNums, but none the route
    does not show as both readable and writable (ours; 4.9 picks among retryQueueNums and can store
    where no consumer reads: a group whose retryQueueNums was raised after its retry topic was made)."""
    return max(0, min(retry_queue_nums, read_queue_nums, write_queue_nums))


def int32(n: int) -> int:
    """n as a Java int: a producer may send reconsumeTimes = 2^31 - 1, and 4.9's + 1 wraps."""
    return (n + (1 << 31)) % (1 << 32) - (1 << 31)
