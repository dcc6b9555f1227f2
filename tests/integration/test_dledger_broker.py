"""The broker on DLedger (enableDLegerCommitLog=true): the `dledger` topology on the local backend (one
broker name, three nodes, a name server), with 0.3.1.2's default timers.

One broker registers as brokerId 0; sends to it are SEND_OK and the three data files hold the same bytes
(PHYSICALOFFSET = pos + 48 in every entry); a follower refuses a send with 14; after the leader is killed
another node is master (id 0 in the name server and on /status) within a bound, every acknowledged
message is pulled from it with its queue offset, and new sends continue the queue offsets; a batch is
stored as one entry per message.

The 5.x proxy of the same cluster: the official 5.x client's whole surface (client5.surface) first; then,
in the failover test, a message received through it and not acked before the kill comes back through
the new leader after its invisible time: POP's checkpoint is a record of the revive topic in the DLedger
log, and the new leader's revive service (started on its role change to master) puts it back."""

import json
import os
import struct
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from rmqha.broker.remoting import json_body
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.store import record
from rmqha.cluster import process
from rmqha.cluster.handle import Cluster
from rmqha.cluster.ports import free_cluster_base
from rmqha.cluster.requests import props, send_v1
from rmqha.cluster.runfolder import using_run_root
from rmqha.cluster.standalone import rpc
from rmqha.cluster.topology import load_topology
from rmqha.cluster.wait import wait_until

from . import client5

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

TOPIC = "DLedgerTopic"
QUEUES = 4
DATA_FILE = 1 << 20  # mappedFileSizeCommitLog: small sparse data files
# A dead leader is missed after maxHeartBeatLeak (3) heartbeats of 2 s, counted from the last one (up to
# 2 s before the kill); a vote round within maxVoteIntervalMs (1 s), one lost round (2 s + 1 s); the new
# master waits for its no-op's quorum and polls every 100 ms; 2 s of slack for a shared machine.
FAILOVER_BOUND_S = (3 + 1) * 2.0 + 1.0 + 3.0 + 0.5 + 2.0


def cli(env, *args, timeout=60):
    return subprocess.run(
        [sys.executable, "-m", "rmqha.cluster", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def status(node) -> dict:
    with urllib.request.urlopen(node["statusUrl"], timeout=2) as r:
        return json.loads(r.read())


def try_status(node) -> dict | None:
    try:
        return status(node)
    except OSError:
        return None


def addrs(namesrv: str) -> dict[int, str]:
    resp = rpc(namesrv, RequestCode.GET_BROKER_CLUSTER_INFO, timeout=2)
    table = json_body.loads(resp.body).get("brokerAddrTable", {}) if resp.body else {}
    bd = table.get("RaftNode00") or {}
    return {int(k): v for k, v in (bd.get("brokerAddrs") or {}).items()}


def send(addr: str, i: int):
    p = props(TAGS="t", KEYS=f"k{i}", UNIQ_KEY=f"U{i:05d}", WAIT="true")
    return rpc(
        addr,
        RequestCode.SEND_MESSAGE,
        send_v1(TOPIC, f"body-{i}".encode(), i % QUEUES, p).ext_fields,
        body=f"body-{i}".encode(),
        timeout=10,
    )


def pull_all(addr: str) -> dict[str, tuple[int, int]]:
    """UNIQ_KEY -> (queue id, queue offset) of every message of TOPIC pulled from addr."""
    out = {}
    for q in range(QUEUES):
        offset = 0
        while True:
            resp = rpc(
                addr,
                RequestCode.PULL_MESSAGE,
                {
                    "consumerGroup": "dl-check",
                    "topic": TOPIC,
                    "queueId": q,
                    "queueOffset": offset,
                    "maxMsgNums": 32,
                    "sysFlag": 4,
                    "commitOffset": 0,
                    "suspendTimeoutMillis": 0,
                    "subscription": "*",
                    "subVersion": 0,
                },
            )
            if resp.code != ResponseCode.SUCCESS:
                break
            for _, r in record.iter_records(resp.body, 0, check_crc=True):
                if r.kind == record.Scan.MESSAGE:
                    out[r.message.uniq_key] = (r.message.queue_id, r.message.queue_offset)
            offset = int(resp.ext_fields["nextBeginOffset"])
    return out


def entries(store: str, self_id: str) -> list[bytes]:
    """The DLedger data file's entries, raw (magic, size, ..., body)."""
    with open(Path(store) / f"dledger-{self_id}" / "data" / f"{0:020d}", "rb") as f:
        data = f.read()
    out, pos = [], 0
    while pos + 48 <= len(data):
        magic, size = struct.unpack_from(">ii", data, pos)
        if magic != 1:
            break
        out.append(data[pos : pos + size])
        pos += size
    return out


def _batch_item(body: bytes, properties: dict) -> bytes:
    """One message of a batch body (MessageDecoder.encodeMessage)."""
    pb = record.encode_properties(properties).encode()
    return (
        struct.pack(">iiiii", 20 + len(body) + 2 + len(pb), 0, 0, 0, len(body)) + body + struct.pack(">h", len(pb)) + pb
    )


@pytest.fixture(scope="module")
def dl(tmp_path_factory):
    """The cluster, started with the CLI (`up` returns once it is ready), for the module; the handle
    (Cluster.attach) is for the 5.x client's topics."""
    run = tmp_path_factory.mktemp("dl") / "run"
    topo = load_topology("dledger")
    base = free_cluster_base(topo)
    assert base is not None, "no free 50-port block in this worker's slice"
    env = dict(os.environ, CLUSTER_RUN_ROOT=str(run), PYTHONPATH=str(REPO))
    env.pop("CLUSTER_BASE_PORT", None)
    up = cli(
        env,
        "up",
        "--topology",
        "dledger",
        "--backend",
        "local",
        "--name",
        "dl",
        "--base-port",
        str(base),
        "--set",
        f"mappedFileSizeCommitLog={DATA_FILE}",
    )
    try:
        assert up.returncode == 0, up.stderr + up.stdout
        assert "is ready" in up.stdout + up.stderr, up.stderr + up.stdout
        with using_run_root(run):
            handle = Cluster.attach("dl")
        yield SimpleNamespace(state=json.loads((run / "dl" / "state.json").read_text()), handle=handle)
    finally:
        down = cli(env, "down", "--name", "dl", timeout=60)
        assert down.returncode == 0, down.stderr


@pytest.mark.timeout(180)  # the module's cluster starts in this test's setup
def test_the_5x_client_on_the_dledger_group(dl):
    client5.surface_on(dl.handle)


def test_dledger_group_elects_a_master_replicates_and_fails_over(dl):
    state = dl.state
    namesrv = state["namesrv"]["addr"]
    nodes = {n["name"]: n for n in state["nodes"]}
    by_addr = {n["addr"]: n for n in nodes.values()}

    # 1. `up` waited for readiness (rmqha/cluster/wait.py): one master (id 0), the others slaves with
    # id = selfId number + 1, every follower's committed index equal to the leader's
    table = addrs(namesrv)
    assert 0 in table and len(table) == 3, table
    leader = by_addr[table[0]]
    self_num = {n: int(n[-1]) for n in nodes}
    assert sorted(table) == sorted([0] + [self_num[n["name"]] + 1 for n in nodes.values() if n is not leader])
    st = status(leader)
    assert (st["brokerId"], st["role"], st["dledger"]["role"]) == (0, "SYNC_MASTER", "LEADER")
    followers = [n for n in nodes.values() if n is not leader]
    for f in followers:
        fs = status(f)
        assert (fs["brokerId"], fs["role"]) == (self_num[f["name"]] + 1, "SLAVE")
        assert "ha" not in fs and "haClient" not in fs  # no classic HA in DLedger mode

    # the topics are created on the master; the slaves copy them (slave sync from the learned master), so
    # the new master after the kill below has the 5.x client's topic too (topic configs are not in the log)
    pop_topic, group = f"P5dl{uuid.uuid4().hex[:8]}", "GP5dl"
    dl.handle.create_topic(pop_topic)
    dl.handle.create_topic(TOPIC, queues=QUEUES)  # UPDATE_AND_CREATE_TOPIC on the leader, then its route
    topics = status(leader)["topics"]
    wait_until(
        lambda: all((try_status(f) or {}).get("topics") == topics for f in followers),
        20,
        "the followers' copy of the master's topics",
    )

    # 2. sends to the master: SEND_OK, byte-identical entries on all three, offset = pos + 48
    acked = {}
    for i in range(40):
        r = send(leader["addr"], i)
        assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
        acked[f"U{i:05d}"] = (int(r.ext_fields["queueId"]), int(r.ext_fields["queueOffset"]))
        assert record.parse_offset_msg_id(r.ext_fields["msgId"])[1] >= 48
    assert {k: v[1] for k, v in acked.items()} == {f"U{i:05d}": i // QUEUES for i in range(40)}

    def replicated():
        ends = [(try_status(n) or {}).get("dledger", {}).get("committedIndex") for n in nodes.values()]
        return len(set(ends)) == 1 and ends[0] is not None and ends[0] >= 39

    wait_until(replicated, 15, "every node committed the 40 entries")
    copies = {n["name"]: entries(n["store"], "n" + n["name"][-1]) for n in nodes.values()}
    first = copies[leader["name"]]
    assert len(first) >= 40
    assert all(c == first for c in copies.values())
    pos = 0
    for e in first:
        assert struct.unpack_from(">q", e, 24)[0] == pos  # the entry's pos
        assert struct.unpack_from(">q", e, 48 + 28)[0] == pos + 48  # PHYSICALOFFSET
        pos += len(e)

    # 3. a follower refuses sends: SERVICE_NOT_AVAILABLE (14)
    r = send(followers[0]["addr"], 999)
    assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE == 14, r.remark

    # (POP) a message received through the 5.x proxy and not acked: its checkpoint is in the log
    proxy = dl.handle.proxy
    by = client5.seq(
        proxy,
        [
            {"op": "produce", "topic": pop_topic, "sends": [{"body": "unacked"}]},
            {
                "op": "simple",
                "topic": pop_topic,
                "group": group,
                "expect": 1,
                "stop_after": 1,
                "plan": {"unacked": ["skip"]},
            },
        ],
    )
    assert [x.get("error") for x in by["produce"] if "i" in x] == [None], by
    received = [x for x in by["simple"] if "body" in x]
    assert [(x["body"], x["attempt"], x["action"]) for x in received] == [("unacked", 1, "skip")], by
    popped = received[0]

    # 4. kill the leader: another node is master within the bound
    rec = next(n for n in state["nodes"] if n["name"] == leader["name"])["process"]
    killed_at = time.monotonic()
    process.kill(rec)

    def new_master():
        a = addrs(namesrv)
        node = by_addr.get(a.get(0))
        if node is None or node is leader:
            return None
        st = try_status(node)
        return node if st and st["brokerId"] == 0 and st["role"] == "SYNC_MASTER" else None

    master = wait_until(new_master, FAILOVER_BOUND_S + 5, "a new master after the leader's kill")
    failover_s = time.monotonic() - killed_at
    print(
        f"failover: new master {master['name']} {failover_s:.2f} s after the kill "
        f"(bound {FAILOVER_BOUND_S:.1f} s, default timers)"
    )
    assert failover_s <= FAILOVER_BOUND_S

    # 5. every acknowledged message is delivered by the new master, at its queue offset, no gaps
    got = pull_all(master["addr"])
    assert got == acked
    # and new sends continue each queue's offsets
    for i in range(40, 48):
        r = send(master["addr"], i)
        assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
        assert (int(r.ext_fields["queueId"]), int(r.ext_fields["queueOffset"])) == (i % QUEUES, i // QUEUES)
    got = pull_all(master["addr"])
    per_queue: dict[int, list[int]] = {}
    for q, o in got.values():
        per_queue.setdefault(q, []).append(o)
    assert {q: sorted(v) for q, v in per_queue.items()} == {q: list(range(12)) for q in range(QUEUES)}

    # 6. a batch (SEND_BATCH_MESSAGE): one entry per message, consecutive queue offsets, SEND_OK on quorum
    items = [(f"batch-{i}".encode(), {"UNIQ_KEY": f"B{i:05d}", "KEYS": f"b{i}"}) for i in range(3)]
    body = b"".join(_batch_item(b, p) for b, p in items)
    fields = dict(send_v1(TOPIC, b"", 1, props(WAIT="true")).ext_fields, batch="true")
    end_before = status(master)["dledger"]["endIndex"]
    r = rpc(master["addr"], RequestCode.SEND_BATCH_MESSAGE, fields, body=body, timeout=10)
    assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
    assert len(r.ext_fields["msgId"].split(",")) == 3 and r.ext_fields["queueOffset"] == "12"
    assert status(master)["dledger"]["endIndex"] == end_before + 3
    got = pull_all(master["addr"])
    assert {k: got[k] for k in ("B00000", "B00001", "B00002")} == {f"B{i:05d}": (1, 12 + i) for i in range(3)}

    # 7. (POP) the unacked message comes back through the new leader once its invisible time (the
    # client's 10 s) has passed since the receive on the old one
    again = client5.simple(proxy, group, pop_topic, 1, deadline_s=40)
    back = [x for x in again if "body" in x]
    assert [(x["body"], x["attempt"], x["action"]) for x in back] == [("unacked", 2, "ack")], again
    # lower bound from when the first receive was asked: the broker's pop time lies between that and "t",
    # so "t" + 10 s could be up to a round trip later than the message may come back
    assert back[0]["t"] >= popped["asked"] + 10_000, (back, popped)
    # the new leader revived it (its revive service started with its role change); the killed one cannot have
    assert status(master)["pop"]["reviving"] and status(master)["pop"]["revived"] >= 1
