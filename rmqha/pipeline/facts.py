"""Run: everything the checkers judge, as plain data (no Spark, no files).

gather.py fills it from a run folder (Spark decodes the logs and aggregates the histories); a test writes
one by hand, as Jepsen proves its checkers on hand-written histories. Every field has an empty default,
so a hand-written run names only what its checker reads.

Tests: tests/unit/pipeline/test_checkers.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import audit, faults
from .audit import NodeIntegrity, PairAudit
from .delivery import DeliveryFindings
from .faults import Attribution, FaultInterval
from .history_check import HistoryFindings
from .runfolder import Node


@dataclass
class Series:
    """What the plots and the fault attribution need from the histories and the masters' logs: every send
    counted (aggregated in Spark, nothing capped)."""

    non_ok: list[tuple[str, int, int, int]] = field(default_factory=list)  # (status, start, end, sends)
    latencies: list[tuple[int, int]] = field(default_factory=list)  # (SEND_OK latency ms, sends)
    # (end ms rounded to gather.OVER_TIME_STEP_MS, latency, status)
    over_time: list[tuple[int, int, str]] = field(default_factory=list)
    sent_per_s: list[tuple[int, int]] = field(default_factory=list)  # (second, SEND_OK sends)
    stored: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # broker -> [(second, stored)]
    curve: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # broker -> [(ms, master log end)]


@dataclass
class Run:
    run_dir: str = ""
    nodes: list[Node] = field(default_factory=list)
    # the replica audit: per node its log's integrity, per master/slave pair its comparison
    integrity: list[NodeIntegrity] = field(default_factory=list)
    pairs: list[PairAudit] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)  # metric samples, oldest first (report.load_metrics)
    final_acks: dict[str, int] = field(default_factory=dict)  # slave -> last ackOffset its master saw
    faults: list[FaultInterval] = field(default_factory=list)
    # None when the run has no history files: the delivery checks do not apply at all
    delivery: DeliveryFindings | None = None
    history: HistoryFindings = field(default_factory=HistoryFindings)
    series: Series = field(default_factory=Series)
    served_dropped: int = 0  # served-pull lines that did not parse (served.load)
    have_served_files: bool = False  # RUN/served/*.jsonl exists
    unlogged_nodes: dict[str, str] = field(default_factory=dict)  # another broker's nodes: no served-pull log
    trace: dict[str, Any] | None = None  # the message-trace summary (report._trace), None: no trace topic

    def group_of_master(self) -> dict[str, str]:
        """master node -> its broker group."""
        return {m.name: b for b, (m, _) in audit.groups(self.nodes).items() if m}

    def attribution(self) -> Attribution:
        """What each fault is blamed for: non-OK sends, acknowledged sends on no node, divergences."""
        return faults.attribute(self.faults, self.series.non_ok, self.history.lost, self.pairs, self.group_of_master())
