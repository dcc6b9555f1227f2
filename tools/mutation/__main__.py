"""`make mutation`: mutate each configured module, run its own unit tests, print one score per module.

    python -m tools.mutation [MODULE ...] [--budget SECONDS] [--list] [--check-equivalents]

Score = killed / (killed + survived), timeouts counting as killed, with the mutants in the reviewed list
tools/mutation/equivalent.toml left out. The run works on a copy of the tree (snapshot.py), so edits
and rebases while it runs change nothing. Exit status 1 when a module is below the target (config.toml),
2 when a module ran out of its time budget before every mutant was tried, 3 when a mutant ended in an
error (its module did not load or its tests were not collected: not judged, not scored).
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
import tempfile
import time
import tomllib

from . import engine, reach, snapshot

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


CONFIG = os.path.join(HERE, "config.toml")
EQUIVALENTS = os.path.join(HERE, "equivalent.toml")


def load_config(path=CONFIG) -> dict:
    with open(path, "rb") as f:
        return tomllib.load(f)


def load_equivalents(path=EQUIVALENTS) -> list[dict]:
    with open(path, "rb") as f:
        entries = tomllib.load(f).get("equivalent", [])
    for e in entries:
        missing = {"module", "function", "line", "mutation", "reason"} - set(e)
        if missing or not e["reason"].strip():
            raise SystemExit(f"equivalent.toml: entry {e} lacks {sorted(missing) or ['a reason']}")
    return entries


def test_files(patterns: list[str], root: str = ROOT) -> list[str]:
    out = []
    for p in patterns:
        for f in sorted(glob.glob(os.path.join(root, p))):
            if "mutation_smoke" not in os.path.basename(f) and f not in out:
                out.append(f)
    return out


def unmatched_globs(specs: list[dict], root: str = ROOT) -> list[str]:
    """The test globs that match no file (a moved test folder would otherwise silently test nothing)."""
    return [f"{s['name']}: {p}" for s in specs for p in s["tests"] if not test_files([p], root)]


def mark_equivalents(mutants: list[engine.Mutant], entries: list[dict]) -> list[dict]:
    """Set .equivalent on every mutant an entry names; return the entries that matched nothing."""
    unused = []
    for e in entries:
        hit = False
        for m in mutants:
            if (
                m.module == e["module"]
                and m.function == e["function"]
                and m.line == e["line"].strip()
                and m.mutation == e["mutation"]
                and e.get("occurrence", m.occurrence) == m.occurrence
            ):
                m.equivalent = e["reason"]
                hit = True
        if not hit:
            unused.append(e)
    return unused


def run_module(
    spec: dict,
    cfg: dict,
    entries: list[dict],
    *,
    budget: float | None,
    check_equivalents: bool,
    root: str = ROOT,
    all_tests: bool = False,
    out=None,
) -> engine.ModuleReport:
    """Every mutant of one module against its tests, in the tree at root (main passes a copy): each
    against the tests that reach its lines in the clean run (reach.py), or all of them (all_tests)."""
    out = out or sys.stdout
    name = spec["name"]
    mutants, source = engine.find_mutants(name, root)
    report = engine.ModuleReport(name, os.path.relpath(engine.module_path(name, root), root))
    mine = [e for e in entries if e["module"] == name]
    for e in mark_equivalents(mutants, mine):
        print(
            f"  warning: equivalent.toml entry matches no mutant (stale?): {e['function']}: "
            f"{e['mutation']} | {e['line']}",
            file=out,
        )
    tests = test_files(spec["tests"], root)
    at_import = engine.preload(name, root)
    started = time.monotonic()
    with tempfile.NamedTemporaryFile(suffix=".json") as rec:
        outcome, report.baseline_s = engine.run_child(name, None, tests, root, timeout=600, record=rec.name)
        if outcome != "survived":
            raise SystemExit(f"{name}: its tests do not pass unmutated ({outcome}); fix them first")
        reached = reach.Reach.load(rec.name)
    timeout = cfg.get("timeout_factor", 4) * report.baseline_s + cfg.get("timeout_extra_s", 5)
    budget = budget if budget is not None else spec.get("budget_s", cfg.get("budget_s", 600))
    for m in mutants:
        if m.equivalent and not check_equivalents:
            report.equivalent.append(m)
            continue
        if time.monotonic() - started > budget:
            report.not_run.append(m)
            continue
        select = None if all_tests else reached.tests_for(m.span)
        # code no test runs but the module's import did (a factory filling a table): every test, with the
        # tables the mutated module builds
        rebind = select == [] and m.span is not None and any(n in at_import for n in range(m.span[0], m.span[1] + 1))
        if rebind:
            select = None
        if select == []:  # no test executes its lines: nothing to run
            r = engine.Result(m, "survived")
        else:
            files = tests if select is None else reach.files_of(select, root)
            r = engine.run_mutant(m, source, files, root, timeout, select=select, rebind=rebind)
        if m.equivalent:
            report.equivalent.append(m)
            if r.outcome in ("killed", "timeout"):
                print(f"  review: marked equivalent but KILLED: {m.describe()}", file=out)
            continue
        report.results.append(r)
        if r.outcome not in ("killed", "timeout"):  # as it happens: a long run shows its survivors early
            unreached = " (no test reaches it)" if select == [] else ""
            print(f"  {r.outcome:9} {m.describe()}{unreached}", file=out, flush=True)
    report.seconds = time.monotonic() - started
    return report


def print_report(r: engine.ModuleReport, target: float, out=None) -> None:
    """One module's score line (its survivors and errors are printed by run_module as they come)."""
    out = out or sys.stdout
    status = "BELOW TARGET" if r.score < target else "ERRORS" if r.errors else "INCOMPLETE" if r.not_run else "ok"
    extra = f", {len(r.not_run)} not run (budget)" if r.not_run else ""
    extra += f", {len(r.errors)} errors (not scored)" if r.errors else ""
    print(
        f"{r.path:32} score {r.score:5.1f} %  killed {r.detected}/{r.scored} "
        f"(timeouts {r.count('timeout')}), equivalent {len(r.equivalent)}{extra}, "
        f"{r.seconds:.0f} s  [{status}]",
        file=out,
        flush=True,
    )


def main(argv=None, *, root: str = ROOT, config: str = CONFIG, equivalents: str = EQUIVALENTS) -> int:
    """The command line; root, config and equivalents are parameters for the tool's own tests."""
    ap = argparse.ArgumentParser(
        prog="python -m tools.mutation", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("modules", nargs="*", help="dotted module names (default: every module in config.toml)")
    ap.add_argument("--budget", type=float, help="seconds per module (default: config.toml)")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument(
        "--all-tests",
        action="store_true",
        help="run every test of the module for every mutant, not only the tests that reach its lines",
    )
    ap.add_argument(
        "--check-equivalents",
        action="store_true",
        help="also run the mutants marked equivalent and report any that a test kills",
    )
    args = ap.parse_args(argv)
    cfg = load_config(config)
    entries = load_equivalents(equivalents)
    specs = cfg["module"]
    if args.modules:
        known = {s["name"]: s for s in specs}
        unknown = [m for m in args.modules if m not in known]
        if unknown:
            ap.error(f"not in config.toml: {', '.join(unknown)}")
        specs = [known[m] for m in args.modules]
    bad = unmatched_globs(specs, root)
    if bad:
        raise SystemExit("config.toml: test globs that match no file (moved tests?):\n  " + "\n  ".join(bad))
    if args.list:
        for s in specs:
            mutants, _ = engine.find_mutants(s["name"], root)
            mark_equivalents(mutants, entries)
            for m in mutants:
                print(f"{m.index:4} {'EQ ' if m.equivalent else '   '}{m.describe()}")
        return 0
    cwd = os.getcwd()
    with snapshot.snapshot(root) as copy:
        print(f"== running on a copy of the tree: {copy}", flush=True)
        sys.path.insert(0, copy)
        os.chdir(copy)
        try:
            return run_all(specs, cfg, entries, args, copy)
        finally:
            os.chdir(cwd)
            sys.path.remove(copy)


def run_all(specs: list[dict], cfg: dict, entries: list[dict], args, root: str) -> int:
    target = cfg.get("target", 95.0)
    reports, started = [], time.monotonic()
    for s in specs:  # one module at a time, one mutant at a time: one core
        print(
            f"== {s['name']} against {', '.join(os.path.relpath(t, root) for t in test_files(s['tests'], root))}",
            flush=True,
        )
        r = run_module(
            s,
            cfg,
            entries,
            budget=args.budget,
            check_equivalents=args.check_equivalents,
            root=root,
            all_tests=args.all_tests,
        )
        print_report(r, target)
        reports.append(r)
    print(
        f"\nmutation scores (target {target:.0f} %, equivalent mutants excluded; "
        f"{time.monotonic() - started:.0f} s in all):"
    )
    for r in reports:
        print_report(r, target)
    if any(r.not_run for r in reports):
        return 2
    if any(r.score < target for r in reports):
        return 1
    return 3 if any(r.errors for r in reports) else 0


if __name__ == "__main__":
    sys.exit(main())
