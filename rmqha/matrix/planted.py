"""--planted: runs with broker bugs no storage verdict sees, and whether the audit caught each (tests/unit/matrix/test_planted.py)."""

from __future__ import annotations

import json
from pathlib import Path

from rmqha.cluster import runfolder as rf
from .auditor import Auditor
from .sweeps import sweep
from .verdicts import verdict_key


# --planted: more runs with broker bugs no storage verdict sees (rmqha/controls/planted.py); the matrix fails
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
    given = [(*verdict_key(v), v.get("status")) for v in summary.get("verdicts", [])]
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


def run_planted(args, out: Path, say, auditor: Auditor) -> None:
    """--planted: the control runs with planted broker bugs, one after the other, each audited."""
    for spec in PLANTED_RUNS if args.planted else []:
        say(f"planted control: a run with {spec['bugs']}")
        planted = planted_run(args, out, 0, spec)
        say(f"    {planted['name']}: sweep {planted['took_s']} s, exit {planted['rc']}; log {planted['log']}")
        if planted["rc"] == 0:
            auditor.submit(spec["name"])


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
