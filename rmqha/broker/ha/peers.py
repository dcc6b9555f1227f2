"""Proven replicas: who may claim a history this master lost, so a report cannot switch replication off.

A first report beyond what a master holds means one of two things: a real slave whose master came back
behind it (a power loss: SLAVE_AHEAD, and a fork fence remembered across restarts), or anybody at all
who can open a TCP connection to the HA port (8 random bytes do it about half the time). The fence
refuses every later report past it, so if a stranger could set it, one forged report would switch
replication off until an operator deletes `store/haFence.json`; and if a stranger could clear it, the
master would stream into the middle of the forked slave's records.

The 4.x HA wire carries nothing but 8-byte offsets (a 4.9 slave must keep working, so no handshake):
within one life of the master, anybody who speaks the wire can look exactly like a slave, acks included.
What a stranger cannot produce by speaking the wire is a past. Hence the rule (docs/decisions.md):

- a host is *proven* when a session from it acknowledges bytes this master streamed to it; the proof is
  recorded here (`store/haPeers.json`) for the master's NEXT life, and counts only from then on;
- a first report may claim a lost history (SLAVE_AHEAD, writing the fence) only from a host proven in an
  earlier life, only at or below `streamLimit` (no replica can hold more of this log than was ever
  streamed: random or guessed offsets fail), and only if no session from that host has been served
  this master's log in this life (a replica of this life's log cannot also hold the lost history);
- a report may clear a fence only from a host proven in an earlier life, while no session from that host
  is SLAVE_AHEAD (the forked slave is still there).
Anybody else's such report closes that connection only; nothing is written and no other session changes.

`streamLimit` is a lease written before the bytes go out: a session never streams past it without
raising it first (by LEASE_BYTES, so the file is written about once per 64 MiB streamed).

    {"peers": {"10.0.0.12": {"ack": 1048576, "provenAtMs": 1764020000000}}, "streamLimit": 68157440}

A host, not host:port: a slave reconnects from a new port. Through Toxiproxy the master sees the proxy's
address; on one machine every node is 127.0.0.1: there the proof tells a replica from a stranger on
another address, not from one on the same address (docs/ha-protocol.md says what such a stranger can
still do). A real slave never proven by this master (rebuilt elsewhere, new address) that is ahead of it
is refused like a stranger; an operator who knows it is a replica adds its address to the file (format
above) and restarts the master. Unknown keys are ignored; an unreadable file is logged and treated as
empty, and a file without streamLimit (written before it existed) vouches for no history.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from rmqha.broker.support.files import atomic_write

log = logging.getLogger("rmqha.broker.ha.master")

PEERS_FILE = "haPeers.json"
MAX_PEERS = 64  # hosts kept; the oldest proof is forgotten first (a replica set is a handful of hosts)
LEASE_BYTES = 64 << 20  # how far past what it streams the recorded streamLimit runs ahead


def host_of(peer: str) -> str:
    """'10.0.0.2:40000' -> '10.0.0.2'; '[::1]:5' -> '::1'."""
    host = peer.rpartition(":")[0] if ":" in peer else peer
    return host.strip("[]")


@dataclass
class ProvenPeers:
    """Hosts proven to be replicas of this master's log. IO-free: on_proven(peers) persists a change.

    earlier / earlier_limit: the hosts and the streamLimit as loaded at start (earlier lives); the only
    ones that vouch for a history. peers / stream_limit: the record the next life will load."""

    peers: dict[str, dict[str, int]] = field(default_factory=dict)
    on_proven: Callable[[ProvenPeers], object] | None = None
    stream_limit: int | None = None
    earlier: frozenset[str] = frozenset()
    earlier_limit: int | None = None

    @classmethod
    def from_record(
        cls,
        record: tuple[dict[str, dict[str, int]], int | None],
        on_proven: Callable[[ProvenPeers], object] | None = None,
    ) -> ProvenPeers:
        peers, limit = record
        return cls(peers, on_proven, limit, frozenset(peers), limit)

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
        log.info(
            "HA peer %s proven a replica of this master (acknowledged %d bytes it streamed); it vouches "
            "for a history from this master's next life on",
            host,
            ack,
        )
        self._changed()
        return True

    def cover(self, end: int) -> None:
        """Called before bytes up to `end` are streamed: the recorded streamLimit must stay above them."""
        if self.stream_limit is None or end > self.stream_limit:
            self.stream_limit = end + LEASE_BYTES
            self._changed()

    def history_refused(self, host: str, offset: int) -> str:
        """Why a report at `offset` from `host` may not claim a history this master lost ('' if it may)."""
        if host not in self.earlier:
            return (
                f"{host} was not proven a replica of this master in an earlier life (store/haPeers.json "
                "as loaded at start)"
            )
        if self.earlier_limit is None:
            return "store/haPeers.json records no streamLimit, so no history can be vouched for"
        if offset > self.earlier_limit:
            return f"no replica holds more than this master ever streamed (streamLimit {self.earlier_limit})"
        return ""

    def _changed(self) -> None:
        if callable(self.on_proven):
            self.on_proven(self)

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"peers": {h: dict(v) for h, v in sorted(self.peers.items())}}
        if self.stream_limit is not None:
            out["streamLimit"] = self.stream_limit
        return out


def load_record(path: str) -> tuple[dict[str, dict[str, int]], int | None]:
    """(peers, streamLimit) from haPeers.json; ({}, None) when absent or unreadable (logged)."""
    try:
        with open(path) as fh:
            d = json.load(fh)
        raw = d["peers"]
        if not isinstance(raw, dict):
            raise TypeError("peers is not an object")
        peers = {
            str(h): {"ack": int((v or {}).get("ack", 0)), "provenAtMs": int((v or {}).get("provenAtMs", 0))}
            for h, v in list(raw.items())[:MAX_PEERS]
        }
        limit = d.get("streamLimit")
        return peers, (int(limit) if limit is not None else None)
    except FileNotFoundError:
        return {}, None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        log.error(
            "ignoring unreadable %s (%s): no HA peer is known as a replica, so a slave ahead of this "
            "master is refused until it has been streamed to again (see rmqha/broker/ha/peers.py)",
            path,
            e,
        )
        return {}, None


def load_peers(path: str) -> dict[str, dict[str, int]]:
    return load_record(path)[0]


def save_peers(path: str, peers: ProvenPeers) -> None:
    # the rename must survive a power cut too (a directory fsync), or the next life finds the old record
    atomic_write(path, json.dumps(peers.to_json()).encode())
