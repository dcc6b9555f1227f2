"""The matrix's auditor (rmqha.chaos.auditor.Auditor) against a stand-in for `python -m rmqha.pipeline --serve`: each
run folder handed to the child, each answer line read back (other output skipped), a failed audit or a
dead child reported for that run only, and the child started again for the next."""

import sys

from rmqha.matrix.auditor import Auditor

FAKE_SERVE = r"""
import json, os, sys
for line in sys.stdin:
    run, _, out = line.rstrip("\n").partition("\t")
    name = os.path.basename(run)
    print("a line that is not an answer", flush=True)
    if name == "dies":
        sys.exit(3)
    if name == "broken":
        answer = {"run": run, "error": "FileNotFoundError: no nodes/"}
    else:
        answer = {"run": run, "out": out, "failed": name == "bad", "verdicts": [f"PASS {name} -> {out}"]}
    print("audited " + json.dumps(answer), flush=True)
"""


def test_each_run_is_audited_by_the_child_and_a_dead_child_is_replaced(tmp_path, monkeypatch):
    monkeypatch.setenv("CLUSTER_RUN_ROOT", str(tmp_path / "run"))
    script = tmp_path / "serve.py"
    script.write_text(FAKE_SERVE)
    said = []
    auditor = Auditor(tmp_path, said.append, command=[sys.executable, str(script)])
    for name in ("good", "bad", "broken", "dies", "again"):
        auditor.submit(name)
    auditor.close()
    done = auditor.done
    assert done["good"]["audit_failed"] is False and done["bad"]["audit_failed"] is True
    assert done["broken"]["audit_error"] == "RuntimeError: FileNotFoundError: no nodes/"
    assert done["dies"]["audit_error"].startswith("RuntimeError: the audit process ended (exit code 3)")
    assert done["again"]["audit_failed"] is False  # a new child took over
    report = tmp_path / "run" / "good" / "report"
    assert (tmp_path / "good.audit.txt").read_text() == f"PASS good -> {report}\n"
    assert not (tmp_path / "broken.audit.txt").exists()
    assert any("audit of dies failed" in s for s in said)
