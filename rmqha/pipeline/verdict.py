"""A verdict: one guarantee, PASS / WARN / FAIL / INFO, its stable id, and the evidence in one line.

UNKNOWN is a checker's when it could not judge (it crashed: checker.compose); never a PASS."""

from __future__ import annotations

from dataclasses import dataclass

PASS, WARN, FAIL, INFO, UNKNOWN = "PASS", "WARN", "FAIL", "INFO", "UNKNOWN"


@dataclass
class Verdict:
    name: str
    status: str
    detail: str
    # A stable id ("delivery.lost", rmqha/pipeline/ids.py) and what it is about ("ChaosCG1", "broker-a-0"):
    # tests and the matrix key on these, never on the sentence in `name`. Required: a verdict without an
    # id cannot be made.
    id: str
    subject: str = ""

    def __post_init__(self) -> None:
        if not self.id:
            raise ValueError(f"verdict {self.name!r} has no id (rmqha/pipeline/ids.py)")

    def line(self) -> str:
        return f"{self.status:4}  {self.name}: {self.detail}"


def failed(verdicts: list[Verdict]) -> bool:
    return any(v.status == FAIL for v in verdicts)
