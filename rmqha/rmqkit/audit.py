"""The audit (pipeline/) over a run folder, as a child process: `python -m rmqha.pipeline RUN --out OUT`.

A child process keeps the JVM and Spark's threads out of the caller (a pytest worker, an application)
and costs the same ~30 s as `make audit`. The result carries every verdict line; check() raises
AuditFailed (an AssertionError, so pytest shows it as a test failure) on a FAIL verdict or when the
audit could not run, naming the report and what to do.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from rmqha.cluster import ClusterError

REPO_ROOT = Path(__file__).resolve().parents[2]
VERDICTS = ("PASS", "WARN", "FAIL", "INFO")


class AuditFailed(AssertionError):
    """A guarantee failed (a FAIL verdict), a checker could not judge (UNKNOWN), or the audit could not read
    the run folder."""


@dataclass
class AuditResult:
    run_dir: Path
    report: Path
    returncode: int
    output: str
    seconds: float
    verdicts: list[str] = field(default_factory=list)  # "FAIL  name: detail" lines

    @property
    def failed(self) -> bool:
        return self.returncode != 0

    @property
    def failures(self) -> list[str]:
        return [v for v in self.verdicts if v.startswith(("FAIL", "UNKNOWN"))]  # UNKNOWN: a checker crashed

    def check(self) -> "AuditResult":
        if self.returncode == 1:
            raise AuditFailed(
                f"the audit of {self.run_dir} found a broken guarantee (report: {self.report}):\n  "
                + "\n  ".join(self.failures or self.verdicts)
            )
        if self.returncode != 0:
            raise AuditFailed(
                f"the audit of {self.run_dir} did not run (exit {self.returncode}):\n" + self.output[-3000:]
            )
        return self


def java_missing() -> str | None:
    """Why Spark cannot start here (no Java), with what to do; None when Java is there."""
    home = os.environ.get("JAVA_HOME")
    if home and Path(home, "bin", "java").exists():
        return None
    if shutil.which("java"):
        return None
    return (
        "the audit runs Spark, which needs Java 17 and finds none (no `java` on PATH, no JAVA_HOME): "
        "apt-get install openjdk-17-jre-headless, or set JAVA_HOME; or drop audit=True from the test"
    )


def run_audit(
    run_dir: str | Path, out: str | Path | None = None, master: str | None = None, timeout: float = 600.0
) -> AuditResult:
    run_dir = Path(run_dir).resolve()
    report = Path(out).resolve() if out else run_dir / "report"
    why = java_missing()
    if why:
        raise ClusterError(why)
    cmd = [sys.executable, "-m", "rmqha.pipeline", str(run_dir), "--out", str(report)]
    if master:
        cmd += ["--master", master]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise AuditFailed(f"the audit of {run_dir} did not finish in {timeout:.0f}s: {' '.join(cmd)}") from None
    out_text = proc.stdout + ("\n" + proc.stderr[-4000:] if proc.returncode not in (0, 1) else "")
    verdicts = [line for line in proc.stdout.splitlines() if line[:4].strip() in VERDICTS and line[4:6] == "  "]
    return AuditResult(run_dir, report / "report.md", proc.returncode, out_text, time.monotonic() - t0, verdicts)
