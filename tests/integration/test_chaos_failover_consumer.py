"""Consumers through a master outage, in a chaos run: the kit records which node served each receive.

broker-a is killed at t=3 for 40 s. The workload's first consumer group subscribed before the kill and
(the 4.x client refreshes routes every 30 s) waits for broker-a; a second group subscribes at t=8
(`--late-consumer-at`), gets a route without the master and reads broker-a's queues from its slave.
The audit must attribute those receives to broker-a-s during the outage, from the brokers' served-pull
logs (rmqha/broker/observability/served.py), and still find nothing lost and nothing received that was never sent.
A long run (about 2 min), so `make test-checkers` runs it; `make test` has the short versions
(tests/unit/observability/test_served_log.py, tests/unit/pipeline/test_served.py, and the slave-consumer case of
test_official_client.py, which checks the slave's served log).
"""

from __future__ import annotations

import json

import pytest

from rmqha.pipeline import ids

from .test_planted_bugs import chaos_run, verdicts

pytestmark = [pytest.mark.integration, pytest.mark.checkers, pytest.mark.timeout(420)]
pytest.importorskip("rocketmq.client")

SCHEDULE = [{"at": 3, "hold": 40, "kind": "kill-master", "target": "broker-a"}]


def test_a_consumer_that_subscribes_during_a_master_outage_reads_from_the_slave(tmp_path):
    rc, out, run_dir = chaos_run(tmp_path, "failover", "2m-2s-sync", SCHEDULE, {}, extra=["--late-consumer-at", "8"])
    assert rc == 0, out
    v = verdicts(run_dir)
    assert v.get((ids.HISTORY_ACKED_LOST, "")) == "PASS" and v.get((ids.HISTORY_PHANTOM, "")) == "PASS", out
    late = list((run_dir / "history").glob("consumer-late-*.jsonl"))
    lines = [json.loads(line) for line in late[0].read_text().splitlines()] if late else []
    receives = [r for r in lines if r["op"] == "receive"]
    # the group's own lines: it subscribed (owed everything: FROM_FIRST), received, and shut down after the drain
    assert receives and lines[0]["op"] == "subscribe" and lines[0]["status"] == "FROM_FIRST", out
    assert {r["op"] for r in lines} == {"subscribe", "receive", "unsubscribe"}, out
    summary = json.loads((run_dir / "report" / "summary.json").read_text())
    (outage,) = summary["receivesDuringMasterOutages"]
    assert outage["group"] == "broker-a" and outage["byNode"].get("broker-a-s", 0) > 0, summary
