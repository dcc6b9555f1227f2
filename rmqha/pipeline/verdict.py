"""A verdict: one named guarantee, PASS / WARN / FAIL, and the evidence in one line."""

from __future__ import annotations

from dataclasses import dataclass

PASS, WARN, FAIL, INFO = "PASS", "WARN", "FAIL", "INFO"


@dataclass
class Verdict:
    name: str
    status: str
    detail: str
    # A stable id ("delivery.lost") and what it is about ("ChaosCG1", "broker-a-0"): tests and the
    # matrix key on these, never on the sentence in `name`.
    id: str = ""
    subject: str = ""

    def line(self) -> str:
        return f"{self.status:4}  {self.name}: {self.detail}"


def failed(verdicts: list[Verdict]) -> bool:
    return any(v.status == FAIL for v in verdicts)
