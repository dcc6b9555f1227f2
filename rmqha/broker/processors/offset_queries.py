"""Queue and message look-ups: GET_MAX_OFFSET, GET_MIN_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP,
GET_EARLIEST_MSG_STORETIME and VIEW_MESSAGE_BY_ID (WIRE-FACTS §2.4).

All response header values go out as strings (the C++ client ignores JSON numbers).
"""

from __future__ import annotations

from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.remoting.handlers import Processors, handles
from rmqha.broker.store import queries


class OffsetQueryProcessors(Processors):
    def __init__(self, store):
        self.store = store

    @handles(RequestCode.GET_MAX_OFFSET)
    def get_max_offset(self, req: RemotingCommand, ctx) -> RemotingCommand:
        offset = self.store.max_queue_offset(req.get_str("topic"), req.get_int("queueId"))
        return req.make_response(ext_fields={"offset": offset})

    @handles(RequestCode.GET_MIN_OFFSET)
    def get_min_offset(self, req: RemotingCommand, ctx) -> RemotingCommand:
        offset = self.store.min_queue_offset(req.get_str("topic"), req.get_int("queueId"))
        return req.make_response(ext_fields={"offset": offset})

    @handles(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP)
    def search_offset_by_timestamp(self, req: RemotingCommand, ctx) -> RemotingCommand:
        offset = queries.search_offset_by_timestamp(
            self.store, req.get_str("topic"), req.get_int("queueId"), req.get_long("timestamp")
        )
        return req.make_response(ext_fields={"offset": offset})

    @handles(RequestCode.GET_EARLIEST_MSG_STORETIME)
    def get_earliest_msg_storetime(self, req: RemotingCommand, ctx) -> RemotingCommand:
        ts = queries.earliest_msg_store_time(self.store, req.get_str("topic"), req.get_int("queueId"))
        # Java answers SUCCESS with -1 when the queue has no readable message.
        return req.make_response(ext_fields={"timestamp": ts if ts is not None else -1})

    @handles(RequestCode.VIEW_MESSAGE_BY_ID)
    def view_message_by_id(self, req: RemotingCommand, ctx) -> RemotingCommand:
        # The client decodes the offsetMsgId itself and sends its commit-log offset.
        phys = req.get_long("offset")
        found = queries.record_at(self.store, phys)
        if found is None:
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {phys}")
        return req.make_response(body=bytes(found[0]))
