"""A run's sends and tries as its audit wrote them (report/sends.jsonl, report/tries.jsonl: rmqha/pipeline/delivery_table.py), with the records no figure can count (tests/unit/matrix/test_table.py).

The audit owns every rule here: a send's state, the broker group that acknowledged it, the consumer
groups owed it and those that received it, parked, duplicates, and each try's group. The matrix only
slices the tables per fault (figures.py), after checking that they hold the histories' sends and answers,
no more and no fewer (a table the audit wrote without one of the run's history files, or another audit's,
fails every cell of the run).
"""

from __future__ import annotations

import json
from pathlib import Path

from rmqha.pipeline.delivery_table import SENDS_FILE, TRIES_FILE
from rmqha.pipeline.runfolder import load_nodes

from .histories import check_lines, history_paths, judge_torn


class RunTable:
    """sends:    send_id -> its line of report/sends.jsonl (state, first_ms, acked_ms, group, ambiguous,
                 stored, parked, owed, received, duplicates), in the order of their first try
    tries:    [(start_ms, end_ms, status, group)] every answered try (status ERROR: no broker's answer), in
              the order of their start (then of their recorder's seq)
    audited:  whether the audit wrote the tables (an audit older than them did not)
    stores:   whether any node's commit log is in the run folder (without one no send has a group)
    excluded: [(kind, reason, where, ms or None)] records left out of every figure (None: no time known)"""

    def __init__(self) -> None:
        self.sends: dict[str, dict] = {}
        self.tries: list[tuple[int, int, str, str | None]] = []
        self.audited = False
        self.stores = False
        self.excluded: list[tuple[str, str, str, int | None]] = []
        self.checked: list | None = None  # figures.run_checks(), once per run

    def delivered(self, send_id: str) -> bool:
        """Received by every consumer group it is owed to (by none when it is owed to none)."""
        s = self.sends.get(send_id) or {}
        return bool(s.get("owed")) and set(s["owed"]) <= set(s.get("received") or ())


def _lines(path: Path):
    with open(path) as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


def _has_store(run: Path) -> bool:
    try:
        return any(n.files for n in load_nodes(str(run)))
    except (OSError, ValueError, KeyError):
        return False


def _exclude_unplaced_acks(t: RunTable) -> None:
    """Acknowledged sends the figures cannot count: owed to no consumer group, or stored in two groups
    when the answer names neither."""
    for sid, s in t.sends.items():
        if s["state"] != "acked":
            continue
        at = s["acked_ms"] or s["first_ms"] or 0
        if not s["owed"]:
            t.excluded.append(
                ("owed-to-none", "acknowledged, owed to no consumer group (outside every audited window)", sid, at)
            )
        if s["group"] is None and s.get("ambiguous"):
            t.excluded.append(
                (
                    "ambiguous-group",
                    f"acknowledged, stored in two groups, the answer names neither ({', '.join(s['ambiguous'])})",
                    sid,
                    at,
                )
            )


def run_table(run: Path) -> RunTable | None:
    """The run's audited sends and tries and its excluded records; None when it has no history (nothing can
    be counted)."""
    if not history_paths(run):
        return None
    t = RunTable()
    report = run / "report"
    t.audited = (report / SENDS_FILE).is_file() and (report / TRIES_FILE).is_file()
    t.stores = _has_store(run)
    lines = check_lines(run)
    if t.audited:
        rows = sorted(_lines(report / SENDS_FILE), key=lambda s: (lines.first.get(s["send_id"], (0, 0)), s["send_id"]))
        t.sends = {s["send_id"]: s for s in rows}
        tries = sorted(_lines(report / TRIES_FILE), key=lambda x: (x["start_ms"], x.get("seq") or 0))
        t.tries = [(x["start_ms"], x["end_ms"], x["status"], x["group"]) for x in tries]
    judge_torn(lines, lambda x: x in t.sends and t.sends[x]["state"] != "acked" and not t.delivered(x))
    t.excluded = lines.excluded
    if t.audited:
        _exclude_unaudited(t, lines, sum(1 for x in tries if x.get("send_id")))
    _exclude_unplaced_acks(t)
    return t


def _exclude_unaudited(t: RunTable, lines, table_answers: int) -> None:
    """The histories and the audit's tables must hold the same sends and answers: a send the table lacks
    (a history file the audit did not read, such as one in a sub-folder of history/) is counted by no
    figure, and a table that holds sends or answers the histories do not is another run's or another
    audit's. Each is named, with no time: every cell of the run fails for it."""
    in_history = {str(x): x for x in lines.first}
    for sid in sorted(set(in_history) - set(t.sends)):
        t.excluded.append(
            (
                "unaudited-send",
                "a send in the histories the audit's report/sends.jsonl does not hold (a history file the audit "
                "did not read?): no figure counts it",
                f"{lines.files.get(in_history[sid], '?')}: {sid}",
                None,
            )
        )
    for sid in sorted(x for x in set(t.sends) - set(in_history) if x):
        t.excluded.append(
            (
                "table-only-send",
                "a send in the audit's report/sends.jsonl no history holds (a table of another run or audit?)",
                sid,
                None,
            )
        )
    if table_answers != lines.answers:
        t.excluded.append(
            (
                "answers-differ",
                f"the histories hold {lines.answers} send answers, the audit's report/tries.jsonl "
                f"{table_answers} (a table of another run or audit?)",
                "report/tries.jsonl",
                None,
            )
        )
