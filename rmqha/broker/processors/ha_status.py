"""GET_BROKER_HA_STATUS (907, RocketMQ 5.x; `mqadmin haStatus`): this broker's replication state as 5.x's
HARuntimeInfo.

A master: {"master": true, "masterCommitLogMaxOffset", "inSyncSlaveNums", "haConnectionInfo": [{"addr",
"slaveAckOffset", "diff", "inSync", "transferredByteInSecond", "transferFromWhere"}], ...}, one entry per
connection that reported as a slave. A slave: {"master": false, "haClientRuntimeInfo": {"masterAddr",
"maxOffset", "lastReadTimestamp", "lastWriteTimestamp", "transferredByteInSecond", "masterFlushOffset",
"activated"}}. In sync, as 5.x's DefaultHAService: the slave is streaming and less than
haSlaveFallbehindMax (5.x: haMaxGapNotInSync, the same 256 MiB) behind. transferredByteInSecond: the
bytes of the last full second, sampled by the broker's stats tick.
"""

from __future__ import annotations

from rmqha.broker.remoting import json_body
from rmqha.broker.remoting.codes import RequestCode
from rmqha.broker.remoting.command import RemotingCommand
from rmqha.broker.remoting.handlers import Processors, handles


class TransferRates:
    """Bytes per second of each HA connection (a master's sessions' bytes_sent, a slave's bytes_received),
    from one-second samples."""

    def __init__(self):
        self.last: dict[int, tuple[int, int]] = {}  # id(session) -> (now_ms, bytes)
        self.rate: dict[int, int] = {}

    def sample(self, now_ms: int, sessions) -> None:
        seen = {}
        for key, total in sessions:
            prev = self.last.get(key)
            if prev is not None and now_ms > prev[0]:
                self.rate[key] = (total - prev[1]) * 1000 // (now_ms - prev[0])
            seen[key] = (now_ms, total)
        self.last = seen
        self.rate = {k: v for k, v in self.rate.items() if k in seen}

    def of(self, session) -> int:
        return self.rate.get(id(session), 0)


class HAStatusProcessor(Processors):
    def __init__(self, config, controller):
        self.config = config
        self.controller = controller
        self.rates = TransferRates()
        controller.stats.samplers.append(self._sample)

    def _sessions(self):
        c = self.controller
        if c.ha is not None:
            return [(id(x.session), x.session.bytes_sent) for x in c.ha.connections if x.session is not None]
        client = c.ha_client
        if client is not None and client.proto is not None and client.proto.session is not None:
            s = client.proto.session
            return [(id(s), s.bytes_received)]
        return []

    def _sample(self, now_ms: int) -> None:
        self.rates.sample(now_ms, self._sessions())

    def runtime_info(self) -> dict:
        c = self.controller
        store = c.store
        info = {
            "master": self.config.is_master,
            "masterCommitLogMaxOffset": 0,
            "inSyncSlaveNums": 0,
            "haConnectionInfo": [],
            "haClientRuntimeInfo": _client_info(),
        }
        if self.config.is_master:
            put_where = store.max_offset
            info["masterCommitLogMaxOffset"] = put_where
            if c.ha is not None:
                for conn in c.ha._reported():  # the connections that reported as slaves
                    s = conn.session
                    diff = put_where - s.slave_ack_offset
                    in_sync = s.is_slave and diff < self.config.haSlaveFallbehindMax
                    info["inSyncSlaveNums"] += int(in_sync)
                    info["haConnectionInfo"].append(
                        {
                            "addr": conn.peer,
                            "slaveAckOffset": s.slave_ack_offset,
                            "diff": diff,
                            "inSync": in_sync,
                            "transferredByteInSecond": self.rates.of(s),
                            "transferFromWhere": s.next_transfer_from,
                        }
                    )
            return info
        client = c.ha_client
        ci = info["haClientRuntimeInfo"]
        ci["maxOffset"] = store.max_offset
        if client is not None:
            if client.master_address:
                ci["masterAddr"] = client.master_address  # fastjson leaves a null out
            s = client.proto.session if client.proto is not None else None
            if s is not None:
                ci["lastReadTimestamp"] = int(s.last_read * 1000)
                ci["lastWriteTimestamp"] = int(s.last_write * 1000)
                ci["transferredByteInSecond"] = self.rates.of(s)
                ci["activated"] = True
        return info

    @handles(RequestCode.GET_BROKER_HA_STATUS)
    def get_ha_status(self, req: RemotingCommand, ctx) -> RemotingCommand:
        return req.make_response(body=json_body.dumps(self.runtime_info()))


def _client_info() -> dict:
    # masterFlushOffset: 5.x's controller mode only; 0 as 5.x answers without it
    return {
        "activated": False,
        "lastReadTimestamp": 0,
        "lastWriteTimestamp": 0,
        "masterFlushOffset": 0,
        "maxOffset": 0,
        "transferredByteInSecond": 0,
    }
