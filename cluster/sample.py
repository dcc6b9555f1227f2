"""`python -m cluster sample`: replication offsets every N ms into RUN_DIR/metrics/samples.jsonl.

One line per node per round:
    {"ts": 1763770000.123, "node": "broker-a", "brokerName": "broker-a", "brokerId": 0,
     "role": "SYNC_MASTER", "up": true, "maxPhyOffset": 4096,
     "slaves": [{"addr": "127.0.0.1:53012", "ackOffset": 4096}]}            (masters)
    {..., "role": "SLAVE", "maxPhyOffset": 4096, "reportedOffset": 4096,
     "haState": "CONNECTED", "master": "broker-a"}                            (slaves)
ts is the Unix time (seconds, float) when the round started; a node that did not answer has
"up": false and null offsets.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from .backend import Backend
from .status import collect


def sample_rows(state: dict, ts: float) -> list[dict]:
    cs = collect(state, None, with_namesrv=False, timeout=0.5)
    rows = []
    for n in cs.nodes:
        s = n.status or {}
        row = {"ts": round(ts, 3), "node": n.name, "brokerName": n.spec.get("brokerName"),
               "brokerId": n.spec.get("brokerId"), "role": n.role, "up": n.up, "maxPhyOffset": n.max_offset}
        if n.is_master:
            row["slaves"] = [{"addr": sl.get("addr"), "ackOffset": sl.get("slaveAckOffset")}
                             for sl in (s.get("ha") or {}).get("slaves") or []]
        else:
            hc = s.get("haClient") or {}
            row.update(reportedOffset=hc.get("currentReportedOffset"), haState=hc.get("state"),
                       master=n.spec.get("master"))
        rows.append(row)
    return rows


def run_sampler(state: dict, backend: Backend | None, path: Path, *, interval_ms: int = 1000,
                duration: float | None = None, count: int | None = None, out=None) -> int:
    """Append samples until duration/count is reached or Ctrl-C. Returns the number of rounds."""
    path.parent.mkdir(parents=True, exist_ok=True)
    interval = interval_ms / 1000.0
    start = time.monotonic()
    rounds = 0
    next_at = start
    with open(path, "a") as fh:
        try:
            while True:
                ts = time.time()
                for row in sample_rows(state, ts):
                    fh.write(json.dumps(row) + "\n")
                fh.flush()
                rounds += 1
                if count is not None and rounds >= count:
                    break
                next_at += interval
                if duration is not None and next_at - start > duration:
                    break
                time.sleep(max(0.0, next_at - time.monotonic()))
        except KeyboardInterrupt:
            pass
    if out is not None:
        out.write(f"{rounds} rounds written to {path}\n")
    return rounds
