"""rmqha/matrix/cli.py: --from-runs over run folders that did not happen or were not audited."""

from rmqha.cluster import runfolder as rf
from rmqha.matrix import cli, plan, render


from .fabricate import audited_summary, fabricate, fault


def test_a_run_that_did_not_happen_or_was_not_audited_is_never_ok(tmp_path, monkeypatch):
    import json

    # --from-runs over two run folders that both hold a passing summary: one of them is an earlier run's
    # leftover (the matrix recorded its sweep as 1 s): it is not judged, and the matrix fails
    monkeypatch.setattr(rf, "run_dir", lambda name: tmp_path / "runs" / name)
    out = tmp_path / "out"
    out.mkdir()
    planned = [plan.run_name("2m-2s-sync", "ASYNC_FLUSH", "local", 1, "ours", f) for f in plan.LOCAL_SWEEPS]
    f1 = fault(1, "kill-slave", role="slave")
    for name in planned:
        (tmp_path / "runs" / name / "report").mkdir(parents=True)
        fabricate(
            tmp_path / "runs" / name,
            [(f"a{k}", "broker-a", [("SEND_OK", 1500, 1510)]) for k in range(5)],
            [(f"a{k}", None, 3000) for k in range(5)],
        )
        (tmp_path / "runs" / name / "report" / "summary.json").write_text(
            json.dumps(audited_summary([f1], {"#1 kill-slave broker-a-s": 5}, 5))
        )
    (out / "matrix.json").write_text(
        json.dumps({"runs": [{"name": planned[0], "took_s": 400, "rc": 0}, {"name": planned[1], "took_s": 1, "rc": 0}]})
    )
    argv = ["--from-runs", "--seeds", "1", "--configs", "2m-2s-sync/ASYNC_FLUSH", "--out", str(out)]
    assert cli.main(argv) == 1
    md = (out / "matrix.md").read_text()
    assert "Runs: 2 planned, 1 audited and judged, 1 not run, 0 not audited" in md
    assert f"{planned[1]} 1 s (not run (took 1 s))" in md and f"{planned[0]} 400 s (audit ok)" in md
    assert "| 1/1 |" in md  # the kill-slave cell holds only the audited run's sample
    # with both runs real, the same folders pass
    (out / "matrix.json").write_text(json.dumps({"runs": [{"name": n, "took_s": 400, "rc": 0} for n in planned]}))
    assert cli.main(argv) == 0
    assert "| 2/2 | 10 | 10 | 0 | 0 | 0 | 0 | 0 |" in (out / "matrix.md").read_text()  # acked, delivered
    # the same runs audited without the delivery figures: their cells are "not audited", and the matrix fails
    for name in planned:
        p = tmp_path / "runs" / name / "report" / "summary.json"
        p.write_text(json.dumps({k: v for k, v in json.loads(p.read_text()).items() if k != "delivery"}))
    assert cli.main(argv) == 1
    assert "**not audited**" in (out / "matrix.md").read_text()
    assert render.run_state({"rc": 0, "took_s": 1, "audit_failed": False, "samples": [1]}) == "not run (took 1 s)"
    assert render.run_state({"rc": 3, "took_s": 0}) == "not run (exit 3)"
    assert render.run_state({"rc": 0, "took_s": 300}).startswith("not audited")
    assert render.run_state({"rc": 0, "took_s": 300, "audit_error": "boom"}) == "not audited (boom)"
    assert render.run_state({"rc": 0, "took_s": 300, "audit_failed": False, "samples": []}).startswith("not run")
    assert render.run_state({"rc": 0, "took_s": 300, "audit_failed": True, "samples": [1]}) == "audit FAIL"
