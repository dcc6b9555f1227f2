"""The checker contract, in the shape of Jepsen's checker.clj: a checker is `check(run) -> Result`, and
`compose` runs several as one.

A Result says whether the guarantees a checker judges held (`valid`: True, False or UNKNOWN), with its
counts and its verdicts (each with a stable id, rmqha/pipeline/ids.py). A checker's `run` is plain data
(rmqha/pipeline/facts.py's Run: what Spark decoded and aggregated), so every checker can be proven on a
hand-written run without Spark (tests/unit/pipeline/test_checkers.py).

compose() runs each checker in order and merges their results: the verdicts in checker order, the counts
per checker, and `valid` by merge_valid(). A checker that raises cannot have judged anything: its result
is UNKNOWN with one verdict naming the exception, never a PASS, and the other checkers still run.

Tests: tests/unit/pipeline/test_checkers.py.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from . import ids
from .verdict import FAIL, UNKNOWN, Verdict

Valid = bool | Literal["unknown"]
UNKNOWN_VALID: Valid = "unknown"

# How much each `valid` weighs when results merge (Jepsen's valid-priorities): one False makes the whole
# invalid; an unknown part leaves it unknown unless something failed; only all-True is True.
_WEIGHT = {True: 0, UNKNOWN_VALID: 1, False: 2}


@dataclass
class Result:
    valid: Valid
    counts: dict[str, Any] = field(default_factory=dict)
    verdicts: list[Verdict] = field(default_factory=list)
    # a composed result: each checker's own result, by name, in the order they ran
    results: dict[str, Result] = field(default_factory=dict)

    @classmethod
    def of(cls, verdicts: list[Verdict], counts: dict[str, Any] | None = None) -> Result:
        """A checker's result from its verdicts: False when one FAILs, UNKNOWN when one could not be
        judged, else True (WARN and INFO do not make a run invalid)."""
        return cls(valid_of(verdicts), dict(counts or {}), list(verdicts))

    @property
    def status(self) -> str:
        """PASS, FAIL or UNKNOWN: the word for `valid` in reports."""
        return "PASS" if self.valid is True else FAIL if self.valid is False else UNKNOWN


def valid_of(verdicts: Iterable[Verdict]) -> Valid:
    statuses = {v.status for v in verdicts}
    if FAIL in statuses:
        return False
    if UNKNOWN in statuses:
        return UNKNOWN_VALID
    return True


def merge_valid(valids: Iterable[Valid]) -> Valid:
    """The weightiest of the valids (False over UNKNOWN over True); True for none."""
    out: Valid = True
    for v in valids:
        if v not in _WEIGHT:
            raise ValueError(f"{v!r} is not a valid value (True, False or {UNKNOWN_VALID!r})")
        if _WEIGHT[v] > _WEIGHT[out]:
            out = v
    return out


Checker = Callable[[Any], Result]


def crashed(name: str, e: BaseException) -> Result:
    """The result of a checker that raised: UNKNOWN, with the exception and where it was raised."""
    where = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
    at = f" at {where.filename.rsplit('/', 1)[-1]}:{where.lineno}" if where else ""
    return Result(
        UNKNOWN_VALID,
        {"error": f"{type(e).__name__}: {e}"},
        [
            Verdict(
                f"checker {name}",
                UNKNOWN,
                f"the checker crashed ({type(e).__name__}: {e}{at}): what it checks was not judged",
                ids.CHECKER_CRASHED,
                name,
            )
        ],
    )


def check_safe(name: str, checker: Checker, run: Any) -> Result:
    """checker(run), or crashed() when it raises."""
    try:
        r = checker(run)
    except Exception as e:  # any bug in a checker: never a PASS, and the others still run
        return crashed(name, e)
    if not isinstance(r, Result):
        return crashed(name, TypeError(f"returned {type(r).__name__}, not a Result"))
    return r


def compose(checkers: Mapping[str, Checker]) -> Checker:
    """One checker that runs each of `checkers` (name -> check) in order on the same run."""

    def check(run: Any) -> Result:
        results = {name: check_safe(name, c, run) for name, c in checkers.items()}
        return Result(
            merge_valid(r.valid for r in results.values()),
            {name: r.counts for name, r in results.items()},
            [v for r in results.values() for v in r.verdicts],
            results,
        )

    return check
