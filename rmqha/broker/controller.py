"""BrokerController: wires the store, the HA role, disk flushing and the metrics endpoint together.

The client-facing remoting server plugs in through `put_message()` and the store; this module does
not know the client protocol.
"""

from __future__ import annotations

import logging
import os
import time

from twisted.internet import defer
from twisted.python.failure import Failure

from rmqha.broker import fastpath
from rmqha.broker.support import supervision
from rmqha.broker.config.properties import BrokerConfig, ConfigError
from rmqha.broker.support.seams import Seams
from .ha.master import HAService
from .ha.peers import PEERS_FILE, load_record
from .ha.recovery import RecoveryFetcher, RecoverySourceService, proven_sources
from .ha.slave import HAClient
from rmqha.broker.observability.metrics import Registry, metrics_site
from rmqha.broker.observability.served import ServedLog
from rmqha.broker.observability.stats_service import BrokerStats
from .store import record
from .store.flush import FlushService
from .store.index import IndexSettings
from .store.message_store import MessageStore, PutResult, PutStatus
from .store.retention import RetentionService

log = logging.getLogger("rmqha.broker")

DISPATCH_SLICE = 1 << 20  # bytes of replicated log turned into consume-queue units per reactor turn
DISPATCH_SLICE_STREAMING = 256 << 10  # ... while the master is streaming a backlog
DISPATCH_STREAMING_PAUSE = 0.02


def _apply_outcome(status: PutStatus, res: PutResult) -> PutResult:
    """The single wait's outcome on the stored message's result (PUT_OK leaves it as it is)."""
    if status is not PutStatus.PUT_OK:
        res.status = status
    return res


def _one_outcome(result, res: PutResult, what: str, failed_as: PutStatus) -> PutResult:
    """The stored message's result after its only wait (_wait_outcome, then _apply_outcome)."""
    return _apply_outcome(_wait_outcome(result, res, what, failed_as), res)


def _wait_outcome(result, res: PutResult, what: str, failed_as: PutStatus) -> PutStatus:
    """A flush or replication wait's answer as a PutStatus. An errback, or anything that is not the
    outcome of a stored message, counts as that wait failing (failed_as): never as PUT_OK."""
    if isinstance(result, Failure):
        log.error(
            "%s wait for offset %d failed, answering %s: %s", what, res.next_offset, failed_as, result.getTraceback()
        )
        res.remark = f"{what} wait failed: {result.getErrorMessage()}"
        return failed_as
    try:
        status = PutStatus(result)
    except (ValueError, TypeError):
        status = None
    if status is None or not status.stored:
        log.error(
            "%s wait for offset %d answered %r, not a stored outcome; answering %s",
            what,
            res.next_offset,
            result,
            failed_as,
        )
        return failed_as
    return status


def _by_topic(sends: list, stored: list) -> dict[str, list[int]]:
    """topic -> [sends, bytes] of a run's stored sends (usually one topic: one entry)."""
    out: dict[str, list[int]] = {}
    for s, (_offset, size, _qo) in zip(sends, stored):
        entry = out.get(s[fastpath.TOPIC])
        if entry is None:
            out[s[fastpath.TOPIC]] = [1, size]
        else:
            entry[0] += 1
            entry[1] += size
    return out


RECOVERING = (
    "master recovering after an unclean shutdown: fetching what its slaves hold past its log "
    "(haRecoveryEnable); retry in a moment"
)


class BrokerController:
    def __init__(self, config: BrokerConfig, reactor, clock=None, run_in_thread=None, seams: Seams | None = None):
        self.config = config
        # the named seams (rmqha/broker/support/seams.py): no-ops unless a test of the audit installed its controls
        self.seams = seams or Seams()
        if config.planted_bugs != self.seams.names:
            raise ConfigError(
                f"plantBug={config.plantBug!r} but the controls installed are {sorted(self.seams.names)}: "
                "the broker's process entry (python -m rmqha.broker) installs them; a BrokerServer built in code "
                "takes seams=rmqha.controls.planted.seams_for(plantBug)"
            )
        self.reactor = reactor
        self.clock = clock or reactor
        if run_in_thread is None:
            from twisted.internet.threads import deferToThread

            run_in_thread = deferToThread
        self.run_in_thread = run_in_thread
        self.metrics = Registry()
        self.store: MessageStore | None = None
        self.ha: HAService | None = None
        self.ha_client: HAClient | None = None
        self.recovery: RecoveryFetcher | None = None  # master: the hold after an unclean start
        self.recovery_source: RecoverySourceService | None = None  # slave: serves a recovering master
        self.flusher: FlushService | None = None
        self.retention: RetentionService | None = None  # commit-log retention (classic store only)
        self.ports = []
        self._dispatch_call = None
        self._reput_call = None  # master: the pending dispatch of records put since the last one
        self.started = False
        # the pulls this node answered, for the kit's "which node served each receive" (rmqha/broker/observability/served.py)
        self.served = ServedLog(incarnation_ms=int(time.time() * 1000))
        self.status_extra = []  # callables returning dicts merged into /status (remoting, registration...)
        self.services = supervision.services(self.metrics)  # periodic services' health
        self.status_extra.append(lambda: {"services": self.services.status()})
        # 4.9's store and broker statistics (GET_BROKER_RUNTIME_INFO, VIEW_BROKER_STATS_DATA)
        self.stats = BrokerStats(config.brokerClusterName, self.clock, self.metrics)

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self, listen: bool = True) -> None:
        c = self.config
        self._warn_ignored_keys()
        self._open_store()
        self.store.start()
        self._store_metrics()
        self.stats.start()
        self._arm_seams()
        self._start_flusher()
        if not c.enableDLegerCommitLog:  # DLedger's files are DLedger's to clean (not yet: docs/dledger.md)
            self.retention = RetentionService(self.store, c, self.clock, flush_idle=self._flush_idle)
            self.retention.start(self.metrics)
        if c.enableDLegerCommitLog:  # no HA service, no HA listener (4.9: haService = null)
            self._start_dledger(listen)
        elif c.is_master:
            self._start_master_ha(listen)
        else:
            self._start_slave_ha(listen)
        if listen:
            self._listen_metrics()
        self.started = True
        self._log_started()

    def _warn_ignored_keys(self) -> None:
        c = self.config
        if c.ignored_keys:
            log.warning(
                "4.9 config keys accepted and not used by this broker (their 4.9 behaviour does not exist here): %s",
                ", ".join(c.ignored_keys),
            )

    def _open_store(self) -> None:
        """The message store (on DLedger with enableDLegerCommitLog), not started yet: the before-recovery
        seam sees its files as the last run left them."""
        c = self.config
        store_class = MessageStore
        if c.enableDLegerCommitLog:  # the commit log on DLedger (rmqha/broker/store/dledger_commitlog.py)
            from rmqha.broker.store.dledger_commitlog import DLedgerMessageStore

            store_class = DLedgerMessageStore
        self.store = store_class(
            c.storePathRootDir,
            c.commitlog_dir,
            commitlog_file_size=c.mappedFileSizeCommitLog,
            cq_file_size=c.mappedFileSizeConsumeQueue,
            check_crc_on_recover=c.checkCRCOnRecover,
            store_host=record.host_of(c.broker_addr),
            preallocate=c.commitLogPreallocate,
            # store times and deliver times of delayed messages on the reactor's clock (the same
            # wall clock on a live broker; the fake one in tests)
            now_ms=lambda: int(self.clock.seconds() * 1000),
            index=IndexSettings(c.messageIndexEnable, c.maxHashSlotNum, c.maxIndexNum),
        )
        self.store.delay_levels_ms = c.delay_levels_ms
        if c.enableDLegerCommitLog:
            self.store.configure(c, self.reactor, self.clock)  # type: ignore[attr-defined]
        Seams.call(self.seams.before_recovery, self)

    @property
    def bugs(self) -> frozenset[str]:
        """The planted bugs installed (rmqha/controls/planted.py), tests of the audit only."""
        return self.seams.names

    def _arm_seams(self) -> None:
        """The seams' start hooks; installed controls (plantBug), said loudly."""
        c = self.config
        if self.seams.installed:
            log.error(
                "PLANTED BUGS ON (plantBug=%s): this broker breaks its guarantees on purpose, for a "
                "test of the audit; never run it for anything else: %s",
                c.plantBug,
                "; ".join(self.seams.installed[b] for b in sorted(self.seams.installed)),
            )
        Seams.call(self.seams.store_started, self)

    def _start_flusher(self) -> None:
        c = self.config
        self.flusher = FlushService(
            self.store,
            clock=self.clock,
            run_in_thread=self.run_in_thread,
            sync=c.flushDiskType == "SYNC_FLUSH",
            interval_ms=c.flush_interval_ms,
            timeout_ms=c.syncFlushTimeout,
        )
        for wrap in self.seams.store_flush:  # the store-flush seam: the store's own flush, every caller sees it
            self.store.flush = wrap(self.store, self.store.flush)
        if self.seams.flush_wait:
            self.flusher.start(self.metrics)

    def _flush_idle(self) -> bool:
        """No fdatasync in flight: the reactor may close (delete) store files (the flush thread syncs them)."""
        return self.flusher is None or not self.flusher.running

    def _start_dledger(self, listen: bool) -> None:
        self.store.start_service(listen)  # type: ignore[attr-defined]
        self.status_extra.append(lambda: {"dledger": self.store.status()})  # type: ignore[attr-defined]

    def _start_master_ha(self, listen: bool) -> None:
        """The HA service, after the recovery fetch from the slaves when haRecoveryEnable and the last
        shutdown was not clean."""
        c = self.config
        # Consume-queue units and index keys of the records a reactor turn appended are built in one
        # batch on the next turn (MessageStore.dispatch_pending).
        self.store.dispatch_soon = self._reput_soon
        sources, limit = (
            self._recovery_sources() if c.haRecoveryEnable and not self.store.was_clean_shutdown else ([], None)
        )
        if sources:
            # writes and the HA port wait until the slaves said what they hold past this log
            self.recovery = RecoveryFetcher(
                self.store,
                sources,
                self.clock,
                self.reactor,
                c.haRecoveryWaitMs / 1000.0,
                record.host_of(c.broker_addr),
                c.maxMessageSize + (64 << 10),
                on_done=lambda _state: self._take_writes(listen),
                limit=limit,
            )
            self.recovery.start()
        else:
            self._take_writes(listen)

    def _take_writes(self, listen: bool) -> None:
        """The master takes writes: its queues are padded up to their leases first (offsets a power cut
        may have taken from consumers, rmqha/broker/store/offset_lease.py). Only now: the recovery fetch
        before it put the slave's records back at their own offsets."""
        padded = self.store.pad_leased_queues()
        if padded:
            log.warning("queue offsets: %d leased offsets not in the queues kept as fillers, not given again", padded)
        self._start_ha_service(listen)

    def _start_slave_ha(self, listen: bool) -> None:
        """The HA client to the master; a recovery source for a restarting master with haRecoveryEnable."""
        c = self.config
        replica_store = Seams.wrap(self.seams.replica_store, self.store)
        self.ha_client = HAClient(
            replica_store,
            c.haMasterAddress,
            clock=self.clock,
            reactor=self.reactor,
            heartbeat_ms=c.haSendHeartbeatInterval,
            housekeeping_ms=c.haHousekeepingInterval,
            socket_buffer=c.haSocketBufferSize,
            reconnect_max_ms=c.haReconnectMaxDelay,
            zero_copy=c.haSlaveZeroCopy,
            compiled_frames=c.haSlaveCompiledFrames,
            metrics=self.metrics,
        )
        self.store.append_listeners.append(lambda _offset: self._dispatch_soon())
        self.schedule_dispatch()
        self.ha_client.start()
        if c.haRecoveryEnable and listen:  # a restarting master may fetch this log (rmqha/broker/ha/recovery.py)
            self.recovery_source = RecoverySourceService(self.store, self.clock, allowed=c.ha_allowed)
            self.ports.append(self.recovery_source.listen(self.reactor, c.ha_port))

    def _listen_metrics(self) -> None:
        c = self.config
        site = metrics_site(self.metrics, lambda: self.status(), served=self.served)
        self.ports.append(self.reactor.listenTCP(c.metrics_port, site, interface=c.metricsBindAddress))

    def _log_started(self) -> None:
        c = self.config
        log.info(
            "broker %s started: cluster=%s brokerName=%s brokerId=%d role=%s flush=%s addr=%s "
            "haPort=%d metrics=http://%s:%d/metrics maxPhyOffset=%d",
            c.brokerName,
            c.brokerClusterName,
            c.brokerName,
            c.brokerId,
            c.brokerRole,
            c.flushDiskType,
            c.broker_addr,
            c.ha_port,
            c.broker_ip,
            c.metrics_port,
            self.store.max_offset,
        )

    def _recovery_sources(self) -> tuple[list[str], int | None]:
        """haRecoveryPeers that were proven replicas of this master (rmqha/broker/ha/recovery.py proven_sources);
        none left is an ERROR, never a silent start without recovery."""
        peers, limit = load_record(os.path.join(self.store.root, PEERS_FILE))
        kept, dropped = proven_sources(self.config.recovery_peers, peers, limit)
        for why in dropped:
            log.error("recovery: not fetching from %s", why)
        if not kept:
            log.error(
                "recovery: haRecoveryEnable=true after an unclean shutdown, but no source is usable: this "
                "start takes writes at once; a slave holding more than this master will be SLAVE_AHEAD "
                "(its tail stranded; see `python -m rmqha.cluster repair`)"
            )
        return kept, limit

    def _start_ha_service(self, listen: bool) -> None:
        c = self.config
        self.ha = HAService(
            self.store,
            clock=self.clock,
            batch_size=c.haTransferBatchSize,
            heartbeat_ms=c.haSendHeartbeatInterval,
            housekeeping_ms=c.haHousekeepingInterval,
            fallbehind_max=c.haSlaveFallbehindMax,
            sync_wait_ms=c.sync_wait_ms,
            socket_buffer=c.haSocketBufferSize,
            metrics=self.metrics,
            compat49=c.haCompat49,
            allowed=c.ha_allowed,
        )
        if listen:
            self.ports.append(self.ha.listen(self.reactor, c.ha_port))
        else:
            self.ha.start_ticking()

    @property
    def writes_held(self) -> bool:
        """A recovering master (haRecoveryEnable) takes no write until its slaves answered."""
        return self.recovery is not None and self.recovery.holding

    def stop(self):
        ds = []
        self.stats.stop()
        if self.retention is not None:
            self.retention.stop()
        if self.ha is not None:
            ds.append(defer.maybeDeferred(self.ha.stop))
        if self.ha_client is not None:
            self.ha_client.stop()
        # The flush in flight must end before the store closes its files under it.
        flushed = self.flusher.stop() if self.flusher is not None else defer.succeed(None)
        if self._dispatch_call is not None and self._dispatch_call.active():
            self._dispatch_call.cancel()
        if self._reput_call is not None and self._reput_call.active():
            self._reput_call.cancel()  # the store's shutdown dispatches what is left
        self._reput_call = None
        for p in self.ports:
            ds.append(defer.maybeDeferred(p.stopListening))
        self.ports = []
        ds.append(flushed.addCallback(lambda _: self._close_store()))
        return defer.DeferredList(ds)

    def _close_store(self):
        if self.store is not None:
            self.store.shutdown()
        log.info("broker %s stopped", self.config.brokerName)

    # -- the send path ----------------------------------------------------------------------------
    def put_message(self, msg: record.Message, wait_store_ok: bool = True) -> defer.Deferred:
        """Store a message; for SYNC_FLUSH / SYNC_MASTER wait as the reference does.

        Fires with a PutResult whose status is PUT_OK, FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT or
        SLAVE_NOT_AVAILABLE when the message was stored, or an error status when it was not.
        """
        res = self.put(msg, wait_store_ok)
        return res if isinstance(res, defer.Deferred) else defer.succeed(res)

    def put(self, msg: record.Message, wait_store_ok: bool = True) -> PutResult | defer.Deferred:
        """put_message(), with the PutResult itself when there is nothing to wait for (the send path's
        usual ASYNC_MASTER case answers without a Deferred)."""
        c = self.config
        if not c.is_master:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark="this broker is a SLAVE; send to its master")
        if self.writes_held:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark=RECOVERING)
        if c.enableDLegerCommitLog:  # answered once a quorum has it; no flush or HA wait
            return self.store.put_async(msg)  # type: ignore[attr-defined]
        began = time.monotonic()
        res = self.store.put_message(msg)
        if res.status == PutStatus.PUT_OK:
            self.stats.store.on_put(msg.topic, 1, res.wrote_bytes, int((time.monotonic() - began) * 1000))
        else:
            self.stats.store.on_put_failed()
        if self.seams.after_put and res.status == PutStatus.PUT_OK:
            Seams.call(self.seams.after_put, self, msg)
        if res.status != PutStatus.PUT_OK or not wait_store_ok:
            return res
        return self.await_stored(res)

    def put_sends(self, buf, sends: list, born_host: bytes):
        """put() for a run of plain sends read by the compiled scan (rmqha/broker/fastpath), each asking to
        wait (WAIT) or not: (stored, outcome). stored holds (offset, size, queue offset) of the first
        len(stored) sends (the rest were not stored: the caller sends them through put(), which says
        why); outcome is None when no stored send waits for anything, else the PutResult of the last
        one that does, or a Deferred firing with it once its waits end: its status is the outcome of
        every waiting send of the run (the waits are for its offset, which covers theirs)."""
        began = time.monotonic()
        stored = self.store.put_sends(buf, sends, born_host)
        if stored:
            elapsed_ms = int((time.monotonic() - began) * 1000)
            # every one a client's send: the store's counts and the send statistics (BrokerStatsManager)
            for topic, (count, size) in _by_topic(sends, stored).items():
                self.stats.store.on_put(topic, count, size, elapsed_ms, puts=count)
                self.stats.table.on_put(topic, count, size, requests=count)
        last = None
        for k in range(len(stored) - 1, -1, -1):
            if sends[k][fastpath.WAIT]:
                last = stored[k]
                break
        if last is None:
            return stored, None
        return stored, self.await_stored(PutResult(PutStatus.PUT_OK, last[0], last[1], last[2]))

    def await_stored(self, res: PutResult) -> PutResult | defer.Deferred:
        """A stored message's result once the flush and replication waits this broker makes (its
        flushDiskType and brokerRole) are over: res itself when there are none."""
        c = self.config
        kinds = []  # (wait, what, the status its failure counts as)
        if self.flusher.sync and self.seams.flush_wait:
            kinds.append((self.flusher.wait, "disk flush", PutStatus.FLUSH_DISK_TIMEOUT))
        if c.is_sync_master and self.seams.replication_wait:
            kinds.append((self.ha.wait_for_slave, "replication", PutStatus.FLUSH_SLAVE_TIMEOUT))
        if not kinds:
            return res
        if len(kinds) == 1:
            # One wait (the usual SYNC_MASTER with ASYNC_FLUSH): no DeferredList per message, and one
            # callback for its outcome.
            wait, what, failed_as = kinds[0]
            return defer.maybeDeferred(wait, res.next_offset).addBoth(_one_outcome, res, what, failed_as)
        # each fires with a stored PutStatus; a wait that fails counts as its timeout
        waits = [
            defer.maybeDeferred(wait, res.next_offset).addBoth(_wait_outcome, res, what, failed_as)
            for wait, what, failed_as in kinds
        ]

        def combine(statuses):
            # As in RocketMQ 4.9: a replication failure (the last wait) wins over a flush failure.
            # PUT_OK only when every wait answered PUT_OK.
            for status in statuses:
                if status is not PutStatus.PUT_OK:
                    res.status = status
            return res

        return defer.gatherResults(waits).addCallback(combine)

    # -- master: consume queues and index from the records just put -------------------------------
    def _reput_soon(self):
        if self._reput_call is None:
            self._reput_call = self.clock.callLater(0, self._reput)

    def _reput(self):
        self._reput_call = None
        if not self.store.closed:
            self.store.dispatch_pending()

    # -- slave: consume queues from replicated bytes ----------------------------------------------
    def _dispatch_soon(self):
        if self._dispatch_call is None:
            self.schedule_dispatch()

    def schedule_dispatch(self):
        if self._dispatch_call is None or not self._dispatch_call.active():
            self._dispatch_call = self.clock.callLater(0, self._dispatch_step)

    def _dispatch_step(self):
        """Build consume queues from replicated bytes, giving the HA stream priority.

        While a backlog is pouring in (a catch-up, HAClient.catching_up), replication comes first and
        queues are built in small slices; otherwise (live sends, the gaps, once caught up) at full
        speed. dispatch_lag_bytes shows it.
        """
        self._dispatch_call = None
        s = self.store
        if s.closed:
            return
        streaming = self.ha_client is not None and self.ha_client.catching_up(self.clock.seconds())
        s.dispatch(DISPATCH_SLICE_STREAMING if streaming else DISPATCH_SLICE)
        if s.reput_offset < s.max_offset and not s.dispatch_error:
            if streaming:
                if self._dispatch_call is None:
                    self._dispatch_call = self.clock.callLater(DISPATCH_STREAMING_PAUSE, self._dispatch_step)
            else:
                self.schedule_dispatch()

    # -- observability ----------------------------------------------------------------------------
    def _store_metrics(self):
        reg, s = self.metrics, self.store
        info = {
            "cluster": self.config.brokerClusterName,
            "broker_name": self.config.brokerName,
            "broker_id": self.config.brokerId,
            "role": self.config.brokerRole,
        }
        reg.gauge("broker_info", "constant 1, labelled with who this broker is", lambda: [(info, 1)])
        reg.gauge("commitlog_max_offset", "commit-log max physical offset (maxPhyOffset)", lambda: s.max_offset)
        reg.gauge("commitlog_min_offset", "commit-log min physical offset", lambda: s.min_offset)
        reg.gauge("dispatch_offset", "commit-log offset up to which consume queues are built", lambda: s.reput_offset)
        reg.gauge(
            "dispatch_lag_bytes", "commit-log bytes not yet in consume queues", lambda: s.max_offset - s.reput_offset
        )
        reg.gauge(
            "store_recovery_discarded_bytes",
            "stale bytes wiped after the valid end at the last start",
            lambda: s.recovery.discarded_bytes if s.recovery else 0,
        )
        reg.gauge(
            "ha_recovery_holding",
            "1 while a master recovering after an unclean shutdown holds writes (haRecoveryEnable)",
            lambda: int(self.writes_held),
        )
        reg.gauge(
            "ha_recovery_fetched_bytes",
            "bytes a recovering master fetched from its slaves at this start",
            lambda: (self.recovery.store.max_offset - self.recovery.start_offset) if self.recovery else 0,
        )
        reg.gauge("store_flush_errors", "disk flushes that failed", lambda: self.flusher.errors if self.flusher else 0)
        reg.gauge(
            "store_flush_failed",
            "1 once an fdatasync failed: restart the broker",
            lambda: int(bool(self.flusher and self.flusher.poisoned)),
        )
        reg.gauge(
            "store_durable_offset",
            "commit-log offset up to which fdatasync confirmed the bytes on disk",
            lambda: self.flusher.durable_offset if self.flusher else 0,
        )

    def status(self) -> dict:
        c, s = self.config, self.store
        out = {
            "clusterName": c.brokerClusterName,
            "brokerName": c.brokerName,
            "brokerId": c.brokerId,
            "role": c.brokerRole,
            "flushDiskType": c.flushDiskType,
            "addr": c.broker_addr,
            "haAddr": c.ha_server_addr,
            "metricsPort": c.metrics_port,
            "pid": os.getpid(),
            "maxPhyOffset": s.max_offset,
            "minPhyOffset": s.min_offset,
            "dispatchOffset": s.reput_offset,
            "durableOffset": self.flusher.durable_offset if self.flusher else None,
            # an fdatasync failed since start: nothing more becomes durable until a restart
            "flushFailed": (self.flusher.last_error or True) if self.flusher and self.flusher.poisoned else None,
            "dispatchError": s.dispatch_error or None,
            "index": s.index.status(),  # the message index: files, items, end, a write error
            "cleanShutdownBefore": s.was_clean_shutdown,
        }
        if self.seams.installed:
            out["plantedBugs"] = sorted(self.seams.names)
        if self.ha is not None:
            out["ha"] = self.ha.status()
        if c.is_sync_master:  # what a client needs to choose its send timeout (above the wait)
            out["syncWaitMs"] = c.sync_wait_ms
            out["haSlaveFallbehindMax"] = c.haSlaveFallbehindMax
        if self.ha_client is not None:
            out["haClient"] = self.ha_client.status()
        if self.recovery is not None:
            out["haRecovery"] = self.recovery.status()
        if self.recovery_source is not None:
            out["haRecoverySource"] = self.recovery_source.status()
        for extra in self.status_extra:
            out.update(extra())
        return out
