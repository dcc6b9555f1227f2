"""The DLedger leader lease and the broker's registration as master (review 2, A4).

A leader registers as brokerId 0 only while a quorum acknowledged it within maxHeartBeatLeak x
heartBeatTimeIntervalMs (6 s with 0.3.1.2's defaults). Without that, an old leader stopped with SIGSTOP
and resumed after a successor was elected re-registered as 0 before it learned the new term (overwriting
the successor in the name server), then stepped down and registered under its own id, which deletes the
same address's other ids: no master in the name server until the successor's next periodic registration.

Three broker stores on an in-memory network (the harness of test_dledger_commitlog.py), each on its own
task.Clock so that one can be stopped: while paused its clock does not move and what is sent to it
waits; on resume its clock jumps to the others' time and its overdue timers run, then the waiting
messages arrive, as after SIGCONT. The brokers register with an in-process name server.
"""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
from twisted.internet import defer, task

from rmqha.broker.config.properties import BrokerConfig
from rmqha.broker.dledger.config import DLedgerConfig
from rmqha.broker.dledger.election import CANDIDATE, LEADER, NEVER
from rmqha.broker.dledger.protocol import HeartBeatRequest, HeartBeatResponse, ResponseCode, VoteResult
from rmqha.broker.dledger.role_handler import DLedgerRoleChangeHandler
from rmqha.broker.store.dledger_commitlog import DLedgerMessageStore
from rmqha.broker.namesrv.server import NameServer
from rmqha.broker.managers.topics import TopicConfigManager
from rmqha.broker.managers.registration import LEASE_RETRY_S, BrokerRegistration

from ..processors.harness import FakeContext
from .test_dledger_commitlog import IDS, PEERS, FakeSync, Net
from .test_election import answer_votes, make, sends

GROUP = "RaftNode00"
LEASE_S = 6.0  # maxHeartBeatLeak 3 x heartBeatTimeIntervalMs 2000


# --- the lease in the IO-free elector ----------------------------------------------------------------


def won(term_start=1000):
    """n0 leader in term 1 by a vote round started at term_start (ms)."""
    node = make()
    effects = node.tick(term_start)  # a candidate's first pass: a vote round in term 1
    answer_votes(node, effects, VoteResult.ACCEPT, term_start + 5)
    assert node.role == LEADER
    return node


def test_the_lease_starts_with_the_winning_vote_round_and_lasts_max_heartbeat_leak_intervals():
    node = won(1000)
    assert node.elector.lease_start == 1000  # when the round began: the votes were granted after
    assert node.elector.lease_ms == 6000
    assert node.lease_valid(7000) and not node.lease_valid(7001)


def test_a_heartbeat_quorum_renews_the_lease_from_the_rounds_send_time():
    node = won(1000)
    effects = node.tick(3000)
    [s, *_] = sends(effects, HeartBeatRequest)
    node.on_response(s.peer, s.request, HeartBeatResponse(code=ResponseCode.SUCCESS), 3400)
    assert node.elector.lease_start == 3000  # sent at 3000, answered at 3400
    assert node.lease_valid(9000) and not node.lease_valid(9001)


def test_answers_read_after_a_stop_do_not_renew_the_lease():
    node = won(1000)
    effects = node.tick(3000)  # a round sent; then the process is stopped for 40 s
    for s in sends(effects, HeartBeatRequest):  # the answers waited in the socket; read on resume
        node.on_response(s.peer, s.request, HeartBeatResponse(code=ResponseCode.SUCCESS), 43000)
    assert node.role == LEADER and node.elector.last_succ_heartbeat == 43000
    assert node.elector.lease_start == 3000 and not node.lease_valid(43000)


def test_no_lease_without_leadership():
    node = won(1000)
    node.elector.change_role_to_candidate(node.term + 1)
    assert node.role == CANDIDATE and node.elector.lease_start == NEVER and not node.lease_valid(1001)
    assert not make().lease_valid(0)  # a fresh candidate


# --- three brokers, a name server, pausable clocks --------------------------------------------------


class PausableNet(Net):
    """Net whose deliveries to a paused node wait for its resume."""

    def __init__(self, clock):
        super().__init__(clock)
        self.paused: set[str] = set()
        self.backlog: dict[str, list] = {}

    def _deliver(self, src, dst, original, code, body):
        if dst in self.paused:
            self.backlog.setdefault(dst, []).append((super()._deliver, (src, dst, original, code, body)))
            return
        super()._deliver(src, dst, original, code, body)

    def _answer(self, src, dst, original, code, raw):
        if dst in self.paused:
            self.backlog.setdefault(dst, []).append((super()._answer, (src, dst, original, code, raw)))
            return
        super()._answer(src, dst, original, code, raw)


class NameServerClient:
    """The registration's RemotingClient, answered by an in-process name server over one connection."""

    def __init__(self, ns: NameServer, peer: str):
        self.registry = ns.processors.registry()
        self.ctx = FakeContext(peer)

    def invoke(self, addr, cmd, timeout=3.0):
        return defer.maybeDeferred(self.registry.get(cmd.code), cmd, self.ctx)

    def close(self, address=None):
        pass


def config_of(tmp_path, self_id):
    k = IDS.index(self_id)
    return BrokerConfig.from_properties(
        {
            "brokerName": GROUP,
            "enableDLegerCommitLog": "true",
            "dLegerGroup": GROUP,
            "dLegerPeers": PEERS,
            "dLegerSelfId": self_id,
            "storePathRootDir": str(tmp_path / self_id),
            "mappedFileSizeCommitLog": str(1 << 16),
            "listenPort": str(30911 + 10 * k),
            "namesrvAddr": "127.0.0.1:9876",
        }
    )


class Server(SimpleNamespace):
    """The BrokerServer the role handler drives; its slave sync stays a fake (no real one is made)."""

    @property
    def slave_sync(self):
        return FakeSync()

    @slave_sync.setter
    def slave_sync(self, _value):
        pass


class Group:
    def __init__(self, tmp_path):
        self.net_clock = task.Clock()
        self.net = PausableNet(self.net_clock)
        self.ns = NameServer(reactor=None, clock=task.Clock())
        self.nodes = {}
        for k, i in enumerate(IDS):
            clock = task.Clock()
            c = config_of(tmp_path, i)
            s = DLedgerMessageStore(
                c.storePathRootDir,
                cq_file_size=20 * 100,
                store_host=("127.0.0.1", 30911 + 10 * k),
                now_ms=lambda clock=clock: int(clock.seconds() * 1000),
            )
            s.configure(
                c,
                reactor=None,
                clock=clock,
                rng=random.Random(k),
                dledger=DLedgerConfig(group=GROUP, selfId=i, peers=PEERS),
            )
            s.start()
            self.net.attach(s)
            s.start_service(listen=False)
            reg = BrokerRegistration(
                c,
                TopicConfigManager(c, clock),
                clock,
                clock,
                client=NameServerClient(self.ns, f"127.0.0.1:{50000 + k}"),
            )
            server = Server(
                config=c,
                controller=SimpleNamespace(store=s),
                clock=clock,
                schedule=None,
                transactions=None,
                pop=None,
                registration=reg,
            )
            roles = DLedgerRoleChangeHandler(server)
            reg.start()
            roles.start()
            self.nodes[i] = SimpleNamespace(store=s, config=c, clock=clock, reg=reg, roles=roles)

    def step(self, dt=0.01):
        for i, n in self.nodes.items():
            if i not in self.net.paused:
                n.clock.advance(dt)
        self.net_clock.advance(dt)

    def pause(self, i):
        self.net.paused.add(i)

    def resume(self, i):
        """SIGCONT: the overdue timers run at the new time (in their order), then what arrived meanwhile."""
        self.net.paused.discard(i)
        n = self.nodes[i]
        n.clock.advance(self.net_clock.seconds() - n.clock.seconds())
        for fn, args in self.net.backlog.pop(i, []):
            fn(*args)

    def ids_in_name_server(self) -> dict[int, str]:
        data = self.ns.routes.broker_addr_table.get(GROUP)
        return dict(data.broker_addrs) if data is not None else {}

    def addr(self, i):
        return self.nodes[i].config.broker_addr

    def master(self):
        ms = [i for i, n in self.nodes.items() if n.config.brokerId == 0]
        return ms[0] if len(ms) == 1 else None

    def run_until(self, cond, within, what):
        for _ in range(int(within / 0.01)):
            self.step()
            if cond():
                return
        raise AssertionError(f"not within {within} s: {what}")

    def close(self):
        for n in self.nodes.values():
            n.roles.stop()
            n.reg.stopped = True
            n.store.shutdown()


@pytest.fixture
def grp(tmp_path):
    g = Group(tmp_path)
    yield g
    g.close()


def elected(g):
    g.run_until(
        lambda: g.master() is not None and g.ids_in_name_server().get(0) == g.addr(g.master()),
        15,
        "a master registered",
    )
    return g.master()


def test_a_leader_with_a_fresh_lease_registers_as_master_and_a_stale_one_does_not(grp):
    lead = elected(grp)
    n = grp.nodes[lead]
    for _ in range(300):  # 3 s: its heartbeat rounds are answered
        grp.step()
    assert n.store.node.elector.last_succ_heartbeat > NEVER
    assert n.store.master_lease_valid() and n.reg.lease_skips == 0
    before = n.reg.registrations
    n.reg.register_all()  # fresh: sent
    assert n.reg.registrations == before + 1
    # its followers go silent: heartbeats are not answered and the lease ages; DLedger steps the leader
    # down only when a heartbeat round ends more than 6 s after the last successful one was answered,
    # a little after the lease (counted from that round's send time) has lapsed
    grp.net.cut.update(i for i in IDS if i != lead)
    lease_end = (n.store.node.elector.lease_start + n.store.node.elector.lease_ms) / 1000.0
    while n.clock.seconds() <= lease_end:
        assert n.store.master_lease_valid()
        grp.step()
    assert n.store.node.role == LEADER and n.config.brokerId == 0 and n.store.writable
    assert not n.store.master_lease_valid()
    n.reg.register_all()
    assert n.reg.registrations == before + 1 and n.reg.lease_skips == 1  # not sent
    assert grp.ids_in_name_server()[0] == grp.addr(lead)  # what it registered before stays
    grp.run_until(lambda: n.config.brokerRole == "SLAVE", 3, "the step-down")
    grp.step()  # its registration under its own id: at once
    assert grp.ids_in_name_server().get(int(lead[1:]) + 1) == grp.addr(lead)
    assert 0 not in grp.ids_in_name_server()  # (nobody else can be elected: the followers are cut)


def test_a_skipped_master_registration_is_tried_again_once_the_lease_is_back(grp):
    lead = elected(grp)
    n = grp.nodes[lead]
    n.store.node.elector.lease_start = NEVER  # as if no quorum had answered for a while
    before = n.reg.registrations
    n.reg.register_all()
    assert n.reg.lease_skips == 1 and n.reg.registrations == before
    n.clock.advance(0)
    assert n.reg.registrations == before  # not before the retry
    for _ in range(int(LEASE_RETRY_S / 0.01) + 2):  # the next heartbeat round (2 s) renews the lease
        grp.step()
    grp.run_until(lambda: n.reg.registrations > before, 3, "the retried registration")
    assert n.store.master_lease_valid() and grp.ids_in_name_server()[0] == grp.addr(lead)


def test_a_paused_old_leader_never_takes_id_0_from_its_successor(grp):
    old = elected(grp)
    L = grp.nodes[old]
    # stop it between heartbeat rounds (none in flight), just after a registration of its own
    grp.run_until(lambda: L.store.node.elector.heartbeat_round is None, 1, "no heartbeat round in flight")
    grp.pause(old)

    def successor():
        return next((i for i in IDS if i != old and grp.nodes[i].config.brokerId == 0), None)

    grp.run_until(lambda: successor() is not None, 20, "a successor")
    new = successor()
    grp.run_until(lambda: grp.ids_in_name_server().get(0) == grp.addr(new), 2, "the successor registered")
    seen = []  # id 0 in the name server after every step from here on

    def check():
        ids = grp.ids_in_name_server()
        seen.append(ids.get(0))
        assert ids.get(0) == grp.addr(new), f"id 0 is {ids.get(0)!r}, not the successor {grp.addr(new)}: {ids}"

    for _ in range(int(32 / 0.01)):  # paused past its periodic registration (registerNameServerPeriod 30 s)
        grp.step()
        check()
    assert L.config.brokerId == 0 and L.store.node.role == LEADER  # it still thinks it leads
    skips, regs = L.reg.lease_skips, L.reg.registrations
    grp.resume(old)
    check()
    assert L.reg.lease_skips > skips  # its overdue periodic registration came and was held back
    slave_id = int(old[1:]) + 1
    # it hears of the new term (the new leader's heartbeats that waited for it), steps down, and
    # registers under its own id at once: on the next reactor turn, here within one 10 ms step
    for _ in range(300):
        if L.config.brokerRole == "SLAVE":
            break
        grp.step()
        check()
    assert L.config.brokerRole == "SLAVE" and L.config.brokerId == slave_id
    if L.reg.registrations == regs:
        grp.step()
        check()
    assert L.reg.registrations == regs + 1 and grp.ids_in_name_server().get(slave_id) == grp.addr(old)
    for _ in range(int(5 / 0.01)):
        grp.step()
        check()
    assert grp.ids_in_name_server() == {
        0: grp.addr(new),
        slave_id: grp.addr(old),
        **{int(i[1:]) + 1: grp.addr(i) for i in IDS if i not in (old, new)},
    }
    assert L.reg.master_addr == grp.addr(new)  # the old leader now follows the new master
    assert set(seen) == {grp.addr(new)}


def test_a_leader_without_the_lease_does_not_unregister_id_0_on_stop(grp):
    # UNREGISTER_BROKER removes its brokerId whatever address holds it (4.9): id 0 may be another's by now
    lead = elected(grp)
    n = grp.nodes[lead]
    n.store.node.elector.lease_start = NEVER
    n.reg.stop()
    assert grp.ids_in_name_server()[0] == grp.addr(lead)
    other = next(grp.nodes[i] for i in IDS if i != lead)
    other.reg.stop()  # a slave (or a master under its lease) unregisters as before
    assert other.config.brokerId not in grp.ids_in_name_server()
