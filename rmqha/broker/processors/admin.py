"""Admin reads: GET_ALL_TOPIC_CONFIG (21), GET_ALL_CONSUMER_OFFSET (43), GET_ALL_DELAY_OFFSET (45),
GET_BROKER_RUNTIME_INFO (28).

Bodies as WIRE-FACTS §2.4 gives them: the TopicConfigSerializeWrapper, {"offsetTable":{...}} (consumer
offsets, and delayOffset.json's content for the delay levels) and a KVTable {"table":{...}} of
strings. A slave copies the first three from its master (slave_sync).
"""

from __future__ import annotations

from rmqha.broker.observability import runtime_info as runtime_table
from rmqha.broker.observability.runtime_info import BROKER_VERSION, BROKER_VERSION_DESC
from rmqha.broker.remoting import json_body
from rmqha.broker.remoting.codes import RequestCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.remoting.handlers import Processors, handles


class AdminProcessors(Processors):
    def __init__(self, config, controller, topics, offsets, schedule=None):
        self.schedule = schedule
        self.config = config
        self.controller = controller
        self.topics = topics
        self.offsets = offsets

    # served only with the schedule service (delay levels): without it the code is not supported
    @handles(RequestCode.GET_ALL_DELAY_OFFSET, when=lambda self: self.schedule is not None)
    def get_all_delay_offset(self, req: RemotingCommand, ctx) -> RemotingCommand:
        return req.make_response(body=self.schedule.encode())

    @handles(RequestCode.GET_ALL_TOPIC_CONFIG)
    def get_all_topic_config(self, req: RemotingCommand, ctx) -> RemotingCommand:
        return req.make_response(body=self.topics.encode())

    @handles(RequestCode.GET_ALL_CONSUMER_OFFSET)
    def get_all_consumer_offset(self, req: RemotingCommand, ctx) -> RemotingCommand:
        return req.make_response(body=self.offsets.encode())

    def runtime_info(self) -> dict[str, str]:
        """Every key 4.9.8 answers (rmqha/broker/observability/runtime_info.py) and no other: mqadmin
        brokerStatus prints the whole table, so a key of our own would be a line 4.9.8 does not print."""
        c, controller = self.config, self.controller
        store, stats = controller.store, controller.stats
        info = stats.store.runtime_info(stats.now_ms())
        info.update(runtime_table.store_part(c, store, self.schedule))
        info.update(runtime_table.broker_part(c, store, controller.flusher))
        info["brokerVersionDesc"] = BROKER_VERSION_DESC
        info["brokerVersion"] = str(BROKER_VERSION)
        return info

    @handles(RequestCode.GET_BROKER_RUNTIME_INFO)
    def get_broker_runtime_info(self, req: RemotingCommand, ctx) -> RemotingCommand:
        return req.make_response(body=json_body.dumps({"table": self.runtime_info()}))
