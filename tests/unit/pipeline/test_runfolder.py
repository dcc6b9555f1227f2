"""Where a run folder says each node's trace topic is (rmqha/pipeline/runfolder.py), without Spark: node.json's
msgTraceTopicName (what the cluster tooling writes) first, then the node's broker.properties, else 4.9's
default. The audit of the records themselves is tests/unit/pipeline/test_audit.py's trace test."""

import os

from rmqha.runs.layout import node_json, write_node_json
from rmqha.pipeline import runfolder


def node(root, name, trace=None, properties=None):
    d = os.path.join(root, "nodes", name)
    extra = {"msgTraceTopicName": trace} if trace else {}
    write_node_json(d, node_json(name, "broker-a", 0, "SYNC_MASTER", addr=f"{name}:10911", **extra))
    if properties is not None:
        with open(os.path.join(d, "broker.properties"), "w") as fh:
            fh.write(properties)


def test_the_trace_topic_comes_from_node_json_then_broker_properties_else_the_default(tmp_path):
    node(tmp_path, "a", trace="FromNodeJson", properties="msgTraceTopicName=Ignored\n")
    node(tmp_path, "b", properties="# traces\ntraceTopicEnable=true\nmsgTraceTopicName = FromProperties\n")
    node(tmp_path, "c")
    topics = {n.name: n.trace_topic for n in runfolder.load_nodes(str(tmp_path))}
    assert topics == {"a": "FromNodeJson", "b": "FromProperties", "c": "RMQ_SYS_TRACE_TOPIC"}


def test_every_history_file_under_history_is_read_sub_folders_too(tmp_path):
    """rmqha/runs/history.py: any *.jsonl under RUN/history is read. The audit read history/*.jsonl only: a
    producer's history one folder down was never judged (its acknowledged sends owed to nobody, never lost)."""
    for rel in ("producer-1.jsonl", "p2/producer-2.jsonl", "p2/deep/consumer-1.jsonl", "notes.txt"):
        p = tmp_path / "history" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("")
    got = [os.path.relpath(p, tmp_path / "history") for p in runfolder.history_files(str(tmp_path))]
    assert got == ["p2/deep/consumer-1.jsonl", "p2/producer-2.jsonl", "producer-1.jsonl"]
