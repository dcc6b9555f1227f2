"""The history lines no figure can count: unparsable, without a known op or a send_id, or torn (tests/unit/matrix/test_table.py).

The audit (rmqha/pipeline) reads the histories with a schema and passes such a line by; the matrix names
each as an excluded record, so that a cell whose figures could hide a loss behind one says so.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from rmqha.runs import history as h

# excluded records that do not make a cell NOT-OK, by their kind (never by their text, which can hold a
# consumer group's name): kind -> why they cannot hide a loss
TORN = "torn"
EXPLAINED = {
    TORN: "the recorder was stopped mid-line on a line that is not a send's answer, or on the answer of a send "
    "every consumer group owed it received: nothing acknowledged can be lost behind it",
}
TORN_OP = re.compile(r'"op":\s*"(\w*)"')
TORN_SID = re.compile(r'"send_id":\s*"([^"]*)"')


def explained(kind: str | None) -> str | None:
    return EXPLAINED.get(kind or "")


def read_jsonl(path: Path):
    with open(path) as fh:
        for line in fh:
            try:
                yield json.loads(line)
            except ValueError:
                continue


def sends(run: Path) -> list[tuple[int, int, str]]:
    """Every send answer of the producers' histories: (start ms, end ms, status)."""
    out = []
    for p in sorted((run / "history").glob("producer-*.jsonl")):
        out += [
            (r["start_ms"], r.get("end_ms") or r["start_ms"], r["status"])
            for r in read_jsonl(p)
            if r.get("op") == "send" and r.get("start_ms")
        ]
    return out


def history_paths(run: Path) -> list[Path]:
    return sorted((run / "history").rglob("*.jsonl")) if (run / "history").is_dir() else []


class LineChecks:
    """What the history lines say beside the audit's tables.

    excluded: [(kind, reason, where, ms or None)] lines left out of every figure (None: no time known)
    torn:     [(file name, line number, text)] each file's torn last line, judged by judge_torn
    pending:  send_id -> its tries without an answer line; files: send_id -> the history file of its first line
    answers:  how many send answers (op "send" with a send_id) the lines hold"""

    def __init__(self) -> None:
        self.excluded: list[tuple[str, str, str, int | None]] = []
        self.torn: list[tuple[str, int, str]] = []
        self.pending: dict[str, int] = {}
        self.files: dict[str, str] = {}
        self.first: dict[str, tuple] = {}  # send_id -> (start ms, seq) of its first line
        self.answers = 0


def check_lines(run: Path) -> LineChecks:
    """Every history line that is not a JSON object with a known op, or a send without a send_id, excluded and
    named; a torn last line (the file does not end with a newline: its writer stopped mid-line) kept aside."""
    ops = (h.INVOKE, h.SEND, h.RECEIVE, h.SUBSCRIBE, h.UNSUBSCRIBE)
    out = LineChecks()
    first = out.first
    for p in history_paths(run):
        lines = p.read_text(errors="replace").split("\n")
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except ValueError:
                if i == len(lines) - 1:
                    out.torn.append((p.name, i + 1, line))
                else:
                    out.excluded.append(("unparsable", "unparsable history line", f"{p.name}:{i + 1}", None))
                continue
            if not isinstance(r, dict) or r.get("op") not in ops:
                out.excluded.append(("no-op", "history line with no known op", f"{p.name}:{i + 1}", None))
                continue
            if r["op"] not in (h.INVOKE, h.SEND):
                continue
            sid = r.get("send_id")
            if not sid:
                out.excluded.append(("no-send-id", "send without a send_id", f"{p.name}:{i + 1}", r.get("start_ms")))
                continue
            out.pending[sid] = out.pending.get(sid, 0) + (1 if r["op"] == h.INVOKE else -1)
            out.answers += r["op"] == h.SEND
            at = (r.get("start_ms") or 0, r.get("seq") or 0)
            if sid not in first or at < first[sid]:
                first[sid] = at
                out.files[sid] = p.name
    return out


def judge_torn(lines: LineChecks, unsafe) -> None:
    """A torn last line is explained when it cannot hide a loss: it is not a send's answer, or every send
    whose answer it may be (the send_id it names; else every send of its file with no answer) is answered
    elsewhere or was received by every group it would be owed to. A torn SEND_OK of a send nobody received
    would hide a lost acknowledged send: not explained. unsafe(send_id): the send is known, never
    acknowledged, and not delivered."""
    for name, lineno, text in lines.torn:
        where = f"{name}:{lineno}"
        op = TORN_OP.search(text)
        sid = TORN_SID.search(text)
        if op and op.group(1) != "send":
            lines.excluded.append((TORN, "torn last history line", where, None))
            continue
        # the send it names; else every send of its file with a try still unanswered
        cands = (
            [sid.group(1)]
            if sid
            else sorted(
                (x for x, f in lines.files.items() if f == name and lines.pending.get(x)), key=lines.first.__getitem__
            )
        )
        hidden = [x for x in cands if unsafe(x)]
        if hidden:
            lines.excluded.append(
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
            lines.excluded.append((TORN, "torn last history line", where, None))
