"""rmqha/broker/store/dledger_commitlog.py: the broker's commit log on DLedger, three stores on one task.Clock
with an in-memory network (requests and answers go through their JSON, as on the wire)."""

import random
import struct
from types import SimpleNamespace

import pytest
from twisted.internet import task

from rmqha.broker.config.properties import BrokerConfig
from rmqha.broker.dledger.config import DLedgerConfig
from rmqha.broker.dledger.role_handler import DLedgerRoleChangeHandler
from rmqha.broker.store.dledger_commitlog import BUSY, DLedgerMessageStore
from rmqha.broker.dledger.protocol import decode_request, decode_response, request_code
from rmqha.broker.store import record
from rmqha.broker.store.message_store import PutResult, PutStatus

IDS = ("n0", "n1", "n2")
PEERS = ";".join(f"{i}-127.0.0.1:{40911 + k}" for k, i in enumerate(IDS))


class Net:
    """Delivers each Send to the peer's node a millisecond later, and its answer back; `cut` nodes
    neither send nor receive."""

    def __init__(self, clock):
        self.clock, self.stores, self.cut = clock, {}, set()

    def attach(self, store):
        svc = store.service
        me = store.node.self_id
        self.stores[me] = store

        def send(peer, request):
            code = int(request_code(request))
            body = request.to_json_bytes()
            self.clock.callLater(0.001, self._deliver, me, peer, request, code, body)

        svc.send = send

    def _deliver(self, src, dst, original, code, body):
        if src in self.cut or dst in self.cut:
            return
        target = self.stores[dst]
        if target.closed:
            return
        req = decode_request(code, body)
        answered = []
        target.service._answer = lambda to, response: answered.append((to, response))
        target.service.run(target.node.handle_request(req, target.service.now()))
        for to, response in answered:
            if to is req:
                raw = response.to_json_bytes()
                self.clock.callLater(0.001, self._answer, dst, src, original, code, raw)

    def _answer(self, src, dst, original, code, raw):
        if src in self.cut or dst in self.cut:
            return
        origin = self.stores[dst]
        origin.service.run(origin.node.on_response(src, original, decode_response(code, raw), origin.service.now()))


def broker_config(tmp_path, self_id):
    return BrokerConfig.from_properties(
        {
            "brokerName": "RaftNode00",
            "enableDLegerCommitLog": "true",
            "dLegerGroup": "RaftNode00",
            "dLegerPeers": PEERS,
            "dLegerSelfId": self_id,
            "storePathRootDir": str(tmp_path / self_id),
            "mappedFileSizeCommitLog": str(1 << 16),
            "listenPort": str(30911 + 10 * IDS.index(self_id)),
        }
    )


class FakeSync:
    def set_master_address(self, _addr):
        pass

    def stop(self):
        pass


@pytest.fixture
def group(tmp_path):
    clock = task.Clock()
    net = Net(clock)
    nodes, servers = {}, {}
    for k, i in enumerate(IDS):
        c = broker_config(tmp_path, i)
        s = DLedgerMessageStore(
            c.storePathRootDir,
            cq_file_size=20 * 100,
            store_host=("127.0.0.1", 30911 + 10 * k),
            now_ms=lambda: int(clock.seconds() * 1000),
        )
        s.configure(
            c,
            reactor=None,
            clock=clock,
            rng=random.Random(k),
            dledger=DLedgerConfig(group=c.dLegerGroup, selfId=i, peers=PEERS),
        )
        s.start()
        net.attach(s)
        s.start_service(listen=False)
        server = SimpleNamespace(
            config=c,
            controller=SimpleNamespace(store=s),
            clock=clock,
            schedule=None,
            transactions=None,
            pop=None,
            registration=None,
            slave_sync=FakeSync(),
        )
        roles = DLedgerRoleChangeHandler(server)
        roles.start()
        nodes[i] = (s, c)
        servers[i] = server  # a test may give it a master's service (server.pop) before the election
    yield SimpleNamespace(clock=clock, net=net, nodes=nodes, servers=servers)
    for s, _c in nodes.values():
        s.shutdown()


def advance(clock, seconds, step=0.01):
    for _ in range(int(seconds / step)):
        clock.advance(step)


def master(g):
    ms = [i for i, (_s, c) in g.nodes.items() if c.brokerId == 0]
    return ms[0] if len(ms) == 1 else None


def elect(g, within=15.0):
    for _ in range(int(within / 0.1)):
        advance(g.clock, 0.1)
        if master(g) is not None and all(c.brokerRole for _s, c in g.nodes.values()):
            return master(g)
    raise AssertionError("no master")


def put(store, i, queue_id=0):
    res = store.put_async(
        record.Message(topic="T", body=f"m{i}".encode(), queue_id=queue_id, properties={"UNIQ_KEY": f"U{i}"})
    )
    if isinstance(res, PutResult):
        return [res]
    out = []
    res.addCallback(out.append)
    return out


def test_the_leader_is_master_and_followers_are_slaves_with_self_id_plus_one(group):
    lead = elect(group)
    advance(group.clock, 2)
    for i, (s, c) in group.nodes.items():
        if i == lead:
            assert (c.brokerId, c.brokerRole, s.node.role) == (0, "SYNC_MASTER", "LEADER")
        else:
            assert (c.brokerId, c.brokerRole, s.node.role) == (int(i[1:]) + 1, "SLAVE", "FOLLOWER")


def test_a_send_is_ok_on_quorum_with_its_offset_at_pos_plus_48_on_every_replica(group):
    lead = elect(group)
    leader = group.nodes[lead][0]
    out = put(leader, 0)
    assert out == []  # not before a quorum has it
    advance(group.clock, 0.1)
    [res] = out
    assert res.status == PutStatus.PUT_OK and res.queue_offset == 0
    entry = leader.fs.get(leader.fs.end_index)
    assert res.wrote_offset == entry.pos + 48
    assert record.parse_offset_msg_id(res.msg_id)[1] == entry.pos + 48
    assert struct.unpack_from(">q", entry.body, 28)[0] == entry.pos + 48
    advance(group.clock, 2)  # the followers learn the commit index
    for s, _c in group.nodes.values():
        assert s.fs.get(entry.index) == entry  # byte-identical entries
        assert s.queues[("T", 0)].get(0)[:2] == (entry.pos + 48, res.wrote_bytes)
        assert s.get_messages("T", 0, 0, 1).records[0] == entry.body


def test_a_node_that_is_not_the_leader_answers_busy_at_once(group):
    lead = elect(group)
    follower = next(s for i, (s, _c) in group.nodes.items() if i != lead)
    [res] = put(follower, 1)
    assert res.status == PutStatus.OS_PAGECACHE_BUSY and BUSY in res.remark
    assert res.status.response_code == 1  # SYSTEM_ERROR


def test_no_quorum_answers_busy_after_max_wait_ack_and_nothing_is_dispatched(group):
    lead = elect(group)
    leader = group.nodes[lead][0]
    group.net.cut.update(i for i in IDS if i != lead)
    out = put(leader, 2)
    advance(group.clock, 2.4)
    assert out == []
    advance(group.clock, 0.2)  # maxWaitAckTimeMs 2500 on the reactor's clock
    [res] = out
    assert res.status == PutStatus.OS_PAGECACHE_BUSY and BUSY in res.remark
    assert leader.max_queue_offset("T", 0) == 0  # in the log, never committed: no consume-queue unit


def test_a_new_leader_appends_a_no_op_and_becomes_master_with_the_old_entries_delivered(group):
    lead = elect(group)
    leader = group.nodes[lead][0]
    results = [put(leader, i, queue_id=i % 2) for i in range(6)]
    advance(group.clock, 0.2)
    assert all(r and r[0].status == PutStatus.PUT_OK for r in results)
    group.net.cut.add(lead)  # the leader is gone before the followers learn the last commit
    others = [i for i in IDS if i != lead]
    assert any(group.nodes[i][0].fs.committed_index < group.nodes[i][0].fs.end_index for i in others)
    new = None
    for _ in range(200):
        advance(group.clock, 0.1)
        new = next((i for i in others if group.nodes[i][1].brokerId == 0), None)
        if new is not None:
            break
    assert new is not None
    s = group.nodes[new][0]
    assert s.noops == 1  # an entry of its own term, to commit the old ones (docs/dledger.md)
    assert s.fs.committed_index == s.fs.end_index and s.dispatched_all
    assert [s.max_queue_offset("T", q) for q in (0, 1)] == [3, 3]  # every acked message, no no-op unit
    out = put(s, 6)
    advance(group.clock, 0.2)
    assert out[0].status == PutStatus.PUT_OK and out[0].queue_offset == 3  # queue offsets go on
