"""What a chaos run (rmqha/chaos/run.py) says while it runs: its messages, and the one live status line
(elapsed time, the workload's counters from its progress file, the active fault, the largest slave lag from
the sampler's last round)."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path


def say(msg: str) -> None:
    sys.stdout.write(msg + "\n")
    sys.stdout.flush()


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def last_sample_round(path: Path) -> list[dict]:
    """The rows of the last complete round in the sampler's file (read from its tail)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 32768))
            lines = fh.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []
    rows = []
    for line in lines[1:] if len(lines) > 1 else lines:
        try:
            rows.append(json.loads(line))
        except ValueError:
            pass
    if not rows:
        return []
    last_ts = rows[-1].get("ts")
    return [r for r in rows if r.get("ts") == last_ts]


def slave_lags(rows: list[dict]) -> dict[str, int | None]:
    """slave node -> master maxPhyOffset - slave maxPhyOffset (None when either did not answer)."""
    masters = {r["node"]: r.get("maxPhyOffset") for r in rows if r.get("role") != "SLAVE"}
    out = {}
    for r in rows:
        if r.get("role") == "SLAVE":
            m, s = masters.get(r.get("master")), r.get("maxPhyOffset")
            out[r["node"]] = (m - s) if (m is not None and s is not None) else None
    return out


def fmt_bytes(n: int | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return str(n)


class StatusLine:
    def __init__(self, tty: bool):
        self.tty = tty
        self.width = 0

    def show(self, text: str) -> None:
        if self.tty:
            cols = shutil.get_terminal_size((160, 20)).columns - 1
            text = text[:cols]
            sys.stdout.write("\r" + text + " " * max(0, self.width - len(text)))
            self.width = len(text)
        else:
            sys.stdout.write(text + "\n")
        sys.stdout.flush()

    def log(self, text: str) -> None:
        """A line above the status line."""
        if self.tty and self.width:
            sys.stdout.write("\r" + " " * self.width + "\r")
            self.width = 0
        sys.stdout.write(text + "\n")
        sys.stdout.flush()

    def end(self) -> None:
        if self.tty and self.width:
            sys.stdout.write("\n")
            sys.stdout.flush()
            self.width = 0


def fmt_lag(n: int | None, unit: str = "bytes") -> str:
    """A lag as cluster.lags() counts it: bytes for a classic slave, entries for a DLedger follower."""
    if n is None or unit == "bytes":
        return fmt_bytes(n)
    return f"{n} entr{'y' if n == 1 else 'ies'}"


def status_text(elapsed: float, duration: float, prog: dict | None, fault: str, lags: dict, unit: str = "bytes") -> str:
    p = prog or {}
    known = [v for v in lags.values() if v is not None]
    lag = fmt_lag(max(known), unit) if known else "?"
    if lags and len(known) < len(lags):
        lag += f" ({len(lags) - len(known)} slave down)"
    return (
        f"[{min(elapsed, duration):5.1f}/{duration:g}s] {p.get('phase', 'starting')}: "
        f"sends ok={p.get('ok', 0)} timeout={p.get('timeouts', 0)} not-avail={p.get('not_available', 0)} "
        f"err={p.get('errors', 0)} inflight={p.get('inflight', 0)} | recv={p.get('received', 0)} | "
        f"fault: {fault} | max slave lag {lag}"
    )
