"""python -m rmqha.pipeline RUN_FOLDER [--out DIR] [--master URL] [--range-mb N]

Decodes every node's commit log, audits the replicas, checks the histories, writes DIR/report.md and
PNG plots (DIR defaults to RUN_FOLDER/report), prints the verdicts. Exit status: 0 all guarantees
held, 1 a guarantee failed or a checker could not judge (UNKNOWN), 2 the run folder could not be read.

python -m rmqha.pipeline --serve audits many run folders in one Spark session: it reads `RUN[<TAB>OUT]`
lines on standard input and answers each with one line `audited {json}` on standard output, the
JSON {"run", "out", "failed", "valid", "verdicts": [line, ...]} or {"run", "error"}; it ends at end of input.
rmqha.chaos.matrix audits its runs so, each as its sweep ends, with one JVM start for the whole matrix.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

if not __package__:  # run as a script (spark-submit rmqha/pipeline/__main__.py): make `pipeline` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rmqha.pipeline", description=__doc__.split("\n\n")[1])
    ap.add_argument("run", nargs="?", help="run folder (nodes/, history/, metrics/)")
    ap.add_argument("--out", help="output directory (default RUN/report)")
    ap.add_argument("--master", help="Spark master URL (default: spark-submit's, else $SPARK_MASTER, else local[*])")
    ap.add_argument(
        "--range-mb",
        type=int,
        default=None,
        help="bytes of commit log per decode task, MiB (default: about 4 tasks per core, 64 to 1024 MiB each)",
    )
    ap.add_argument(
        "--wait-for",
        metavar="FILE",
        help="start Spark, then wait until FILE exists before reading the run folder (rmqha.chaos.run "
        "starts the audit with the run, so the JVM start overlaps the workload); a FILE that "
        "says 'cancel' ends it with exit 2",
    )
    ap.add_argument(
        "--serve",
        action="store_true",
        help="audit the run folders named on standard input, one Spark session for all (see above)",
    )
    args = ap.parse_args(argv)
    if args.serve:
        return serve(args.master, args.range_mb << 20 if args.range_mb else None)
    if not args.run:
        ap.error("a run folder is required (or --serve)")
    # Absolute before anything reaches Spark: executors open the commit-log files themselves, from their
    # own working directory (on a cluster, not the driver's).
    args.run = os.path.abspath(args.run)
    args.out = os.path.abspath(args.out) if args.out else None
    spark = None
    if args.wait_for:
        import time
        from rmqha.pipeline.spark import get_spark

        spark = get_spark("rocketmq-audit", args.master, quick_jvm=True)  # a chaos run's audit: small
        from rmqha.pipeline.warmup import warm_up

        warm_up(spark)  # a tiny audit while the run goes on: the real one then runs warm
        parent = os.getppid()
        while not os.path.exists(args.wait_for):
            if os.getppid() != parent:  # whoever was to say "go" is gone
                spark.stop()
                return 2
            time.sleep(0.1)
        with open(args.wait_for) as fh:
            if fh.read().strip() == "cancel":
                spark.stop()
                return 2
    if not os.path.isdir(os.path.join(args.run, "nodes")):
        print(
            f"error: {args.run} is not a run folder (no nodes/ directory); see rmqha/pipeline/README.md",
            file=sys.stderr,
        )
        return 2
    out = args.out or os.path.join(args.run, "report")

    from rmqha.pipeline import report, runfolder
    from rmqha.pipeline.spark import QUICK_JVM_MAX_BYTES, get_spark

    if spark is None:
        data = sum(f.length for n in runfolder.load_nodes(args.run) for f in n.files)
        spark = get_spark("rocketmq-audit", args.master, quick_jvm=data < QUICK_JVM_MAX_BYTES)
    print(f"spark master: {spark.sparkContext.master}", flush=True)
    try:
        rep = report.run(spark, args.run, out, args.range_mb << 20 if args.range_mb else None)
    finally:
        spark.stop()
    for v in rep.verdicts:
        print(v.line())
    print(f"\n{rep.status}: report written to {rep.path}")
    return 1 if rep.failed else 0


RESULT = "audited "  # the prefix of --serve's answer lines (anything else on stdout is not an answer)


def serve(master: str | None = None, range_bytes: int | None = None, lines=None, out=None) -> int:
    """Audit each `RUN[<TAB>OUT]` line of `lines` (standard input) in one Spark session, started at the
    first; one `audited {json}` line on `out` (standard output) per run, flushed at once."""
    from rmqha.pipeline import report
    from rmqha.pipeline.spark import get_spark

    lines = sys.stdin if lines is None else lines
    out = sys.stdout if out is None else out
    spark = None
    try:
        for line in lines:
            if not line.strip():
                continue
            run, _, report_dir = line.rstrip("\n").partition("\t")
            run = os.path.abspath(run)
            report_dir = os.path.abspath(report_dir) if report_dir else os.path.join(run, "report")
            try:
                if not os.path.isdir(os.path.join(run, "nodes")):
                    raise FileNotFoundError(f"{run} is not a run folder (no nodes/ directory)")
                if spark is None:
                    spark = get_spark("rocketmq-audit-serve", master)
                rep = report.run(spark, run, report_dir, range_bytes)
                answer = {
                    "run": run,
                    "out": report_dir,
                    "failed": rep.failed,
                    "valid": rep.valid,
                    "verdicts": [v.line() for v in rep.verdicts],
                }
            except Exception as e:  # this run's audit failed; the next one may not
                answer = {"run": run, "error": f"{type(e).__name__}: {e}"}
            print(RESULT + json.dumps(answer), file=out, flush=True)
    finally:
        if spark is not None:
            spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
