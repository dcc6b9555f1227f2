"""Review 2's DLedger findings (/tmp/helpers/review-2.md A1-A5), each as a regression test on task.Clock and
the in-memory network of test_dledger_commitlog.py."""

import json
import os
import random
from types import SimpleNamespace

import pytest
from twisted.internet import task

from rmqha.broker.dledger.config import DLedgerConfig
from rmqha.broker.dledger.role_handler import DLedgerRoleChangeHandler
from rmqha.broker.store.dledger_commitlog import DLedgerMessageStore
from rmqha.broker.store.message_store import PutStatus

from .test_dledger_commitlog import IDS, PEERS, FakeSync, Net, advance, broker_config, elect, put


class Group:
    def __init__(self, tmp_path):
        self.tmp_path = tmp_path
        self.clock = task.Clock()
        self.net = Net(self.clock)
        self.nodes = {}
        self.roles = {}
        for i in IDS:
            self.boot(i, broker_config(tmp_path, i))

    def boot(self, i, c):
        k = IDS.index(i)
        clock = self.clock
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
        self.net.attach(s)
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
        roles._start_slave_sync = lambda: None
        roles.start()
        self.nodes[i] = (s, c)
        self.roles[i] = roles
        return s

    def kill(self, i):
        """kill -9: no shutdown, no flush of anything but what is on disk already."""
        s = self.nodes[i][0]
        for loop in s.service.loops:
            loop.stop()
        s.closed = True
        s.fs.release()
        os.close(s._lock_fd)
        for q in s.queues.values():
            q.close()
        del self.net.stores[i]
        self.net.cut.add(i)

    def close(self):
        for s, _c in self.nodes.values():
            if not s.closed:
                s.shutdown()


@pytest.fixture
def grp(tmp_path):
    g = Group(tmp_path)
    yield g
    g.close()


def bodies(store, topic="T", queue_id=0):
    from rmqha.broker.store import record

    cq = store.queues[(topic, queue_id)]
    out = []
    for q in range(cq.max_index):
        recs = store.get_messages(topic, queue_id, q, 1).records
        out.append(record.scan(recs[0], 0, check_crc=False).message.body if recs else None)
    return out


# --- A1: a restarted leader takes no send before change_to_master -----------------------------------------


def test_a_restarted_leader_refuses_sends_until_it_is_master_and_no_acked_message_is_lost(grp):
    lead = elect(grp)
    s, c = grp.nodes[lead]
    first = [put(s, n) for n in range(2)]
    advance(grp.clock, 0.2)
    assert [r[0].queue_offset for r in first] == [0, 1]
    [put(s, n) for n in (2, 3)]  # on the followers, the leader dies before the commit spreads
    grp.clock.advance(0.0015)
    grp.kill(lead)
    advance(grp.clock, 0.5)
    grp.net.cut.discard(lead)
    c.brokerRole, c.brokerId = "ASYNC_MASTER", -1  # a fresh process: the file's role
    s = grp.boot(lead, c)
    assert s.max_queue_offset("T", 0) < s.fs.end_index + 1  # its consume queue is behind its log
    refused = None
    for _ in range(3000):
        grp.clock.advance(0.0005)
        if s.node.role == "LEADER":
            refused = put(s, 99)
            break
    assert refused is not None, "the restarted node did not lead again (the scenario needs it to)"
    [res] = refused
    assert res.status == PutStatus.OS_PAGECACHE_BUSY, res  # not writable until change_to_master
    assert "not master yet" in res.remark
    advance(grp.clock, 2)
    assert c.brokerId == 0 and c.brokerRole == "SYNC_MASTER"
    acked = put(s, 100)
    advance(grp.clock, 2)
    assert acked[0].status == PutStatus.PUT_OK and acked[0].queue_offset == 4
    for st, _c in grp.nodes.values():
        assert bodies(st) == [b"m0", b"m1", b"m2", b"m3", b"m100"]
        assert st.queues[("T", 0)].misplaced == 0


def test_a_committed_record_whose_queue_offset_is_taken_fails_its_send_instead_of_vanishing(grp):
    lead = elect(grp)
    advance(grp.clock, 0.5)
    s = grp.nodes[lead][0]
    first = put(s, 0)
    advance(grp.clock, 0.2)
    assert first[0].status == PutStatus.PUT_OK
    # the next queue offset is held already (what A1's window did): the consume queue cannot place it
    s.queue_offsets[("T", 0)] = 0
    out = put(s, 1)
    advance(grp.clock, 0.5)
    [res] = out
    assert res.status == PutStatus.UNKNOWN_ERROR and "holds another message" in res.remark
    assert s.queues[("T", 0)].misplaced == 1 and s.status()["misplacedUnits"] == 1
    assert bodies(s) == [b"m0"]


# --- A2: integers in Java's ranges, no absurd term, one bad message never freezes a node -------------------


def test_integers_past_java_long_or_int_are_refused_by_the_decoder():
    from rmqha.broker.dledger.protocol import HeartBeatRequest, ProtocolError, PushEntryRequest, decode_request

    base = {"group": "g", "remoteId": "n1", "localId": "n0", "leaderId": "n0"}
    assert HeartBeatRequest.from_json({**base, "term": 2**63 - 1}).term == 2**63 - 1
    for bad in ({**base, "term": 2**63}, {**base, "term": -(2**63) - 1}, {**base, "code": 2**31}):
        with pytest.raises(ProtocolError, match="out of range"):
            HeartBeatRequest.from_json(bad)
    entry = {"index": 0, "term": 1, "pos": 0, "size": 2**31, "magic": 1, "body": ""}
    with pytest.raises(ProtocolError, match="entry.size"):
        decode_request(51004, json.dumps(PushEntryRequest(**base, term=1).to_json() | {"entry": entry}))


def test_a_heartbeat_with_an_absurd_term_is_refused_and_the_group_keeps_writing(grp):
    from rmqha.broker.dledger.protocol import HeartBeatRequest, ResponseCode

    MAX_TERM = 1 << 62  # node.MAX_TERM
    lead = elect(grp)
    advance(grp.clock, 0.5)
    victim = next(i for i in IDS if i != lead)
    s = grp.nodes[victim][0]
    answers = []
    s.service._answer = lambda to, r: answers.append(r)
    for term in (MAX_TERM + 1, 2**63 - 1):
        hb = HeartBeatRequest(group="RaftNode00", remoteId=victim, localId=lead, leaderId=lead, term=term)
        s.service.run(s.node.handle_request(hb, s.service.now()))
    assert [a.code for a in answers] == [ResponseCode.UNEXPECTED_ARGUMENT] * 2
    advance(grp.clock, 5)
    terms = {st.node.term for st, _c in grp.nodes.values()}
    assert max(terms) < 10, terms
    leader = grp.nodes[lead][0]
    out = put(leader, 7)
    advance(grp.clock, 0.5)
    assert out[0].status == PutStatus.PUT_OK


def test_a_failing_effect_does_not_drop_the_effects_after_it_nor_stop_the_tick(grp):
    from rmqha.broker.dledger.effects import AppendDone, Committed

    lead = elect(grp)
    s = grp.nodes[lead][0]
    svc = s.service
    answered = []
    token = SimpleNamespace(callback=answered.append)

    def boom(_eff):
        raise OSError(28, "No space left on device")

    svc.on_effect = boom
    svc.run([Committed(0, 1), AppendDone(token, "resp")])
    assert answered == ["resp"] and svc.stats["effect_errors"] == 2
    ticks = []

    def bad_tick(now):
        ticks.append(now)
        raise RuntimeError("a bug in the core")

    s.node.tick = bad_tick
    advance(grp.clock, 0.1)
    assert len(ticks) >= 5 and all(loop.running for loop in svc.loops)
    assert svc.stats["loop_errors"] >= 5


# --- A5: dispatch advances only after its writes -----------------------------------------------------------


def test_a_disk_error_in_dispatch_loses_nothing_and_the_send_is_answered(grp, monkeypatch):
    from rmqha.broker.store import consume_queue

    lead = elect(grp)
    advance(grp.clock, 0.5)
    s = grp.nodes[lead][0]
    real = consume_queue.ConsumeQueue.put_many
    failures = []

    def flaky(self, units, misplaced=None):
        if not failures:
            failures.append(units)
            raise OSError(28, "No space left on device")
        return real(self, units, misplaced)

    monkeypatch.setattr(consume_queue.ConsumeQueue, "put_many", flaky)
    out = put(s, 0)
    advance(grp.clock, 0.05)
    assert failures and out and out[0].status == PutStatus.PUT_OK  # answered: the entry is committed
    assert s.max_queue_offset("T", 0) == 0 and not s.dispatched_all  # not marked dispatched
    advance(grp.clock, 1.5)  # the retry
    assert s.dispatched_all and bodies(s) == [b"m0"] and s.status()["dispatchFailures"] == 1
