"""The official Apache RocketMQ C++ client (PyPI rocketmq 0.4.4) against our name server.

A fake broker is registered with REGISTER_BROKER through our own client. The C++ producer, run in
a child process so a crash in native code cannot take pytest down, must fetch the route from our
name server, connect to the fake broker's address and send the message (code 10 or 310). The fake broker
answers SUCCESS, so send_sync returning SEND_OK also shows the client accepts our reply frames.
"""

import importlib.util
import json
import os
import sys

from twisted.internet import defer, protocol, reactor
from twisted.trial import unittest

from rmqha.broker.namesrv.register_body import RegisterBrokerBody, TopicConfig, body_crc32
from rmqha.broker.namesrv.server import NameServer
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.remoting.protocol import ProcessorRegistry, RemotingClient, RemotingServerFactory

TOPIC = "CppRouteTopic"
PRODUCER_TIMEOUT_S = 60  # the child normally finishes in a few seconds

PRODUCER_SCRIPT = r"""
import json, sys
from rocketmq.client import Message, Producer
producer = Producer("cpp-route-probe")
producer.set_namesrv_addr(sys.argv[1])
producer.start()
try:
    msg = Message(sys.argv[2])
    msg.set_keys("probe-key")
    msg.set_tags("probe-tag")
    msg.set_body("hello from the C++ client")
    result = producer.send_sync(msg)
    print(json.dumps({"status": int(result.status), "msg_id": result.msg_id, "offset": result.offset}))
    sys.stdout.flush()
finally:
    producer.shutdown()
"""


class _Collect(protocol.ProcessProtocol):
    def __init__(self):
        self.out, self.err = bytearray(), bytearray()
        self.done = defer.Deferred()

    def outReceived(self, data):
        self.out += data

    def errReceived(self, data):
        self.err += data

    def processEnded(self, reason):
        self.done.callback(getattr(reason.value, "exitCode", None))


def run_producer(ns_address: str, topic: str) -> defer.Deferred:
    """Run the C++ producer in a child; fires with (exit code, stdout, stderr); killed at the deadline."""
    proc = _Collect()
    transport = reactor.spawnProcess(
        proc, sys.executable, [sys.executable, "-c", PRODUCER_SCRIPT, ns_address, topic], env=dict(os.environ)
    )
    killer = reactor.callLater(PRODUCER_TIMEOUT_S, transport.signalProcess, "KILL")

    def finished(code):
        if killer.active():
            killer.cancel()
        return code, bytes(proc.out).decode(errors="replace"), bytes(proc.err).decode(errors="replace")

    return proc.done.addCallback(finished)


class CppClientTest(unittest.TestCase):
    timeout = PRODUCER_TIMEOUT_S + 30

    def setUp(self):
        if importlib.util.find_spec("rocketmq") is None:
            raise unittest.SkipTest("PyPI package rocketmq (C++ client) is not installed")
        self.ns = NameServer(reactor)
        self.ns_port = self.ns.listen(0, "127.0.0.1")
        self.ns_address = f"127.0.0.1:{self.ns_port.getHost().port}"
        # Record what reaches the name server's route processor.
        self.route_requests = []
        route_processor = self.ns.factory.registry.get(RequestCode.GET_ROUTEINFO_BY_TOPIC)

        def recording_route(req, ctx):
            self.route_requests.append(req)
            return route_processor(req, ctx)

        self.ns.factory.registry.register(RequestCode.GET_ROUTEINFO_BY_TOPIC, recording_route)

        self.broker_requests = []
        broker_registry = ProcessorRegistry()
        for code in (
            RequestCode.HEART_BEAT,
            RequestCode.UNREGISTER_CLIENT,
            RequestCode.SEND_MESSAGE,
            RequestCode.SEND_MESSAGE_V2,
        ):
            broker_registry.register(code, self.fake_broker)
        self.broker_factory = RemotingServerFactory(broker_registry)
        self.broker_port = reactor.listenTCP(0, self.broker_factory, interface="127.0.0.1")
        self.broker_address = f"127.0.0.1:{self.broker_port.getHost().port}"
        self.client = RemotingClient(reactor)

    @defer.inlineCallbacks
    def tearDown(self):
        self.client.close()
        for ctx in list(self.broker_factory.connections):
            ctx.close()
        yield self.broker_port.stopListening()
        yield self.ns.stop()

    def fake_broker(self, req: RemotingCommand, ctx) -> RemotingCommand:
        self.broker_requests.append(req)
        if req.code not in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2):
            return req.make_response()
        queue_id = req.get_str("e" if req.code == RequestCode.SEND_MESSAGE_V2 else "queueId")
        port = self.broker_port.getHost().port
        offset_msg_id = f"7F000001{port:08X}{1234:016X}"  # store ip, port, commitlog offset
        return req.make_response(
            ResponseCode.SUCCESS,
            ext_fields={
                "msgId": offset_msg_id,
                "queueId": queue_id,
                "queueOffset": "42",
                "MSG_REGION": "DefaultRegion",
                "TRACE_ON": "true",
            },
        )

    @defer.inlineCallbacks
    def register_fake_broker(self):
        body = RegisterBrokerBody({TOPIC: TopicConfig(TOPIC, 4, 4, 6)}, {"counter": 1, "timestamp": 1}).encode()
        resp = yield self.client.invoke(
            self.ns_address,
            RemotingCommand.request(
                RequestCode.REGISTER_BROKER,
                {
                    "brokerName": "fake-broker-a",
                    "brokerAddr": self.broker_address,
                    "clusterName": "DefaultCluster",
                    "haServerAddr": "127.0.0.1:1",
                    "brokerId": 0,
                    "compressed": False,
                    "bodyCrc32": body_crc32(body),
                },
                body,
                language="JAVA",
            ),
        )
        self.assertEqual(resp.code, ResponseCode.SUCCESS)

    @defer.inlineCallbacks
    def test_cpp_producer_routes_through_our_name_server(self):
        yield self.register_fake_broker()
        code, out, err = yield run_producer(self.ns_address, TOPIC)
        details = f"exit={code}\nstdout={out}\nstderr={err}\nbroker saw={self.broker_requests}"

        # 1. The C++ client asked our name server for the topic's route, and parsed the answer...
        topics = [r.ext_fields.get("topic") for r in self.route_requests]
        self.assertIn(TOPIC, topics, details)
        cpp = [r for r in self.route_requests if r.ext_fields.get("topic") == TOPIC][0]
        self.assertEqual(cpp.language, "CPP", details)

        # 2. ...because it then connected to the broker address registered there and sent the message.
        # The C++ 2.x client sends SEND_MESSAGE_V2 (310, short keys); the 1.0.1 build bundled in
        # PyPI rocketmq 0.4.4 sends SEND_MESSAGE (10, long keys). Either proves the route was used.
        sends = [r for r in self.broker_requests if r.code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2)]
        self.assertTrue(sends, details)
        send = sends[0]
        v2 = send.code == RequestCode.SEND_MESSAGE_V2

        def field(short: str, long: str) -> str:
            return send.ext_fields[short if v2 else long]

        self.assertEqual(field("b", "topic"), TOPIC)
        self.assertEqual(field("c", "defaultTopic"), "TBW102")
        self.assertEqual(field("a", "producerGroup"), "cpp-route-probe")
        self.assertIn(int(field("e", "queueId")), range(4))
        self.assertIn("TAGS\x01probe-tag\x02", field("i", "properties"))
        self.assertEqual(send.body, b"hello from the C++ client")

        # 3. Our reply frame was accepted: send_sync returned SEND_OK with our queue offset.
        self.assertEqual(code, 0, details)
        result = json.loads(out.strip().splitlines()[-1])
        self.assertEqual(result["status"], 0, details)
        self.assertEqual(result["offset"], 42, details)

    @defer.inlineCallbacks
    def test_cpp_producer_without_route_fails_cleanly(self):
        # No broker registered: the name server answers TOPIC_NOT_EXIST and the client gives up.
        code, out, err = yield run_producer(self.ns_address, "NoSuchTopicAnywhere")
        # cleanly: a Python exception (exit code 1) naming the cause, not a native crash (a signal: no code)
        self.assertEqual(code, 1, err[-2000:])
        self.assertIn("No route info of this topic", err)
        self.assertIn("NoSuchTopicAnywhere", [r.ext_fields.get("topic") for r in self.route_requests])
        self.assertEqual(self.broker_requests, [])
