"""Faults in the run folder: every inject and heal of the nemesis as one JSON line.

    RUN/faults/faults-<run id>.jsonl, one object per line:

    {"ts_ms": 1763770001234,          Unix time in ms when the operation ended (injected / healed)
     "start_ms": 1763770001200,       when it began (a power loss polls, kills and truncates: ~0.1 s)
     "op": "inject" | "heal",
     "id": 3,                         the fault's number in the run; an inject and its heal share it
     "kind": "power-loss",            a name from the fault vocabulary (rmqha/runs/faults.py)
     "target": "broker-a",            the node (or, for link faults, the node whose link it is)
     "link": "broker-a-s-ha" | null,  the Toxiproxy proxy, for link faults
     "group": "broker-a",             the broker group (brokerName)
     "role": "master" | "slave",
     "params": {...},                 what the schedule chose (latency ms, cut mode, ...)
     "result": "ok" | "error",
     "error": null | "KillError: ...",
     "info": {...}}                   what the operation measured (power loss: durableOffset,
                                      droppedBytes, ...)

The pipeline (rmqha/pipeline/faults.py) pairs each inject with its heal by id: the fault was active from the
inject's start_ms to the heal's ts_ms (to the end of the run when no heal was written).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path


def now_ms() -> int:
    return int(time.time() * 1000)


class FaultLog:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "a")
        self._lock = threading.Lock()

    def write(self, op: str, fault, start_ms: int, error: str | None = None, info: dict | None = None) -> dict:
        rec = {
            "ts_ms": now_ms(),
            "start_ms": start_ms,
            "op": op,
            "id": fault.id,
            "kind": fault.kind,
            "target": fault.target,
            "link": fault.link,
            "group": fault.group,
            "role": fault.role,
            "params": fault.params,
            "result": "error" if error else "ok",
            "error": error,
            "info": info or {},
        }
        with self._lock:
            self._fh.write(json.dumps(rec) + "\n")
            self._fh.flush()
            os.fsync(self._fh.fileno())
        return rec

    def close(self) -> None:
        with self._lock:
            self._fh.close()


def read_faults(run_dir: str | Path) -> list[dict]:
    """Every fault record under RUN/faults/, in file then line order."""
    out = []
    for p in sorted(Path(run_dir, "faults").glob("*.jsonl")):
        for line in p.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out
