"""`python -m rmqha.chaos.matrix` (`make chaos-matrix [SEEDS=N]`): the guarantee matrix.

For each configuration (2m-2s-sync and 2m-2s-async, each with ASYNC_FLUSH and SYNC_FLUSH; dledger) and seed, one
chaos run (`rmqha.chaos.run --sweep`) injects every fault kind once per role it can hit, one at a time, then
audits the run. Each fault's interval is one cell sample: the sends that started while it was active
(availability = SEND_OK / all), the faulted group's acknowledged sends (from 5 s before it to its heal) and
how many of them every consumer group owed them received (delivered), the sends no broker answered (indeterminate: neither
lost nor delivered), each group's share of answered sends it accepted and the time it accepted none
(availability per group), the records the audit left out (excluded: unexplained ones fail the cell), the
acknowledged losses and divergences the audit blames on it, and the
recovery time (heal -> every slave of the faulted group at its master's offset in the metric samples; a
slave ahead of its master or not answering is not caught up, and a group that did not end byte-equal,
by the audit's replica verdict or the run's ending, never recovered after its first master power loss:
"never"). Each cell is judged against what RocketMQ 4.9 promises for it (PROMISES; the reasoning is in
docs/guarantees.md):

  FAIL           a result the promise excludes: an acknowledged message lost to its users (on no node,
                 never delivered, stranded on a slave, or received and then gone), a divergence; or losses
                 blamed on a fault that was not exercised that no earlier fault of its group explains; or
                 records left out of the figures that EXPLAINED does not cover (an unparsable history line,
                 an acknowledged send owed to no consumer group, an audit count the histories do not match)
  WEAK           a weakness the configuration allows, with its measured size (an async master's power loss)
  not audited    the run's audit wrote no delivery figures (no consumer group, no history, no commit log):
                 the cell cannot be judged, and fails the matrix
  not exercised  the faulted group acknowledged no send while the fault was active, the fault had no
                 visible effect, or the group could no longer replicate (an earlier fault forked it):
                 nothing was tested
  PASS           exercised, and nothing the promise excludes happened

A not-exercised fault cannot have caused what the audit blames on it: those losses move to the earlier
exercised fault of its group that did (reattribute()). Each cell shows how many of its runs exercised it.
An audit FAIL that no cell accounts for (a phantom, a duplicate UNIQ_KEY, a damaged log, a missing queue
entry, a loss no fault explains) fails the matrix too, and is listed under the table; so does a run that
did not happen or was not audited ("not run" / "not audited", counted in the table's header).

DLedger rows (configuration dledger: one Raft group of three, in the default plan; `--configs dledger`):
one sweep of the nemesis's DLedger faults (kill/pause a leader or a follower; on docker, partitions), each
a minority failure, so the promise allows no acknowledged loss and no divergence (a loss FAILS the cell).
From the status samples' "dledger" block: failover (fault start -> another node leads, as the members
say; "n/a" for follower faults and classic rows; a leader fault with none is "not exercised") and
recovery (heal -> every member answers with the leader's committed index: ahead or behind is not caught
up). Every row also shows the longest time its group accepted no send while sends were tried
(unavailable) and the receives beyond a consumer group's first of the sends at stake (duplicates).

Writes OUT/matrix.md (the table), OUT/matrix.json and OUT/matrix.png (a heatmap of the verdicts).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

from rmqha.cluster import runfolder as rf

from rmqha.runs.faults import DESTRUCTIVE, FAULTS, GROUP_POWER, LEADER_FAULTS, NODE_DOWN, evidence, master_power_cut

CONFIGS = [
    ("2m-2s-sync", "ASYNC_FLUSH"),
    ("2m-2s-sync", "SYNC_FLUSH"),
    ("2m-2s-async", "ASYNC_FLUSH"),
    ("2m-2s-async", "SYNC_FLUSH"),
]
LOCAL_FAULTS = [
    "kill-master",
    "restart-master",
    "pause-master",
    "power-loss",
    "kill-slave",
    "restart-slave",
    "pause-slave",
    "group-power-loss",
    "slave-then-master-power-loss",
    "cluster-power-loss",
    "disk-full",
]
# disk-full needs every store on a size-limited tmpfs, where fsync does nothing: it gets a sweep of its own,
# so the process faults (power loss above all) run on the real filesystem
DISK_FAULTS = ["disk-full"]
LOCAL_SWEEPS = [[f for f in LOCAL_FAULTS if f not in DISK_FAULTS], DISK_FAULTS]
# --long-holds: faults held past the 20 s HA housekeeping, the 30 s client route refresh and the 120 s
# name-server expiry (a frozen master's routes expire; a frozen slave's connection is reaped), 135 s each
LONG_FAULTS = ["pause-master", "pause-slave", "kill-master"]
LONG_HOLD_S = 135.0  # the expiry scan runs every 10 s: past 120 s plus one scan
DOCKER_FAULTS = ["partition", "cut", "latency", "client-cut"]

# A DLedger (Raft) group of three: one configuration, in mode "ours" only (haCompat49 and haRecoveryEnable
# are classic HA settings). compose/dledger sets no flushDiskType, so the broker's default: the sweep sets
# none either, and the row names the default. Its faults are the nemesis's DLedger faults, found by their
# modes: every one the local backend can do, and on docker the ones only docker can (partitions).
DLEDGER = ("dledger", "ASYNC_FLUSH")
DLEDGER_LOCAL_FAULTS = [k for k, v in FAULTS.items() if v.dledger and "local" in v.backends]
DLEDGER_DOCKER_FAULTS = [k for k, v in FAULTS.items() if v.dledger and "local" not in v.backends]
# The DLedger sweep's faults end about 50 s in; its workload goes on to at least this: a leader fault is
# held from when it took effect, and later faults move with it (nemesis.py Nemesis.run), so a slow
# inject or restart needs room before the sends stop (then the nemesis stops, and heals what is active).
DLEDGER_MIN_DURATION_S = 80.0
# `--configs all` (the default): the classic four, and dledger (one sweep of about 2 minutes per seed)
ALL_CONFIGS = CONFIGS + [DLEDGER]


def is_dledger(topology: str) -> bool:
    return topology == DLEDGER[0]


def parse_configs(text: str) -> list[tuple[str, str]]:
    """--configs: "all", or comma-separated TOPOLOGY/FLUSH (2m-2s-sync/ASYNC_FLUSH) or "dledger" (its flush
    is the topology's own; dledger/ASYNC_FLUSH is the same). ValueError names an unknown one."""
    if text == "all":
        return list(ALL_CONFIGS)
    out = []
    for item in (c.strip() for c in text.split(",") if c.strip()):
        if item in (DLEDGER[0], "/".join(DLEDGER)):
            out.append(DLEDGER)
            continue
        pair = tuple(item.split("/"))
        if pair not in CONFIGS:
            known = ", ".join(["/".join(c) for c in CONFIGS] + [DLEDGER[0]])
            raise ValueError(f"--configs: {item!r}; known: {known}")
        out.append(pair)
    return out


def sweeps_for(topology: str, backend: str, long_holds: bool = False) -> list[list[str]]:
    """The fault sweeps of one configuration on one backend (each sweep is one run per seed)."""
    if is_dledger(topology):
        return [DLEDGER_LOCAL_FAULTS if backend == "local" else DLEDGER_DOCKER_FAULTS]
    if backend != "local":
        return [DOCKER_FAULTS]
    return LOCAL_SWEEPS + ([LONG_FAULTS] if long_holds else [])


def promise(topology: str, flush: str, kind: str, role: str) -> dict:
    """What RocketMQ 4.9 promises for one cell: may acknowledged sends be lost, may the replicas diverge."""
    if is_dledger(topology):
        # every DLedger fault of the kit takes one node of three (killed, paused or cut off): a minority
        return {
            "loss_allowed": False,
            "divergence_allowed": False,
            "why": "SEND_OK means a majority (2 of 3) appended it and it is committed; with one node down, "
            "frozen or cut off the other two still hold every committed entry, and only a node holding them "
            "all can be elected (Raft): nothing acknowledged is lost, the committed prefix never diverges",
        }
    sync = topology == "2m-2s-sync"
    group_power = kind in GROUP_POWER
    master_power = master_power_cut(kind, role)
    # SEND_OK on a SYNC_MASTER: a slave reported the bytes (docs/ha-protocol.md §5). With SYNC_FLUSH: fsynced on the
    # master. A SIGKILL keeps the page cache. So only an ASYNC_MASTER + ASYNC_FLUSH power loss can lose what
    # the slave had not received yet; and when the whole group loses power, with ASYNC_FLUSH what no node
    # had fsynced is gone in both topologies (a slave's report says it received the bytes, not that they are
    # on its disk).
    loss = master_power and flush == "ASYNC_FLUSH" and (group_power or not sync)
    # A master power loss can leave the slave holding bytes the master lost (replication runs ahead of the
    # master's flush in every configuration): the logs fork if the master then takes writes (SLAVE_AHEAD).
    diverge = master_power
    why = ("SEND_OK means a slave holds it" if sync else "SEND_OK means the master stored it") + (
        "; fsynced on the master" if flush == "SYNC_FLUSH" else ""
    )
    if loss and group_power:
        why += "; the power cut of every node holding it drops its unsynced tail everywhere"
    elif loss:
        why += "; a power cut drops the master's unsynced tail, and what the slave had not received is gone"
    elif master_power:
        why += "; the master's unsynced tail may be on the slave only (SLAVE_AHEAD, a fork if the master writes)"
    return {"loss_allowed": loss, "divergence_allowed": diverge, "why": why}


def read_jsonl(path: Path):
    with open(path) as fh:
        for line in fh:
            try:
                yield json.loads(line)
            except ValueError:
                continue


def sends(run: Path) -> list[tuple[int, int, str]]:
    out = []
    for p in sorted((run / "history").glob("producer-*.jsonl")):
        out += [
            (r["start_ms"], r.get("end_ms") or r["start_ms"], r["status"])
            for r in read_jsonl(p)
            if r.get("op") == "send" and r.get("start_ms")
        ]
    return out


# ---- delivered, indeterminate, per-group availability and excluded records (issue 23, deliverable 3)
#
# summary.json holds, per fault, only the acknowledged sends of the faulted group (ackedOnGroupByFault) and
# the losses; per consumer group, run-wide totals (delivery). What a cell needs per fault — which of those
# acknowledged sends a consumer received, which sends had an outcome the client could not know, and each
# group's accepted share — is computed here from the run folder's histories (rmqha/runs/history.py's
# format) and the nodes' commit logs (the only place a send's broker group is written: the recorder leaves
# the history's broker_name empty, and a failed try's error names no broker).

AT_RISK_MS = 5000  # rmqha/pipeline/delivery.py AT_RISK_MS: "acked during fault" starts this long before it
UNWRITABLE_GAP_MS = 1000  # a group that accepted no send for longer than this while sends were tried was unwritable
NOT_ACCEPTED = ("SLAVE_NOT_AVAILABLE", "FLUSH_SLAVE_TIMEOUT", "FLUSH_DISK_TIMEOUT")
PARKED_TOPICS = ("SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC")  # rmqha/pipeline/delivery.py: not due yet
# excluded records that do not make a cell NOT-OK, by their kind (never by their text, which can hold a
# consumer group's name): kind -> why they cannot hide a loss
TORN = "torn"
EXPLAINED = {
    TORN: "the recorder was stopped mid-line on a line that is not a send's answer, or on the answer of a send "
    "every consumer group owed it received: nothing acknowledged can be lost behind it",
}


def _explained(kind: str | None) -> str | None:
    return EXPLAINED.get(kind or "")


def _offset_of(offset_msg_id: str | None) -> int | None:
    """The commit-log offset an offsetMsgId names (its last 16 hex digits, after the store host)."""
    try:
        return int(offset_msg_id[-16:], 16) if offset_msg_id and len(offset_msg_id) >= 32 else None
    except ValueError:
        return None


class RunFacts:
    """What the histories and the commit logs say about every send of one run.

    sends:     send_id -> {"topic", "first_ms", "acked_ms" (first SEND_OK answer), "state" (acked |
               unconfirmed | indeterminate, as rmqha/pipeline/delivery.py), "uniq" (the SEND_OK try's UNIQ_KEY),
               "ok" (the SEND_OK answer line), "file" (its history file)}
    tries:     [(start_ms, end_ms, status, uniq_key, group)] every try with an outcome (ERROR too); group: the
               history's broker_name, else the group of the copy the answer names (try_group), else None
    received:  consumer group -> the send_ids it received (by KEYS, else by UNIQ_KEY)
    windows:   consumer group -> (topics, start ms or None, end ms or None): what its audit owes it
    copies:    UNIQ_KEY or send_id (KEYS) -> [(group, master, topic, physical offset, queue id, queue offset)]
    excluded:  [(kind, reason, where, ms or None)] records left out of every figure (None: no time known)
    stores:    whether any node's commit log was read (without one no send has a group)"""

    def __init__(self):
        self.sends: dict[str, dict] = {}
        self.tries: list[tuple[int, int, str, str | None, str | None]] = []
        self.received: dict[str, set] = {}
        self.receive_counts: dict[str, dict[str, int]] = {}  # consumer group -> send_id -> receives
        self.windows: dict[str, tuple[set, int | None, int | None]] = {}
        self.excluded: list[tuple[str, str, str, int | None]] = []
        self.copies: dict[str, list[tuple]] = {}
        self.group_of_uniq: dict[str, str] = {}  # a UNIQ_KEY stored in one group only (tests may set it)
        self.torn: list[tuple[str, int, str]] = []
        self.stores = False
        self._groups: dict[str, str | None] = {}
        self.ambiguous: dict[str, list[str]] = {}
        self.checked: list | None = None  # run_checks(), once per run

    def try_group(self, rec: dict, topic: str | None) -> tuple[str | None, list[str]]:
        """(the broker group that answered this try, the groups it could not tell apart): the answer's
        broker_name when its recorder wrote one (the Rust client); else the group of the in-topic copy of
        its UNIQ_KEY (a delayed or half message's parked copy when there is none); when the client's
        internal retry left a copy in two groups, the copy the answer's offsetMsgId (commit-log offset)
        and queue offset name."""
        if rec.get("broker_name"):
            return rec["broker_name"], []
        mine = self.copies.get(rec.get("uniq_key") or "", [])
        cands = [c for c in mine if c[2] == topic] or [c for c in mine if c[2] in PARKED_TOPICS and c[1]]
        groups = sorted({c[0] for c in cands})
        if len(groups) <= 1:
            return (groups[0] if groups else None), []
        phys, qoff, qid = _offset_of(rec.get("offset_msg_id")), rec.get("queue_offset"), rec.get("queue_id")
        named = (
            [
                c
                for c in cands
                if (phys is None or c[3] == phys) and (qoff is None or c[5] == qoff) and (qid is None or c[4] == qid)
            ]
            if (phys, qoff) != (None, None)
            else cands
        )
        named_groups = sorted({c[0] for c in named})
        return (named_groups[0], []) if len(named_groups) == 1 else (None, groups)

    def group(self, send_id: str) -> str | None:
        """The broker group that acknowledged a send: its SEND_OK try's (try_group); when that try's copy is
        on no node, the group of the send's other in-topic copies (by KEYS or by any try's UNIQ_KEY, as
        rmqha/pipeline/delivery.py), if they are in one group."""
        if send_id in self._groups:
            return self._groups[send_id]
        s = self.sends.get(send_id) or {}
        g, amb = self.try_group(s["ok"], s.get("topic")) if s.get("ok") else (None, [])
        if g is None and not amb and s.get("uniq"):
            g = self.group_of_uniq.get(s["uniq"])
        if g is None and not amb:
            copies = [c for k in (send_id, *sorted(s.get("uniqs", ()))) for c in self.copies.get(k, [])]
            groups = sorted({c[0] for c in copies if c[2] == s.get("topic")})
            g = groups[0] if len(groups) == 1 else None
        if amb:
            self.ambiguous[send_id] = amb
        self._groups[send_id] = g
        return g

    def stored(self, send_id: str) -> bool:
        """Whether some node holds a copy of any try of a send (by KEYS or by a try's UNIQ_KEY), in any
        topic: a cluster-wide fault counts it (rmqha/pipeline/delivery.py's ackedOnGroupByFault)."""
        s = self.sends.get(send_id) or {}
        return bool(self.copies.get(send_id)) or any(self.copies.get(u) for u in s.get("uniqs", ()))

    def owed_to(self, send_id: str) -> list[str]:
        """The consumer groups owed an acknowledged send (its topic, within their audited window)."""
        s = self.sends.get(send_id) or {}
        at = s.get("acked_ms") or s.get("first_ms") or 0
        return [
            g
            for g, (topics, start, end) in self.windows.items()
            if s.get("topic") in topics and (start is None or at >= start) and (end is None or at <= end)
        ]

    def delivered(self, send_id: str) -> bool:
        """Received by every consumer group it is owed to (by none when it is owed to none)."""
        owed = self.owed_to(send_id)
        return bool(owed) and all(send_id in self.received.get(g, ()) for g in owed)

    def parked(self, send_id: str) -> bool:
        """Acknowledged, with no in-topic copy on a master and a copy parked on one (not due yet: not owed)."""
        s = self.sends.get(send_id) or {}
        copies = list(self.copies.get(send_id, []))
        for u in s.get("uniqs", ()):
            copies += self.copies.get(u, [])
        return not any(c[1] and c[2] == s.get("topic") for c in copies) and any(
            c[1] and c[2] in PARKED_TOPICS for c in copies
        )


def history_paths(run: Path) -> list[Path]:
    return sorted((run / "history").rglob("*.jsonl")) if (run / "history").is_dir() else []


def read_histories(run: Path, facts: RunFacts) -> list[dict]:
    """Every history line as a dict (rmqha/runs/history.py FIELDS), with "_file"; a line that is not a JSON
    object with a known op is excluded, and named; a torn last line is kept in facts.torn to be judged
    once the sends are known (run_facts)."""
    from rmqha.runs import history as h

    ops = (h.INVOKE, h.SEND, h.RECEIVE, h.SUBSCRIBE, h.UNSUBSCRIBE)
    out = []
    for p in history_paths(run):
        text = p.read_text(errors="replace")
        lines = text.split("\n")
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            torn = i == len(lines) - 1  # the file does not end with a newline: its writer stopped mid-line
            try:
                r = json.loads(line)
            except ValueError:
                if torn:
                    facts.torn.append((p.name, i + 1, line))
                else:
                    facts.excluded.append(("unparsable", "unparsable history line", f"{p.name}:{i + 1}", None))
                continue
            if not isinstance(r, dict) or r.get("op") not in ops:
                facts.excluded.append(("no-op", "history line with no known op", f"{p.name}:{i + 1}", None))
                continue
            if r["op"] in (h.INVOKE, h.SEND) and not r.get("send_id"):
                facts.excluded.append(("no-send-id", "send without a send_id", f"{p.name}:{i + 1}", r.get("start_ms")))
                continue
            if r.get("status") == "SLAVE_NOT_AVAILABE":  # 4.9's own spelling, as the audit reads it
                r["status"] = "SLAVE_NOT_AVAILABLE"
            r["_file"] = p.name
            out.append(r)
    return out


def read_store_groups(run: Path, facts: RunFacts, topics: set[str]) -> None:
    """Every copy of a send in any node's commit log, by send_id (KEYS) and by UNIQ_KEY: in a send's topic,
    parked (SCHEDULE_TOPIC_XXXX, the half topic) or any other topic (a retry topic's copy)."""
    import mmap

    from rmqha.broker.store.mapped_file import list_files
    from rmqha.broker.store.record import Scan, iter_records

    nodes = []
    for nj in sorted((run / "nodes").glob("*/node.json")) if (run / "nodes").is_dir() else []:
        try:
            meta = json.loads(nj.read_text())
        except ValueError:
            facts.excluded.append(
                ("node-json", "unreadable node.json (its commit log is not read)", nj.parent.name, None)
            )
            continue
        # every member of a DLedger group serves its committed entries once it leads: none is a slave
        dl = meta.get("commitLog") == "dledger" or bool(dledger_data_files(nj.parent / "store"))
        nodes.append((not dl and meta.get("brokerId", 0) != 0, meta.get("brokerName") or nj.parent.name, nj.parent))
    for slave, group, nd in sorted(nodes):
        for m in dledger_messages(nd / "store"):
            facts.stores = True
            copy = (group, not slave, m.topic, m.physical_offset, m.queue_id, m.queue_offset)
            for k in {k for k in (m.keys or "").split(" ") if k} | ({m.uniq_key} if m.uniq_key else set()):
                facts.copies.setdefault(k, []).append(copy)
        for _base, path in list_files(str(nd / "store" / "commitlog")):
            facts.stores = True
            with open(path, "rb") as fh:
                try:
                    buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
                except ValueError:  # an empty file
                    continue
                try:
                    for _off, r in iter_records(buf, 0, check_crc=False):
                        if r.kind != Scan.MESSAGE or r.message is None:
                            break
                        m = r.message
                        copy = (group, not slave, m.topic, m.physical_offset, m.queue_id, m.queue_offset)
                        for k in {k for k in (m.keys or "").split(" ") if k} | ({m.uniq_key} if m.uniq_key else set()):
                            facts.copies.setdefault(k, []).append(copy)
                finally:
                    buf.close()
    for u, cs in facts.copies.items():
        groups = {c[0] for c in cs if c[2] in topics}
        if len(groups) == 1:
            facts.group_of_uniq[u] = groups.pop()


def dledger_data_files(store: Path) -> list[Path]:
    """A DLedger node's data files (<store>/dledger-<selfId>/data/<20-digit start position>), in order."""
    return sorted(p for p in store.glob("dledger-*/data/*") if re.fullmatch(r"\d{20}", p.name))


def dledger_messages(store: Path):
    """The messages of a DLedger node's entries (each body one classic record), the uncommitted tail too:
    what the node stores, as read_store_groups needs it (which group holds a copy). The audit reads only
    the committed prefix (rmqha/pipeline/dledger_log.py); a walk stops at a blank (the file's end) or at
    bytes that are not an entry."""
    import mmap

    from rmqha.broker.dledger.entry import BODY_OFFSET, EntryFormatError, decode_entry, is_blank
    from rmqha.broker.store.record import Scan, scan

    for path in dledger_data_files(store):
        with open(path, "rb") as fh:
            try:
                buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            except ValueError:  # an empty file
                continue
            try:
                off = 0
                while off + BODY_OFFSET <= len(buf) and not is_blank(buf, off):
                    try:
                        e = decode_entry(buf, off)
                    except EntryFormatError:
                        break
                    r = scan(e.body or b"", 0, check_crc=False)
                    if r.kind == Scan.MESSAGE and r.message is not None:
                        yield r.message
                    off += e.size
            finally:
                buf.close()


TORN_OP = re.compile(r'"op":\s*"(\w*)"')
TORN_SID = re.compile(r'"send_id":\s*"([^"]*)"')


def judge_torn(facts: RunFacts, pending: dict[str, int], files: dict[str, str]) -> None:
    """A torn last line is explained when it cannot hide a loss: it is not a send's answer, or every send
    whose answer it may be (the send_id it names; else every send of its file with no answer) is answered
    elsewhere or was received by every group it would be owed to. A torn SEND_OK of a send nobody received
    would hide a lost acknowledged send: not explained."""
    for name, lineno, text in facts.torn:
        where = f"{name}:{lineno}"
        op = TORN_OP.search(text)
        sid = TORN_SID.search(text)
        if op and op.group(1) != "send":
            facts.excluded.append((TORN, "torn last history line", where, None))
            continue
        # the send it names; else every send of its file with a try still unanswered
        cands = [sid.group(1)] if sid else [x for x, f in files.items() if f == name and pending.get(x)]
        hidden = [
            x for x in cands if x in facts.sends and facts.sends[x]["state"] != "acked" and not facts.delivered(x)
        ]
        if hidden:
            facts.excluded.append(
                (
                    "torn-answer",
                    f"torn last history line, the answer of {', '.join(hidden[:3])}"
                    + (f" and {len(hidden) - 3} more" if len(hidden) > 3 else "")
                    + ", which no consumer group received (a lost acknowledged send could hide there)",
                    where,
                    None,
                )
            )
        else:
            facts.excluded.append((TORN, "torn last history line", where, None))


class _HistoryRows:
    """What run_facts() gathers from the histories' rows before it can place the receives and the tries."""

    def __init__(self) -> None:
        self.uniq_to_send: dict[str, str] = {}
        self.subs: dict[str, dict] = {}
        self.receives: list[dict] = []
        self.answers: list[dict] = []
        self.pending: dict[str, int] = {}  # send_id -> its tries without an answer line
        self.files: dict[str, str] = {}


def _note_send(facts: RunFacts, seen: _HistoryRows, r: dict) -> None:
    """An invoke or a send answer: the send's first try, its UNIQ_KEYs and its state so far."""
    from rmqha.runs import history as h

    op, sid = r["op"], r.get("send_id")
    s = facts.sends.setdefault(
        sid,
        {
            "topic": r.get("topic"),
            "first_ms": r.get("start_ms"),
            "acked_ms": None,
            "state": "indeterminate",
            "uniq": None,
            "ok": None,
            "uniqs": set(),
        },
    )
    seen.files.setdefault(sid, r["_file"])
    if r.get("uniq_key"):
        seen.uniq_to_send.setdefault(r["uniq_key"], sid)
        s["uniqs"].add(r["uniq_key"])
    seen.pending[sid] = seen.pending.get(sid, 0) + (1 if op == h.INVOKE else -1)
    if op == h.SEND:
        seen.answers.append(r)
    if op == h.SEND and r.get("status") in h.SEND_STATUSES:
        if r["status"] == "SEND_OK":
            if s["acked_ms"] is None:
                s["acked_ms"], s["uniq"], s["ok"] = r.get("end_ms") or r.get("start_ms"), r.get("uniq_key"), r
            s["state"] = "acked"
        elif s["state"] == "indeterminate":
            s["state"] = "unconfirmed"


def _note_subscription(seen: _HistoryRows, r: dict) -> None:
    """A subscribe or unsubscribe: the consumer group's audited window (rmqha/pipeline/delivery.py)."""
    from rmqha.runs import history as h

    g = seen.subs.setdefault(
        r.get("group") or r.get("client") or "?",
        {"topics": set(), "subs": 0, "unsubs": 0, "first": False, "since": None, "until": None},
    )
    if r["op"] == h.SUBSCRIBE:
        g["subs"] += 1
        g["topics"].add(r.get("topic"))
        g["first"] = g["first"] or r.get("status") != h.FROM_NOW
        g["since"] = min(x for x in (g["since"], r.get("start_ms")) if x is not None)
    else:
        g["unsubs"] += 1
        g["until"] = max(x for x in (g["until"], r.get("start_ms") or 0) if x is not None)


def _read_rows(facts: RunFacts, rows: list[dict]) -> _HistoryRows:
    """The sends from the rows in time order; the receives, answers and subscriptions set aside."""
    from rmqha.runs import history as h

    seen = _HistoryRows()
    for r in sorted(rows, key=lambda r: (r.get("start_ms") or 0, r.get("seq") or 0)):
        if r["op"] in (h.INVOKE, h.SEND):
            _note_send(facts, seen, r)
        elif r["op"] == h.RECEIVE:
            seen.receives.append(r)
        else:
            _note_subscription(seen, r)
    return seen


def _count_receives(facts: RunFacts, seen: _HistoryRows) -> None:
    """Each consumer group's (the audit's `grp`) receives, by send. Done after every send is known: a receive
    can be recorded before its send's answer, even before its invoke (the clients' clocks are read on
    different threads)."""
    for r in seen.receives:
        keys = [k for k in (r.get("send_id") or "").split(" ") if k]
        got = next((k for k in keys if k in facts.sends), None) or seen.uniq_to_send.get(r.get("uniq_key") or "")
        if got:
            grp = r.get("group") or r.get("client") or "?"
            facts.received.setdefault(grp, set()).add(got)
            counts = facts.receive_counts.setdefault(grp, {})
            counts[got] = counts.get(got, 0) + 1


def _count_tries(facts: RunFacts, answers: list[dict]) -> None:
    """Every try with an outcome, with the group that answered it when one is known."""
    from rmqha.runs import history as h

    for r in answers:
        status = r["status"] if r.get("status") in h.SEND_STATUSES else h.ERROR
        g = facts.try_group(r, facts.sends[r["send_id"]]["topic"])[0] if status != h.ERROR else r.get("broker_name")
        facts.tries.append(
            (
                r.get("start_ms") or 0,
                r.get("end_ms") or r.get("start_ms") or 0,
                status,
                r.get("uniq_key") if status != h.ERROR else None,
                g,
            )
        )


def _exclude_unplaced_acks(facts: RunFacts) -> None:
    """Acknowledged sends the figures cannot count: owed to no consumer group, or stored in two groups
    when the answer names neither."""
    for sid, s in facts.sends.items():
        at = s["acked_ms"] or s["first_ms"] or 0
        if s["state"] != "acked":
            continue
        if not facts.owed_to(sid):
            facts.excluded.append(
                ("owed-to-none", "acknowledged, owed to no consumer group (outside every audited window)", sid, at)
            )
        if facts.group(sid) is None and sid in facts.ambiguous:
            facts.excluded.append(
                (
                    "ambiguous-group",
                    f"acknowledged, stored in two groups, the answer names neither ({', '.join(facts.ambiguous[sid])})",
                    sid,
                    at,
                )
            )


def run_facts(run: Path) -> RunFacts | None:
    """The run's sends, tries, receives and groups; None when it has no history (nothing can be counted)."""
    if not history_paths(run):
        return None
    facts = RunFacts()
    seen = _read_rows(facts, read_histories(run, facts))
    _count_receives(facts, seen)
    for name, g in seen.subs.items():
        start = None if g["first"] or not g["subs"] else g["since"]
        end = g["until"] if g["subs"] and g["unsubs"] >= g["subs"] else None
        facts.windows[name] = (g["topics"], start, end)
    read_store_groups(run, facts, {s["topic"] for s in facts.sends.values() if s["topic"]})
    _count_tries(facts, seen.answers)
    judge_torn(facts, seen.pending, seen.files)
    _exclude_unplaced_acks(facts)
    return facts


def _union(spans: list[tuple[float, float]]) -> float:
    total, cur = 0.0, None
    for a, b in sorted(spans):
        if cur is None or a > cur[1]:
            if cur:
                total += cur[1] - cur[0]
            cur = [a, b]
        else:
            cur[1] = max(cur[1], b)
    return total + (cur[1] - cur[0] if cur else 0.0)


def group_availability(facts: RunFacts, start: float, end: float) -> dict[str, dict]:
    """group -> {"answered", "accepted", "share", "unwritable_s", "not_accepted": {status: n}} for the tries
    started in [start, end] whose group is known (the group storing its UNIQ_KEY, else the history's
    broker_name: then a failed try counts as not accepted, "ERROR"), plus "?" -> {"errors": n, "unknown": n}:
    failed tries whose group is unknown (timeouts, exceptions, refusals: the official client's error names
    no broker) and answers stored nowhere. unwritable_s: the time within the window in gaps longer than
    UNWRITABLE_GAP_MS between two accepted answers of the group, while sends were tried."""
    tried = sorted(t[0] for t in facts.tries if start <= t[0] <= end)
    out: dict[str, dict] = {}
    unknown = {"errors": 0, "unknown": 0}
    ok_at: dict[str, list[float]] = {}
    for t0, t1, status, uniq, broker in facts.tries:
        g = broker or facts.group_of_uniq.get(uniq or "")
        if status == "SEND_OK" and g:
            ok_at.setdefault(g, []).append(t1)
        if not start <= t0 <= end:
            continue
        if g is None:
            unknown["unknown" if status in ("SEND_OK",) + NOT_ACCEPTED else "errors"] += 1
            continue
        c = out.setdefault(g, {"answered": 0, "accepted": 0, "not_accepted": {}})
        c["answered"] += 1
        if status == "SEND_OK":
            c["accepted"] += 1
        else:
            c["not_accepted"][status] = c["not_accepted"].get(status, 0) + 1
    for g in set(out) | set(ok_at):
        c = out.setdefault(g, {"answered": 0, "accepted": 0, "not_accepted": {}})
        c["share"] = round(c["accepted"] / c["answered"], 3) if c["answered"] else None
        marks = [start] + sorted(t for t in ok_at.get(g, []) if start < t < end) + [end]
        gaps = []
        for a, b in zip(marks, marks[1:]):
            # a gap counts only while the workload was trying: from the first try in it to its end
            first = next((t for t in tried if a <= t <= b), None)
            if first is not None and b - max(a, first) > UNWRITABLE_GAP_MS:
                gaps.append((max(a, first), b))
        c["unwritable_s"] = round(_union(gaps) / 1000, 1)
        c["longest_gap_s"] = round(max((b - a for a, b in gaps), default=0) / 1000, 1)
    if unknown["errors"] or unknown["unknown"]:
        out["?"] = unknown
    return out


def _not_audited(facts: RunFacts | None, summary: dict, label: str) -> list[str]:
    """Why the run's delivery figures cannot be counted for this fault ([] when they can)."""
    missing = []
    if facts is None:
        missing.append("no history in the run folder")
    elif not facts.stores:
        missing.append("no commit log in the run folder (no send has a group)")
    if not summary.get("delivery"):
        missing.append("summary.json has no delivery block (no consumer group was audited)")
    if label not in (summary.get("ackedOnGroupByFault") or {}):
        missing.append(f"summary.json has no ackedOnGroupByFault for {label}")
    return missing


def _sends_at_stake(facts: RunFacts, f: dict, start: float, end: float) -> tuple[set[str], int, int, int]:
    """The faulted group's acknowledged sends (AT_RISK_MS before the fault to its heal), how many of them
    were delivered and parked, and the unanswered sends first tried while it was active."""
    mine = [f["group"]] if f.get("group") else None
    lo_at, hi_at = start - AT_RISK_MS, end
    acked_ids: set[str] = set()
    delivered, indeterminate, parked = 0, 0, 0
    for sid, s in facts.sends.items():
        if s["state"] == "acked" and lo_at <= (s["acked_ms"] or 0) <= hi_at:
            g = facts.group(sid)
            # a cluster-wide fault: every acknowledged send some node stores (parked ones too, as the audit)
            if (mine is None and (g is not None or facts.stored(sid))) or (mine is not None and g in mine):
                acked_ids.add(sid)
                delivered += facts.delivered(sid)
                parked += not facts.delivered(sid) and facts.parked(sid)
        # not answered by any broker: counted here when it may be this group's (stored on it, or nowhere)
        g = facts.group(sid) if s["state"] == "indeterminate" else None
        if (
            s["state"] == "indeterminate"
            and start <= (s["first_ms"] or 0) <= end
            and (mine is None or g in (None, *mine))
        ):
            indeterminate += 1
    return acked_ids, delivered, indeterminate, parked


def _duplicates(facts: RunFacts, f: dict, start: float, end: float, acked_ids: set[str]) -> int:
    """Receives beyond a consumer group's first of the sends at stake: the acknowledged ones and those
    first tried while the fault was active (a retry after a try the old leader stored is two copies)."""
    mine = [f["group"]] if f.get("group") else None
    stake = acked_ids | {
        sid
        for sid, s in facts.sends.items()
        if start <= (s["first_ms"] or 0) <= end and (mine is None or facts.group(sid) in (None, *mine))
    }
    return sum(max(0, c.get(sid, 0) - 1) for c in facts.receive_counts.values() for sid in stake)


def _excluded_during(
    facts: RunFacts, summary: dict, start: float, end: float
) -> tuple[dict[str, int], dict[str, str], set[str]]:
    """The records left out of the figures while the fault was active (and the run's, which have no
    time), counted by reason; where each was first seen; the reasons EXPLAINED covers."""
    excluded: dict[str, int] = {}
    where: dict[str, str] = {}
    explained: set[str] = set()
    if facts.checked is None:
        facts.checked = run_checks(facts, summary)
    for kind, reason, place, at, n in [(*x, 1) for x in facts.excluded] + facts.checked:
        if at is None or start <= at <= end:
            excluded[reason] = excluded.get(reason, 0) + n
            where.setdefault(reason, place)
            if _explained(kind):
                explained.add(reason)
    return excluded, where, explained


def fault_figures(facts: RunFacts | None, f: dict, summary: dict, label: str) -> dict:
    """A fault's delivered / indeterminate / per-group availability / excluded, or None figures when the run
    was not audited for delivery (no consumer group in the summary, no history, no commit log)."""
    start, end = f["start_ms"], f["end_ms"] if f["end_ms"] is not None else float("inf")
    missing = _not_audited(facts, summary, label)
    if missing or facts is None:
        return {
            "delivered": None,
            "indeterminate": None,
            "duplicates": None,
            "group_availability": {},
            "not_audited": "; ".join(missing),
            "excluded": {},
        }
    acked_ids, delivered, indeterminate, parked = _sends_at_stake(facts, f, start, end)
    duplicates = _duplicates(facts, f, start, end, acked_ids)
    excluded, where, explained = _excluded_during(facts, summary, start, end)
    # the audit and the histories must count the same acknowledged sends for this fault: both give a send
    # the group that acknowledged it (RunFacts.group; rmqha/pipeline/delivery.py _placed) and count one in
    # no group's fault when its copies cannot be told apart
    audit_acked = summary["ackedOnGroupByFault"][label]
    if audit_acked != len(acked_ids):
        excluded[f"acknowledged the audit counted {audit_acked}, the histories and stores {len(acked_ids)}"] = abs(
            audit_acked - len(acked_ids)
        )
    return {
        "delivered": delivered,
        "indeterminate": indeterminate,
        "duplicates": duplicates,
        "acked_recounted": len(acked_ids),
        # acknowledged, not delivered: parked (not due, owed to nobody yet) or a loss the audit blames
        "not_delivered": len(acked_ids) - delivered,
        "parked": parked,
        # a fault never healed: its window runs to the last try
        "group_availability": group_availability(
            facts, start, end if end != float("inf") else max((t[0] for t in facts.tries), default=start)
        ),
        "not_audited": None,
        "excluded": excluded,
        "excluded_where": where,
        "explained": sorted(explained),
        "_acked_ids": acked_ids,
    }


def run_checks(facts: RunFacts, summary: dict) -> list[tuple[str, str, str, None, int]]:
    """The run's figures the audit and the histories must agree on, per consumer group (no time: named in
    every cell of the run): the acknowledged sends it is owed, those it received, and the audit's own
    partition of them (delivered + lost + stranded + parked). Each with the size of the difference."""
    out = []
    for grp, d in sorted((summary.get("delivery") or {}).items()):
        owed = [sid for sid, s in facts.sends.items() if s["state"] == "acked" and grp in facts.owed_to(sid)]
        got = sum(1 for sid in owed if sid in facts.received.get(grp, ()))
        if d.get("acknowledged") != len(owed):
            out.append(
                (
                    "audit-owed",
                    f"{grp}: the audit owed {d.get('acknowledged')} acknowledged, the histories {len(owed)}",
                    grp,
                    None,
                    abs((d.get("acknowledged") or 0) - len(owed)),
                )
            )
        if d.get("delivered") != got:
            out.append(
                (
                    "audit-delivered",
                    f"{grp}: the audit counted {d.get('delivered')} delivered, the histories {got}",
                    grp,
                    None,
                    abs((d.get("delivered") or 0) - got),
                )
            )
        parts = [d.get(k) or 0 for k in ("delivered", "lost", "stranded", "parked")]
        if (d.get("acknowledged") or 0) != sum(parts):
            out.append(
                (
                    "audit-partition",
                    f"{grp}: the audit's {d.get('acknowledged')} acknowledged are not "
                    "{} delivered + {} lost + {} stranded + {} parked".format(*parts),
                    grp,
                    None,
                    abs((d.get("acknowledged") or 0) - sum(parts)),
                )
            )
    return out


def _ms(ts: float) -> float:
    return ts * 1000 if ts < 1e11 else ts


def replication_rounds(run: Path) -> list[tuple[float, dict[str, int]]]:
    """(ts ms, {broker group: the largest distance between a slave's log end and its master's}) per sample
    round; -1 when a node of the group did not answer or its offset is unknown. The distance counts both
    ways: a slave AHEAD of its master (the master came back behind it) is not caught up either."""
    rounds: dict[float, dict] = {}
    p = run / "metrics" / "samples.jsonl"
    if not p.exists():
        return []
    for r in read_jsonl(p):
        rounds.setdefault(r["ts"], {})[r["node"]] = r
    out = []
    for ts in sorted(rounds):
        nodes = rounds[ts]
        groups: dict[str, int] = {}
        for r in nodes.values():
            if r.get("role") != "SLAVE":
                continue
            g = r.get("brokerName") or r.get("master") or "?"
            m = nodes.get(r.get("master") or "")
            if (
                not r.get("up")
                or not m
                or not m.get("up")
                or r.get("maxPhyOffset") is None
                or m.get("maxPhyOffset") is None
            ):
                groups[g] = -1
            elif groups.get(g, 0) >= 0:
                groups[g] = max(groups.get(g, 0), abs(m["maxPhyOffset"] - r["maxPhyOffset"]))
        out.append((_ms(ts), groups))
    return out


def lags_over_time(run: Path) -> list[tuple[float, int]]:
    """(ts ms, the largest slave distance of that sample round, either way; -1 when a node did not answer)."""
    out = []
    for ts, groups in replication_rounds(run):
        out.append((ts, -1 if any(v < 0 for v in groups.values()) else max(groups.values(), default=0)))
    return out


def node_groups(run: Path, summary: dict) -> dict[str, str]:
    """node -> its broker group, from the samples (brokerName), else from the faults that targeted it."""
    out = {f["target"]: f["group"] for f in summary.get("faults", []) if f.get("group") and f.get("target")}
    p = run / "metrics" / "samples.jsonl"
    if p.exists():
        for r in read_jsonl(p):
            if r.get("brokerName"):
                out[r["node"]] = r["brokerName"]
    return out


def unequal_at_end(run: Path, summary: dict) -> dict[str, tuple[bool, str]]:
    """group -> (forked, why) for each group a slave of which did not end byte-equal with its master: the
    audit's replica verdict (replica.consistent) is not PASS, its pair diverges or lags, or the run's ending
    (rmqha/chaos/run.py wait_catch_up) says it did not catch up. forked: the logs differ (not only a lag)."""
    groups = node_groups(run, summary)
    out: dict[str, tuple[bool, str]] = {}

    def mark(node: str, forked: bool, why: str) -> None:
        g = groups.get(node)
        if g is not None and not (g in out and out[g][0]):
            out[g] = (forked, why)

    for v in summary.get("verdicts", []):
        if v.get("id") == "replica.consistent" and v.get("status") != "PASS" and v.get("subject"):
            detail = v.get("detail") or ""
            mark(v["subject"], v.get("status") == "FAIL" or "fork" in detail, f"{v['status']} {v.get('name')}")
    for pr in summary.get("pairs", []):
        if pr.get("firstDivergentOffset") is not None:
            mark(pr["slave"], True, f"{pr['slave']} diverges from {pr['master']} at {pr['firstDivergentOffset']}")
        elif pr.get("lagBytes"):
            mark(pr["slave"], False, f"{pr['slave']} ends {pr['lagBytes']} bytes behind {pr['master']}")
    for e in sorted((run / "chaos").glob("ending-*.json")) if (run / "chaos").is_dir() else []:
        try:
            catch_up = json.loads(e.read_text()).get("catchUp") or {}
        except ValueError:
            continue
        for slave, state in catch_up.items():
            if state != "caught up":
                mark(slave, str(state).startswith("forked"), f"{slave}: {state}")
    return out


# Faults that take a node away: the samples must have seen it not answering while the fault was active,
# or the fault had no effect anyone could see ("not exercised": a nemesis that silently did nothing)
NODE_DOWN_FAULTS = NODE_DOWN


def down_seen(run: Path) -> dict[str, list[float]]:
    """node -> the sample times (ms) at which it did not answer."""
    out: dict[str, list[float]] = {}
    p = run / "metrics" / "samples.jsonl"
    if p.exists():
        for r in read_jsonl(p):
            if r.get("up") is False:
                out.setdefault(r["node"], []).append(r["ts"] * 1000 if r["ts"] < 1e11 else r["ts"])
    return out


def offsets_seen(run: Path) -> dict[str, list[tuple[float, int, str | None]]]:
    """node -> [(sample time ms, maxPhyOffset, its master)] of the samples where it answered."""
    out: dict[str, list] = {}
    p = run / "metrics" / "samples.jsonl"
    if p.exists():
        for r in read_jsonl(p):
            if r.get("up") and r.get("maxPhyOffset") is not None:
                ts = r["ts"] * 1000 if r["ts"] < 1e11 else r["ts"]
                out.setdefault(r["node"], []).append((ts, int(r["maxPhyOffset"]), r.get("master")))
    return out


def _grew(series, start: float, end: float) -> bool | None:
    """Whether a node's log grew between start and end (None: not enough samples to tell)."""
    inside = [off for ts, off, _m in series if start <= ts <= end]
    return None if len(inside) < 2 else inside[-1] > inside[0]


def _behind(offsets: dict, slave: str, start: float, end: float) -> bool:
    """Whether the slave's log was behind its master's in two consecutive sample rounds within [start, end]."""
    series = offsets.get(slave, [])
    master = next((m for _t, _o, m in series if m), None)
    mine = {round(t): o for t, o, _m in series if start <= t <= end}
    theirs = {round(t): o for t, o, _m in offsets.get(master, []) if start <= t <= end} if master else {}
    behind = [t for t in sorted(mine) if t in theirs and theirs[t] > mine[t]]
    rounds = sorted(t for t in mine if t in theirs)
    return any(a in behind and b in behind for a, b in zip(rounds, rounds[1:]))


def no_effect(
    f: dict, down: dict[str, list[float]], sampled: bool, non_ok: int = 0, offsets: dict | None = None
) -> str | None:
    """Why a fault showed no effect, or None. Node faults: a sample must have seen the node stop answering.
    disk-full: a full master must have refused a send; a full slave must have stopped storing while its
    master's log grew. Only checked with samples."""
    if not sampled:
        return None
    end = f["end_ms"] if f["end_ms"] is not None else float("inf")
    seen = evidence(f["kind"])
    if seen == "disk":
        if f.get("role") == "master":
            return (
                None
                if non_ok
                else (f"no send was refused while {f['target']}'s disk was full: the fault had no visible effect")
            )
        series = (offsets or {}).get(f["target"], [])
        master = next((m for _t, _o, m in series if m), None)
        slave_grew = _grew(series, f["start_ms"] + 1000, end)
        master_grew = _grew((offsets or {}).get(master, []), f["start_ms"] + 1000, end) if master else None
        if slave_grew and master_grew:
            return f"{f['target']} went on storing while its disk was full: the fault had no visible effect"
        return None
    if seen == "behind":
        # the slave's HA link cut or slowed past the sync wait: a sync send timed out or was refused, or the
        # slave fell behind its master in two sample rounds in a row
        if non_ok or _behind(offsets or {}, f["target"], f["start_ms"], end):
            return None
        return (
            f"{f['target']} never fell behind its master and no send failed while its link was {f['kind']}: "
            "the fault had no visible effect"
        )
    if seen == "refused":
        return None if non_ok else f"every send succeeded while the clients' link to {f['target']} was cut"
    if seen != "down":
        return None  # slicer, client-latency: their effect (split frames, slow replies) is not in the samples
    if any(f["start_ms"] <= t <= end + 1000 for t in down.get(f["target"], [])):
        return None
    return f"no sample saw {f['target']} down while the fault was active: the fault had no visible effect"


def _master_power(f: dict) -> bool:
    return master_power_cut(f["kind"], f.get("role"))


# what a sample can be blamed for: moved whole to the fault that caused it when its own fault was not exercised
LOSS_FIELDS = ("lost", "undelivered", "stranded", "lost_after_delivery", "divergent")


def _same_group(a: dict, b: dict) -> bool:
    return a.get("group") is None or b.get("group") is None or a["group"] == b["group"]


STUCK_WINDOW_MS = 2000  # the sample rounds (500 ms apart) just before a fault that show a group replicating


def stuck_groups(run: Path, at_ms: float) -> dict[str, str]:
    """group -> why it could not replicate just before at_ms, from the samples alone: in every round of the
    STUCK_WINDOW_MS before it (3 at least, every node answering) a slave was ahead of its master (the master
    came back behind it), or the slave stored nothing while its master's log grew (a fork the master has
    written past). What the nemesis checks live (SLAVE_AHEAD, nemesis.py), for runs it did not record."""
    p = run / "metrics" / "samples.jsonl"
    if not p.exists():
        return {}
    series: dict[tuple[str, str], list[tuple[float, int, int]]] = {}
    rounds: dict[float, dict] = {}
    for r in read_jsonl(p):
        if at_ms - STUCK_WINDOW_MS <= _ms(r["ts"]) < at_ms:
            rounds.setdefault(r["ts"], {})[r["node"]] = r
    for ts in sorted(rounds):
        for r in rounds[ts].values():
            m = rounds[ts].get(r.get("master") or "")
            if (
                r.get("role") == "SLAVE"
                and m
                and r.get("maxPhyOffset") is not None
                and m.get("maxPhyOffset") is not None
            ):
                key = (r.get("brokerName") or m["node"], r["node"])
                series.setdefault(key, []).append((ts, m["maxPhyOffset"], r["maxPhyOffset"]))
    out = {}
    for (g, slave), xs in series.items():
        if len(xs) < 3 or len(xs) < len(rounds):
            continue
        if all(sl > ms for _t, ms, sl in xs):
            out[g] = f"group {g} cannot replicate: {slave} was ahead of its master before the fault (a fork)"
        elif len({sl for _t, _m, sl in xs}) == 1 and all(b[1] > a[1] for a, b in zip(xs, xs[1:])):
            out[g] = (
                f"group {g} cannot replicate: {slave} stored nothing while its master's log grew before "
                "the fault (a fork)"
            )
    return out


def _recovery(
    f: dict, rounds: list[tuple[float, dict[str, int]]], unequal: dict[str, tuple[bool, str]], faults: list[dict]
) -> tuple[float | None, bool]:
    """(seconds from heal to every slave of the fault's group at its master's offset, never: it did not
    happen). A slave ahead of its master or not answering is not caught up; nor is any round after the first
    master power loss of a group that did not end byte-equal (a fork: equal offsets, different bytes), nor
    after the group's last fault when it ended unequal for another reason. (None, False): no samples."""
    end = f["end_ms"]
    if not rounds:
        return None, False
    if end is None:
        return None, True
    slave_groups = {g for _ts, gs in rounds for g in gs}
    groups = [f["group"]] if f.get("group") else sorted(slave_groups)
    cutoff = {}
    for g in groups:
        if g not in unequal:
            continue
        mine = [x for x in faults if _same_group(x, {"group": g})]
        rewrites = [x["start_ms"] for x in mine if _master_power(x)] if unequal[g][0] else []
        cutoff[g] = min(rewrites) if rewrites else max((x["start_ms"] for x in mine), default=0)
    for ts, gs in rounds:
        if ts < end:
            continue
        if all(gs.get(g, -1 if g in slave_groups else 0) == 0 and ts < cutoff.get(g, float("inf")) for g in groups):
            return round((ts - end) / 1000, 1), False
    return None, True


# ---- DLedger cells: failover and recovery from the status samples' "dledger" block (rmqha/cluster/sample.py)

# a leader fault's election may end after its heal (the hold is barely above the election time on a busy
# machine): another leader this soon after the heal, and before the next fault, is still its failover
FAILOVER_GRACE_MS = 10000


def dledger_rounds(run: Path) -> list[tuple[float, dict[str, dict[str, dict | None]]]]:
    """(ts ms, {group: {member: its DLedger state, None when it did not answer}}) per sample round, for the
    DLedger nodes (rows with a "dledger" block, and the down rows of those nodes). Each state gets
    "leader": the node its leaderId names (selfIds from every round: the leader may not answer)."""
    p = run / "metrics" / "samples.jsonl"
    if not p.exists():
        return []
    rounds: dict[float, dict] = {}
    members: dict[str, str] = {}
    node_of: dict[str, str] = {}
    rows = list(read_jsonl(p))
    for r in rows:
        if r.get("dledger"):
            members[r["node"]] = r.get("brokerName") or "?"
            if r["dledger"].get("selfId"):
                node_of[r["dledger"]["selfId"]] = r["node"]
    for r in rows:
        if r["node"] in members:
            g = rounds.setdefault(_ms(r["ts"]), {}).setdefault(members[r["node"]], {})
            d = r.get("dledger") if r.get("up") else None
            g[r["node"]] = dict(d, leader=node_of.get(d.get("leaderId") or "")) if d else None
    return sorted(rounds.items())


def _leader(members: dict[str, dict | None]) -> str | None:
    """The group's leader as the answering members tell it: the node that a member in the highest term
    says leads (itself, as LEADER, or its leader, as FOLLOWER); a term has one leader. A deposed leader, or
    a follower still naming a dead one, is in a lower term than the new leader's followers."""
    claims = [
        (d.get("term") or 0, n if d.get("role") == "LEADER" else d.get("leader"))
        for n, d in members.items()
        if d and (d.get("role") == "LEADER" or (d.get("role") == "FOLLOWER" and d.get("leader")))
    ]
    return max(claims)[1] if claims else None


def took_effect(run: Path) -> dict[int, int]:
    """fault id -> when its inject ended (ts_ms in the fault log): the leader was killed, frozen or cut off
    then. A DLedger inject first asks who leads, which can take seconds when the leader is slow to answer;
    the fault's start_ms (the audit's) is when the inject began."""
    out = {}
    for p in sorted((run / "faults").glob("*.jsonl")) if (run / "faults").is_dir() else []:
        for r in read_jsonl(p):
            if r.get("op") == "inject" and r.get("result", "ok") == "ok" and r.get("ts_ms"):
                out[r["id"]] = r["ts_ms"]
    return out


def failover_s(f: dict, rounds, next_start: float | None = None, effect_ms: float | None = None) -> float | None:
    """A leader fault: seconds from when it took effect (effect_ms, else its start) to the first sample
    round in which a node other than the leader it hit leads (_leader), up to FAILOVER_GRACE_MS past its
    heal and before the next fault; None when no other node led (no election)."""
    old = (f.get("info") or {}).get("leader") or f["target"]
    at = max(f["start_ms"], effect_ms or 0)
    end = (f["end_ms"] if f["end_ms"] is not None else float("inf")) + FAILOVER_GRACE_MS
    end = min(end, next_start if next_start is not None else float("inf"))
    for ts, groups in rounds:
        if at <= ts <= end:
            leader = _leader(groups.get(f.get("group") or "", {}))
            if leader is not None and leader != old:
                return round((ts - at) / 1000, 1)
    return None


def dledger_recovery(f: dict, rounds) -> tuple[float | None, bool]:
    """(seconds from the heal to the first sample round in which every member of the group answers and
    its committed index equals the leader's, never: no such round). A member ahead of the leader or
    behind it is not caught up. (None, False): no DLedger samples."""
    if not rounds:
        return None, False
    if f["end_ms"] is None:
        return None, True
    for ts, groups in rounds:
        members = groups.get(f.get("group") or "", {})
        if ts < f["end_ms"] or not members or any(d is None for d in members.values()):
            continue
        leader = _leader(members)
        if leader is None:
            continue
        top = (members.get(leader) or {}).get("committedIndex")
        if top is not None and all(d.get("committedIndex") == top for d in members.values()):
            return round((ts - f["end_ms"]) / 1000, 1), False
    return None, True


def dledger_no_effect(f: dict, rounds, failover: float | None) -> str | None:
    """Why a DLedger fault showed no effect beyond what no_effect() checks (the target seen down), or None:
    a leader fault must have made another node leader; a partitioned follower must have stopped
    appending while the leader's log grew. Only checked with DLedger samples."""
    if not rounds:
        return None
    end = f["end_ms"] if f["end_ms"] is not None else float("inf")
    if f["kind"] in LEADER_FAULTS and failover is None:
        return (
            f"no other node led while {f['target']}'s {f['kind']} was active: the leader fault caused no election "
            "(the leader kept or regained leadership in its own term)"
        )
    if evidence(f["kind"]) == "appending":
        ends: dict[str, list[tuple[float, int, None]]] = {}
        leaders = []
        for ts, groups in rounds:
            members = groups.get(f.get("group") or "", {})
            for n, d in members.items():
                if d and d.get("endIndex") is not None:
                    ends.setdefault(n, []).append((ts, d["endIndex"], None))
            if f["start_ms"] <= ts <= end:
                leaders.append(_leader(members))
        leader = next((x for x in leaders if x and x != f["target"]), None)
        start = f["start_ms"] + 1000
        if leader and _grew(ends.get(f["target"], []), start, end) and _grew(ends.get(leader, []), start, end):
            return f"{f['target']} went on appending while its DLedger links were cut: the fault had no visible effect"
    return None


def _cause(out: list[dict], faults: list[dict], i: int) -> int | None:
    """The earlier exercised fault of the same group that most likely caused what fault i is blamed for:
    the latest master power loss, else the latest fault that can destroy or strand a message, else the
    latest fault of the group."""
    earlier = [j for j in range(i) if _same_group(faults[i], faults[j]) and not out[j]["not_exercised"]]
    for pick in (_master_power, lambda f: f["kind"] in DESTRUCTIVE, lambda f: True):
        js = [j for j in earlier if pick(faults[j])]
        if js:
            return js[-1]
    return None


def reattribute(out: list[dict], faults: list[dict]) -> None:
    """A fault that was not exercised (its group could not replicate, or it had no visible effect) cannot
    have caused what the audit blames on it: each count moves to the earlier fault that did (_cause), kept
    at the larger of the two (the audit counts a message against every suspect, so the two sets overlap).
    With no such fault the counts stay on the sample as `unattributed`: judge() fails the cell for them."""
    for i, s in enumerate(out):
        moved = {k: s[k] for k in LOSS_FIELDS if s.get(k)}
        if not s["not_exercised"] or not moved:
            continue
        for k in moved:
            s[k] = 0
        j = _cause(out, faults, i)
        if j is None:
            s["unattributed"] = moved
            continue
        for k, n in moved.items():
            out[j][k] = max(out[j].get(k, 0), n)
        out[j].setdefault("inherited_from", []).append(s["label"])
        s["blamed_on"] = {"fault": out[j]["label"], **moved}


class _RunEvidence:
    """What cell_samples() reads once per run: the sends, the histories' facts, the metric and status
    samples."""

    def __init__(self, run: Path, summary: dict, topology: str) -> None:
        self.run = run
        self.dledger = is_dledger(topology)
        self.all_sends = sends(run)
        self.facts = run_facts(run)
        self.rounds = replication_rounds(run)
        self.unequal = unequal_at_end(run, summary)
        self.down = down_seen(run)
        self.offsets = offsets_seen(run)
        self.dl_rounds = dledger_rounds(run) if self.dledger else []
        self.effect = took_effect(run) if self.dledger else {}
        self.sampled = bool(self.rounds) or bool(self.dl_rounds)


def _divergent(f: dict, faults: list[dict], summary: dict, label: str) -> int:
    """The divergent pairs the audit blames on the fault. A divergence has no time: it is this fault's if the
    fault can rewrite its group's log and no master power loss of the same group (the likelier cause) is
    also blamed."""
    blamed = summary["divergentByFault"].get(label, [])
    power = any(_master_power(g) and g["group"] in (None, f["group"]) for g in faults)
    return len(blamed) if blamed and (_master_power(f) or not power) else 0


def _recovery_and_failover(ev: _RunEvidence, f: dict, faults: list[dict]) -> tuple:
    """(recovery_s, never recovered, failover_s): failover only for a DLedger leader fault."""
    if not ev.dledger:
        recovery, never = _recovery(f, ev.rounds, ev.unequal, faults)
        return recovery, never, None
    recovery, never = dledger_recovery(f, ev.dl_rounds)
    later = [x["start_ms"] for x in faults if x["start_ms"] > f["start_ms"] and _same_group(x, f)]
    failover = (
        failover_s(f, ev.dl_rounds, min(later, default=None), ev.effect.get(f["id"]))
        if f["kind"] in LEADER_FAULTS
        else None
    )
    return recovery, never, failover


def _nemesis_info(ev: _RunEvidence, f: dict) -> dict:
    """The nemesis's notes on the fault, with the groups the samples show stuck when it did not judge (a
    run recorded before it did, or a cluster-wide fault)."""
    info = dict(f.get("info") or {})
    if not info.get("notExercised") and ev.rounds and not ev.dledger:
        stuck = stuck_groups(ev.run, f["start_ms"])
        mine = [g for g in stuck if f.get("group") in (None, g)]
        if f.get("group") is None and mine:
            info["notExercisedGroups"] = {**{g: stuck[g] for g in mine}, **(info.get("notExercisedGroups") or {})}
            every = {x for _ts, gs in ev.rounds for x in gs}
            if every and every <= set(info["notExercisedGroups"]):
                info["notExercised"] = "; ".join(info["notExercisedGroups"][g] for g in sorted(every))
        elif mine:
            info["notExercised"] = stuck[mine[0]]
    return info


def _not_exercised(ev: _RunEvidence, f: dict, info: dict, summary: dict, label: str, failover) -> str | None:
    """Why the fault tested nothing (None: it was exercised): the nemesis's word, no visible effect, or a
    DLedger fault the members did not notice."""
    return (
        info.get("notExercised")
        or no_effect(
            f, ev.down, ev.sampled, sum((summary.get("nonOkByFault") or {}).get(label, {}).values()), ev.offsets
        )
        or (dledger_no_effect(f, ev.dl_rounds, failover) if ev.dledger else None)
    )


def _fault_sample(ev: _RunEvidence, f: dict, faults: list[dict], summary: dict) -> dict:
    """One fault's cell sample: its sends, losses, recovery, failover and delivery figures."""
    start, end = f["start_ms"], f["end_ms"]
    label = f"#{f['id']} {f['kind']} {f['link'] or f['target']}"
    during = [s for s in ev.all_sends if start <= s[0] <= (end or s[0])]
    recovery, never, failover = _recovery_and_failover(ev, f, faults)
    by_fault = (summary.get("deliveryByFault") or {}).get(label, {})
    info = _nemesis_info(ev, f)
    return {
        "label": label,
        "kind": f["kind"],
        "role": f["role"],
        "target": f["target"],
        "sends": len(during),
        "ok": sum(1 for s in during if s[2] == "SEND_OK"),
        "lost": summary["lostByFault"].get(label, 0),
        "divergent": _divergent(f, faults, summary, label),
        "recovery_s": recovery,
        "recovery_never": never,
        # delivery (rmqha/pipeline/delivery.py): acknowledged messages this fault is a suspect of that no
        # consumer group got, those only a slave holds, and those received then gone
        "undelivered": by_fault.get("delivery.lost", 0),
        "stranded": by_fault.get("delivery.stranded", 0),
        "lost_after_delivery": by_fault.get("delivery.lost-after-delivery", 0),
        # acknowledged sends stored by the faulted group itself while the fault was active
        # (None for summaries older than the delivery checker: then `ok`, the whole cluster's)
        "acked_on_group": (summary.get("ackedOnGroupByFault") or {}).get(label),
        "not_exercised": _not_exercised(ev, f, info, summary, label, failover),
        # a DLedger leader fault: start -> another node leads (None: none did, or not a leader fault)
        "failover_s": failover,
        "group": f.get("group"),
        # a fault on every group: the groups it could not exercise (nemesis.py)
        "groups_not_exercised": sorted(info.get("notExercisedGroups") or {}),
        "error": f.get("inject_error") or f.get("heal_error"),
        # delivered / indeterminate / per-group availability / excluded records (fault_figures)
        **fault_figures(ev.facts, f, summary, label),
    }


def _note_shared_acks(out: list[dict], facts: RunFacts | None) -> None:
    """The at-risk look-back (AT_RISK_MS, as the audit's) is longer than the sweep's gap between two faults:
    an acknowledged send at stake in two faults counts in both cells, and each says with which fault."""
    ids = [s.pop("_acked_ids", set()) for s in out]
    for i, s in enumerate(out):
        shared = {out[j]["label"]: len(ids[i] & ids[j]) for j in range(len(out)) if j != i and ids[i] & ids[j]}
        if facts is not None and not s.get("not_audited"):
            s["shared_acks"] = shared


def cell_samples(run: Path, summary: dict, topology: str, flush: str) -> list[dict]:
    ev = _RunEvidence(run, summary, topology)
    faults = summary["faults"]
    out = [_fault_sample(ev, f, faults, summary) for f in faults]
    _note_shared_acks(out, ev.facts)
    reattribute(out, faults)
    return out


def excluded_text(samples: list[dict], explained: bool | None = None) -> str:
    """The records the audit excluded over a cell's samples, counted and named ("" when none); explained:
    only those EXPLAINED says cannot hide a loss (True) or only the others (False)."""
    total: dict[str, int] = {}
    where: dict[str, str] = {}
    why = {k for s in samples for k in s.get("explained") or ()}
    for s in samples:
        for k, n in (s.get("excluded") or {}).items():
            if n and (explained is None or (k in (s.get("explained") or ())) == explained):
                total[k] = total.get(k, 0) + n
                if (s.get("excluded_where") or {}).get(k):
                    where.setdefault(k, s["excluded_where"][k])
    return "; ".join(
        f"{n} {k}" + (f" (first: {where[k]})" if k in where else "") + (" (explained)" if k in why else "")
        for k, n in sorted(total.items())
    )


def group_availability_text(groups: dict[str, dict]) -> str:
    """ "broker-a 62 % (31/50), unwritable 3.1 s [SLAVE_NOT_AVAILABLE 19]; ?: 40 errors" for a cell."""
    parts = []
    for g in sorted(k for k in groups if k != "?"):
        c = groups[g]
        share = (
            f"{c['accepted'] / c['answered'] * 100:.0f} % ({c['accepted']}/{c['answered']})"
            if c["answered"]
            else "no answer"
        )
        why = ", ".join(f"{k} {v}" for k, v in sorted(c["not_accepted"].items()))
        parts.append(f"{g} {share}, unwritable {c['unwritable_s']} s" + (f" [{why}]" if why else ""))
    if "?" in groups:
        u = groups["?"]
        parts.append(
            f"group unknown: {u['errors']} failed tries (timeouts, errors, refusals)"
            + (f", {u['unknown']} answers stored nowhere" if u["unknown"] else "")
        )
    return "; ".join(parts) or "-"


def merge_groups(samples: list[dict]) -> dict[str, dict]:
    """A cell's per-group availability over its runs: answers summed, the longest unwritable time."""
    out: dict[str, dict] = {}
    for s in samples:
        for g, c in (s.get("group_availability") or {}).items():
            if g == "?":
                u = out.setdefault("?", {"errors": 0, "unknown": 0})
                u["errors"] += c["errors"]
                u["unknown"] += c["unknown"]
                continue
            m = out.setdefault(g, {"answered": 0, "accepted": 0, "not_accepted": {}, "unwritable_s": 0.0})
            m["answered"] += c["answered"]
            m["accepted"] += c["accepted"]
            m["unwritable_s"] = max(m["unwritable_s"], c["unwritable_s"])
            for k, v in c["not_accepted"].items():
                m["not_accepted"][k] = m["not_accepted"].get(k, 0) + v
    for g, m in out.items():
        if g != "?":
            m["share"] = round(m["accepted"] / m["answered"], 3) if m["answered"] else None
    return out


def _sum_or_none(samples: list[dict], key: str) -> int | None:
    """The sum of a figure over a cell's runs, or None when any run lacks it (the cell is not audited)."""
    xs = [s.get(key) for s in samples]
    return None if not xs or any(x is None for x in xs) else sum(xs)


def unavailable_s(samples: list[dict]) -> float | None:
    """The longest time the faulted group (every group, for a cluster-wide fault) accepted no send while
    sends were tried, over a cell's runs (group_availability's longest gap); None: no figures."""
    gaps = [
        c["longest_gap_s"]
        for s in samples
        for g, c in (s.get("group_availability") or {}).items()
        if g != "?" and "longest_gap_s" in c and s.get("group") in (None, g)
    ]
    return max(gaps) if gaps else None


def exercised(samples: list[dict]) -> list[dict]:
    """The samples that count as coverage: the fault had its effect, on a group that could replicate, and
    the group acknowledged a send while it was active."""
    return [
        s
        for s in samples
        if not s.get("not_exercised") and (s["acked_on_group"] if s.get("acked_on_group") is not None else s["ok"]) > 0
    ]


def _losses(mine: list[dict]) -> tuple[int, int, int, int]:
    """(on no node, undelivered (never or received then gone), stranded on a slave, divergent pairs) over
    the exercised samples."""
    lost = sum(s["lost"] for s in mine)
    undelivered = sum(s.get("undelivered", 0) + s.get("lost_after_delivery", 0) for s in mine)
    stranded = sum(s.get("stranded", 0) for s in mine)
    div = sum(s["divergent"] for s in mine)
    return lost, undelivered, stranded, div


def _loss_text(lost: int, undelivered: int, stranded: int, div: int) -> str:
    return (
        f"{lost} acknowledged on no node, {undelivered} undelivered, {stranded} stranded on a slave, "
        f"{div} divergent pair(s)"
    )


def _orphan_losses(samples: list[dict]) -> int:
    """The losses and divergences blamed on a fault that was not exercised that no earlier fault of its
    group explains."""
    orphan = [
        (s.get("unattributed") or {k: s.get(k, 0) for k in LOSS_FIELDS if s.get(k)})
        for s in samples
        if s.get("not_exercised")
    ]
    return sum(sum(o.values()) for o in orphan)


def _fail(p: dict, samples: list[dict], mine: list[dict]) -> tuple[str, str] | None:
    """A FAIL verdict, the first reason that applies; None when the cell does not fail."""
    errors = [s["error"] for s in samples if s["error"]]
    if errors:
        return "FAIL", f"fault could not be injected/healed: {errors[0]}"
    unexplained = excluded_text(samples, explained=False)
    if unexplained:
        return "FAIL", f"records excluded from the audit, unexplained: {unexplained}"
    orphan_n = _orphan_losses(samples)
    if orphan_n:
        return "FAIL", (
            f"{orphan_n} loss(es)/divergence(s) blamed on a fault that was not exercised, and no earlier "
            "exercised fault of its group explains them"
        )
    lost, undelivered, stranded, div = _losses(mine)
    users_lost = max(lost, undelivered) + stranded
    if (users_lost and not p["loss_allowed"]) or (div and not p["divergence_allowed"]):
        return "FAIL", f"{_loss_text(lost, undelivered, stranded, div)}: the promise excludes it"
    return None


def _beside_verdict(mine: list[dict]) -> list[str]:
    """What the cell's own figures show beside its verdict: acknowledged sends not delivered that the audit
    blames on another fault (each owed group's delivered count agrees with the audit's: run_checks), the
    parked ones, and the sends the at-risk look-back also counts on another fault."""
    gap = sum(
        max(
            0,
            (s.get("not_delivered") or 0)
            - (s.get("parked") or 0)
            - max(s["lost"], s.get("undelivered", 0) + s.get("lost_after_delivery", 0))
            - s.get("stranded", 0),
        )
        for s in mine
    )
    parked = sum(s.get("parked") or 0 for s in mine)
    shared: dict[str, int] = {}
    for s in mine:
        for k, n in (s.get("shared_acks") or {}).items():
            shared[k] = shared.get(k, 0) + n
    return (
        (
            [f"{gap} acknowledged during the fault not delivered: the audit blames them on another fault of the run"]
            if gap
            else []
        )
        + ([f"{parked} parked (delayed or half messages not due: owed to no group yet)"] if parked else [])
        + (
            [
                f"{sum(shared.values())} acknowledged send(s) also counted on {', '.join(sorted(shared))} (the "
                f"{AT_RISK_MS // 1000} s at-risk look-back is longer than the gap between the faults)"
            ]
            if shared
            else []
        )
    )


def _coverage(samples: list[dict], extra: list[str]) -> tuple[str, str]:
    """A cell with nothing the promise excludes or allows: not exercised, or PASS with how many of its runs
    exercised it."""
    done = exercised(samples)
    idle = next((s["not_exercised"] for s in samples if s.get("not_exercised")), None)
    if not done:
        return "not exercised", idle or "no send acknowledged by the faulted group while the fault was active"
    partial = sorted({g for s in done for g in s.get("groups_not_exercised") or []})
    also = f"; not exercised on {', '.join(partial)} (that group could not replicate)" if partial else ""
    tail = "".join(f"; {x}" for x in extra)
    if len(done) < len(samples):
        return "PASS", (
            f"only {len(done)} of {len(samples)} runs exercised"
            + (f" ({idle})" if idle else " (the others: no send acknowledged by the faulted group)")
            + also
            + tail
        )
    return "PASS", (also + tail)[2:]


def judge(p: dict, samples: list[dict]) -> tuple[str, str]:
    """A cell's verdict. Losses are judged as users meet them: an acknowledged message no consumer can get
    (lost, stranded on a slave, or received and then gone) is lost, whatever disk holds it. Only samples
    whose fault was exercised carry losses (a not-exercised fault's go to the earlier fault that caused
    them: reattribute()); losses a not-exercised fault is blamed for that no fault explains fail the cell."""
    mine = [s for s in samples if not s.get("not_exercised")]
    failed = _fail(p, samples, mine)
    if failed:
        return failed
    missing = [
        s.get("not_audited") or "no delivered/indeterminate figures"
        for s in samples
        if s.get("not_audited") or s.get("delivered") is None or s.get("indeterminate") is None
    ]
    if missing:
        return "not audited", f"{len(missing)} of {len(samples)} runs: {missing[0]}"
    extra = _beside_verdict(mine)
    lost, undelivered, stranded, div = _losses(mine)
    if max(lost, undelivered) + stranded or div:
        return "WEAK", "; ".join([f"allowed: {_loss_text(lost, undelivered, stranded, div)}"] + extra)
    return _coverage(samples, extra)


# this broker; the same broker with haCompat49=true (4.9's HA behaviour); or with haRecoveryEnable=true (a
# master back behind its slave fetches the slave's tail before it takes writes: rmqha/broker/ha/recovery.py)
MODES = ("ours", "4.9", "recovery", "apache")
MODE_SETS = {"ours": [], "4.9": ["haCompat49=true"], "recovery": ["haRecoveryEnable=true"], "apache": []}
MODE_SUFFIX = {"ours": "", "4.9": "-49", "recovery": "-rc", "apache": "-ap"}
# mode "apache": the real Apache RocketMQ 4.9.x (ROCKETMQ_HOME, local backend) beside the "4.9" emulation;
# it is the one mode besides "ours" that runs the DLedger configuration too (a DLedger group of 4.9 brokers)
MODE_ARGS = {"apache": ["--broker", "apache"]}
DLEDGER_MODES = ("ours", "apache")


def run_name(topology: str, flush: str, backend: str, seed: int, mode: str = "ours", faults=()) -> str:
    if is_dledger(topology):
        return f"mx-dl-{backend[0]}{seed}" + (MODE_SUFFIX[mode] if mode != "ours" else "")
    return (
        f"mx-{'s' if topology == '2m-2s-sync' else 'a'}{'s' if flush == 'SYNC_FLUSH' else 'a'}-{backend[0]}{seed}"
        + ("-df" if list(faults) == DISK_FAULTS else "")
        + ("-lh" if list(faults) == LONG_FAULTS else "")
        + MODE_SUFFIX[mode]
    )


def free_base(topology: str, backend: str, lane: int, lanes: int = 2) -> int | None:
    """A free port block for one lane (lanes run at once: each takes its own interleaved candidates)."""
    from rmqha.cluster.ports import free_cluster_base
    from rmqha.cluster.topology import load_topology

    # below the usual ephemeral range (32768.. on Linux): outgoing connections take ports from it, and the
    # port planner refuses a base there
    return free_cluster_base(
        load_topology(topology),
        low=21000,
        high=32000,
        slot=lane,
        slots=max(2, lanes),
        extra_offsets=(48,) if backend == "docker" else (),
    )


def sweep(
    topology,
    flush,
    backend,
    faults,
    seed,
    args,
    out: Path,
    lane: int,
    mode: str = "ours",
    *,
    name: str | None = None,
    sets: dict[str, str] | None = None,
    extra: tuple[str, ...] = (),
) -> dict:
    """One rmqha.chaos.run --sweep --no-audit (the audit is the Auditor's); what it left, and how long it took.
    name, sets and extra: a planted control's own run name, broker settings and rmqha.chaos.run options."""
    name = name or run_name(topology, flush, backend, seed, mode, faults)
    base = free_base(topology, backend, lane, getattr(args, "lane_count", 2))
    cmd = [
        sys.executable,
        "-m",
        "rmqha.chaos.run",
        "--topology",
        topology,
        "--backend",
        backend,
        "--name",
        name,
        "--sweep",
        "--nemesis",
        ",".join(faults),
        "--duration",
        str(max(args.duration, DLEDGER_MIN_DURATION_S) if is_dledger(topology) else args.duration),
        "--rate",
        str(args.rate),
        "--seed",
        str(seed),
        "--catchup-timeout",
        "30",
        "--no-audit",
    ]
    if not is_dledger(topology):  # a DLedger group flushes as its topology's config says
        cmd += ["--set", f"flushDiskType={flush}"]
    if list(faults) == LONG_FAULTS:
        cmd += ["--sweep-hold", str(LONG_HOLD_S)]
    for kv in MODE_SETS[mode] + [f"{k}={v}" for k, v in (sets or {}).items()]:
        cmd += ["--set", kv]
    cmd += MODE_ARGS.get(mode, [])  # --rocketmq-home: the child reads ROCKETMQ_HOME
    if base is not None:
        cmd += ["--base-port", str(base)]
    cmd += list(extra)
    t0 = time.monotonic()
    log = out / f"{name}.log"
    with open(log, "w") as fh:
        rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT).returncode
    return {"name": name, "rc": rc, "took_s": round(time.monotonic() - t0), "log": str(log)}


# --planted: more runs with broker bugs no storage verdict sees (rmqha/broker/planted.py); the matrix fails
# unless each run's audit gives every verdict it expects. A matrix whose checkers went blind (a masked FAIL)
# then cannot pass. One run per set of bugs whose verdicts no other bug of the run can give: offset-regression
# redelivers (duplicates), phantom-pull moves committed offsets back one step, reorder-pull and phantom-pull
# both act at offsets n % 10 == 9; so the four serving bugs take three runs, each with the orderly lane
# (delivery.reordered judges only an orderly group). An expected subject ending in "*" is a prefix (the
# consumer groups' names carry the run id); the status is FAIL except for duplicate-pull, whose verdict only
# WARNs (at-least-once allows duplicates): a WARN there shows the duplicates were counted.
ORDERLY_LANE = ("--orderly-rate", "40")
PLANTED_RUNS: list[dict] = [
    {
        "name": "mx-planted",
        "bugs": "skip-queue-entry (broker-b), ack-then-truncate (broker-a)",
        "sets": {"broker-b:plantBug": "skip-queue-entry", "broker-a:plantBug": "ack-then-truncate"},
        "extra": (),
        "expect": [("queues.consistent", "broker-b", "FAIL"), ("replica.consistent", "broker-a-s", "FAIL")],
    },
    {
        "name": "mx-planted-order",
        "bugs": "reorder-pull (broker-a), duplicate-pull (broker-b)",
        "sets": {"broker-a:plantBug": "reorder-pull", "broker-b:plantBug": "duplicate-pull"},
        "extra": ORDERLY_LANE,
        "expect": [("delivery.reordered", "ChaosOrderlyCG*", "FAIL"), ("delivery.duplicate", "ChaosCG*", "WARN")],
    },
    {
        "name": "mx-planted-phantom",
        "bugs": "phantom-pull (both masters)",
        "sets": {"broker-a:plantBug": "phantom-pull", "broker-b:plantBug": "phantom-pull"},
        "extra": ORDERLY_LANE,
        "expect": [("delivery.unexpected", "ChaosCG*", "FAIL")],
    },
    {
        "name": "mx-planted-offset",
        "bugs": "offset-regression (both masters)",
        "sets": {"broker-a:plantBug": "offset-regression", "broker-b:plantBug": "offset-regression"},
        "extra": ORDERLY_LANE,
        "expect": [
            ("delivery.offset-regression", "ChaosCG*", "FAIL"),
            ("delivery.offset-regression", "ChaosOrderlyCG*", "FAIL"),
        ],
    },
]
PLANTED_NAME = PLANTED_RUNS[0]["name"]
PLANTED_SETS = PLANTED_RUNS[0]["sets"]
PLANTED_EXPECT = [(i, subj) for i, subj, _st in PLANTED_RUNS[0]["expect"]]


def planted_missed(summary: dict, expect=None) -> list[str]:
    """The expected verdicts (id, subject[, status]) the planted run's audit did not give (default: the first
    run's, status FAIL); a subject ending in "*" matches every subject it starts."""
    given = [(v.get("id"), v.get("subject") or "", v.get("status")) for v in summary.get("verdicts", [])]
    missed = []
    for e in PLANTED_RUNS[0]["expect"] if expect is None else expect:
        i, subj, st = (*e, "FAIL") if len(e) == 2 else e
        if not any(
            gi == i and gst == st and (gs.startswith(subj[:-1]) if subj.endswith("*") else gs == subj)
            for gi, gs, gst in given
        ):
            missed.append(f"{i} {subj}" + ("" if st == "FAIL" else f" {st}"))
    return missed


def planted_run(args, out: Path, lane: int, spec: dict | None = None) -> dict:
    spec = spec or PLANTED_RUNS[0]
    return sweep(
        "2m-2s-sync",
        "ASYNC_FLUSH",
        "local",
        ["kill-slave"],
        1,
        args,
        out,
        lane,
        name=spec["name"],
        sets=spec["sets"],
        extra=tuple(spec["extra"]),
    )


AUDIT_COMMAND = [sys.executable, "-m", "rmqha.pipeline", "--serve"]
AUDITED = "audited "  # rmqha/pipeline/__main__.py's RESULT: the prefix of an answer line of `pipeline --serve`


class Auditor:
    """Audits the matrix's runs in one Spark session of its own, each as soon as its sweep has ended, while
    the next sweeps run: one JVM start for the whole matrix instead of one per run. The session lives in
    a child, `python -m rmqha.pipeline --serve` (chaos/ does not import pipeline/), started at the first run
    and started again if it dies."""

    def __init__(self, out: Path, say, command: list[str] | None = None):
        import queue

        self.out, self.say = out, say
        self.command = command or AUDIT_COMMAND
        self.q: "queue.Queue" = queue.Queue()
        self.done: dict[str, dict] = {}
        self.thread = threading.Thread(target=self._loop, name="auditor", daemon=True)
        self.thread.start()

    def submit(self, name: str) -> None:
        self.q.put(name)

    def close(self) -> None:
        self.q.put(None)
        self.thread.join()

    def _ask(self, proc, rd: Path) -> dict:
        """Hand one run folder to the child and wait for its answer line."""
        proc.stdin.write(f"{rd}\t{rd / 'report'}\n")
        proc.stdin.flush()
        for line in proc.stdout:
            if line.startswith(AUDITED):
                return json.loads(line[len(AUDITED) :])
        raise RuntimeError(f"the audit process ended (exit code {proc.wait()}) before answering")

    def _loop(self) -> None:
        proc = None
        while True:
            name = self.q.get()
            if name is None:
                break
            rd = rf.run_dir(name)
            t0 = time.monotonic()
            try:
                if proc is None or proc.poll() is not None:
                    proc = subprocess.Popen(
                        self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
                    )
                answer = self._ask(proc, rd)
                if "error" in answer:
                    raise RuntimeError(answer["error"])
                (self.out / f"{name}.audit.txt").write_text("\n".join(answer["verdicts"]) + "\n")
                self.done[name] = {"audit_s": round(time.monotonic() - t0), "audit_failed": answer["failed"]}
                self.say(
                    f"    audited {name} in {time.monotonic() - t0:.0f} s: {'FAIL' if answer['failed'] else 'pass'}"
                )
            except Exception as e:  # the run is reported as not audited, the matrix goes on
                self.done[name] = {"audit_s": round(time.monotonic() - t0), "audit_error": f"{type(e).__name__}: {e}"}
                self.say(f"    audit of {name} failed: {type(e).__name__}: {e}")
        if proc is not None:
            proc.stdin.close()
            proc.wait()


# Audit FAILs a cell can carry: an acknowledged message some fault is a suspect of. Any other FAIL (a
# phantom, a UNIQ_KEY stored twice, a damaged log, a queue entry missing, a loss no fault explains) is a
# defect of the run as a whole, and fails the matrix however its cells look.
CELL_VERDICTS = ("delivery.lost", "delivery.stranded", "delivery.lost-after-delivery")


def unexplained_failures(summary: dict) -> list[str]:
    """The audit's FAIL verdicts no cell accounts for."""
    out = []
    no_fault = (summary.get("deliveryByFault") or {}).get("no fault", {})
    for v in summary.get("verdicts", []):
        if v["status"] != "FAIL":
            continue
        vid = v.get("id") or ""
        if vid in CELL_VERDICTS and summary.get("faults") and not no_fault.get(vid):
            continue
        if (
            # rmqha/pipeline/ids.py HISTORY_ACKED_LOST; a summary written before ids has only its name
            (vid == "history.acked-lost" or (not vid and v["name"] == "no acknowledged send lost"))
            and summary.get("lostByFault")
            and "no fault" not in summary["lostByFault"]
        ):
            continue
        out.append(f"{v['name']} ({vid or 'no id'})")
    return out


def collect(name: str, topology: str, flush: str) -> tuple[list[dict], bool | None, list[str]]:
    """A run's cell samples from its audit summary (none when it was not audited), whether the audit
    failed, and its failures no cell accounts for."""
    summary_path = rf.run_dir(name) / "report" / "summary.json"
    if not summary_path.exists():
        return [], None, []
    summary = json.loads(summary_path.read_text())
    return (cell_samples(rf.run_dir(name), summary, topology, flush), summary["failed"], unexplained_failures(summary))


def build(results: list[dict]) -> list[dict]:
    cells: dict[tuple, dict] = {}
    for r in results:
        for s in r["samples"]:
            mode = r.get("mode", "ours")
            key = (mode, r["topology"], r["flush"], s["kind"], s["role"])
            c = cells.setdefault(
                key,
                {
                    "mode": mode,
                    "topology": r["topology"],
                    "flush": r["flush"],
                    "kind": s["kind"],
                    "role": s["role"],
                    "backend": r["backend"],
                    "samples": [],
                },
            )
            c["samples"].append(s)
    out = []
    for key, c in sorted(cells.items()):
        p = promise(*key[1:])
        ss = c["samples"]
        verdict, note = judge(p, ss)
        mine = [s for s in ss if not s.get("not_exercised")]  # a not-exercised sample's losses are elsewhere
        n_sends = sum(s["sends"] for s in ss)
        rec = [s["recovery_s"] for s in ss if s["recovery_s"] is not None]
        fo = [s["failover_s"] for s in ss if s.get("failover_s") is not None]
        out.append(
            {
                **{k: v for k, v in c.items() if k != "samples"},
                "runs": len(ss),
                "exercised": len(exercised(ss)),
                "lost": sum(s["lost"] for s in mine),
                "divergent": sum(s["divergent"] for s in mine),
                "undelivered": sum(s.get("undelivered", 0) + s.get("lost_after_delivery", 0) for s in mine),
                "stranded": sum(s.get("stranded", 0) for s in mine),
                "availability": round(sum(s["ok"] for s in ss) / n_sends, 3) if n_sends else None,
                "acked_during": sum(
                    s["acked_on_group"] if s.get("acked_on_group") is not None else s["ok"] for s in ss
                ),
                # of those, received by every consumer group owed them; sends no broker answered (None: not audited)
                "delivered": _sum_or_none(ss, "delivered"),
                "indeterminate": _sum_or_none(ss, "indeterminate"),
                "group_availability": merge_groups(ss),
                "excluded": excluded_text(ss),
                # the slowest recovery, and how many samples never recovered (a slave ahead, a fork)
                "recovery_s": max(rec) if rec else None,
                "recovery_never": sum(1 for s in ss if s.get("recovery_never")),
                # DLedger leader faults: the slowest failover, and the runs in which no other node led
                "failover_applies": c["kind"] in LEADER_FAULTS,
                "failover_s": max(fo) if fo else None,
                "failover_none": sum(1 for s in ss if s.get("failover_s") is None),
                "unavailable_s": unavailable_s(ss),
                "duplicates": _sum_or_none(ss, "duplicates"),
                # losses moved here from later faults that were not exercised, and moved away from here
                "inherited_from": [x for s in ss for x in s.get("inherited_from", [])],
                "blamed_on": [s["blamed_on"] for s in ss if s.get("blamed_on")],
                "verdict": verdict,
                "note": note,
                "promise": p["why"],
            }
        )
    return out


MIN_SWEEP_S = 10  # a sweep injects a dozen faults with gaps between them: one this short did not happen
JUDGED = ("audit ok", "audit FAIL")


def run_state(r: dict) -> str:
    """What a matrix run amounts to: "audit ok" / "audit FAIL" (its cells are judged), or "not run" /
    "not audited" (nothing of it is judged, and the matrix fails)."""
    if r.get("rc"):
        return f"not run (exit {r['rc']})"
    if r.get("took_s") is not None and r["took_s"] < MIN_SWEEP_S:
        return f"not run (took {r['took_s']} s)"
    if r.get("audit_error"):
        return f"not audited ({r['audit_error']})"
    if "audit_failed" not in r:
        return "not audited (no report/summary.json)"
    if not r.get("samples"):
        return "not run (no fault in its audit)"
    return "audit FAIL" if r["audit_failed"] else "audit ok"


def recovery_text(c: dict) -> str:
    rec = c["recovery_s"] if c["recovery_s"] is not None else "-"
    never = c.get("recovery_never") or 0
    return (
        f"never ({never}/{c['runs']}), else {rec}" if never and never < c["runs"] else ("never" if never else str(rec))
    )


def failover_text(c: dict) -> str:
    """A DLedger leader fault's slowest failover; "none (k/n)" for runs where no other node led; "n/a" for
    a fault that does not hit a leader (a follower fault, every classic fault: no automatic failover)."""
    if not c.get("failover_applies"):
        return "n/a"
    none = c.get("failover_none") or 0
    fo = "-" if c.get("failover_s") is None else str(c["failover_s"])
    return f"none ({none}/{c['runs']}), else {fo}" if none and none < c["runs"] else ("none" if none else fo)


def _or_not_audited(n: int | None) -> str:
    return "not audited" if n is None else str(n)


FAILING = ("FAIL", "not audited")  # cell verdicts that fail the matrix


def write(out: Path, cells: list[dict], results: list[dict], command: str) -> None:
    (out / "matrix.json").write_text(json.dumps({"cells": cells, "runs": results}, indent=1))
    states = [run_state(r) for r in results]
    judged = sum(st in JUDGED for st in states)
    not_run = sum(st.startswith("not run") for st in states)
    not_audited = sum(st.startswith("not audited") for st in states)
    lines = [
        f"Command: `{command}`",
        "",
        f"Runs: {len(results)} planned, {judged} audited and judged, {not_run} not run, {not_audited} not "
        "audited" + (" (the matrix fails: its cells miss those runs)" if not_run or not_audited else ""),
        "",
        "| broker | configuration | fault | backend | runs exercised | acked during fault | delivered "
        "| acknowledged lost | undelivered | stranded | indeterminate | divergent pairs | availability "
        "| availability per group | failover (s, max) | unavailable (s, max) | duplicates | recovery (s, max) "
        "| excluded records | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        av = f"{c['availability'] * 100:.0f} %" if c["availability"] is not None else "-"
        moved = "; ".join(
            f"{b['fault']} blamed for a later not-exercised fault's losses" for b in c.get("blamed_on", [])
        )
        note = "; ".join(x for x in (c["note"], moved) if x)
        lines.append(
            f"| {c.get('mode', 'ours')} | {c['topology']} {c['flush']} | {c['kind']} ({c['role']}) | {c['backend']} "
            f"| {c.get('exercised', c['runs'])}/{c['runs']} "
            f"| {c['acked_during']} | {_or_not_audited(c.get('delivered'))} "
            f"| {c['lost']} | {c.get('undelivered', 0)} | {c.get('stranded', 0)} "
            f"| {_or_not_audited(c.get('indeterminate'))} "
            f"| {c['divergent']} | {av} | {group_availability_text(c.get('group_availability') or {})} "
            f"| {failover_text(c)} "
            f"| {'-' if c.get('unavailable_s') is None else c['unavailable_s']} "
            f"| {_or_not_audited(c.get('duplicates'))} "
            f"| {recovery_text(c)} | {c.get('excluded') or 0} | **{c['verdict']}**"
            f"{': ' + note if note else ''} |"
        )
    for r in results:
        if r.get("unexplained"):
            lines.append(f"\n**{r['name']}: audit FAIL no cell accounts for**: {'; '.join(r['unexplained'])}")
    lines += [
        "",
        "Runs: "
        + ", ".join(
            f"{r['name']} {r['took_s'] if r.get('took_s') is not None else '?'} s ({st})"
            for r, st in zip(results, states)
        ),
    ]
    (out / "matrix.md").write_text("\n".join(lines) + "\n")
    heatmap(out / "matrix.png", cells)


def heatmap(path: Path, cells: list[dict]) -> None:
    if not cells:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    rows = sorted({(c.get("mode", "ours"), c["topology"], c["flush"]) for c in cells})
    cols = sorted({(c["kind"], c["role"]) for c in cells})
    code = {"PASS": 0, "WEAK": 1, "not exercised": 2, "FAIL": 3, "not audited": 3}
    grid = [[float("nan")] * len(cols) for _ in rows]
    text = [[""] * len(cols) for _ in rows]
    for c in cells:
        i, j = rows.index((c.get("mode", "ours"), c["topology"], c["flush"])), cols.index((c["kind"], c["role"]))
        grid[i][j] = code[c["verdict"]]
        av = f"{c['availability'] * 100:.0f}%" if c["availability"] is not None else "-"
        short = {"not exercised": "n/e", "not audited": "n/a"}.get(c["verdict"], c["verdict"])
        text[i][j] = (
            f"{short}\n{av}"
            + (f"\nlost {c['lost']}" if c["lost"] else "")
            + (f"\nstranded {c['stranded']}" if c.get("stranded") else "")
        )
    fig, ax = plt.subplots(figsize=(1.1 * len(cols) + 2, 0.9 * len(rows) + 1.5))
    ax.imshow(grid, cmap=ListedColormap(["#4dac26", "#f1b6da", "#bababa", "#d01c8b"]), vmin=0, vmax=3)
    ax.set_xticks(range(len(cols)), [f"{k}\n({r})" for k, r in cols], rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(len(rows)), [f"{m}: {t}\n{f}" for m, t, f in rows], fontsize=8)
    for i in range(len(rows)):
        for j in range(len(cols)):
            ax.text(j, i, text[i][j], ha="center", va="center", fontsize=6)
    ax.set_title(
        "guarantee matrix: PASS green, WEAK (allowed) pink, not exercised grey, FAIL or not audited (n/a) magenta",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def make_plan(
    configs: list[tuple[str, str]],
    backends: list[str],
    modes: list[str],
    first_seed: int = 1,
    seeds: int = 3,
    long_holds: bool = False,
) -> list[tuple[str, str, str, list[str], int, str]]:
    """(topology, flush, backend, faults, seed, mode) per run: for each backend, sweep, mode, configuration
    and seed; the classic configurations in the order they always had, dledger after them in each sweep
    slot it has (its single sweep goes with the first), and only in mode "ours"."""
    plan = []
    for backend in backends:
        classic = [c for c in configs if not is_dledger(c[0])]
        slots = sweeps_for(CONFIGS[0][0], backend, long_holds) if classic else [[]]
        for k, faults in enumerate(slots):
            for mode in modes:
                for topology, flush in configs:
                    mine = sweeps_for(topology, backend, long_holds)
                    if mode == "apache" and backend != "local":
                        continue  # Apache's 4.9 runs on the local backend only so far
                    if is_dledger(topology):
                        if mode not in DLEDGER_MODES or k >= len(mine):
                            continue
                        faults_here = mine[k]
                    else:
                        faults_here = faults
                    assert all(backend in FAULTS[f].backends for f in faults_here)
                    for seed in range(first_seed, first_seed + seeds):
                        plan.append((topology, flush, backend, faults_here, seed, mode))
    return plan


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m rmqha.chaos.matrix", description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--first-seed", type=int, default=1)
    ap.add_argument(
        "--backends", default="local", help="local, docker or local,docker (docker: the faults only it can do)"
    )
    ap.add_argument("--duration", type=float, default=10.0, help="minimum workload seconds (the sweep stretches it)")
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument(
        "--configs",
        default="all",
        help="all (the four classic ones and dledger), or e.g. 2m-2s-sync/ASYNC_FLUSH,2m-2s-async/SYNC_FLUSH,dledger",
    )
    ap.add_argument("--out", default="build/chaos-matrix")
    ap.add_argument("--from-runs", action="store_true", help="do not run: judge the run folders of an earlier run")
    ap.add_argument(
        "--long-holds",
        action="store_true",
        help=f"also a sweep of {', '.join(LONG_FAULTS)} held {LONG_HOLD_S:g} s each (past housekeeping, "
        "route refresh and name-server expiry): about 7 minutes per configuration and mode",
    )
    ap.add_argument(
        "--planted",
        action="store_true",
        help="also runs with planted broker bugs (PLANTED_RUNS: skip-queue-entry, ack-then-truncate and "
        "the four serving bugs): the matrix fails unless the audit catches each (its "
        "checkers can still fail)",
    )
    ap.add_argument(
        "--lanes",
        type=int,
        default=1,
        help="local clusters run at once (each on its own ports); 2 fits a 2-core machine at --rate 200",
    )
    ap.add_argument("--serial", action="store_true", help="one backend's runs after the other (default: at once)")
    ap.add_argument(
        "--modes",
        default="ours",
        help="comma-separated, side by side in the table: ours (this "
        "broker), 4.9 (haCompat49=true: Apache RocketMQ 4.9's HA behaviour), recovery "
        "(haRecoveryEnable=true: a master back behind its slave fetches the slave's tail first), apache "
        "(the real Apache RocketMQ 4.9.x from ROCKETMQ_HOME, local backend only)",
    )
    return ap


def parse_args(argv) -> tuple[argparse.Namespace, list[tuple[str, str]], list[str]]:
    """The arguments, the configurations and the modes they name; exits (argparse) on one it does not know.
    Creates --out."""
    ap = _parser()
    args = ap.parse_args(argv)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    try:
        configs = parse_configs(args.configs)
    except ValueError as e:
        ap.error(str(e))
    modes = args.modes.split(",")
    for mode in modes:
        if mode not in MODES:
            ap.error(f"--modes: {mode!r}; known: {', '.join(MODES)}")
    if "apache" in modes:
        from rmqha.cluster.implementations import parse_choice, unavailable_reason

        why = unavailable_reason(parse_choice("apache"))
        if why:
            ap.error(f"--modes apache: {why}")
    return args, configs, modes


def earlier_results(out: Path, plan: list) -> list[dict]:
    """--from-runs: the plan's runs as an earlier matrix run left them (their exit codes and times from its
    matrix.json; a run it does not list counts as done, its folder decides)."""
    try:
        before = {r["name"]: r for r in json.loads((out / "matrix.json").read_text())["runs"]}
    except (OSError, ValueError, KeyError):
        before = {}
    results = []
    for topology, flush, backend, faults, seed, mode in plan:
        name = run_name(topology, flush, backend, seed, mode, faults)
        old = before.get(name, {})
        # the earlier run's exit code and time: a run that did not happen stays "not run"
        results.append(
            {
                "name": name,
                "rc": old.get("rc", 0),
                "took_s": old.get("took_s"),
                "log": old.get("log", ""),
                "audit_s": old.get("audit_s"),
                "topology": topology,
                "flush": flush,
                "backend": backend,
                "seed": seed,
                "mode": mode,
            }
        )
    return results


def split_lanes(plan: list, lanes: int) -> dict[tuple[str, int], list]:
    """(backend, k) -> its runs: one lane per backend, --lanes of them for local, dealt round robin so each
    lane gets a mix of configurations and modes."""
    out = {}
    for b in dict.fromkeys(p[2] for p in plan):
        items = [p for p in plan if p[2] == b]
        n = max(1, lanes) if b == "local" else 1
        for k in range(n):
            out[(b, k)] = items[k::n]
    return out


def run_lanes(plan: list, args, out: Path, say, lock: threading.Lock, auditor: Auditor) -> list[dict]:
    """Every planned sweep, lane by lane (at once unless --serial), each run handed to the auditor once its
    sweep exits cleanly. The runs' results, in the order they ended."""
    lanes = split_lanes(plan, args.lanes)
    args.lane_count = len(lanes)
    counter = iter(range(1, len(plan) + 1))
    results: list[dict] = []

    def lane(index: int, items) -> None:
        for topology, flush, backend, faults, seed, mode in items:
            say(
                f"[{next(counter)}/{len(plan)}] {mode}: {topology} {flush} on {backend}, seed {seed}: "
                f"{', '.join(faults)}"
            )
            try:
                r = sweep(topology, flush, backend, faults, seed, args, out, index, mode)
            except Exception as e:  # one run that cannot start must not end the lane silently
                r = {
                    "name": run_name(topology, flush, backend, seed, mode, faults),
                    "rc": 3,
                    "took_s": 0,
                    "log": f"{type(e).__name__}: {e}",
                }
                say(f"    could not run: {type(e).__name__}: {e}")
            r.update(topology=topology, flush=flush, backend=backend, seed=seed, mode=mode)
            say(f"    {r['name']}: sweep {r['took_s']} s, exit {r['rc']}; log {r['log']}")
            with lock:
                results.append(r)
            if r["rc"] == 0:
                auditor.submit(r["name"])

    # one lane per backend (--lanes for local), at once: the clusters share the machine (each at --rate)
    threads = [threading.Thread(target=lane, args=(i, items)) for i, items in enumerate(lanes.values())]
    if args.serial:
        for t in threads:
            t.start()
            t.join()
    else:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return results


def run_planted(args, out: Path, say, auditor: Auditor) -> None:
    """--planted: the control runs with planted broker bugs, one after the other, each audited."""
    for spec in PLANTED_RUNS if args.planted else []:
        say(f"planted control: a run with {spec['bugs']}")
        planted = planted_run(args, out, 0, spec)
        say(f"    {planted['name']}: sweep {planted['took_s']} s, exit {planted['rc']}; log {planted['log']}")
        if planted["rc"] == 0:
            auditor.submit(spec["name"])


def run_all(plan: list, args, out: Path, say, lock: threading.Lock) -> list[dict]:
    """Run the plan and the planted controls, audit each run as it ends; the results with their audits."""
    auditor = Auditor(out, say)
    results = run_lanes(plan, args, out, say, lock, auditor)
    run_planted(args, out, say, auditor)
    say("every sweep done; waiting for the last audits")
    auditor.close()
    for r in results:
        r.update(auditor.done.get(r["name"], {}))
    return results


def judge_runs(results: list[dict]) -> list[dict]:
    """Each run's fault samples and its audit's unexplained FAILs (none for a run not judged), the runs
    sorted as the table lists them; the matrix's cells."""
    for r in results:
        r["samples"], failed, r["unexplained"] = collect(r["name"], r["topology"], r["flush"])
        r["failed_run"] = failed is None
        if failed is not None:
            r["audit_failed"] = failed
        r["state"] = run_state(r)
        if r["state"] not in JUDGED:  # a folder left by an earlier run is not this run's result
            r["samples"], r["unexplained"] = [], []
    results.sort(key=lambda r: (r.get("mode", "ours"), r["backend"], r["topology"], r["flush"], r["seed"]))
    return build(results)


def report(out: Path, plan: list, results: list[dict], t0: float) -> tuple[list[str], dict[str, list[str]]]:
    """Print the table and what fails the matrix beside its cells: the runs not done or not audited, and
    the audit FAILs no cell accounts for (both returned)."""
    print((out / "matrix.md").read_text())
    samples = sum(len(r["samples"]) for r in results)
    print(
        f"matrix: {out / 'matrix.md'}, {out / 'matrix.png'}; {len(plan)} runs, {samples} fault injections judged, "
        f"in {time.monotonic() - t0:.0f} s"
    )
    broken = [f"{r['name']} ({r['state']})" for r in results if r["state"] not in JUDGED]
    if broken:
        print(f"runs that could not be done or audited (see their logs): {', '.join(broken)}")
    unexplained = {r["name"]: r["unexplained"] for r in results if r.get("unexplained")}
    for name, fails in unexplained.items():
        print(f"{name}: audit FAIL no cell accounts for: {'; '.join(fails)}")
    return broken, unexplained


def planted_blind(args) -> list[str]:
    """--planted: the planted bugs the audit missed (printed); [] without --planted."""
    blind = []
    for spec in PLANTED_RUNS if args.planted else []:
        try:
            summary = json.loads((rf.run_dir(spec["name"]) / "report" / "summary.json").read_text())
            blind += planted_missed(summary, spec["expect"])
        except (OSError, ValueError) as e:
            blind += [f"the planted run {spec['name']} was not audited ({e})"]
    if args.planted:
        print(
            "planted control: "
            + (
                f"MISSED {', '.join(blind)}: the checkers are blind, the matrix fails"
                if blind
                else "every planted bug gave its verdict (FAIL; duplicate-pull: WARN)"
            )
        )
    return blind


def main(argv=None) -> int:
    args, configs, modes = parse_args(argv)
    out = Path(args.out)
    plan = make_plan(configs, args.backends.split(","), modes, args.first_seed, args.seeds, args.long_holds)
    t0 = time.monotonic()
    lock = threading.Lock()

    def say(line: str) -> None:
        with lock:
            print(f"[{time.monotonic() - t0:6.0f} s] {line}", flush=True)

    # --from-runs: judge the run folders of an earlier matrix run again
    results = earlier_results(out, plan) if args.from_runs else run_all(plan, args, out, say, lock)
    cells = judge_runs(results)
    command = "python -m rmqha.chaos.matrix " + " ".join(argv if argv is not None else sys.argv[1:])
    write(out, cells, results, command)
    broken, unexplained = report(out, plan, results, t0)
    blind = planted_blind(args)
    return 1 if broken or unexplained or blind or any(c["verdict"] in FAILING for c in cells) else 0


if __name__ == "__main__":
    sys.exit(main())
