"""The official 5.x Python client (rocketmq-python-client 5.1.2) from its own environment,
.venv-client5 (make venv-client5), through client5_worker.py: each call is one worker process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYTHON = ROOT / ".venv-client5" / "bin" / "python"
WORKER = Path(__file__).with_name("client5_worker.py")


def require() -> None:
    if not PYTHON.exists():
        pytest.skip("the 5.x client's environment is missing: run make venv-client5")


def run(job: dict, timeout: float = 120) -> list[dict]:
    """The worker's JSON lines (the last is {"done": true})."""
    require()
    out = subprocess.run(
        [str(PYTHON), str(WORKER), json.dumps(job)], capture_output=True, text=True, timeout=timeout, cwd="/tmp"
    )
    lines = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
    if not lines or not lines[-1].get("done"):
        sys.stderr.write(out.stderr[-4000:])
        raise AssertionError(f"the 5.x client worker did not finish (exit {out.returncode}): {out.stdout[-2000:]}")
    fatal = [x for x in lines if x.get("fatal")]
    assert not fatal, (fatal, out.stderr[-3000:])
    return lines[:-1]


def produce(endpoint: str, topic: str, sends: list[dict], **kw) -> list[dict]:
    return [x for x in run({"op": "produce", "endpoint": endpoint, "topic": topic, "sends": sends, **kw}) if "i" in x]


def simple(endpoint: str, group: str, topic: str, expect: int, **kw) -> list[dict]:
    return run(
        {"op": "simple", "endpoint": endpoint, "group": group, "topic": topic, "expect": expect, **kw},
        kw.get("deadline_s", 60) + 60,
    )


def push(endpoint: str, group: str, topic: str, expect: int, **kw) -> list[dict]:
    return run(
        {"op": "push", "endpoint": endpoint, "group": group, "topic": topic, "expect": expect, **kw},
        kw.get("deadline_s", 60) + 60,
    )
