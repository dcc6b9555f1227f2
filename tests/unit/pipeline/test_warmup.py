"""The audit's warm-up run is a valid run folder that audits clean (a warm-up that failed would only
cost time, so this is where a broken one shows)."""
from pipeline import report
from pipeline.warmup import tiny_run, warm_up


def test_the_tiny_run_audits_clean(spark, tmp_path):
    rep = report.run(spark, tiny_run(str(tmp_path)), str(tmp_path / "out"))
    assert not rep.failed, [v.line() for v in rep.verdicts]
    lines = [v.line() for v in rep.verdicts]
    assert any(line.startswith("PASS  no acknowledged send lost: all 40 SEND_OK") for line in lines), lines
    assert any(line.startswith("PASS  replica w: w-0 vs w-1: identical") for line in lines), lines
    warm_up(spark)  # and the wrapper leaves nothing behind and does not raise
