"""`python -m rmqha.pipeline --serve`'s loop (rmqha.chaos.matrix's auditor) without a JVM: one answer line per input
line, flushed as it is made, a bad line an error for that line only, one Spark session for all and
stopped at the end. The same loop audits a real cluster run in tests/integration/test_audit_cluster_run.py (make test-spark)."""

import io
import json
from types import SimpleNamespace

from rmqha.pipeline import __main__ as cli
from rmqha.pipeline import report, spark


class Session:
    started = 0

    def __init__(self):
        Session.started += 1
        self.stopped = False

    def stop(self):
        self.stopped = True


def test_each_line_gets_one_answer_and_one_session_serves_all(tmp_path, monkeypatch):
    runs = []
    for name in ("a", "b"):
        (tmp_path / name / "nodes").mkdir(parents=True)
    sessions = []
    monkeypatch.setattr(spark, "get_spark", lambda *a, **k: sessions.append(Session()) or sessions[-1])

    def audit(session, run, out, range_bytes):
        runs.append((session, run, out))
        if run.endswith("b"):
            raise ValueError("bad commit log")
        return SimpleNamespace(failed=True, valid=False, verdicts=[SimpleNamespace(line=lambda: "FAIL  x: y")])

    monkeypatch.setattr(report, "run", audit)
    lines = [f"{tmp_path / 'missing'}\n", "\n", f"{tmp_path / 'a'}\t{tmp_path / 'out'}\n", f"{tmp_path / 'b'}\n"]
    out = io.StringIO()
    assert cli.serve(lines=lines, out=out) == 0
    answers = [json.loads(x[len(cli.RESULT) :]) for x in out.getvalue().splitlines()]
    assert len(answers) == 3 and all(x.startswith(cli.RESULT) for x in out.getvalue().splitlines())
    assert "not a run folder" in answers[0]["error"]
    assert answers[1] == {
        "run": str(tmp_path / "a"),
        "out": str(tmp_path / "out"),
        "failed": True,
        "valid": False,
        "verdicts": ["FAIL  x: y"],
    }
    assert answers[2] == {"run": str(tmp_path / "b"), "error": "ValueError: bad commit log"}
    assert len(sessions) == 1 and sessions[0].stopped  # started at the first run folder, stopped at the end
    assert [r[2] for r in runs] == [str(tmp_path / "out"), str(tmp_path / "b" / "report")]
