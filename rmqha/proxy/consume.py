"""The consumer RPCs (tests: tests/integration/test_proxy_client5.py): ReceiveMessage on the broker's POP with
long polling, AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue, and the offset RPCs.

ReceiveMessage follows ReceiveMessageActivity: the invisible duration is checked against the proxy's
bounds, the long poll is the client's timeout less a reserve so the answer beats the client's deadline,
a popped message whose reconsume times reached the client's max attempts goes to the DLQ and is acked
instead of delivered (PopMessageResultFilterImpl's TO_DLQ), and the stream is the status, the delivery
timestamp, then the messages.
"""

from __future__ import annotations

import logging

from rmqha.broker.remoting import json_body
from rmqha.broker.remoting.codes import ResponseCode
from rmqha.broker.store import record
from rmqha.proxy import brokers, codes, convert, receipt, settings
from rmqha.proxy.third_party.rocketmq_apis.v2 import definition_pb2 as d
from rmqha.proxy.third_party.rocketmq_apis.v2 import service_pb2 as s

log = logging.getLogger("rmqha.proxy.consume")

MAX_INVISIBLE_MS = 12 * 3600 * 1000  # ProxyConfig.maxInvisibleTimeMills
LONG_POLLING_RESERVE_MS = 100  # ProxyConfig.longPollingReserveTimeInMillis
DEFAULT_INVISIBLE_MS = 30_000


class Consume:
    def __init__(self, proxy):
        self.proxy = proxy

    async def group_policy(self, group: str) -> tuple[int, bool]:
        """(retryMaxTimes, consumeMessageOrderly) of a subscription group, from any master that has it."""
        from rmqha.proxy.service import Failed  # noqa: F401  (cycle: service imports us)

        for addr in [a for a in self.proxy.remoting.addresses() if a not in self.proxy.namesrv]:
            try:
                resp = await self.proxy.call(addr, brokers.group_config(group))
            except Exception:
                continue
            if resp.code == ResponseCode.SUCCESS and resp.body:
                cfg = json_body.loads(resp.body)
                return int(cfg.get("retryMaxTimes", settings.DEFAULT_RETRY_MAX_TIMES)), bool(
                    cfg.get("consumeMessageOrderly", False)
                )
        return settings.DEFAULT_RETRY_MAX_TIMES, False

    async def orderly(self, group: str, route: dict) -> bool:
        return (await self.group_policy(group))[1]

    def _max_attempts(self, context) -> int:
        from rmqha.proxy.service import client_id

        try:
            sess = self.proxy.state.sessions.get(client_id(context))
        except Exception:
            sess = None
        if sess is not None and sess.settings is not None and sess.settings.backoff_policy.max_attempts:
            return sess.settings.backoff_policy.max_attempts
        return settings.DEFAULT_RETRY_MAX_TIMES + 1

    async def receive(self, request: s.ReceiveMessageRequest, context):
        from rmqha.proxy.service import Failed, failure_status

        try:
            group, topic = request.group.name, request.message_queue.topic.name
            invisible = (
                convert.duration_ms(request.invisible_duration)
                if request.HasField("invisible_duration")
                else DEFAULT_INVISIBLE_MS
            )
            if not self.proxy.min_invisible_ms <= invisible <= MAX_INVISIBLE_MS:
                raise Failed(
                    d.ILLEGAL_INVISIBLE_TIME,
                    f"the invisibleTime must be between {self.proxy.min_invisible_ms} and {MAX_INVISIBLE_MS} ms",
                )
            poll = (
                convert.duration_ms(request.long_polling_timeout)
                if request.HasField("long_polling_timeout")
                else settings.MAX_LONG_POLLING_MS
            )
            poll = max(0, min(poll, settings.MAX_LONG_POLLING_MS) - LONG_POLLING_RESERVE_MS)
            broker_name = request.message_queue.broker.name
            addr = await self.proxy.master(topic, broker_name)
            tags = (
                request.filter_expression.expression
                if request.filter_expression.type in (d.TAG, d.FILTER_TYPE_UNSPECIFIED)
                else "*"
            )
            # 5.x's ReceiveMessageQueueSelector: the broker the client named, every queue of it (-1)
            cmd = brokers.pop(
                group,
                topic,
                -1,
                max(1, request.batch_size),
                invisible,
                poll,
                convert.now_ms(),
                tags,
                attempt_id=request.attempt_id or None,
            )
            resp = await self.proxy.call(addr, cmd, timeout=poll / 1000 + self.proxy.timeout)
        except Exception as e:
            yield s.ReceiveMessageResponse(status=failure_status(e))
            return
        if resp.code in (ResponseCode.PULL_NOT_FOUND, brokers.POLLING_TIMEOUT) or (
            resp.code == ResponseCode.SUCCESS and not resp.body
        ):
            yield s.ReceiveMessageResponse(status=codes.status(d.MESSAGE_NOT_FOUND, "no new message"))
            return
        if resp.code != ResponseCode.SUCCESS:
            yield s.ReceiveMessageResponse(status=codes.from_remoting(resp.code, resp.remark))
            return
        out = []
        max_attempts = self._max_attempts(context)
        for m in _decode_all(resp.body):
            ck = m.properties.get("POP_CK")
            if ck is None:
                continue
            h = receipt.from_pop_ck(ck, m.physical_offset)
            if m.reconsume_times >= max_attempts:
                await self._to_dlq(addr, group, topic, h, m, max_attempts)
                continue
            out.append(convert.stored_message(m, h.encode(), h.invisible_time, m.reconsume_times + 1, topic=topic))
        if not out:
            yield s.ReceiveMessageResponse(status=codes.status(d.MESSAGE_NOT_FOUND, "no new message"))
            return
        yield s.ReceiveMessageResponse(status=codes.status(d.OK))
        # when the proxy hands the batch over: the 5.x Python push consumer measures its latency from
        # it and drops the batch without it
        yield s.ReceiveMessageResponse(delivery_timestamp=convert.timestamp(convert.now_ms()))
        for msg in out:
            yield s.ReceiveMessageResponse(message=msg)

    async def _to_dlq(self, addr, group, topic, h: receipt.Handle, m: record.Message, max_attempts: int) -> None:
        try:
            resp = await self.proxy.call(
                addr,
                brokers.send_back_to_dlq(
                    group, m.physical_offset, topic, m.properties.get("UNIQ_KEY", ""), max_attempts - 1
                ),
            )
            if resp.code == ResponseCode.SUCCESS:
                await self.proxy.call(addr, brokers.ack(group, receipt.real_topic(topic, group, h.topic_kind), h))
        except Exception as e:
            log.warning("moving %s to the DLQ of %s: %s", m.properties.get("UNIQ_KEY"), group, e)

    async def ack(self, request: s.AckMessageRequest, context) -> s.AckMessageResponse:
        from rmqha.proxy.service import failure_status

        group, topic = request.group.name, request.topic.name
        entries = []
        for e in request.entries:
            try:
                h = receipt.decode(e.receipt_handle)
                addr = await self.proxy.master(topic, h.broker_name)
                resp = await self.proxy.call(
                    addr, brokers.ack(group, receipt.real_topic(topic, group, h.topic_kind), h)
                )
                st = codes.from_remoting(resp.code, resp.remark)
            except receipt.BadHandle as ex:
                st = codes.status(d.INVALID_RECEIPT_HANDLE, str(ex))
            except Exception as ex:
                st = failure_status(ex)
            entries.append(s.AckMessageResultEntry(message_id=e.message_id, receipt_handle=e.receipt_handle, status=st))
        found = {x.status.code for x in entries}
        top = codes.status(found.pop()) if len(found) == 1 else codes.status(d.MULTIPLE_RESULTS)
        return s.AckMessageResponse(status=top, entries=entries)

    async def change_invisible(
        self, request: s.ChangeInvisibleDurationRequest, context
    ) -> s.ChangeInvisibleDurationResponse:
        from rmqha.proxy.service import Failed, failure_status

        try:
            group, topic = request.group.name, request.topic.name
            h = receipt.decode(request.receipt_handle)
            invisible = convert.duration_ms(request.invisible_duration)
            if not 0 <= invisible <= MAX_INVISIBLE_MS:
                raise Failed(d.ILLEGAL_INVISIBLE_TIME, f"the invisibleTime must be at most {MAX_INVISIBLE_MS} ms")
            addr = await self.proxy.master(topic, h.broker_name)
            resp = await self.proxy.call(
                addr, brokers.change_invisible(group, receipt.real_topic(topic, group, h.topic_kind), h, invisible)
            )
            if resp.code != ResponseCode.SUCCESS:
                return s.ChangeInvisibleDurationResponse(status=codes.from_remoting(resp.code, resp.remark))
            # the broker's new checkpoint starts at this message's offset (5.x's ChangeInvisibleTimeProcessor)
            new = receipt.Handle(
                h.offset,
                int(resp.ext_fields["popTime"]),
                int(resp.ext_fields["invisibleTime"]),
                int(resp.ext_fields.get("reviveQid", h.revive_qid)),
                h.topic_kind,
                h.broker_name,
                h.queue_id,
                h.offset,
                h.commit_log_offset,
            )
            return s.ChangeInvisibleDurationResponse(status=codes.status(d.OK), receipt_handle=new.encode())
        except receipt.BadHandle as e:
            return s.ChangeInvisibleDurationResponse(status=codes.status(d.INVALID_RECEIPT_HANDLE, str(e)))
        except Exception as e:
            return s.ChangeInvisibleDurationResponse(status=failure_status(e))

    async def forward_to_dlq(self, request: s.ForwardMessageToDeadLetterQueueRequest, context):
        from rmqha.proxy.service import failure_status

        try:
            group, topic = request.group.name, request.topic.name
            h = receipt.decode(request.receipt_handle)
            addr = await self.proxy.master(topic, h.broker_name)
            resp = await self.proxy.call(
                addr,
                brokers.send_back_to_dlq(
                    group, h.commit_log_offset, topic, request.message_id, request.max_delivery_attempts - 1
                ),
            )
            if resp.code == ResponseCode.SUCCESS:
                await self.proxy.call(addr, brokers.ack(group, receipt.real_topic(topic, group, h.topic_kind), h))
            return s.ForwardMessageToDeadLetterQueueResponse(status=codes.from_remoting(resp.code, resp.remark))
        except receipt.BadHandle as e:
            return s.ForwardMessageToDeadLetterQueueResponse(status=codes.status(d.INVALID_RECEIPT_HANDLE, str(e)))
        except Exception as e:
            return s.ForwardMessageToDeadLetterQueueResponse(status=failure_status(e))

    async def _queue_call(self, mq: d.MessageQueue, cmd):
        addr = await self.proxy.master(mq.topic.name, mq.broker.name)
        return await self.proxy.call(addr, cmd)

    async def update_offset(self, request: s.UpdateOffsetRequest, context) -> s.UpdateOffsetResponse:
        from rmqha.proxy.service import failure_status

        try:
            mq = request.message_queue
            resp = await self._queue_call(
                mq, brokers.update_consumer_offset(request.group.name, mq.topic.name, mq.id, request.offset)
            )
            return s.UpdateOffsetResponse(status=codes.from_remoting(resp.code, resp.remark))
        except Exception as e:
            return s.UpdateOffsetResponse(status=failure_status(e))

    async def get_offset(self, request: s.GetOffsetRequest, context) -> s.GetOffsetResponse:
        from rmqha.proxy.service import failure_status

        try:
            mq = request.message_queue
            resp = await self._queue_call(mq, brokers.query_consumer_offset(request.group.name, mq.topic.name, mq.id))
            if resp.code == ResponseCode.QUERY_NOT_FOUND:
                return s.GetOffsetResponse(status=codes.status(d.OFFSET_NOT_FOUND, resp.remark))
            return s.GetOffsetResponse(
                status=codes.from_remoting(resp.code, resp.remark), offset=int(resp.ext_fields.get("offset", "0"))
            )
        except Exception as e:
            return s.GetOffsetResponse(status=failure_status(e))

    async def query_offset(self, request: s.QueryOffsetRequest, context) -> s.QueryOffsetResponse:
        from rmqha.proxy.service import failure_status

        try:
            mq = request.message_queue
            if request.query_offset_policy == d.BEGINNING:
                cmd = brokers.min_offset(mq.topic.name, mq.id)
            elif request.query_offset_policy == d.END:
                cmd = brokers.max_offset(mq.topic.name, mq.id)
            else:
                cmd = brokers.search_offset(mq.topic.name, mq.id, convert.millis(request.timestamp))
            resp = await self._queue_call(mq, cmd)
            return s.QueryOffsetResponse(
                status=codes.from_remoting(resp.code, resp.remark), offset=int(resp.ext_fields.get("offset", "0"))
            )
        except Exception as e:
            return s.QueryOffsetResponse(status=failure_status(e))


def _decode_all(body: bytes) -> list[record.Message]:
    out, pos = [], 0
    while pos < len(body):
        res = record.scan(body, pos, check_crc=False)
        if res.message is None:
            log.warning("undecodable popped message at %d: %s", pos, res.reason)
            break
        out.append(res.message)
        pos += res.size
    return out
