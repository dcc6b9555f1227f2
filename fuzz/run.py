"""Runs the fuzz targets one after another under atheris (libFuzzer), with a live status line.

    python -m fuzz.run [--seconds 60] [target ...]   # every target for --seconds each (make fuzz)
    python -m fuzz.run --repro TARGET FILE...        # replay inputs without atheris, show the traceback

Each target works in build/fuzz/<target>/: `corpus/` (what libFuzzer adds to the seeds in
fuzz/corpus/<target>/, kept between runs), `artifacts/` (crashing inputs) and `log.txt` (libFuzzer's
own output). A crash ends that libFuzzer run; the target is restarted for the rest of its time with
that crash's signature (exception type and innermost line of our code) marked as known, so inputs
that hit it again are passed over and the fuzzer goes on to the next distinct crash. Exit status 1
when anything crashed.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from fuzz import TARGETS

ROOT = Path(__file__).resolve().parents[1]
SEEDS = ROOT / "fuzz" / "corpus"
WORK = ROOT / "build" / "fuzz"
MAX_LEN = 16384  # bytes per input: room for JSON nested past the recursion limit, several frames
MAX_RESTARTS = 20

_STATUS = re.compile(r"^#(\d+)\s+(\w+)\s+cov: (\d+) ft: (\d+) corp: (\d+)/(\S+).*?exec/s: (\d+)")
_WRITTEN = re.compile(r"Test unit written to (\S+)")
_EXECUTED = re.compile(r"stat::number_of_executed_units: (\d+)")
_SIGNATURE = "fuzz crash signature: "
KNOWN_ENV = "FUZZ_KNOWN_CRASHES"


@dataclass
class Crash:
    path: str
    signature: str
    traceback: list[str]


@dataclass
class TargetResult:
    name: str
    seconds: float = 0.0
    execs: int = 0
    cov: int = 0
    ft: int = 0
    corpus: int = 0
    runs: int = 0
    crashes: list[Crash] = field(default_factory=list)


# ---- the child: one libFuzzer run ---------------------------------------------------------------


def _ours(filename: str) -> bool:
    return filename.startswith(str(ROOT) + os.sep) and f"{os.sep}.venv{os.sep}" not in filename


def signature(exc: BaseException) -> str:
    """Exception type and the innermost frame in our code: the same bug found again, the same text."""
    kind = type(exc).__name__ if type(exc).__module__ == "builtins" else f"{type(exc).__module__}.{type(exc).__name__}"
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if _ours(f.filename)] or frames
    if not ours:
        return kind
    f = ours[-1]
    name = str(Path(f.filename).relative_to(ROOT)) if _ours(f.filename) else f.filename
    return f"{kind} at {name}:{f.lineno} in {f.name}"


def child(target: str, libfuzzer_args: list[str]) -> None:
    import atheris

    with atheris.instrument_imports(include=["rmqha.broker", "fuzz"]):
        module = importlib.import_module(f"fuzz.{target}")
    test_one_input = module.TestOneInput
    known = set(filter(None, os.environ.get(KNOWN_ENV, "").split("\n")))

    def one_input(data: bytes) -> None:
        try:
            test_one_input(data)
        except Exception as e:
            sig = signature(e)
            if sig in known:
                return  # reported already in this run: look for the next one
            print(f"\n{_SIGNATURE}{sig}", file=sys.stderr, flush=True)
            raise

    atheris.Setup([sys.argv[0], *libfuzzer_args], one_input)
    atheris.Fuzz()


# ---- the parent -----------------------------------------------------------------------------------


class Status:
    """One line, rewritten in place on a terminal, printed every 10 s otherwise."""

    def __init__(self):
        self.tty = sys.stdout.isatty()
        self.last = 0.0

    def show(self, text: str, force: bool = False) -> None:
        now = time.monotonic()
        if self.tty:
            sys.stdout.write("\r\033[K" + text)
            sys.stdout.flush()
        elif force or now - self.last >= 10:
            print(text, flush=True)
            self.last = now

    def end(self) -> None:
        if self.tty:
            sys.stdout.write("\n")


def run_target(target: str, seconds: float, status: Status) -> TargetResult:
    work = WORK / target
    corpus, artifacts = work / "corpus", work / "artifacts"
    corpus.mkdir(parents=True, exist_ok=True)
    artifacts.mkdir(parents=True, exist_ok=True)
    res = TargetResult(target)
    known: list[str] = []
    start = time.monotonic()
    with open(work / "log.txt", "w") as log:
        while res.runs <= MAX_RESTARTS:
            left = int(seconds - (time.monotonic() - start))
            if left < 2 or (res.runs and left < 5):
                break
            res.runs += 1
            args = [
                sys.executable,
                "-m",
                "fuzz.run",
                "--child",
                target,
                "--",
                str(corpus),
                str(SEEDS / target),
                f"-max_total_time={left}",
                f"-artifact_prefix={artifacts}/",
                f"-max_len={MAX_LEN}",
                "-timeout=20",
                "-rss_limit_mb=2048",
                "-print_final_stats=1",
            ]
            env = dict(os.environ, PYTHONPATH=str(ROOT), **{KNOWN_ENV: "\n".join(known)})
            proc = subprocess.Popen(
                args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", env=env
            )
            sig = ""
            tb: list[str] | None = None
            crash_tb: list[str] = []
            execs_before = res.execs
            for line in proc.stdout:
                log.write(line)
                if line.startswith(_SIGNATURE):
                    sig = line[len(_SIGNATURE) :].strip()
                    continue
                if "Uncaught Python exception" in line:
                    tb = []
                    continue
                if tb is not None:
                    if line.startswith("==") or line.startswith("MS:"):
                        crash_tb, tb = tb, None
                    else:
                        tb.append(line.rstrip("\n"))
                        continue
                m = _STATUS.match(line)
                if m:
                    res.execs = execs_before + int(m.group(1))
                    res.cov, res.ft, res.corpus = int(m.group(3)), int(m.group(4)), int(m.group(5))
                    status.show(
                        f"[{target}] {time.monotonic() - start:4.0f}/{seconds:.0f} s  "
                        f"execs {res.execs:,} ({m.group(7)}/s)  cov {res.cov}  ft {res.ft}  "
                        f"corpus {res.corpus}  crashes {len(res.crashes)}"
                    )
                m = _EXECUTED.search(line)
                if m:
                    res.execs = execs_before + int(m.group(1))
                m = _WRITTEN.search(line)
                if m and Path(m.group(1)).name.startswith("slow-unit"):
                    continue  # slow, not wrong: libFuzzer goes on
                if m:
                    sig = sig or f"libFuzzer {Path(m.group(1)).name.split('-')[0]}"  # a timeout or out-of-memory
                    known.append(sig)
                    res.crashes.append(Crash(m.group(1), sig, crash_tb or tb or []))
                    status.show(f"[{target}] CRASH {sig}\n    input: {m.group(1)}", force=True)
                    if status.tty:
                        sys.stdout.write("\n")
            proc.wait()
            if proc.returncode == 0:
                break
            if not sig:
                # libFuzzer failed without a new crash input (bad flags, an import error): say so and stop.
                res.crashes.append(Crash(str(work / "log.txt"), f"libFuzzer exited {proc.returncode}; see the log", []))
                break
    res.seconds = time.monotonic() - start
    status.show(
        f"[{target}] done in {res.seconds:.0f} s: execs {res.execs:,}  cov {res.cov}  ft {res.ft}  "
        f"corpus {res.corpus}  crashes {len(res.crashes)}",
        force=True,
    )
    status.end()
    return res


def report(results: list[TargetResult], wall: float) -> int:
    print(f"\n{'TARGET':<16}{'SECONDS':>8}{'EXECS':>12}{'EXEC/S':>8}{'COV':>7}{'FT':>8}{'CORPUS':>8}{'CRASHES':>9}")
    for r in results:
        rate = r.execs / r.seconds if r.seconds else 0
        print(
            f"{r.name:<16}{r.seconds:>8.0f}{r.execs:>12,}{rate:>8.0f}{r.cov:>7}{r.ft:>8}{r.corpus:>8}"
            f"{len(r.crashes):>9}"
        )
    print(f"total wall time {wall:.0f} s")
    crashed = [(r, c) for r in results for c in r.crashes]
    for r, c in crashed:
        print(
            f"\nCRASH in {r.name}: {c.signature}\n  input: {c.path}\n"
            f"  reproduce: .venv/bin/python -m fuzz.run --repro {r.name} {c.path}"
        )
        for line in c.traceback[-8:]:
            print(f"    {line}")
    return 1 if crashed else 0


def repro(target: str, files: list[str]) -> int:
    module = importlib.import_module(f"fuzz.{target}")
    failed = 0
    for name in files:
        data = Path(name).read_bytes()
        try:
            module.TestOneInput(data)
        except Exception:
            failed += 1
            print(f"{name} ({len(data)} bytes, {data[:64]!r}...):")
            traceback.print_exc()
        else:
            print(f"{name}: no crash")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child"]:
        sep = argv.index("--")
        child(argv[1], argv[sep + 1 :])
        return 0
    ap = argparse.ArgumentParser(
        prog="python -m fuzz.run", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--seconds",
        type=float,
        default=float(os.environ.get("FUZZ_SECONDS", 60)),
        help="fuzzing time per target (default 60, or $FUZZ_SECONDS)",
    )
    ap.add_argument("--repro", metavar="TARGET", help="replay FILEs through TARGET's harness without atheris")
    ap.add_argument("names", nargs="*", help=f"targets (default all: {', '.join(TARGETS)}); with --repro, files")
    args = ap.parse_args(argv)
    if args.repro:
        return repro(args.repro, args.names)
    targets = args.names or list(TARGETS)
    unknown = [t for t in targets if t not in TARGETS]
    if unknown:
        ap.error(f"unknown target(s) {', '.join(unknown)}; choose from {', '.join(TARGETS)}")
    print(f"fuzzing {len(targets)} target(s) for {args.seconds:.0f} s each; work folders under {WORK}", flush=True)
    t0 = time.monotonic()
    status = Status()
    results = [run_target(t, args.seconds, status) for t in targets]
    return report(results, time.monotonic() - t0)


if __name__ == "__main__":
    sys.exit(main())
