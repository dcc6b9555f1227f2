"""Server and client protocols over real loopback sockets (trial TestCase: it runs the reactor)."""

import socket

from twisted.internet import defer, reactor, task
from twisted.trial import unittest

from rmqha.broker.remoting.codec import decode, encode
from rmqha.broker.remoting.codes import ResponseCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.remoting.protocol import (
    ProcessorRegistry,
    RemotingClient,
    RemotingConnectionError,
    RemotingServerFactory,
    RemotingTimeoutError,
)


def wait_until(predicate, timeout=5.0, interval=0.01):
    """Poll on the reactor until predicate() is true; fail after timeout seconds."""
    deadline = reactor.seconds() + timeout

    @defer.inlineCallbacks
    def loop():
        while not predicate():
            if reactor.seconds() > deadline:
                raise AssertionError("condition not met within %.1fs" % timeout)
            yield task.deferLater(reactor, interval, lambda: None)

    return loop()


class LoopbackTest(unittest.TestCase):
    def setUp(self):
        self.registry = ProcessorRegistry()
        self.registry.register(
            105, lambda r, c: r.make_response(ext_fields={"peer": c.peer_address}, body=r.body[::-1])
        )
        self.registry.register(11, lambda r, c: task.deferLater(reactor, 0.05, r.make_response, 19))
        self.registry.register(1, lambda r, c: None)  # never answers
        self.factory = RemotingServerFactory(self.registry)
        self.closed = []
        self.factory.add_close_listener(self.closed.append)
        self.port = reactor.listenTCP(0, self.factory, interface="127.0.0.1")
        self.address = f"127.0.0.1:{self.port.getHost().port}"
        self.client = RemotingClient(reactor)

    def tearDown(self):
        self.client.close()
        for ctx in list(self.factory.connections):
            ctx.close()
        return self.port.stopListening()

    @defer.inlineCallbacks
    def test_request_response_over_tcp(self):
        resp = yield self.client.invoke(self.address, RemotingCommand.request(105, body=b"abc"))
        self.assertEqual(resp.code, ResponseCode.SUCCESS)
        self.assertEqual(resp.body, b"cba")
        self.assertTrue(resp.ext_fields["peer"].startswith("127.0.0.1:"))

    @defer.inlineCallbacks
    def test_concurrent_requests_share_one_connection(self):
        results = yield defer.gatherResults(
            [
                self.client.invoke(self.address, RemotingCommand.request(105 if i % 2 else 11, body=b"%d" % i))
                for i in range(20)
            ]
        )
        self.assertEqual([r.code for r in results], [19 if i % 2 == 0 else 0 for i in range(20)])
        self.assertEqual(len(self.factory.connections), 1)

    @defer.inlineCallbacks
    def test_unknown_code_and_timeout(self):
        resp = yield self.client.invoke(self.address, RemotingCommand.request(4242))
        self.assertEqual(resp.code, ResponseCode.REQUEST_CODE_NOT_SUPPORTED)
        with self.assertRaises(RemotingTimeoutError):
            yield self.client.invoke(self.address, RemotingCommand.request(1), timeout=0.2)

    @defer.inlineCallbacks
    def test_client_reconnects_after_server_closes(self):
        yield self.client.invoke(self.address, RemotingCommand.request(105))
        for ctx in list(self.factory.connections):
            ctx.close()
        yield wait_until(lambda: len(self.closed) == 1 and not self.client._connections)
        resp = yield self.client.invoke(self.address, RemotingCommand.request(105))
        self.assertEqual(resp.code, 0)

    @defer.inlineCallbacks
    def test_connect_refused(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
        s.close()
        with self.assertRaises(RemotingConnectionError):
            yield self.client.invoke(f"127.0.0.1:{free}", RemotingCommand.request(105))

    @defer.inlineCallbacks
    def test_malformed_frame_closes_only_that_connection(self):
        yield self.client.invoke(self.address, RemotingCommand.request(105))
        raw = socket.create_connection(("127.0.0.1", self.port.getHost().port))
        self.addCleanup(raw.close)
        raw.setblocking(False)
        raw.sendall(b"\x00\x00\x00\x08\x00\x00\x00\x09{}{}")  # header length beyond the frame
        yield wait_until(lambda: len(self.closed) == 1)
        yield wait_until(lambda: _peer_closed(raw))
        resp = yield self.client.invoke(self.address, RemotingCommand.request(105))
        self.assertEqual(resp.code, 0)
        self.assertEqual(len(self.factory.connections), 1)

    @defer.inlineCallbacks
    def test_plain_socket_speaks_the_codec(self):
        raw = socket.create_connection(("127.0.0.1", self.port.getHost().port))
        self.addCleanup(raw.close)
        raw.setblocking(False)
        raw.sendall(encode(RemotingCommand(code=105, opaque=7, language="CPP", body=b"xy")))
        got = bytearray()

        def received():
            try:
                got.extend(raw.recv(65536))
            except BlockingIOError:
                pass
            return len(got) >= 4 and len(got) >= 4 + int.from_bytes(got[:4], "big")

        yield wait_until(received)
        resp = decode(bytes(got))
        self.assertEqual((resp.opaque, resp.body, resp.is_response), (7, b"yx", True))


def _peer_closed(sock) -> bool:
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True
