"""What the histories and the commit logs say about every send of one run (tests/unit/matrix/test_facts.py)."""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import re
from pathlib import Path

from rmqha.pipeline.delivery import PARKED_TOPICS  # the audit's: a send parked there is not due yet
from rmqha.pipeline.runfolder import list_commitlog

from rmqha.pipeline import dledger_log


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

UNWRITABLE_GAP_MS = 1000  # a group that accepted no send for longer than this while sends were tried was unwritable
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


@contextlib.contextmanager
def _mapped(path):
    """The file mapped for reading; an empty file (which cannot be mapped) reads as no bytes."""
    with open(path, "rb") as fh:
        try:
            buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:  # an empty file
            yield b""
            return
        try:
            yield buf
        finally:
            buf.close()


def read_store_groups(run: Path, facts: RunFacts, topics: set[str]) -> None:
    """Every copy of a send in any node's commit log, by send_id (KEYS) and by UNIQ_KEY: in a send's topic,
    parked (SCHEDULE_TOPIC_XXXX, the half topic) or any other topic (a retry topic's copy)."""
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
            _note_copy(facts, group, not slave, m)
        for _base, path in list_files(str(nd / "store" / "commitlog")):
            facts.stores = True
            with _mapped(path) as buf:
                for _off, r in iter_records(buf, 0, check_crc=False):
                    if r.kind != Scan.MESSAGE or r.message is None:
                        break
                    _note_copy(facts, group, not slave, r.message)
    for u, cs in facts.copies.items():
        groups = {c[0] for c in cs if c[2] in topics}
        if len(groups) == 1:
            facts.group_of_uniq[u] = groups.pop()


def _note_copy(facts: RunFacts, group: str, master: bool, m) -> None:
    """One stored copy of a message, under each of its KEYS and its UNIQ_KEY."""
    copy = (group, master, m.topic, m.physical_offset, m.queue_id, m.queue_offset)
    for k in {k for k in (m.keys or "").split(" ") if k} | ({m.uniq_key} if m.uniq_key else set()):
        facts.copies.setdefault(k, []).append(copy)


def dledger_data_files(store: Path) -> list[Path]:
    """A DLedger node's data files (<store>/dledger-<selfId>/data/<20-digit start position>), in order: where
    the audit finds them (rmqha/pipeline/dledger_log.py, runfolder.py)."""
    found = dledger_log.find_dir(str(store))
    return [Path(f.path) for f in list_commitlog(os.path.join(found, "data"))] if found else []


def dledger_messages(store: Path):
    """The messages of a DLedger node's entries (each body one classic record), the uncommitted tail too:
    what the node stores, as read_store_groups needs it (which group holds a copy). The audit reads only
    the committed prefix (rmqha/pipeline/dledger_log.py); a walk stops at a blank (the file's end) or at
    bytes that are not an entry."""
    from rmqha.broker.dledger.entry import BODY_OFFSET, EntryFormatError, decode_entry, is_blank
    from rmqha.broker.store.record import Scan, scan

    for path in dledger_data_files(store):
        with _mapped(path) as buf:
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
