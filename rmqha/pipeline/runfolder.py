"""The run folder: what a cluster run leaves behind, and how the pipeline finds its parts.

    RUN/
      nodes/<node>/node.json           who the node was (schema below)
      nodes/<node>/store/commitlog/    the node's commit log: <20-digit start offset> files
      nodes/<node>/store/dledger-<selfId>/  instead, on a DLedger node (dledger_log.py)
      history/*.jsonl                  client histories (rmqha/runs/recorder.py format)
      metrics/*.jsonl                  optional periodic metric samples (schema in README.md)

node.json:
    {"name": "broker-a-0", "brokerName": "broker-a", "brokerId": 0, "role": "SYNC_MASTER",
     "clusterName": "DefaultCluster", "addr": "172.20.0.11:10911",
     "commitlogFileSize": 1073741824,          # optional; inferred from the files when absent
     "msgTraceTopicName": "RMQ_SYS_TRACE_TOPIC"}  # optional; else nodes/<node>/broker.properties's,
                                                 # else 4.9's default

A node directory without node.json is still read: its name is the directory name, the broker name is
the directory name with a trailing "-<digits>" removed, and the role is unknown (the audit then
cannot tell master from slave, and says so).
"""

from __future__ import annotations

import glob
import json
import os
import re
from dataclasses import asdict, dataclass, field

from . import dledger_log

ROLES = ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE")
DEFAULT_TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"  # 4.9's msgTraceTopicName default
_FILE_NAME = re.compile(r"^\d{20}$")
_PROPERTY = re.compile(r"([^=:\s]+)\s*[=:\s]\s*(.*)")


@dataclass
class CommitLogFile:
    path: str
    base: int  # global offset of the file's first byte (its name)
    length: int  # bytes on disk now (smaller than mapped_size for a truncated file)
    mapped_size: int  # the configured mappedFileSizeCommitLog


@dataclass
class Node:
    name: str
    broker_name: str
    broker_id: int
    role: str  # ASYNC_MASTER / SYNC_MASTER / SLAVE / UNKNOWN
    cluster_name: str = ""
    addr: str = ""
    store_dir: str = ""
    commitlog_file_size: int | None = None
    trace_topic: str = DEFAULT_TRACE_TOPIC  # the broker's msgTraceTopicName, where the audit reads traces
    files: list[CommitLogFile] = field(default_factory=list)
    # a DLedger node (its log is dledger-<selfId>/data, `files` are those data files): dledger_log.py
    dledger: dledger_log.DLedgerLog | None = None

    def is_dledger_file(self, f: CommitLogFile) -> bool:
        """A DLedger data file (entries), not a classic commit-log file (records)."""
        return self.dledger is not None and os.path.dirname(f.path) == self.dledger.data_dir

    @property
    def is_master(self) -> bool:
        return self.role in ("ASYNC_MASTER", "SYNC_MASTER") or (self.role == "UNKNOWN" and self.broker_id == 0)

    @property
    def start_offset(self) -> int:
        return self.files[0].base if self.files else 0

    def meta(self) -> dict:
        d = asdict(self)
        d.pop("files")
        return d


def list_commitlog(commitlog_dir: str, file_size: int | None = None) -> list[CommitLogFile]:
    """The commit-log files of one store, oldest first. Only os.stat; nothing is read."""
    if not os.path.isdir(commitlog_dir):
        return []
    entries = sorted((int(n), os.path.join(commitlog_dir, n)) for n in os.listdir(commitlog_dir) if _FILE_NAME.match(n))
    if not entries:
        return []
    lengths = [os.stat(p).st_size for _, p in entries]
    if file_size is None:
        # Consecutive names are exactly one mapped file apart; with one file, trust its length.
        gaps = [b2 - b1 for (b1, _), (b2, _) in zip(entries, entries[1:]) if b2 > b1]
        file_size = min(gaps) if gaps else max(lengths)
    return [CommitLogFile(p, base, length, file_size) for (base, p), length in zip(entries, lengths)]


def _default_broker_name(node_name: str) -> str:
    return re.sub(r"-\d+$", "", node_name)


def load_node(node_dir: str) -> Node:
    meta_path = os.path.join(node_dir, "node.json")
    name = os.path.basename(os.path.normpath(node_dir))
    meta = {}
    if os.path.exists(meta_path):
        with open(meta_path) as fh:
            meta = json.load(fh)
    store_dir = os.path.join(node_dir, meta.get("storeDir", "store"))  # absolute storeDir wins
    node = Node(
        name=meta.get("name", name),
        broker_name=meta.get("brokerName", _default_broker_name(name)),
        broker_id=int(meta.get("brokerId", 0)),
        role=meta.get("role", "UNKNOWN"),
        cluster_name=meta.get("clusterName", ""),
        addr=meta.get("addr", ""),
        store_dir=store_dir,
        commitlog_file_size=meta.get("commitlogFileSize"),
        trace_topic=meta.get("msgTraceTopicName") or _property(node_dir, "msgTraceTopicName") or DEFAULT_TRACE_TOPIC,
    )
    # node.json's "commitLog": "dledger" (rmqha.cluster's node_record), else a dledger-*/ directory and no
    # commit log (runs from before that field)
    if meta.get("commitLog") == dledger_log.DLEDGER or not os.path.isdir(os.path.join(store_dir, "commitlog")):
        node.dledger = dledger_log.load(store_dir, meta.get("dLegerSelfId"))
        if node.dledger is None and meta.get("commitLog") == dledger_log.DLEDGER:
            node.dledger = dledger_log.missing(store_dir, meta.get("dLegerSelfId"))
    if node.dledger is not None:
        node.files = list_commitlog(node.dledger.data_dir, node.commitlog_file_size)
        # a member upgraded from a classic commit log (docs/dledger.md "Upgrade from a classic commit
        # log") still serves the old records below the DLedger log's first file: they are audited too
        first = node.files[0].base if node.files else None
        old = list_commitlog(os.path.join(store_dir, "commitlog"), node.commitlog_file_size)
        node.files = [f for f in old if first is None or f.base < first] + node.files
    else:
        node.files = list_commitlog(os.path.join(store_dir, "commitlog"), node.commitlog_file_size)
    return node


def _property(node_dir: str, key: str) -> str | None:
    """key's value in nodes/<node>/broker.properties (Java properties: key=value or key: value, # and !
    comments; the last one wins), or None."""
    value = None
    try:
        with open(os.path.join(node_dir, "broker.properties"), encoding="utf-8") as fh:
            for line in fh:
                line = line.strip()
                if not line or line[0] in "#!":
                    continue
                m = _PROPERTY.match(line)
                if m and m.group(1) == key:
                    value = m.group(2).strip() or None
    except OSError:
        return None
    return value


def load_nodes(run_dir: str) -> list[Node]:
    """Every node of the run. Paths are absolute: decode tasks open them on Spark executors, whose
    working directory is not the driver's (a relative path there is a FileNotFoundError)."""
    run_dir = os.path.abspath(run_dir)
    nodes_dir = os.path.join(run_dir, "nodes")
    if not os.path.isdir(nodes_dir):
        raise FileNotFoundError(
            f"{run_dir} is not a run folder: it has no nodes/ directory (see rmqha/pipeline/README.md for the layout)"
        )
    nodes = [
        load_node(os.path.join(nodes_dir, d))
        for d in sorted(os.listdir(nodes_dir))
        if os.path.isdir(os.path.join(nodes_dir, d))
    ]
    # a DLedger group's master is whoever led at the end (no node.json knows it): dledger_log.assign_roles
    dledger_log.assign_roles(nodes, metrics_files(run_dir))
    return nodes


def history_files(run_dir: str) -> list[str]:
    """Every *.jsonl under RUN/history, sub-folders too (rmqha/runs/history.py), sorted."""
    return sorted(glob.glob(os.path.join(os.path.abspath(run_dir), "history", "**", "*.jsonl"), recursive=True))


def metrics_files(run_dir: str) -> list[str]:
    return sorted(glob.glob(os.path.join(os.path.abspath(run_dir), "metrics", "*.jsonl")))


def drain_committed(run_dir: str) -> dict[str, dict[str, dict[int, int]]]:
    """Where each consumer group's consumers stopped: {group: {master node: {queue id: committed offset}}},
    from RUN/chaos/ending-*.json (rmqha.chaos.run writes it after the drain; none: {}). Several files (several
    runs in one folder): the last one written wins per group."""
    out: dict[str, dict[str, dict[int, int]]] = {}
    paths = sorted(glob.glob(os.path.join(os.path.abspath(run_dir), "chaos", "ending-*.json")), key=os.path.getmtime)
    for p in paths:
        try:
            with open(p) as fh:
                drain = (json.load(fh) or {}).get("drain") or {}
        except (OSError, ValueError):
            continue
        for group, d in drain.items():
            per = {
                m: {int(q): int(c) for q, c in (qs or {}).items() if c is not None}
                for m, qs in ((d or {}).get("committed") or {}).items()
            }
            out[group] = per
    return out
