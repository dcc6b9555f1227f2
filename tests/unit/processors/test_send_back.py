"""CONSUMER_SEND_MSG_BACK (36) and the group's retry queues, as 4.9.8's asyncConsumerSendMsgBack: the retry
topic has the group's retryQueueNums queues and each send-back goes to one of them at random; the DLQ has
one queue; the name server's route shows the retry topic's queues."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest
from twisted.internet import defer
from twisted.internet.task import Clock

from rmqha.broker.namesrv.register_body import TopicConfig
from rmqha.broker.namesrv.server import NameServer
from rmqha.broker.managers.registration import BrokerRegistration
from rmqha.broker.remoting import json_body
from rmqha.broker.remoting.codes import PERM_READ, PERM_WRITE, RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.store import record

from .harness import TOPIC, Broker, FakeContext, props, send_v1

SEED = 7
SENDS = 60


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path / "a", namesrvAddr="127.0.0.1:9876")
    b.server.send_back.random = random.Random(SEED)
    yield b
    b.stop()


def update_group(broker, **cfg):
    r = broker.call(
        RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=json.dumps(cfg).encode())
    )
    assert r.code == ResponseCode.SUCCESS, r.remark


def stored(broker, body=b"fail me") -> int:
    r = broker.call(send_v1(body=body, properties=props(UNIQ_KEY="U1")))
    assert r.code == ResponseCode.SUCCESS
    return record.parse_offset_msg_id(r.ext_fields["msgId"])[1]


def send_back(broker, phys, group, delay=0, max_times=16, unit_mode="false"):
    return broker.call(
        RemotingCommand.request(
            RequestCode.CONSUMER_SEND_MSG_BACK,
            {
                "offset": str(phys),
                "group": group,
                "delayLevel": str(delay),
                "originMsgId": "",
                "originTopic": TOPIC,
                "unitMode": unit_mode,
                "maxReconsumeTimes": str(max_times),
            },
            version=409,
        )
    )


def per_queue(broker, topic, queues) -> list[int]:
    return [broker.store.max_queue_offset(topic, q) for q in range(queues)]


def deliver_all(broker, topic, queues, total) -> list[int]:
    """Let the schedule service hand the parked retries to their queues (level 3: 10 s), a tick at a time."""
    broker.clock.advance(10)
    for _ in range(60):
        if sum(per_queue(broker, topic, queues)) >= total:
            break
        broker.clock.advance(1)
    return per_queue(broker, topic, queues)


def test_retries_are_spread_over_the_groups_retry_queues(broker):
    update_group(broker, groupName="WIDE", retryQueueNums=3)
    phys = stored(broker)
    for _ in range(SENDS):
        assert send_back(broker, phys, "WIDE").code == ResponseCode.SUCCESS
    tc = broker.server.topics.get("%RETRY%WIDE")
    assert (tc.read_queue_nums, tc.write_queue_nums, tc.perm) == (3, 3, PERM_READ | PERM_WRITE)
    counts = deliver_all(broker, "%RETRY%WIDE", 4, SENDS)
    # one random pick among the 3 queues per send-back (the same seed, the same picks), none past them
    rng = random.Random(SEED)
    expected = Counter(rng.randrange(3) for _ in range(SENDS))
    assert counts == [expected[0], expected[1], expected[2], 0]
    assert all(c > 0 for c in counts[:3]) and sum(counts) == SENDS
    # each delivered retry names its queue and is the message handed back
    for q in range(3):
        res = broker.store.get_messages("%RETRY%WIDE", q, 0, 32)
        msgs = [record.scan(x).message for x in res.records]
        assert {m.properties["REAL_QID"] for m in msgs} == {str(q)}
        assert {(m.body, m.reconsume_times, m.properties["RETRY_TOPIC"]) for m in msgs} == {(b"fail me", 1, TOPIC)}


def test_one_retry_queue_keeps_queue_0(broker):
    update_group(broker, groupName="ONE", retryQueueNums=1)
    phys = stored(broker)
    for _ in range(10):
        assert send_back(broker, phys, "ONE").code == ResponseCode.SUCCESS
    tc = broker.server.topics.get("%RETRY%ONE")
    assert (tc.read_queue_nums, tc.write_queue_nums) == (1, 1)
    assert deliver_all(broker, "%RETRY%ONE", 2, 10) == [10, 0]


def test_an_older_narrower_retry_topic_is_not_written_past_its_queues(broker):
    # the retry topic was made with 1 queue; the group's retryQueueNums raised to 3 later does not change
    # it (as 4.9), and retries stay in the queue the route shows (4.9 would write queues 1 and 2 too)
    update_group(broker, groupName="RAISED", retryQueueNums=1)
    phys = stored(broker)
    assert send_back(broker, phys, "RAISED").code == ResponseCode.SUCCESS
    update_group(broker, groupName="RAISED", retryQueueNums=3)
    for _ in range(9):
        assert send_back(broker, phys, "RAISED").code == ResponseCode.SUCCESS
    assert broker.server.topics.get("%RETRY%RAISED").write_queue_nums == 1
    assert deliver_all(broker, "%RETRY%RAISED", 3, 10) == [10, 0, 0]


def test_dead_letters_go_to_the_one_dlq_queue(broker):
    update_group(broker, groupName="DEAD", retryQueueNums=3)
    phys = stored(broker)
    for _ in range(5):
        assert send_back(broker, phys, "DEAD", delay=-1).code == ResponseCode.SUCCESS
    assert send_back(broker, phys, "DEAD", max_times=0).code == ResponseCode.SUCCESS
    tc = broker.server.topics.get("%DLQ%DEAD")
    assert (tc.read_queue_nums, tc.write_queue_nums, tc.perm) == (1, 1, PERM_READ | PERM_WRITE)
    assert per_queue(broker, "%DLQ%DEAD", 2) == [6, 0]
    assert broker.server.topics.get("%RETRY%DEAD").write_queue_nums == 3  # made first, as 4.9 does


def test_no_retry_queues_means_no_retry(broker):
    update_group(broker, groupName="NONE", retryQueueNums=0)
    phys = stored(broker)
    before = broker.store.max_offset
    r = send_back(broker, phys, "NONE")
    assert r.code == ResponseCode.SUCCESS
    assert broker.server.topics.get("%RETRY%NONE") is None and broker.server.topics.get("%DLQ%NONE") is None
    assert per_queue(broker, "SCHEDULE_TOPIC_XXXX", 18) == [0] * 18
    assert broker.store.max_offset == before  # nothing stored


def test_write_permission_is_checked_on_the_broker_and_the_retry_topic(tmp_path):
    b = Broker(tmp_path / "ro", brokerPermission=PERM_READ)
    try:
        r = send_back(b, 0, "G")
        assert (r.code, r.remark) == (ResponseCode.NO_PERMISSION, "the broker[127.0.0.1] sending message is forbidden")
    finally:
        b.stop()
    b = Broker(tmp_path / "rw")
    try:
        phys = stored(b)
        b.server.topics.update(TopicConfig("%RETRY%G", 1, 1, PERM_READ))
        r = send_back(b, phys, "G")
        assert (r.code, r.remark) == (ResponseCode.NO_PERMISSION, "the topic[%RETRY%G] sending message is forbidden")
    finally:
        b.stop()


def test_unit_mode_marks_the_retry_topic(broker):
    phys = stored(broker)
    assert send_back(broker, phys, "UNIT", unit_mode="true").code == ResponseCode.SUCCESS
    assert broker.server.topics.get("%RETRY%UNIT").topic_sys_flag == 0x2
    assert send_back(broker, phys, "PLAIN", unit_mode="1").code == ResponseCode.SUCCESS  # parseBoolean("1")
    assert broker.server.topics.get("%RETRY%PLAIN").topic_sys_flag == 0


class NameServerClient:
    """The registration's RemotingClient, answered by an in-process name server."""

    def __init__(self, ns: NameServer):
        self.ns = ns
        self.registry = ns.processors.registry()
        self.ctx = FakeContext("127.0.0.1:50002")

    def invoke(self, addr, cmd, timeout=3.0):
        return defer.maybeDeferred(self.registry.get(cmd.code), cmd, self.ctx)

    def close(self, address=None):
        pass


def test_the_name_servers_route_shows_the_retry_queues(broker):
    ns = NameServer(reactor=None, clock=Clock())
    reg = BrokerRegistration(
        broker.config, broker.server.topics, broker.clock, broker.clock, client=NameServerClient(ns)
    )
    reg.start()
    try:
        update_group(broker, groupName="WIDE", retryQueueNums=3)
        assert send_back(broker, stored(broker), "WIDE").code == ResponseCode.SUCCESS
        broker.clock.advance(0)  # the new topic is announced at once
        req = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "%RETRY%WIDE"})
        r = ns.processors.get_route_info_by_topic(req, FakeContext())
        assert r.code == ResponseCode.SUCCESS, r.remark
        [qd] = json_body.loads(r.body)["queueDatas"]
        assert (qd["brokerName"], qd["readQueueNums"], qd["writeQueueNums"], qd["perm"]) == ("broker-a", 3, 3, 6)
    finally:
        reg.stop()
        broker.clock.advance(0)


def test_retries_never_go_to_a_queue_no_consumer_reads(broker):
    # a retry topic whose route shows 1 read queue but 3 write queues (an operator's updateTopic): a
    # retry in queue 1 or 2 would be stored and never consumed, so every pick stays in queue 0
    update_group(broker, groupName="READ1", retryQueueNums=3)
    phys = stored(broker)
    assert send_back(broker, phys, "READ1").code == ResponseCode.SUCCESS  # creates the topic, 3 queues
    before = deliver_all(broker, "%RETRY%READ1", 3, 1)
    broker.server.topics.get("%RETRY%READ1").read_queue_nums = 1
    for _ in range(11):
        assert send_back(broker, phys, "READ1").code == ResponseCode.SUCCESS
    after = deliver_all(broker, "%RETRY%READ1", 3, 12)
    assert [a - b for a, b in zip(after, before)] == [11, 0, 0], (before, after)


def test_a_retry_topic_with_no_usable_queue_is_an_error_not_a_silent_loss(broker):
    update_group(broker, groupName="NOWRITE", retryQueueNums=3)
    phys = stored(broker)
    assert send_back(broker, phys, "NOWRITE").code == ResponseCode.SUCCESS
    broker.server.topics.get("%RETRY%NOWRITE").write_queue_nums = 0
    r = send_back(broker, phys, "NOWRITE")
    assert r.code == ResponseCode.SYSTEM_ERROR and "no queue that is both readable and writable" in r.remark


def test_the_header_cannot_forge_the_origin_message_id(broker):
    phys = stored(broker)
    r = broker.call(
        RemotingCommand.request(
            RequestCode.CONSUMER_SEND_MSG_BACK,
            {
                "offset": str(phys),
                "group": "G",
                "delayLevel": "-1",
                "originMsgId": "FORGED",
                "originTopic": TOPIC,
                "unitMode": "false",
                "maxReconsumeTimes": "16",
            },
            version=409,
        )
    )
    assert r.code == ResponseCode.SUCCESS, r.remark
    m = dead_letter(broker, "G")
    assert m.properties["ORIGIN_MESSAGE_ID"] != "FORGED"
    assert record.parse_offset_msg_id(m.properties["ORIGIN_MESSAGE_ID"])[1] == phys  # the original's own id


def test_reconsume_times_at_the_int32_limit_wraps_as_java_does(broker):
    r = broker.call(send_v1(body=b"old", properties=props(UNIQ_KEY="U9"), reconsumeTimes=2**31 - 1))
    assert r.code == ResponseCode.SUCCESS
    phys = record.parse_offset_msg_id(r.ext_fields["msgId"])[1]
    r = send_back(broker, phys, "G")
    assert r.code == ResponseCode.SUCCESS, r.remark  # over maxReconsumeTimes: to the DLQ, stored
    assert dead_letter(broker, "G").reconsume_times == -(2**31)


def dead_letter(broker, group):
    got = broker.store.get_messages(f"%DLQ%{group}", 0, 0, 1)
    (raw,) = got.records
    return record.scan(raw).message
