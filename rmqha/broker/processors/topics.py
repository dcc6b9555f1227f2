"""UPDATE_AND_CREATE_TOPIC (17): admin tools' and the C++ client's createTopic; the table it changes is
rmqha/broker/managers/topics.py's TopicConfigManager."""

from __future__ import annotations

from rmqha.broker.managers.topics import SLAVE_REFUSES, TopicConfigManager, validate_topic
from rmqha.broker.namesrv.register_body import TopicConfig
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.remoting.handlers import Processors, handles


class TopicProcessors(Processors):
    """UPDATE_AND_CREATE_TOPIC (17): admin tools and the C++ client's createTopic."""

    def __init__(self, topics: TopicConfigManager):
        self.topics = topics

    @handles(RequestCode.UPDATE_AND_CREATE_TOPIC)
    def update_and_create_topic(self, req: RemotingCommand, ctx) -> RemotingCommand:
        topic = req.get_str("topic")
        why = validate_topic(topic)
        if why:
            return req.make_response(ResponseCode.SYSTEM_ERROR, why)
        if not self.topics.config.is_master:  # as 4.9.4+: topics are created on masters, slaves copy them
            return req.make_response(ResponseCode.SYSTEM_ERROR, SLAVE_REFUSES)
        if self.topics.is_system_topic(topic):
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic.")
        # The C++ client sends topicFilterType as a one-character string (an enum assigned to a
        # std::string); anything that is not a known name counts as SINGLE_TAG.
        filter_type = req.get_str("topicFilterType", "SINGLE_TAG")
        if filter_type not in ("SINGLE_TAG", "MULTI_TAG"):
            filter_type = "SINGLE_TAG"
        tc = TopicConfig(
            topic,
            req.get_int("readQueueNums"),
            req.get_int("writeQueueNums"),
            req.get_int("perm"),
            filter_type,
            req.get_int("topicSysFlag", 0),
            req.get_lenient_bool("order", False),
        )
        self.topics.update(tc)
        return req.make_response()
