"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320) — WIRE-FACTS §2.3, §4, §6.8.

* Code 10 carries the long header names; 310 and 320 the short ones a..n, mapped to the long ones.
  The C++ client inside PyPI rocketmq 0.4.4 (C++ 1.0.1) sends code 10; C++ 2.x sends 310.
* Checks, in the Java broker's order: a SLAVE refuses every send (SERVICE_NOT_AVAILABLE, "broker is
  a slave"); broker permission without WRITE -> NO_PERMISSION; a bad topic name or the reserved
  TBW102 -> SYSTEM_ERROR; unknown topic -> auto-created from defaultTopic (or %RETRY%<group> with
  one queue), else TOPIC_NOT_EXIST; queueId >= max(writeQueueNums, readQueueNums) -> SYSTEM_ERROR;
  a negative queueId picks a random writable queue; a half message (TRAN_MSG=true) -> NO_PERMISSION
  when rejectTransactionMessage is set; a transactional batch -> MESSAGE_ILLEGAL; a body over maxMessageSize ->
  MESSAGE_ILLEGAL.
* Stored properties: the client's, minus WAIT, plus CLUSTER=<brokerClusterName>; WAIT=false means
  "answer once the record is appended" (no flush or replica wait). The store computes BODYCRC.
* A %RETRY% message whose reconsumeTimes reached its maxReconsumeTimes (default 16) goes to
  %DLQ%<group> instead, as in RocketMQ's handleRetryAndDLQ.
* Batches. Our decision, which differs from the Java broker: code 320, or a batch flag of "1" or
  "true" on 10/310 (the C++ client sends "1", which Java's Boolean.parseBoolean reads as false and
  therefore stores the whole batch encoding as ONE message), is a REAL batch: the body (§6.8) is
  decoded and every item becomes its own record (own CRC, queue offset and physical offset) with
  the header's properties added to each item's (the item's own value wins). The reply's msgId is the
  items' offsetMsgIds joined with ",", queueOffset the first item's.
* Response: msgId (offsetMsgId), queueId, queueOffset, MSG_REGION "DefaultRegion", TRACE_ON "true",
  all strings; codes PUT_OK 0, FLUSH_DISK_TIMEOUT 10, SLAVE_NOT_AVAILABLE 11, FLUSH_SLAVE_TIMEOUT 12
  (all with msgId/queueId/queueOffset: the message is stored), MESSAGE_ILLEGAL and
  PROPERTIES_SIZE_EXCEEDED 13, SERVICE_NOT_AVAILABLE 14, DISK_FULL -> SYSTEM_ERROR 1 saying so.
"""

from __future__ import annotations

import functools
import logging
import random
import struct

from twisted.internet import defer

from rmqha.broker import fastpath
from rmqha.broker.remoting.codec import encode
from rmqha.broker.remoting.codes import FLAG_RESPONSE, PERM_WRITE, VERSION_V4_9_8, RequestCode, ResponseCode
from rmqha.broker.remoting.command import (
    DEFAULT_LANGUAGE,
    INT32,
    INT64,
    REQUIRED,
    HeaderFieldError,
    RemotingCommand,
    java_parse_int,
    lenient_parse_boolean,
    read_numbers,
)
from rmqha.broker.remoting.handlers import Processors, handles
from rmqha.broker.store import record
from rmqha.broker.store.message_store import PutResult, PutStatus
from rmqha.broker.transaction import messages as transaction

from rmqha.broker.managers.topics import (
    AUTO_CREATE_TOPIC_KEY,
    NOT_ALLOWED_SEND_TOPICS,
    RETRY_GROUP_TOPIC_PREFIX,
    dlq_topic,
    is_writeable,
    validate_topic,
)

log = logging.getLogger("rmqha.broker.send")

# SendMessageRequestHeaderV2's one-letter names (WIRE-FACTS §2.3).
V2_NAMES = {
    "a": "producerGroup",
    "b": "topic",
    "c": "defaultTopic",
    "d": "defaultTopicQueueNums",
    "e": "queueId",
    "f": "sysFlag",
    "g": "bornTimestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsumeTimes",
    "k": "unitMode",
    "l": "maxReconsumeTimes",
    "m": "batch",
    "n": "brokerName",
}

_LONG_NAMES = frozenset(V2_NAMES.values())
_V2_GET = V2_NAMES.get

PROPERTY_WAIT = "WAIT"
PROPERTY_DELAY = "DELAY"
PROPERTY_CLUSTER = "CLUSTER"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
DEFAULT_MAX_RECONSUME_TIMES = 16
MSG_REGION = "DefaultRegion"

_BATCH_ITEM_HEAD = struct.Struct(">iiiii")  # TOTALSIZE, MAGIC, BODYCRC, FLAG, BODYLEN


class BatchFormatError(ValueError):
    pass


def decode_batch(body: bytes, max_items: int | None = None) -> list[tuple[int, bytes, dict[str, str]]]:
    """Split a batch body (WIRE-FACTS §6.8) into (flag, body, properties) items.

    More than ``max_items`` items is a BatchFormatError found before the rest is parsed.
    """
    items, pos, n = [], 0, len(body)
    while pos < n:
        if max_items is not None and len(items) >= max_items:
            raise BatchFormatError(f"more than maxBatchMessages={max_items} messages in one batch")
        if pos + _BATCH_ITEM_HEAD.size > n:
            raise BatchFormatError(f"batch item at byte {pos} is truncated")
        total, _magic, _crc, flag, body_len = _BATCH_ITEM_HEAD.unpack_from(body, pos)
        p = pos + _BATCH_ITEM_HEAD.size
        if body_len < 0 or p + body_len + 2 > n:
            raise BatchFormatError(f"batch item at byte {pos}: body length {body_len} does not fit")
        item_body = bytes(body[p : p + body_len])
        p += body_len
        (props_len,) = struct.unpack_from(">h", body, p)
        p += 2
        if props_len < 0 or p + props_len > n:
            raise BatchFormatError(f"batch item at byte {pos}: properties length {props_len} does not fit")
        props = record.decode_properties(bytes(body[p : p + props_len]))
        p += props_len
        if total != p - pos:
            raise BatchFormatError(f"batch item at byte {pos}: TOTALSIZE {total} but {p - pos} bytes parsed")
        items.append((flag, item_body, props))
        pos = p
    if not items:
        raise BatchFormatError("empty batch")
    return items


def header_fields(req: RemotingCommand) -> dict[str, str]:
    """The request's header fields under their long names, whichever code it came with."""
    ext = req.ext_fields
    if req.code == RequestCode.SEND_MESSAGE:
        return ext
    if _LONG_NAMES.isdisjoint(ext):
        # The usual case: short names only, renamed in one pass.
        return {_V2_GET(k, k): v for k, v in ext.items()}
    fields = dict(ext)
    for short, long in V2_NAMES.items():
        if short in fields and long not in fields:
            fields[long] = fields.pop(short)
    return fields


def normalize_header(req: RemotingCommand) -> RemotingCommand:
    """The request with long header names, whichever code it came with."""
    if req.code == RequestCode.SEND_MESSAGE:
        return req
    return RemotingCommand(
        code=req.code,
        language=req.language,
        version=req.version,
        opaque=req.opaque,
        flag=req.flag,
        remark=req.remark,
        ext_fields=header_fields(req),
        body=req.body,
        serialize_type=req.serialize_type,
    )


# The numeric header fields a send reads: name, default (REQUIRED: none), 32 or 64 bits.
_NUMBERS = (
    ("defaultTopicQueueNums", 4, INT32),
    ("queueId", REQUIRED, INT32),
    ("sysFlag", 0, INT32),
    ("bornTimestamp", 0, INT64),
    ("flag", 0, INT32),
    ("reconsumeTimes", 0, INT32),
    ("maxReconsumeTimes", None, INT32),
)
_SHORT_OF = {long: short for short, long in V2_NAMES.items()}


def _names(short: bool) -> tuple:
    """The keys a send reads its header with: topic, defaultTopic, properties, batch, then the numbers'
    specs for read_numbers (key, default, bounds, long name for errors)."""
    key = _SHORT_OF.get if short else (lambda name: name)
    return (
        key("topic"),
        key("defaultTopic"),
        key("properties"),
        key("batch"),
        tuple((key(name), default, bounds, name) for name, default, bounds in _NUMBERS),
    )


_LONG_KEYS, _SHORT_KEYS = _names(False), _names(True)


def header_view(req: RemotingCommand) -> tuple[dict[str, str], tuple]:
    """The request's header fields and the keys to read them by: a V2 header with short names only
    (the usual case) is read as it is, under the short names; anything else under the long ones."""
    ext = req.ext_fields
    if req.code != RequestCode.SEND_MESSAGE and _LONG_NAMES.isdisjoint(ext):
        return ext, _SHORT_KEYS
    return header_fields(req), _LONG_KEYS


class _Refused(Exception):
    """A step of SendProcessor._process refusing the request; `response` is the answer."""

    def __init__(self, response: RemotingCommand):
        super().__init__(response)
        self.response = response


class SendProcessor(Processors):
    def __init__(self, config, controller, topics, random_choice=random.randrange):
        self.config = config
        self.controller = controller
        self.topics = topics
        self.randrange = random_choice
        reg = controller.metrics
        self.responses = reg.counter("send_responses_total", "SEND_MESSAGE replies by response code")
        self.messages = reg.counter("send_messages_stored_total", "messages stored by the send path")
        self.fast_messages = reg.counter(
            "send_fastpath_messages_total", "messages stored through the compiled fast path (rmqha/broker/fastpath)"
        )
        self._plain_names: dict[str, bool] = {}  # topic -> whether its name lets a send take the fast path

    def register(self, registry) -> None:
        super().register(registry)
        # runs of plain sends the compiled scan reads in one go (process_sends), beside process
        if self.config.sendFastPath and fastpath.available():
            registry.fast_sends = (fastpath.native.scan_sends, self.process_sends, self.config.brokerClusterName)

    # -- the fast path: runs of plain sends from the compiled scan ----------------------------------
    def process_sends(self, proto, buf, sends: list) -> None:
        """Serve sends read by fastpath.native.scan_sends, in order: the plain ones (see _plain_topic)
        stored together and answered with one write, any other through the Python path (process), as
        if it had come alone. The same checks, records and replies as process(); tests/unit/fastpath
        compares them."""
        c = self.config
        if (
            not (c.is_master and is_writeable(c.brokerPermission))
            or self.controller.seams.active
            or self.controller.writes_held
        ):
            for s in sends:  # refusals, and what installed seams do, are the Python path's
                proto.handle_frame(buf, s[fastpath.START], s[fastpath.END])
            return
        attrs = proto.context.attributes
        born = attrs.get(_BORN_HOST)
        if born is None:
            born = attrs[_BORN_HOST] = record.encode_host(_host_of(proto.context.peer_address))
        max_body = c.maxMessageSize
        plain = self._plain_topic
        run: list = []
        for s in sends:
            tc = plain(s[fastpath.TOPIC])
            qid = s[fastpath.QUEUE_ID]
            if (
                tc is None
                or not 0 <= qid < max(tc.write_queue_nums, tc.read_queue_nums)
                or s[fastpath.SYS_FLAG] & record.TRANSACTION_MASK != record.TRANSACTION_NOT_TYPE
                or s[fastpath.END] - s[fastpath.BODY] > max_body
            ):
                if run:
                    self._store_run(proto, buf, run, born)
                    run = []
                proto.handle_frame(buf, s[fastpath.START], s[fastpath.END])
                continue
            run.append(s)
        if run:
            self._store_run(proto, buf, run, born)

    def _plain_topic(self, topic: str):
        """The topic's config when a send to it takes the fast path: an existing topic with the write
        permission whose name process() accepts as it is (no auto-create, retry or DLQ handling)."""
        ok = self._plain_names.get(topic)
        if ok is None:
            if len(self._plain_names) > 4096:
                self._plain_names.clear()
            ok = self._plain_names[topic] = (
                validate_topic(topic) is None
                and topic != AUTO_CREATE_TOPIC_KEY
                and topic not in NOT_ALLOWED_SEND_TOPICS
                and not topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
            )
        if not ok:
            return None
        tc = self.topics.get(topic)
        if tc is None or not tc.perm & PERM_WRITE:
            return None
        return tc

    def _store_run(self, proto, buf, run: list, born: bytes) -> None:
        try:
            stored, outcome = self.controller.put_sends(buf, run, born)
        except Exception:
            # A full disk or a failed write does not get here (put_sends returns what it stored); anything
            # else may come after some sends were stored, so none of them is retried here (that could
            # store one twice): each is answered SYSTEM_ERROR.
            log.exception("storing a run of %d sends failed", len(run))
            self._system_errors(proto, run, "the broker failed to store request code 310; see the broker's log")
            return
        n = len(stored)
        if n:
            self.messages.inc(n)
            self.fast_messages.inc(n)
            host = self._host_hex()
            if outcome is None or isinstance(outcome, PutResult):
                self._answer(proto, run, stored, host, outcome)
            else:
                # Those that did not ask to wait are answered now, as process() would.
                self._answer(proto, run, stored, host, None, waiting=False)
                outcome.addCallback(lambda res: self._answer(proto, run, stored, host, res, waiting=True))
                outcome.addErrback(self._answer_failed, proto, run, stored)
        for s in run[n:]:  # not stored: the Python path stores them or says why not
            proto.handle_frame(buf, s[fastpath.START], s[fastpath.END])

    def _answer(self, proto, run, stored, host: str, res: PutResult | None, waiting: bool | None = None) -> None:
        """The replies of the stored sends of a run (those whose WAIT is `waiting`, or all): SUCCESS for
        those that did not wait, res's status for those that did (what process() answers for each)."""
        parts = []
        ok = 0
        for s, (offset, _size, qo) in zip(run, stored):
            wait = s[fastpath.WAIT]
            if s[fastpath.ONEWAY] or (waiting is not None and wait != waiting):
                continue  # a oneway send is stored and not answered, as process() does
            st = res.status if wait and res is not None else PutStatus.PUT_OK
            if st is PutStatus.PUT_OK:
                parts.append(success_reply(s[fastpath.OPAQUE], host, offset, s[fastpath.QUEUE_ID], qo))
                ok += 1
                continue
            code = st.response_code
            remark = f"{st.value}: {res.remark}" if res.remark else st.value
            self.responses.inc(code=int(code))
            parts.append(
                encode(
                    RemotingCommand(
                        code=int(code),
                        opaque=s[fastpath.OPAQUE],
                        flag=FLAG_RESPONSE,
                        remark=remark,
                        ext_fields=_stored_fields(host + format(offset, "016X"), s[fastpath.QUEUE_ID], qo),
                    )
                )
            )
        if ok:
            self.responses.inc(ok, code=int(ResponseCode.SUCCESS))
        if parts:
            proto.write_replies(b"".join(parts))

    def _answer_failed(self, failure, proto, run, stored) -> None:
        """Cannot happen (the waits turn their failures into statuses); answered as process() would."""
        log.error("the waits of %d stored sends failed:\n%s", len(stored), failure.getTraceback())
        self._system_errors(
            proto,
            [s for s in run[: len(stored)] if s[fastpath.WAIT]],
            "the broker failed to process request code 310 (wait failed); see the broker's log",
        )

    def _system_errors(self, proto, sends, text: str) -> None:
        """SYSTEM_ERROR with `text` to each of these sends that expects a reply (not oneway)."""
        code = int(ResponseCode.SYSTEM_ERROR)
        answered = [s for s in sends if not s[fastpath.ONEWAY]]
        self.responses.inc(len(answered), code=code)
        proto.write_replies(
            b"".join(
                encode(RemotingCommand(code=code, opaque=s[fastpath.OPAQUE], flag=FLAG_RESPONSE, remark=text))
                for s in answered
            )
        )

    def _host_hex(self) -> str:
        return record.offset_msg_id(self.controller.store.store_host, 0)[:-16]

    @handles(RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)
    def process(self, request: RemotingCommand, ctx) -> defer.Deferred | RemotingCommand:
        """The response at once when nothing is waited for (ASYNC_MASTER), else a Deferred."""
        try:
            result = self._process(request, ctx)
        except Exception:
            return defer.fail()
        if isinstance(result, defer.Deferred):
            return result  # _store's callback counts it
        return self._count(result)

    def _count(self, response):
        if isinstance(response, RemotingCommand):
            self.responses.inc(code=int(response.code))
        return response

    def _process(self, request: RemotingCommand, ctx):
        c = self.config
        if not c.is_master:
            return request.make_response(
                ResponseCode.SERVICE_NOT_AVAILABLE,
                f"broker is a slave ({c.brokerName} brokerId={c.brokerId}); send to its master",
            )
        req = request  # answered with its opaque and serialize type
        try:
            topic, default_topic, numbers, batch, props = self._read_header(req)
            (default_queue_nums, queue_id, sys_flag, born_ts, flag, reconsume_times, max_reconsume) = numbers
            queue_id, half = self._check_message(
                req, ctx, topic, default_topic, default_queue_nums, queue_id, sys_flag, batch, props
            )
            topic, queue_id = self._retry_to_dlq(req, topic, queue_id, props, reconsume_times, max_reconsume)
            msgs, wait_store_ok = self._build_messages(
                req, ctx, topic, queue_id, sys_flag, born_ts, flag, reconsume_times, batch, half, props
            )
        except _Refused as r:
            return r.response
        return self._store(req, msgs, wait_store_ok, queue_id)

    def _read_header(self, req: RemotingCommand) -> tuple:
        """(topic, default topic, the numeric fields, batch, properties) from the request's header."""
        fields, (k_topic, k_default_topic, k_properties, k_batch, k_numbers) = header_view(req)
        try:
            topic = fields.get(k_topic)
            if topic is None:
                raise HeaderFieldError("the custom field <topic> is null")
            default_topic = fields.get(k_default_topic, AUTO_CREATE_TOPIC_KEY)
            numbers = read_numbers(fields, k_numbers)
        except HeaderFieldError as e:
            raise _Refused(req.make_response(ResponseCode.SYSTEM_ERROR, str(e))) from None
        batch = req.code == RequestCode.SEND_BATCH_MESSAGE or lenient_parse_boolean(fields.get(k_batch, ""))
        props = record.decode_properties(fields.get(k_properties, ""))
        return topic, default_topic, numbers, batch, props

    def _check_message(
        self, req, ctx, topic, default_topic, default_queue_nums, queue_id, sys_flag, batch, props
    ) -> tuple[int, bool]:
        """4.9's msgCheck: the broker and topic take writes (the topic created if it may be), the queue
        exists, a transaction is allowed; (the queue id, a random one for -1; whether it is a half)."""
        c = self.config
        if not is_writeable(c.brokerPermission):
            raise _Refused(
                req.make_response(ResponseCode.NO_PERMISSION, f"the broker[{c.broker_ip}] sending message is forbidden")
            )
        why = validate_topic(topic)
        if why:
            raise _Refused(req.make_response(ResponseCode.SYSTEM_ERROR, why))
        if topic == AUTO_CREATE_TOPIC_KEY:
            raise _Refused(
                req.make_response(
                    ResponseCode.SYSTEM_ERROR, f"the topic[{topic}] is conflict with system reserved words."
                )
            )
        if topic in NOT_ALLOWED_SEND_TOPICS:
            raise _Refused(
                req.make_response(ResponseCode.NO_PERMISSION, f"Sending message to topic[{topic}] is forbidden.")
            )
        tc = self._writable_topic(req, topic, default_topic, default_queue_nums)
        limit = max(tc.write_queue_nums, tc.read_queue_nums)
        if queue_id >= limit:
            raise _Refused(
                req.make_response(
                    ResponseCode.SYSTEM_ERROR,
                    f"request queueId[{queue_id}] is illegal, topic:[{topic}] "
                    f"topicConfig.writeQueueNums:[{tc.write_queue_nums}] "
                    f"readQueueNums:[{tc.read_queue_nums}] producer:[{ctx.peer_address}]",
                )
            )
        if queue_id < 0:
            queue_id = self.randrange(max(1, tc.write_queue_nums))
        half = transaction.is_half(props)  # the reference's test: Boolean.parseBoolean(TRAN_MSG)
        if half and c.rejectTransactionMessage:
            raise _Refused(
                req.make_response(
                    ResponseCode.NO_PERMISSION, f"the broker[{c.broker_ip}] sending transaction message is forbidden"
                )
            )
        if batch and (half or sys_flag & record.TRANSACTION_MASK != record.TRANSACTION_NOT_TYPE):
            # CommitLog.putMessages refuses a batch with a transaction type.
            raise _Refused(
                req.make_response(ResponseCode.MESSAGE_ILLEGAL, "a batch cannot hold transactional messages")
            )
        return queue_id, half

    def _writable_topic(self, req, topic, default_topic, default_queue_nums):
        """The topic's config, created on a first send when it may be; refused if it is not writable."""
        tc = self.topics.get(topic)
        if tc is None:
            if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                tc = self.topics.create_in_send_back(topic)
            else:
                tc = self.topics.create_in_send(topic, default_topic, default_queue_nums)
        if tc is None:
            raise _Refused(
                req.make_response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
            )
        if not tc.perm & PERM_WRITE:
            raise _Refused(
                req.make_response(ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden")
            )
        return tc

    def _retry_to_dlq(self, req, topic, queue_id, props, reconsume_times, max_reconsume) -> tuple[str, int]:
        """A retry message past its group's max reconsume times goes to the group's DLQ, queue 0, undelayed;
        (the topic, the queue id) it is stored in."""
        if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return topic, queue_id
        limit_times = max_reconsume
        if limit_times is None:
            try:
                limit_times = java_parse_int(props.get(PROPERTY_MAX_RECONSUME_TIMES, str(DEFAULT_MAX_RECONSUME_TIMES)))
            except ValueError as e:
                raise _Refused(
                    req.make_response(ResponseCode.MESSAGE_ILLEGAL, f"the property {PROPERTY_MAX_RECONSUME_TIMES} {e}")
                ) from None
        if reconsume_times >= limit_times:
            topic = dlq_topic(topic[len(RETRY_GROUP_TOPIC_PREFIX) :])
            self.topics.create_in_send_back(topic, 1, 6)  # DLQ: read and write, as 4.9.8 creates it
            queue_id = 0
            props.pop(PROPERTY_DELAY, None)  # the reference's msg.setDelayTimeLevel(0)
        return topic, queue_id

    def _build_messages(
        self, req, ctx, topic, queue_id, sys_flag, born_ts, flag, reconsume_times, batch, half, props
    ) -> tuple[list, bool]:
        """The record(s) to store (a batch's items, or a transaction's half) and whether the producer waits
        for the store (PROPERTY_WAIT)."""
        c = self.config
        wait = props.pop(PROPERTY_WAIT, None)
        wait_store_ok = wait is None or wait.lower() == "true"
        props[PROPERTY_CLUSTER] = c.brokerClusterName
        born_host = _host_of(ctx.peer_address)
        items = self._batch_items(req, props) if batch else [(flag, req.body, {})]
        msgs = []
        for item_flag, body, item_props in items:
            if len(body) > c.maxMessageSize:
                raise _Refused(
                    req.make_response(
                        ResponseCode.MESSAGE_ILLEGAL,
                        f"message body size {len(body)} exceeds maxMessageSize {c.maxMessageSize}",
                    )
                )
            if batch:
                merged = dict(item_props)
                merged.pop(PROPERTY_WAIT, None)
                for k, v in props.items():
                    merged.setdefault(k, v)
                merged[PROPERTY_CLUSTER] = c.brokerClusterName
            else:
                merged = props  # one message: the header's properties are its own
            msgs.append(
                record.Message(
                    topic=topic,
                    body=body,
                    queue_id=queue_id,
                    flag=item_flag,
                    sys_flag=sys_flag & ~(record.FLAG_BORNHOST_V6 | record.FLAG_STOREHOST_V6),
                    born_timestamp=born_ts,
                    born_host=born_host,
                    reconsume_times=reconsume_times,
                    properties=merged,
                )
            )
        if half:  # stored in RMQ_SYS_TRANS_HALF_TOPIC; the reply names the half (rmqha/broker/transaction)
            msgs = [transaction.to_half(msgs[0], wait)]
        return msgs, wait_store_ok

    def _batch_items(self, req, props) -> list:
        """A batch body's items, refused when delayed, too large or malformed."""
        c = self.config
        if props.get(PROPERTY_DELAY, "0") not in ("", "0"):
            # CommitLog.putMessages: a batch cannot be delayed.
            raise _Refused(req.make_response(ResponseCode.MESSAGE_ILLEGAL, "a batch cannot have a delay level"))
        # The reference encodes a whole batch into one maxMessageSize buffer, so the batch as a
        # whole is bounded as one message is; the item count bounds the reactor's work.
        if len(req.body) > c.maxMessageSize:
            raise _Refused(
                req.make_response(
                    ResponseCode.MESSAGE_ILLEGAL,
                    f"batch body size {len(req.body)} exceeds maxMessageSize {c.maxMessageSize}",
                )
            )
        try:
            return decode_batch(req.body, c.maxBatchMessages)
        except (BatchFormatError, struct.error) as e:
            raise _Refused(req.make_response(ResponseCode.MESSAGE_ILLEGAL, f"bad batch body: {e}")) from None

    def _store(self, req, msgs, wait_store_ok, queue_id):
        results: list[PutResult] = []
        if len(msgs) > 1 and self.config.enableDLegerCommitLog:  # one DLedger entry each, one quorum wait

            def respond(rs, topic=msgs[0].topic):
                return self._respond(req, rs[:-1], rs[-1], queue_id, topic)

            rs = self.controller.store.put_batch_async(msgs)
            return respond(rs) if isinstance(rs, list) else rs.addCallback(lambda rs: self._count(respond(rs)))
        put = self.controller.put
        for i, m in enumerate(msgs):
            last = i == len(msgs) - 1
            res = put(m, wait_store_ok=wait_store_ok if last else False)
            if not last:
                if not isinstance(res, PutResult):
                    raise RuntimeError(f"put_message without a wait did not answer at once: {res!r}")
                if res.status != PutStatus.PUT_OK:
                    return self._respond(req, results, res, queue_id, m.topic)
                results.append(res)
            elif isinstance(res, PutResult):
                # Nothing to wait for: answer without a Deferred.
                return self._respond(req, results, res, queue_id, m.topic)
            else:
                return res.addCallback(
                    lambda res, topic=m.topic: self._count(self._respond(req, results, res, queue_id, topic))
                )

    def _respond(
        self, req, earlier: list[PutResult], res: PutResult, queue_id: int, topic: str = ""
    ) -> RemotingCommand:
        status = res.status
        if type(status) is not PutStatus:
            status = PutStatus(status)  # its response code and whether it is stored are in its table
        code = status.response_code
        if status.stored:
            stored = earlier + [res] if earlier else [res]
            self.messages.inc(len(stored))
            # 4.9's BrokerStatsManager: one addition per request, of its messages and bytes
            self.controller.stats.table.on_put(topic, len(stored), sum(r.wrote_bytes for r in stored))
            remark = (
                None
                if code == ResponseCode.SUCCESS
                else (f"{status.value}: {res.remark}" if res.remark else status.value)
            )
            response = req.make_response(code, remark)
            response.ext_fields = _stored_fields(  # strings already, as the C++ client needs them
                ",".join([r.msg_id for r in stored]) if earlier else res.msg_id, queue_id, stored[0].queue_offset
            )
            return response
        if earlier:
            log.error("batch stopped after %d stored items: %s %s", len(earlier), status, res.remark)
        if status == PutStatus.DISK_FULL:
            remark = f"the broker's disk is full, nothing stored: {res.remark}"
        elif status == PutStatus.SERVICE_NOT_AVAILABLE:
            remark = f"service not available now: {res.remark}"
        elif status == PutStatus.OS_PAGECACHE_BUSY:  # exactly 4.9.8's SendMessageProcessor remark
            remark = "[PC_SYNCHRONIZED]broker busy, start flow control for a while"
        else:
            remark = f"{status.value}: {res.remark}" if res.remark else status.value
        return req.make_response(code, remark)


def _stored_fields(msg_id: str, queue_id: int, queue_offset: int) -> dict[str, str]:
    """The header of a reply for a stored message."""
    return {
        "msgId": msg_id,
        "queueId": str(queue_id),
        "queueOffset": str(queue_offset),
        "MSG_REGION": MSG_REGION,
        "TRACE_ON": "true",
    }


_BORN_HOST = "send.born_host"  # the connection's packed address, for the fast path's records
_REPLY_HEAD = struct.Struct(">II")
_SUCCESS_HEADER = (
    '{"code":0,"extFields":{"MSG_REGION":"%s","TRACE_ON":"true","msgId":"%%s%%016X",'
    '"queueId":"%%d","queueOffset":"%%d"},"flag":%d,"language":"%s","opaque":%%d,'
    '"serializeTypeCurrentRPC":"JSON","version":%d}' % (MSG_REGION, FLAG_RESPONSE, DEFAULT_LANGUAGE, VERSION_V4_9_8)
)


def success_reply(opaque: int, host_hex: str, offset: int, queue_id: int, queue_offset: int) -> bytes:
    """The SUCCESS reply to a stored send, as encode(request.make_response(...)) writes it for
    _respond's fields (the same bytes: tests/unit/fastpath), without building the command."""
    header = (_SUCCESS_HEADER % (host_hex, offset, queue_id, queue_offset, opaque)).encode()
    return _REPLY_HEAD.pack(4 + len(header), len(header)) + header


@functools.lru_cache(maxsize=4096)
def _host_of(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    try:
        return record.host_of(f"{host}:{int(port)}")
    except (ValueError, OSError):
        return ("127.0.0.1", 0)
