"""POP's revive service in DLedger mode (rmqha/broker/dledger/role_handler.py): it runs on the leader only,
started on the role change to master and stopped on the change away (5.x's changeSpecialServiceStatus),
and after a leader change the new leader revives what was popped from the old one and not acked: the
checkpoints and acks are records of rmq_sys_REVIVE_LOG_<cluster> in the DLedger log like any message.
Three real stores with a real PopService each, on one task.Clock and the in-memory network of
test_dledger_commitlog.py."""

from twisted.internet import defer
from twisted.python.failure import Failure

from rmqha.broker.managers.consumer_offsets import ConsumerOffsetManager
from rmqha.broker.managers.topics import TopicConfigManager
from rmqha.broker.pop import checkpoint as cp
from rmqha.broker.pop.service import PopService
from rmqha.broker.store import record
from rmqha.broker.store.message_store import GetStatus

from .test_dledger_commitlog import advance, elect, put

GROUP = "GPOP"
TOPIC = "T"  # test_dledger_commitlog.put's topic
RETRY = cp.retry_topic(GROUP, TOPIC)
INVISIBLE_MS = 30_000


def with_pop(g) -> dict:
    """A PopService on every node's server, before the election (the role handler starts and stops it)."""
    svcs = {}
    for i, (s, c) in g.nodes.items():
        topics = TopicConfigManager(c, g.clock)
        topics.create_in_send_back(TOPIC, 1)

        def put_message(msg, _wait, s=s):
            res = s.put_async(msg)  # answered once a quorum has it (the controller's DLedger path)
            return res if isinstance(res, defer.Deferred) else defer.succeed(res)

        svcs[i] = g.servers[i].pop = PopService(
            c, s, put_message, ConsumerOffsetManager(c.storePathRootDir, g.clock), topics, g.clock
        )
    return svcs


def running(svcs) -> set:
    return {i for i, p in svcs.items() if p.running}


def settle(g, d: defer.Deferred, seconds: float = 1.0):
    out = []
    d.addBoth(out.append)
    advance(g.clock, seconds)
    assert out, "not answered"
    if isinstance(out[0], Failure):
        out[0].raiseException()
    return out[0]


def new_master(g, old: str, within: float = 30.0) -> str:
    """One of the other two, master (the cut one may still think it is, until it steps down)."""
    for _ in range(int(within / 0.1)):
        advance(g.clock, 0.1)
        m = next((i for i, (_s, c) in g.nodes.items() if i != old and c.brokerId == 0), None)
        if m is not None:
            return m
    raise AssertionError("no new master")


def retried(store) -> list[tuple[bytes, int]]:
    res = store.get_messages(RETRY, 0, 0, 32)
    if res.status != GetStatus.FOUND:
        return []
    msgs = [record.scan(r, 0, check_crc=False).message for r in res.records]
    return [(m.body, m.reconsume_times) for m in msgs if m is not None]


def test_the_revive_service_runs_on_the_leader_only_and_moves_with_leadership(group):
    svcs = with_pop(group)
    lead = elect(group)
    advance(group.clock, 1)
    assert running(svcs) == {lead}
    group.net.cut.add(lead)
    new = new_master(group, lead)
    advance(group.clock, 10)  # the cut leader misses its heartbeats' quorum and steps down
    assert group.nodes[lead][1].brokerRole == "SLAVE"
    assert running(svcs) == {new}


def test_a_new_leader_revives_what_the_old_one_popped_and_was_not_acked(group):
    svcs = with_pop(group)
    lead = elect(group)
    leader = group.nodes[lead][0]
    for i in range(3):
        put(leader, i)
    advance(group.clock, 0.2)
    _t, msgs, _rest = settle(group, svcs[lead].pop(GROUP, TOPIC, 0, 32, INVISIBLE_MS, None))
    assert sorted(m.body for m in msgs) == [b"m0", b"m1", b"m2"]
    acked = next(m for m in msgs if m.body == b"m1")
    extra = cp.parse_extra_info(acked.properties[cp.PROPERTY_POP_CK])
    settle(group, svcs[lead].ack(GROUP, TOPIC, 0, extra, acked.queue_offset))
    advance(group.clock, 2)  # the followers learn the commit of the ack record
    group.net.cut.add(lead)  # the old leader is gone before the invisible time is over
    new = new_master(group, lead)
    store = group.nodes[new][0]
    assert retried(store) == []  # not before the invisible time
    advance(group.clock, INVISIBLE_MS / 1000 + 3)
    # the unacked two are back on the retry topic, attempt 2; the acked one is not
    assert sorted(retried(store)) == [(b"m0", 1), (b"m2", 1)]
    assert svcs[new].revived == 2 and svcs[lead].revived == 0
    # and a pop from the new leader hands them out again
    _t, again, _rest = settle(group, svcs[new].pop(GROUP, TOPIC, -1, 32, INVISIBLE_MS, None))
    assert sorted(m.body for m in again) == [b"m0", b"m2"]
    assert all(m.topic == RETRY and m.reconsume_times == 1 for m in again)
