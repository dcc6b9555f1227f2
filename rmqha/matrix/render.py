"""The matrix's table (matrix.md), matrix.json, its heatmap and the report printed beside it (tests/unit/matrix/test_render.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from .promises import group_availability_text


MIN_SWEEP_S = 10  # a sweep injects a dozen faults with gaps between them: one this short did not happen
JUDGED = ("audit ok", "audit FAIL")


def run_state(r: dict) -> str:
    """What a matrix run amounts to: "audit ok" / "audit FAIL" (its cells are judged), or "not run" /
    "not audited" (nothing of it is judged, and the matrix fails)."""
    if r.get("rc"):
        return f"not run (exit {r['rc']})"
    if r.get("took_s") is not None and r["took_s"] < MIN_SWEEP_S:
        return f"not run (took {r['took_s']} s)"
    if r.get("audit_error"):
        return f"not audited ({r['audit_error']})"
    if "audit_failed" not in r:
        return "not audited (no report/summary.json)"
    if not r.get("samples"):
        return "not run (no fault in its audit)"
    return "audit FAIL" if r["audit_failed"] else "audit ok"


def recovery_text(c: dict) -> str:
    rec = c["recovery_s"] if c["recovery_s"] is not None else "-"
    never = c.get("recovery_never") or 0
    return (
        f"never ({never}/{c['runs']}), else {rec}" if never and never < c["runs"] else ("never" if never else str(rec))
    )


def failover_text(c: dict) -> str:
    """A DLedger leader fault's slowest failover; "none (k/n)" for runs where no other node led; "n/a" for
    a fault that does not hit a leader (a follower fault, every classic fault: no automatic failover)."""
    if not c.get("failover_applies"):
        return "n/a"
    none = c.get("failover_none") or 0
    fo = "-" if c.get("failover_s") is None else str(c["failover_s"])
    return f"none ({none}/{c['runs']}), else {fo}" if none and none < c["runs"] else ("none" if none else fo)


def _or_not_audited(n: int | None) -> str:
    return "not audited" if n is None else str(n)


FAILING = ("FAIL", "not audited")  # cell verdicts that fail the matrix


def write(out: Path, cells: list[dict], results: list[dict], command: str) -> None:
    (out / "matrix.json").write_text(json.dumps({"cells": cells, "runs": results}, indent=1))
    states = [run_state(r) for r in results]
    judged = sum(st in JUDGED for st in states)
    not_run = sum(st.startswith("not run") for st in states)
    not_audited = sum(st.startswith("not audited") for st in states)
    lines = [
        f"Command: `{command}`",
        "",
        f"Runs: {len(results)} planned, {judged} audited and judged, {not_run} not run, {not_audited} not "
        "audited" + (" (the matrix fails: its cells miss those runs)" if not_run or not_audited else ""),
        "",
        "| broker | configuration | fault | backend | runs exercised | acked during fault | delivered "
        "| acknowledged lost | undelivered | stranded | indeterminate | divergent pairs | availability "
        "| availability per group | failover (s, max) | unavailable (s, max) | duplicates | recovery (s, max) "
        "| excluded records | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        av = f"{c['availability'] * 100:.0f} %" if c["availability"] is not None else "-"
        moved = "; ".join(
            f"{b['fault']} blamed for a later not-exercised fault's losses" for b in c.get("blamed_on", [])
        )
        note = "; ".join(x for x in (c["note"], moved) if x)
        lines.append(
            f"| {c.get('mode', 'ours')} | {c['topology']} {c['flush']} | {c['kind']} ({c['role']}) | {c['backend']} "
            f"| {c.get('exercised', c['runs'])}/{c['runs']} "
            f"| {c['acked_during']} | {_or_not_audited(c.get('delivered'))} "
            f"| {c['lost']} | {c.get('undelivered', 0)} | {c.get('stranded', 0)} "
            f"| {_or_not_audited(c.get('indeterminate'))} "
            f"| {c['divergent']} | {av} | {group_availability_text(c.get('group_availability') or {})} "
            f"| {failover_text(c)} "
            f"| {'-' if c.get('unavailable_s') is None else c['unavailable_s']} "
            f"| {_or_not_audited(c.get('duplicates'))} "
            f"| {recovery_text(c)} | {c.get('excluded') or 0} | **{c['verdict']}**"
            f"{': ' + note if note else ''} |"
        )
    for r in results:
        if r.get("unexplained"):
            lines.append(f"\n**{r['name']}: audit FAIL no cell accounts for**: {'; '.join(r['unexplained'])}")
    lines += [
        "",
        "Runs: "
        + ", ".join(
            f"{r['name']} {r['took_s'] if r.get('took_s') is not None else '?'} s ({st})"
            for r, st in zip(results, states)
        ),
    ]
    (out / "matrix.md").write_text("\n".join(lines) + "\n")
    heatmap(out / "matrix.png", cells)


def heatmap(path: Path, cells: list[dict]) -> None:
    if not cells:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    rows = sorted({(c.get("mode", "ours"), c["topology"], c["flush"]) for c in cells})
    cols = sorted({(c["kind"], c["role"]) for c in cells})
    code = {"PASS": 0, "WEAK": 1, "not exercised": 2, "FAIL": 3, "not audited": 3}
    grid = [[float("nan")] * len(cols) for _ in rows]
    text = [[""] * len(cols) for _ in rows]
    for c in cells:
        i, j = rows.index((c.get("mode", "ours"), c["topology"], c["flush"])), cols.index((c["kind"], c["role"]))
        grid[i][j] = code[c["verdict"]]
        av = f"{c['availability'] * 100:.0f}%" if c["availability"] is not None else "-"
        short = {"not exercised": "n/e", "not audited": "n/a"}.get(c["verdict"], c["verdict"])
        text[i][j] = (
            f"{short}\n{av}"
            + (f"\nlost {c['lost']}" if c["lost"] else "")
            + (f"\nstranded {c['stranded']}" if c.get("stranded") else "")
        )
    fig, ax = plt.subplots(figsize=(1.1 * len(cols) + 2, 0.9 * len(rows) + 1.5))
    ax.imshow(grid, cmap=ListedColormap(["#4dac26", "#f1b6da", "#bababa", "#d01c8b"]), vmin=0, vmax=3)
    ax.set_xticks(range(len(cols)), [f"{k}\n({r})" for k, r in cols], rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(len(rows)), [f"{m}: {t}\n{f}" for m, t, f in rows], fontsize=8)
    for i in range(len(rows)):
        for j in range(len(cols)):
            ax.text(j, i, text[i][j], ha="center", va="center", fontsize=6)
    ax.set_title(
        "guarantee matrix: PASS green, WEAK (allowed) pink, not exercised grey, FAIL or not audited (n/a) magenta",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(out: Path, plan: list, results: list[dict], t0: float) -> tuple[list[str], dict[str, list[str]]]:
    """Print the table and what fails the matrix beside its cells: the runs not done or not audited, and
    the audit FAILs no cell accounts for (both returned)."""
    print((out / "matrix.md").read_text())
    samples = sum(len(r["samples"]) for r in results)
    print(
        f"matrix: {out / 'matrix.md'}, {out / 'matrix.png'}; {len(plan)} runs, {samples} fault injections judged, "
        f"in {time.monotonic() - t0:.0f} s"
    )
    broken = [f"{r['name']} ({r['state']})" for r in results if r["state"] not in JUDGED]
    if broken:
        print(f"runs that could not be done or audited (see their logs): {', '.join(broken)}")
    unexplained = {r["name"]: r["unexplained"] for r in results if r.get("unexplained")}
    for name, fails in unexplained.items():
        print(f"{name}: audit FAIL no cell accounts for: {'; '.join(fails)}")
    return broken, unexplained
