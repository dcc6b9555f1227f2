"""Consumer offsets: QUERY_CONSUMER_OFFSET (14) and UPDATE_CONSUMER_OFFSET (15); the table they read and
change is rmqha/broker/managers/consumer_offsets.py's ConsumerOffsetManager."""

from __future__ import annotations

from rmqha.broker.managers.consumer_offsets import ConsumerOffsetManager
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.remoting.handlers import Processors, handles
from rmqha.broker.support import validation


class ConsumerOffsetProcessors(Processors):
    def __init__(self, offsets: ConsumerOffsetManager, store):
        self.offsets = offsets
        self.store = store

    @handles(RequestCode.QUERY_CONSUMER_OFFSET)
    def query_consumer_offset(self, req: RemotingCommand, ctx) -> RemotingCommand:
        group, topic, queue_id = _group_topic_queue(req)
        offset = self.offsets.query(group, topic, queue_id)
        if offset >= 0:
            return req.make_response(ext_fields={"offset": offset})
        # No stored offset. A queue that still starts at 0 (its first message still in memory,
        # in the reference's terms) answers 0, so a new group reads from the beginning.
        if self.store.min_queue_offset(topic, queue_id) <= 0:
            return req.make_response(ext_fields={"offset": 0})
        return req.make_response(
            ResponseCode.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"
        )

    @handles(RequestCode.UPDATE_CONSUMER_OFFSET)
    def update_consumer_offset(self, req: RemotingCommand, ctx) -> RemotingCommand:
        group, topic, queue_id = _group_topic_queue(req)
        self.offsets.commit(group, topic, queue_id, req.get_long("commitOffset"))
        return req.make_response()


def _group_topic_queue(req: RemotingCommand) -> tuple[str, str, int]:
    """The request's group, topic and queue id, validated: they become keys of a persisted table."""
    return (
        validation.check_group(req.get_str("consumerGroup")),
        validation.check_topic(req.get_str("topic")),
        req.get_int("queueId"),
    )
