"""The mutation tool's own run (tools/mutation): it works on a copy of the tree, so an edit or a rebase of
the working tree while it runs changes no verdict; a mutant whose module does not load, or whose tests
are not collected, is an error reported apart, never a kill; and each mutant runs only the tests that
reach its lines in the clean run (one that no test reaches survives without a run).

A toy project in a temporary folder, with its own config: three kinds of mutants of one small module.
"""

import os
import subprocess
import textwrap
import uuid

from tools.mutation import __main__ as cli
from tools.mutation import snapshot

CALC = """\
def below(x, limit=6 // (2 - 1)):
    return x < limit


def version():
    return 1


def unused():
    return 2


def _make(k):
    def act(x):
        return x + k

    return act


TABLE = {"a": _make(1)}  # closures made at import: a mutant of act must reach them too
"""


def _toy(tmp_path):
    """A project at tmp_path/live: package <pkg>/calc.py, its tests, a config and no equivalents. Its
    test breaks the live tree's module and deletes its own live test file when it runs, as a rebase
    under a running session would."""
    pkg = "mutoy_" + uuid.uuid4().hex[:8]  # never in sys.modules already
    live = tmp_path / "live"
    (live / pkg).mkdir(parents=True)
    (live / pkg / "__init__.py").write_text("")
    (live / pkg / "calc.py").write_text(CALC)
    (live / "tests").mkdir()
    (live / "tests" / f"test_{pkg}_calc.py").write_text(
        textwrap.dedent(f"""\
            from pathlib import Path

            from {pkg}.calc import TABLE, below

            LIVE = Path({str(live)!r})


            def test_below_the_limit_and_not_at_it():
                assert below(5) and not below(6) and TABLE["a"](1) == 2
                (LIVE / {pkg!r} / "calc.py").write_text("this is not python (")
                (LIVE / "tests" / Path(__file__).name).unlink(missing_ok=True)


            def test_unrelated():  # reaches no line of calc: the clean run is its only run
                with open(LIVE / "unrelated.log", "a") as f:
                    f.write("ran ")
            """)
    )
    # version() is called while the test file is imported: a mutant of it breaks the collection
    (live / "tests" / f"test_{pkg}_version.py").write_text(
        f"from {pkg}.calc import version\n\nassert version() == 1\n\n\ndef test_loaded():\n    pass\n"
    )
    (live / "mutation.toml").write_text(
        f'target = 60.0\nbudget_s = 300\n\n[[module]]\nname = "{pkg}.calc"\ntests = ["tests/test_{pkg}_*.py"]\n'
    )
    (live / "equivalent.toml").write_text("")
    return live, pkg


def test_a_run_is_immune_to_edits_runs_only_reaching_tests_and_counts_load_failures_as_errors(tmp_path, capsys):
    live, pkg = _toy(tmp_path)
    code = cli.main(
        [f"{pkg}.calc"], root=str(live), config=str(live / "mutation.toml"), equivalents=str(live / "equivalent.toml")
    )
    out = capsys.readouterr().out
    # the baseline run already broke the live tree: every mutant after it ran on the copy regardless
    assert (live / pkg / "calc.py").read_text().startswith("this is not python")
    lines = [ln for ln in out.splitlines() if "calc.py:" in ln]
    # 1 -> 2 in the default divides by zero at import: an error, not a kill
    assert any(ln.startswith("  error(import)") and "1 -> 2" in ln and "def below" in ln for ln in lines), out
    # version()'s mutants fail the test file's import: collection errors, not kills
    assert sum(ln.startswith("  error(collection)") and "version:" in ln for ln in lines) == 2, out
    # // -> / gives 6.0, which the test cannot tell from 6: the one survivor
    survivors = [ln for ln in lines if ln.startswith("  survived")]
    assert len(survivors) == 3 and "// -> /" in survivors[0], out
    # unused() is called by no test: its two mutants survive, without a run
    assert all("unused:" in ln and ln.endswith("(no test reaches it)") for ln in survivors[1:]), out
    # act's two mutants are killed in the closure TABLE holds (one no longer uses k: a new closure), and
    # _make's (it runs only at import): with the table the mutated module builds
    assert not any("_make" in ln for ln in lines), out
    # only the clean run ran the test that reaches nothing; every mutant ran only the one that reaches it
    assert (live / "unrelated.log").read_text() == "ran "
    # scored: 8 killed (6 -> 7, - -> +, 2 -> 3, < -> <=, return None; act's + -> -, return None; _make's
    # return None) of 11; the 3 errors left out
    summary = out.strip().splitlines()[-1]
    assert "killed 8/11" in summary and "3 errors (not scored)" in summary and "[ERRORS]" in summary, out
    assert code == 3  # above the toy's 60 % target, but with mutants never judged


def test_the_copy_holds_what_git_sees_and_built_extensions_and_goes_away(tmp_path):
    root = tmp_path / "proj"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "_fast.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\x7fELF")
    (root / "pkg" / "tracked.py").write_text("A = 1\n")
    (root / ".venv").mkdir()
    (root / ".venv" / "big").write_text("x")
    (root / ".gitignore").write_text(".venv/\n*.so\n")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "add", "."], check=True)
    (root / "pkg" / "new_untracked.py").write_text("B = 2\n")  # written, not yet committed: counts
    with snapshot.snapshot(str(root)) as copy:
        got = sorted(os.path.relpath(os.path.join(d, n), copy) for d, _, names in os.walk(copy) for n in names)
        assert got == [
            ".gitignore",
            "pkg/__init__.py",
            "pkg/_fast.cpython-311-x86_64-linux-gnu.so",
            "pkg/new_untracked.py",
            "pkg/tracked.py",
        ]
    assert not os.path.exists(copy)


def test_a_test_glob_that_matches_nothing_stops_the_run_before_it_starts(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("")
    specs = [{"name": "m", "tests": ["tests/test_a.py", "tests/moved/test_*.py"]}]
    assert cli.unmatched_globs(specs, str(tmp_path)) == ["m: tests/moved/test_*.py"]
