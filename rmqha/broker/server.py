"""BrokerServer: the whole broker process.

The controller (store, HA role, disk flushing, metrics endpoint), the topic config and consumer
offset managers, the client-facing remoting server on listenPort with every request processor,
registration with the name servers, and (on a slave) the copy of the master's topics and offsets.

start(): load config/topics.json and config/consumerOffset.json, start the controller, install the
processors, listen, register with the name servers, start the slave synchronizer.
stop(): the reverse: unregister, stop listening and close client connections (held long polls are
answered first), write consumer offsets, stop the controller.
"""

from __future__ import annotations

import logging

from twisted.internet import defer

from .controller import BrokerController
from .support.seams import Seams
from rmqha.broker.observability.exporter import ExporterMetrics
from .processors.acl_admin import AclAdminProcessors
from .processors.admin import AdminProcessors
from .processors.broker_config import BrokerConfigProcessors
from .processors.broker_stats import BrokerStatsProcessor
from .processors.client_calls import ClientCallProcessors
from .processors.client_manage import ClientManageProcessors
from rmqha.broker.managers.clients import ClientManager
from .processors.producers import ProducerProcessors
from rmqha.broker.managers.consumer_offsets import ConsumerOffsetManager
from rmqha.broker.processors.consumer_offsets import ConsumerOffsetProcessors
from .processors.end_transaction import EndTransactionProcessor
from .processors.ha_status import HAStatusProcessor
from .processors.offset_queries import OffsetQueryProcessors
from .processors.pull import PullProcessor
from .processors.query_message import QueryMessageProcessor
from .processors.send import SendProcessor
from .pop.service import PopService
from .processors.pop import PopProcessors
from .processors.send_back import SendBackProcessor
from rmqha.broker.managers.topics import TopicConfigManager
from rmqha.broker.processors.topics import TopicProcessors
from rmqha.broker.managers.subscriptions import SubscriptionGroupManager
from rmqha.broker.processors.subscription_groups import SubscriptionGroupProcessors
from .processors.topic_admin import TopicAdminProcessors
from .processors.consume_stats import ConsumeStatsProcessors
from rmqha.broker.managers.registration import BrokerRegistration
from rmqha.broker.managers.schedule import ScheduleMessageService
from .remoting.protocol import ProcessorRegistry, RemotingServerFactory
from rmqha.broker.managers.slave_sync import SlaveSynchronize
from .store.mapped_file import StoreError
from .transaction.service import TransactionService

log = logging.getLogger("rmqha.broker")


class VipChannelError(OSError):
    """listenPort - 2 is taken: a start-up error that names the port and the fix."""


class BrokerServer:
    def __init__(self, config, reactor, clock=None, run_in_thread=None, seams: Seams | None = None):
        self.config = config
        self.reactor = reactor
        self.clock = clock or reactor
        self.controller = BrokerController(config, reactor, clock=self.clock, run_in_thread=run_in_thread, seams=seams)
        # /status shows the whole process, not only the controller's part.
        self.controller.status_extra.append(self._status_extra)
        self.topics = TopicConfigManager(config, self.clock)
        metrics = self.controller.metrics  # periodic services report their health there
        self.offsets = ConsumerOffsetManager(config.storePathRootDir, self.clock, metrics=metrics)
        self.clients = ClientManager(config, self.clock, self.topics, metrics=metrics)
        self.groups = SubscriptionGroupManager(config, self.clock)
        self.clients.groups = self.groups
        self.topics.retry_queue_nums = lambda group: getattr(self.groups.get(group), "retryQueueNums", 1)
        self.registry = ProcessorRegistry(reply_to_unknown=True)
        self.factory = RemotingServerFactory(
            self.registry,
            clock=self.clock,
            max_frame_length=config.maxFrameLength,
            idle_timeout=config.serverChannelMaxIdleTimeSeconds,
            max_connections=config.maxClientConnections,
            max_header_length=config.maxHeaderLength,
            max_held_bytes=config.maxHeldFrameBytes,
        )
        self.send: SendProcessor | None = None
        self.pull: PullProcessor | None = None
        self.admin: AdminProcessors | None = None
        self.registration: BrokerRegistration | None = None
        self.slave_sync: SlaveSynchronize | None = None
        self.transactions: TransactionService | None = None
        self.pop: PopService | None = None
        self.schedule: ScheduleMessageService | None = None
        self.acl = None
        self.port = None
        self.fast_port = None  # the VIP channel, listenPort - 2
        self.started = False

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self, listen: bool = True) -> None:
        c = self.config
        self._load_configs()
        self.controller.start(listen=listen)
        self._make_client_processors()
        self._register_processors()
        self._start_acl()
        self._start_transactions()
        self._start_pop()
        self._install_metrics()
        if c.is_master and not c.enableDLegerCommitLog:
            self.schedule.start()
        self.offsets.start()
        self.clients.start()
        if listen:
            self._listen()
        if not c.is_master:
            self._start_slave_sync()
        if listen:
            self._start_registration()
        if c.enableDLegerCommitLog:
            self._start_dledger_roles()
        self.started = True

    def _load_configs(self) -> None:
        """config/topics.json, consumerOffset.json and subscriptionGroup.json; a broken one is a StoreError."""
        try:
            self.topics.load()
            self.offsets.load()
            self.groups.load()
        except ValueError as e:
            raise StoreError(str(e)) from None

    def _make_client_processors(self) -> None:
        """Send, pull (and the serving-wrapper seam), the delay-level service, send-back and admin."""
        c = self.config
        store = self.controller.store
        self.send = SendProcessor(c, self.controller, self.topics)
        self.pull = PullProcessor(
            c,
            store,
            self.topics,
            self.offsets,
            self.clients,
            self.clock,
            served=self.controller.served,
            stats=self.controller.stats,
            groups=self.groups,
        )
        self.pull.install_metrics(self.controller.metrics)
        Seams.call(self.controller.seams.serving, self)  # the serving-wrapper seam: tests of the audit only
        # Every broker keeps the delay offsets (a slave copies its master's and serves them); only a
        # master delivers delayed messages.
        self.schedule = ScheduleMessageService(
            store,
            self.controller.put_message,
            self.clock,
            c.storePathRootDir,
            c.delay_levels_ms,
            c.flushDelayOffsetInterval / 1000.0,
            self.controller.metrics,
        )
        self.schedule.load()
        self.send_back = SendBackProcessor(c, self.controller, self.topics)
        self.send_back.groups = self.groups
        self.admin = AdminProcessors(c, self.controller, self.topics, self.offsets, self.schedule)

    def _register_processors(self) -> None:
        """Every request code's processor, in the registry the remoting server dispatches with."""
        c, store = self.config, self.controller.store
        for part in (
            self.send,
            self.pull,
            self.admin,
            ClientManageProcessors(self.clients),
            TopicProcessors(self.topics),
            ConsumerOffsetProcessors(self.offsets, store),
            OffsetQueryProcessors(store),
            QueryMessageProcessor(store),
            self.send_back,
        ):
            part.register(self.registry)
        # topics, subscription groups and consumption, as the admin tools see them (issue 24)
        for part in (
            SubscriptionGroupProcessors(self.groups, self.offsets),
            TopicAdminProcessors(c, self.topics, store, self.controller.stats, lambda: self.controller.retention),
            ConsumeStatsProcessors(
                c, self.topics, self.offsets, store, self.clients, self.groups, self.controller.stats, self.clock
            ),
        ):
            part.register(self.registry)
        # clients as the admin tools see them, and requests the broker forwards to a client (issue 24)
        for part in (
            ProducerProcessors(self.clients),
            ClientCallProcessors(c, self.clients, self.topics, self.offsets, store),
        ):
            part.register(self.registry)
        # the admin plane: settings, statistics and replication state (issue 24)
        for part in (
            BrokerConfigProcessors(c, self.clock, self.topics),
            BrokerStatsProcessor(self.controller.stats),
            HAStatusProcessor(c, self.controller),
        ):
            part.register(self.registry)

    def _start_acl(self) -> None:
        """aclEnable: every request checked (the compiled send path off); the ACL admin codes either way."""
        c = self.config
        if c.enableDLegerCommitLog:
            self.registry.fast_sends = None  # the compiled path appends to a classic commit log
        if c.aclEnable:
            from rmqha.broker.acl.service import AclService, default_path

            self.acl = AclService(c.aclConfigFile or default_path(), self.clock, self.controller.metrics)
            self.registry.acl = self.acl.check
            self.registry.fast_sends = None  # every send is checked: the compiled path does not sign
            self.acl.start()
        # mqadmin's updateAclConfig, deleteAclConfig, clusterAclConfigVersion, updateGlobalWhiteAddr
        AclAdminProcessors(c, self.acl, self.clock).register(self.registry)

    def _start_transactions(self) -> None:
        c, store = self.config, self.controller.store
        # END_TRANSACTION is served everywhere (a slave refuses it); only a master checks half messages.
        self.transactions = TransactionService(
            c,
            store,
            self.controller.put_message,
            self.offsets,
            self.topics,
            self.clients,
            self.clock,
            self.controller.metrics,
        )
        EndTransactionProcessor(c, self.transactions).register(self.registry)
        # DLedger mode: a master's services start on the role change to master (4.9: changeToMaster)
        if c.is_master and not c.enableDLegerCommitLog:
            self.transactions.start()

    def _start_pop(self) -> None:
        """5.x's POP consumption (rmqha/broker/pop/): served everywhere (a slave refuses it); a master
        revives what was not acked (DLedger mode: from the role change to master, role_handler.py)."""
        c = self.config
        self.pop = PopService(
            c, self.controller.store, self.controller.put_message, self.offsets, self.topics, self.clock
        )
        PopProcessors(c, self.pop, self.topics, self.groups, self.controller.store, self.clock).register(self.registry)
        if c.is_master and not c.enableDLegerCommitLog:
            self.pop.start()

    def _listen(self) -> None:
        c = self.config
        self.port = self.reactor.listenTCP(c.listenPort, self.factory)
        self._listen_vip_channel()
        log.info("remoting server listening on port %d, VIP channel on %d", c.listenPort, c.fast_listen_port)

    def make_slave_sync(self) -> SlaveSynchronize:
        """A started copy of the master's topics, offsets, delay offsets and groups (a slave's; the DLedger
        role handler's when its node becomes a follower)."""
        c = self.config
        sync = SlaveSynchronize(
            self.topics,
            self.offsets,
            self.reactor,
            self.clock,
            metrics=self.controller.metrics,
            schedule=self.schedule,
            credentials=c.acl_client_credentials,
            groups=self.groups,
        )
        sync.start()
        return sync

    def _start_slave_sync(self) -> None:
        """A slave's copy of its master's topics, offsets, delay offsets and groups."""
        self.slave_sync = self.make_slave_sync()
        if self.config.slaveSyncMasterAddress:
            self.slave_sync.set_master_address(self.config.slaveSyncMasterAddress)

    def _start_registration(self) -> None:
        c = self.config
        self.registration = BrokerRegistration(
            c,
            self.topics,
            self.reactor,
            self.clock,
            ha_client=self.controller.ha_client,
            slave_sync=self.slave_sync,
            metrics=self.controller.metrics,
        )
        self.registration.start()

    def _start_dledger_roles(self) -> None:
        """Role changes: leader -> master, follower -> slave."""
        from rmqha.broker.dledger.role_handler import DLedgerRoleChangeHandler

        self.dledger_roles = DLedgerRoleChangeHandler(self)
        self.dledger_roles.start()
        self.controller.status_extra.append(self.dledger_roles.status)

    def stop(self) -> defer.Deferred:
        d = self.registration.stop() if self.registration is not None else defer.succeed(None)
        d.addBoth(lambda _: self._stop_rest())
        return d

    def _stop_rest(self):
        ds = []
        if self.pull is not None:
            self.pull.hold_service.stop()
        if self.slave_sync is not None:
            self.slave_sync.stop()
        self.clients.stop()
        if self.acl is not None:
            self.acl.stop()
        if self.transactions is not None:
            self.transactions.stop()
        if self.pop is not None:
            self.pop.stop()
        for port in (self.port, self.fast_port):
            if port is not None:
                ds.append(defer.maybeDeferred(port.stopListening))
        self.port = self.fast_port = None
        for ctx in list(self.factory.connections):
            ctx.close()
        self.offsets.stop()
        if self.schedule is not None:
            self.schedule.stop()
        if self.started:
            ds.append(self.controller.stop())
        self.started = False
        return defer.DeferredList(ds)

    def _listen_vip_channel(self) -> None:
        """4.9's second server socket (BrokerController's fastRemotingServer on listenPort - 2): a 4.9
        slave fetches its master's topic config there, and clients with vipChannelEnabled send there.
        The same factory, so the same processors, ACL, frame limits and one connection limit for both."""
        from twisted.internet.error import CannotListenError

        port = self.config.fast_listen_port
        try:
            self.fast_port = self.reactor.listenTCP(port, self.factory)
        except CannotListenError as e:
            self.port.stopListening()
            self.port = None
            raise VipChannelError(
                f"the VIP channel cannot listen on port {port} (listenPort {self.config.listenPort} "
                f"- 2, as 4.9's fastListenPort): {e.socketError}; free that port or pick "
                "another listenPort"
            ) from None

    # -- observability -------------------------------------------------------------------------------
    def _install_metrics(self) -> None:
        reg = self.controller.metrics
        reg.gauge("client_connections", "remoting connections from clients", lambda: len(self.factory.connections))
        reg.gauge(
            "consumer_groups",
            "consumer groups with at least one live connection",
            lambda: len(self.clients.consumer_groups),
        )
        reg.gauge("topics", "topic configs held", lambda: len(self.topics.table))
        reg.gauge(
            "client_connections_refused",
            "connections closed at once: maxClientConnections open",
            lambda: self.factory.refused,
        )
        reg.gauge(
            "requests_unsupported",
            "requests with a code this broker does not serve, by code",
            lambda: [({"code": c}, n) for c, n in sorted(self.registry.unsupported.items())],
        )
        reg.gauge(
            "remoting_events",
            "refused requests, malformed frames and processing failures, by kind",
            lambda: [({"kind": k}, n) for k, n in sorted(self.registry.limiter.total.items())],
        )
        # the rocketmq-exporter's names, for the community Grafana dashboards (rmqha/broker/observability/exporter.py)
        ExporterMetrics(self.config, self.controller, self.admin.runtime_info, self.offsets, self.clients).install(reg)

    def status(self) -> dict:
        return self.controller.status()

    def _status_extra(self) -> dict:
        out = {}
        out["listenPort"] = self.config.listenPort
        out["fastListenPort"] = self.config.fast_listen_port if self.fast_port is not None else None
        out["topics"] = len(self.topics.table)
        out["consumerGroups"] = {g: i.client_ids() for g, i in self.clients.consumer_groups.items()}
        out["clientConnections"] = len(self.factory.connections)
        # Which code reads and stores plain sends: "compiled" (rmqha/broker/fastpath) or "python".
        out["sendPath"] = "compiled" if self.registry.fast_sends is not None else "python"
        if self.pop is not None:  # POP (the 5.x proxy's consumers): is this node reviving, and how much
            out["pop"] = {"reviving": self.pop.running, "pending": len(self.pop.table), "revived": self.pop.revived}
        if self.registration is not None:
            out["registration"] = self.registration.status()
        if self.slave_sync is not None:
            out["slaveSync"] = self.slave_sync.status()
        return out
