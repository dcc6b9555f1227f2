"""`python -m rmqha.chaos.outcomes`: a SYNC_MASTER's three send outcomes, on demand, seen by the official client.

    python -m rmqha.chaos.outcomes [--name NAME] [--topic TopicOutcomes] [--only ok,flush-slave-timeout,...]

Against a running cluster (either backend) with at least one SYNC_MASTER that has a slave:

  ok                    every slave healthy                        -> SEND_OK
  flush-slave-timeout   every such slave frozen (docker pause / SIGSTOP): its HA connection stays up,
                        nothing is acknowledged, the master waits syncFlushTimeout -> FLUSH_SLAVE_TIMEOUT
  slave-not-available   every such slave stopped (SIGTERM); once its master has dropped the HA connection
                                                                   -> SLAVE_NOT_AVAILABLE
  ok                    slaves back and caught up                  -> SEND_OK again

Each send is one `send_async` (rocketmq 0.4.4's `send_sync` retries non-OK statuses and never shows them)
with a client timeout above the broker's sync wait, so the broker's answer is what the client reports.
The topic is created on the SYNC_MASTERs only, so every send meets a faulted slave. After each fault the
tool checks that the message is stored on the master all the same, heals, and waits (with a deadline)
until every slave holds its master's log again. Every send is recorded in RUN/history/outcomes-*.jsonl
(rmqha/runs/history.py's format), so `make audit` over the run accounts for it.

Exit status: 0 when every outcome was the expected one, 1 when one was not, 3 when the cluster is
unfit (none running, no SYNC_MASTER with a slave).
"""

from __future__ import annotations

import argparse
import sys
import threading

from rmqha.runs.faultlog import FaultLog
from rmqha.runs.recorder import HistoryRecorder, status_name
from rmqha.chaos.nemesis import Fault, Nemesis
from rmqha.cluster import ClusterError
from rmqha.runs.history import ERROR, now_ms
from rmqha.cluster.handle import Cluster

PHASES = {
    "ok": "SEND_OK",
    "flush-slave-timeout": "FLUSH_SLAVE_TIMEOUT",
    "slave-not-available": "SLAVE_NOT_AVAILABLE",
    "ok-again": "SEND_OK",
}
EXIT_UNFIT = 3


class Unfit(Exception):
    pass


def say(msg: str) -> None:
    sys.stdout.write(msg + "\n")
    sys.stdout.flush()


def sync_groups(cluster: Cluster) -> dict[str, list[str]]:
    """SYNC_MASTER node -> its slave nodes, from the running cluster's /status."""
    st = cluster.statuses()
    return {
        m: cluster.slaves_of(m)
        for m in cluster.masters()
        if (st.get(m) or {}).get("role") == "SYNC_MASTER" and cluster.slaves_of(m)
    }


def send_reporting(rec: HistoryRecorder, producer, topic: str, label: str, timeout_s: float) -> dict:
    """One send_async, waited for; recorded in the history. Returns the history record."""
    body = f"outcomes {label} {now_ms()}".encode()
    send_id = rec.new_send_id()
    msg = rec._message(topic, body, send_id, label, None)
    base = {"client": rec.client, "op": "send", "topic": topic, "send_id": send_id, "attempt": 1, "body_len": len(body)}
    done = threading.Event()
    out: dict = {}

    def record(**fields) -> None:
        out.update(rec.writer.append(base | {"start_ms": start, "end_ms": now_ms(), **fields}))

    def on_ok(res):
        uniq = res.msg_id.decode() if isinstance(res.msg_id, bytes) else res.msg_id
        record(status=status_name(res.status), uniq_key=uniq or None, queue_offset=res.offset)
        done.set()

    def on_err(exc):
        record(status=ERROR, error=f"{type(exc).__name__}: {exc}")
        done.set()

    start = now_ms()
    try:
        producer.send_async(msg, on_ok, on_err)
    except Exception as e:  # refused before it left the client
        on_err(e)
    if not done.wait(timeout_s):
        record(status=ERROR, error=f"no callback within {timeout_s:g} s")
    return out


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m rmqha.chaos.outcomes",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    ap.add_argument("--name", help="the cluster (default: the current one, run/current)")
    ap.add_argument("--topic", default="TopicOutcomes")
    ap.add_argument(
        "--only", default=",".join(PHASES), help=f"phases to run, in order (default all: {','.join(PHASES)})"
    )
    ap.add_argument(
        "--deadline",
        type=float,
        default=60.0,
        help="seconds to wait for each heal / catch-up / connection drop (default 60)",
    )
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    phases = [p.strip() for p in args.only.split(",") if p.strip()]
    bad = [p for p in phases if p not in PHASES]
    if bad:
        say(f"unknown phase(s) {', '.join(bad)}; known: {', '.join(PHASES)}")
        return 2
    try:
        cluster = Cluster.attach(args.name)
        name, rd = cluster.name, cluster.run_dir
        groups = sync_groups(cluster)
        if not groups:
            raise Unfit(
                f"cluster {name} ({cluster.state.get('topology')}) has no running SYNC_MASTER with a "
                "slave; start one with `make cluster-up TOPOLOGY=2m-2s-sync`"
            )
    except (ClusterError, Unfit) as e:
        say(f"error: {e}")
        return EXIT_UNFIT

    st = cluster.statuses()
    wait_ms = max(int((st.get(m) or {}).get("syncWaitMs") or 5000) for m in groups)
    timeout_ms = wait_ms + 4000  # above the broker's wait, so the broker's answer reaches the client
    described = "; ".join(f"{m} with {' '.join(s)}" for m, s in groups.items())
    say(
        f"cluster {name}: SYNC_MASTERs {described}; "
        f"sync wait {wait_ms} ms, client send timeout {timeout_ms} ms, topic {args.topic}"
    )

    cluster.create_topic(args.topic, list(groups))
    stamp = now_ms()
    rec = HistoryRecorder(str(rd / "history" / f"outcomes-{stamp}.jsonl"), client=f"outcomes-{stamp}")
    producer = rec.producer("OutcomesPG", namesrv=cluster.namesrv, timeout_ms=timeout_ms)
    fault_log = FaultLog(rd / "faults" / f"outcomes-{stamp}.jsonl")
    nemesis = Nemesis(cluster, log=say, fault_log=fault_log)
    results = []
    try:
        cluster.wait_caught_up(args.deadline, list(groups))
        for phase in phases:
            results.append(run_phase(phase, groups, nemesis, cluster, rec, producer, args, timeout_ms))
    except (ClusterError, RuntimeError) as e:
        say(f"error: {e}")
        results.append((None, "-", "-", str(e)))
    finally:
        errors = nemesis.heal_all()
        for e in errors:
            say(f"warning: {e}")
        producer.shutdown()
        rec.close()
        fault_log.close()

    say("")
    say(f"{'PHASE':21} {'EXPECTED':21} {'GOT':21} NOTE")
    for phase, want, got, note in results:
        say(f"{phase or 'aborted':21} {want:21} {got:21} {note}")
    failed = [r for r in results if r[1] != r[2]]
    say("every outcome as expected" if not failed else f"{len(failed)} outcome(s) not as expected")
    say(f"history: {rec.writer.path}; audit it after `make cluster-down KEEP_DATA=1` with `make audit RUN={rd}`")
    return 1 if failed else 0


def run_phase(phase, groups, nemesis, cluster, rec, producer, args, timeout_ms) -> tuple[str, str, str, str]:
    want = PHASES[phase]
    slaves = [s for ss in groups.values() for s in ss]
    slave_to_group = {s: m for m, ss in groups.items() for s in ss}
    before = {m: cluster.max_offset(m) for m in groups}

    def group(s):
        return cluster.node(slave_to_group[s])["brokerName"]

    faults = []
    if phase == "flush-slave-timeout":
        faults = [Fault(0, 0, "pause-slave", group(s), s) for s in slaves]
    elif phase == "slave-not-available":
        faults = [Fault(0, 0, "restart-slave", group(s), s) for s in slaves]
    for f in faults:
        say(f"  {phase}: {f.kind} {f.target}")
        nemesis.inject(f)
    try:
        if phase == "slave-not-available":
            cluster.wait_until(
                lambda: all(((cluster.status(m) or {}).get("ha") or {}).get("connectionCount") == 0 for m in groups),
                args.deadline,
                "every SYNC_MASTER dropped its slaves' HA connections",
                node=list(groups),
            )
        r = send_reporting(rec, producer, args.topic, phase, timeout_ms / 1000 + 5)
        took = r["end_ms"] - r["start_ms"]
        got = r["status"]
        after = {m: cluster.max_offset(m) for m in groups}
        grew = [m for m in groups if (after[m] or 0) > (before[m] or 0)]
        note = f"{took} ms; stored on {', '.join(grew) or 'no master'}"
        if r.get("error"):
            note += f"; {r['error']}"
        say(f"  {phase}: {got} ({note})")
        if want != "SEND_OK" and not grew:
            got += " (not stored)"
    finally:
        for f in faults:
            nemesis.heal(f)
            say(f"  {phase}: healed {f.target}")
    if faults:
        took = cluster.wait_caught_up(args.deadline, list(groups))
        say(f"  {phase}: slaves caught up in {took:.1f} s")
    return phase, want, got, note


if __name__ == "__main__":
    sys.exit(main())
