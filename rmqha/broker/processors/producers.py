"""Producer groups as the admin tools see them: GET_PRODUCER_CONNECTION_LIST (204) and
GET_ALL_PRODUCER_INFO (328), as 4.9.8's AdminBrokerProcessor answers them from its ProducerManager.

The groups themselves are kept by ClientManager (clients.py): a heartbeat's producerDataSet registers
the connection, UNREGISTER_CLIENT, its close or 120 s without a heartbeat remove it. Unlike 4.9, a
group whose last connection closed is gone at once (4.9 keeps it, empty, until an unregister), so
"not exist" means what it says.
"""

from __future__ import annotations

from rmqha.broker.remoting import json_body
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.remoting.handlers import Processors, handles

from rmqha.broker.managers import client_views as client_info


class ProducerProcessors(Processors):
    def __init__(self, clients):
        self.clients = clients  # ClientManager

    @handles(RequestCode.GET_PRODUCER_CONNECTION_LIST)
    def get_producer_connection_list(self, req: RemotingCommand, ctx) -> RemotingCommand:
        """ProducerConnection {connectionSet}; SYSTEM_ERROR for a group with no connection, as 4.9."""
        group = req.get_str("producerGroup")
        members = self.clients.producer_groups.get(group)
        if members is None:
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"the producer group[{group}] not exist")
        body = {"connectionSet": [client_info.connection_json(ch) for ch in members.values()]}
        return req.make_response(body=json_body.dumps(body))

    @handles(RequestCode.GET_ALL_PRODUCER_INFO)
    def get_all_producer_info(self, req: RemotingCommand, ctx) -> RemotingCommand:
        """ProducerTableInfo {data: {group: [ProducerInfo]}}; remoteIP is Java's
        InetSocketAddress.toString() ("/ip:port"), lastUpdateTimestamp the last heartbeat in ms."""
        data = {
            group: [producer_info(ch) for ch in members.values()]
            for group, members in self.clients.producer_groups.items()
            if members
        }
        return req.make_response(body=json_body.dumps({"data": data}))


def producer_info(channel) -> dict:
    return {
        "clientId": channel.client_id,
        "language": channel.language,
        "lastUpdateTimestamp": int(channel.last_update * 1000),
        "remoteIP": "/" + channel.ctx.peer_address,
        "version": channel.version,
    }
