"""DLedgerRoleChangeHandler: 4.9's RCH with BrokerController.changeToMaster/changeToSlave, on a BrokerServer
whose commit log is DLedger's (rmqha/broker/store/dledger_commitlog.py holds the store itself).

FOLLOWER, and CANDIDATE when not already a slave, make the broker a SLAVE with brokerId = dLegerSelfId's
number + 1; LEADER makes it the master (brokerId 0, SYNC_MASTER) once its committed index reaches its log's
end and the consume queues caught up (polled every 100 ms), after rebuilding the queue offsets from the
consume queues. Each change registers with the name servers at once. A registration as master (brokerId 0)
is sent only while the DLedger leader lease holds (master_lease_valid; review 2, A4): a stopped and resumed
old leader skips it and registers under its own id once it steps down. A new leader whose log has entries
it cannot count as committed yet (the Raft commit rule: only an entry of its own term commits the ones
before it) appends a no-op entry first: see docs/dledger.md "The new leader's no-op".
"""

from __future__ import annotations

import logging
from typing import Any

from rmqha.broker.config.properties import BrokerConfig, dledger_slave_id
from rmqha.broker.dledger.effects import RoleChanged
from rmqha.broker.store.dledger_commitlog import DLedgerMessageStore

# the store's logger: role changes have always been logged beside the store's own lines
log = logging.getLogger("rmqha.broker.dledger_commitlog")

LEADER_POLL_S = 0.1  # RCH polls every 100 ms until the new leader may be master
LEARN_MASTER_S = 1.0  # a slave that does not know its master registers again this often (ours)


class DLedgerRoleChangeHandler:
    """RCH + BrokerController.changeToMaster/changeToSlave on a BrokerServer (rmqha/broker/server.py)."""

    def __init__(self, server: Any):
        self.server = server
        self.config: BrokerConfig = server.config
        self.store: DLedgerMessageStore = server.controller.store
        self.clock = server.clock
        self._poll_call: Any = None
        self._master_services = False
        self._learn_call: Any = None
        self.changes: list[tuple[float, str, int]] = []  # (time, role, brokerId): /status shows them

    def start(self) -> None:
        self.store.role_listeners.append(self.on_role)
        if self.server.registration is not None:  # brokerId 0 only under the leader lease (review 2, A4)
            self.server.registration.master_lease = self.store.master_lease_valid

    def stop(self) -> None:
        if self.on_role in self.store.role_listeners:
            self.store.role_listeners.remove(self.on_role)
        if self.server.registration is not None:
            self.server.registration.master_lease = None
        for call in (self._poll_call, self._learn_call):
            if call is not None and call.active():
                call.cancel()

    def on_role(self, eff: RoleChanged) -> None:
        if eff.role == "LEADER":
            fs = self.store.fs
            if fs.end_index > fs.committed_index:
                self.store.append_noop()
            self._poll(eff.term)
        elif eff.role == "FOLLOWER" or self.config.brokerRole != "SLAVE":
            self.change_to_slave()

    def _poll(self, term: int) -> None:
        self._poll_call = None
        node, fs = self.store.node, self.store.fs
        if node.role != "LEADER" or node.term != term or self.store.closed:
            return  # leadership lost meanwhile: RCH gives up silently
        if fs.end_index == -1 or (fs.end_index == fs.committed_index and self.store.dispatched_all):
            self.store.recover_topic_queue_table()
            self.change_to_master()
            return
        self._poll_call = self.clock.callLater(LEADER_POLL_S, self._poll, term)

    def change_to_slave(self) -> None:
        c = self.config
        slave_id = dledger_slave_id(c.dLegerSelfId) or 1
        if self._master_services:
            self._master_services = False
            for svc in self._services():
                svc.stop()
        self.store.master_term = None
        c.brokerId, c.brokerRole = slave_id, "SLAVE"
        self._start_slave_sync()
        self._changed()
        self._learn_master()

    def change_to_master(self) -> None:
        c, srv = self.config, self.server
        if not self._master_services:
            self._master_services = True
            for svc in self._services():
                svc.start()
        if srv.slave_sync is not None:  # 4.9: changeToMaster stops the slave sync first
            srv.slave_sync.stop()
            srv.slave_sync = None
            if srv.registration is not None:
                srv.registration.slave_sync = None
        c.brokerId, c.brokerRole = 0, "SYNC_MASTER"
        self.store.master_term = self.store.node.term  # writable from here on, in this term only
        self._changed()

    def _services(self) -> list[Any]:
        """What only a master runs (5.x's changeSpecialServiceStatus): delay-level delivery, the
        transaction check, and POP's revive service. The revive service of a new leader reads the revive
        queue from the REVIVE offset its slave sync copied, and DLedger replicated every checkpoint and
        ack with the rest of the log, so what was popped from the old leader and not acked comes back."""
        srv = self.server
        return [s for s in (srv.schedule, srv.transactions, srv.pop) if s is not None]

    def _start_slave_sync(self) -> None:
        """4.9's changeToSlave: the slave sync (topics, offsets, delay offsets, groups) from a master
        address reset to none, learned again from the name server's answer to a registration."""
        srv = self.server
        reg = srv.registration
        if reg is not None:
            reg.master_addr = None
        if srv.slave_sync is None:
            srv.slave_sync = srv.make_slave_sync()
        else:
            srv.slave_sync.set_master_address(None)
        if reg is not None:
            reg.slave_sync = srv.slave_sync

    def _learn_master(self) -> None:
        """Register again every LEARN_MASTER_S while a slave does not know its master: 4.9 learns it on
        the next periodic registration (up to 30 s); here within a second of the new master's."""
        reg = self.server.registration
        if self._learn_call is not None and self._learn_call.active():
            return
        if reg is None or self.config.brokerRole != "SLAVE" or reg.master_addr or self.store.closed:
            return
        reg.register_soon()
        self._learn_call = self.clock.callLater(LEARN_MASTER_S, self._learn_master_again)

    def _learn_master_again(self) -> None:
        self._learn_call = None
        self._learn_master()

    def _changed(self) -> None:
        c = self.config
        self.changes.append((self.clock.seconds(), c.brokerRole, c.brokerId))
        del self.changes[:-20]
        log.info(
            "DLedger role change: %s is now %s, brokerId %d (term %d)",
            c.dLegerSelfId,
            c.brokerRole,
            c.brokerId,
            self.store.node.term,
        )
        if self.server.registration is not None:
            self.server.registration.register_soon()

    def status(self) -> dict:
        return {
            "dledger": {
                **self.store.status(),
                "roleChanges": [{"at": t, "role": r, "brokerId": i} for t, r, i in self.changes],
            }
        }
