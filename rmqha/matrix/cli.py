"""`python -m rmqha.matrix` (`make chaos-matrix`): the arguments, and a matrix end to end (tests/unit/matrix/test_cli.py)."""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

import rmqha.matrix

from .auditor import Auditor
from .cells import judge_runs
from .plan import LONG_FAULTS, LONG_HOLD_S, MODES, make_plan, parse_configs
from .planted import planted_blind, run_planted
from .render import FAILING, report, write
from .sweeps import earlier_results, run_lanes

PROG = "python -m rmqha.matrix"


def _parser(prog: str = PROG) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description=(rmqha.matrix.__doc__ or "").split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--first-seed", type=int, default=1)
    ap.add_argument(
        "--backends", default="local", help="local, docker or local,docker (docker: the faults only it can do)"
    )
    ap.add_argument("--duration", type=float, default=10.0, help="minimum workload seconds (the sweep stretches it)")
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument(
        "--configs",
        default="all",
        help="all (the four classic ones and dledger), or e.g. 2m-2s-sync/ASYNC_FLUSH,2m-2s-async/SYNC_FLUSH,dledger",
    )
    ap.add_argument("--out", default="build/chaos-matrix")
    ap.add_argument("--from-runs", action="store_true", help="do not run: judge the run folders of an earlier run")
    ap.add_argument(
        "--long-holds",
        action="store_true",
        help=f"also a sweep of {', '.join(LONG_FAULTS)} held {LONG_HOLD_S:g} s each (past housekeeping, "
        "route refresh and name-server expiry): about 7 minutes per configuration and mode",
    )
    ap.add_argument(
        "--planted",
        action="store_true",
        help="also runs with planted broker bugs (PLANTED_RUNS: skip-queue-entry, ack-then-truncate and "
        "the four serving bugs): the matrix fails unless the audit catches each (its "
        "checkers can still fail)",
    )
    ap.add_argument(
        "--lanes",
        type=int,
        default=1,
        help="local clusters run at once (each on its own ports); 2 fits a 2-core machine at --rate 200",
    )
    ap.add_argument("--serial", action="store_true", help="one backend's runs after the other (default: at once)")
    ap.add_argument(
        "--fs-semantics",
        default=os.environ.get("FS_SEMANTICS") or "posix",
        choices=("posix", "ext4"),
        help="the power faults' crashfs cut, for every mode alike (rmqha.chaos.run --fs-semantics): posix (a "
        "new name needs an fsync of its directory) or ext4 (an fsync of any file commits every earlier name; "
        "Apache's 4.9 never fsyncs a directory, so under posix a cut takes every file it created)",
    )
    ap.add_argument(
        "--modes",
        default="ours",
        help="comma-separated, side by side in the table: ours (this "
        "broker), 4.9 (haCompat49=true: Apache RocketMQ 4.9's HA behaviour), recovery "
        "(haRecoveryEnable=true: a master back behind its slave fetches the slave's tail first), apache "
        "(the real Apache RocketMQ 4.9.x from ROCKETMQ_HOME; on docker its image: make images BROKER=apache)",
    )
    return ap


def parse_args(argv, prog: str = PROG) -> tuple[argparse.Namespace, list[tuple[str, str]], list[str]]:
    """The arguments, the configurations and the modes they name; exits (argparse) on one it does not know.
    Creates --out."""
    ap = _parser(prog)
    args = ap.parse_args(argv)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    try:
        configs = parse_configs(args.configs)
    except ValueError as e:
        ap.error(str(e))
    modes = args.modes.split(",")
    for mode in modes:
        if mode not in MODES:
            ap.error(f"--modes: {mode!r}; known: {', '.join(MODES)}")
    if "apache" in modes:
        from rmqha.cluster.implementations import parse_choice, unavailable_reason

        why = unavailable_reason(parse_choice("apache"))
        if why:
            ap.error(f"--modes apache: {why}")
    return args, configs, modes


def run_all(plan: list, args, out: Path, say, lock: threading.Lock) -> list[dict]:
    """Run the plan and the planted controls, audit each run as it ends; the results with their audits."""
    auditor = Auditor(out, say)
    results = run_lanes(plan, args, out, say, lock, auditor)
    run_planted(args, out, say, auditor)
    say("every sweep done; waiting for the last audits")
    auditor.close()
    for r in results:
        r.update(auditor.done.get(r["name"], {}))
    return results


def main(argv=None, prog: str = PROG) -> int:
    """The matrix (prog: how it was called, as the table's first line says)."""
    args, configs, modes = parse_args(argv, prog)
    out = Path(args.out)
    plan = make_plan(configs, args.backends.split(","), modes, args.first_seed, args.seeds, args.long_holds)
    t0 = time.monotonic()
    lock = threading.Lock()

    def say(line: str) -> None:
        with lock:
            print(f"[{time.monotonic() - t0:6.0f} s] {line}", flush=True)

    # --from-runs: judge the run folders of an earlier matrix run again
    results = earlier_results(out, plan) if args.from_runs else run_all(plan, args, out, say, lock)
    cells = judge_runs(results)
    command = prog + " " + " ".join(argv if argv is not None else sys.argv[1:])
    write(out, cells, results, command)
    broken, unexplained = report(out, plan, results, t0)
    blind = planted_blind(args)
    return 1 if broken or unexplained or blind or any(c["verdict"] in FAILING for c in cells) else 0


if __name__ == "__main__":
    sys.exit(main())
