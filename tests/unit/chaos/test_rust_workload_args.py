"""The chaos workload hands the Rust client the same contract as the Python one: the run's drain signal
(the consumer stays until every group is drained) and --trace; options only the Python workload has are
refused, not dropped."""

import os

import pytest

from rmqha.chaos import workload


def rust_argv(monkeypatch, tmp_path, *extra):
    binary = tmp_path / "rmq-rust-client"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    monkeypatch.setenv("RUST_CLIENT_BIN", str(binary))
    seen = {}

    def fake_execv(path, argv):
        seen["argv"] = argv
        raise SystemExit(0)

    monkeypatch.setattr(os, "execv", fake_execv)
    with pytest.raises(SystemExit):
        workload.main([str(tmp_path / "run"), "127.0.0.1:9876", "--client", "rust", "--run-id", "r1", *extra])
    return seen["argv"]


def test_the_drain_signal_and_trace_reach_the_rust_client(monkeypatch, tmp_path):
    argv = rust_argv(monkeypatch, tmp_path, "--drain-signal", str(tmp_path / "drain"), "--trace")
    assert argv[argv.index("--drain-signal") + 1] == str(tmp_path / "drain")
    assert "--trace" in argv and argv[argv.index("workload") - 2 : argv.index("workload")] == [
        "--namesrv",
        "127.0.0.1:9876",
    ]


def test_without_them_nothing_extra_is_passed(monkeypatch, tmp_path):
    argv = rust_argv(monkeypatch, tmp_path)
    assert "--drain-signal" not in argv and "--trace" not in argv


@pytest.mark.parametrize("extra", [["--late-consumer-after-heal"], ["--late-consumer-at", "5"]])
def test_python_only_options_are_refused_for_rust(monkeypatch, tmp_path, extra):
    with pytest.raises(SystemExit) as e:
        workload.main([str(tmp_path / "run"), "127.0.0.1:9876", "--client", "rust", *extra])
    assert e.value.code == 2


def test_trace_needs_the_rust_client(tmp_path):
    with pytest.raises(SystemExit) as e:
        workload.main([str(tmp_path / "run"), "127.0.0.1:9876", "--trace"])
    assert e.value.code == 2


def test_the_live_status_counts_a_dledger_lag_in_entries():
    from rmqha.chaos.run_status import fmt_lag, status_text

    assert fmt_lag(3, "entries") == "3 entries" and fmt_lag(1, "entries") == "1 entry"
    assert "max slave lag 12 entries" in status_text(1, 10, {}, "none", {"n1": 12, "n2": 0}, "entries")
    assert "max slave lag 2.0KiB" in status_text(1, 10, {}, "none", {"a-s": 2048})
