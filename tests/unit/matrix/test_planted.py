"""rmqha/matrix/planted.py: the planted-bug runs and what their audits must give."""


def test_the_planted_control_fails_the_matrix_when_the_checkers_miss_a_bug():
    from rmqha.matrix.planted import planted_missed

    caught = {
        "verdicts": [
            {"id": "queues.consistent", "subject": "broker-b", "status": "FAIL"},
            {"id": "replica.consistent", "subject": "broker-a-s", "status": "FAIL"},
        ]
    }
    assert planted_missed(caught) == []
    masked = {
        "verdicts": [
            {"id": "queues.consistent", "subject": "broker-b", "status": "FAIL"},
            {"id": "replica.consistent", "subject": "broker-a-s", "status": "PASS"},
        ]
    }
    assert planted_missed(masked) == ["replica.consistent broker-a-s"]
    assert len(planted_missed({})) == 2


def test_the_planted_runs_cover_every_serving_bug_each_with_its_own_verdict():
    from rmqha.controls.planted import PLANTED_BUGS, SERVING_BUGS
    from rmqha.matrix.planted import ORDERLY_LANE, PLANTED_RUNS

    planted_in = {}  # bug -> the runs it is planted in
    for spec in PLANTED_RUNS:
        for key, bugs in spec["sets"].items():
            assert key.endswith(":plantBug"), key
            for bug in bugs.split(","):
                assert bug in PLANTED_BUGS, bug
                planted_in.setdefault(bug, set()).add(spec["name"])
        if any(i == "delivery.reordered" for i, _s, _st in spec["expect"]):
            assert tuple(spec["extra"]) == ORDERLY_LANE, spec  # only an orderly group is judged for order
    assert set(SERVING_BUGS) <= set(planted_in), set(SERVING_BUGS) - set(planted_in)
    expected = {spec["name"]: {i for i, _s, _st in spec["expect"]} for spec in PLANTED_RUNS}
    want = {
        "reorder-pull": "delivery.reordered",
        "duplicate-pull": "delivery.duplicate",
        "phantom-pull": "delivery.unexpected",
        "offset-regression": "delivery.offset-regression",
    }
    for bug, verdict in want.items():
        (run,) = planted_in[bug]
        assert verdict in expected[run], (bug, run)
    # a verdict another bug of the same run also gives would mask a blind checker
    assert not planted_in["phantom-pull"] & planted_in["offset-regression"]
    assert not planted_in["offset-regression"] & planted_in["duplicate-pull"]
    names = [spec["name"] for spec in PLANTED_RUNS]
    assert len(set(names)) == len(names)


def test_a_serving_planted_run_is_caught_by_group_prefix_and_duplicates_by_a_warn():
    from rmqha.matrix.planted import PLANTED_RUNS, planted_missed

    order = next(s for s in PLANTED_RUNS if s["name"] == "mx-planted-order")
    caught = {
        "verdicts": [
            {"id": "delivery.reordered", "subject": "ChaosOrderlyCG20261127-1", "status": "FAIL"},
            {"id": "delivery.duplicate", "subject": "ChaosCG20261127-1", "status": "WARN"},
            {"id": "delivery.duplicate", "subject": "ChaosOrderlyCG20261127-1", "status": "WARN"},
        ]
    }
    assert planted_missed(caught, order["expect"]) == []
    no_dups = {
        "verdicts": [
            caught["verdicts"][0],
            {"id": "delivery.duplicate", "subject": "ChaosCG20261127-1", "status": "PASS"},
        ]
    }
    assert planted_missed(no_dups, order["expect"]) == ["delivery.duplicate ChaosCG* WARN"]
    wrong_group = {
        "verdicts": [
            {"id": "delivery.reordered", "subject": "ChaosCG20261127-1", "status": "FAIL"},
            caught["verdicts"][1],
        ]
    }
    assert planted_missed(wrong_group, order["expect"]) == ["delivery.reordered ChaosOrderlyCG*"]


def test_a_planted_run_passes_its_bugs_and_the_orderly_lane_to_the_sweep(monkeypatch, tmp_path):
    from rmqha.matrix import planted

    calls = []
    monkeypatch.setattr(planted, "sweep", lambda *a, **kw: calls.append((a, kw)) or {"name": kw["name"]})
    for spec in planted.PLANTED_RUNS:
        planted.planted_run(object(), tmp_path, 0, spec)
    assert [kw["name"] for _a, kw in calls] == [s["name"] for s in planted.PLANTED_RUNS]
    by_name = {kw["name"]: kw for _a, kw in calls}
    assert by_name["mx-planted-order"]["sets"] == {
        "broker-a:plantBug": "reorder-pull",
        "broker-b:plantBug": "duplicate-pull",
    }
    assert by_name["mx-planted-order"]["extra"] == ("--orderly-rate", "40")
    assert by_name["mx-planted"]["extra"] == ()
