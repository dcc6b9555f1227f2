"""A new DLedger leader that never had a topic its old leader had (issue 35).

RocketMQ 4.9.8 in this case: the follower's topic table is whatever its SlaveSynchronize last copied (every
10 s, from a master address it learns only on a registration), so a topic created on the leader since then
is missing on it. DLedgerRoleChangeHandler's LEADER branch makes it master (changeToMaster: the slave sync
stopped, brokerId 0, registerBrokerAll with its own table, which does not name the topic; the name server
keeps the topic's queue data for the broker name, now routed to the new master). The first send to the topic
goes through AbstractSendMessageProcessor.msgCheck: the topic is unknown, so
TopicConfigManager.createTopicInSendMessageMethod creates it from the request's defaultTopic (TBW102, which
every broker has while autoCreateTopicEnable is true): min(defaultTopicQueueNums of the request (4 from the
official clients), TBW102's writeQueueNums) queues, TBW102's perm without INHERIT (6), then
registerBrokerAll at once. So the send is accepted: no wait, no sync, nothing on the name server first.

Ours must do the same. Three broker stores on an in-memory network with an in-process name server (the
harness of test_dledger_lease.py; it has no slave sync, so a follower never copies the leader's topics:
the seed-3 chaos case of docs/chaos-matrix.md, where the new leader had synced 54 ms before the topic was
created). Measured with the official client on real processes and in chaos runs (docs/chaos-matrix.md),
ours and 4.9.8 alike take the first send the client sends the new master; the outage there is the C++
client's route refresh.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rmqha.broker.managers.topics import AUTO_CREATE_TOPIC_KEY, TopicConfig
from rmqha.broker.namesrv.route_info import same_version
from rmqha.broker.observability.metrics import Registry
from rmqha.broker.processors.send import SendProcessor
from rmqha.broker.remoting.codes import ResponseCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.cluster.requests import props, send_v1, send_v2

from .test_dledger_commitlog import IDS
from .test_dledger_lease import Group, elected

TOPIC = "TopicChaos"


class Ctx:
    peer_address = "127.0.0.1:50001"


def send_processor(node) -> SendProcessor:
    """The broker's send path over this node's store and topic table (the one it registers)."""
    store = node.store
    controller = SimpleNamespace(
        metrics=Registry(),
        store=store,
        seams=SimpleNamespace(active=False),
        writes_held=False,
        put=lambda m, wait_store_ok=True: store.put_async(m),
        stats=SimpleNamespace(table=SimpleNamespace(on_put=lambda *a: None)),
    )
    return SendProcessor(node.config, controller, node.reg.topics)


@pytest.fixture
def grp(tmp_path):
    g = Group(tmp_path)
    yield g
    g.close()


def route(g, topic):
    return g.ns.routes.pickup_topic_route(topic)


@pytest.mark.parametrize("make_send", [send_v1, send_v2], ids=["cpp1-code10", "cpp2-code310"])
def test_a_new_leader_without_the_topic_takes_the_first_send_as_4_9_does(grp, make_send):
    old = elected(grp)
    # the topic is created on the leader (UPDATE_AND_CREATE_TOPIC, as the chaos kit does) and registered
    grp.nodes[old].reg.topics.update(TopicConfig(TOPIC, 4, 4, 6))
    grp.run_until(lambda: route(grp, TOPIC) is not None, 2, "the topic's route")
    followers = [i for i in IDS if i != old]
    assert all(grp.nodes[i].reg.topics.get(TOPIC) is None for i in followers)  # never synced

    grp.pause(old)  # dead to the group from here on (the kill-leader fault)

    def successor():
        return next((i for i in followers if grp.nodes[i].config.brokerId == 0), None)

    grp.run_until(lambda: successor() is not None, 20, "a new master")
    new = successor()
    n = grp.nodes[new]
    became_master = n.clock.seconds()
    grp.run_until(lambda: grp.ids_in_name_server().get(0) == grp.addr(new), 1, "the new master registered")
    assert n.reg.topics.get(TOPIC) is None  # it registered its own table, without the topic
    # the name server keeps the topic's queue data for the broker name: the client's next route names the
    # new master for it (4.9.8's RouteInfoManager removes no topic a registration leaves out)
    r = route(grp, TOPIC)
    assert r is not None and r["brokerDatas"][0]["brokerAddrs"]["0"] == grp.addr(new)

    # the official client's send: topic, defaultTopic TBW102, defaultTopicQueueNums 4, a queue of the route
    req = make_send(TOPIC, b"after-failover", 3, props(UNIQ_KEY="U-failover", WAIT="true"))
    version_before = dict(n.reg.topics.data_version)
    answer = send_processor(n).process(req, Ctx())
    got: list[RemotingCommand] = []
    if isinstance(answer, RemotingCommand):
        got.append(answer)
    else:
        answer.addCallback(got.append)
    grp.run_until(lambda: bool(got), 3, "the send's answer (a quorum of the two live nodes)")
    [resp] = got
    assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
    assert resp.ext_fields["queueId"] == "3"
    took = n.clock.seconds() - became_master
    assert took < 0.5, f"the first send after the role change was accepted {took:.2f} s after it"

    # created from TBW102 as createTopicInSendMessageMethod creates it
    tbw102 = n.reg.topics.get(AUTO_CREATE_TOPIC_KEY)
    tc = n.reg.topics.get(TOPIC)
    assert tc is not None
    assert (tc.read_queue_nums, tc.write_queue_nums) == (min(4, tbw102.write_queue_nums),) * 2 == (4, 4)
    assert tc.perm == tbw102.perm & ~1 == 6
    # and registered at once (registerBrokerAll): the name server holds the table that names it
    assert n.reg.topics.data_version != version_before
    grp.run_until(
        lambda: same_version(grp.ns.routes.query_broker_data_version(grp.addr(new)), n.reg.topics.data_version),
        1,
        "the registration of the table with the new topic",
    )
    qd = route(grp, TOPIC)["queueDatas"]
    assert [(q["brokerName"], q["writeQueueNums"], q["perm"]) for q in qd] == [("RaftNode00", 4, 6)]
