"""`make mutation-crashfs`: the Rust parts in mutation testing, with cargo-mutants (crates.io).

    python -m tools.mutation.cargo [--list]

For each `[[cargo]]` entry of config.toml (a crate and the files of it to mutate), runs
`cargo mutants --file F ... --jobs 1` on the crate's own tests (cargo-mutants builds each mutant in its
own copy of the crate, so edits of the working tree during a run change nothing) and prints the
survivors and one score per crate, as `make mutation` does:

    score = caught / (caught + missed)      (timeouts count as caught; unviable mutants, which do not
                                             compile, and the reviewed equivalents are left out)

The equivalents are the crate's `.cargo/mutants.toml` `exclude_re` entries, each with its reason
beside it. Exit status 1 below the target, 4 when cargo-mutants itself failed (its baseline did not
pass, or it is not installed: `cargo install --locked cargo-mutants`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time

from .__main__ import ROOT, load_config

OUTCOMES = ("caught", "missed", "timeout", "unviable")


def read_outcomes(out_dir: str) -> dict[str, list[str]]:
    """The mutants of each outcome, from cargo-mutants' <output>/mutants.out/<outcome>.txt files."""
    got = {}
    for o in OUTCOMES:
        path = os.path.join(out_dir, "mutants.out", f"{o}.txt")
        got[o] = []
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                got[o] = [ln.rstrip("\n") for ln in f if ln.strip()]
    return got


def score(got: dict[str, list[str]]) -> float:
    detected = len(got["caught"]) + len(got["timeout"])
    scored = detected + len(got["missed"])
    return 100.0 * detected / scored if scored else 100.0


def run_crate(spec: dict, target: float, list_only: bool = False) -> int:
    crate = os.path.join(ROOT, spec["crate"])
    files = [a for f in spec["files"] for a in ("--file", f)]
    out_dir = os.path.join(ROOT, "build", "mutation-" + os.path.basename(spec["crate"]))
    cmd = ["cargo", "mutants", "--dir", crate, *files]
    if list_only:
        return subprocess.call([*cmd, "--list"])
    shutil.rmtree(os.path.join(out_dir, "mutants.out"), ignore_errors=True)
    os.makedirs(out_dir, exist_ok=True)
    print(f"== {spec['crate']}: {' '.join(spec['files'])} (cargo mutants, output in {out_dir})", flush=True)
    started = time.monotonic()
    code = subprocess.call([*cmd, "--jobs", "1", "--output", out_dir, "--no-shuffle"])
    seconds = time.monotonic() - started
    if code not in (0, 2, 3):  # 0 all caught, 2 some missed, 3 some timed out
        print(f"cargo mutants failed (exit {code}): see {out_dir}/mutants.out/debug.log", file=sys.stderr)
        return 4
    got = read_outcomes(out_dir)
    for m in got["missed"]:
        print(f"  survived  {m}")
    s = score(got)
    detected = len(got["caught"]) + len(got["timeout"])
    print(
        f"{spec['crate'] + ' ' + ','.join(spec['files']):32} score {s:5.1f} %  killed {detected}/"
        f"{detected + len(got['missed'])} (timeouts {len(got['timeout'])}), unviable {len(got['unviable'])}, "
        f"{seconds:.0f} s  [{'ok' if s >= target else 'BELOW TARGET'}]",
        flush=True,
    )
    return 0 if s >= target else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.mutation.cargo", description=__doc__)
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    args = ap.parse_args(argv)
    if shutil.which("cargo-mutants") is None:
        print("cargo-mutants is not installed: cargo install --locked cargo-mutants", file=sys.stderr)
        return 4
    cfg = load_config()
    codes = [run_crate(spec, cfg.get("target", 95.0), args.list) for spec in cfg.get("cargo", [])]
    return max(codes, default=0)


if __name__ == "__main__":
    sys.exit(main())
