"""Proven replicas: the hosts this master has streamed its log to, so a report cannot switch replication off.

A first report beyond what a master holds means one of two things: a real slave whose master came back
behind it (a power loss: SLAVE_AHEAD, and a fork fence remembered across restarts), or anybody at all
who can open a TCP connection to the HA port (8 random bytes do it about half the time). The fence
refuses every later report past it, so if a stranger could set it, one forged report would switch
replication off until an operator deletes `store/haFence.json`. Hence: SLAVE_AHEAD and the fence are
entered only for a proven host. A host is proven when a session from it acknowledges bytes this master
actually streamed to it (an ack above its first report, at or below what was sent on that session).

The record survives restarts (`store/haPeers.json`, written atomically when a host is first proven):
the master that comes back behind its slave after a power loss knows that slave from its earlier life.

    {"peers": {"10.0.0.12": {"ack": 1048576, "provenAtMs": 1764020000000}}}

A host, not host:port: a slave reconnects from a new port. Through Toxiproxy the master sees the proxy's
address; on one machine every node is 127.0.0.1: the proof is then only as good as the address. A real
slave that was never proven by this master (rebuilt elsewhere, new address) and is ahead of it is refused
like a stranger; an operator who knows it is a replica adds its address to the file (format above) and
restarts the master. Unknown keys are ignored; an unreadable file is logged and treated as empty.
"""
from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger("broker.ha.master")

PEERS_FILE = "haPeers.json"
MAX_PEERS = 64  # hosts kept; the oldest proof is forgotten first (a replica set is a handful of hosts)


def host_of(peer: str) -> str:
    """'10.0.0.2:40000' -> '10.0.0.2'; '[::1]:5' -> '::1'."""
    host = peer.rpartition(":")[0] if ":" in peer else peer
    return host.strip("[]")


@dataclass
class ProvenPeers:
    """Hosts proven to be replicas of this master's log. IO-free: on_proven(peers) persists a change."""
    peers: dict[str, dict[str, int]] = field(default_factory=dict)
    on_proven: Callable[[ProvenPeers], object] | None = None

    def is_proven(self, host: str) -> bool:
        return host in self.peers

    def prove(self, host: str, ack: int, now_ms: int) -> bool:
        """Record that `host` acknowledged bytes up to `ack` this master streamed to it. True (and
        on_proven called) when the host was not proven before."""
        entry = self.peers.get(host)
        if entry is not None:
            entry["ack"] = max(entry.get("ack", 0), ack)
            return False
        if len(self.peers) >= MAX_PEERS:
            oldest = min(self.peers, key=lambda h: self.peers[h].get("provenAtMs", 0))
            del self.peers[oldest]
        self.peers[host] = {"ack": ack, "provenAtMs": now_ms}
        log.info("HA peer %s proven a replica of this master (acknowledged %d bytes it streamed)", host, ack)
        if callable(self.on_proven):
            self.on_proven(self)
        return True

    def to_json(self) -> dict[str, dict[str, dict[str, int]]]:
        return {"peers": {h: dict(v) for h, v in sorted(self.peers.items())}}


def load_peers(path: str) -> dict[str, dict[str, int]]:
    try:
        with open(path) as fh:
            d = json.load(fh)
        raw = d["peers"]
        if not isinstance(raw, dict):
            raise TypeError("peers is not an object")
        return {str(h): {"ack": int((v or {}).get("ack", 0)), "provenAtMs": int((v or {}).get("provenAtMs", 0))}
                for h, v in list(raw.items())[:MAX_PEERS]}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        log.error("ignoring unreadable %s (%s): no HA peer is known as a replica, so a slave ahead of this "
                  "master is refused until it has been streamed to again (see broker/ha/peers.py)", path, e)
        return {}


def save_peers(path: str, peers: ProvenPeers) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(peers.to_json(), fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
