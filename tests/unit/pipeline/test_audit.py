"""Replica audit and history checks on run folders made with MessageStore; one Spark session."""

import json
import os
import subprocess
import sys

import pytest

from rmqha.runs.layout import node_json, write_node_json
from rmqha.broker.store.record import Message
from rmqha.pipeline import audit, checkers, decode, gather, history_check, report, runfolder
from rmqha.pipeline.verdict import FAIL, PASS, WARN, failed

from .conftest import flip_byte


def _audit(spark, run_root, **kw):
    """The whole audit (report.run)."""
    out = os.path.join(os.path.dirname(run_root), "out")
    rep = report.run(spark, run_root, out, range_bytes=16384)
    return {v.name: v for v in rep.verdicts}, rep


def _storage(spark, run_root):
    """What report.run judges from the logs and the histories' sends and receives (the replica audit with
    the metrics' final acks, and history_check), without delivery, trace, plots or report files: verdicts
    by name, and all of them."""
    nodes = runfolder.load_nodes(run_root)
    df = decode.decode(spark, nodes, 16384).cache()
    integrity = audit.node_integrity(df, nodes)
    pairs = audit.audit_pairs(spark, df, nodes, integrity)
    samples = report.load_metrics(runfolder.metrics_files(run_root))
    vs = audit.verdicts(pairs, integrity, nodes, report.final_acks(samples, nodes))
    hpaths = runfolder.history_files(run_root)
    if hpaths:
        hist = history_check.load_histories(spark, hpaths)
        vs += history_check.verdicts(history_check.gather(spark, df, hist, nodes))
    df.unpersist()
    return {v.name: v for v in vs}, vs


def test_identical_replicas_pass_and_report_is_written(spark, run_builder):
    """The one full report.run of this file: every verdict, report.md and the plots."""
    run_builder.master(n=300)
    run_builder.close()
    run_builder.slave()
    run_builder.history()
    v, rep = _audit(spark, run_builder.root)
    assert not rep.failed, [x.line() for x in rep.verdicts if x.status != PASS]
    assert v["replica broker-a: broker-a-0 vs broker-a-1"].status == PASS
    assert v["no acknowledged send lost"].status == PASS
    assert os.path.exists(rep.path) and all(os.path.getsize(p) > 0 for p in rep.plots)
    assert "| replica broker-a: broker-a-0 vs broker-a-1 | **PASS** |" in open(rep.path).read()
    (p,) = rep.pairs
    assert p.first_divergent_offset is None and p.crc_mismatches == 0 and p.missing_ranges == []
    assert p.common_prefix_bytes == p.master_end == p.slave_end


def test_flipped_bytes_are_a_crc_mismatch_at_that_record(slaves):
    v, p, victim = slaves.verdicts, slaves.pairs["broker-a-1"], slaves.flipped
    assert p.first_divergent_offset == victim.wrote_offset
    assert p.crc_mismatch_offsets == [victim.wrote_offset]
    assert p.common_prefix_bytes == victim.wrote_offset
    assert v["replica broker-a: broker-a-0 vs broker-a-1"].status == FAIL
    assert str(victim.wrote_offset) in v["replica broker-a: broker-a-0 vs broker-a-1"].detail
    assert v["log integrity broker-a-1"].status == FAIL


def test_header_flip_not_covered_by_body_crc_is_still_caught(slaves):
    p = slaves.pairs["broker-a-3"]
    assert p.crc_mismatch_offsets == [slaves.header.wrote_offset]


@pytest.mark.audit_scenarios
def test_truncated_sync_slave_loses_acknowledged_messages(spark, run_builder):
    run_builder.master(n=300)
    run_builder.close()
    d = run_builder.slave()
    last = sorted(os.listdir(d))[-1]
    os.truncate(os.path.join(d, last), 1000)  # cut the last file short, mid-record
    run_builder.history()
    v, vs = _storage(spark, run_builder.root)
    assert failed(vs)
    pair = v["replica broker-a: broker-a-0 vs broker-a-1"]
    assert pair.status == WARN and "slave behind by" in pair.detail
    assert v["log integrity broker-a-1"].status == WARN and "torn tail" in v["log integrity broker-a-1"].detail
    sync = v["SYNC_MASTER SEND_OK is on the slave"]
    assert sync.status == FAIL and "missing on broker-a-1" in sync.detail
    assert v["no acknowledged send lost"].status == PASS  # still on the master


def test_metrics_ack_beyond_slave_end_fails_the_replica(spark, run_builder):
    run_builder.master(n=100)
    run_builder.close()
    d = run_builder.slave()
    os.truncate(os.path.join(d, sorted(os.listdir(d))[-1]), 500)
    os.makedirs(os.path.join(run_builder.root, "metrics"))
    end = run_builder.sent[-1][2].next_offset
    with open(os.path.join(run_builder.root, "metrics", "broker-a-0.jsonl"), "w") as fh:
        for i, ack in enumerate((end // 2, end)):
            fh.write(
                json.dumps(
                    {
                        "ts": 1_700_000_000_000 + i * 1000,
                        "node": "broker-a-0",
                        "maxPhyOffset": end,
                        "slaves": {"broker-a-1:10911": ack},
                    }
                )
                + "\n"
            )
    v, _ = _storage(spark, run_builder.root)
    assert v["replica broker-a: broker-a-0 vs broker-a-1"].status == FAIL
    assert "lost acknowledged bytes" in v["replica broker-a: broker-a-0 vs broker-a-1"].detail


def test_lost_acknowledged_message_and_duplicate_are_named(spark, run_builder):
    store = run_builder.master(n=50)
    dup = run_builder.put("T", "broker-a-U00007", "broker-a-S00007")  # same UNIQ_KEY stored again
    retry = run_builder.put("T", "retry-uk-2", "broker-a-S00009")  # a retry of send S00009
    run_builder.sent.remove(("broker-a-U00007", "broker-a-S00007", dup))
    run_builder.sent.remove(("retry-uk-2", "broker-a-S00009", retry))
    store.shutdown()
    run_builder.slave()
    run_builder.history(
        lost=[("LOST-UK-1", "lost-send-1")],
        extra=[
            {
                "op": "receive",
                "topic": "T",
                "send_id": "nobody",
                "uniq_key": "PHANTOM-1",
                "status": "RECEIVED",
                "queue_id": 0,
                "queue_offset": 999,
                "start_ms": 1,
                "end_ms": 1,
            },
            # the broker said "stored, not replicated" for both; only the first is really stored
            {
                "op": "send",
                "topic": "T",
                "send_id": "broker-a-S00003",
                "attempt": 2,
                "uniq_key": "broker-a-U00003",
                "status": "FLUSH_SLAVE_TIMEOUT",
                "start_ms": 1,
                "end_ms": 2,
            },
            {
                "op": "send",
                "topic": "T",
                "send_id": "gone-1",
                "attempt": 1,
                "uniq_key": "GONE-UK-1",
                "status": "SLAVE_NOT_AVAILABLE",
                "start_ms": 1,
                "end_ms": 2,
            },
        ],
    )
    v, vs = _storage(spark, run_builder.root)
    assert failed(vs)
    assert v["no acknowledged send lost"].status == FAIL and "LOST-UK-1" in v["no acknowledged send lost"].detail
    assert v["no UNIQ_KEY stored twice"].status == FAIL and "broker-a-U00007 x2" in v["no UNIQ_KEY stored twice"].detail
    assert v["one stored copy per logical send"].status == WARN
    assert "broker-a-S00009 x2" in v["one stored copy per logical send"].detail
    assert v["nothing received that was never sent"].status == FAIL
    assert "PHANTOM-1" in v["nothing received that was never sent"].detail
    assert v["replica broker-a: broker-a-0 vs broker-a-1"].status == PASS
    unconfirmed = v["unconfirmed sends stored on the master"]
    assert unconfirmed.status == WARN and "1 of 2" in unconfirmed.detail and "GONE-UK-1" in unconfirmed.detail
    assert "broker-a-U00003" not in unconfirmed.detail


def test_slave_starting_at_the_masters_last_file_passes(slaves):
    v, p = slaves.verdicts, slaves.pairs["broker-a-2"]  # a new slave starts at the master's last file (of 2)
    assert v["replica broker-a: broker-a-0 vs broker-a-2"].status == PASS
    assert len(runfolder.load_node(slaves.rb.node_dir("broker-a-0")).files) == 2
    assert p.slave_start == 64 << 10 == p.compare_start
    assert p.first_divergent_offset is None and p.missing_ranges == []


@pytest.mark.audit_scenarios
def test_received_out_of_queue_order(spark, run_builder, tmp_path):
    run_builder.master(n=40)
    run_builder.close()
    run_builder.slave()
    run_builder.history()
    hist = os.path.join(run_builder.root, "history", "p1-consumer.jsonl")
    recs = [json.loads(x) for x in open(hist).read().splitlines()]
    q0 = [i for i, r in enumerate(recs) if r["queue_id"] == 0]
    a, b = q0[3], q0[4]  # swap two receives of queue 0
    recs[a]["seq"], recs[b]["seq"] = recs[b]["seq"], recs[a]["seq"]
    with open(hist, "w") as fh:
        fh.write("\n".join(json.dumps(r) for r in recs) + "\n")
    nodes = runfolder.load_nodes(run_builder.root)
    f = history_check.gather(
        spark,
        decode.decode(spark, nodes, 1 << 20),
        history_check.load_histories(spark, runfolder.history_files(run_builder.root)),
        nodes,
    )
    v = {x.name: x for x in history_check.verdicts(f)}
    assert v["per-queue receive order"].status == FAIL
    assert f.order_violations == [
        ("p1-consumer", "broker-a", "T", 0, recs[a]["queue_offset"], recs[b]["queue_offset"], True)
    ]
    assert not f.lost and not f.missing_on_slave and f.e2e_latency["n"] == 40


@pytest.mark.spark  # python -m rmqha.pipeline: a JVM of its own
def test_cli_master_from_pyspark_submit_args_and_exit_code(run_builder, tmp_path):
    run_builder.master(n=30)
    run_builder.close()
    run_builder.slave()
    flip_byte(os.path.join(run_builder.node_dir("broker-a-1"), "store", "commitlog", "0" * 20), 300)
    # spark-submit's --master (here through PYSPARK_SUBMIT_ARGS) wins over $SPARK_MASTER
    env = dict(
        os.environ,
        PYSPARK_SUBMIT_ARGS="--master local[1] --conf spark.ui.enabled=false "
        # few rows: generated code costs more to compile than it saves (conftest.py)
        "--conf spark.sql.codegen.wholeStage=false --conf spark.sql.codegen.factoryMode=NO_CODEGEN "
        "--conf spark.sql.shuffle.partitions=1 pyspark-shell",
        SPARK_MASTER="local[2]",
    )
    p = subprocess.run(
        [sys.executable, "-m", "rmqha.pipeline", run_builder.root, "--out", str(tmp_path / "o"), "--range-mb", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))),
    )
    assert "spark master: local[1]" in p.stdout, p.stdout + p.stderr
    assert p.returncode == 1, p.stdout + p.stderr
    assert "FAIL  replica broker-a: broker-a-0 vs broker-a-1" in p.stdout
    assert os.path.exists(tmp_path / "o" / "report.md")


def test_master_precedence_cli_then_submit_then_env_then_local(spark):
    from rmqha.pipeline.spark import pick_master

    env = {"SPARK_MASTER": "spark://env:7077"}
    assert pick_master("spark://cli:7077", "local[1]", env) == "spark://cli:7077"
    assert pick_master(None, "local[1]", env) == "local[1]"
    assert pick_master(None, None, env) == "spark://env:7077"
    assert pick_master(None, None, {}) == "local[*]"
    assert spark.sparkContext.master == "local[2]"


def test_history_status_names():
    from rmqha.runs.recorder import status_name

    assert status_name(0) == "SEND_OK" and status_name(2) == "FLUSH_SLAVE_TIMEOUT"
    assert status_name("SendStatus.SLAVE_NOT_AVAILABLE") == "SLAVE_NOT_AVAILABLE"
    assert status_name("SLAVE_NOT_AVAILABE") == "SLAVE_NOT_AVAILABLE"


def test_delayed_messages_count_when_they_reach_their_topic(spark, run_builder):
    store = run_builder.master(n=20)

    def put(uniq_key, send_id, **props):
        m = Message(topic="T", body=b"d", queue_id=0, properties={"UNIQ_KEY": uniq_key, "KEYS": send_id, **props})
        r = store.put_message(m)
        assert r.status == "PUT_OK"
        r.queue_id = 0
        return r

    # Delivered: parked in SCHEDULE_TOPIC_XXXX, then stored in T by the schedule service (same UNIQ_KEY).
    acked = put("DELAYED-1", "send-d1", DELAY="2")
    put("DELAYED-1", "send-d1", REAL_TOPIC="T", REAL_QID="0")
    run_builder.sent.append(("DELAYED-1", "send-d1", acked))
    # Not delivered by the end of the run: parked only.
    parked = put("PARKED-1", "send-p1", DELAY="18")
    run_builder.sent.append(("PARKED-1", "send-p1", parked))
    store.shutdown()
    run_builder.slave()
    run_builder.history()
    v, _ = _storage(spark, run_builder.root)
    assert v["no acknowledged send lost"].status == PASS
    assert v["no UNIQ_KEY stored twice"].status == PASS  # the parked copy is not a duplicate
    parked_v = v["acknowledged sends delivered to their topic"]
    assert parked_v.status == WARN and "PARKED-1" in parked_v.detail and "DELAYED-1" not in parked_v.detail


@pytest.mark.audit_scenarios
def test_loss_counts_are_not_capped(spark, run_builder):
    """1,500 acknowledged sends on no node are 1,500 in the verdict, not the first 1,000 (issue 23)."""
    run_builder.master(n=20)
    run_builder.close()
    run_builder.slave()
    run_builder.history(lost=[(f"LOST-UK-{i}", f"lost-send-{i}") for i in range(1500)])
    nodes = runfolder.load_nodes(run_builder.root)
    f = history_check.gather(
        spark,
        decode.decode(spark, nodes, 1 << 20),
        history_check.load_histories(spark, runfolder.history_files(run_builder.root)),
        nodes,
    )
    assert len(f.lost) == 1500
    v = {x.name: x for x in history_check.verdicts(f)}
    assert v["no acknowledged send lost"].detail.startswith("1500 SEND_OK message(s) on no node")


@pytest.mark.parametrize(
    "topic, where",
    [
        ("RMQ_SYS_TRACE_TOPIC", None),  # 4.9's default: nothing to configure
        ("MyTraceTopic", "broker.properties"),  # a named msgTraceTopicName, as the node's properties file says it
    ],
)  # node.json's msgTraceTopicName (the cluster tooling's) is read by the same load_nodes: test_runfolder.py
def test_trace_records_on_a_master_are_reported_send_to_store(spark, run_builder, topic, where):
    """A client's trace records in the node's trace topic (rmqha/pipeline/trace.py) are matched to the messages
    they trace: the audit reports send -> store times (issue 25). A named trace topic is read where the
    node's configuration names it."""
    store = run_builder.master(n=5)
    node_dir = run_builder.node_dir("broker-a-0")
    if where == "node.json":
        meta = json.load(open(os.path.join(node_dir, "node.json")))
        write_node_json(
            node_dir,
            node_json(
                **{k: meta[k] for k in ("name", "role", "addr")},
                broker_name=meta["brokerName"],
                broker_id=meta["brokerId"],
                msgTraceTopicName=topic,
            ),
        )
    elif where == "broker.properties":
        with open(os.path.join(node_dir, "broker.properties"), "w") as fh:
            fh.write(f"# a named trace topic\ntraceTopicEnable=true\nmsgTraceTopicName = {topic}\n")
    c, f = "\x01", "\x02"
    keys = [uk for uk, _sid, _r in run_builder.sent]
    body = "".join(
        c.join(
            ["Pub", str(run_builder.clock - 3), "R", "PG", "T", uk, "tg", "k", "h:1", "200", "1", "0", "oid", "true"]
        )
        + f
        for uk in keys
    )
    store.put_message(
        Message(topic=topic, body=body.encode(), queue_id=0, properties={"UNIQ_KEY": "TRACE-1", "KEYS": " ".join(keys)})
    )
    store.dispatch_pending()
    run_builder.close()
    nodes = runfolder.load_nodes(run_builder.root)
    df = decode.decode(spark, nodes, 16384)
    masters = {m.name: b for b, (m, _) in audit.groups(nodes).items() if m}
    t = checkers.trace_verdict(gather._trace(df, nodes, masters))  # what report.run adds to its verdicts
    assert f"5 trace records in {topic} " in t.detail and "5 traced sends found stored" in t.detail, t.detail
