"""The run folder's layout and its node.json: where each part of a run lives, and who each node was
(tests/unit/runs/test_layout.py).

    RUN/
      state.json                      what the backend started (rmqha/cluster/runfolder.py writes it)
      namesrv/namesrv.log             the name server's log (not under nodes/: every folder there is a broker)
      proxy/proxy.log                 the gRPC proxy's log
      nodes/<node>/node.json          who the node is: node_record() (the backends), node_json() (tests)
      nodes/<node>/broker.log         the broker's stdout and stderr
      nodes/<node>/broker.properties  the file the broker runs on (-c), written at `up`
      nodes/<node>/store/             the broker's storePathRootDir (commitlog/ or dledger-<selfId>/, ...)
      metrics/*.jsonl                 samples from `python -m rmqha.cluster sample`
      history/*.jsonl                 client histories (rmqha/runs/history.py)
      faults/*.jsonl                  the nemesis's injects and heals (rmqha/runs/faultlog.py)

node.json, the one writer (write_node_json) and its schema:
    {"name": "broker-a-0", "brokerName": "broker-a", "brokerId": 0, "role": "SYNC_MASTER",
     "clusterName": "DefaultCluster", "addr": "172.20.0.11:10911",
     "haAddr": ..., "metricsUrl": ..., "backend": "local"|"docker",   what a cluster backend adds (NODE_JSON_KEYS)
     "commitlogFileSize": 1073741824,          optional; the audit infers it from the files when absent
     "msgTraceTopicName": "RMQ_SYS_TRACE_TOPIC",  optional
     "commitLog": "dledger", "dLegerSelfId": "n0", "dLegerGroup": ...}  a DLedger node only
The audit reads it (rmqha/pipeline/runfolder.py), and a node folder without one too.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

ROLES = ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE")
REQUIRED_KEYS = ("name", "brokerName", "brokerId", "role")  # what the audit needs of a node.json
# what a cluster backend writes for every node (rmqha/cluster/local_backend.py, docker_backend.py)
NODE_JSON_KEYS = ("name", "brokerName", "brokerId", "role", "clusterName", "addr", "haAddr", "metricsUrl", "backend")


def node_dir(rd: Path, node: str) -> Path:
    return rd / "nodes" / node


def store_dir(rd: Path, node: str) -> Path:
    return node_dir(rd, node) / "store"


def broker_log(rd: Path, node: str) -> Path:
    return node_dir(rd, node) / "broker.log"


def node_properties(rd: Path, node: str) -> Path:
    """The properties file the broker runs on (-c); rmqha/cluster/runfolder.py write_node_properties writes it."""
    return node_dir(rd, node) / "broker.properties"


def namesrv_log(rd: Path) -> Path:
    return rd / "namesrv" / "namesrv.log"


def proxy_log(rd: Path) -> Path:
    return rd / "proxy" / "proxy.log"


def write_json_atomic(path: Path, obj) -> None:
    write_text_atomic(path, json.dumps(obj, indent=1, sort_keys=False) + "\n")


def write_text_atomic(path: Path, text: str, encoding: str | None = None) -> None:
    """path's new content, whole or not at all: written beside it, then renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding=encoding) as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def node_record(name: str, c, host: str, backend: str) -> dict:
    """node.json's content for one broker, from its BrokerConfig `c` (both backends write it this way)."""
    return {
        "name": name,
        "brokerName": c.brokerName,
        "brokerId": c.brokerId,
        "role": c.brokerRole,
        "clusterName": c.brokerClusterName,
        "addr": c.broker_addr,
        "haAddr": c.ha_server_addr,
        "metricsUrl": f"http://{host}:{c.metrics_port}/metrics",
        "backend": backend,
        "commitlogFileSize": c.mappedFileSizeCommitLog,
        "msgTraceTopicName": c.msgTraceTopicName,  # where the audit reads trace records
        # a DLedger node's log is store/dledger-<selfId>/data, not store/commitlog (rmqha/pipeline/dledger_log.py)
        **(
            {"commitLog": "dledger", "dLegerSelfId": c.dLegerSelfId, "dLegerGroup": c.dLegerGroup}
            if c.enableDLegerCommitLog
            else {}
        ),
    }


def node_json(
    name: str,
    broker_name: str,
    broker_id: int,
    role: str,
    cluster_name: str = "DefaultCluster",
    addr: str = "",
    **extra,
) -> dict:
    """node.json's content from its fields (tests, benchmarks and the audit's warm-up write nodes this way)."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {role!r}")
    return {
        "name": name,
        "brokerName": broker_name,
        "brokerId": broker_id,
        "role": role,
        "clusterName": cluster_name,
        "addr": addr,
        **extra,
    }


def write_node_json(node_folder: str | Path, node: dict, required: tuple[str, ...] = REQUIRED_KEYS) -> Path:
    """node_folder/node.json (RUN/nodes/<node>/node.json), written atomically; ValueError names the keys of
    `required` it lacks."""
    missing = [k for k in required if k not in node]
    if missing:
        raise ValueError(f"node.json for {node.get('name')} lacks {missing}")
    path = Path(node_folder) / "node.json"
    write_json_atomic(path, node)
    return path
