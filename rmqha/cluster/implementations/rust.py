"""rocketmq-rust's broker (crates.io rocketmq-broker, built by `make peer-broker`), on its canonical TOML.

Tests: tests/unit/test_implementations.py. Read from rocketmq-broker 1.0.0's sources and tried once
(2026-11-29, `make peer-broker`, about 60 min of a shared 2-core machine): a local 2m-2s-sync cluster of
it with our name server came up, each slave connected to its master over 4.x HA; rocketmq-client-rust's
sends got SEND_OK once a broker had its first commit-log file (it preallocates 1 GiB: the first send to
each master timed out at 3 s), and the official C++ client's sends failed with "No route info" although
the name server served the route. That is rocketmq-rust's, not the route's (read in rocketmq-protocol
1.0.0's remoting_command decode, then seen on the wire, tests/integration/test_rust_broker.py): the C++
client 1.0.1 writes its JSON headers without `serializeTypeCurrentRPC` and with numbers among the
extFields, rocketmq-rust's fast header parsers take neither and its serde fallback fails on both (a
missing field; "a JSON extension-field string" expected), so the decoder errs and the connection is
closed with no answer. The client retries on the next queue, every try fails the same way, and it
reports every failed send as "No route info of this topic". 4.9's fastjson defaults the field and turns
numbers into strings. The kit therefore runs rocketmq-client-rust against these brokers
(OFFICIAL_CLIENT_REFUSED: chaos runs pick CLIENT=rust and refuse CLIENT=python; rmqkit's recorder refuses).

The node gets the same broker.properties keys as ours and Apache's (its compose conf file, then the
deployment keys), written as rocketmq-rust's own `broker.toml` beside them in its run folder. Not the
.properties file: rocketmq-rust 1.0.0 reads one (its java_properties.rs), but puts `brokerRole` only in the
store section, and the broker's own role (`[broker] brokerRole`, AsyncMaster unless set) is what makes a
slave connect to its master and copy its topics and offsets, so a slave started from a .properties file
never replicates. The TOML names the role in both sections. What else differs from 4.x and how the kit
meets it:

- SYNC_MASTER waits for a slave only when `inSyncReplicas` > 1 (5.x's rule; 1 by default, so it would
  answer SEND_OK at once): a SYNC_MASTER here is given inSyncReplicas=2, totalReplicas=2 (one slave),
  unless the user set them. It never answers SLAVE_NOT_AVAILABLE (nothing on its put path asks
  is_slave_ok): with its slave gone it waits `slaveTimeout` (3 s; not `syncFlushTimeout`, as 4.9.3+) and
  answers FLUSH_SLAVE_TIMEOUT, and since its transport runs one send per (producer group, topic, queue) of a
  connection at a time, the others wait in line behind it (docs/kit.md, issue 35).
- That wait also waits for the master's own flush (unlike 4.x), which ASYNC_FLUSH makes only at 4 dirty
  pages or every 10 s: a first chaos run (2026-11-29, 200 sends/s) got 7 SEND_OK of 15782 tries, each
  put held 3-6 s. An ASYNC_FLUSH SYNC_MASTER is therefore given flushCommitLogThoroughInterval equal to
  flushIntervalCommitLog (500 ms: everything dirty flushed that often) unless the user set it.
- Its reput service dispatches when a put returns or the store starts, never polls: a slave builds no
  consume-queue unit for what it receives over HA until its next start, and a master's record whose put was
  cancelled mid-wait stays unqueued until a later put. The audit's queues.consistent FAILs on those; no
  setting of 1.0.0 avoids it (docs/kit.md, with file and line references).
- No DLedger commit log (its config refuses every DLedger key): TOPOLOGY=dledger says so and stops.
- No name server of its own is wired: the cluster's is ours or Apache's.
- On the docker backend the same broker.toml (container addresses) runs in rmqha/rust, the image of the
  binary found here (rust_image.py, images/rust/), started once the name server accepts.
- A key the kit does not know the home of is refused here, by name: the broker refuses unknown keys too
  (deny_unknown_fields), and a setting must never be dropped on the way.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .. import ClusterError
from .. import runfolder as rf
from . import BrokerChoice, Launch
from . import rust_image
from .apache import broker_properties
from .rust_image import BINARY, CONFIG_NAME, find_binary

# What the official C++ client's "No route info" against rocketmq-rust is (tests/integration/test_rust_broker.py
# pins it, frame by frame): the route is fine, the broker never answers.
OFFICIAL_CLIENT_REFUSED = (
    "rocketmq-rust 1.0.0 closes the connection at the first request of the official C++ client 1.0.1 "
    "(PyPI rocketmq 0.4.4) without an answer: that client's JSON headers have no serializeTypeCurrentRPC "
    'and carry numbers in extFields ("queueId":1), and rocketmq-rust decodes neither (4.9 takes both). '
    'Its sends all fail, which that client reports as "No route info of this topic". '
    "Use rocketmq-client-rust: CLIENT=rust (`make rust-client`)"
)

# Where rocketmq-rust 1.0.0 keeps a 4.x key (its java_properties.rs mapping and the fields of its
# BrokerConfig, BrokerIdentity and MessageStoreConfig), and the TOML type of its value. A key in several
# sections is written to each.
KEYS: dict[str, tuple[tuple[tuple[str, ...], ...], type]] = {
    "brokerName": ((("broker", "brokerIdentity", "brokerName"),), str),
    "brokerClusterName": ((("broker", "brokerIdentity", "brokerClusterName"),), str),
    "brokerId": ((("broker", "brokerIdentity", "brokerId"),), int),
    "brokerIP1": ((("broker", "brokerIp1"),), str),
    "brokerIP2": ((("broker", "brokerIp2"),), str),
    "listenPort": ((("broker", "listenPort"),), int),
    "namesrvAddr": ((("broker", "namesrvAddr"),), str),
    "autoCreateTopicEnable": ((("broker", "autoCreateTopicEnable"),), bool),
    "autoCreateSubscriptionGroup": ((("broker", "autoCreateSubscriptionGroup"),), bool),
    "defaultTopicQueueNums": ((("broker", "defaultTopicQueueNums"),), int),
    "storePathRootDir": ((("broker", "storePathRootDir"), ("store", "storePathRootDir")), str),
    "brokerRole": ((("broker", "brokerRole"), ("store", "brokerRole")), str),
    "flushDiskType": ((("store", "flushDiskType"),), str),
    "storePathCommitLog": ((("store", "storePathCommitLog"),), str),
    "mappedFileSizeCommitLog": ((("store", "mappedFileSizeCommitLog"),), int),
    "mappedFileSizeConsumeQueue": ((("store", "mappedFileSizeConsumeQueue"),), int),
    "maxMessageSize": ((("store", "maxMessageSize"),), int),
    "maxHashSlotNum": ((("store", "maxHashSlotNum"),), int),
    "maxIndexNum": ((("store", "maxIndexNum"),), int),
    "deleteWhen": ((("store", "deleteWhen"),), str),
    "fileReservedTime": ((("store", "fileReservedTime"),), int),
    "haListenPort": ((("store", "haListenPort"),), int),
    "haMasterAddress": ((("store", "haMasterAddress"),), str),
    "syncFlushTimeout": ((("store", "syncFlushTimeout"),), int),
    "flushIntervalCommitLog": ((("store", "flushIntervalCommitLog"),), int),
    "flushCommitLogLeastPages": ((("store", "flushCommitLogLeastPages"),), int),
    "flushCommitLogThoroughInterval": ((("store", "flushCommitLogThoroughInterval"),), int),
    "inSyncReplicas": ((("store", "inSyncReplicas"),), int),
    "totalReplicas": ((("store", "totalReplicas"),), int),
    "slaveTimeout": ((("store", "slaveTimeout"),), int),
}


def check_available(choice: BrokerChoice) -> None:
    if not find_binary():
        raise ClusterError(
            f"BROKER=rust: rocketmq-rust's broker is not built ({BINARY} is not on PATH nor in {rust_image.CACHE}): "
            "run `make peer-broker` first (about 40 minutes on 2 shared cores, 16 CPU-minutes)"
        )


def canonical_config(props: dict[str, str]) -> dict:
    """The node's 4.x keys as rocketmq-rust's canonical config ({"broker": {...}, "store": {...}})."""
    dledger = sorted(k for k in props if "dleger" in k.lower() or "dledger" in k.lower())
    if dledger and props.get("enableDLegerCommitLog", "false").lower() == "true":
        raise ClusterError(
            "BROKER=rust: rocketmq-rust 1.0.0 has no DLedger commit log (its config refuses "
            f"{', '.join(dledger)}): run TOPOLOGY=dledger on ours or apache"
        )
    props = {k: v for k, v in props.items() if k not in dledger}
    if props.get("brokerRole") == "SYNC_MASTER":
        # 4.x's SYNC_MASTER waits for its slave; rocketmq-rust (5.x's rule) only when inSyncReplicas > 1
        props.setdefault("inSyncReplicas", "2")
        props.setdefault("totalReplicas", "2")
        if props.get("flushDiskType", "ASYNC_FLUSH") == "ASYNC_FLUSH":
            # its sync wait also waits for the master's own flushed offset (ack_frontier.rs: the frontier
            # is min(flushed_where, the slaves' acks)), which ASYNC_FLUSH moves only at 4 dirty pages or
            # every flushCommitLogThoroughInterval (10 s): below 16 KiB a sync send waits up to 10 s and
            # fails. A thorough flush every flushIntervalCommitLog (500 ms) bounds the wait (4.x never waits
            # for its own flush there; rocketmq-rust refuses flushCommitLogLeastPages=0 with ASYNC_FLUSH):
            # more fsyncs than 4.x makes, so a power cut takes at most about 500 ms of the log.
            props.setdefault("flushCommitLogThoroughInterval", props.get("flushIntervalCommitLog", "500"))
    unknown = sorted(k for k in props if k not in KEYS)
    if unknown:
        raise ClusterError(
            f"BROKER=rust: the kit does not know where rocketmq-rust keeps {', '.join(unknown)} (it refuses "
            "keys it does not have): add them to rmqha/cluster/implementations/rust.py KEYS, or leave them out"
        )
    doc: dict = {}
    for key, value in sorted(props.items()):
        paths, kind = KEYS[key]
        typed = _typed(key, value, kind)
        for path in paths:
            table = doc
            for part in path[:-1]:
                table = table.setdefault(part, {})
            table[path[-1]] = typed
    return doc


def _typed(key: str, value: str, kind: type):
    if kind is bool:
        if value.strip().lower() not in ("true", "false"):
            raise ClusterError(f"BROKER=rust: {key}={value!r} is not true or false")
        return value.strip().lower() == "true"
    if kind is int:
        try:
            return int(value.strip())
        except ValueError:
            raise ClusterError(f"BROKER=rust: {key}={value!r} is not a whole number") from None
    return value


def to_toml(doc: dict) -> str:
    """TOML of nested tables of str, int and bool (all a broker config holds): scalars first, then each
    sub-table under its dotted header."""
    lines: list[str] = []

    def emit(table: dict, prefix: tuple[str, ...]) -> None:
        scalars = {k: v for k, v in table.items() if not isinstance(v, dict)}
        tables = {k: v for k, v in table.items() if isinstance(v, dict)}
        if prefix and scalars:
            lines.append(f"[{'.'.join(prefix)}]")
        for k, v in scalars.items():
            lines.append(f"{k} = {_toml_value(v)}")
        if prefix and scalars:
            lines.append("")
        for k, sub in tables.items():
            emit(sub, prefix + (k,))

    emit(doc, ())
    return "\n".join(lines).rstrip() + "\n"


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    return json.dumps(str(v))  # a JSON string is a TOML basic string (same escapes, \uXXXX included)


def write_run_properties(run_dir: Path, node: str, conf: str | Path, overrides: dict) -> Path:
    """RUN/nodes/NODE/broker.toml; the properties it came from beside it, as for every broker."""
    props = broker_properties(conf, overrides)
    rf.write_node_properties(
        run_dir, node, props, f"{node}: {conf} with the deployment keys (rocketmq-rust reads {CONFIG_NAME})"
    )
    path = rf.node_properties(run_dir, node).with_name(CONFIG_NAME)
    header = (
        f"# {node}: {Path(conf).name} with the deployment keys, in rocketmq-rust's canonical schema (rmqha.cluster)\n"
    )
    tmp = path.with_suffix(".tmp")
    tmp.write_text(header + to_toml(canonical_config(props)), encoding="utf-8")
    tmp.replace(path)
    return path


def broker_launch(node: dict, run_dir: Path, choice: BrokerChoice) -> Launch:
    check_available(choice)
    path = rf.node_properties(run_dir, node["name"]).with_name(CONFIG_NAME)
    if not path.is_file():
        write_run_properties(run_dir, node["name"], node["conf"], node.get("overrides") or {})
    props = broker_properties(node["conf"], node.get("overrides") or {})
    env = dict(os.environ)
    env.pop("NAMESRV_ADDR", None)
    env.setdefault("ROCKETMQ_HOME", str(path.parent))
    env.setdefault("NO_COLOR", "1")
    return Launch([str(find_binary()), "-c", str(path), "-n", props["namesrvAddr"]], env)


def namesrv_launch(port: int, host: str, run_dir: Path, choice: BrokerChoice) -> Launch:
    raise ClusterError("rocketmq-rust's name server is not wired: use namesrv=ours or namesrv=apache")


def is_broker_process(pid: int) -> bool:
    """The process runs rocketmq-broker-rust (in a container: the one its start script execs)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv0 = fh.read().split(b"\0")[0]
    except OSError:
        return False
    return os.path.basename(argv0) == BINARY.encode()


def adopt(rec: dict) -> dict:
    return rec
