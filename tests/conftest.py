"""How pytest-xdist hands out the suite: whole files (`--dist loadfile`), the longest first.

xdist's own order is by number of tests, so the one-test files that each run a real cluster for two or
three minutes went last and the run ended with one worker busy and the others idle. Here files are
handed out longest first (the classic longest-processing-time rule), from tests/durations.json: seconds
per file, measured by the last full run (`make test-durations` rewrites it; this hook writes the live
figures to build/test-durations.json after every run, and those win when present). A file missing from
both comes first: unknown is treated as long, so a new slow test cannot hide at the end.

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
                ordered = sorted(scopes, key=lambda s: -durations.get(s, UNKNOWN_S))
                rank = {s: i for i, s in enumerate(ordered)}
                reordered = sorted(collection, key=lambda n: rank[self._split_scope(n)])
                for node in self.registered_collections:
                    self.registered_collections[node] = reordered
            return super().schedule()

    return LongestFirst(config, log)


_seconds: dict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report):
    # On the controller this sees every worker's reports: setup, call and teardown all count.
    _seconds[report.nodeid.split("::", 1)[0]] += report.duration


def pytest_sessionfinish(session, exitstatus):
    if os.environ.get("PYTEST_XDIST_WORKER") or not _seconds or exitstatus not in (0, 1):
        return
    try:
        MEASURED.parent.mkdir(exist_ok=True)
        merged = load_durations()
        merged.update({k: round(v, 1) for k, v in _seconds.items()})
        MEASURED.write_text(json.dumps(dict(sorted(merged.items())), indent=0) + "\n")
    except OSError:
        pass  # a read-only checkout still runs its tests
