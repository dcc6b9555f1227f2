"""Every checker (rmqha/pipeline/checkers.py) on hand-written runs, without Spark, as Jepsen proves its
checkers on pathological histories: for each, a run where it must fail (or, for the informational ones,
warn) and one where it must pass; compose()'s merge rules, and a checker that crashes is UNKNOWN, never
PASS. Also: every verdict carries an id its checker owns, and the old names map to those ids (ids.py)."""

from __future__ import annotations

import json

import pytest

from rmqha.pipeline import checker, checkers, ids, report
from rmqha.pipeline import faults as pipeline_faults
from rmqha.pipeline.audit import NodeIntegrity, PairAudit
from rmqha.pipeline.checker import UNKNOWN_VALID, Result, compose, merge_valid
from rmqha.pipeline.delivery import DeliveryFindings, GroupDelivery, QueueConsistency
from rmqha.pipeline.dledger_log import DLedgerLog
from rmqha.pipeline.facts import Run
from rmqha.pipeline.faults import FaultInterval
from rmqha.pipeline.history_check import HistoryFindings
from rmqha.pipeline.runfolder import Node
from rmqha.pipeline.verdict import FAIL, INFO, PASS, UNKNOWN, WARN, Verdict

pytestmark = pytest.mark.fast

NODES = [Node("broker-a", "broker-a", 0, "SYNC_MASTER"), Node("broker-a-s", "broker-a", 1, "SLAVE")]


def clean_integrity():
    return [NodeIntegrity(n.name, 100, [], [], [], 0, 5000) for n in NODES]


def pair(**kw) -> PairAudit:
    d = dict(
        broker_name="broker-a",
        master="broker-a",
        slave="broker-a-s",
        master_role="SYNC_MASTER",
        slave_start=0,
        compare_start=0,
        master_end=5000,
        slave_end=5000,
        common_prefix_bytes=5000,
        first_divergent_offset=None,
        crc_mismatches=0,
    )
    d.update(kw)
    return PairAudit(**d)


def fault(fid, kind, target="broker-a", start=1000, end=2000, **info) -> FaultInterval:
    return FaultInterval(fid, kind, target, "broker-a", "master", None, {}, start, end, info=info)


def by_id(result: Result) -> dict[tuple[str, str], Verdict]:
    return {(v.id, v.subject): v for v in result.verdicts}


# -- replicas -------------------------------------------------------------------------------------


def test_replicas_pass_on_identical_logs():
    r = checkers.replicas(Run(nodes=NODES, integrity=clean_integrity(), pairs=[pair()]))
    assert r.valid is True and r.counts["pairs"] == 1
    v = by_id(r)
    assert v[(ids.REPLICA, "broker-a-s")].status == PASS and v[(ids.LOG_INTEGRITY, "broker-a")].status == PASS


def test_replicas_fail_on_a_crc_mismatch_and_an_unreadable_span():
    integrity = clean_integrity()
    integrity[1] = NodeIntegrity("broker-a-s", 99, [(2048, 100, "bad CRC")], [], [], 0, 5000)
    r = checkers.replicas(
        Run(nodes=NODES, integrity=integrity, pairs=[pair(first_divergent_offset=2048, crc_mismatches=1)])
    )
    assert r.valid is False
    v = by_id(r)
    assert v[(ids.REPLICA, "broker-a-s")].status == FAIL and "CRC mismatch" in v[(ids.REPLICA, "broker-a-s")].detail
    assert v[(ids.LOG_INTEGRITY, "broker-a-s")].status == FAIL and v[(ids.LOG_INTEGRITY, "broker-a")].status == PASS


def test_a_slave_that_acked_bytes_it_no_longer_has_fails():
    run = Run(nodes=NODES, integrity=clean_integrity(), pairs=[pair()], final_acks={"broker-a-s": 6000})
    r = checkers.replicas(run)
    assert r.valid is False and "lost acknowledged bytes" in by_id(r)[(ids.REPLICA, "broker-a-s")].detail


def test_a_fork_is_allowed_only_after_a_master_power_loss():
    forked = pair(first_divergent_offset=3000, fork_offset=3000, master_end=4000, common_prefix_bytes=3000)
    run = Run(nodes=NODES, integrity=clean_integrity(), pairs=[forked])
    assert checkers.replicas(run).valid is False  # no fault explains it
    run.faults = [fault(1, "power-loss")]
    r = checkers.replicas(run)
    assert r.valid is True and r.counts["forks"] == 1
    assert by_id(r)[(ids.REPLICA, "broker-a-s")].status == WARN


def test_a_group_without_a_master_warns_and_dledger_nodes_say_how_far_they_were_read():
    slaves = [Node("n0", "raft", 1, "SLAVE"), Node("n1", "raft", 2, "SLAVE")]
    slaves[0].dledger = DLedgerLog("n0", "/nowhere/dledger-n0", 41, 44, checkpoint_index=40)
    r = checkers.replicas(Run(nodes=slaves))
    assert r.valid is True
    v = by_id(r)
    assert v[(ids.REPLICA_NO_MASTER, "raft")].status == WARN
    assert "committed index 41 (checkpoint 40), 3 uncommitted" in v[(ids.DLEDGER_UNCOMMITTED, "")].detail


# -- delivery -------------------------------------------------------------------------------------


def group(**kw) -> GroupDelivery:
    g = GroupDelivery("CG1", ["T"], acknowledged=10, delivered=10, receives=10)
    for k, v in kw.items():
        setattr(g, k, v)
    return g


def test_delivery_passes_when_every_owed_send_was_received():
    r = checkers.deliveries(Run(delivery=DeliveryFindings([group()], [QueueConsistency("broker-a", 10, 10)])))
    assert r.valid is True and r.counts["lost"] == 0
    assert by_id(r)[(ids.DELIVERY_LOST, "CG1")].status == PASS
    assert by_id(r)[(ids.QUEUES, "broker-a")].status == PASS


def test_delivery_fails_on_a_lost_send_and_a_record_without_its_queue_unit():
    lost = group(delivered=9, lost=1, lost_by_reason={"unqueued": 1}, examples={ids.DELIVERY_LOST: ["s-7"]})
    r = checkers.deliveries(Run(delivery=DeliveryFindings([lost], [QueueConsistency("broker-a", 10, 9, unqueued=1)])))
    assert r.valid is False and r.counts["lost"] == 1 and r.counts["queuesBroken"] == 1
    v = by_id(r)
    assert v[(ids.DELIVERY_LOST, "CG1")].status == FAIL and "s-7" in v[(ids.DELIVERY_LOST, "CG1")].detail
    assert v[(ids.QUEUES, "broker-a")].status == FAIL


def test_delivery_fails_on_a_stranded_an_unexpected_and_a_reordered_message_and_warns_on_duplicates():
    g = group(stranded=1, unexpected=2, duplicates=3, ordered=True, reordered=1)
    v = by_id(checkers.deliveries(Run(delivery=DeliveryFindings([g]))))
    assert v[(ids.DELIVERY_STRANDED, "CG1")].status == FAIL
    assert v[(ids.DELIVERY_UNEXPECTED, "CG1")].status == FAIL
    assert v[(ids.DELIVERY_REORDERED, "CG1")].status == FAIL
    assert v[(ids.DELIVERY_DUPLICATE, "CG1")].status == WARN


def test_delivery_is_not_judged_without_histories_and_warns_without_a_group():
    assert checkers.deliveries(Run()) == Result(True, {"groups": 0}, [])
    r = checkers.deliveries(Run(delivery=DeliveryFindings()))
    assert r.valid is True and [v.id for v in r.verdicts] == [ids.DELIVERY_NO_GROUP]


# -- history --------------------------------------------------------------------------------------


def test_history_passes_when_every_acknowledged_send_is_stored_once():
    f = HistoryFindings(sends=10, acked=10, receives=10, statuses={"SEND_OK": 10})
    r = checkers.histories(Run(history=f))
    assert r.valid is True and r.counts["acked"] == 10
    assert by_id(r)[(ids.HISTORY_ACKED_LOST, "")].status == PASS


def test_history_fails_on_a_lost_send_a_duplicate_a_phantom_and_an_ordered_consumer_out_of_order():
    f = HistoryFindings(sends=3, acked=3, receives=3, statuses={"SEND_OK": 3})
    f.lost = [("UK-1", "s-1", "producer", "T", 1000)]
    f.dup_uniq = [("UK-2", 2, ["broker-a@0", "broker-a@100"])]
    f.phantoms = [("consumer", "T", "UK-9", "s-9", 0, 5)]
    f.order_violations = [("consumer", "broker-a", "T", 0, 3, 4, True)]
    f.order_violations_ordered = 1
    r = checkers.histories(Run(history=f))
    assert r.valid is False
    v = by_id(r)
    assert v[(ids.HISTORY_ACKED_LOST, "")].status == FAIL and "UK-1" in v[(ids.HISTORY_ACKED_LOST, "")].detail
    assert v[(ids.HISTORY_UNIQ_ONCE, "")].status == FAIL
    assert v[(ids.HISTORY_PHANTOM, "")].status == FAIL
    assert v[(ids.HISTORY_QUEUE_ORDER, "")].status == FAIL
    # an unordered consumer's receive out of order only warns
    f2 = HistoryFindings(sends=1, acked=1, receives=2, statuses={"SEND_OK": 1})
    f2.order_violations = [("consumer", "broker-a", "T", 0, 3, 4, False)]
    r2 = checkers.histories(Run(history=f2))
    assert r2.valid is True and by_id(r2)[(ids.HISTORY_QUEUE_ORDER, "")].status == WARN


def test_a_sync_master_send_missing_on_its_slave_fails_and_no_history_only_warns():
    f = HistoryFindings(sends=1, acked=1, statuses={"SEND_OK": 1})
    f.missing_on_slave = [("UK-1", "broker-a", "broker-a-s", 4096)]
    assert by_id(checkers.histories(Run(history=f)))[(ids.HISTORY_SYNC_ON_SLAVE, "")].status == FAIL
    empty = checkers.histories(Run())
    assert empty.valid is True and [(v.id, v.status) for v in empty.verdicts] == [(ids.HISTORY_EMPTY, WARN)]


# -- committed offsets ----------------------------------------------------------------------------


def sample(ts, off, node="broker-a"):
    return {"ts": ts, "node": node, "consumerOffsets": {"T@CG1": {"0": off}}}


def test_offsets_fail_when_a_committed_offset_moves_back_with_no_restart_and_pass_when_steady():
    back = [sample(1000, 10), sample(2000, 12), sample(3000, 7)]
    r = checkers.committed_offsets(Run(samples=back))
    assert r.valid is False and r.counts == {"regressions": 1, "unexplained": 1, "unjudgedSamples": 0}
    assert by_id(r)[(ids.OFFSET_REGRESSION, "CG1")].status == FAIL
    explained = checkers.committed_offsets(Run(samples=back, faults=[fault(1, "kill-master", start=2100, end=2900)]))
    assert explained.valid is True and by_id(explained)[(ids.OFFSET_REGRESSION, "CG1")].status == WARN
    steady = checkers.committed_offsets(Run(samples=[sample(1000, 1), sample(2000, 4)]))
    assert steady.valid is True and by_id(steady)[(ids.OFFSET_REGRESSION, "")].status == PASS
    assert checkers.committed_offsets(Run()).verdicts == []  # no consumer offsets sampled: nothing to judge


# -- the informational checkers: faults, served, trace -------------------------------------------


def test_faults_never_fail_but_warn_on_a_fault_that_exercised_nothing():
    idle = fault(1, "kill-slave", notExercised="group broker-a cannot replicate")
    never = fault(2, "pause-master", end=None)
    run = Run(history=HistoryFindings(lost=[("UK-1", "s-1", "p", "T", 1500)]), faults=[idle, never])
    r = checkers.fault_blame(run)
    assert r.valid is True and r.counts == {"faults": 2, "notExercised": 1, "skipped": 0, "cutShort": 0}
    v = by_id(r)
    assert v[(ids.FAULTS_NOT_EXERCISED, "")].status == WARN
    assert "1 never healed" in v[(ids.FAULTS_INJECTED, "")].detail
    assert v[(ids.FAULTS_LOST, "")].status == INFO and "UK-1" in v[(ids.FAULTS_LOST, "")].detail
    assert checkers.fault_blame(Run()) == Result(
        True, {"faults": 0, "notExercised": 0, "skipped": 0, "cutShort": 0}, []
    )


def test_faults_the_nemesis_skipped_or_the_runs_end_cut_short_are_warned_and_said(tmp_path):
    (tmp_path / "faults").mkdir()
    recs = [
        {"op": "inject", "id": 1, "kind": "kill-master", "target": "broker-a", "start_ms": 1000, "ts_ms": 1000},
        {
            "op": "skip",
            "id": 2,
            "kind": "kill-slave",
            "target": "broker-b-s",
            "group": "broker-b",
            "start_ms": 33000,
            "ts_ms": 33000,
            "info": {"skipped": "28.0s late, its 5s hold would end at t=38.0s, past t=37.0s"},
        },
        {
            "op": "heal",
            "id": 1,
            "kind": "kill-master",
            "target": "broker-a",
            "start_ms": 40000,
            "ts_ms": 41000,
            "info": {"cutShort": "healed at the run's end after 2.0 s of its 4 s hold"},
        },
    ]
    (tmp_path / "faults" / "f.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    run = Run(run_dir=str(tmp_path), faults=pipeline_faults.load(str(tmp_path)))
    assert [(f.id, f.start_ms, f.end_ms) for f in run.faults] == [(1, 1000, 41000)]  # a skip is no interval
    r = checkers.fault_blame(run)
    assert r.valid is True and r.counts == {"faults": 1, "notExercised": 0, "skipped": 1, "cutShort": 1}
    v = by_id(r)
    assert v[(ids.FAULTS_SKIPPED, "")].status == WARN
    assert "#2 kill-slave broker-b-s: 28.0s late" in v[(ids.FAULTS_SKIPPED, "")].detail
    assert "1 cut short by the run's end: #1 kill-master broker-a: healed at the run's end after 2.0 s" in (
        v[(ids.FAULTS_INJECTED, "")].detail
    )
    assert "| cut short |" in "\n".join(pipeline_faults.markdown(run.faults, pipeline_faults.Attribution()))


TRACE = {
    "records": 4,
    "topics": ["RMQ_SYS_TRACE_TOPIC"],
    "pub": 2,
    "sub": 2,
    "matched": 2,
    "consumed": 2,
    "failedSends": 0,
    "produceToStoreMs": {"p50": 1, "p99": 2, "max": 3},
    "storeToConsumeMs": {"p50": 4, "p99": 5, "max": 6},
}


def test_served_and_trace_say_what_they_saw_and_nothing_without_data():
    f = HistoryFindings(receives=3, served_by={"broker-a": 2, "unattributed": 1})
    r = checkers.serving(Run(history=f, have_served_files=True))
    assert r.valid is True and r.counts == {"receives": 3, "unattributed": 1}
    assert "broker-a 2; 1 unattributed" in by_id(r)[(ids.SERVED, "")].detail
    assert checkers.serving(Run()).verdicts == []
    r = checkers.traces(Run(trace=TRACE))
    assert r.valid is True and by_id(r)[(ids.TRACE, "")].detail.startswith("4 trace records in RMQ_SYS_TRACE_TOPIC")
    assert checkers.traces(Run()).verdicts == []


# -- compose ----------------------------------------------------------------------------------------


def _passes(run):
    return Result.of([Verdict("fine", PASS, "ok", "t.fine")], {"n": 1})


def _fails(run):
    return Result.of([Verdict("broken", FAIL, "bad", "t.broken")])


def _crashes(run):
    return {}["no such key"]


def test_merge_valid_false_beats_unknown_beats_true():
    assert merge_valid([]) is True
    assert merge_valid([True, True]) is True
    assert merge_valid([True, UNKNOWN_VALID]) == UNKNOWN_VALID
    assert merge_valid([UNKNOWN_VALID, False, True]) is False
    with pytest.raises(ValueError, match="not a valid value"):
        merge_valid([True, "maybe"])


def test_a_checker_that_crashes_is_unknown_never_pass_and_the_others_still_run():
    r = compose({"a": _passes, "boom": _crashes, "c": _passes})(Run())
    assert r.valid == UNKNOWN_VALID
    assert list(r.results) == ["a", "boom", "c"] and r.results["c"].valid is True
    crash = by_id(r)[(ids.CHECKER_CRASHED, "boom")]
    assert crash.status == UNKNOWN and "KeyError" in crash.detail and "no such key" in crash.detail
    assert r.counts == {"a": {"n": 1}, "boom": {"error": "KeyError: 'no such key'"}, "c": {"n": 1}}
    # a FAIL elsewhere still makes the whole invalid
    assert compose({"boom": _crashes, "f": _fails})(Run()).valid is False


def test_a_checker_that_returns_no_result_is_unknown():
    r = compose({"odd": lambda run: [Verdict("x", PASS, "", "t.x")]})(Run())
    assert r.valid == UNKNOWN_VALID and "not a Result" in r.verdicts[0].detail


def test_compose_keeps_the_checkers_order_and_a_broken_run_crashes_only_the_checker_that_reads_it():
    run = Run(nodes=NODES, integrity=clean_integrity(), pairs=[pair()])
    run.history = None  # a run no history checker can read: the replica audit is still judged
    r = compose(checkers.CHECKERS)(run)
    assert r.valid == UNKNOWN_VALID
    assert list(r.results) == list(checkers.CHECKERS)
    assert r.results["replicas"].valid is True
    crashed = {v.subject for v in r.verdicts if v.id == ids.CHECKER_CRASHED}
    assert {"history", "faults", "served"} <= crashed and "replicas" not in crashed


def test_the_report_of_a_crashed_checker_says_unknown_and_fails(tmp_path):
    run = Run(run_dir=str(tmp_path), nodes=NODES, integrity=clean_integrity(), pairs=[pair()])
    result = compose({**checkers.CHECKERS, "boom": _crashes})(run)
    rep = report.render(run, result, str(tmp_path / "out"))
    assert rep.failed and rep.status == UNKNOWN
    md = (tmp_path / "out" / "report.md").read_text()
    assert "**Result: UNKNOWN** (0 failed guarantee(s), 1 checker(s) could not judge)" in md
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["failed"] is True and summary["valid"] == "unknown"
    assert summary["checkers"]["replicas"] == {"valid": True, "counts": checkers.replicas(run).counts}
    assert summary["checkers"]["boom"]["valid"] == "unknown"


# -- ids --------------------------------------------------------------------------------------------


def every_verdict():
    """(checker, verdict) for every verdict the tests above make the checkers give."""
    f = HistoryFindings(sends=3, acked=3, receives=3, statuses={"SEND_OK": 3, "FLUSH_DISK_TIMEOUT": 1})
    f.lost = [("UK-1", "s-1", "producer", "T", 1500)]
    f.parked = [("UK-3", "s-3", "T")]
    f.unconfirmed, f.unconfirmed_missing = 1, [("UK-4", "s-4", "FLUSH_DISK_TIMEOUT")]
    f.missing_on_master = [("UK-5", "broker-a", "broker-a", 10)]
    f.dup_logical = [("s-6", 2, ["UK-6", "UK-7"])]
    f.unplaced = [("c", "T", 0, 1, "UK-8", "no queue offset")]
    f.served_by = {"broker-a": 3}
    g = group(stranded=1, unexpected=1, duplicates=1, ordered=True, reordered=1, ambiguous=1, indeterminate=1)
    slaves = [Node("n0", "raft", 1, "SLAVE")]
    slaves[0].dledger = DLedgerLog("n0", "/nowhere", 1, 1)
    run = Run(
        nodes=NODES + slaves,
        integrity=clean_integrity(),
        pairs=[pair(first_divergent_offset=10, crc_mismatches=1)],
        samples=[sample(1000, 10), sample(2000, 12), sample(3000, 7)],
        faults=[fault(1, "kill-slave", notExercised="idle")],
        delivery=DeliveryFindings([g], [QueueConsistency("broker-a", 1, 1)]),
        history=f,
        trace=TRACE,
    )
    run.series.non_ok = [("FLUSH_DISK_TIMEOUT", 1000, 1100, 1)]
    out = []
    for name, c in checkers.CHECKERS.items():
        out += [(name, v) for v in c(run).verdicts]
    out += [("delivery", v) for v in checkers.deliveries(Run(delivery=DeliveryFindings())).verdicts]
    out += [("history", v) for v in checkers.histories(Run()).verdicts]
    out += [("offsets", v) for v in checkers.committed_offsets(Run(samples=[sample(1, 1)])).verdicts]
    skip = {"id": 2, "kind": "kill-slave", "target": "broker-a-s", "why": "moved past the run's end"}
    out += [("faults", v) for v in pipeline_faults.verdicts([], pipeline_faults.Attribution(), [skip])]
    return out


def test_every_verdict_has_an_id_its_checker_owns_and_its_old_name_maps_to_it():
    seen = every_verdict()
    for name, v in seen:
        assert v.id in checkers.OWNS[name], (name, v)
        assert ids.id_of_name(v.name) == (v.id, v.subject), v
    owned = [i for group_ids in checkers.OWNS.values() for i in group_ids]
    assert len(owned) == len(set(owned))  # one owner per id
    assert {v.id for _, v in seen} == set(owned)  # every id given at least once above
    catalogue = {v for k, v in vars(ids).items() if k.isupper() and isinstance(v, str)}
    assert catalogue - set(owned) == {ids.CHECKER_CRASHED}  # compose's own
    assert set(ids.REFERS_TO.values()) <= set(owned)


def test_a_verdict_without_an_id_cannot_be_made():
    with pytest.raises(ValueError, match="has no id"):
        Verdict("nameless", PASS, "", "")
    assert ids.id_of_name("no such verdict") is None
    assert checker.valid_of([Verdict("x", WARN, "", "t.x"), Verdict("y", INFO, "", "t.y")]) is True
