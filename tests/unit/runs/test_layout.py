"""rmqha/runs/layout.py: node.json's one writer and its schema."""

from __future__ import annotations

import json

import pytest

from rmqha.runs.layout import NODE_JSON_KEYS, node_dir, node_json, write_node_json


def test_node_json_is_written_atomically_and_read_back(tmp_path):
    d = node_dir(tmp_path, "broker-a-0")
    path = write_node_json(d, node_json("broker-a-0", "broker-a", 0, "SYNC_MASTER", addr="h:10911", backend="x"))
    assert path == d / "node.json" and not [p for p in d.iterdir() if p.name.endswith(".tmp")]
    assert json.loads(path.read_text()) == {
        "name": "broker-a-0",
        "brokerName": "broker-a",
        "brokerId": 0,
        "role": "SYNC_MASTER",
        "clusterName": "DefaultCluster",
        "addr": "h:10911",
        "backend": "x",
    }


def test_a_missing_key_or_an_unknown_role_is_refused(tmp_path):
    with pytest.raises(ValueError, match="role must be one of"):
        node_json("n", "b", 0, "LEADER")
    with pytest.raises(ValueError, match="lacks \\['role'\\]"):
        write_node_json(tmp_path, {"name": "n", "brokerName": "b", "brokerId": 0})
    with pytest.raises(ValueError, match="haAddr"):  # what a cluster backend must write
        write_node_json(tmp_path, node_json("n", "b", 0, "SLAVE"), NODE_JSON_KEYS)
    assert not (tmp_path / "node.json").exists()
