"""The requests of a client about itself and its group: HEART_BEAT (34), UNREGISTER_CLIENT (35),
GET_CONSUMER_LIST_BY_GROUP (38), LOCK_BATCH_MQ (41), UNLOCK_BATCH_MQ (42) and GET_CONSUMER_CONNECTION_LIST
(203), as 4.9's ClientManageProcessor and ConsumerManageProcessor. Each request is checked whole here
before rmqha/broker/managers/clients.py's ClientManager changes anything.

Enum fields may come as ordinals (C++) or names (Java); both are kept as sent.
"""

from __future__ import annotations

from rmqha.broker.managers import client_views as client_info
from rmqha.broker.managers.clients import ClientManager
from rmqha.broker.remoting import json_body
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.command import BadRequest, RemotingCommand
from rmqha.broker.remoting.handlers import Processors, handles
from rmqha.broker.support import validation

# ours: one client process rarely holds more than a few producers and consumers; every consumer
# group also becomes a persisted %RETRY% topic, so a heartbeat naming thousands is refused.
MAX_GROUPS_PER_HEARTBEAT = 1000


class ClientManageProcessors(Processors):
    def __init__(self, clients: ClientManager):
        self.clients = clients

    # -- heartbeat and leaving ----------------------------------------------------------------------
    @handles(RequestCode.HEART_BEAT)
    def heart_beat(self, req: RemotingCommand, ctx) -> RemotingCommand:
        data = json_body.loads_request(req.body, "HEART_BEAT")
        producers = [(validation.check_group(g), pd) for g, pd in _groups(data, "producerDataSet")]
        consumers = [(validation.check_group(g), cd) for g, cd in _groups(data, "consumerDataSet")]
        if len(producers) + len(consumers) > MAX_GROUPS_PER_HEARTBEAT:
            raise BadRequest(
                f"a heartbeat may name at most {MAX_GROUPS_PER_HEARTBEAT} groups, "
                f"this one names {len(producers) + len(consumers)}"
            )
        subscriptions = []
        for _group, cd in consumers:
            subs = _list(cd, "subscriptionDataSet")
            for sub in subs:
                validation.check_topic(str(sub.get("topic", "")) if isinstance(sub, dict) else "")
            subscriptions.append(subs)
        # Everything is valid: only now does anything change.
        self.clients.heartbeat(
            ctx,
            str(data.get("clientID", "")),
            req.language,
            req.version,
            [group for group, _pd in producers],
            [(group, cd, subs) for (group, cd), subs in zip(consumers, subscriptions)],
        )
        return req.make_response()

    @handles(RequestCode.UNREGISTER_CLIENT)
    def unregister_client(self, req: RemotingCommand, ctx) -> RemotingCommand:
        self.clients.unregister(ctx, req.get_str("producerGroup", ""), req.get_str("consumerGroup", ""))
        return req.make_response()

    # -- consumer list ------------------------------------------------------------------------------
    @handles(RequestCode.GET_CONSUMER_LIST_BY_GROUP)
    def get_consumer_list_by_group(self, req: RemotingCommand, ctx) -> RemotingCommand:
        group = req.get_str("consumerGroup")
        info = self.clients.consumer_groups.get(group)
        ids = info.client_ids() if info else []
        if not ids:
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}")
        return req.make_response(body=json_body.dumps({"consumerIdList": ids}))

    @handles(RequestCode.GET_CONSUMER_CONNECTION_LIST)
    def get_consumer_connection_list(self, req: RemotingCommand, ctx) -> RemotingCommand:
        """ConsumerConnection of a group, enums and subscriptions as 4.9 writes them (client_info.py);
        mqadmin consumerConnection and consumerProgress (its OFFLINE column) read it."""
        group = req.get_str("consumerGroup")
        info = self.clients.consumer_groups.get(group)
        if info is None:
            return req.make_response(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")
        now_ms = int(self.clients.clock.seconds() * 1000)
        body = {
            "connectionSet": [client_info.connection_json(ch) for ch in info.channels.values()],
            "consumeFromWhere": client_info.enum_name(info.consume_from_where, client_info.CONSUME_FROM_WHERE),
            "consumeType": client_info.enum_name(info.consume_type, client_info.CONSUME_TYPES),
            "messageModel": client_info.enum_name(info.message_model, client_info.MESSAGE_MODELS),
            "subscriptionTable": {
                t: client_info.subscription_json(s, now_ms)
                for t, s in info.subscriptions.items()
                if isinstance(s, dict)
            },
        }
        return req.make_response(body=json_body.dumps({k: v for k, v in body.items() if v is not None}))

    # -- orderly consumers' queue locks -------------------------------------------------------------
    @staticmethod
    def _mq_key(mq) -> tuple:
        if not isinstance(mq, dict):
            raise BadRequest(f"a message queue in mqSet is a JSON {type(mq).__name__}, not an object")
        queue_id = mq.get("queueId", 0)
        if type(queue_id) is not int:
            raise BadRequest(
                f"queueId of a message queue in mqSet is not an integer: {validation.shown(str(queue_id))}"
            )
        return (validation.check_topic(str(mq.get("topic", ""))), str(mq.get("brokerName")), queue_id)

    @staticmethod
    def _mq_json(key: tuple) -> dict:
        return {"brokerName": key[1], "queueId": key[2], "topic": key[0]}

    def _batch_mq(self, req: RemotingCommand, what: str) -> tuple[str, str, list[tuple]]:
        """(consumer group, client id, queue keys) of a LockBatchRequestBody / UnlockBatchRequestBody."""
        body = json_body.loads_request(req.body, what)
        group = validation.check_group(str(body.get("consumerGroup", "")))
        return group, str(body.get("clientId", "")), [self._mq_key(mq) for mq in _list(body, "mqSet")]

    @handles(RequestCode.LOCK_BATCH_MQ)
    def lock_batch_mq(self, req: RemotingCommand, ctx) -> RemotingCommand:
        ok = self.clients.lock(*self._batch_mq(req, "LOCK_BATCH_MQ"))
        return req.make_response(body=json_body.dumps({"lockOKMQSet": [self._mq_json(key) for key in ok]}))

    @handles(RequestCode.UNLOCK_BATCH_MQ)
    def unlock_batch_mq(self, req: RemotingCommand, ctx) -> RemotingCommand:
        self.clients.unlock(*self._batch_mq(req, "UNLOCK_BATCH_MQ"))
        return req.make_response()


def _list(obj: dict, key: str) -> list:
    """A JSON array field of a request body (missing or null: empty), or BadRequest."""
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise BadRequest(f"{key} is a JSON {type(value).__name__}, not an array")
    return value


def _groups(data: dict, key: str) -> list[tuple[str, dict]]:
    """(groupName, entry) of each object in a heartbeat's producer or consumer data set."""
    out = []
    for entry in _list(data, key):
        if not isinstance(entry, dict):
            raise BadRequest(f"an entry of {key} is a JSON {type(entry).__name__}, not an object")
        group = str(entry.get("groupName") or "")
        if group:  # an entry without a group registers nothing, as before
            out.append((group, entry))
    return out
