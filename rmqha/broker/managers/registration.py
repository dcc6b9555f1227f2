"""Registration with the name servers (WIRE-FACTS §3.2).

REGISTER_BROKER goes to every address in namesrvAddr (";"-separated) at start and then every
registerNameServerPeriod ms, and again soon after any topic config change (as the Java broker's
registerBrokerAll on topic creation). The body is a RegisterBrokerBody (JSON) with our topic
configs; when the broker permission lacks READ or WRITE, every topic is announced with the broker's
permission instead (Java does the same). A slave reads masterAddr and haServerAddr from the reply:
haServerAddr goes to the HA client when haMasterAddress is not configured, masterAddr to the slave
synchronizer. On a clean stop, UNREGISTER_BROKER goes to every name server.

With clusterSecretFile, each name server gets its own copy, signed timed (namesrv/guard.py) for that name
server's instance (clusterSignAudience, which it says in every reply): a copy taken on the way to one is
refused at another, and at the same one after it restarted. A broker that does not know the instance yet
(first contact, or the name server restarted) is refused once with the instance named, and signs again.

On DLedger (`master_lease`, set by dledger_commitlog's role handler) a registration as brokerId 0 is sent
only while the leader lease holds; otherwise that round is skipped (`leaseSkips`) and tried again
LEASE_RETRY_S later: a role change re-registers at once anyway (review 2, A4).
"""

from __future__ import annotations

import logging

from twisted.internet import defer

from rmqha.broker.namesrv.register_body import RegisterBrokerBody, TopicConfig, body_crc32
from rmqha.broker.remoting.codes import PERM_READ, PERM_WRITE, RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.remoting.protocol import RemotingClient
from rmqha.broker.support.supervision import PeriodicService

log = logging.getLogger("rmqha.broker.registration")

REGISTER_TIMEOUT_S = 6.0
UNREGISTER_TIMEOUT_S = 2.0
LEASE_RETRY_S = 1.0  # a master registration skipped for want of a lease is tried again this much later


def namesrv_addresses(value: str | None) -> list[str]:
    return [a.strip() for a in (value or "").split(";") if a.strip()]


class BrokerRegistration:
    def __init__(
        self,
        config,
        topics,
        reactor,
        clock=None,
        ha_client=None,
        slave_sync=None,
        client: RemotingClient | None = None,
        metrics=None,
    ):
        self.config = config
        self.topics = topics
        self.clock = clock or reactor
        self.ha_client = ha_client
        self.slave_sync = slave_sync
        self.client = client or RemotingClient(reactor, self.clock)
        self.addresses = namesrv_addresses(config.namesrvAddr)
        self.secret = None
        self._sign_clock = None
        if config.clusterSecretFile:
            from rmqha.broker.config.properties import ConfigError
            from rmqha.broker.namesrv.guard import read_secret

            try:
                self.secret = read_secret(config.clusterSecretFile)
            except ValueError as e:
                raise ConfigError(f"clusterSecretFile: {e}") from None
            from rmqha.broker.namesrv.guard import SignClock

            self._sign_clock = SignClock(self.clock.seconds)
        self.master_addr: str | None = None
        self.master_ha_addr: str | None = None
        self.registrations = 0  # successful REGISTER_BROKER replies
        self.last_error: dict[str, str] = {}
        self.audience: dict[str, str] = {}  # name server address -> its clusterSignAudience, as it said
        self._loop = PeriodicService(
            "registration", self.register_all, config.registerNameServerPeriod / 1000.0, self.clock, metrics, logger=log
        )
        self._soon = None
        self._in_flight: defer.Deferred | None = None
        self._again = False  # asked to register while a registration was in flight
        self.stopped = False
        # DLedger: may this broker register as master now? (None: always, as a classic broker)
        self.master_lease = None
        self.lease_skips = 0
        self._lease_retry = None
        topics.listeners.append(self.register_soon)

    def _signed(self, code: int, fields: dict, body: bytes | None, addr: str) -> dict:
        """The ext fields signed timed with the cluster secret (clusterSecretFile), for the name server at
        addr: a time strictly after the last this broker signed, a nonce, and that name server's instance
        ("" until it said one). Without a secret, the fields as they are."""
        if self.secret is None or self._sign_clock is None:
            return dict(fields)
        from rmqha.broker.namesrv.guard import sign_cluster_timed

        return sign_cluster_timed(
            fields, body, self.secret, self._sign_clock.next_ms(), code=code, audience=self.audience.get(addr, "")
        )

    def _heard_audience(self, response: RemotingCommand, addr: str, used: str | None) -> bool:
        """Notes the instance a name server says it is; True when it refused a copy signed for another."""
        from rmqha.broker.namesrv.guard import SIGN_AUDIENCE

        said = (response.ext_fields or {}).get(SIGN_AUDIENCE)
        if self.secret is None or not isinstance(said, str) or not 0 < len(said) <= 64:
            return False
        if self.audience.get(addr) != said:
            if addr in self.audience:
                log.info("name server %s is a new instance (%s, was %s): it restarted", addr, said, self.audience[addr])
            self.audience[addr] = said
        return response.code != ResponseCode.SUCCESS and said != used

    def start(self) -> None:
        if not self.addresses:
            log.warning("namesrvAddr is not set: this broker registers with no name server")
            return
        self._loop.start(now=True)

    def register_soon(self) -> None:
        """A topic changed: re-register on the next reactor turn (one registration for many changes)."""
        if self.stopped or not self.addresses:
            return
        if self._soon is None or not self._soon.active():
            self._soon = self.clock.callLater(0, self._loop.trigger)

    # -- REGISTER_BROKER ----------------------------------------------------------------------------
    def body(self) -> bytes:
        c = self.config
        configs = self.topics.table
        if not (c.brokerPermission & PERM_READ and c.brokerPermission & PERM_WRITE):
            configs = {
                n: TopicConfig(
                    t.topic_name,
                    t.read_queue_nums,
                    t.write_queue_nums,
                    c.brokerPermission,
                    t.topic_filter_type,
                    t.topic_sys_flag,
                    t.order,
                )
                for n, t in configs.items()
            }
        return RegisterBrokerBody(dict(configs), dict(self.topics.data_version)).encode()

    def register_all(self) -> defer.Deferred:
        """REGISTER_BROKER to every name server. A name server that fails or refuses is noted in
        `last_error` and tried again next period; the Deferred fails only when handling a reply
        raised (a bug), for the supervisor to see. One registration at a time: asked again while one
        is in flight, it registers once more when that one ends (the topics may have changed)."""
        if self.stopped:
            return defer.succeed(None)
        if self._in_flight is not None:
            self._again = True
            return defer.succeed(None)
        c = self.config
        if c.brokerId < 0:
            # DLedger before its first role change (brokerId -1, as 4.9 sets it): nothing a name server
            # could route; ours refuses the id anyway. The role handler registers as soon as there is a role.
            log.debug("not registering yet: brokerId %d (DLedger role not decided)", c.brokerId)
            return defer.succeed(None)
        if c.brokerId == 0 and self.master_lease is not None and not self.master_lease():
            self._skip_for_lease()
            return defer.succeed(None)
        body = self.body()
        fields = {
            "brokerName": c.brokerName,
            "brokerAddr": c.broker_addr,
            "clusterName": c.brokerClusterName,
            "haServerAddr": c.ha_server_addr,
            "brokerId": c.brokerId,
            "compressed": False,
            "bodyCrc32": body_crc32(body),
        }
        ds = []
        for addr in self.addresses:
            d = self._register_with(addr, fields, body, again=True)
            d.addCallbacks(self._registered, self._failed, callbackArgs=(addr,), errbackArgs=(addr,))
            ds.append(d)
        d = defer.DeferredList(ds, consumeErrors=True).addCallback(self._first_error)
        ended = []
        d.addBoth(self._ended, ended)
        if not ended:
            self._in_flight = d
        return d

    def _skip_for_lease(self) -> None:
        """brokerId 0 without a current DLedger leader lease: a node that was stopped or cut off may have
        been replaced, and its registration would overwrite the new master's (then its step-down
        registration would delete the id-0 entry). Not sent; tried again LEASE_RETRY_S later (by then it
        has either renewed its lease or stepped down and registered under its own id)."""
        self.lease_skips += 1
        log.warning(
            "not registering as master (brokerId 0): the DLedger leader lease has lapsed (%d skipped)", self.lease_skips
        )
        if self._lease_retry is None or not self._lease_retry.active():
            self._lease_retry = self.clock.callLater(LEASE_RETRY_S, self.register_soon)

    def _register_with(self, addr: str, fields: dict, body: bytes, again: bool) -> defer.Deferred:
        """REGISTER_BROKER to one name server, signed for it; refused because it is another instance than
        the one signed for (first contact, or it restarted), once more for the instance it named."""
        req = RemotingCommand.request(
            RequestCode.REGISTER_BROKER, self._signed(RequestCode.REGISTER_BROKER, fields, body, addr), body=body
        )
        used = self.audience.get(addr, "") if self.secret is not None else None
        d = self.client.invoke(addr, req, REGISTER_TIMEOUT_S)

        def heard(response: RemotingCommand):
            if again and self._heard_audience(response, addr, used) and not self.stopped:
                return self._register_with(addr, fields, body, again=False)
            return response

        return d.addCallback(heard)

    @staticmethod
    def _first_error(results):
        for ok, result in results:
            if not ok:
                return result
        return None

    def _ended(self, result, ended: list):
        ended.append(True)
        self._in_flight = None
        if self._again:
            self._again = False
            self.register_soon()
        return result

    def _registered(self, response: RemotingCommand, addr: str) -> None:
        if response.code != ResponseCode.SUCCESS:
            self._failed_text(addr, f"code {response.code} {response.remark}")
            return
        if addr in self.last_error:
            log.info("registered with name server %s again", addr)
            del self.last_error[addr]
        elif self.registrations == 0:
            log.info("registered with name server %s", addr)
        self.registrations += 1
        if self.config.is_master:
            return
        master_addr = response.ext_fields.get("masterAddr") or None
        ha_addr = response.ext_fields.get("haServerAddr") or None
        if master_addr and master_addr != self.master_addr:
            log.info("name server %s says our master is %s (HA %s)", addr, master_addr, ha_addr)
            self.master_addr = master_addr
            if self.slave_sync is not None and not self.config.slaveSyncMasterAddress:
                self.slave_sync.set_master_address(master_addr)
        if ha_addr:
            self.master_ha_addr = ha_addr
            if self.ha_client is not None and not self.config.haMasterAddress:
                self.ha_client.set_master_address(ha_addr)

    def _failed(self, failure, addr: str) -> None:
        self._failed_text(addr, failure.getErrorMessage())

    def _failed_text(self, addr: str, why: str) -> None:
        if self.last_error.get(addr) != why:
            log.warning("register to name server %s failed: %s", addr, why)
        self.last_error[addr] = why

    # -- stop ---------------------------------------------------------------------------------------
    def stop(self) -> defer.Deferred:
        """Stop re-registering and send UNREGISTER_BROKER everywhere (bounded wait)."""
        self.stopped = True
        self._loop.stop()
        for call in (self._soon, self._lease_retry):
            if call is not None and call.active():
                call.cancel()
        c = self.config
        fields = {
            "brokerName": c.brokerName,
            "brokerAddr": c.broker_addr,
            "clusterName": c.brokerClusterName,
            "brokerId": c.brokerId,
        }
        ds = []
        # The name server removes an UNREGISTER's brokerId whatever address holds it (as 4.9): id 0 without
        # the lease may be another node's by now. Closing the connection drops only this address's entries.
        lapsed = c.brokerId == 0 and self.master_lease is not None and not self.master_lease()
        if lapsed:
            log.warning("not unregistering brokerId 0: the DLedger leader lease has lapsed")
        for addr in (
            [] if lapsed else self.addresses
        ):  # signed for the instance last heard (a restarted one refuses: expiry)
            req = RemotingCommand.request(
                RequestCode.UNREGISTER_BROKER, self._signed(RequestCode.UNREGISTER_BROKER, fields, None, addr)
            )
            d = self.client.invoke(addr, req, UNREGISTER_TIMEOUT_S)
            d.addErrback(lambda f, a=addr: log.info("unregister from %s failed: %s", a, f.getErrorMessage()))
            ds.append(d)
        d = defer.DeferredList(ds)
        d.addBoth(lambda _: self.client.close())
        return d

    def status(self) -> dict:
        return {
            "nameServers": self.addresses,
            "registrations": self.registrations,
            "errors": dict(self.last_error),
            "masterAddr": self.master_addr,
            "masterHaAddr": self.master_ha_addr,
            "leaseSkips": self.lease_skips,
        }
