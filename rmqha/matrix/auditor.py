"""The matrix's auditor: one `python -m rmqha.pipeline --serve` for every run (tests/unit/matrix/test_auditor.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

from rmqha.cluster import runfolder as rf


AUDIT_COMMAND = [sys.executable, "-m", "rmqha.pipeline", "--serve"]
AUDITED = "audited "  # rmqha/pipeline/__main__.py's RESULT: the prefix of an answer line of `pipeline --serve`


class Auditor:
    """Audits the matrix's runs in one Spark session of its own, each as soon as its sweep has ended, while
    the next sweeps run: one JVM start for the whole matrix instead of one per run. The session lives in
    a child, `python -m rmqha.pipeline --serve` (chaos/ does not import pipeline/), started at the first run
    and started again if it dies."""

    def __init__(self, out: Path, say, command: list[str] | None = None):
        import queue

        self.out, self.say = out, say
        self.command = command or AUDIT_COMMAND
        self.q: "queue.Queue" = queue.Queue()
        self.done: dict[str, dict] = {}
        self.thread = threading.Thread(target=self._loop, name="auditor", daemon=True)
        self.thread.start()

    def submit(self, name: str) -> None:
        self.q.put(name)

    def close(self) -> None:
        self.q.put(None)
        self.thread.join()

    def _ask(self, proc, rd: Path) -> dict:
        """Hand one run folder to the child and wait for its answer line."""
        proc.stdin.write(f"{rd}\t{rd / 'report'}\n")
        proc.stdin.flush()
        for line in proc.stdout:
            if line.startswith(AUDITED):
                return json.loads(line[len(AUDITED) :])
        raise RuntimeError(f"the audit process ended (exit code {proc.wait()}) before answering")

    def _loop(self) -> None:
        proc = None
        while True:
            name = self.q.get()
            if name is None:
                break
            rd = rf.run_dir(name)
            t0 = time.monotonic()
            try:
                if proc is None or proc.poll() is not None:
                    proc = subprocess.Popen(
                        self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
                    )
                answer = self._ask(proc, rd)
                if "error" in answer:
                    raise RuntimeError(answer["error"])
                (self.out / f"{name}.audit.txt").write_text("\n".join(answer["verdicts"]) + "\n")
                self.done[name] = {"audit_s": round(time.monotonic() - t0), "audit_failed": answer["failed"]}
                self.say(
                    f"    audited {name} in {time.monotonic() - t0:.0f} s: {'FAIL' if answer['failed'] else 'pass'}"
                )
            except Exception as e:  # the run is reported as not audited, the matrix goes on
                self.done[name] = {"audit_s": round(time.monotonic() - t0), "audit_error": f"{type(e).__name__}: {e}"}
                self.say(f"    audit of {name} failed: {type(e).__name__}: {e}")
        if proc is not None:
            proc.stdin.close()
            proc.wait()
