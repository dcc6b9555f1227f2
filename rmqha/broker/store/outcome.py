"""A put's outcome (PutStatus) and result (PutResult), made by the store's put paths (message_store.py,
dledger_commitlog.py) and answered by the send processor; message_store.py re-exports both.
Tests: tests/unit/store/test_put_status.py."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from rmqha.broker.remoting.codes import ResponseCode

from .record import RecordError


class PutStatus(enum.StrEnum):
    """The one type for a send's outcome, from the store through the flush and HA waits to the wire.

    Each member carries, in this one table, the remoting code the send processor answers with and
    whether the message is stored (a stored message's reply carries msgId/queueId/queueOffset).
    A StrEnum, so logs, metrics labels and JSON read the plain names ("PUT_OK", ...).
    """

    response_code: ResponseCode
    stored: bool

    # Called with a member's (name, code, stored) below; PutStatus(value) is a lookup (EnumMeta.__call__)
    # that never calls it: the defaults only let a type checker read that call.
    def __new__(
        cls, value: str, response_code: ResponseCode = ResponseCode.SYSTEM_ERROR, stored: bool = False
    ) -> PutStatus:
        member = str.__new__(cls, value)
        member._value_ = value
        member.response_code = response_code
        member.stored = stored
        return member

    # name = value, the response code on the wire, whether the message is stored
    PUT_OK = "PUT_OK", ResponseCode.SUCCESS, True
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT", ResponseCode.FLUSH_DISK_TIMEOUT, True  # not confirmed on disk
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT", ResponseCode.FLUSH_SLAVE_TIMEOUT, True
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE", ResponseCode.SLAVE_NOT_AVAILABLE, True
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL", ResponseCode.MESSAGE_ILLEGAL, False
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED", ResponseCode.MESSAGE_ILLEGAL, False
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE", ResponseCode.SERVICE_NOT_AVAILABLE, False
    DISK_FULL = "DISK_FULL", ResponseCode.SYSTEM_ERROR, False  # with a remark saying so
    # DLedger mode (rmqha/broker/store/dledger_commitlog.py): not the leader, or no quorum in maxWaitAckTimeMs
    OS_PAGECACHE_BUSY = "OS_PAGECACHE_BUSY", ResponseCode.SYSTEM_ERROR, False
    UNKNOWN_ERROR = "UNKNOWN_ERROR", ResponseCode.SYSTEM_ERROR, False


@dataclass
class PutResult:
    status: PutStatus
    wrote_offset: int = 0
    wrote_bytes: int = 0
    queue_offset: int = 0
    msg_id: str = ""
    store_timestamp: int = 0
    remark: str = ""

    def __post_init__(self) -> None:
        if type(self.status) is not PutStatus:
            self.status = PutStatus(self.status)  # a plain name is accepted; an unknown one is an error

    @classmethod
    def unencodable(cls, e: RecordError) -> PutResult:
        """record.encode refused the message: PROPERTIES_SIZE_EXCEEDED for its properties, else MESSAGE_ILLEGAL."""
        status = PutStatus.PROPERTIES_SIZE_EXCEEDED if "properties" in str(e) else PutStatus.MESSAGE_ILLEGAL
        return cls(status, remark=str(e))

    @property
    def next_offset(self) -> int:
        return self.wrote_offset + self.wrote_bytes

    @property
    def stored(self) -> bool:
        return self.wrote_bytes > 0
