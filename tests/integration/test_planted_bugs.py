"""Checkers that can fail: each planted bug (rmqha/controls/planted.py) breaks one guarantee the audit checks,
and a real chaos run with it must turn that guarantee's verdict, and the guarantee matrix's cell, to FAIL.

One local 2m-2s-sync run carries three bugs, one per place they live:
  broker-a    ack-before-replication: SEND_OK without a slave. Its slave is killed, then the master
              loses power (it flushes every 60 s, so nothing it wrote was fsynced): what it
              acknowledged meanwhile is on no node -> history.acked-lost FAIL, and the matrix
              cell of the fault active at those sends FAIL.
  broker-b    duplicate-store: every message appended twice -> history.uniq-once FAIL.
  broker-b-s  corrupt-replication: a byte flipped in each replicated chunk -> log.integrity and
              replica.consistent of broker-b-s FAIL.
Verdicts are read from the audit's summary.json by (id, subject) (rmqha/pipeline/ids.py), never by name.
All three runs here are `make test-checkers` (about 4 min each on a loaded machine, most of it the
Spark audit); `make test` runs the short versions: each planted bug's broker behaviour
(tests/unit/processors/test_planted_bugs.py) and each checker against bugs planted in data
(tests/unit/pipeline). The same run without the bugs is the control (test_the_same_schedule_without_bugs_passes): the same guarantees PASS there, so the FAILs come from the bugs and not from the run.
A fourth bug, skip-flush (SYNC_FLUSH answering SEND_OK with nothing fsynced), is caught the same way on
2m-noslave (`make test-checkers`).

The serving bugs (rmqha/controls/planted.py SERVING_BUGS) break what a consumer gets, not what is stored: each
runs on every node of a 2m-noslave cluster, 9 s at 100 msg/s plus the workload's orderly lane (40 orderly
sends a second over 8 sharding keys, read by an orderly consumer group), no fault, and must turn its delivery
verdict: reorder-pull -> delivery.reordered FAIL (all in `make test-checkers`; `make test` has the bug's broker
behaviour in tests/unit/controls/test_planted_bugs.py and the verdict on planted data in tests/unit/pipeline), duplicate-pull -> delivery.duplicate WARN with a count (at-least-once allows duplicates:
the checker counts them and never fails on them, so the run passes), offset-regression -> delivery.offset-regression FAIL,
phantom-pull -> delivery.unexpected FAIL. The same run without a bug (test_serving_control_passes) passes
every one of them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rmqha.matrix import cells, promises
from rmqha.cluster.topology import load_topology
from rmqha.pipeline import delivery, ids, offsets

from .test_local_cluster import free_base_port

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]
pytest.importorskip("rocketmq.client")

# broker-a-s killed at t=2 for 5 s; broker-a loses power at t=4 (back at t=5.5): between t=2 and t=4 a
# correct SYNC_MASTER answers SLAVE_NOT_AVAILABLE, so nothing it acknowledged can be lost.
SCHEDULE = [
    {"at": 2, "hold": 5, "kind": "kill-slave", "target": "broker-a-s"},
    {"at": 4, "hold": 1.5, "kind": "power-loss", "target": "broker-a"},
]
SLOW_FLUSH = {"broker-a:flushIntervalCommitLog": "60000"}
BUGS = {
    "broker-a:plantBug": "ack-before-replication",
    "broker-b:plantBug": "duplicate-store",
    "broker-b-s:plantBug": "corrupt-replication",
}


def chaos_run(
    tmp_path: Path,
    name: str,
    topology: str,
    schedule: list[dict],
    sets: dict[str, str],
    extra: list[str] = (),
    timeout: float = 400,
):
    """python -m rmqha.chaos.run on the local backend with an explicit schedule; (exit code, stdout, run folder)."""
    (tmp_path / "schedule.json").write_text(json.dumps(schedule))
    env = dict(os.environ, CLUSTER_RUN_ROOT=str(tmp_path / "run"), PYTHONPATH=str(REPO))
    cmd = [
        sys.executable,
        "-m",
        "rmqha.chaos.run",
        "--backend",
        "local",
        "--topology",
        topology,
        "--name",
        name,
        "--base-port",
        str(free_base_port(load_topology(topology))),
        "--duration",
        "9",
        "--rate",
        "100",
        "--schedule",
        str(tmp_path / "schedule.json"),
        "--catchup-timeout",
        "15",
        # these runs were calibrated on the broker's own fsync report; the crashfs cut has its own
        # (tests/integration/test_power_crashfs.py); a later --power-model in extra wins
        "--power-model",
        "reported",
    ]
    for k, v in sets.items():
        cmd += ["--set", f"{k}={v}"]
    cmd += list(extra)
    run_dir = tmp_path / "run" / name
    try:
        r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    finally:
        if (run_dir / "state.json").exists():  # a run that died half-way must not leave processes
            subprocess.run(
                [sys.executable, "-m", "rmqha.cluster", "down", "--name", name, "--keep-data"],
                cwd=REPO,
                env=env,
                capture_output=True,
                timeout=60,
            )
    return r.returncode, r.stdout + r.stderr[-3000:], run_dir


AUDITED = [
    pytest.param(True, marks=pytest.mark.checkers, id="audited"),
    pytest.param(False, id="run-only"),
]
"""Parametrize a chaos-run test with this: `make test` runs it without the Spark audit (`--no-audit`: the run's own
checks: catch-up, drain, its exit status), `make test-checkers` with the audit's verdicts too."""


def audited(run_dir: Path) -> dict[tuple[str, str], dict]:
    """{(verdict id, subject): verdict} from the run's audit summary (report/summary.json)."""
    summary = json.loads((run_dir / "report" / "summary.json").read_text())
    return {(v["id"], v.get("subject") or ""): v for v in summary["verdicts"]}


def verdicts(run_dir: Path) -> dict[tuple[str, str], str]:
    """{(verdict id, subject): status}."""
    return {k: v["status"] for k, v in audited(run_dir).items()}


def matrix_cells(run_dir: Path, topology: str, flush: str) -> dict[tuple[str, str], tuple[str, str]]:
    summary = json.loads((run_dir / "report" / "summary.json").read_text())
    samples = cells.cell_samples(run_dir, summary, topology, flush)
    return {
        (s["kind"], s["role"]): promises.judge(promises.promise(topology, flush, s["kind"], s["role"]), [s])
        for s in samples
    }


@pytest.mark.checkers
def test_planted_bugs_turn_their_verdicts_fail(tmp_path):
    rc, out, run_dir = chaos_run(tmp_path, "planted", "2m-2s-sync", SCHEDULE, {**SLOW_FLUSH, **BUGS})
    assert "PLANTED BUGS ON" in (run_dir / "nodes" / "broker-a" / "broker.log").read_text(), out
    assert rc == 1, out  # the audit ran and failed (3 would be a run that could not be done)
    v = verdicts(run_dir)
    assert v[(ids.HISTORY_ACKED_LOST, "")] == "FAIL", out
    assert v[(ids.HISTORY_UNIQ_ONCE, "")] == "FAIL", out
    assert v[(ids.LOG_INTEGRITY, "broker-b-s")] == "FAIL", out
    assert v[(ids.REPLICA, "broker-b-s")] == "FAIL", out
    # the bugs break only what they break: broker-a's own log and broker-b's master log stay readable
    assert v[(ids.LOG_INTEGRITY, "broker-a")] == "PASS" and v[(ids.LOG_INTEGRITY, "broker-b")] == "PASS", out
    assert v[(ids.HISTORY_PHANTOM, "")] == "PASS", out
    # each loss is a message sent while broker-a-s was down and acknowledged all the same
    assert "kill-slave broker-a-s" in audited(run_dir)[(ids.FAULTS_LOST, "")]["detail"], out
    cells = matrix_cells(run_dir, "2m-2s-sync", "ASYNC_FLUSH")
    assert cells[("kill-slave", "slave")][0] == "FAIL", cells


@pytest.mark.checkers
def test_the_same_schedule_without_bugs_passes(tmp_path):
    # The master power loss forks broker-a's logs (SLAVE_AHEAD): what broker-a acknowledged before it is then
    # only on its slave, stranded for every consumer group, and the delivery verdicts fail without bugs too.
    # The control therefore runs with --repair (the operator's fix): the slave's stranded messages go back
    # to the master, the slave resyncs, and everything holds.
    rc, out, run_dir = chaos_run(tmp_path, "control", "2m-2s-sync", SCHEDULE, SLOW_FLUSH, ["--repair"])
    v = verdicts(run_dir)
    for key in (
        (ids.HISTORY_ACKED_LOST, ""),
        (ids.HISTORY_UNIQ_ONCE, ""),
        (ids.LOG_INTEGRITY, "broker-b-s"),
        (ids.REPLICA, "broker-b-s"),
        (ids.HISTORY_PHANTOM, ""),
        (ids.REPLICA, "broker-a-s"),
    ):
        assert v[key] == "PASS", (key, out)
    summary = json.loads((run_dir / "report" / "summary.json").read_text())
    for group, d in summary["delivery"].items():
        assert d["lost"] == d["stranded"] == d["lostAfterDelivery"] == 0, (group, d)
    assert rc == 0, out
    cells = matrix_cells(run_dir, "2m-2s-sync", "ASYNC_FLUSH")
    assert cells[("kill-slave", "slave")][0] == "PASS", cells
    assert cells[("power-loss", "master")][0] in ("PASS", "WEAK"), cells  # a divergence the promise allows


@pytest.mark.checkers
def test_skip_flush_loses_what_sync_flush_acknowledged(tmp_path):
    schedule = [{"at": 3, "hold": 1.5, "kind": "power-loss", "target": "broker-a"}]
    rc, out, run_dir = chaos_run(
        tmp_path,
        "skipflush",
        "2m-noslave",
        schedule,
        {"flushDiskType": "SYNC_FLUSH", "broker-a:plantBug": "skip-flush"},
    )
    assert rc == 1, out
    assert verdicts(run_dir)[(ids.HISTORY_ACKED_LOST, "")] == "FAIL", out
    assert "power-loss broker-a" in audited(run_dir)[(ids.FAULTS_LOST, "")]["detail"], out


@pytest.mark.checkers
def test_a_master_that_forks_without_a_power_loss_fails_replicas_and_delivery(tmp_path):
    """lose-tail-on-restart: broker-a drops its last 16 KiB whenever it starts. Killed (no power loss), it
    comes back behind its slave: a fork no fault allows (replica FAIL, not the allowed-fork WARN), and what
    it acknowledged in that tail is stranded for a group that subscribes after the heal."""
    schedule = [{"at": 3, "hold": 1.5, "kind": "kill-master", "target": "broker-a"}]
    rc, out, run_dir = chaos_run(
        tmp_path,
        "losetail",
        "2m-2s-sync",
        schedule,
        {"broker-a:plantBug": "lose-tail-on-restart"},
        ["--late-consumer-after-heal"],
    )
    assert rc == 1, out
    summary = json.loads((run_dir / "report" / "summary.json").read_text())
    by_id = audited(run_dir)
    assert by_id[("replica.consistent", "broker-a-s")]["status"] == "FAIL", out
    assert "allowed fork" not in by_id[("replica.consistent", "broker-a-s")]["detail"], out
    late = next(g for g in summary["delivery"] if g.startswith("ChaosLateCG"))
    assert summary["delivery"][late]["stranded"] > 0, summary["delivery"]
    assert by_id[("delivery.stranded", late)]["status"] == "FAIL", out


@pytest.mark.checkers
def test_a_missing_queue_entry_and_an_ack_then_truncate_fail_their_verdicts(tmp_path):
    """skip-queue-entry on broker-b (every 50th message of a queue stored and acknowledged, no queue unit:
    nobody can pull it) and ack-then-truncate on broker-a (after its 300th message it cuts 16 KiB of
    acknowledged log and writes on at the cut). No fault at all: only the verdicts can see them."""
    rc, out, run_dir = chaos_run(
        tmp_path,
        "queuecut",
        "2m-2s-sync",
        [],
        {"broker-b:plantBug": "skip-queue-entry", "broker-a:plantBug": "ack-then-truncate"},
        ["--late-consumer-after-heal"],
    )
    assert rc == 1, out
    summary = json.loads((run_dir / "report" / "summary.json").read_text())
    by_id = audited(run_dir)
    assert by_id[("queues.consistent", "broker-b")]["status"] == "FAIL", out
    assert by_id[("queues.consistent", "broker-a")]["status"] == "PASS", out
    for group, d in summary["delivery"].items():
        assert d["lostByReason"].get("unqueued", 0) > 0, (group, d)
        assert by_id[("delivery.lost", group)]["status"] == "FAIL", out
    # broker-a's cut: its slave holds what it lost, and new records where the slave has others
    assert by_id[("replica.consistent", "broker-a-s")]["status"] == "FAIL", out
    late = next(g for g in summary["delivery"] if g.startswith("ChaosLateCG"))
    d = summary["delivery"][late]
    assert d["stranded"] + d["lostByReason"].get("nowhere", 0) > 0, d


# -- the serving bugs: what a consumer gets --------------------------------------------------------------
ORDERLY = ["--orderly-rate", "40"]


def serving_run(tmp_path, bug: str | None):
    """A no-fault 2m-noslave run with the orderly lane, `bug` planted on every node; (rc, out, summary,
    {(verdict id, subject): verdict}, {group kind: summary.json's delivery block})."""
    rc, out, run_dir = chaos_run(
        tmp_path, (bug or "serving-control").split("-")[0], "2m-noslave", [], {"plantBug": bug} if bug else {}, ORDERLY
    )
    summary = json.loads((run_dir / "report" / "summary.json").read_text())
    by_id = audited(run_dir)
    groups = {("orderly" if g.startswith("ChaosOrderlyCG") else "main"): (g, d) for g, d in summary["delivery"].items()}
    assert set(groups) == {"main", "orderly"}, summary["delivery"]
    assert groups["orderly"][1]["ordered"] and groups["orderly"][1]["acknowledged"] > 100, groups
    return rc, out, by_id, groups


def status(by_id, vid, group):
    return by_id[(vid, group)]["status"]


@pytest.mark.checkers
def test_a_broker_that_reorders_pulls_fails_order_per_key(tmp_path):
    rc, out, by_id, groups = serving_run(tmp_path, "reorder-pull")
    g, d = groups["orderly"]
    assert rc == 1, out
    assert d["reordered"] > 0 and status(by_id, delivery.ID_REORDERED, g) == "FAIL", (d, out)
    # nothing else is wrong: every message delivered once, none unexpected; per queue the offsets the
    # ordered consumer saw are in order (the broker swapped the offsets too): only the per-key check can
    # see it. The concurrent consumer's callback threads may report a receive out of offset order (seen
    # once in CI: a WARN "... (0 by ordered consumers)"), which the verdict allows as a WARN.
    for vid in (delivery.ID_LOST, delivery.ID_UNEXPECTED, delivery.ID_DUPLICATE):
        assert status(by_id, vid, g) == "PASS", (vid, out)
    per_queue = by_id[(ids.HISTORY_QUEUE_ORDER, "")]
    assert per_queue["status"] == "PASS" or (
        per_queue["status"] == "WARN" and "(0 by ordered consumers)" in per_queue["detail"]
    ), out


@pytest.mark.checkers
def test_serving_control_passes(tmp_path):
    rc, out, by_id, groups = serving_run(tmp_path, None)
    for kind, (g, d) in groups.items():
        for vid in (delivery.ID_LOST, delivery.ID_UNEXPECTED, delivery.ID_DUPLICATE):
            assert status(by_id, vid, g) == "PASS", (kind, vid, out)
        assert d["duplicates"] == d["unexpected"] == d["reordered"] == 0, (kind, d)
    assert status(by_id, delivery.ID_REORDERED, groups["orderly"][0]) == "PASS", out
    assert by_id[(offsets.ID_REGRESSION, "")]["status"] == "PASS", out
    assert status(by_id, ids.HISTORY_PHANTOM, "") == "PASS", out
    assert rc == 0, out


@pytest.mark.checkers
def test_a_broker_that_serves_messages_twice_shows_duplicates(tmp_path):
    rc, out, by_id, groups = serving_run(tmp_path, "duplicate-pull")
    g, d = groups["main"]
    # at-least-once allows duplicates: the verdict is WARN with the count (never FAIL), and the run passes
    assert d["duplicates"] > 0 and status(by_id, delivery.ID_DUPLICATE, g) == "WARN", (d, out)
    assert f"{d['duplicates']} duplicate receive(s)" in by_id[(delivery.ID_DUPLICATE, g)]["detail"], out
    for kind, (g, _d) in groups.items():
        assert status(by_id, delivery.ID_LOST, g) == "PASS", (kind, out)
    assert rc == 0, out


@pytest.mark.checkers
def test_a_broker_that_moves_a_committed_offset_back_fails_offset_regression(tmp_path):
    rc, out, by_id, groups = serving_run(tmp_path, "offset-regression")
    assert rc == 1, out
    for kind, (g, d) in groups.items():
        v = by_id[(offsets.ID_REGRESSION, g)]
        assert v["status"] == "FAIL" and "no fault" in v["detail"], (kind, out)
        assert status(by_id, delivery.ID_LOST, g) == "PASS", (kind, out)


@pytest.mark.checkers
def test_a_broker_that_serves_a_phantom_fails_unexpected(tmp_path):
    rc, out, by_id, groups = serving_run(tmp_path, "phantom-pull")
    assert rc == 1, out
    g, d = groups["main"]
    assert d["unexpected"] > 0 and status(by_id, delivery.ID_UNEXPECTED, g) == "FAIL", (d, out)
    # the orderly group gets phantoms only in front of messages it pulls while they are fresh (the C++
    # orderly consumer starts seconds late: 8 in a run on a loaded machine); whatever it got is counted
    og, od = groups["orderly"]
    assert status(by_id, delivery.ID_UNEXPECTED, og) == ("FAIL" if od["unexpected"] else "PASS"), (od, out)
    for kind, (g, d) in groups.items():
        # the real message behind each phantom is served next: nothing lost
        assert status(by_id, delivery.ID_LOST, g) == "PASS", (kind, out)
    assert status(by_id, ids.HISTORY_PHANTOM, "") == "FAIL", out


@pytest.mark.checkers
def test_a_fault_with_no_visible_effect_is_not_exercised(tmp_path):
    """The matrix's no-op check on a real run: a master paused for 50 ms (every sampler request answered,
    every send acknowledged: the fault did nothing anyone could see, as a nemesis that silently does nothing)
    is "not exercised", never PASS; the same fault held 3 s is seen (its node stops answering) and judged.
    A nemesis that really does nothing cannot be planted from here: it would live in rmqha/chaos/nemesis.py."""
    schedule = [
        {"at": 2, "hold": 0.05, "kind": "pause-master", "target": "broker-a"},
        {"at": 4, "hold": 3, "kind": "pause-master", "target": "broker-b"},
    ]
    rc, out, run_dir = chaos_run(tmp_path, "noop", "2m-noslave", schedule, {})
    assert rc == 0, out
    summary = json.loads((run_dir / "report" / "summary.json").read_text())
    samples = {s["target"]: s for s in cells.cell_samples(run_dir, summary, "2m-noslave", "ASYNC_FLUSH")}
    judged = {
        t: promises.judge(promises.promise("2m-noslave", "ASYNC_FLUSH", s["kind"], s["role"]), [s])[0]
        for t, s in samples.items()
    }
    assert "no visible effect" in (samples["broker-a"]["not_exercised"] or ""), samples
    assert judged == {"broker-a": "not exercised", "broker-b": "PASS"}, (judged, samples)
