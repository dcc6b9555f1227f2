"""A slave's copy of its master's topic configs, consumer offsets and delay offsets (RocketMQ's
SlaveSynchronize).

Every `interval` seconds (10 s, as the Java broker), and at once when the master's address is first
learned or changes, the slave asks its master for GET_ALL_TOPIC_CONFIG, GET_ALL_CONSUMER_OFFSET,
GET_ALL_DELAY_OFFSET and GET_ALL_SUBSCRIPTIONGROUP_CONFIG and replaces its own tables with the answers (the offset files are then written). When the master
cannot be reached the slave keeps what it has, so consumers reading from it go on.
"""

from __future__ import annotations

import logging

from twisted.internet import defer

from rmqha.broker.namesrv.register_body import RegisterBrokerBody
from rmqha.broker.remoting import json_body
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.remoting.protocol import RemotingClient
from rmqha.broker.support.beans import bean_json
from rmqha.broker.support.supervision import PeriodicService

log = logging.getLogger("rmqha.broker.slavesync")

SYNC_INTERVAL_S = 10.0
TIMEOUT_S = 3.0


class SlaveSynchronize:
    def __init__(
        self,
        topics,
        offsets,
        reactor,
        clock=None,
        master_addr: str | None = None,
        interval: float = SYNC_INTERVAL_S,
        client: RemotingClient | None = None,
        metrics=None,
        schedule=None,
        credentials: tuple[str, str] | None = None,
        groups=None,
    ):
        self.groups = groups  # the SubscriptionGroupManager (GET_ALL_SUBSCRIPTIONGROUP_CONFIG), when given
        self.schedule = schedule  # the delay offsets (GET_ALL_DELAY_OFFSET), when given
        self.credentials = credentials  # (accessKey, secretKey): aclClientAccessKey/SecretKey
        self.topics = topics
        self.offsets = offsets
        self.clock = clock or reactor
        self.client = client or RemotingClient(reactor, self.clock)
        self.master_addr = master_addr
        self.interval = interval
        self.syncs = 0
        self.failures = 0
        self.last_error: str | None = None
        # A sync that fails (master unreachable, an error answer, a body that does not apply) is this
        # class's business: counted in `failures`, logged once per new reason, the slave keeps its copy.
        # The supervisor sees what escapes that (an exception in the bookkeeping itself).
        self._loop = PeriodicService("slave_sync", self.sync_all, interval, self.clock, metrics, logger=log)
        self._running: defer.Deferred | None = None

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()
        self.client.close()

    def set_master_address(self, addr: str | None) -> None:
        if addr == self.master_addr:
            return
        self.master_addr = addr
        if addr:
            self._loop.trigger()

    def sync_all(self) -> defer.Deferred:
        if not self.master_addr:
            return defer.succeed(None)
        if self._running is not None:
            return self._running  # one sync at a time
        addr = self.master_addr
        d = self._sync_topics(addr)
        d.addCallback(lambda _: self._sync_offsets(addr))
        if self.schedule is not None:
            d.addCallback(lambda _: self._sync_delay_offsets(addr))
        if self.groups is not None:
            d.addCallback(lambda _: self._sync_subscription_groups(addr))
        d.addCallbacks(self._ok, self._failed, errbackArgs=(addr,))

        finished_now = []

        def finished(result):
            self._running = None
            finished_now.append(True)
            return result

        d.addBoth(finished)
        if not finished_now:
            self._running = d
        return d

    def _call(self, addr: str, code: int) -> defer.Deferred:
        req = RemotingCommand.request(code)
        if self.credentials is not None:  # a master with aclEnable refuses unsigned requests
            from rmqha.broker.acl.rules import sign_request

            sign_request(req, *self.credentials)
        d = self.client.invoke(addr, req, TIMEOUT_S)

        def check(resp: RemotingCommand):
            if resp.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"request {code} answered {resp.code} {resp.remark}")
            return resp.body

        return d.addCallback(check)

    def _sync_topics(self, addr: str) -> defer.Deferred:
        # 4.9.8 fetches this one from the master's VIP channel, listenPort - 2 (BrokerOuterAPI.getAllTopicConfig:
        # brokerVIPChannel(true, addr), fixed, not the client's vipChannelEnabled, which defaults to false in
        # 4.9.8), and every other table from listenPort. We use listenPort for all: our master and a 4.9
        # master both serve it on either port, and the master address here may be a proxy of that one port
        # (slaveSyncMasterAddress). A 4.9 slave of our master dials listenPort - 2: rmqha/broker/server.py listens there.
        def apply(body: bytes):
            wrapper = json_body.loads(body)
            parsed = RegisterBrokerBody.from_wrapper_json(wrapper)
            if self.topics.replace_all(parsed.topic_configs, parsed.data_version):
                log.info("topic configs synced from master %s: %d topics", addr, len(parsed.topic_configs))

        return self._call(addr, RequestCode.GET_ALL_TOPIC_CONFIG).addCallback(apply)

    def _sync_offsets(self, addr: str) -> defer.Deferred:
        def apply(body: bytes):
            obj = json_body.loads(body)
            self.offsets.replace_all(obj.get("offsetTable") or {})
            self.offsets.persist_if_dirty()

        return self._call(addr, RequestCode.GET_ALL_CONSUMER_OFFSET).addCallback(apply)

    def _sync_delay_offsets(self, addr: str) -> defer.Deferred:
        def apply(body: bytes):
            obj = json_body.loads(body)
            self.schedule.replace_all(self.schedule.parse_table(obj.get("offsetTable") or {}))

        return self._call(addr, RequestCode.GET_ALL_DELAY_OFFSET).addCallback(apply)

    def _sync_subscription_groups(self, addr: str) -> defer.Deferred:
        # 4.9's syncSubscriptionGroupConfig: the master's wrapper replaces ours when its data version differs.
        def apply(body: bytes):
            obj = json_body.loads(body)
            if self.groups.replace_all(obj.get("subscriptionGroupTable") or {}, obj.get("dataVersion") or {}):
                log.info("subscription groups synced from master %s: %d groups", addr, len(self.groups.table))

        return self._call(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG).addCallback(apply)

    def _ok(self, _):
        self.syncs += 1
        if self.last_error is not None:
            log.info("slave sync from master %s works again", self.master_addr)
        self.last_error = None

    def _failed(self, failure, addr: str):
        self.failures += 1
        why = failure.getErrorMessage()
        if why != self.last_error:
            log.warning("slave sync from master %s failed: %s (keeping our copy)", addr, why)
        self.last_error = why

    def status(self) -> dict:
        return bean_json(self, "master_addr syncs failures last_error")
