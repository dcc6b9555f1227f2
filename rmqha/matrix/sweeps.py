"""The matrix's runs: one chaos sweep per planned run, in lanes, and the runs an earlier matrix left (--from-runs) (tests/unit/matrix/test_sweeps.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from .auditor import Auditor
from .plan import (
    DLEDGER_MIN_DURATION_S,
    LONG_FAULTS,
    LONG_HOLD_S,
    MODE_ARGS,
    MODE_SETS,
    free_base,
    is_dledger,
    run_name,
)


def sweep(
    topology,
    flush,
    backend,
    faults,
    seed,
    args,
    out: Path,
    lane: int,
    mode: str = "ours",
    *,
    name: str | None = None,
    sets: dict[str, str] | None = None,
    extra: tuple[str, ...] = (),
) -> dict:
    """One rmqha.chaos.run --sweep --no-audit (the audit is the Auditor's); what it left, and how long it took.
    name, sets and extra: a planted control's own run name, broker settings and rmqha.chaos.run options."""
    name = name or run_name(topology, flush, backend, seed, mode, faults)
    base = free_base(topology, backend, lane, getattr(args, "lane_count", 2))
    cmd = [
        sys.executable,
        "-m",
        "rmqha.chaos.run",
        "--topology",
        topology,
        "--backend",
        backend,
        "--name",
        name,
        "--sweep",
        "--nemesis",
        ",".join(faults),
        "--duration",
        str(max(args.duration, DLEDGER_MIN_DURATION_S) if is_dledger(topology) else args.duration),
        "--rate",
        str(args.rate),
        "--seed",
        str(seed),
        "--catchup-timeout",
        "30",
        "--no-audit",
    ]
    if not is_dledger(topology):  # a DLedger group flushes as its topology's config says
        cmd += ["--set", f"flushDiskType={flush}"]
    if list(faults) == LONG_FAULTS:
        cmd += ["--sweep-hold", str(LONG_HOLD_S)]
    if getattr(args, "fs_semantics", None):  # every mode's power cuts alike
        cmd += ["--fs-semantics", args.fs_semantics]
    for kv in MODE_SETS[mode] + [f"{k}={v}" for k, v in (sets or {}).items()]:
        cmd += ["--set", kv]
    cmd += MODE_ARGS.get(mode, [])  # --rocketmq-home: the child reads ROCKETMQ_HOME
    if base is not None:
        cmd += ["--base-port", str(base)]
    cmd += list(extra)
    t0 = time.monotonic()
    log = out / f"{name}.log"
    with open(log, "w") as fh:
        rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT).returncode
    return {"name": name, "rc": rc, "took_s": round(time.monotonic() - t0), "log": str(log)}


def earlier_results(out: Path, plan: list) -> list[dict]:
    """--from-runs: the plan's runs as an earlier matrix run left them (their exit codes and times from its
    matrix.json; a run it does not list counts as done, its folder decides)."""
    try:
        before = {r["name"]: r for r in json.loads((out / "matrix.json").read_text())["runs"]}
    except (OSError, ValueError, KeyError):
        before = {}
    results = []
    for topology, flush, backend, faults, seed, mode in plan:
        name = run_name(topology, flush, backend, seed, mode, faults)
        old = before.get(name, {})
        # the earlier run's exit code and time: a run that did not happen stays "not run"
        results.append(
            {
                "name": name,
                "rc": old.get("rc", 0),
                "took_s": old.get("took_s"),
                "log": old.get("log", ""),
                "audit_s": old.get("audit_s"),
                "topology": topology,
                "flush": flush,
                "backend": backend,
                "seed": seed,
                "mode": mode,
            }
        )
    return results


def split_lanes(plan: list, lanes: int) -> dict[tuple[str, int], list]:
    """(backend, k) -> its runs: one lane per backend, --lanes of them for local, dealt round robin so each
    lane gets a mix of configurations and modes."""
    out = {}
    for b in dict.fromkeys(p[2] for p in plan):
        items = [p for p in plan if p[2] == b]
        n = max(1, lanes) if b == "local" else 1
        for k in range(n):
            out[(b, k)] = items[k::n]
    return out


def run_lanes(plan: list, args, out: Path, say, lock: threading.Lock, auditor: Auditor) -> list[dict]:
    """Every planned sweep, lane by lane (at once unless --serial), each run handed to the auditor once its
    sweep exits cleanly. The runs' results, in the order they ended."""
    lanes = split_lanes(plan, args.lanes)
    args.lane_count = len(lanes)
    counter = iter(range(1, len(plan) + 1))
    results: list[dict] = []

    def lane(index: int, items) -> None:
        for topology, flush, backend, faults, seed, mode in items:
            say(
                f"[{next(counter)}/{len(plan)}] {mode}: {topology} {flush} on {backend}, seed {seed}: "
                f"{', '.join(faults)}"
            )
            try:
                r = sweep(topology, flush, backend, faults, seed, args, out, index, mode)
            except Exception as e:  # one run that cannot start must not end the lane silently
                r = {
                    "name": run_name(topology, flush, backend, seed, mode, faults),
                    "rc": 3,
                    "took_s": 0,
                    "log": f"{type(e).__name__}: {e}",
                }
                say(f"    could not run: {type(e).__name__}: {e}")
            r.update(topology=topology, flush=flush, backend=backend, seed=seed, mode=mode)
            say(f"    {r['name']}: sweep {r['took_s']} s, exit {r['rc']}; log {r['log']}")
            with lock:
                results.append(r)
            if r["rc"] == 0:
                auditor.submit(r["name"])

    # one lane per backend (--lanes for local), at once: the clusters share the machine (each at --rate)
    threads = [threading.Thread(target=lane, args=(i, items)) for i, items in enumerate(lanes.values())]
    if args.serial:
        for t in threads:
            t.start()
            t.join()
    else:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return results
