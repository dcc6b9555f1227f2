"""The remoting requests the proxy makes, built and read without I/O (tests:
tests/unit/test_proxy_convert.py). Header field names are 5.x's request headers."""

from __future__ import annotations

import json

from rmqha.broker.remoting.codes import RequestCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.proxy.receipt import Handle

POP_MESSAGE = 200050
ACK_MESSAGE = 200051
CHANGE_MESSAGE_INVISIBLETIME = 200053
POLLING_FULL = 209  # 5.x ResponseCode: too many long-polling requests queued
POLLING_TIMEOUT = 210  # 5.x ResponseCode: the long poll ended with nothing


def _req(code: int, fields: dict, body: bytes = b"") -> RemotingCommand:
    return RemotingCommand.request(code, fields, body=body, language="JAVA")


def route_request(topic: str) -> RemotingCommand:
    return _req(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})


def end_transaction(
    group: str,
    queue_offset: int,
    commit_log_offset: int,
    commit: bool,
    msg_id: str,
    transaction_id: str,
    from_check: bool,
) -> RemotingCommand:
    return _req(
        RequestCode.END_TRANSACTION,
        {
            "producerGroup": group,
            "tranStateTableOffset": queue_offset,
            "commitLogOffset": commit_log_offset,
            "commitOrRollback": 8 if commit else 12,
            "msgId": msg_id,
            "transactionId": transaction_id,
            "fromTransactionCheck": from_check,
        },
    )


def heartbeat(client_id: str, producer_groups: list[str], consumer_groups: list[str]) -> RemotingCommand:
    """HEART_BEAT with the proxy as one client: a broker's transaction check reaches a producer group
    only through a connection that registered it."""
    body = {
        "clientID": client_id,
        "producerDataSet": [{"groupName": g} for g in sorted(producer_groups)],
        "consumerDataSet": [
            {
                "groupName": g,
                "consumeType": "CONSUME_POP",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "subscriptionDataSet": [],
                "unitMode": False,
            }
            for g in sorted(consumer_groups)
        ],
    }
    return _req(RequestCode.HEART_BEAT, {}, body=json.dumps(body).encode())


def unregister(client_id: str, producer_group: str = "", consumer_group: str = "") -> RemotingCommand:
    return _req(
        RequestCode.UNREGISTER_CLIENT,
        {"clientID": client_id, "producerGroup": producer_group or None, "consumerGroup": consumer_group or None},
    )


def pop(
    group: str,
    topic: str,
    queue_id: int,
    max_nums: int,
    invisible_ms: int,
    poll_ms: int,
    born_ms: int,
    tag_expression: str,
    order: bool = False,
    attempt_id: str | None = None,
) -> RemotingCommand:
    return _req(
        POP_MESSAGE,
        {
            "consumerGroup": group,
            "topic": topic,
            "queueId": queue_id,
            "maxMsgNums": max_nums,
            "invisibleTime": invisible_ms,
            "pollTime": poll_ms,
            "bornTime": born_ms,
            "initMode": 1,  # ConsumeInitMode.MAX, as 5.x's proxy sends (the broker's reading: README.md)
            "expType": "TAG",
            "exp": tag_expression or "*",
            "order": order,
            "attemptId": attempt_id,
        },
    )


def ack(group: str, topic: str, h: Handle) -> RemotingCommand:
    return _req(
        ACK_MESSAGE,
        {
            "consumerGroup": group,
            "topic": topic,
            "queueId": h.queue_id,
            "extraInfo": h.extra_info(),
            "offset": h.offset,
        },
    )


def change_invisible(group: str, topic: str, h: Handle, invisible_ms: int) -> RemotingCommand:
    return _req(
        CHANGE_MESSAGE_INVISIBLETIME,
        {
            "consumerGroup": group,
            "topic": topic,
            "queueId": h.queue_id,
            "extraInfo": h.extra_info(),
            "offset": h.offset,
            "invisibleTime": invisible_ms,
        },
    )


def send_back_to_dlq(
    group: str, commit_log_offset: int, origin_topic: str, msg_id: str, max_times: int
) -> RemotingCommand:
    """CONSUMER_SEND_MSG_BACK with delayLevel -1: straight to %DLQ%group (what 5.x's proxy sends for
    ForwardMessageToDeadLetterQueue)."""
    return _req(
        RequestCode.CONSUMER_SEND_MSG_BACK,
        {
            "group": group,
            "offset": commit_log_offset,
            "delayLevel": -1,
            "originMsgId": msg_id,
            "originTopic": origin_topic,
            "unitMode": False,
            "maxReconsumeTimes": max_times,
        },
    )


def group_config(group: str) -> RemotingCommand:
    return _req(RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": group})


def query_consumer_offset(group: str, topic: str, queue_id: int) -> RemotingCommand:
    return _req(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": queue_id})


def update_consumer_offset(group: str, topic: str, queue_id: int, offset: int) -> RemotingCommand:
    return _req(
        RequestCode.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": group, "topic": topic, "queueId": queue_id, "commitOffset": offset},
    )


def max_offset(topic: str, queue_id: int) -> RemotingCommand:
    return _req(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": queue_id})


def min_offset(topic: str, queue_id: int) -> RemotingCommand:
    return _req(RequestCode.GET_MIN_OFFSET, {"topic": topic, "queueId": queue_id})


def search_offset(topic: str, queue_id: int, ts_ms: int) -> RemotingCommand:
    return _req(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": topic, "queueId": queue_id, "timestamp": ts_ms})
