"""Which tests reach which lines of the mutated module: recorded once, in the clean run, so that each
mutant runs only the tests that execute its code.

A test that never executes a line cannot notice that the line changed, so running it against that
line's mutant only costs time: on a shared, loaded machine a recovery.py run took 22 s a mutant, most
of it in tests that never touched the mutant (every survivor ran the whole file; slave_session's ran
every HA test). The clean run traces the module's own file (sys.settrace, call and line events only in
frames of that file) and notes, per test id, the lines it executed; lines executed while test files
are imported (collection) are kept apart, and a mutant there runs every test, as does a mutant of a
module-level constant (its value is read wherever the name is used). A mutant no test reaches survives
without a run.

What this can miss: a value computed once by the module and then cached (a session fixture, an
lru_cache) is credited to the first test that computed it. Such a mutant may be reported as a
survivor that a later test would have killed; `--all-tests` runs every test for every mutant.
"""

from __future__ import annotations

import json
import os
import sys
import threading

import pytest

COLLECTION = "<collection>"  # lines executed while the test files were imported


class Recorder:
    """A pytest plugin for the clean run: the lines of `path` each test executed."""

    def __init__(self, path: str):
        self.path = path
        self.current = COLLECTION
        self.hits: dict[str, set[int]] = {}

    def _global(self, frame, event, arg):
        if frame.f_code.co_filename != self.path:
            return None  # not traced further: only this file's frames cost anything
        self._hit(frame.f_lineno)
        return self._local

    def _local(self, frame, event, arg):
        if event == "line":
            self._hit(frame.f_lineno)
        return self._local

    def _hit(self, line: int) -> None:
        self.hits.setdefault(self.current, set()).add(line)

    def start(self) -> None:
        threading.settrace(self._global)
        sys.settrace(self._global)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        self.current = item.nodeid  # its setup, call and teardown
        yield

    def save(self, out: str) -> None:
        with open(out, "w") as f:
            json.dump({k: sorted(v) for k, v in self.hits.items()}, f)


class Select:
    """A pytest plugin for a mutant's run: only the tests that reach it, in their usual order."""

    def __init__(self, nodeids: list[str]):
        self.nodeids = set(nodeids)

    def pytest_collection_modifyitems(self, config, items):
        items[:] = [i for i in items if i.nodeid in self.nodeids]


class Reach:
    """The clean run's record: tests_for(span) is the ids of the tests that executed any line of the
    span, in run order; None means every test (a module-level mutant, or code run at collection)."""

    def __init__(self, hits: dict[str, list[int]]):
        self.collection = set(hits.pop(COLLECTION, ()))
        self.order = list(hits)  # tests in the order they ran
        self.lines = {t: set(v) for t, v in hits.items()}

    @classmethod
    def load(cls, path: str) -> Reach:
        with open(path) as f:
            return cls(json.load(f))

    def tests_for(self, span: tuple[int, int] | None) -> list[str] | None:
        if span is None:
            return None
        lines = set(range(span[0], span[1] + 1))
        if lines & self.collection:
            return None
        return [t for t in self.order if lines & self.lines[t]]


def files_of(nodeids: list[str], root: str) -> list[str]:
    """The test files (absolute paths) that hold these test ids, in order."""
    out: list[str] = []
    for n in nodeids:
        f = os.path.join(root, n.split("::", 1)[0])
        if f not in out:
            out.append(f)
    return out
