"""How pytest-xdist hands out the suite: whole files (`--dist loadfile`), the longest first.

xdist's own order is by number of tests, so the one-test files that each run a real cluster for two or
three minutes went last and the run ended with one worker busy and the others idle. Here files are
handed out longest first (the classic longest-processing-time rule), from tests/durations.json: seconds
per file, measured by the last full run (`make test-durations` rewrites it; this hook writes the live
figures to build/test-durations.json after every run, and those win when present). A file missing from
both comes first: unknown is treated as long, so a new slow test cannot hide at the end. While the Rust
client is still being built in the background (`make test` starts it: clients/rust/build.sh
--background), the files that use it go last instead, so no worker waits on the compiler while Python
files are left to run.

Files stay the unit, tests/unit/pipeline's too: handed to one worker whole, that package ran 1,400 s on
it alone (measured), far past the budget. Its Spark session stays session-scoped: a package-scoped one
(stopped when a worker moved on) paid the JVM start and Spark's warm-up once per file, and the whole run
took 21.5 min against 11.8 min before (measured on fresh clones; more tests too, so not all of it).
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "tests" / "durations.json"
MEASURED = ROOT / "build" / "test-durations.json"
UNKNOWN_S = 60.0
RUST_BIN = ROOT / "clients" / "rust" / "target" / "release" / "rmq-rust-client"
RUST_MARKS = ("RustClient", '"--client", "rust"')


def uses_rust_client(scope: str) -> bool:
    """Whether a test file drives the Rust client: named for it, or its text gets the binary (RustClient)
    or runs a chaos workload with --client rust."""
    if "rust" in Path(scope).name:
        return True
    try:
        text = (ROOT / scope).read_text()
    except OSError:
        return False
    return any(m in text for m in RUST_MARKS)


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


@pytest.hookimpl(optionalhook=True)  # runs without xdist too (-p no:xdist, the mutation tester)
def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    durations = load_durations()

    class LongestFirst(LoadFileScheduling):
        def schedule(self):
            first = self.collection is None
            if first and self.collection_is_completed and self._check_nodes_have_same_collection():
                # xdist fills its work queue in collection order unless told to reorder; give it
                # the order we want and tell it not to.
                config.option.loadscopereorder = False
                collection = list(next(iter(self.registered_collections.values())))
                scopes: dict[str, list[str]] = defaultdict(list)
                for nodeid in collection:
                    scopes[self._split_scope(nodeid)].append(nodeid)
                late = {s for s in scopes if uses_rust_client(s)} if rust_client_pending() else set()
                ordered = sorted(scopes, key=lambda s: (s in late, -durations.get(s, UNKNOWN_S)))
                rank = {s: i for i, s in enumerate(ordered)}
                reordered = sorted(collection, key=lambda n: rank[self._split_scope(n)])
                for node in self.registered_collections:
                    self.registered_collections[node] = reordered
            return super().schedule()

    return LongestFirst(config, log)


_seconds: dict[str, float] = defaultdict(float)
_cpu: dict[str, float] = defaultdict(float)
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
