"""How pytest-xdist hands out the suite: whole files (`--dist loadfile`), the longest first.

xdist's own order is by number of tests, so the one-test files that each run a real cluster for two or
three minutes went last and the run ended with one worker busy and the others idle. Here files are
handed out longest first (the classic longest-processing-time rule), from tests/durations.json: seconds
per file, measured by the last full run (`make test-durations` rewrites it; this hook writes the live
figures to build/test-durations.json after every run, and those win when present). A file missing from
both comes first: unknown is treated as long, so a new slow test cannot hide at the end. While the Rust
client is still being built in the background (`make test` starts it: clients/rust/build.sh
--background), the files that use it go last instead, so no worker waits on the compiler while Python
files are left to run; the order is taken again when the build ends. A test that needs the client (the
`rc` fixture in its closure) waits for the build before pytest-timeout's timer starts, so a slow build
makes a slow run, never a red one.

Files stay the unit, tests/unit/pipeline's too: handed to one worker whole, that package ran 1,400 s on
it alone (measured), far past the budget. Its Spark session stays session-scoped: a package-scoped one
(stopped when a worker moved on) paid the JVM start and Spark's warm-up once per file, and the whole run
took 21.5 min against 11.8 min before (measured on fresh clones; more tests too, so not all of it).
"""

from __future__ import annotations

import ast
import functools
import json
import os
import sys
import time
from collections import OrderedDict, defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "tests" / "durations.json"
MEASURED = ROOT / "build" / "test-durations.json"
UNKNOWN_S = 60.0
RUST_BIN = ROOT / "clients" / "rust" / "target" / "release" / "rmq-rust-client"
RUST_FIXTURE = "rc"  # tests/integration/conftest.py: every test that needs the Rust client asks for it
RUST_MARKS = ("RustClient", '"--client", "rust"')


def needs_rust_client(item) -> bool:
    """Whether a collected test needs the Rust client: the `rc` fixture is in its fixture closure (pytest
    resolves that, through other fixtures too), as the fixture rather than a parametrize argument."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    return RUST_FIXTURE in getattr(item, "fixturenames", ()) and RUST_FIXTURE not in params


def requests_rust_fixture(source: str) -> bool:
    """Whether a module's source has a test or fixture with a parameter named `rc` that is not one of its
    own parametrize arguments: the controller's view of needs_rust_client (it sees node ids only)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if RUST_FIXTURE not in [a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs]:
            continue
        if not any(RUST_FIXTURE in _parametrized(d) for d in node.decorator_list):
            return True
    return False


def _parametrized(decorator: ast.expr) -> list[str]:
    if isinstance(decorator, ast.Call) and getattr(decorator.func, "attr", None) == "parametrize" and decorator.args:
        names = decorator.args[0]
        if isinstance(names, ast.Constant) and isinstance(names.value, str):
            return [n.strip() for n in names.value.split(",")]
        if isinstance(names, (ast.List, ast.Tuple)):
            return [e.value for e in names.elts if isinstance(e, ast.Constant)]
    return []


@functools.lru_cache(maxsize=None)
def uses_rust_client(scope: str) -> bool:
    """Whether a test file drives the Rust client: named for it, naming RustClient or running a chaos
    workload with --client rust, or asking for the `rc` fixture."""
    if "rust" in Path(scope).name:
        return True
    try:
        text = (ROOT / scope).read_text()
    except OSError:
        return False
    return any(m in text for m in RUST_MARKS) or requests_rust_fixture(text)


def rust_client_pending() -> bool:
    return not os.access(RUST_BIN, os.X_OK) and not os.environ.get("RUST_CLIENT_BIN")


def load_durations() -> dict[str, float]:
    out: dict[str, float] = {}
    for path in (COMMITTED, MEASURED):  # measured on this machine overrides the committed table
        try:
            out.update({k: float(v) for k, v in json.loads(path.read_text()).items()})
        except (OSError, ValueError, AttributeError):
            pass
    return out


def hand_out_order(scopes, durations: dict[str, float], late: set[str]) -> list[str]:
    """The files in the order workers get them: the longest first, the `late` ones after all others."""
    return sorted(scopes, key=lambda s: (s in late, -durations.get(s, UNKNOWN_S)))


def longest_first(config, log, durations, uses_rust=uses_rust_client, pending=rust_client_pending):
    """xdist's file scheduler, handing files out in hand_out_order. The order is taken again whenever the
    Rust build's state changes: while it runs its files wait at the end; once it is done they take their
    place by length among the files not yet handed out.

    It reorders xdist's work queue and nothing else: the workers run tests by their index in their own
    collection, so that list must stay in collection order (reordering it ran other files' tests than
    the scheduler meant, a file's tests split across workers and the Rust files early)."""
    from xdist.scheduler import LoadFileScheduling

    class LongestFirst(LoadFileScheduling):
        ordered_while_pending: bool | None = None

        def _assign_work_unit(self, node) -> None:
            waiting = pending()
            if waiting is not self.ordered_while_pending:
                late = {s for s in self.workqueue if uses_rust(s)} if waiting else set()
                order = hand_out_order(self.workqueue, durations, late)
                self.workqueue = OrderedDict((s, self.workqueue[s]) for s in order)
                self.ordered_while_pending = waiting
            scope = next(iter(self.workqueue))
            if waiting and uses_rust(scope):
                say(
                    config,
                    f"{scope} waits on {node.gateway.id} for the Rust client's build (log build/rust-client.log)",
                )
            super()._assign_work_unit(node)

    return LongestFirst(config, log)


def say(config, line: str) -> None:
    """A line on the terminal now (the controller's, or this process's without xdist), or stderr."""
    tr = config.pluginmanager.get_plugin("terminalreporter")
    if tr is not None and not os.environ.get("PYTEST_XDIST_WORKER"):
        tr.write_line(line)
    else:
        sys.stderr.write(line + "\n")


@pytest.hookimpl(optionalhook=True)  # runs without xdist too (-p no:xdist, the mutation tester)
def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") != "loadfile":
        return None
    return longest_first(config, log, load_durations())


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """A test that needs the Rust client waits here for its background build: tryfirst puts this wrapper
    outside pytest-timeout's, whose timer starts after it, so the wait (minutes on a fresh machine) is not
    counted against the test's timeout. The seconds waited are reported at the end."""
    if needs_rust_client(item) and rust_client_pending():
        from tests.integration.rust_client import RustClientError, wait_for_background_build

        started = time.monotonic()
        try:
            wait_for_background_build(say=lambda line: say(item.config, line))
        except RustClientError as e:  # past the deadline: the `rc` fixture fails the test saying so
            say(item.config, str(e))
        item.user_properties.append(("rust_build_wait_s", round(time.monotonic() - started, 1)))
    yield


_seconds: dict[str, float] = defaultdict(float)
_cpu: dict[str, float] = defaultdict(float)
_waits: list[tuple[str, float]] = []
CPU_MEASURED = ROOT / "build" / "test-cpu.json"
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def tree_cpu_seconds(root: int | None = None) -> float:
    """CPU seconds (user + system) of this process, the children it reaped, and every live descendant
    (a Spark JVM, broker processes), from /proc. Containers run under dockerd and are not counted.

    Under a loaded run a file's wall time says more about its neighbours than about itself (the Raft
    property tests took 9 s alone and 181 s in make test); CPU seconds are what the budget is made of."""
    root = root or os.getpid()
    children: dict[int, list[int]] = defaultdict(list)
    times: dict[int, float] = {}
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        children[int(fields[1])].append(pid)  # fields[1]: ppid (field 4 of stat)
        times[pid] = sum(int(x) for x in fields[11:15]) / _TICK  # utime stime cutime cstime
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += times.get(pid, 0.0)
        todo.extend(children.get(pid, ()))
    return total


_last_cpu = [tree_cpu_seconds()]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when == "teardown":
        now = tree_cpu_seconds()
        outcome.get_result().user_properties.append(("cpu_s", round(now - _last_cpu[0], 3)))
        _last_cpu[0] = now


def pytest_runtest_logreport(report):
    # On the controller this sees every worker's reports: setup, call and teardown all count.
    scope = report.nodeid.split("::", 1)[0]
    _seconds[scope] += report.duration
    _cpu[scope] += sum(v for k, v in report.user_properties if k == "cpu_s")
    if report.when == "setup":
        _waits.extend((report.nodeid, v) for k, v in report.user_properties if k == "rust_build_wait_s" and v >= 1)


def pytest_terminal_summary(terminalreporter):
    for nodeid, seconds in _waits:
        terminalreporter.write_line(f"waited {seconds:g} s for the Rust client's build (not in its timeout): {nodeid}")


def pytest_sessionfinish(session, exitstatus):
    if os.environ.get("PYTEST_XDIST_WORKER") or not _seconds or exitstatus not in (0, 1):
        return
    try:
        MEASURED.parent.mkdir(exist_ok=True)
        merged = load_durations()
        merged.update({k: round(v, 1) for k, v in _seconds.items()})
        MEASURED.write_text(json.dumps(dict(sorted(merged.items())), indent=0) + "\n")
        CPU_MEASURED.write_text(
            json.dumps({k: round(v, 1) for k, v in sorted(_cpu.items(), key=lambda kv: -kv[1])}, indent=0) + "\n"
        )
    except OSError:
        pass  # a read-only checkout still runs its tests
