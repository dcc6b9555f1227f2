"""The command line of `python -m rmqha.chaos.run` (rmqha/chaos/run.py): the cluster, the workload, the
faults and the ending. Tests: tests/unit/chaos/test_run_phases.py."""

from __future__ import annotations

import argparse
import os

from rmqha.cluster.implementations import add_arguments
from rmqha.cluster.topology import add_set_argument
from rmqha.runs.faults import ALL_FAULTS, DEFAULT_FAULTS

ORDERLY_TOPIC = "TopicChaosOrderly"  # --orderly-rate: the workload's orderly lane


def build_parser(description: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m rmqha.chaos.run",
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_cluster_options(ap)
    _add_workload_options(ap)
    _add_nemesis_options(ap)
    _add_ending_options(ap)
    return ap


def _add_cluster_options(ap: argparse.ArgumentParser) -> None:
    """The cluster the run uses, or starts."""
    ap.add_argument("--topology", default=os.environ.get("TOPOLOGY") or "2m-2s-sync")
    ap.add_argument("--backend", default=os.environ.get("BACKEND") or "docker", choices=("docker", "local"))
    add_arguments(ap)
    ap.add_argument("--name", default="chaos", help="cluster name, run folder run/<name> (default chaos)")
    ap.add_argument("--base-port", type=int, default=None, help="passed to `cluster up` when it starts one")
    add_set_argument(ap, "extra broker config when the run starts the cluster (e.g. flushDiskType=SYNC_FLUSH)")
    ap.add_argument(
        "--acl",
        action="store_true",
        help="a new cluster runs with aclEnable (rmqha/cluster/acl.py); the workload, sampler and every "
        "check sign their requests (an attached cluster started with --acl is signed for too)",
    )


def _add_workload_options(ap: argparse.ArgumentParser) -> None:
    """The workload: its rate and length, its client, and the extra consumer groups and lanes."""
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of workload (default 60)")
    ap.add_argument("--rate", type=float, default=200.0, help="sends per second (default 200)")
    ap.add_argument(
        "--trace",
        action="store_true",
        default=os.environ.get("TRACE") in ("1", "yes", "true"),
        help="with --client rust: the client's trace dispatcher records every send and consume in "
        "RMQ_SYS_TRACE_TOPIC (brokers get traceTopicEnable=true); the audit checks them",
    )
    ap.add_argument(
        "--client",
        choices=("python", "rust", "python5"),
        default=os.environ.get("CLIENT") or None,
        help="the workload's client: python (official; the default, but rust when a broker is rocketmq-rust's, "
        "which the official client cannot talk to), rust (rocketmq-client-rust) or python5 (the official 5.x "
        "client, rocketmq-python-client 5.1.2 in .venv-client5, through the cluster's 5.x proxy)",
    )
    ap.add_argument(
        "--planted-drop-every",
        type=int,
        default=0,
        metavar="N",
        help="a planted consumer bug: the workload's consumer swallows every Nth message (the delivery "
        "checker must fail the run)",
    )
    ap.add_argument(
        "--orderly-rate",
        type=float,
        default=0.0,
        metavar="R",
        help=f"the workload also sends R orderly messages a second (send_orderly per sharding key) to "
        f"{ORDERLY_TOPIC}, read by an orderly consumer group: the audit judges order per key "
        "(python client only)",
    )
    ap.add_argument(
        "--late-consumer-at",
        type=float,
        default=None,
        metavar="SECONDS",
        help="the workload starts a second consumer group this many seconds in, reading from the "
        "queues' start: subscribed during a master outage, it reads that group from the slave, "
        "which the audit's 'receives by serving node' shows (python client only)",
    )
    ap.add_argument(
        "--late-consumer-after-heal",
        action="store_true",
        help="the workload starts a second consumer group, reading every queue from its start, once the "
        "cluster is healed (and repaired): what it cannot get is lost to any new group (python client)",
    )


def _add_nemesis_options(ap: argparse.ArgumentParser) -> None:
    """The faults: which, when (seeded, a sweep or an explicit schedule), how many at once."""
    ap.add_argument("--seed", type=int, default=None, help="nemesis seed (default: random, printed)")
    ap.add_argument(
        "--nemesis",
        default=",".join(DEFAULT_FAULTS),
        help=f"comma-separated faults from {', '.join(ALL_FAULTS)}; 'none' for no faults",
    )
    ap.add_argument("--max-faults", type=int, default=None, help="at most this many faults")
    ap.add_argument(
        "--sweep",
        action="store_true",
        help="every fault of --nemesis once per role it can hit, one at a time (a guarantee-matrix "
        "run); --duration is stretched to cover them",
    )
    ap.add_argument(
        "--sweep-hold",
        type=float,
        default=None,
        metavar="S",
        help="with --sweep: hold each fault about this long (default 2.5-3.5 s); e.g. 125 outlasts the "
        "20 s HA housekeeping, the 30 s client route refresh and the 120 s name-server expiry",
    )
    ap.add_argument(
        "--schedule",
        default=None,
        metavar="FILE",
        help="an explicit schedule instead of a seeded one: a JSON list of {at, hold, kind, target "
        "(node), params?} (faults may overlap, even on one group); --nemesis is then ignored",
    )
    ap.add_argument(
        "--overlap", action="store_true", help="let a second fault (other group, other role) start while one is active"
    )
    ap.add_argument(
        "--disk-limit-mb",
        type=int,
        default=64,
        help="with disk-full: each broker's store on a tmpfs of this size (root; default 64)",
    )
    ap.add_argument(
        "--power-model",
        default=os.environ.get("POWER_MODEL") or "fs",
        choices=("fs", "reported"),
        help="power faults: fs (default) every store on crashfs, cut to what was fsynced; reported: the old "
        "cut at the offset the broker reports (rmqha/cluster/power.py)",
    )
    ap.add_argument(
        "--cut-mode",
        default=os.environ.get("CUT_MODE") or "lose-unsynced",
        choices=("lose-unsynced", "keep-prefix", "torn"),
        help="with --power-model fs: what of the unsynced changes survives a cut (seeded by --seed)",
    )
    ap.add_argument(
        "--fs-semantics",
        default=os.environ.get("FS_SEMANTICS") or "posix",
        choices=("posix", "ext4"),
        help="with --power-model fs: posix (a new name needs an fsync of its directory) or ext4 (an fsync of any "
        "file commits every earlier namespace change; a rename over a file makes its data durable)",
    )


def _add_ending_options(ap: argparse.ArgumentParser) -> None:
    """The end of the run (catch-up, repair, drain) and the audit after it."""
    ap.add_argument("--catchup-timeout", type=float, default=60.0, help="seconds for slaves to catch up")
    ap.add_argument(
        "--drain-timeout",
        type=float,
        default=60.0,
        help="after the heal and the catch-up, seconds for every consumer group to consume every queue "
        "to its end before the consumers stop (python client; default 60)",
    )
    ap.add_argument(
        "--repair",
        action="store_true",
        help="after the heal, repair every forked group (python -m rmqha.cluster repair: the slave's stranded "
        "messages re-sent to the master, the slave cut at the fork and resynced) before the drain",
    )
    ap.add_argument("--keep-running", action="store_true", help="do not stop the cluster (audit skipped)")
    ap.add_argument(
        "--prewarm-audit",
        action="store_true",
        help="start the audit with the run and warm it up on a tiny run of its own while the workload "
        "runs (make chaos does: the audit then takes ~19 s instead of ~42 s on a quiet machine, "
        "but the warm-up competes with the cluster for the cores meanwhile)",
    )
    ap.add_argument(
        "--no-audit",
        action="store_true",
        help="stop the cluster (stores kept) but leave the audit to the caller (rmqha.chaos.matrix audits "
        "its runs in one Spark session of its own)",
    )
    ap.add_argument("--out", default=None, help="report folder (default RUN/report)")
