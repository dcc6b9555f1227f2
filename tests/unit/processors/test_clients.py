import json

from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand

from .harness import TOPIC, Broker, FakeContext


def heartbeat(client_id, group="CG", sub="*", producer=None):
    body = {
        "clientID": client_id,
        "consumerDataSet": [
            {
                "groupName": group,
                "consumeType": 1,
                "messageModel": 1,
                "consumeFromWhere": 0,
                "subscriptionDataSet": [{"topic": TOPIC, "subString": sub, "subVersion": "1"}],
            }
        ],
    }
    if producer:
        body["producerDataSet"] = [{"groupName": producer}]
    return RemotingCommand.request(RequestCode.HEART_BEAT, body=json.dumps(body).encode())


def consumer_list(group="CG"):
    return RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})


def notified(ctx):
    return [c for c in ctx.sent if c.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED]


def test_membership_changes_notify_every_member(tmp_path):
    b = Broker(tmp_path / "a")
    try:
        c1, c2 = FakeContext("127.0.0.1:1"), FakeContext("127.0.0.1:2")
        assert b.call(heartbeat("c1"), c1).code == ResponseCode.SUCCESS
        assert len(notified(c1)) == 1
        b.call(heartbeat("c1"), c1)  # a plain refresh is no change
        assert len(notified(c1)) == 1
        b.call(heartbeat("c2"), c2)
        assert len(notified(c1)) == 2 and len(notified(c2)) == 1
        assert notified(c1)[-1].ext_fields == {"consumerGroup": "CG"}
        r = b.call(consumer_list())
        assert json.loads(r.body) == {"consumerIdList": ["c1", "c2"]}
        c2.close()  # the channel closes: c2 leaves, c1 is told
        assert len(notified(c1)) == 3
        assert json.loads(b.call(consumer_list()).body)["consumerIdList"] == ["c1"]
        b.call(heartbeat("c1", sub="tagX"), c1)  # subscription changed
        assert len(notified(c1)) == 4
        assert b.server.clients.subscription_of("CG", TOPIC) == "tagX"
        unreg = RemotingCommand.request(
            RequestCode.UNREGISTER_CLIENT, {"clientID": "c1", "consumerGroup": "CG", "producerGroup": ""}
        )
        assert b.call(unreg, c1).code == ResponseCode.SUCCESS
        assert b.call(consumer_list()).code == ResponseCode.SYSTEM_ERROR
    finally:
        b.stop()


def test_notifications_follow_the_broker_switch_and_the_groups_flag(tmp_path):
    """4.9.8: brokerConfig.notifyConsumerIdsChangedEnable silences every notification; a group's own
    flag silences the ones of its heartbeats and unregisters, while a closed connection still notifies."""
    b = Broker(tmp_path / "off", notifyConsumerIdsChangedEnable=False)
    try:
        c1, c2 = FakeContext("127.0.0.1:1"), FakeContext("127.0.0.1:2")
        b.call(heartbeat("c1"), c1)
        b.call(heartbeat("c2"), c2)
        c2.close()
        assert notified(c1) == [] and notified(c2) == []
    finally:
        b.stop()
    b = Broker(tmp_path / "group")
    try:
        quiet = RemotingCommand.request(
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
            body=json.dumps({"groupName": "CG", "notifyConsumerIdsChangedEnable": False}).encode(),
        )
        assert b.call(quiet).code == ResponseCode.SUCCESS
        c1, c2, c3 = FakeContext("127.0.0.1:1"), FakeContext("127.0.0.1:2"), FakeContext("127.0.0.1:3")
        b.call(heartbeat("c1"), c1)
        b.call(heartbeat("c2"), c2)
        b.call(heartbeat("c3"), c3)
        b.call(heartbeat("c1", sub="tagX"), c1)
        unreg = RemotingCommand.request(
            RequestCode.UNREGISTER_CLIENT, {"clientID": "c3", "consumerGroup": "CG", "producerGroup": ""}
        )
        b.call(unreg, c3)
        assert notified(c1) == [] and notified(c2) == []
        c2.close()  # 4.9's doChannelCloseEvent does not read the group's flag
        assert len(notified(c1)) == 1
    finally:
        b.stop()


def test_silent_clients_expire(tmp_path):
    b = Broker(tmp_path / "a")
    try:
        c1, c2 = FakeContext("127.0.0.1:1"), FakeContext("127.0.0.1:2")
        b.call(heartbeat("c1", producer="PG"), c1)
        b.clock.advance(60)
        b.call(heartbeat("c2"), c2)
        b.clock.advance(70)  # c1 silent for 130 s, c2 for 70 s
        assert c1.closed and not c2.closed
        assert json.loads(b.call(consumer_list()).body)["consumerIdList"] == ["c2"]
        assert "PG" not in b.server.clients.producer_groups
    finally:
        b.stop()


def test_lock_batch_mq(tmp_path):
    b = Broker(tmp_path / "a")
    try:
        mqs = [{"topic": TOPIC, "brokerName": "broker-a", "queueId": i} for i in range(2)]

        def lock(client, mq_set):
            req = RemotingCommand.request(
                RequestCode.LOCK_BATCH_MQ,
                body=json.dumps({"consumerGroup": "CG", "clientId": client, "mqSet": mq_set}).encode(),
            )
            return json.loads(b.call(req).body)["lockOKMQSet"]

        assert len(lock("c1", mqs)) == 2
        assert lock("c2", mqs) == []
        b.clock.advance(61)
        assert len(lock("c2", mqs[:1])) == 1
        unlock = RemotingCommand.request(
            RequestCode.UNLOCK_BATCH_MQ,
            body=json.dumps({"consumerGroup": "CG", "clientId": "c2", "mqSet": mqs[:1]}).encode(),
        )
        assert b.call(unlock).code == ResponseCode.SUCCESS
        assert len(lock("c1", mqs[:1])) == 1
    finally:
        b.stop()
