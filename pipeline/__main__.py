"""python -m pipeline RUN_FOLDER [--out DIR] [--master URL] [--range-mb N]

Decodes every node's commit log, audits the replicas, checks the histories, writes DIR/report.md and
PNG plots (DIR defaults to RUN_FOLDER/report), prints the verdicts. Exit status: 0 all guarantees
held, 1 a guarantee failed, 2 the run folder could not be read.
"""
from __future__ import annotations

import argparse
import os
import sys

if not __package__:  # run as a script (spark-submit pipeline/__main__.py): make `pipeline` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipeline", description=__doc__.split("\n\n")[1])
    ap.add_argument("run", help="run folder (nodes/, history/, metrics/)")
    ap.add_argument("--out", help="output directory (default RUN/report)")
    ap.add_argument("--master", help="Spark master URL (default: spark-submit's, else $SPARK_MASTER, else local[*])")
    ap.add_argument("--range-mb", type=int, default=None,
                    help="bytes of commit log per decode task, MiB (default: about 4 tasks per core, "
                         "64 to 1024 MiB each)")
    ap.add_argument("--wait-for", metavar="FILE",
                    help="start Spark, then wait until FILE exists before reading the run folder (chaos.run "
                         "starts the audit with the run, so the JVM start overlaps the workload); a FILE that "
                         "says 'cancel' ends it with exit 2")
    args = ap.parse_args(argv)
    # Absolute before anything reaches Spark: executors open the commit-log files themselves, from their
    # own working directory (on a cluster, not the driver's).
    args.run = os.path.abspath(args.run)
    args.out = os.path.abspath(args.out) if args.out else None
    spark = None
    if args.wait_for:
        import time
        from pipeline.spark import get_spark
        spark = get_spark("rocketmq-audit", args.master, quick_jvm=True)  # a chaos run's audit: small
        from pipeline.warmup import warm_up
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
        print(f"error: {args.run} is not a run folder (no nodes/ directory); see pipeline/README.md",
              file=sys.stderr)
        return 2
    out = args.out or os.path.join(args.run, "report")

    from pipeline import report, runfolder
    from pipeline.spark import QUICK_JVM_MAX_BYTES, get_spark
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
    print(f"\n{'FAIL' if rep.failed else 'PASS'}: report written to {rep.path}")
    return 1 if rep.failed else 0


if __name__ == "__main__":
    sys.exit(main())
