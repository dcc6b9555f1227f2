"""The gRPC servicer: each RPC reads its request, makes the remoting calls and answers (tests:
tests/integration/test_proxy_client5.py, test_proxy_outcomes.py). Conversions are in
convert.py, routes.py, receipt.py and brokers.py; the consumer RPCs in consume.py."""

from __future__ import annotations

import asyncio
import logging
import os
import socket

import grpc

from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.store import delay, record
from rmqha.proxy import brokers, codes, convert, routes, settings
from rmqha.proxy.remoting import RemotingClient, RemotingTimeout, RemotingUnreachable
from rmqha.proxy.state import TRANSACTION_TTL_S, State, Transaction
from rmqha.proxy.third_party.rocketmq_apis.v2 import definition_pb2 as d
from rmqha.proxy.third_party.rocketmq_apis.v2 import service_pb2 as s
from rmqha.proxy.third_party.rocketmq_apis.v2 import service_pb2_grpc as g

log = logging.getLogger("rmqha.proxy")


class Failed(Exception):
    """An RPC ends with this status (code, message)."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def client_id(context) -> str:
    for k, v in context.invocation_metadata() or ():
        if k == "x-mq-client-id":
            return v
    raise Failed(d.CLIENT_ID_REQUIRED, "x-mq-client-id is missing")


def failure_status(e: BaseException) -> d.Status:
    """ResponseBuilder.buildStatus(Throwable)."""
    if isinstance(e, Failed):
        return codes.status(e.code, str(e))
    if isinstance(e, convert.Invalid):
        return codes.status(e.code, str(e))
    if isinstance(e, RemotingTimeout):
        return codes.status(d.PROXY_TIMEOUT, str(e))
    if isinstance(e, RemotingUnreachable):
        return codes.status(d.INTERNAL_SERVER_ERROR, str(e))
    log.exception("internal error", exc_info=e)
    return codes.status(d.INTERNAL_SERVER_ERROR, f"{type(e).__name__}: {e}")


class Proxy:
    """The proxy's connection to the cluster: the name servers, the brokers, and what it remembers."""

    def __init__(
        self,
        namesrv: list[str],
        host_map: dict[str, str] | None = None,
        delay_levels: str = convert.DEFAULT_DELAY_LEVELS,
        min_invisible_ms: int = 10_000,
        request_timeout: float = 3.0,
    ):
        self.namesrv = namesrv
        # broker hosts as the name server has them -> as this process reaches them (in compose: the
        # brokers register 127.0.0.1, reached through their Toxiproxy link, toxiproxy:<port>)
        self.host_map = dict(host_map or {})
        self.levels_ms = delay.parse_delay_levels(delay_levels)
        self.min_invisible_ms = min_invisible_ms
        self.timeout = request_timeout
        self.state = State()
        self.remoting = RemotingClient(on_request=self._broker_request)
        self.instance_id = f"proxy@{socket.gethostname()}@{os.getpid()}"
        self._heartbeats: asyncio.Task | None = None

    # ---- routes and brokers -----------------------------------------------------------------------

    async def route(self, topic: str, fresh: bool = False) -> dict:
        if not fresh:
            hit = self.state.cached_route(topic)
            if hit is not None:
                return hit
        last: BaseException | None = None
        for addr in self.namesrv:
            try:
                resp = await self.remoting.invoke(addr, brokers.route_request(topic), self.timeout)
            except (RemotingTimeout, RemotingUnreachable) as e:
                last = e
                continue
            if resp.code == ResponseCode.TOPIC_NOT_EXIST:
                raise Failed(d.TOPIC_NOT_FOUND, f"topic {topic} not found: {resp.remark}")
            if resp.code != ResponseCode.SUCCESS:
                raise Failed(codes.from_remoting(resp.code, resp.remark).code, resp.remark or str(resp.code))
            route = routes.parse(resp.body)
            self.state.keep_route(topic, route)
            return route
        raise last if last is not None else Failed(d.INTERNAL_SERVER_ERROR, "no name server configured")

    async def master(self, topic: str, broker_name: str) -> str:
        addr = routes.master_address(await self.route(topic), broker_name)
        if addr is None:
            addr = routes.master_address(await self.route(topic, fresh=True), broker_name)
        if addr is None:
            raise Failed(
                d.HA_NOT_AVAILABLE if broker_name else d.BAD_REQUEST, f"broker {broker_name} has no master now"
            )
        return addr

    def reach(self, addr: str) -> str:
        host, _, port = addr.rpartition(":")
        return f"{self.host_map.get(host, host)}:{port}"

    async def call(self, addr: str, cmd: RemotingCommand, timeout: float | None = None) -> RemotingCommand:
        return await self.remoting.invoke(self.reach(addr), cmd, timeout or self.timeout)

    # ---- what brokers ask us ----------------------------------------------------------------------

    def _broker_request(self, address: str, cmd: RemotingCommand) -> RemotingCommand | None:
        if cmd.code == RequestCode.CHECK_TRANSACTION_STATE:
            self._transaction_check(address, cmd)
            return None
        if cmd.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
            return None
        return cmd.make_response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f"the proxy does not serve {cmd.code}")

    def _transaction_check(self, address: str, cmd: RemotingCommand) -> None:
        """A broker asks about a half message: one producer of its topic gets a
        RecoverOrphanedTransactionCommand on its Telemetry stream (5.x's ClusterTransactionService)."""
        res = record.scan(cmd.body, 0, check_crc=False)
        if res.message is None:
            log.warning("transaction check from %s with an undecodable message: %s", address, res.reason)
            return
        m = res.message
        topic = m.properties.get("REAL_TOPIC") or m.topic
        tx_id = cmd.ext_fields.get("transactionId") or m.properties.get("UNIQ_KEY") or ""
        broker_name = self._broker_name_of(address, topic)
        producers = self.state.producers_of(topic)
        if not producers or broker_name is None:
            log.info("transaction check for %s: no producer of %s connected", tx_id, topic)
            return
        self.state.add_transaction(
            tx_id,
            Transaction(
                broker_name,
                topic,
                int(cmd.ext_fields.get("tranStateTableOffset", m.queue_offset)),
                int(cmd.ext_fields.get("commitLogOffset", m.physical_offset)),
                cmd.ext_fields.get("msgId") or m.properties.get("UNIQ_KEY", ""),
                self.state.clock() + TRANSACTION_TTL_S,
            ),
        )
        m.topic = topic
        target = producers[self.state.next_index(len(producers))]
        target.outbox.put_nowait(self.state.recover_command(convert.stored_message(m), tx_id))

    def _broker_name_of(self, address: str, topic: str) -> str | None:
        hit = self.state.cached_route(topic) or (self.state.routes.get(topic) or (0, {}))[1]
        for bd in hit.get("brokerDatas") or []:
            if address in {self.reach(a) for a in (bd.get("brokerAddrs") or {}).values()}:
                return bd["brokerName"]
        return None

    # ---- the proxy's own heartbeat to the brokers -------------------------------------------------

    async def heartbeat_brokers(self) -> None:
        producers = sorted(
            {
                t.name
                for x in self.state.sessions.values()
                if x.settings is not None and x.settings.WhichOneof("pub_sub") == "publishing"
                for t in x.settings.publishing.topics
            }
        )
        consumers = sorted(
            {settings.group_of(x.settings) for x in self.state.sessions.values() if x.settings is not None} - {None}
        )
        masters = set()
        for topic in producers:
            try:
                route = await self.route(topic)
            except Exception:
                continue
            for bd in route.get("brokerDatas") or []:
                addr = routes.master_address(route, bd["brokerName"])
                if addr:
                    masters.add(addr)
        masters |= set(self.remoting.addresses()) - set(self.namesrv)
        for addr in masters:
            try:
                await self.call(addr, brokers.heartbeat(self.instance_id, producers, consumers))  # type: ignore[arg-type]
            except Exception as e:
                log.debug("heartbeat to %s: %s", addr, e)

    async def heartbeat_loop(self, period: float = 10.0) -> None:
        while True:
            await self.heartbeat_brokers()
            await asyncio.sleep(period)


class MessagingService(g.MessagingServiceServicer):
    def __init__(self, proxy: Proxy):
        self.proxy = proxy
        from rmqha.proxy.consume import Consume

        self.consume = Consume(proxy)

    # ---- route, heartbeat, telemetry, termination ---------------------------------------------------

    async def QueryRoute(self, request: s.QueryRouteRequest, context) -> s.QueryRouteResponse:
        try:
            route = await self.proxy.route(request.topic.name)
            queues = routes.message_queues(route, request.topic, request.endpoints)
            return s.QueryRouteResponse(status=codes.status(d.OK), message_queues=queues)
        except Exception as e:
            return s.QueryRouteResponse(status=failure_status(e))

    async def QueryAssignment(self, request: s.QueryAssignmentRequest, context) -> s.QueryAssignmentResponse:
        try:
            route = await self.proxy.route(request.topic.name)
            fifo = await self.consume.orderly(request.group.name, route)
            assignments = routes.assignments(route, request.topic, request.endpoints, fifo)
            if not assignments:
                return s.QueryAssignmentResponse(status=codes.status(d.FORBIDDEN, "no readable queue"))
            return s.QueryAssignmentResponse(status=codes.status(d.OK), assignments=assignments)
        except Exception as e:
            return s.QueryAssignmentResponse(status=failure_status(e))

    async def Heartbeat(self, request: s.HeartbeatRequest, context) -> s.HeartbeatResponse:
        try:
            self.proxy.state.session(client_id(context))
            return s.HeartbeatResponse(status=codes.status(d.OK))
        except Exception as e:
            return s.HeartbeatResponse(status=failure_status(e))

    async def NotifyClientTermination(self, request, context) -> s.NotifyClientTerminationResponse:
        try:
            cid = client_id(context)
            self.proxy.state.forget(cid)
            return s.NotifyClientTerminationResponse(status=codes.status(d.OK))
        except Exception as e:
            return s.NotifyClientTerminationResponse(status=failure_status(e))

    async def Telemetry(self, request_iterator, context):
        """Settings in, merged settings out; later the server's commands (transaction recovery) out."""
        try:
            cid = client_id(context)
        except Failed as e:
            yield s.TelemetryCommand(status=codes.status(e.code, str(e)))
            return
        sess = self.proxy.state.session(cid)
        sess.streams += 1
        reader = asyncio.ensure_future(self._read_telemetry(request_iterator, sess))
        try:
            while True:
                getter = asyncio.ensure_future(sess.outbox.get())
                done, _ = await asyncio.wait({getter, reader}, return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    yield getter.result()
                    continue
                getter.cancel()
                break
        finally:
            sess.streams -= 1
            reader.cancel()

    async def _read_telemetry(self, request_iterator, sess) -> None:
        async for cmd in request_iterator:
            which = cmd.WhichOneof("command")
            if which == "settings":
                reply = await self._merged_settings(cmd.settings)
                sess.settings = reply  # what the client runs with: its max attempts decide the DLQ
                sess.outbox.put_nowait(s.TelemetryCommand(status=codes.status(d.OK), settings=reply))
                asyncio.ensure_future(self.proxy.heartbeat_brokers())
            # thread stack traces and verify results: nothing asked them, nothing to do

    async def _merged_settings(self, client: d.Settings) -> d.Settings:
        if client.WhichOneof("pub_sub") == "publishing" or client.client_type == d.PRODUCER:
            return settings.producer(client)
        group = settings.group_of(client)
        retry_max, orderly = (
            await self.consume.group_policy(group) if group else (settings.DEFAULT_RETRY_MAX_TIMES, False)
        )
        return settings.consumer(client, retry_max, orderly)

    # ---- send and transactions ----------------------------------------------------------------------

    async def SendMessage(self, request: s.SendMessageRequest, context) -> s.SendMessageResponse:
        try:
            if not request.messages:
                raise Failed(d.MESSAGE_CORRUPTED, "no message to send")
            topic = request.messages[0].topic.name
            if any(m.topic.name != topic for m in request.messages):
                raise Failed(d.MESSAGE_CORRUPTED, "topic in message is not same")
            route = await self.proxy.route(topic)
            queues = routes.write_queues(route)
            if not queues:
                raise Failed(d.FORBIDDEN, f"topic {topic} has no writable queue")
            group = request.messages[0].system_properties.message_group if len(request.messages) == 1 else ""
            if group:
                broker_name, queue_id = queues[java_hash_bucket(group, len(queues))]
            else:
                broker_name, queue_id = queues[self.proxy.state.next_index(len(queues))]
            addr = await self.proxy.master(topic, broker_name)
            entries = []
            for m in request.messages:
                entries.append(await self._send_one(addr, broker_name, m, queue_id, context))
            return s.SendMessageResponse(status=overall(entries), entries=entries)
        except Exception as e:
            st = failure_status(e)
            return s.SendMessageResponse(status=st, entries=[s.SendResultEntry(status=st)])

    async def _send_one(self, addr: str, broker_name: str, m: d.Message, queue_id: int, context) -> s.SendResultEntry:
        cmd = convert.send_request(m, queue_id, convert.now_ms(), self.proxy.levels_ms, _peer_host(context))
        resp = await self.proxy.call(addr, cmd, timeout=remaining(context, self.proxy.timeout))
        st = codes.from_send(resp.code, resp.remark)
        if st.code != d.OK:
            return s.SendResultEntry(status=st)
        uniq = m.system_properties.message_id
        entry = s.SendResultEntry(status=st, message_id=uniq, offset=int(resp.ext_fields.get("queueOffset", "0")))
        if m.system_properties.message_type == d.TRANSACTION:
            tx_id = resp.ext_fields.get("transactionId") or uniq
            entry.transaction_id = tx_id
            _, phys = record.parse_offset_msg_id(resp.ext_fields["msgId"].split(",")[0])
            self.proxy.state.add_transaction(
                tx_id,
                Transaction(
                    broker_name, m.topic.name, entry.offset, phys, uniq, self.proxy.state.clock() + TRANSACTION_TTL_S
                ),
            )
        return entry

    async def EndTransaction(self, request: s.EndTransactionRequest, context) -> s.EndTransactionResponse:
        try:
            tx = self.proxy.state.take_transaction(request.transaction_id)
            if tx is None:
                raise Failed(d.INVALID_TRANSACTION_ID, f"transaction {request.transaction_id} is not known (expired?)")
            if request.resolution not in (d.COMMIT, d.ROLLBACK):
                return s.EndTransactionResponse(status=codes.status(d.OK))  # unknown: the check will ask again
            addr = await self.proxy.master(tx.topic, tx.broker_name)
            cmd = brokers.end_transaction(
                tx.topic,
                tx.queue_offset,
                tx.commit_log_offset,
                request.resolution == d.COMMIT,
                tx.message_id,
                request.transaction_id,
                request.source == d.SOURCE_SERVER_CHECK,
            )
            resp = await self.proxy.call(addr, cmd)
            return s.EndTransactionResponse(status=codes.from_remoting(resp.code, resp.remark))
        except Exception as e:
            return s.EndTransactionResponse(status=failure_status(e))

    # ---- consumers (consume.py) ----------------------------------------------------------------------

    async def ReceiveMessage(self, request, context):
        async for response in self.consume.receive(request, context):
            yield response

    async def AckMessage(self, request, context):
        return await self.consume.ack(request, context)

    async def ChangeInvisibleDuration(self, request, context):
        return await self.consume.change_invisible(request, context)

    async def ForwardMessageToDeadLetterQueue(self, request, context):
        return await self.consume.forward_to_dlq(request, context)

    async def UpdateOffset(self, request, context):
        return await self.consume.update_offset(request, context)

    async def GetOffset(self, request, context):
        return await self.consume.get_offset(request, context)

    async def QueryOffset(self, request, context):
        return await self.consume.query_offset(request, context)


def remaining(context, default: float) -> float:
    """The client's deadline less a reserve, as 5.x's proxy gives the broker ctx.getRemainingMs(): a
    SYNC_MASTER wait (syncFlushTimeout, 5 s) must be able to end in FLUSH_SLAVE_TIMEOUT, not PROXY_TIMEOUT."""
    left = context.time_remaining() if context is not None else None
    return default if left is None else max(0.1, left - 0.2)


def overall(entries: list[s.SendResultEntry]) -> d.Status:
    """SendMessageActivity: one code for all entries, MULTIPLE_RESULTS when they differ."""
    found = {e.status.code for e in entries}
    if len(found) > 1:
        return codes.status(d.MULTIPLE_RESULTS)
    if found:
        return codes.status(found.pop())
    return codes.status(d.INTERNAL_SERVER_ERROR, "send status is empty")


def java_hash_bucket(key: str, n: int) -> int:
    """The queue of a FIFO message group: String.hashCode modulo the writable queues (5.x uses Guava's
    consistentHash of the same hash; the property kept is one group, one queue while routes hold)."""
    h = record.java_string_hash(key)
    if h >= 1 << 31:
        h -= 1 << 32
    return abs(h) % n


def _peer_host(context) -> str:
    peer = context.peer() or ""
    # "ipv4:127.0.0.1:5555" -> "127.0.0.1:5555"
    return peer.split(":", 1)[1] if ":" in peer else peer


async def serve(listen: str, proxy: Proxy) -> grpc.aio.Server:
    server = grpc.aio.server()
    g.add_MessagingServiceServicer_to_server(MessagingService(proxy), server)
    server.add_insecure_port(listen)
    await server.start()
    return server
