"""How tools/mutation/engine.py puts a mutant into the live module: only the mutant's own change may decide
its fate. A kill must come from the mutated code (never from the way it was swapped in), and a mutant the
engine could not put in place is an error, never a survivor nor a kill.

Each toy module lives in a temporary folder under a fresh name; every mutant runs in a forked child
(engine.run_child), as in a real run.
"""

import textwrap
import uuid

import pytest

from tools.mutation import engine

# a table built at import by a factory, a tuple of the module's own class, and a function that uses both
TABLES = """\
class Bad(Exception):
    pass


CATCH = (Bad,)


def _make(k):
    if k > 100:
        k = 100

    def act(x):
        return isinstance(x, Bad) and k

    return act


TABLE = {"a": _make(1)}


def f():
    try:
        raise Bad()
    except CATCH:
        return "caught"
"""
TABLES_TEST = """\
from {pkg}.m import TABLE, Bad, f


def test_the_table_and_the_catch():
    assert f() == "caught" and TABLE["a"](Bad()) == 1
"""

# three decorators that wrap: Twisted's inlineCallbacks, contextlib's contextmanager, a functools.wraps one
WRAPPED = """\
import contextlib
import functools

from twisted.internet import defer


def logged(fn):
    @functools.wraps(fn)
    def call(*args):
        return fn(*args)

    return call


@defer.inlineCallbacks
def later(x):
    yield None
    return x + 1


@contextlib.contextmanager
def opened(x):
    yield x + 1


@logged
def plain(x):
    return x + 1
"""
WRAPPED_TEST = """\
from {pkg}.m import later, opened, plain


def test_later():
    assert later(1).result == 2


def test_opened():
    with opened(1) as v:
        assert v == 2


def test_plain():
    assert plain(1) == 2
"""

# no `from __future__ import annotations` here (the engine has one); a constant after a return
DEAD = """\
def first():
    return 1
    unused = 2


def second(x: int) -> int:
    return x
"""
DEAD_TEST = """\
from {pkg}.m import first, second


def test_both():
    assert first() == 1 and second(3) == 3
"""


def _toy(tmp_path, monkeypatch, source, test):
    pkg = "mutapply_" + uuid.uuid4().hex[:8]
    (tmp_path / pkg).mkdir()
    (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / pkg / "m.py").write_text(source)
    test_file = tmp_path / f"test_{pkg}.py"
    test_file.write_text(textwrap.dedent(test.format(pkg=pkg)))
    monkeypatch.syspath_prepend(str(tmp_path))
    module = f"{pkg}.m"
    engine.preload(module, str(tmp_path))
    mutants, src = engine.find_mutants(module, str(tmp_path))
    assert engine.run_child(module, None, [str(test_file)], str(tmp_path), 120)[0] == "survived"
    return mutants, src, str(test_file)


def _outcome(m, src, test_file, root, rebind=False):
    return engine.run_mutant(m, src, [test_file], root, 120, rebind=rebind).outcome


def test_a_mutant_of_import_time_code_is_judged_by_what_it_changes_not_by_rebuilt_classes(tmp_path, monkeypatch):
    """_make runs only at import, so its mutants run with the tables the mutated module builds (rebind).
    `k > 100` -> `>=` changes nothing for k = 1: it must survive. Rebinding every container used to put the
    mutated module's own copy of Bad into CATCH, and its act closures read that module's globals: f() no
    longer caught the live Bad and the act saw no Bad, a kill the mutant did not make."""
    mutants, src, test_file = _toy(tmp_path, monkeypatch, TABLES, TABLES_TEST)
    root = str(tmp_path)
    cmp = engine.select(mutants, "_make", "if k > 100", "> -> >=")
    assert _outcome(cmp, src, test_file, root, rebind=True) == "survived"
    # a mutant of the factory that does change the table is still killed, through the table it builds
    gone = engine.select(mutants, "_make", "return act", "return x -> return None")
    assert _outcome(gone, src, test_file, root, rebind=True) == "killed"


@pytest.mark.parametrize("function", ["later", "opened", "plain"])
def test_a_mutant_inside_a_wrapping_decorator_is_applied(tmp_path, monkeypatch, function):
    """A decorator that wraps (inlineCallbacks, contextmanager, functools.wraps) keeps the module's function
    in its closure: swapping the wrapper's code (the same for every function it wraps) changed nothing, so
    `x + 1` -> `x - 1` ran as the original and survived."""
    mutants, src, test_file = _toy(tmp_path, monkeypatch, WRAPPED, WRAPPED_TEST)
    m = engine.select(mutants, function, "x + 1", "+ -> -")
    assert _outcome(m, src, test_file, str(tmp_path)) == "killed"


def test_a_mutant_the_compiler_drops_is_an_error_not_a_survivor(tmp_path, monkeypatch):
    """A constant after a return is compiled away: the mutant changes no code, and no test judged it. The
    engine used to compile mutants with its own `from __future__ import annotations`, so every function of a
    module without it differed (a changed flag), the mutant counted as applied and survived; and a mutant
    left out of the score must say so in the exit status."""
    mutants, src, test_file = _toy(tmp_path, monkeypatch, DEAD, DEAD_TEST)
    m = engine.select(mutants, "first", "unused = 2", "2 -> 3")
    assert _outcome(m, src, test_file, str(tmp_path)) == "error(not applied)"
    report = engine.ModuleReport("m", "m.py", [engine.Result(m, "error(not applied)")])
    assert report.errors and report.scored == 0


SENTINEL = """\
from __future__ import annotations

_UNSET = object()


def get(x=_UNSET):
    if x is _UNSET:
        return "default"
    return x


def both(x):
    return x * 2
"""
SENTINEL_TEST = """\
from {pkg}.m import both, get


def test_get_and_both():
    assert get() == "default" and get(1) == 1 and both(0) == 0
"""


def test_a_default_object_of_the_module_stays_the_live_one(tmp_path, monkeypatch):
    """The mutated module builds its own `_UNSET = object()`: a function whose defaults took it (any mutant
    of the module patched every function whose defaults compared unequal) no longer saw `x is _UNSET`, and
    `x * 2` -> `x / 2`, which both(0) cannot tell, was killed by get()."""
    mutants, src, test_file = _toy(tmp_path, monkeypatch, SENTINEL, SENTINEL_TEST)
    m = engine.select(mutants, "both", "x * 2", "* -> /")
    assert _outcome(m, src, test_file, str(tmp_path)) == "survived"
    assert _outcome(
        engine.select(mutants, "both", "x * 2", "return x -> return None"), src, test_file, str(tmp_path)
    ) == ("killed")
