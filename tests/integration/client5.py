"""The official 5.x Python client (rocketmq-python-client 5.1.2) from its own environment,
.venv-client5 (make venv-client5), through client5_worker.py: each call is one worker process."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYTHON = ROOT / ".venv-client5" / "bin" / "python"
WORKER = Path(__file__).with_name("client5_worker.py")


def require() -> None:
    if not PYTHON.exists():
        pytest.skip("the 5.x client's environment is missing: run make venv-client5")


def run(job: dict, timeout: float = 120) -> list[dict]:
    """The worker's JSON lines (the last is {"done": true})."""
    require()
    out = subprocess.run(
        [str(PYTHON), str(WORKER), json.dumps(job)], capture_output=True, text=True, timeout=timeout, cwd="/tmp"
    )
    lines = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
    if not lines or not lines[-1].get("done"):
        sys.stderr.write(out.stderr[-4000:])
        raise AssertionError(f"the 5.x client worker did not finish (exit {out.returncode}): {out.stdout[-2000:]}")
    fatal = [x for x in lines if x.get("fatal")]
    assert not fatal, (fatal, out.stderr[-3000:])
    return lines[:-1]


def produce(endpoint: str, topic: str, sends: list[dict], **kw) -> list[dict]:
    return [x for x in run({"op": "produce", "endpoint": endpoint, "topic": topic, "sends": sends, **kw}) if "i" in x]


def simple(endpoint: str, group: str, topic: str, expect: int, **kw) -> list[dict]:
    return run(
        {"op": "simple", "endpoint": endpoint, "group": group, "topic": topic, "expect": expect, **kw},
        kw.get("deadline_s", 60) + 60,
    )


def push(endpoint: str, group: str, topic: str, expect: int, **kw) -> list[dict]:
    return run(
        {"op": "push", "endpoint": endpoint, "group": group, "topic": topic, "expect": expect, **kw},
        kw.get("deadline_s", 60) + 60,
    )


def seq(endpoint: str, jobs: list[dict], timeout: float = 180) -> dict[str, list[dict]]:
    """Several jobs in one worker process (one interpreter start and client import): the lines by op."""
    by: dict[str, list[dict]] = {j["op"]: [] for j in jobs}
    for x in run({"op": "seq", "endpoint": endpoint, "jobs": jobs}, timeout=timeout):
        by.setdefault(x.get("step", "?"), []).append(x)
    return by


# The whole client surface in one worker process, for each topology and backend beside local 2m-2s-sync
# (whose test_proxy_client5.py covers each part on its own, with the DLQ and the transaction check too).
SURFACE_SENDS = (
    [{"body": "d0", "delay_s": 3}]  # first: its 5 s level passes while the rest is sent and consumed
    + [{"body": "s0"}, {"body": "s1"}, {"body": "a0", "mode": "async"}, {"body": "a1", "mode": "async"}]
    + [{"body": f"f{i}", "group": "order-1"} for i in range(3)]
    + [{"body": "t0", "transaction": "commit"}, {"body": "t1", "transaction": "rollback"}]
)
SURFACE_BODIES = sorted(s["body"] for s in SURFACE_SENDS if s.get("transaction") != "rollback")


def surface(endpoint: str, topic: str, deadline_s: float = 45) -> dict[str, list[dict]]:
    """Producer: a delay (a delivery timestamp 3 s ahead: the 5 s level), sync, async, FIFO (one group,
    one queue), a transaction committed and one rolled back; then a SimpleConsumer that acks every
    message but s1, whose invisible time it changes to 1 s, so s1 comes back (attempt 2) and is acked;
    then a PushConsumer on a group of its own. Asserts each and returns the lines by step."""
    n = len(SURFACE_BODIES)
    jobs = [
        {"op": "produce", "topic": topic, "sends": SURFACE_SENDS},
        # short long polls (await_s): the client turns to the other broker's queues sooner
        {"op": "simple", "topic": topic, "group": f"GS{topic}", "expect": n, "plan": {"s1": ["change:1"]}},
        {"op": "push", "topic": topic, "group": f"GP{topic}", "expect": n},
    ]
    by = seq(endpoint, [dict(j, await_s=1, deadline_s=deadline_s) for j in jobs], timeout=3 * deadline_s + 60)
    sent = [x for x in by["produce"] if "i" in x]
    assert [x.get("error") for x in sent] == [None] * len(SURFACE_SENDS), sent
    assert len({x["message_id"] for x in sent}) == len(SURFACE_SENDS), sent
    fifo = [x["offset"] for x in sent if x["body"].startswith("f")]
    assert fifo == list(range(fifo[0], fifo[0] + 3)), fifo  # one message group, one queue
    seen: dict[str, list] = {}
    for x in by["simple"]:
        assert "error" not in x, by["simple"]
        seen.setdefault(x["body"], []).append((x["attempt"], x["action"]))
    assert sorted(seen) == SURFACE_BODIES, by["simple"]  # the rolled back one never
    assert seen["s1"] == [(1, "change:1"), (2, "ack")], seen  # back after its new invisible time
    assert all(v == [(1, "ack")] for b, v in seen.items() if b != "s1"), seen
    d0 = next(x for x in sent if x["body"] == "d0")
    [got] = [x for x in by["simple"] if x["body"] == "d0"]
    assert got["t"] >= d0["sent_ms"] + 3000, (got, d0)  # never before its delivery timestamp
    pushed = [x for x in by["push"] if "body" in x]
    assert sorted({x["body"] for x in pushed}) == SURFACE_BODIES, by["push"]
    return by


def surface_on(cluster) -> dict[str, list[dict]]:
    """surface() on a new topic of a cluster handle (rmqha.cluster.handle.Cluster), through its proxy."""
    require()
    assert cluster.proxy, "the cluster runs no 5.x proxy"
    topic = f"P5{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic)
    return surface(cluster.proxy, topic)
