"""`python -m rmqha.chaos.run`: a chaos run end to end, then the audit of what it left behind.

    python -m rmqha.chaos.run [--topology 2m-2s-sync] [--backend docker] [--name chaos] [--duration 60]
                        [--rate 200] [--seed N] [--nemesis latency,cut,pause-slave,restart-slave,slicer]
                        [--client python|rust] [--out DIR]

1. starts the cluster (`python -m rmqha.cluster up ... --set syncFlushTimeout=1500 --set mappedFileSizeCommitLog=64MiB
   --fresh`) unless the one
   named --name is already running (then it is used as it is);
2. samples replication offsets in the background (`python -m rmqha.cluster sample`, every 500 ms);
3. runs the workload (rmqha/chaos/workload.py, its own process: the official client, send_async at --rate,
   a push consumer, histories in RUN/history/; with --client rust, clients/rust's rocketmq-client-rust
   does the same, and each history line names its library);
4. runs the nemesis (rmqha/chaos/nemesis.py): a seeded schedule, printed first, one fault at a time on a
   random broker group's HA link or slave, each healed after a few seconds, then a quiet period;
5. shows one live status line (plain lines every 5 s when stdout is not a terminal);
6. ends honestly: once the sends are done, heals everything, waits until every slave holds its
   master's log or is known not to (a fork: SLAVE_AHEAD, never counted as caught up;
   --catchup-timeout), then keeps the consumers running until every consumer group has consumed every
   queue on every master to its end (--drain-timeout), writes RUN/chaos/ending-<id>.json (what caught
   up, what drained), stops the cluster with --keep-data, runs `python -m rmqha.pipeline RUN --out DIR`
   (default RUN/report) and exits with its status (0 every guarantee held, 1 one failed; 3 when the
   run itself could not be done).

The local backend has no proxies: latency, cut and slicer are dropped there (said up front), and
pause/restart/kill act on the slave processes.

Metrics: the sampler writes RUN/metrics/samples.jsonl, which the pipeline reads for its lag plot.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rmqha.runs.faultlog import FaultLog
from rmqha.chaos.nemesis import Fault, Nemesis, make_schedule, make_sweep
from rmqha.chaos.run_options import ORDERLY_TOPIC, build_parser
from rmqha.chaos.run_ending import drain_groups, repair_forks, wait_catch_up
from rmqha.chaos.run_setup import cluster_running, limit_disks, power_on_crashfs, schedule_from_json
from rmqha.chaos.run_status import StatusLine, last_sample_round, read_json, say, slave_lags, status_text
from rmqha.cluster import ClusterError
from rmqha.cluster import runfolder as rf
from rmqha.cluster.handle import Cluster
from rmqha.cluster.implementations import official_client_refusal, parse_choice
from rmqha.runs.faults import ALL_FAULTS, applicable_faults, why_not_applicable

SYNC_WAIT_MS = 1500
START_TIMEOUT_S = 90
# another implementation's brokers are JVMs (Apache's 4.9: five with its name server, each pre-touching its
# heap): on a loaded 2-core machine they were seen to need over 4 minutes to be ready in containers
JVM_START_TIMEOUT_S = 300
# A sweep's gap between one fault's heal and the next fault. A heal that restarts a node waits until it is
# ready, and a late heal delays every later fault, but the workload ends on time: later faults are then
# never injected. Ours is back in 3-9 s; Apache's 4.9.8 took 7-15 s here on crashfs, 20-58 s at worse
# load, so its sweeps of 2026-11-29 (the 4-5 s gap) ended after 5-6 of 10 faults, never reaching the
# master power losses a sweep puts last. Another broker's sweep leaves room for its restarts.
SWEEP_GAP_S = {"ours": (4.0, 5.0), "other": (25.0, 30.0)}


def sweep_gap(broker: str | None) -> tuple[float, float]:
    """The gap a sweep leaves after each fault for brokers of this choice (--broker: ours, apache, mixed)."""
    return SWEEP_GAP_S["ours"] if (broker or "ours") == "ours" else SWEEP_GAP_S["other"]


EXIT_RUN_FAILED = 3
TOPIC = "TopicChaos"

DISK_FULL_SETS = {
    "mappedFileSizeCommitLog": str(64 << 10),
    "mappedFileSizeConsumeQueue": str(20 * 3000),
    "messageIndexEnable": "false",
}


def py(*args: str) -> list[str]:
    return [sys.executable, *args]


# ---- the phases of a run -------------------------------------------------------------------------
# main() is the list of phases below. Each takes the RunContext, reads what the earlier phases left in it
# and adds its own; a setup phase returns an exit code to end the run there (None: go on). The live
# phases (create_topics .. end_run) run inside run_live(), whose `finally` (cleanup_live) heals every
# fault and stops the workload on any exception or Ctrl-C; stop_cluster then stops the sampler and the
# cluster (stores kept) whatever happened, and audit() runs the pipeline.


@dataclass
class RunContext:
    """What the phases of one run share."""

    args: argparse.Namespace
    faults: list[str]  # --nemesis, as asked (before applicable_faults)
    seed: int
    name: str  # the cluster's name
    rd: Path  # its run folder
    run_id: str
    cluster: Cluster | None = None  # start_cluster; attached again after the heal (new pids)
    usable: list[str] = field(default_factory=list)  # prepare_faults: the faults this cluster can take
    schedule: list[Fault] = field(default_factory=list)  # plan_schedule
    env: dict[str, str] = field(default_factory=dict)  # prepare_run: the child processes' environment
    repo: str = ""  # their working directory (the repository)
    line: StatusLine | None = None
    fault_log: FaultLog | None = None
    nemesis: Nemesis | None = None
    stop: threading.Event = field(default_factory=threading.Event)  # tells the nemesis to stop
    procs: list[subprocess.Popen] = field(default_factory=list)  # sampler, workload: stopped by stop_cluster
    workload: subprocess.Popen | None = None
    wl_log: Any = None  # the workload's stderr file
    t0: float = 0.0  # when the workload started sending: the nemesis clock
    nem_thread: threading.Thread | None = None
    ending: dict = field(default_factory=dict)  # RUN/chaos/ending-<id>.json: healed, catchUp, repairs, drain
    rc_run: int = 0  # EXIT_RUN_FAILED, 130, or 0
    audit_proc: subprocess.Popen | None = None  # --prewarm-audit: the audit, started early, waiting for audit_go
    procs_audit: list[subprocess.Popen] = field(default_factory=list)

    @property
    def drain_signal(self) -> Path:
        return self.rd / "chaos" / f"drain-{self.run_id}"

    @property
    def audit_go(self) -> Path:
        return self.rd / "chaos" / f"audit-go-{self.run_id}"

    @property
    def out_dir(self) -> Path:
        return Path(self.args.out) if self.args.out else self.rd / "report"

    @property
    def audit_log(self) -> Path:
        return self.rd / "chaos" / "audit.log"

    @property
    def samples(self) -> Path:
        return self.rd / "metrics" / "samples.jsonl"

    @property
    def progress_path(self) -> Path:
        return self.rd / "chaos" / f"progress-{self.run_id}.json"


def choose_client(asked: str | None, broker: str | None) -> tuple[str, str | None]:
    """The workload's client, and why not when the one asked for cannot talk to these brokers: python by
    default, rust when a broker is rocketmq-rust's (the official C++ client gets no answer from it)."""
    try:
        refusal = official_client_refusal(parse_choice(broker))
    except ClusterError:
        refusal = None  # a bad --broker is the cluster's to report
    if asked is None:
        return ("rust" if refusal else "python"), None
    return asked, (refusal if asked == "python" else None)


def parse_run(argv: list[str] | None) -> RunContext | int:
    """The command line, checked; 2 when it asks for what cannot be done."""
    args = build_parser(__doc__.split("\n\n")[0]).parse_args(argv)
    args.set = dict(item.split("=", 1) for item in args.set)
    args.client_asked = args.client
    args.client, refused = choose_client(args.client, args.broker)
    if refused:
        say(f"error: --client python: {refused}")
        return 2
    if (args.late_consumer_at is not None or args.late_consumer_after_heal) and args.client != "python":
        say("error: the late consumer (--late-consumer-at, --late-consumer-after-heal) needs --client python")
        return 2
    if args.trace and args.client != "rust":
        say("error: --trace needs --client rust (the C++ 1.0.1 client in PyPI rocketmq has no trace dispatcher)")
        return 2
    faults = [] if args.nemesis.strip() in ("", "none") else [f.strip() for f in args.nemesis.split(",") if f.strip()]
    unknown = [f for f in faults if f not in ALL_FAULTS]
    if unknown:
        say(f"error: unknown fault(s) {', '.join(unknown)}; known: {', '.join(ALL_FAULTS)}")
        return 2
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    name = rf.check_name(args.name)
    return RunContext(args, faults, seed, name, rf.run_dir(name), time.strftime("%Y%m%d-%H%M%S"))


def start_cluster(ctx: RunContext) -> int | None:
    """1. The cluster named --name if it runs, else a fresh one (and a fresh run folder)."""
    args, name, rd = ctx.args, ctx.name, ctx.rd
    ctx.cluster = cluster_running(name)
    if ctx.cluster is not None:
        say(
            f"using cluster {name}, already running ({ctx.cluster.state.get('topology')} on {ctx.cluster.kind}); "
            f"run folder {rd}"
        )
        if ctx.cluster.kind != args.backend:
            say(f"  note: --backend {args.backend} ignored: the running cluster is {ctx.cluster.kind}")
        running = ctx.cluster.state.get("broker") or "ours"
        client, refused = choose_client(args.client_asked, running)
        if refused:
            say(f"error: the running cluster {name} ({running}) and --client python: {refused}")
            return EXIT_RUN_FAILED
        if client != args.client:
            say(f"  note: the {client} client: the running cluster's brokers are {running}")
            args.client = client
    else:
        # 64 MiB commit-log files: a run writes tens of MiB per group, and four preallocated 1 GiB files
        # are 4 GiB of zeros for the audit to read (it took most of a short run's audit)
        sets = {"syncFlushTimeout": str(SYNC_WAIT_MS), "mappedFileSizeCommitLog": str(64 << 20)}
        if "disk-full" in ctx.faults:
            # small files, so a full disk bites at the next file within seconds (commit-log files are
            # preallocated: a full disk fails only when the next one is reserved), and queues that fit
            sets.update(DISK_FULL_SETS)
        if args.trace:
            sets["traceTopicEnable"] = "true"  # the brokers create RMQ_SYS_TRACE_TOPIC for the clients
        sets.update(args.set)
        say(
            f"starting cluster {name}: {args.topology} on {args.backend}, "
            + ", ".join(f"{k}={v}" for k, v in sets.items())
        )
        try:
            ctx.cluster = Cluster.up(
                name,
                args.topology,
                args.backend,
                base_port=args.base_port,
                sets=sets,
                fresh=True,
                timeout=START_TIMEOUT_S if (args.broker or "ours") == "ours" else JVM_START_TIMEOUT_S,
                acl=args.acl,
                broker=args.broker,
                rocketmq_home=args.rocketmq_home,
            )
        except ClusterError as e:
            say(f"error: the cluster did not start: {e}")
            return EXIT_RUN_FAILED
        # A fresh run folder: histories, faults and samples of an earlier run would be audited with this one.
        for sub in ("history", "metrics", "served", "chaos", "faults"):
            shutil.rmtree(rd / sub, ignore_errors=True)
    (rd / "chaos").mkdir(parents=True, exist_ok=True)
    return None


def prepare_faults(ctx: RunContext) -> int | None:
    """The faults this cluster can take (the others said and dropped); disk-full's tmpfs stores."""
    cluster, backend, topology = ctx.cluster, ctx.cluster.kind, ctx.cluster.state.get("topology")
    ctx.usable, dropped = applicable_faults(ctx.faults, backend, topology)
    if "disk-full" in ctx.usable and limit_disks(cluster, ctx.args.disk_limit_mb):
        cluster.down(keep_data=True)
        return EXIT_RUN_FAILED
    ctx.usable = power_on_crashfs(cluster, ctx.usable, ctx.args, ctx.seed)
    for f in dropped:
        say(f"note: {f} not used: {why_not_applicable(f, backend, topology)}")
    if ctx.faults and dropped and not ctx.usable:
        say(
            f"error: none of the faults asked for ({', '.join(ctx.faults)}) applies to topology {topology} on {backend}"
        )
        cluster.down(keep_data=True)
        return 2
    if ctx.faults and not cluster.slaves():
        say(f"note: topology {topology} has no slaves: replication faults do not apply")
    return None


def plan_schedule(ctx: RunContext) -> int | None:
    """The nemesis schedule (--schedule, --sweep or seeded), printed and written to RUN/chaos/schedule-<id>.json."""
    args, cluster, seed = ctx.args, ctx.cluster, ctx.seed
    if args.schedule:
        try:
            schedule = schedule_from_json(json.loads(Path(args.schedule).read_text()), cluster)
        except (OSError, ValueError, KeyError, TypeError) as e:
            say(f"error: --schedule {args.schedule}: {e}")
            return 2
        args.duration = max(args.duration, max((f.at + f.hold for f in schedule), default=0.0) + 3.0)
    elif args.sweep:
        hold = (2.5, 3.5) if args.sweep_hold is None else (args.sweep_hold, args.sweep_hold + 1.0)
        schedule = make_sweep(
            random.Random(seed), ctx.usable, cluster, SYNC_WAIT_MS, hold=hold, gap=sweep_gap(args.broker)
        )
        args.duration = max(args.duration, max((f.at + f.hold for f in schedule), default=0.0) + 5.0)
    else:
        schedule = make_schedule(
            random.Random(seed), ctx.usable, cluster, args.duration, SYNC_WAIT_MS, args.max_faults, overlap=args.overlap
        )
    ctx.schedule = schedule
    say(
        f"chaos run {ctx.run_id}: cluster {ctx.name} ({cluster.state.get('topology')}, {cluster.kind}), "
        f"{args.duration:g}s at {args.rate:g} msg/s, seed {seed}"
    )
    say(f"nemesis schedule ({len(schedule)} faults; reproduce with --seed {seed}):")
    for f in schedule:
        say(f"  t={f.at:5.1f}s  {f.describe():<52} healed at t={f.at + f.hold:5.1f}s")
    quiet_from = max((f.at + f.hold for f in schedule), default=0.0)
    say(f"  then quiet from t={quiet_from:.1f}s to the end ({args.duration:g}s)")
    (ctx.rd / "chaos" / f"schedule-{ctx.run_id}.json").write_text(
        json.dumps(
            {
                "seed": seed,
                "duration": args.duration,
                "rate": args.rate,
                "backend": cluster.kind,
                "faults": [f.to_json() for f in schedule],
            },
            indent=1,
        )
    )
    return None


def prepare_run(ctx: RunContext) -> int | None:
    """The child processes' environment (ACL: the clients' credentials), the status line, the fault log
    (RUN/faults/faults-<id>.jsonl) and the nemesis."""
    ctx.env = dict(os.environ, PYTHONUNBUFFERED="1", **ctx.cluster.client_env())
    ctx.repo = str(Path(__file__).resolve().parents[2])
    ctx.env["PYTHONPATH"] = os.pathsep.join(
        [ctx.repo] + [p for p in ctx.env.get("PYTHONPATH", "").split(os.pathsep) if p]
    )
    ctx.line = StatusLine(sys.stdout.isatty())
    ctx.fault_log = FaultLog(ctx.rd / "faults" / f"faults-{ctx.run_id}.jsonl")
    ctx.nemesis = Nemesis(ctx.cluster, log=ctx.line.log, fault_log=ctx.fault_log)
    return None


def prewarm_audit(ctx: RunContext) -> int | None:
    """--prewarm-audit: the audit process starts now and waits for RUN/chaos/audit-go-<id>: its JVM and
    Spark session start while the workload runs."""
    args = ctx.args
    if args.prewarm_audit and not (args.keep_running or args.no_audit):
        ctx.audit_go.unlink(missing_ok=True)
        ctx.audit_proc = subprocess.Popen(
            py("-m", "rmqha.pipeline", str(ctx.rd), "--out", str(ctx.out_dir), "--wait-for", str(ctx.audit_go)),
            stdout=subprocess.PIPE,
            stderr=open(ctx.audit_log, "w"),
            text=True,
            env=ctx.env,
            cwd=ctx.repo,
        )
        ctx.procs_audit = [ctx.audit_proc]
    return None


def create_topics(ctx: RunContext) -> None:
    ctx.cluster.create_topic(TOPIC)
    if ctx.args.orderly_rate:
        ctx.cluster.create_topic(ORDERLY_TOPIC)


def start_sampler(ctx: RunContext) -> None:
    """2. Replication offsets every 500 ms into RUN/metrics/samples.jsonl (`python -m rmqha.cluster sample`)."""
    args = ctx.args
    sampler_log = open(ctx.rd / "chaos" / "sampler.log", "w")
    sampler = subprocess.Popen(
        py(
            "-m",
            "rmqha.cluster",
            "sample",
            "--name",
            ctx.name,
            "--interval-ms",
            "500",
            "--duration",
            str(args.duration + args.catchup_timeout + 60),
            "--out",
            str(ctx.samples),
        ),
        stdout=sampler_log,
        stderr=subprocess.STDOUT,
        env=ctx.env,
        cwd=ctx.repo,
    )
    ctx.procs.append(sampler)


def start_workload(ctx: RunContext) -> None:
    """3. The workload (rmqha/chaos/workload.py); returns once it sends (the nemesis clock t0) or in 60 s."""
    args = ctx.args
    ctx.wl_log = open(ctx.rd / "chaos" / f"workload-{ctx.run_id}.log", "w")
    ctx.drain_signal.unlink(missing_ok=True)
    ctx.workload = subprocess.Popen(
        py(
            "-m",
            "rmqha.chaos.workload",
            str(ctx.rd),
            # the 5.x client talks to the proxy, every other client to the name server
            (ctx.cluster.proxy or "") if args.client == "python5" else ctx.cluster.namesrv,
            "--rate",
            str(args.rate),
            "--duration",
            str(args.duration),
            "--run-id",
            ctx.run_id,
            "--topic",
            TOPIC,
            "--client",
            args.client,
            "--drain-signal",
            str(ctx.drain_signal),
            *(["--trace"] if args.trace else []),
            *(["--planted-drop-every", str(args.planted_drop_every)] if args.planted_drop_every else []),
            *(["--late-consumer-after-heal"] if args.late_consumer_after_heal else []),
            *(
                ["--orderly-rate", str(args.orderly_rate), "--orderly-topic", ORDERLY_TOPIC]
                if args.orderly_rate
                else []
            ),
            *(["--late-consumer-at", str(args.late_consumer_at)] if args.late_consumer_at is not None else []),
        ),
        stdout=subprocess.PIPE,
        stderr=ctx.wl_log,
        text=True,
        env=ctx.env,
        cwd=ctx.repo,
    )
    ctx.procs.append(ctx.workload)
    # the nemesis clock starts when the workload starts sending
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and ctx.workload.poll() is None:
        p = read_json(ctx.progress_path)
        if p and p.get("phase") != "starting":
            break
        time.sleep(0.1)
    ctx.t0 = time.monotonic()


def start_nemesis(ctx: RunContext) -> None:
    """4. The nemesis, in a thread: the schedule from t0 until ctx.stop. A fault moved so late (earlier
    restarts took long) that its full hold would not end 1 s before the sends end is skipped, and said
    (Nemesis.run's `end`)."""
    ctx.nem_thread = threading.Thread(
        target=ctx.nemesis.run, args=(ctx.schedule, ctx.t0, ctx.stop), kwargs={"end": ctx.args.duration}, daemon=True
    )
    ctx.nem_thread.start()


def live_status(ctx: RunContext) -> None:
    """5. The status line until the sends are done (the consumers go on until the drain); then the
    nemesis stops."""
    line, workload = ctx.line, ctx.workload
    last_plain = 0.0
    while workload.poll() is None:
        now = time.monotonic()
        prog = read_json(ctx.progress_path)
        if prog and prog.get("phase") == "awaiting drain":
            break
        if line.tty or now - last_plain >= 5.0:
            lags = slave_lags(last_sample_round(ctx.samples))
            line.show(
                status_text(
                    now - ctx.t0,
                    ctx.args.duration,
                    prog,
                    ctx.nemesis.describe_active(),
                    lags,
                    ctx.cluster.lag_unit(next(iter(lags))) if lags else "bytes",
                )
            )
            last_plain = now
        time.sleep(0.5 if line.tty else 0.25)
    ctx.stop.set()
    ctx.nem_thread.join(timeout=30)
    line.end()


# 6. the honest end: heal everything, let every slave catch up (or say why it cannot), drain every
# consumer group to the end of every queue, and only then stop the consumers and audit


def heal(ctx: RunContext) -> None:
    """Every fault undone (ending["healed"]: heal_all waits for a heal the nemesis still has under way, so
    each fault is healed once); the faults the nemesis skipped (ending["skipped"]); the cluster attached
    again: restarted nodes have new pids."""
    heal_errors = ctx.nemesis.heal_all()
    ctx.ending["healed"] = not heal_errors
    ctx.ending["skipped"] = [dict(f.to_json(), skipped=why) for f, why in ctx.nemesis.skipped]
    for f, why in ctx.nemesis.skipped:
        say(f"warning: fault {f.id} ({f.describe()}) was not injected: {why}")
    for e in heal_errors:
        say(f"error: a fault could not be undone: {e}")
    if heal_errors:
        ctx.rc_run = EXIT_RUN_FAILED
    ctx.cluster = Cluster.attach(ctx.name)  # state.json again: restarted nodes have new pids


def catch_up(ctx: RunContext) -> None:
    ctx.ending["catchUp"] = wait_catch_up(ctx.cluster, ctx.args.catchup_timeout)


def repair(ctx: RunContext) -> None:
    """--repair: every forked group repaired, then the catch-up again."""
    if ctx.args.repair:
        ctx.ending["repairs"] = repair_forks(ctx.cluster, ctx.ending["catchUp"])
        if ctx.ending["repairs"]:
            ctx.ending["catchUp"] = wait_catch_up(ctx.cluster, ctx.args.catchup_timeout)


def drain(ctx: RunContext) -> None:
    """The workload told the cluster is healed (a late group starts then); every consumer group drained
    (ending["drain"]); then the workload told to stop."""
    workload, run_id = ctx.workload, ctx.run_id
    Path(str(ctx.drain_signal) + ".healed").write_text("healed")
    if ctx.args.late_consumer_after_heal and workload.poll() is None:
        late_group = f"ChaosLateCG{run_id}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and late_group not in (
            (read_json(ctx.progress_path) or {}).get("groups") or []
        ):
            time.sleep(0.2)
    prog = read_json(ctx.progress_path) or {}
    groups = prog.get("groups") or [f"ChaosCG{run_id}"]
    topic_of = prog.get("groupTopics") or {}
    ctx.ending["drain"] = {}
    for topic in sorted({topic_of.get(g, TOPIC) for g in groups}):
        ctx.ending["drain"].update(
            drain_groups(
                ctx.cluster,
                [g for g in groups if topic_of.get(g, TOPIC) == topic],
                topic,
                ctx.args.drain_timeout if workload.poll() is None else 0.0,
            )
        )
    ctx.drain_signal.write_text("stop")


def end_run(ctx: RunContext) -> None:
    """RUN/chaos/ending-<id>.json; the workload's last line (its counts) said, or its failure."""
    (ctx.rd / "chaos" / f"ending-{ctx.run_id}.json").write_text(json.dumps(ctx.ending, indent=1))
    workload = ctx.workload
    try:
        out, _ = workload.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        workload.kill()
        out, _ = workload.communicate()
    final = None
    for ln in (out or "").splitlines()[::-1]:
        try:
            final = json.loads(ln)
            break
        except ValueError:
            continue
    if workload.returncode != 0 or final is None:
        say(f"error: the workload failed (exit {workload.returncode}); see {ctx.rd / 'chaos' / ctx.wl_log.name}")
        ctx.rc_run = EXIT_RUN_FAILED
    else:
        say(
            f"workload ({ctx.args.client} client): {final['attempts']} send attempts: ok={final['ok']} "
            f"timeout={final['timeouts']} not-available={final['not_available']} error={final['errors']} "
            f"(gave up {final['gave_up']}); received {final['received']} ({final['received_unique']} distinct of "
            f"{final['stored_unique']} stored sends)"
        )
    for f, err in ctx.nemesis.done:
        if err:
            say(f"  nemesis: {f.describe()}: {err}")


LIVE_PHASES = (
    create_topics,
    start_sampler,
    start_workload,
    start_nemesis,
    live_status,
    heal,
    catch_up,
    repair,
    drain,
    end_run,
)


def run_live(ctx: RunContext) -> None:
    """The live phases in order; any exception or Ctrl-C ends them (rc_run 3 or 130) and cleanup_live runs
    whatever happened."""
    try:
        for phase in LIVE_PHASES:
            phase(ctx)
    except Exception as e:
        ctx.line.end()
        say(f"error: {type(e).__name__}: {e}")
        ctx.rc_run = EXIT_RUN_FAILED
    except KeyboardInterrupt:
        ctx.line.end()
        say("interrupted: healing, then stopping the cluster")
        ctx.rc_run = 130
    finally:
        cleanup_live(ctx)


def cleanup_live(ctx: RunContext) -> None:
    """The nemesis stopped, every fault healed (unless heal did), the fault log closed, the workload stopped."""
    ctx.stop.set()
    heal_errors = [] if ctx.ending.get("healed") else ctx.nemesis.heal_all()
    for e in heal_errors:
        say(f"error: a fault could not be undone: {e}")
    if heal_errors and not ctx.rc_run:
        ctx.rc_run = EXIT_RUN_FAILED
    ctx.fault_log.close()
    workload = ctx.workload
    if workload is not None and workload.poll() is None:
        workload.terminate()
        try:
            workload.wait(10)
        except subprocess.TimeoutExpired:
            workload.kill()


def stop_cluster(ctx: RunContext) -> int | None:
    """7. The slaves' state said even after a broken run, the sampler stopped, the cluster stopped with its
    stores kept (--keep-running: left as it is, and the run ends here)."""
    ctx.cluster = cluster = Cluster.attach(ctx.name)
    if "catchUp" not in ctx.ending:  # the run broke before its end: still say where the slaves are
        ctx.ending["catchUp"] = wait_catch_up(cluster, ctx.args.catchup_timeout)
    for p in ctx.procs:
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
    if ctx.samples.exists():
        with open(ctx.samples) as fh:
            say(f"{sum(1 for _ in fh)} metric samples in {ctx.samples}")
    if ctx.args.keep_running:
        say(f"cluster {ctx.name} left running (--keep-running): audit skipped")
        return ctx.rc_run or 0
    for note in cluster.down(keep_data=True):
        say(f"  {note}")
    say(f"cluster {ctx.name} stopped; stores kept in {ctx.rd}/nodes/*/store")
    return None


def audit(ctx: RunContext) -> int:
    """`python -m rmqha.pipeline RUN --out DIR` (or the prewarmed one told to go); its exit status. A failed
    run, or --no-audit, cancels a prewarmed audit and returns the run's status."""
    rd, out_dir, audit_log = ctx.rd, ctx.out_dir, ctx.audit_log
    if ctx.rc_run or ctx.args.no_audit:
        for p in ctx.procs_audit:
            ctx.audit_go.write_text("cancel")
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        if ctx.args.no_audit and not ctx.rc_run:
            say(f"audit left to the caller (--no-audit): python -m rmqha.pipeline {rd}")
        return ctx.rc_run
    say(f"$ python -m rmqha.pipeline {rd} --out {out_dir}")
    if ctx.audit_proc is not None:
        ctx.audit_go.write_text("go")
        audit_out, _ = ctx.audit_proc.communicate()
        rc_audit = ctx.audit_proc.returncode
    else:
        with open(audit_log, "w") as log:
            run = subprocess.run(
                py("-m", "rmqha.pipeline", str(rd), "--out", str(out_dir)),
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                env=ctx.env,
                cwd=ctx.repo,
            )
        audit_out, rc_audit = run.stdout, run.returncode
    sys.stdout.write(audit_out)
    verdict = {0: "PASS: every guarantee held", 1: "FAIL: a guarantee failed"}.get(
        rc_audit, f"the audit did not run (exit {rc_audit}; log {audit_log})"
    )
    say(f"audit: {verdict}")
    say(f"report: {out_dir / 'report.md'}")
    return rc_audit


SETUP_PHASES = (start_cluster, prepare_faults, plan_schedule, prepare_run, prewarm_audit)


def main(argv: list[str] | None = None) -> int:
    ctx = parse_run(argv)
    if isinstance(ctx, int):
        return ctx
    for phase in SETUP_PHASES:  # 1. the cluster, the faults it can take, the schedule
        if (rc := phase(ctx)) is not None:
            return rc
    run_live(ctx)  # 2-6. sampler, workload, nemesis, status, heal, catch-up, drain
    if (rc := stop_cluster(ctx)) is not None:  # 7. stop (stores kept) whatever happened, then audit
        return rc
    return audit(ctx)


if __name__ == "__main__":
    sys.exit(main())
