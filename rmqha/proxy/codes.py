"""Broker answers as 5.x's proxy reports them to a gRPC client (tests: tests/unit/test_proxy_convert.py).

From rocketmq-proxy 5.x: ResponseBuilder's table of remoting response codes (anything not in it is
INTERNAL_SERVER_ERROR), and SendMessageActivity's SendStatus switch for a stored send:
FLUSH_DISK_TIMEOUT -> MASTER_PERSISTENCE_TIMEOUT, FLUSH_SLAVE_TIMEOUT -> SLAVE_PERSISTENCE_TIMEOUT,
SLAVE_NOT_AVAILABLE -> HA_NOT_AVAILABLE. A topic the name server does not know is TOPIC_NOT_FOUND and a
broker that does not answer in time PROXY_TIMEOUT, as there.
"""

from __future__ import annotations

from rmqha.broker.remoting.codes import ResponseCode
from rmqha.proxy.third_party.rocketmq_apis.v2 import definition_pb2 as d

REMOTING_TO_GRPC = {
    ResponseCode.SUCCESS: d.OK,
    ResponseCode.SYSTEM_BUSY: d.TOO_MANY_REQUESTS,
    ResponseCode.REQUEST_CODE_NOT_SUPPORTED: d.NOT_IMPLEMENTED,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: d.CONSUMER_GROUP_NOT_FOUND,
}

# A send the broker stored, with its SendStatus (MQClientAPIImpl.processSendResponse's switch on the code).
SEND_STATUS_TO_GRPC = {
    ResponseCode.SUCCESS: d.OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: d.MASTER_PERSISTENCE_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: d.SLAVE_PERSISTENCE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: d.HA_NOT_AVAILABLE,
}


def status(code: int, message: str | None = None) -> d.Status:
    return d.Status(code=code, message=message if message is not None else d.Code.Name(code))


def from_remoting(response_code: int, remark: str | None) -> d.Status:
    """ResponseBuilder.buildStatus(int, String): the message is the remark, else the number."""
    code = REMOTING_TO_GRPC.get(response_code, d.INTERNAL_SERVER_ERROR)
    return d.Status(code=code, message=remark if remark is not None else str(response_code))


def from_send(response_code: int, remark: str | None) -> d.Status:
    """One send's status: the SendStatus switch for the four stored outcomes, the table otherwise."""
    code = SEND_STATUS_TO_GRPC.get(response_code)
    if code is None:
        return from_remoting(response_code, remark)
    if code == d.OK:
        return status(d.OK)
    return status(code, f"send message failed, sendStatus={ResponseCode(response_code).name}")
