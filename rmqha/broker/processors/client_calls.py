"""Admin requests the broker answers by asking the consumers themselves (4.9.8's AdminBrokerProcessor
callConsumer and Broker2Client):

* GET_CONSUMER_RUNNING_INFO (307) and CONSUME_MESSAGE_DIRECTLY (309): the request (its extFields and
  body; for 309 the stored record the offsetMsgId names, and this broker's name) goes to the one
  client named by clientId; its reply is the answer. Not online, or older than V3_1_8_SNAPSHOT:
  SYSTEM_ERROR; no reply within 10 s: CONSUME_MSG_TIMEOUT; connection lost: SYSTEM_ERROR.
* INVOKE_BROKER_TO_RESET_OFFSET (222): each write queue's offset for the timestamp (-1: the max
  offset; never past the committed offset unless isForce), told to every online client of the group
  by a oneway RESET_CONSUMER_CLIENT_OFFSET (220); the answer is ResetOffsetBody. As in 4.9 the broker's
  committed offsets are not changed here: each client commits the offsets it was told.
* INVOKE_BROKER_TO_GET_CONSUMER_STATUS (223): GET_CONSUMER_STATUS_FROM_CLIENT (221) to each client (or
  the one named by clientAddr); a client that fails or is silent for 5 s is left out of the answer.

Ours: the calls of 223 run side by side (4.9 waits for each client in turn); a reset is sent to a C++
client in the list form it parses (ResetOffsetBodyForC) whatever language the admin tool speaks (4.9
picks the form by the admin tool's language, so a Java mqadmin's reset never reaches a C++ consumer).
"""

from __future__ import annotations

import json
import logging

from twisted.internet import defer

from rmqha.broker.remoting import object_keys
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.remoting.handlers import Processors, handles
from rmqha.broker.remoting.object_keys import ObjectKeyed, message_queue
from rmqha.broker.remoting.protocol import RemotingTimeoutError
from rmqha.broker.store import queries

from rmqha.broker.managers import client_views as client_info

log = logging.getLogger("rmqha.broker.client_calls")

CALL_TIMEOUT_S = 10.0  # Broker2Client.callClient
STATUS_TIMEOUT_S = 5.0  # Broker2Client.getConsumeStatus


class ClientCallProcessors(Processors):
    def __init__(self, config, clients, topics, offsets, store):
        self.config = config
        self.clients = clients  # ClientManager
        self.topics = topics
        self.offsets = offsets
        self.store = store

    # -- one client's answer ----------------------------------------------------------------------------
    @handles(RequestCode.GET_CONSUMER_RUNNING_INFO)
    def get_consumer_running_info(self, req: RemotingCommand, ctx):
        return self._call_consumer(req, req.get_str("consumerGroup"), req.get_str("clientId"), req.body)

    @handles(RequestCode.CONSUME_MESSAGE_DIRECTLY)
    def consume_message_directly(self, req: RemotingCommand, ctx):
        group = req.get_str("consumerGroup")
        msg_id = req.get_str("msgId")
        try:
            found = queries.record_by_offset_msg_id(self.store, msg_id)
        except ValueError as e:
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"msgId {msg_id!r} is not an offsetMsgId: {e}")
        if found is None:
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"no message stored here for msgId {msg_id}")
        req.ext_fields["brokerName"] = self.config.brokerName
        return self._call_consumer(req, group, req.get_str("clientId", ""), bytes(found[0]))

    def _call_consumer(self, req: RemotingCommand, group: str, client_id: str, body: bytes):
        channel = self.clients.find_consumer(group, client_id)
        if channel is None:
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online")
        if channel.version < client_info.V3_1_8_SNAPSHOT:
            return req.make_response(
                ResponseCode.SYSTEM_ERROR,
                f"The Consumer <{client_id}> Version <{client_info.version_desc(channel.version)}> too low to "
                f"finish, please upgrade it to V3_1_8_SNAPSHOT",
            )
        call = RemotingCommand.request(req.code, dict(req.ext_fields), body=body)
        d = channel.ctx.send_request(call, CALL_TIMEOUT_S)

        def answered(resp: RemotingCommand) -> RemotingCommand:
            return req.make_response(resp.code, resp.remark, ext_fields=resp.ext_fields, body=resp.body)

        def failed(failure) -> RemotingCommand:
            if failure.check(RemotingTimeoutError):
                return req.make_response(
                    ResponseCode.CONSUME_MSG_TIMEOUT,
                    f"consumer <{group}> <{client_id}> Timeout: {failure.getErrorMessage()}",
                )
            return req.make_response(
                ResponseCode.SYSTEM_ERROR,
                f"invoke consumer <{group}> <{client_id}> Exception: {failure.getErrorMessage()}",
            )

        return d.addCallbacks(answered, failed)

    # -- reset offset -----------------------------------------------------------------------------------
    @handles(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET)
    def reset_offset(self, req: RemotingCommand, ctx) -> RemotingCommand:
        topic, group = req.get_str("topic"), req.get_str("group")
        timestamp, force = req.get_long("timestamp"), req.get_bool("isForce")
        log.info(
            "[reset-offset] reset offset started by %s. topic=%s, group=%s, timestamp=%d, isForce=%s",
            ctx.peer_address,
            topic,
            group,
            timestamp,
            force,
        )
        tc = self.topics.get(topic)
        if tc is None:
            return req.make_response(
                ResponseCode.SYSTEM_ERROR, f"[reset-offset] reset offset failed, no topic in this broker. topic={topic}"
            )
        table = []  # ((topic, queueId), offset) in queue order
        for queue_id in range(tc.write_queue_nums):
            committed = self.offsets.query(group, topic, queue_id)
            if committed == -1:
                return req.make_response(ResponseCode.SYSTEM_ERROR, f"THe consumer group <{group}> not exist")
            table.append((queue_id, reset_target(self.store, topic, queue_id, timestamp, committed, force)))
        info = self.clients.consumer_groups.get(group)
        if info is None or not info.channels:
            return req.make_response(
                ResponseCode.CONSUMER_NOT_ONLINE,
                f"Consumer not online, so can not reset offset, Group: {group} Topic: {topic} Timestamp: {timestamp}",
            )
        broker = self.config.brokerName
        header = {"topic": topic, "group": group, "timestamp": timestamp, "isForce": False}
        for channel in list(info.channels.values()):
            if channel.version < client_info.V3_0_7_SNAPSHOT:
                return req.make_response(
                    ResponseCode.SYSTEM_ERROR,
                    f"the client does not support this feature. version={client_info.version_desc(channel.version)}",
                )
            for_c = req.language == "CPP" or channel.language == "CPP"
            body = reset_body_for_c(topic, broker, table) if for_c else reset_body(topic, broker, table)
            try:
                channel.ctx.send_oneway(
                    RemotingCommand.request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, header, body=body)
                )
                log.info(
                    "[reset-offset] reset offset success. topic=%s, group=%s, clientId=%s",
                    topic,
                    group,
                    channel.client_id,
                )
            except Exception as e:  # a closing connection: its close hook removes it
                log.error("[reset-offset] reset offset exception. topic=%s, group=%s ,error=%s", topic, group, e)
        return req.make_response(body=reset_body(topic, broker, table))

    # -- consumer status --------------------------------------------------------------------------------
    @handles(RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS)
    def get_consumer_status(self, req: RemotingCommand, ctx):
        topic, group = req.get_str("topic"), req.get_str("group")
        origin = req.get_str("clientAddr", "").strip()
        info = self.clients.consumer_groups.get(group)
        if info is None or not info.channels:
            return req.make_response(
                ResponseCode.SYSTEM_ERROR, f"No Any Consumer online in the consumer group: [{group}]"
            )
        targets = []
        for channel in list(info.channels.values()):
            if channel.version < client_info.V3_0_7_SNAPSHOT:
                return req.make_response(
                    ResponseCode.SYSTEM_ERROR,
                    f"the client does not support this feature. version={client_info.version_desc(channel.version)}",
                )
            if not origin or origin == channel.client_id:
                targets.append(channel)
                if origin:
                    break
        calls = []
        for channel in targets:
            call = RemotingCommand.request(
                RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT, {"topic": topic, "group": group}
            )
            d = channel.ctx.send_request(call, STATUS_TIMEOUT_S)
            d.addCallback(_status_table)
            d.addErrback(_status_failed, topic, group, channel.client_id)
            calls.append(d.addCallback(lambda table, cid=channel.client_id: (cid, table)))

        def answer(results) -> RemotingCommand:
            consumers = {cid: ObjectKeyed(table) for ok, (cid, table) in results if ok and table is not None}
            return req.make_response(
                body=object_keys.dumps({"consumerTable": consumers, "messageQueueTable": ObjectKeyed([])})
            )

        return defer.DeferredList(calls, consumeErrors=True).addCallback(answer)


def reset_target(store, topic: str, queue_id: int, timestamp: int, committed: int, force: bool) -> int:
    """Broker2Client.resetOffset's offset for one queue: the first message stored at or after the
    timestamp (-1: the queue's end), not negative, and not past the committed offset unless forced."""
    if timestamp == -1:
        target = store.max_queue_offset(topic, queue_id)
    else:
        target = queries.search_offset_by_timestamp(store, topic, queue_id, timestamp)
    target = max(target, 0)
    return target if force or target < committed else committed


def reset_body(topic: str, broker: str, table) -> bytes:
    """ResetOffsetBody {offsetTable: {MessageQueue: offset}} (fastjson's object keys)."""
    return object_keys.dumps(
        {"offsetTable": ObjectKeyed((message_queue(topic, broker, queue_id), offset) for queue_id, offset in table)}
    )


def reset_body_for_c(topic: str, broker: str, table) -> bytes:
    """ResetOffsetBodyForC {offsetTable: [MessageQueueForC]}: what the C++ client's ResetOffsetBody parses."""
    return object_keys.dumps(
        {
            "offsetTable": [
                {"brokerName": broker, "offset": offset, "queueId": queue_id, "topic": topic}
                for queue_id, offset in table
            ]
        }
    )


def _status_table(resp: RemotingCommand):
    """A client's GetConsumerStatusBody.messageQueueTable as [(MessageQueue dict, offset)], or None
    when it did not answer SUCCESS with a body (4.9 leaves such a client out)."""
    if resp.code != ResponseCode.SUCCESS or not resp.body:
        return None
    parsed = object_keys.loads(resp.body)
    table = parsed.get("messageQueueTable") if isinstance(parsed, dict) else None
    if not isinstance(table, dict):
        return None
    return [(json.loads(k), v) for k, v in table.items() if k.startswith("{")]


def _status_failed(failure, topic: str, group: str, client_id: str):
    log.error(
        "[get-consumer-status] get consumer status exception. topic=%s, group=%s, client=%s, error=%s",
        topic,
        group,
        client_id,
        failure.getErrorMessage(),
    )
    return None
