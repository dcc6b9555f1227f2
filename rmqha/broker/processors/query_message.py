"""QUERY_MESSAGE (12): messages by key and store-time range, from the message index (rmqha/broker/store/index.py).

As the reference's QueryMessageProcessor.queryMessage answers it:
* request header: topic, key, maxNum (Integer), beginTimestamp, endTimestamp (Long); with the extField
  `_UNIQUE_KEY_QUERY` = "true" (a query by UNIQ_KEY) maxNum becomes defaultQueryMaxNum (32); the
  index returns at most maxMsgsNumBatch (64) offsets;
* SUCCESS: the body is the raw stored records, one after another (as PULL_MESSAGE's body);
* nothing found: QUERY_NOT_FOUND (22), remark "can not find message, maybe time range not correct";
* both carry indexLastUpdateTimestamp and indexLastUpdatePhyoffset (the index's end, 0 when nothing
  was found).
Ours: the topic must be a valid topic name (rmqha/broker/support/validation.py), the key at most 32767 characters
(no stored key is longer: properties are at most 32767 bytes), and a reply body stops growing past
MAX_REPLY_BODY (Java clients refuse frames over 16 MiB).

VIEW_MESSAGE_BY_ID (33), the same Java processor's other code, is served by offset_queries.py.
"""

from __future__ import annotations

from rmqha.broker.support import validation
from rmqha.broker.support.errors import BadRequest
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.remoting.handlers import Processors, handles
from rmqha.broker.store import index, queries

UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"  # MixAll.UNIQUE_MSG_QUERY_FLAG
MAX_KEY_LENGTH = 32767
MAX_REPLY_BODY = 8 * 1024 * 1024
NOT_FOUND_REMARK = "can not find message, maybe time range not correct"


class QueryMessageProcessor(Processors):
    def __init__(self, store):
        self.store = store

    @handles(RequestCode.QUERY_MESSAGE)
    def query_message(self, req: RemotingCommand, ctx) -> RemotingCommand:
        topic = validation.check_topic(req.get_str("topic"))
        key = req.get_str("key")
        if len(key) > MAX_KEY_LENGTH:
            raise BadRequest(f"the key is {len(key)} characters, more than any stored key can be ({MAX_KEY_LENGTH})")
        max_num = req.get_int("maxNum")
        begin = req.get_long("beginTimestamp")
        end = req.get_long("endTimestamp")
        if req.ext_fields.get(UNIQUE_MSG_QUERY_FLAG) == "true":
            max_num = index.DEFAULT_QUERY_MAX_NUM
        found = queries.query_message(self.store, topic, key, max_num, begin, end, MAX_REPLY_BODY)
        ext = {
            "indexLastUpdateTimestamp": found.index_last_update_timestamp,
            "indexLastUpdatePhyoffset": found.index_last_update_phyoffset,
        }
        if found.records:
            return req.make_response(ext_fields=ext, body=b"".join(found.records))
        return req.make_response(ResponseCode.QUERY_NOT_FOUND, NOT_FOUND_REMARK, ext_fields=ext)
