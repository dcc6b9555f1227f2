"""A DLedger node's commit log, for the audit (a broker with enableDLegerCommitLog: TOPOLOGY=dledger).

Such a node keeps no store/commitlog/: its messages are the bodies of the DLedger entries in
`<store>/dledger-<selfId>/data/<20-digit start position>` (the byte layout is rmqha.broker.dledger's:
entry.py and file_store.py, read here through their decoders). Each entry is a 48-byte header and one
classic commit-log record whose PHYSICALOFFSET is the entry's pos + 48, the offset consume-queue units,
msgIds and the served log use; so a body decodes into the same row (rmqha.pipeline.decode.COLUMNS) a
classic log's record at that offset would, and every verdict reads it unchanged.

What is read:
* entries up to the node's committed index: a later entry may be uncommitted and be truncated when a new
  leader's log replaces it; it is not acknowledged state (a follower's uncommitted tail is no divergence).
  How many there were is counted from the index files on the driver (`DLedgerLog.uncommitted`;
  `verdicts()` states it). The committed index is `committedIndex=` in dledger-<selfId>/checkpoint, which
  DLedger writes periodically, so it may trail (a killed node's does): raised by Raft's log matching
  (settle_committed()): the group's highest checkpointed committed index C is committed on the node that
  wrote it, and a member's entry i <= C with the same term as that node's entry i is the same entry, as
  are all before it. So a member's committed index is the highest such i (or its own checkpoint's, if
  higher); a follower's stale entries from an old term (not yet truncated) stay unread.
* the new leader's no-op (topic NOOP_TOPIC, empty, rollback-flagged) is not a message: no row.
* an entry header that does not decode, or whose pos is not its position, ends the file's walk with a
  `torn` row (DLedger's recovery would cut the log there); a body that is not a valid record at pos + 48
  is an `invalid` row over the body.

Nothing here writes: the run's stores are evidence (opening them with FileStore would run its recovery,
which truncates and zeroes).

Roles: a DLedger group has no planned master (node.json's brokerId is -1 on every member). The group's
master for the verdicts is the leader at the end of the run (end_leader()), with brokerId 0 and role
ASYNC_MASTER (a DLedger ack means a majority holds the entry, not every follower: the
"SYNC_MASTER SEND_OK is on the slave" FAIL would be wrong); the others are SLAVE with 4.9's follower
brokerId (selfId's number + 1).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from rmqha.broker.dledger.entry import (
    BODY_OFFSET,
    INDEX_UNIT_SIZE,
    EntryFormatError,
    decode_entry,
    decode_index,
    is_blank,
)
from rmqha.broker.dledger.file_store import CHECK_POINT_FILE, TERM_PERSIST_FILE
from rmqha.broker.dledger.file_store import _properties as java_properties
from rmqha.broker.store import record
from rmqha.broker.store.record import Scan

from . import ids, walk
from .verdict import INFO, Verdict

NOOP_TOPIC = "RMQ_SYS_DLEDGER_NOOP"  # rmqha.broker.store.dledger_commitlog.NOOP_TOPIC (not imported: it pulls Twisted)
DLEDGER = "dledger"  # node.json's "commitLog" for a DLedger node
_DIR = re.compile(r"^dledger-(.+)$")
_FILE_NAME = re.compile(r"^\d{20}$")


@dataclass
class DLedgerLog:
    self_id: str
    path: str  # <store>/dledger-<selfId>
    committed_index: int  # what the audit reads up to: the checkpoint's, raised by settle_committed()
    end_index: int  # the last entry the index files hold; -1: none
    term: int = 0  # currterm's currTerm
    vote_leader: str = ""  # currterm's voteLeader (whom this node voted for in `term`)
    checkpoint_index: int = -1  # the checkpoint's committedIndex as written; -1: none

    def term_at(self, i: int) -> int | None:
        """The term of entry i from the index files, None when the slot is empty or missing."""
        e = _slot(self.path, i)
        return e.term if e is not None else None

    @property
    def data_dir(self) -> str:
        return os.path.join(self.path, "data")

    @property
    def uncommitted(self) -> int:
        """Entries past the committed index (not read by the audit)."""
        return max(0, self.end_index - self.committed_index)


def _read_properties(path: str) -> dict[str, str]:
    try:
        with open(path, encoding="utf-8") as fh:
            return java_properties(fh.read())
    except OSError:
        return {}


def _int(value, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def find_dir(store_dir: str, self_id: str | None = None) -> str | None:
    """<store>/dledger-<selfId> (any one dledger-* directory when self_id is not known), or None."""
    if self_id:
        p = os.path.join(store_dir, f"dledger-{self_id}")
        return p if os.path.isdir(p) else None
    try:
        found = sorted(d for d in os.listdir(store_dir) if _DIR.match(d) and os.path.isdir(os.path.join(store_dir, d)))
    except OSError:
        return None
    return os.path.join(store_dir, found[0]) if found else None


def _slot(path: str, i: int):
    """Index entry i of the DLedger log at `path` (entry.IndexEntry), or None: past the files, never
    written, or not entry i. One pread (index files are read-only here, never opened by FileStore)."""
    if i < 0:
        return None
    index_dir = os.path.join(path, "index")
    off = i * INDEX_UNIT_SIZE
    try:
        names = sorted((int(n), n) for n in os.listdir(index_dir) if _FILE_NAME.match(n))
    except OSError:
        return None
    for base, name in reversed(names):
        if base <= off:
            try:
                with open(os.path.join(index_dir, name), "rb") as fh:
                    fh.seek(off - base)
                    raw = fh.read(INDEX_UNIT_SIZE)
            except OSError:
                return None
            if len(raw) < INDEX_UNIT_SIZE or raw == bytes(INDEX_UNIT_SIZE):
                return None
            try:
                e = decode_index(raw)
            except EntryFormatError:
                return None
            return e if e.index == i else None
    return None


def end_index(path: str, committed: int) -> int:
    """The last entry index the index files hold, walking slots from committed + 1 until one was never
    written (the uncommitted tail is short: a few reads)."""
    i = max(committed + 1, 0)
    while _slot(path, i) is not None:
        i += 1
    return max(i - 1, committed)


def load(store_dir: str, self_id: str | None = None) -> DLedgerLog | None:
    """The DLedger log of one store, or None when it has no dledger-<selfId>/ directory."""
    path = find_dir(store_dir, self_id)
    if path is None:
        return None
    sid = _DIR.match(os.path.basename(path)).group(1)
    committed = _int(_read_properties(os.path.join(path, CHECK_POINT_FILE)).get("committedIndex"), -1)
    term = _read_properties(os.path.join(path, TERM_PERSIST_FILE))
    return DLedgerLog(
        sid,
        path,
        committed,
        end_index(path, committed),
        _int(term.get("currTerm"), 0),
        term.get("voteLeader", "") or "",
        committed,
    )


def missing(store_dir: str, self_id: str | None) -> DLedgerLog:
    """A DLedger node (node.json says so) whose log is not in its store (not kept, deleted): no entries, but
    still a member of its group, so it is never taken for the group's master by its node.json brokerId."""
    return DLedgerLog(self_id or "", os.path.join(store_dir, f"dledger-{self_id}"), -1, -1)


def settle_committed(members: list) -> None:
    """Raise each member's committed_index by log matching (module docstring): C, the highest checkpointed
    committed index of the group, is committed on the member R that wrote it; a member's entry i <= C with
    R's term at i is R's entry i (Raft), and so are all entries before it. A few index reads per member
    (from min(its end, C) down to the first term that matches)."""
    logs = [m.dledger for m in members if m.dledger is not None]
    if not logs:
        return
    ref = max(logs, key=lambda d: d.checkpoint_index)
    top = ref.checkpoint_index
    for d in logs:
        if d is ref:
            continue
        i = min(d.end_index, top)
        while i > d.committed_index:
            t = d.term_at(i)
            if t is not None and t == ref.term_at(i):
                d.committed_index = i
                break
            i -= 1


# -- roles ----------------------------------------------------------------------------------------


def _metrics_leaders(metrics_paths: list[str]) -> dict[str, tuple[float, bool]]:
    """node -> (ts, was a master) of its last metric sample."""
    last: dict[str, tuple[float, bool]] = {}
    for p in metrics_paths:
        try:
            with open(p, encoding="utf-8") as fh:
                for line in fh:
                    try:
                        s = json.loads(line)
                    except ValueError:
                        continue
                    node, ts = s.get("node"), s.get("ts")
                    if node is None or ts is None or "role" not in s:
                        continue
                    if node not in last or ts >= last[node][0]:
                        last[node] = (ts, s["role"] in ("ASYNC_MASTER", "SYNC_MASTER"))
        except OSError:
            continue
    return last


def end_leader(members: list, metrics_paths: list[str] = ()) -> tuple[object | None, str]:
    """(the member that led at the end of the run, how that was decided). Members: runfolder.Node with a
    .dledger. First the store: the highest term any member persisted, if a majority of the group voted
    for one member in it (a Raft leader of that term; no later term exists on disk). Else the metric
    samples: the member whose last sample said master, the latest such. Else the member with the highest
    committed index. None: no member."""
    if not members:
        return None, "no member"
    by_id = {m.dledger.self_id: m for m in members}
    top = max(m.dledger.term for m in members)
    votes: dict[str, int] = {}
    for m in members:
        if m.dledger.term == top and m.dledger.vote_leader:
            votes[m.dledger.vote_leader] = votes.get(m.dledger.vote_leader, 0) + 1
    for vid, n in votes.items():
        if 2 * n > len(members) and vid in by_id:
            return by_id[vid], f"elected in term {top} ({n} of {len(members)} votes in currterm)"
    last = _metrics_leaders(list(metrics_paths))
    masters = sorted((last[m.name][0], m.name) for m in members if last.get(m.name, (0, False))[1])
    if masters:
        name = masters[-1][1]
        return next(m for m in members if m.name == name), "the last metric sample saying master"
    best = max(members, key=lambda m: (m.dledger.committed_index, m.name))
    return best, "the highest committed index (no majority vote on disk, no metrics)"


def follower_id(self_id: str) -> int:
    """rmqha.broker.config.properties.dledger_slave_id: 4.9's follower brokerId, selfId's number + 1."""
    rest = self_id[1:]
    return int(rest) + 1 if rest.isdigit() else 1


def assign_roles(nodes: list, metrics_paths: list[str] = ()) -> dict[str, str]:
    """Per DLedger group: its end leader becomes the master (brokerId 0, ASYNC_MASTER), the others SLAVE.
    Returns {group: how its leader was decided}."""
    how = {}
    for group in sorted({n.broker_name for n in nodes if n.dledger is not None}):
        members = [n for n in nodes if n.broker_name == group and n.dledger is not None]
        settle_committed(members)
        leader, why = end_leader(members, metrics_paths)
        for m in members:
            if m is leader:
                m.broker_id, m.role = 0, "ASYNC_MASTER"
            else:
                m.broker_id, m.role = follower_id(m.dledger.self_id), "SLAVE"
        how[group] = f"{leader.name if leader else None}: {why}"
    return how


def verdicts(nodes: list) -> list[Verdict]:
    """INFO: per DLedger node, the committed index read and the entries past it that were not."""
    dl = [n for n in nodes if n.dledger is not None]
    if not dl:
        return []
    parts = [
        f"{n.name} ({n.role}, selfId {n.dledger.self_id}): committed index {n.dledger.committed_index} "
        f"(checkpoint {n.dledger.checkpoint_index}), {n.dledger.uncommitted} uncommitted entries not read"
        for n in dl
    ]
    return [Verdict("DLedger logs read up to the committed index", INFO, "; ".join(parts), ids.DLEDGER_UNCOMMITTED)]


# -- decoding (executor) ----------------------------------------------------------------------------


def _first_entry(rd, base: int) -> int | None:
    """Where the first entry of a data file starts: 0, or (a follower's log rebuilt inside a new file, as
    FileStore.rebuild_with_pos does) the first non-zero bytes' entry whose pos says it starts there."""
    p = rd.next_data(0)
    while p is not None and p < rd.length:
        buf, i = rd.window(p, 1 << 16)
        chunk = bytes(buf[i : i + (1 << 16)])
        stripped = chunk.lstrip(b"\0")
        if stripped:
            nz = p + len(chunk) - len(stripped)
            for cand in range(max(0, nz - 3), nz + 1):  # the magic (1) is a big-endian int
                b2, j = rd.window(cand, BODY_OFFSET)
                try:
                    if decode_entry(b2, j, read_body=False).pos == base + cand:
                        return cand
                except EntryFormatError:
                    continue
            return 0 if nz < BODY_OFFSET else nz
        p += len(chunk)
    return None


def decode_chunks(task: walk.DecodeTask, chunk_rows: int, compiled: bool):
    """decode.decode_chunks for one DLedger data file: (ok, other) chunks of the committed entries' records.
    task: decode.plan()'s, the whole file with the node's committed index."""
    meta, path, base, length, mapped_size, committed = (
        task.meta,
        task.path,
        task.base,
        task.length,
        task.mapped_size,
        task.committed,
    )
    fname = os.path.basename(path)
    summary, phys_at, topic_at = record.scan_summary, walk.PHYS, walk.AT["topic"]
    ok = walk.CompiledSummaries(chunk_rows) if compiled else walk.Summaries(chunk_rows)
    other = []
    rd = walk.RangeReader(path, base, length, mapped_size)
    try:
        p = _first_entry(rd, base)
        while p is not None and p + BODY_OFFSET <= length:
            buf, i = rd.window(p, BODY_OFFSET)
            if len(buf) - i >= 4 and is_blank(buf, i):
                break  # the file's padded end
            head = bytes(buf[i : i + BODY_OFFSET])
            if head == bytes(BODY_OFFSET):
                break  # the unwritten tail
            try:
                e = decode_entry(head, read_body=False)
                reason = None if e.pos == base + p else f"entry pos {e.pos} != position {base + p}"
            except EntryFormatError as err:
                e, reason = None, f"DLedger entry: {err}"
            if reason is None and p + e.size > length:
                reason = f"entry of {e.size} bytes, {length - p} left in the file"
            if reason is not None:
                other.append(walk.other_row(meta, fname, base + p, max(rd.data_end(p), p + 1) - p, "torn", reason))
                break
            if e.index > committed:
                break  # uncommitted from here on (indexes only grow)
            body_at, body_size = p + BODY_OFFSET, e.size - BODY_OFFSET
            buf, i = rd.window(body_at, body_size)
            f = summary(buf, i)[2] if body_size > 0 else None
            if f is not None and f[phys_at] == base + body_at and f[walk.SIZE] == body_size:
                if f[topic_at] != NOOP_TOPIC:
                    ok.append(f)
                    if ok.full:
                        yield ok.take(), other
                        other = []
            else:
                r = record.scan(buf, i, True, False) if body_size > 0 else None
                if r is None:
                    why = "empty entry body"
                elif r.kind == Scan.MESSAGE and r.message.physical_offset != base + body_at:
                    why = f"PHYSICALOFFSET {r.message.physical_offset} != entry pos + 48 = {base + body_at}"
                elif r.kind == Scan.MESSAGE:
                    why = f"record of {r.size} bytes in an entry body of {body_size}"
                else:
                    why = r.reason or str(r.kind)
                other.append(walk.other_row(meta, fname, base + body_at, max(body_size, 1), "invalid", why))
            p += e.size
    finally:
        rd.close()
    if len(ok) or other:
        yield ok.take(), other
