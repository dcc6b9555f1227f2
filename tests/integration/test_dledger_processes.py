"""Three DLedger nodes as real processes (python -m rmqha.broker.dledger) on loopback: election, appends
committed on a quorum and byte-identical on every node, a leader kill and a new election within a
bound from the config, the old leader rejoining, and a follower whose tail was cut catching up."""

import json
import signal
import sys
import time
import urllib.request

import pytest

from rmqha.broker.dledger import client
from rmqha.broker.dledger.__main__ import TIMERS
from rmqha.broker.dledger.config import DLedgerConfig
from rmqha.cluster import process
from rmqha.cluster.ports import free_block
from rmqha.cluster.wait import ProcessExited, wait_until

pytestmark = pytest.mark.integration

GROUP = "g0"
SCALE = 0.5  # every DLedger timer halved: heartbeats every 1 s, a leader is missed after 3 s
DATA_FILE = 64 * 1024  # small files, so the appends below roll over to a second one
INDEX_FILE = 32 * 1024
IDS = ("n0", "n1", "n2")


def scaled() -> DLedgerConfig:
    c = DLedgerConfig()
    for name in TIMERS:
        setattr(c, name, max(1, int(getattr(c, name) * SCALE)))
    return c


def election_bound_s() -> float:
    """How long after a leader dies a new one must be there: followers notice after maxHeartBeatLeak
    heartbeats (counted from the last one, up to one interval before the kill), then a candidate's
    vote comes within maxVoteIntervalMs; allow one lost round (voteWaitBaseMs + maxVoteIntervalMs) and
    a second of scheduling slack on a shared machine."""
    c = scaled()
    ms = (
        (c.maxHeartBeatLeak + 1) * c.heartBeatTimeIntervalMs
        + c.maxVoteIntervalMs
        + c.voteWaitBaseMs
        + c.maxVoteIntervalMs
        + 1000
    )
    return ms / 1000


class Group:
    def __init__(self, tmp_path, extra_args=()):
        self.dir = tmp_path
        self.extra_args = list(extra_args)  # more options for every node
        rpc = free_block(6)
        status = rpc + 3
        self.addr = {i: f"127.0.0.1:{rpc + k}" for k, i in enumerate(IDS)}
        self.status_port = {i: status + k for k, i in enumerate(IDS)}
        self.peers = ";".join(f"{i}-{self.addr[i]}" for i in IDS)
        self.recs: dict[str, dict] = {}

    def start(self, node):
        cmd = [
            sys.executable,
            "-m",
            "rmqha.broker.dledger",
            "--group",
            GROUP,
            "--peers",
            self.peers,
            "--self-id",
            node,
            "--store-dir",
            str(self.dir),
            "--status-port",
            str(self.status_port[node]),
            "--data-file-size",
            str(DATA_FILE),
            "--index-file-size",
            str(INDEX_FILE),
            "--timer-scale",
            str(SCALE),
            *self.extra_args,
        ]
        self.recs[node] = process.spawn(cmd, self.dir / f"{node}.log", process.child_env())
        wait_until(lambda: self.status(node), 20, f"{node} to serve /status", interval=0.05)

    def status(self, node):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.status_port[node]}/status", timeout=1) as r:
                return json.load(r)
        except OSError:
            if not process.is_running(self.recs[node]):
                raise ProcessExited(f"{node} exited:\n{(self.dir / f'{node}.log').read_text()[-3000:]}") from None
            return None

    def alive(self):
        return [i for i in IDS if process.is_running(self.recs.get(i))]

    def leader(self, among=None):
        """The one leader all the live nodes follow, or None."""
        sts = [self.status(i) for i in (among or self.alive())]
        leaders = [s for s in sts if s and s["role"] == "LEADER"]
        if len(leaders) != 1:
            return None
        lead = leaders[0]
        if all(s and s["term"] == lead["term"] and s["leaderId"] == lead["selfId"] for s in sts):
            return lead
        return None

    def append(self, leader, body):
        r = client.append(self.addr[leader], GROUP, leader, body)
        assert r.code == 200, r
        return r

    def files(self, node):
        d = self.dir / f"dledger-{node}"
        return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.glob("*/0*"))}

    def log_tail(self):
        return "\n".join(f"--- {i}\n" + (self.dir / f"{i}.log").read_text()[-1500:] for i in self.recs)

    def stop_all(self):
        for rec in self.recs.values():
            process.stop(rec, 5)


@pytest.fixture
def group(tmp_path):
    g = Group(tmp_path)
    try:
        yield g
    finally:
        g.stop_all()


def same_files(g, nodes, end):
    """Every node has entries 0..end committed and the same data and index file bytes."""
    sts = [g.status(i) for i in nodes]
    if not all(s and s["endIndex"] == end and s["committedIndex"] == end for s in sts):
        return False
    first = g.files(nodes[0])
    return all(g.files(i) == first for i in nodes[1:]) and first


def test_three_processes_elect_replicate_fail_over_and_catch_up(group):
    g = group
    for i in IDS:
        g.start(i)
    lead = wait_until(g.leader, 15, "one leader", interval=0.1, on_timeout=g.log_tail)["selfId"]

    # appends through the leader: committed on a quorum, the same bytes in every node's files
    t0 = time.monotonic()
    for k in range(120):
        r = g.append(lead, b"m%03d-" % k + bytes(500))
    rate = 120 / (time.monotonic() - t0)
    assert r.index == 119
    files = wait_until(lambda: same_files(g, IDS, 119), 10, "all nodes to commit 0..119", on_timeout=g.log_tail)
    assert sum(1 for name in files if name.startswith("data/")) == 2  # rolled over to a second data file
    non_leader = next(i for i in IDS if i != lead)
    assert client.append(g.addr[non_leader], GROUP, non_leader, b"x").code == 404  # NOT_LEADER

    # kill -9 the leader: another is elected within the bound
    old, old_term = lead, g.status(lead)["term"]
    process.kill(g.recs[old])
    killed = time.monotonic()
    new = wait_until(
        lambda: g.leader([i for i in IDS if i != old]),
        election_bound_s(),
        "a new leader after the kill",
        interval=0.05,
        on_timeout=g.log_tail,
    )
    elected_after = time.monotonic() - killed
    assert new["selfId"] != old and new["term"] > old_term
    lead = new["selfId"]
    for k in range(120, 140):
        g.append(lead, b"m%03d-" % k + bytes(500))
    survivors = [i for i in IDS if i != old]
    wait_until(lambda: same_files(g, survivors, 139), 10, "the survivors to commit 0..139", on_timeout=g.log_tail)

    # the old leader restarts, follows, and its log matches
    g.start(old)
    wait_until(
        lambda: same_files(g, IDS, 139) and g.leader(),
        15,
        "the old leader to rejoin as follower",
        on_timeout=g.log_tail,
    )
    assert g.status(old)["role"] == "FOLLOWER"

    # a follower's tail is lost (its last 15 index slots zeroed while stopped: recovery cuts them)
    lagging = next(i for i in IDS if i != lead)
    process.stop(g.recs[lagging], 5, signal.SIGTERM)
    index = g.dir / f"dledger-{lagging}" / "index" / f"{0:020d}"
    raw = bytearray(index.read_bytes())
    raw[125 * 32 : 140 * 32] = bytes(15 * 32)
    index.write_bytes(bytes(raw))
    g.start(lagging)
    assert g.status(lagging)["endIndex"] == 124
    for k in range(140, 150):
        g.append(lead, b"m%03d-" % k + bytes(500))
    wait_until(lambda: same_files(g, IDS, 149), 15, "the cut follower to catch up", on_timeout=g.log_tail)
    print(
        f"\nelection after leader kill: {elected_after:.2f}s (bound {election_bound_s():.1f}s); "
        f"sequential appends: {rate:.0f}/s"
    )
