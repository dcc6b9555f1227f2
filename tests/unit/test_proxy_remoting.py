"""rmqha/proxy/remoting.py over real loopback sockets: requests matched to replies by opaque, a timeout,
a broken connection, and a request the peer sends us (a broker's CHECK_TRANSACTION_STATE)."""

import asyncio

import pytest

from rmqha.broker.remoting.codec import FrameDecoder, encode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.proxy.remoting import RemotingClient, RemotingTimeout, RemotingUnreachable


class Peer(asyncio.Protocol):
    """A broker stand-in on a real socket: answers code 1 with the request's header echoed, ignores 2,
    closes on 3, and on 4 first asks the client a question (code 39) and answers with its reply's remark."""

    def connection_made(self, transport):
        self.t, self.dec, self.pending = transport, FrameDecoder(), None

    def data_received(self, data):
        for cmd in self.dec.feed(data):
            if cmd.is_response:
                self.pending.remark = cmd.remark
                self.t.write(encode(self.pending))
            elif cmd.code == 1:
                self.t.write(encode(cmd.make_response(0, cmd.ext_fields.get("x"))))
            elif cmd.code == 3:
                self.t.close()
            elif cmd.code == 4:
                self.pending = cmd.make_response(0)
                ask = RemotingCommand.request(39, {"q": "?"}, opaque=777)
                self.t.write(encode(ask))


def test_requests_timeouts_and_a_request_from_the_peer():
    async def main():
        server = await asyncio.get_running_loop().create_server(Peer, "127.0.0.1", 0)
        addr = "127.0.0.1:%d" % server.sockets[0].getsockname()[1]
        asked = []

        def on_request(address, cmd):
            asked.append((address, cmd.code))
            return cmd.make_response(0, "answered")

        client = RemotingClient(on_request=on_request)
        try:
            replies = await asyncio.gather(
                *(client.invoke(addr, RemotingCommand.request(1, {"x": str(i)})) for i in range(5))
            )
            assert [r.remark for r in replies] == ["0", "1", "2", "3", "4"]
            with pytest.raises(RemotingTimeout):
                await client.invoke(addr, RemotingCommand.request(2), timeout=0.2)
            r = await client.invoke(addr, RemotingCommand.request(4))
            assert r.remark == "answered" and asked == [(addr, 39)]
            with pytest.raises(RemotingUnreachable):
                await client.invoke(addr, RemotingCommand.request(3), timeout=5)
            assert (
                await client.invoke(addr, RemotingCommand.request(1, {"x": "again"}))
            ).remark == "again"  # reconnects
            server.close()
            await server.wait_closed()
            client.close()
            with pytest.raises(RemotingUnreachable):
                await client.invoke(addr, RemotingCommand.request(1), timeout=1)
        finally:
            client.close()
            server.close()

    asyncio.run(main())
