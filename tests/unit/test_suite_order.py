"""tests/conftest.py's hand-out order: the longest files first, and while the Rust client is still being
built in the background, every file that drives it last (so no worker waits on the compiler); a test
that needs the client waits for the build outside its timeout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

from tests import conftest

ROOT = Path(__file__).resolve().parents[2]


def test_the_files_that_drive_the_rust_client_are_found_by_their_text():
    assert conftest.uses_rust_client("tests/integration/test_rust_client.py")
    assert conftest.uses_rust_client("tests/integration/test_dledger_rust_failover.py")  # --client rust
    assert conftest.uses_rust_client("tests/integration/test_message_trace.py")  # the rc fixture
    assert conftest.uses_rust_client("tests/integration/test_acl.py")  # two of its tests take rc
    assert not conftest.uses_rust_client("tests/integration/test_delay_levels.py")
    assert not conftest.uses_rust_client("tests/unit/chaos/test_run_phases.py")  # rc: a parametrize argument
    assert not conftest.uses_rust_client("tests/integration/no_such_file.py")


def test_a_test_or_fixture_asking_for_rc_is_seen_and_an_argument_named_rc_is_not():
    assert conftest.requests_rust_fixture("def test_x(cluster, rc):\n    pass\n")
    assert conftest.requests_rust_fixture("@pytest.fixture\ndef cluster(tmp_path, rc):\n    pass\n")
    assert conftest.requests_rust_fixture("class T:\n    async def test_x(self, rc):\n        pass\n")
    assert not conftest.requests_rust_fixture('@pytest.mark.parametrize("x, rc", [(1, 0)])\ndef test_x(x, rc): pass')
    assert not conftest.requests_rust_fixture('@pytest.mark.parametrize(["rc"], [(0,)])\ndef test_x(rc): pass')
    assert not conftest.requests_rust_fixture("def test_x(cluster):\n    rc = run()\n")
    assert not conftest.requests_rust_fixture("def broken(:")


def test_an_item_needs_the_client_when_the_rc_fixture_is_in_its_closure():
    assert conftest.needs_rust_client(SimpleNamespace(fixturenames=["tmp_path", "cluster", "rc"]))
    assert not conftest.needs_rust_client(SimpleNamespace(fixturenames=["tmp_path", "cluster"]))
    parametrized = SimpleNamespace(fixturenames=["rc"], callspec=SimpleNamespace(params={"rc": 0}))
    assert not conftest.needs_rust_client(parametrized)


def test_only_the_rc_fixture_gets_the_client_and_every_rust_workload_asks_for_it():
    """What makes needs_rust_client complete: no test gets the binary but through `rc`, and a test that
    runs a chaos workload with --client rust (the binary in a subprocess) asks for `rc` too."""
    allowed = {ROOT / "tests/integration/rust_client.py", ROOT / "tests/integration/conftest.py", Path(__file__)}
    files = sorted((ROOT / "tests").rglob("*.py")) + sorted((ROOT / "examples").rglob("*.py"))
    direct = [f for f in files if f not in allowed and "RustClient.get(" in f.read_text()]
    assert direct == [], f"take the `rc` fixture instead of calling RustClient.get(): {direct}"
    # tests/unit's own --client rust runs (chaos/test_rust_workload_args.py) stop before the exec
    real = [f for f in files if ROOT / "tests" / "unit" not in f.parents]
    workloads = [f for f in real if f.name.startswith("test_") and '"--client", "rust"' in f.read_text()]
    assert workloads, "no test runs the Rust workload any more: drop this check"
    blind = [f for f in workloads if not conftest.requests_rust_fixture(f.read_text())]
    assert blind == [], f"these run --client rust without asking for the `rc` fixture: {blind}"


def test_longest_first_and_late_files_after_every_other():
    durations = {"a.py": 1, "b.py": 50, "c.py": 10, "rust_d.py": 100}
    scopes = ["a.py", "b.py", "c.py", "e.py", "rust_d.py"]  # e.py: unknown, counted as 60 s
    assert conftest.hand_out_order(scopes, durations, set()) == ["rust_d.py", "e.py", "b.py", "c.py", "a.py"]
    assert conftest.hand_out_order(scopes, durations, {"rust_d.py"}) == ["e.py", "b.py", "c.py", "a.py", "rust_d.py"]


def test_a_pending_build_is_seen_unless_a_binary_is_given(monkeypatch, tmp_path):
    monkeypatch.setattr(conftest, "RUST_BIN", tmp_path / "absent")
    monkeypatch.delenv("RUST_CLIENT_BIN", raising=False)
    assert conftest.rust_client_pending()
    monkeypatch.setenv("RUST_CLIENT_BIN", "/elsewhere/rmq-rust-client")
    assert not conftest.rust_client_pending()
    built = tmp_path / "built"
    built.write_text("#!/bin/sh\n")
    built.chmod(0o755)
    monkeypatch.delenv("RUST_CLIENT_BIN")
    monkeypatch.setattr(conftest, "RUST_BIN", built)
    assert not conftest.rust_client_pending()


# -- the real thing: pytest-xdist with the scheduler and the wait hook, on a small made-up suite ---------
SUITE_CONFTEST = """
    import json, os, subprocess, sys, threading
    from pathlib import Path

    import pytest

    sys.path.insert(0, {root!r})
    from tests import conftest as suite
    from tests.integration import rust_client

    HERE = Path(__file__).parent
    suite.RUST_BIN = HERE / "never-built"
    rust_client.BUILD_PID = HERE / "build.pid"
    pytest_runtest_protocol = suite.pytest_runtest_protocol
    pytest_runtest_logreport = suite.pytest_runtest_logreport
    pytest_terminal_summary = suite.pytest_terminal_summary


    def pytest_xdist_make_scheduler(config, log):
        return suite.longest_first(config, log, json.loads((HERE / "durations.json").read_text()),
                                   uses_rust=lambda scope: "rust" in scope)


    def start_build(seconds):
        # a stand-in for clients/rust/build.sh --background: a live process named in the pid file
        build = subprocess.Popen(["sleep", str(seconds)])
        rust_client.BUILD_PID.write_text(str(build.pid))
        threading.Thread(target=build.wait, daemon=True).start()  # reaped when it ends, as make reaps build.sh


    @pytest.fixture(autouse=True)
    def record(request):
        with open(HERE / "ran.txt", "a") as f:
            f.write(request.node.nodeid + "\\n")


    @pytest.fixture
    def rc():
        return "the client"
"""


def run_suite(tmp_path: Path, files: dict[str, str], durations: dict[str, float]) -> tuple[int, str, list[str]]:
    (tmp_path / "conftest.py").write_text(textwrap.dedent(SUITE_CONFTEST.format(root=str(ROOT))))
    (tmp_path / "pytest.ini").write_text("[pytest]\ntimeout = 1\n")
    (tmp_path / "durations.json").write_text(json.dumps(durations))
    for name, body in files.items():
        (tmp_path / name).write_text(textwrap.dedent(body))
    env = {k: v for k, v in os.environ.items() if k not in ("RUST_CLIENT_BIN", "PYTEST_XDIST_WORKER", "PYTEST_ADDOPTS")}
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "1", "--dist", "loadfile", "-p", "no:cacheprovider", "-q"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    ran = (tmp_path / "ran.txt").read_text().split() if (tmp_path / "ran.txt").exists() else []
    return p.returncode, p.stdout + p.stderr, ran


def test_xdist_runs_whole_files_in_hand_out_order_and_the_rust_tests_wait_outside_their_timeout(tmp_path):
    """One worker runs the files in the order they are handed out: e (unknown: 60 s), b, c, a, inside, and
    while the build runs, rust_d last though it is the longest. test_inside starts a 6 s build and waits
    for it in its body, and its 1 s timeout fails it (the control: the timeout is real); rust_d's tests
    need the client and wait for the rest of the build, so they pass only if the wait is outside."""
    files = {
        "test_a.py": "def test_a0(): pass\n",
        "test_b.py": "def test_b0(): pass\ndef test_b1(): pass\ndef test_b2(): pass\n",
        "test_c.py": "def test_c0(): pass\ndef test_c1(): pass\n",
        "test_e.py": "def test_e0(): pass\ndef test_e1(): pass\n",
        "test_inside.py": """
            from conftest import start_build
            from tests.integration.rust_client import wait_for_background_build
            def test_waits_in_its_body():
                start_build(6)
                wait_for_background_build()
        """,
        "test_rust_d.py": """
            from tests.integration.rust_client import background_build_pid
            def test_d0(rc): assert background_build_pid() is None, "ran before the build ended"
            def test_d1(rc): pass
        """,
    }
    durations = {"test_a.py": 1, "test_b.py": 50, "test_c.py": 10, "test_inside.py": 0.5, "test_rust_d.py": 100}
    rc, out, ran = run_suite(tmp_path, files, durations)
    assert rc == 1 and "1 failed, 10 passed" in out, out
    assert "FAILED test_inside.py::test_waits_in_its_body - Failed: Timeout" in out, out
    files_in_order = [n.split("::")[0] for n in ran]
    assert files_in_order == (
        ["test_e.py"] * 2
        + ["test_b.py"] * 3
        + ["test_c.py"] * 2
        + ["test_a.py", "test_inside.py"]
        + ["test_rust_d.py"] * 2
    )
    assert "for the Rust client's build (not in its timeout): test_rust_d.py::test_d0" in out, out
