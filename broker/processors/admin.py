"""Admin reads: GET_ALL_TOPIC_CONFIG (21), GET_ALL_CONSUMER_OFFSET (43), GET_ALL_DELAY_OFFSET (45),
GET_BROKER_RUNTIME_INFO (28).

Bodies as WIRE-FACTS §2.4 gives them: the TopicConfigSerializeWrapper, {"offsetTable":{...}} (consumer
offsets, and delayOffset.json's content for the delay levels) and a KVTable {"table":{...}} of
strings. A slave copies the first three from its master (slave_sync).
"""
from __future__ import annotations

import time

from broker.remoting import json_body
from broker.remoting.codes import RequestCode
from broker.remoting.command import RemotingCommand

BROKER_VERSION = 409  # V4_9_8, the version this broker's behaviour follows
BROKER_VERSION_DESC = "V4_9_8"


class AdminProcessors:
    def __init__(self, config, controller, topics, offsets, clients=None, pull=None, schedule=None):
        self.schedule = schedule
        self.config = config
        self.controller = controller
        self.topics = topics
        self.offsets = offsets
        self.clients = clients
        self.pull = pull
        self.boot_ms = int(time.time() * 1000)

    def register(self, registry) -> None:
        registry.register(RequestCode.GET_ALL_TOPIC_CONFIG, self.get_all_topic_config)
        registry.register(RequestCode.GET_ALL_CONSUMER_OFFSET, self.get_all_consumer_offset)
        registry.register(RequestCode.GET_BROKER_RUNTIME_INFO, self.get_broker_runtime_info)
        if self.schedule is not None:
            registry.register(RequestCode.GET_ALL_DELAY_OFFSET, self.get_all_delay_offset)

    def get_all_delay_offset(self, req: RemotingCommand, ctx) -> RemotingCommand:
        return req.make_response(body=self.schedule.encode())

    def get_all_topic_config(self, req: RemotingCommand, ctx) -> RemotingCommand:
        return req.make_response(body=self.topics.encode())

    def get_all_consumer_offset(self, req: RemotingCommand, ctx) -> RemotingCommand:
        return req.make_response(body=self.offsets.encode())

    def runtime_info(self) -> dict[str, str]:
        c, store = self.config, self.controller.store
        info = {
            "brokerVersion": BROKER_VERSION,
            "brokerVersionDesc": BROKER_VERSION_DESC,
            "brokerRole": c.brokerRole,
            "brokerName": c.brokerName,
            "brokerId": c.brokerId,
            "clusterName": c.brokerClusterName,
            "flushDiskType": c.flushDiskType,
            "commitLogMaxOffset": store.max_offset,
            "commitLogMinOffset": store.min_offset,
            "dispatchBehindBytes": store.max_offset - store.reput_offset,
            "bootTimestamp": self.boot_ms,
            "runtime": f"[ {(int(time.time() * 1000) - self.boot_ms) // 1000} seconds ]",
            "topicCount": len(self.topics.table),
            "consumeQueueCount": len(store.queues),
        }
        ha = self.controller.ha
        if ha is not None:
            info["haConnectionCount"] = ha.connection_count
            info["push2SlaveMaxOffset"] = ha.push2slave_max_offset
            info["masterPutWhere"] = store.max_offset
        if self.controller.ha_client is not None:
            info["haMasterAddress"] = self.controller.ha_client.master_address or ""
            info["slaveFallBehindMuch"] = "0"
        if self.clients is not None:
            info["clientConnections"] = self.clients.client_count()
        if self.pull is not None:
            info["pullRequestsHeld"] = len(self.pull.hold_service)
        return {k: str(v) for k, v in info.items()}

    def get_broker_runtime_info(self, req: RemotingCommand, ctx) -> RemotingCommand:
        return req.make_response(body=json_body.dumps({"table": self.runtime_info()}))
