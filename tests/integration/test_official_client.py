"""The official client (PyPI rocketmq 0.4.4 = Apache RocketMQ C++ client 1.0.1) against our broker.

Name server and brokers run as real processes on free loopback ports (rmqha/cluster/standalone.py); the client
runs in child processes (official_client_worker.py) so a native crash or hang cannot take pytest
down. Topology for most tests: 2 masters + 2 slaves (broker-a and broker-b, ASYNC_MASTER).
The SYNC_MASTER status tests use their own name server, master and slave.

Client facts these tests rely on (verified by capturing frames from this client):
* it sends SEND_MESSAGE code 10 with the long header names, batches with "batch":"1";
* plain send_sync AND send_orderly retry any non-SEND_OK status (send_orderly even with
  retry_times=1 ends in "No route info of this topic" although the broker stored the message);
  send_async reports FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE to its success callback, so the
  status tests use send_async;
* rocketmq.client 0.4.4 has no ConsumeStatus: a callback that returns normally is CONSUME_SUCCESS.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from rmqha.cluster.sample import ServedReader
from rmqha.cluster.standalone import metric, rpc
from rmqha.cluster.wait import wait_until

from .processes import master_and_slave, two_async_groups, unique_name

pytestmark = pytest.mark.integration

pytest.importorskip("rocketmq.client")

WORKER = Path(__file__).with_name("official_client_worker.py")
WORKER_DEADLINE_S = 90
SEND_OK, FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE = 0, 2, 3
USER_PROPS = ["up", "seq"]
LAST_CONSUMER_PID = [0]


def run_worker(kind: str, job: dict, timeout: float = WORKER_DEADLINE_S) -> list[dict]:
    proc = subprocess.run(
        [sys.executable, str(WORKER), kind, json.dumps(job)], capture_output=True, timeout=timeout, text=True
    )
    lines = [json.loads(l) for l in proc.stdout.splitlines() if l.startswith("{")]
    assert lines, f"worker {kind} printed nothing (rc={proc.returncode})\nstderr:\n{proc.stderr[-3000:]}"
    return lines


def produce(namesrv: str, sends: list[dict], group: str = "PG", timeout_ms: int = 8000, retries: int = 3) -> list[dict]:
    """Send with the official producer. `retries` re-sends a message whose send raised (see the
    worker: the 1.0.1 client can fail a request before it reaches any broker); 0 for status tests."""
    out = run_worker(
        "produce", {"namesrv": namesrv, "group": group, "timeout_ms": timeout_ms, "sends": sends, "retries": retries}
    )
    return out[-1]["results"]


def consume(
    namesrv: str, topic: str, group: str, expect: int, deadline_s: float = 60, linger_s: float = 0.5
) -> list[dict]:
    lines = run_worker(
        "consume",
        {
            "namesrv": namesrv,
            "topic": topic,
            "group": group,
            "expect": expect,
            "deadline_s": deadline_s,
            "props": USER_PROPS,
            "linger_s": linger_s,
        },
        deadline_s + 30,
    )
    LAST_CONSUMER_PID[0] = next((l["pid"] for l in lines if "pid" in l), 0)
    return [l for l in lines if "body" in l]


def native_log(pid: int, lines: int = 60) -> str:
    """Tail of the C++ client's own log for a worker process (it logs under ~/logs/rocketmq-cpp)."""
    logs = sorted(Path.home().joinpath("logs", "rocketmq-cpp").glob(f"{pid}_*"))
    if not logs:
        return f"(no native log for pid {pid})"
    return "\n".join(logs[-1].read_text(errors="replace").splitlines()[-lines:])


def consume_all(
    namesrv: str, topic: str, group: str, bodies: set[str], rounds: int = 3, round_s: float = 20, linger_s: float = 0.5
) -> tuple[list[dict], int]:
    """Consume until every body in `bodies` was seen, restarting the consumer process (same group, so
    it resumes at its committed offsets) when a round ends short. The 1.0.1 client can lose an
    async pull whose first connection attempt hit its transport-lock race; the queue then stalls
    for that process's lifetime (seen in its native log as a pull never answered). Returns all
    messages and the number of rounds used."""
    got: list[dict] = []
    for n in range(1, rounds + 1):
        missing = bodies - {m["body"] for m in got}
        got += consume(namesrv, topic, group, expect=len(missing), deadline_s=round_s, linger_s=linger_s)
        if bodies <= {m["body"] for m in got}:
            return got, n
    return got, rounds


class BackgroundConsumer:
    """A consumer process that runs until stop(); its messages are read from its output file."""

    def __init__(self, tmp: Path, namesrv: str, topic: str, group: str, name: str):
        self.stop_file = tmp / f"stop-{name}"
        self.out = tmp / f"consumer-{name}.out"
        job = {
            "namesrv": namesrv,
            "topic": topic,
            "group": group,
            "deadline_s": 120,
            "stop_file": str(self.stop_file),
            "instance": name,
            "props": USER_PROPS,
        }
        self.fh = open(self.out, "w")
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), "consume", json.dumps(job)],
            stdout=self.fh,
            stderr=subprocess.DEVNULL,
            text=True,
        )

    def messages(self) -> list[dict]:
        lines = []
        for l in self.out.read_text().splitlines():
            try:
                obj = json.loads(l)
            except ValueError:
                continue  # a line still being written
            if "body" in obj:
                lines.append(obj)
        return lines

    def stop(self, timeout: float = 30) -> None:
        self.stop_file.write_text("stop")
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.fh.close()


def msgs(prefix: str, n: int, big_every: int = 0, tags: str = "tagA") -> list[dict]:
    out = []
    for i in range(n):
        body = f"{prefix}-{i}-" + ("B" * 6000 if big_every and i % big_every == 0 else "small")
        out.append(
            {"body": body, "tags": tags, "keys": f"{prefix}-key-{i}", "props": {"up": f"v{i}", "seq": str(i)}, "arg": i}
        )
    return out


def metric_value(url: str, name: str) -> float:
    with urllib.request.urlopen(f"{url}/metrics", timeout=2) as r:
        return metric(r.read().decode(), name) or 0.0


# -- the 2m-2s cluster ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cluster")
    with two_async_groups(tmp) as (ns, nodes):
        yield ns, nodes, tmp


def test_every_send_mode_and_a_push_consumer_sees_messages_exactly_as_sent(cluster):
    ns, nodes, _ = cluster
    topic = unique_name("Modes")
    sync, asyn, oneway = msgs("sync", 6, big_every=3), msgs("async", 4, big_every=2), msgs("oneway", 3)
    orderly, batch = [dict(m, arg=7) for m in msgs("orderly", 5)], msgs("batch", 4)  # one sharding argument
    results = produce(
        ns.addr,
        [
            {"mode": "sync", "topic": topic, "messages": sync},
            {"mode": "async", "topic": topic, "messages": asyn},
            {"mode": "oneway", "topic": topic, "messages": oneway},
            {"mode": "orderly", "topic": topic, "messages": orderly},
            {"mode": "batch", "topic": topic, "messages": batch},
        ],
    )
    sent = sync + asyn + oneway + orderly + batch
    assert len(results) == len(sent) - len(batch) + 1
    for r in results:
        assert "error" not in r and r["status"] in (SEND_OK, None), r
    # send_orderly with the same argument lands in the same queue, in order
    ordered = results[len(sync) + len(asyn) + len(oneway) :][: len(orderly)]
    offsets = [r["offset"] for r in ordered]
    assert offsets == list(range(offsets[0], offsets[0] + len(orderly))), str(offsets)

    got, _rounds = consume_all(ns.addr, topic, "G-modes", {m["body"] for m in sent})
    by_body = {m["body"]: m for m in got}
    assert len(by_body) == len(sent), f"got {len(by_body)} distinct of {len(sent)}"
    for spec in sent:
        m = by_body[spec["body"]]
        assert (m["tags"], m["keys"], m["topic"]) == (spec["tags"], spec["keys"], topic)
        assert m["props"] == spec["props"]
    assert any(len(b) >= 6000 for b in by_body)  # compressed by the client, stored as sent, inflated back
    # send_orderly with one argument: one queue, in send order (as the consumer sees them)
    placed = [(by_body[m["body"]]["queue_id"], by_body[m["body"]]["queue_offset"]) for m in orderly]
    assert placed == [(placed[0][0], o) for o in offsets], str(placed)
    # the messages went to both masters
    assert nodes["broker-a"].total_messages(topic, 4) > 0
    assert nodes["broker-b"].total_messages(topic, 4) > 0
    # and the client's plain sends (all but each master's first, which creates the topic) took the
    # compiled fast path where it is built: the unmodified client's frames are what it reads
    if nodes["broker-a"].status()["sendPath"] == "compiled":
        fast = sum(
            metric_value(b.metrics_url, "rocketmq_send_fastpath_messages_total")
            for b in (nodes["broker-a"], nodes["broker-b"])
        )
        assert fast >= len(sync) + len(asyn) - 2, fast


def test_two_consumers_split_the_queues_and_one_takes_over(cluster):
    ns, nodes, tmp = cluster
    topic = unique_name("Split")
    produce(ns.addr, [{"mode": "sync", "topic": topic, "messages": msgs("warm", 1)}])  # create the topic
    group = "G-split"
    a = BackgroundConsumer(tmp, ns.addr, topic, group, "ca")
    b = BackgroundConsumer(tmp, ns.addr, topic, group, "cb")
    try:
        wait_until(lambda: len(a.messages()) + len(b.messages()) >= 1, 40, "both consumers rebalanced")
        first = msgs("first", 40)
        produce(ns.addr, [{"mode": "sync", "topic": topic, "messages": first}])
        want = {m["body"] for m in first}

        def all_seen():
            return want <= {m["body"] for m in a.messages() + b.messages()}

        wait_until(all_seen, 40, "the first batch consumed")
        qa = {(m["queue_id"]) for m in a.messages() if m["body"] in want}
        qb = {(m["queue_id"]) for m in b.messages() if m["body"] in want}
        assert qa and qb, "both consumers should own queues"
        seen_a = {m["body"] for m in a.messages()}
        seen_b = {m["body"] for m in b.messages()}
        assert not (seen_a & seen_b & want), "a message went to both members of the group"
        b.stop()
        second = msgs("second", 30)
        produce(ns.addr, [{"mode": "sync", "topic": topic, "messages": second}])
        want2 = {m["body"] for m in second}
        wait_until(lambda: want2 <= {m["body"] for m in a.messages()}, 60, "consumer a takes over every queue")
    finally:
        a.stop()
        b.stop()


def committed_offsets(nodes, topic: str, group: str, queues: int = 4) -> int:
    """The group's committed offsets for the topic, summed over both masters' queues (QUERY_CONSUMER_OFFSET)."""
    total = 0
    for name in ("broker-a", "broker-b"):
        for q in range(queues):
            r = rpc(nodes[name].addr, 14, {"consumerGroup": group, "topic": topic, "queueId": str(q)})
            if r.code == 0:
                total += int(r.ext_fields["offset"])
    return total


def queue_table(nodes, topic: str, group: str, queues: int = 4) -> list[tuple]:
    """(broker, queue, committed offset, max offset) for each master queue: where a missing message sits."""
    rows = []
    for name in ("broker-a", "broker-b"):
        for q in range(queues):
            r = rpc(nodes[name].addr, 14, {"consumerGroup": group, "topic": topic, "queueId": str(q)})
            rows.append(
                (
                    name,
                    q,
                    int(r.ext_fields["offset"]) if r.code == 0 else f"code {r.code}",
                    nodes[name].max_offset(topic, q),
                )
            )
    return rows


def test_offsets_survive_a_consumer_restart(cluster):
    ns, nodes, _ = cluster
    topic = unique_name("Restart")
    before = msgs("before", 12)
    produce(ns.addr, [{"mode": "sync", "topic": topic, "messages": before}])
    got, _ = consume_all(ns.addr, topic, "G-restart", {m["body"] for m in before}, linger_s=0)
    assert {m["body"] for m in before} <= {m["body"] for m in got}
    # no fixed wait: the consumer commits its offsets as it shuts down; poll the brokers for them
    wait_until(
        lambda: committed_offsets(nodes, topic, "G-restart") >= len(before), 20, "the consumer's offsets are committed"
    )
    after = msgs("after", 7)
    results = produce(ns.addr, [{"mode": "sync", "topic": topic, "messages": after}])
    assert [r.get("status") for r in results] == [SEND_OK] * len(after), results
    got2, _ = consume_all(ns.addr, topic, "G-restart", {m["body"] for m in after})
    bodies = [m["body"] for m in got2]
    assert set(bodies) == {m["body"] for m in after}, (
        "a restarted consumer must resume at its committed offsets\n"
        f"sends: {results}\nphase 1 got {sorted((m['queue_id'], m['queue_offset']) for m in got)}\n"
        f"phase 2 got {sorted((m['queue_id'], m['queue_offset'], m['body']) for m in got2)}\n"
        f"queues (broker, queue, committed, max): {queue_table(nodes, topic, 'G-restart')}\n"
        f"{native_log(LAST_CONSUMER_PID[0], 150)}"
    )


def test_consumers_read_from_the_slave_when_the_master_is_stopped(cluster):
    ns, nodes, _ = cluster
    topic = unique_name("Failover")
    sent = msgs("fo", 24)
    produce(ns.addr, [{"mode": "sync", "topic": topic, "messages": sent}])
    master, slave = nodes["broker-a"], nodes["broker-a-s"]
    on_a = master.total_messages(topic, 4)
    assert on_a > 0
    wait_until(
        lambda: (
            slave.status()["maxPhyOffset"] == master.status()["maxPhyOffset"]
            and slave.status()["dispatchOffset"] == slave.status()["maxPhyOffset"]
        ),
        20,
        "slave caught up",
    )
    master.stop()
    wait_until(lambda: 0 not in ns.broker_addrs("broker-a"), 20, "the name server dropped the master")
    try:
        got, _ = consume_all(ns.addr, topic, "G-failover", {m["body"] for m in sent})
        missing = {m["body"] for m in sent} - {m["body"] for m in got}
        assert not missing, (
            f"missing {sorted(missing)}; slave queues "
            f"{[slave.max_offset(topic, q) for q in range(4)]}; got "
            f"{sorted((m['queue_id'], m['queue_offset']) for m in got)}\n"
            f"{native_log(LAST_CONSUMER_PID[0], 150)}"
        )
        assert slave.total_messages(topic, 4) == on_a
        # the slave's served-pull log (rmqha/broker/observability/served.py) names every receive of broker-a's queues, as the
        # sampler reads it: this is how a chaos run's audit knows which node served each receive
        reader = ServedReader(
            {
                "nodes": [
                    {
                        "name": "broker-a-s",
                        "brokerName": "broker-a",
                        "brokerId": 1,
                        "statusUrl": f"{slave.metrics_url}/status",
                    }
                ]
            }
        )
        ranges = [r for r in reader.rows(timeout=2.0) if r.get("group") == "G-failover" and r["topic"] == topic]
        assert ranges and all(r["node"] == "broker-a-s" for r in ranges)
        on_slave = {(q, o) for q in range(4) for o in range(slave.max_offset(topic, q))}
        covered = {(r["queueId"], o) for r in ranges for o in range(r["from"], r["next"])}
        assert on_slave <= covered, f"broker-a's messages not in its slave's served log: {sorted(on_slave - covered)}"
        assert sum(r["messages"] for r in ranges) >= on_a
        assert reader.rows(timeout=2.0) == [], "a second read returns only what is new"
    finally:
        master.start()  # same store: it recovers and the slave reconnects


# -- SYNC_MASTER statuses -------------------------------------------------------------------------


@pytest.fixture
def sync_pair(tmp_path):
    with master_and_slave(tmp_path, "broker-c", role="SYNC_MASTER", wait_connected=True) as pair:
        yield pair


def status_send(namesrv: str, topic: str, prefix: str, master, stored_before: int) -> list[dict]:
    """One async send and the status the broker answered. A send that failed in the client before it
    reached the broker (the 1.0.1 client's transport race: an "error", and no new message on the
    master) is tried again; one that reached the broker never is."""
    for _ in range(3):
        r = produce(namesrv, [{"mode": "async", "topic": topic, "messages": msgs(prefix, 1)}], retries=0)
        if "error" not in r[0] or master.total_messages(topic, 4) != stored_before:
            return r
    return r


def test_sync_master_reports_flush_slave_timeout_and_slave_not_available(sync_pair):
    ns, master, slave = sync_pair
    topic = unique_name("Sync")
    # producer send timeout (8 s) is above the broker's sync wait (syncFlushTimeout=1500)
    ok = status_send(ns.addr, topic, "ok", master, 0)
    assert ok[0].get("status") == SEND_OK, ok
    assert master.total_messages(topic, 4) == 1

    slave.pause()  # the connection stays up but nothing is acknowledged
    try:
        t0 = time.monotonic()
        slow = status_send(ns.addr, topic, "slow", master, 1)
        assert slow[0].get("status") == FLUSH_SLAVE_TIMEOUT, slow
        assert time.monotonic() - t0 >= 1.5
        assert master.total_messages(topic, 4) == 2  # stored on the master all the same
    finally:
        slave.resume()

    slave.stop()
    wait_until(lambda: master.status()["ha"]["connectionCount"] == 0, 20, "master saw the slave go")
    before = master.status()["maxPhyOffset"]
    gone = status_send(ns.addr, topic, "gone", master, 2)
    assert gone[0].get("status") == SLAVE_NOT_AVAILABLE, gone
    assert master.total_messages(topic, 4) == 3
    assert master.status()["maxPhyOffset"] > before

    # The sync path never shows the status: it retries and raises although the broker stored it.
    retried = produce(
        ns.addr, [{"mode": "orderly", "topic": topic, "messages": [{**msgs("ord", 1)[0], "retry": 1}]}], retries=0
    )
    assert "error" in retried[0], retried
    # Polled: under a loaded make test the client can give up (its timeout) before the broker has
    # stored the attempt it is still processing (seen once at 7 minutes into a full run).
    wait_until(
        lambda: master.total_messages(topic, 4) >= 4,
        15,
        f"the orderly send's attempts stored on the master (client said {retried[0]})",
    )
