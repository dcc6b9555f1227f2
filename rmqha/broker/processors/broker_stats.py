"""VIEW_BROKER_STATS_DATA (315): one counter of 4.9's BrokerStatsManager over the last minute, hour and
day (`mqadmin statsAll` and `brokerConsumeStats` read it). The counters are rmqha/broker/observability/stats.py's StatsTable.

Header: statsName (TOPIC_PUT_NUMS, GROUP_GET_NUMS, ...) and statsKey (a topic, "topic@group", or the
cluster name for BROKER_PUT_NUMS / BROKER_GET_NUMS). Body: BrokerStatsData, {"statsDay", "statsHour",
"statsMinute"} each {"avgpt", "sum", "tps"}. A counter never added to: SYSTEM_ERROR, 4.9's remark.
"""

from __future__ import annotations

from rmqha.broker.remoting import json_body
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.remoting.handlers import Processors, handles


class BrokerStatsProcessor(Processors):
    def __init__(self, stats):
        self.stats = stats  # rmqha.broker.observability.stats_service.BrokerStats

    @handles(RequestCode.VIEW_BROKER_STATS_DATA)
    def view(self, req: RemotingCommand, ctx) -> RemotingCommand:
        name = req.get_str("statsName")
        key = req.get_str("statsKey")
        item = self.stats.table.item(name, key)
        if item is None:
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"The stats <{name}> <{key}> not exist")
        body = {"statsDay": item.window("day"), "statsHour": item.window("hour"), "statsMinute": item.window("minute")}
        return req.make_response(body=json_body.dumps(body))
