"""python -m rmqha.cluster {up,status,wait,logs,sample,down,ls}: see `python -m rmqha.cluster -h`."""

from __future__ import annotations

import argparse
import os
import sys
import time

from . import ClusterError
from . import runfolder as rf
from .backend import BACKENDS, UpOptions, attach, backend_class
from .implementations import add_arguments, parse_choice
from .status import collect, render_json, render_table
from .topology import TOPOLOGIES, PortPlan, add_set_argument, load_topology, parse_sets
from .wait import REGISTRATION_MODES, ProcessExited, wait_ready

EPILOG = """\
examples:
  python -m rmqha.cluster up --topology 2m-2s-sync                 # docker: compose + Toxiproxy
  python -m rmqha.cluster up --topology 2m-2s-sync --backend local
  python -m rmqha.cluster up --topology 2m-2s-async --name t1 --base-port 20000
  python -m rmqha.cluster status --format json
  python -m rmqha.cluster logs broker-a-s -f
  python -m rmqha.cluster down --keep-data

status, wait, logs, sample and down act on the current cluster (run/current, set by `up`) unless
--name is given. The run folder is run/<name>/ (CLUSTER_RUN_ROOT overrides run/).
"""


def _add_name(p: argparse.ArgumentParser) -> None:
    p.add_argument("--name", default=None, help="cluster name (default: the current cluster, run/current)")


def _add_up(sub) -> None:
    """`up`: the topology, backend, name, ports and broker config of a new cluster; the readiness wait."""
    up = sub.add_parser("up", help="start a cluster and wait until it is ready")
    up.add_argument(
        "--topology",
        default=os.environ.get("TOPOLOGY") or "2m-2s-sync",
        help=f"one of {', '.join(TOPOLOGIES)} (a folder under compose/; default 2m-2s-sync)",
    )
    up.add_argument(
        "--backend",
        default=os.environ.get("BACKEND") or "docker",
        choices=sorted(BACKENDS),
        help="docker (default: a compose project with Toxiproxy) or local (processes on loopback)",
    )
    up.add_argument(
        "--name",
        default=os.environ.get("CLUSTER_NAME") or rf.DEFAULT_NAME,
        help="cluster name, also its run folder run/<name> (default: default)",
    )
    up.add_argument(
        "--base-port",
        type=int,
        default=None,
        help="broker-a's listenPort (default $CLUSTER_BASE_PORT or 10911); the cluster's 50 ports are "
        "base-2 .. base+47, the name server 9876 for 10911, else base+47",
    )
    up.add_argument("--namesrv-port", type=int, default=None, help="name server port (default: see --base-port)")
    add_set_argument(up, "extra broker config for every broker, or for one node (repeatable)")
    up.add_argument("--fresh", action="store_true", help="wipe stores kept by an earlier `down --keep-data`")
    up.add_argument(
        "--acl",
        action="store_true",
        default=os.environ.get("ACL") in ("1", "true", "yes"),
        help="aclEnable on every broker with a plain_acl.yml the kit writes (one admin account, "
        "its secret in state.json); the kit signs its own requests",
    )
    add_arguments(up)
    up.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for readiness (default 60)")
    up.add_argument("--no-wait", action="store_true", help="return as soon as the processes are started")
    up.add_argument(
        "--registration",
        choices=REGISTRATION_MODES,
        default="auto",
        help="whether readiness needs name-server registration (default auto: see rmqha/cluster/wait.py)",
    )


def _add_status(sub) -> None:
    """`status`: every node, as a table or JSON lines."""
    st = sub.add_parser("status", help="show every node: role, offsets, replication")
    _add_name(st)
    st.add_argument(
        "--format",
        choices=("table", "json"),
        default=os.environ.get("FORMAT") or "table",
        help="table (default) or json: one JSON object per node per line",
    )


def _add_wait(sub) -> None:
    """`wait`: until the cluster is ready."""
    wt = sub.add_parser("wait", help="wait until the cluster is ready")
    _add_name(wt)
    wt.add_argument("--timeout", type=float, default=60.0)
    wt.add_argument("--registration", choices=REGISTRATION_MODES, default=None)


def _add_logs(sub) -> None:
    """`logs`: one node's log or all of them, optionally followed."""
    lg = sub.add_parser("logs", help="show the logs of one node (or all)")
    _add_name(lg)
    lg.add_argument("node", nargs="?", help="broker-a, broker-a-s, ..., or namesrv (default: all)")
    lg.add_argument(
        "-n", "--lines", type=int, default=None, help="lines per log (default 100 for one node, 20 each for all)"
    )
    lg.add_argument("-f", "--follow", action="store_true", help="keep printing new lines (Ctrl-C to stop)")


def _add_sample(sub) -> None:
    """`sample`: replication offsets, every interval, to a JSON-lines file."""
    sp = sub.add_parser("sample", help="append replication offsets to RUN_DIR/metrics/samples.jsonl")
    _add_name(sp)
    sp.add_argument("--interval-ms", type=int, default=1000)
    sp.add_argument("--duration", type=float, default=None, help="seconds (default: until Ctrl-C)")
    sp.add_argument("--count", type=int, default=None, help="rounds (default: until Ctrl-C)")
    sp.add_argument("--out", default=None, help="file (default RUN_DIR/metrics/samples.jsonl)")


def _add_down(sub) -> None:
    """`down`: stop the cluster, its stores kept or removed."""
    dn = sub.add_parser("down", help="stop the cluster; remove its stores unless --keep-data")
    _add_name(dn)
    dn.add_argument(
        "--keep-data",
        action="store_true",
        default=os.environ.get("KEEP_DATA") in ("1", "true", "yes"),
        help="keep nodes/*/store (for the audit, or to restart with the data); env KEEP_DATA=1",
    )
    dn.add_argument("--timeout", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL")


def _add_repair(sub) -> None:
    """`repair`: a forked broker group."""
    rp = sub.add_parser(
        "repair",
        help="a forked broker group (SLAVE_AHEAD): re-send the slave's stranded "
        "messages to the master, cut the slave at the fork, resync it (see rmqha/cluster/repair.py)",
    )
    _add_name(rp)
    rp.add_argument("group", help="the broker group (brokerName), e.g. broker-a")
    rp.add_argument("--timeout", type=float, default=120.0, help="seconds for the slave to catch up afterwards")
    rp.add_argument(
        "--accept-loss",
        action="append",
        default=[],
        metavar="TOPIC",
        help="stranded records of this topic no client may send to (TRANS_CHECK_MAX_TIME_TOPIC, "
        "SELF_TEST_TOPIC, OFFSET_MOVED_EVENT) may be cut without being put back; repeatable",
    )


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m rmqha.cluster",
        description="Start, watch and stop a RocketMQ HA reference cluster.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    _add_up(sub)
    _add_status(sub)
    _add_wait(sub)
    _add_logs(sub)
    _add_sample(sub)
    _add_down(sub)
    _add_repair(sub)
    sub.add_parser("ls", help="list the clusters under run/")
    return ap


# ---- commands ----------------------------------------------------------------------------------


def cmd_up(args) -> int:
    name = rf.check_name(args.name)
    topology = load_topology(args.topology)
    plan = PortPlan.make(args.base_port, args.namesrv_port)
    extra, per_node = parse_sets(args.set, topology)
    cls = backend_class(args.backend)
    rd = rf.run_dir(name)
    t0 = time.monotonic()
    backend = cls.start(
        name,
        rd,
        topology,
        plan,
        UpOptions(
            fresh=args.fresh,
            extra=extra,
            extra_per_node=per_node,
            registration=args.registration,
            acl=args.acl,
            broker=parse_choice(args.broker, home=args.rocketmq_home, nodes=[n.name for n in topology.nodes]),
        ),
    )
    state = backend.state
    err = sys.stderr
    err.write(
        f"started cluster {name}: {topology.name} on the {cls.name} backend, "
        f"name server {state['namesrv']['addr']}, run folder {rd}\n"
    )
    if state.get("keptStores"):
        err.write(f"  reusing kept stores of {', '.join(state['keptStores'])} (--fresh wipes them)\n")
    if args.no_wait:
        return 0
    try:
        wait_ready(state, backend, timeout=args.timeout, registration=args.registration, out=err)
    except ProcessExited as e:
        backend.stop(keep_data=True)
        raise ClusterError(
            f"{e}, then run `up` again; the rest of cluster {name} was stopped "
            "(stores and logs are kept; add --fresh to start from empty stores)"
        ) from None
    elapsed = time.monotonic() - t0
    err.write(f"cluster {name} is ready in {elapsed:.1f}s\n")
    if state.get("acl"):
        err.write(
            f"ACL on: clients sign with access key {state['acl']['accessKey']} and the secret key in "
            f'{rd / "state.json"} ("acl"); the official client: set_session_credentials(ak, sk, "")\n'
        )
    sys.stdout.write(render_table(collect(state, backend)) + render_proxies(backend))
    err.write(
        "next: python -m rmqha.cluster status | logs [NODE] | down [--keep-data]"
        + (f"   (this cluster: --name {name})\n" if name != rf.get_current() else "\n")
    )
    return 0


def cmd_status(args) -> int:
    name, rd, state = rf.resolve(args.name)
    backend = attach(name, rd, state)
    cs = collect(state, backend)
    if args.format == "json":
        sys.stdout.write(with_proxies_json(render_json(cs), backend))
    else:
        sys.stdout.write(render_table(cs) + render_proxies(backend))
    return 0 if all(n.up for n in cs.nodes) else 1


def render_proxies(backend) -> str:
    """The proxies of a backend that has them (docker: Toxiproxy), as a table under the nodes'."""
    proxies = backend.proxies()
    if not proxies:
        return ""
    from .status import format_table

    rows = []
    for p in proxies:
        state = "?" if p["enabled"] is None else ("enabled" if p["enabled"] else "DISABLED")
        toxics = ", ".join(
            f"{t['name']}({t['type']} {t['stream']} "
            + " ".join(f"{k}={v}" for k, v in sorted((t.get("attributes") or {}).items()))
            + ")"
            for t in p["toxics"]
        ) or ("-" if not p.get("error") else p["error"])
        rows.append((p["name"], p["kind"], p.get("hostEndpoint") or "-", p["listen"], p["upstream"], state, toxics))
    api = (backend.state.get("toxiproxy") or {}).get("api", "?")
    return f"proxies (Toxiproxy API {api}):\n" + format_table(
        ("PROXY", "LINK", "HOST ENDPOINT", "LISTEN", "UPSTREAM", "STATE", "TOXICS"), rows
    )


def with_proxies_json(lines: str, backend) -> str:
    """Adds "proxies" (each node's proxies with their live state) to the JSON lines of a backend that has them."""
    import json

    proxies = backend.proxies()
    if not proxies:
        return lines
    out = []
    for line in lines.splitlines():
        obj = json.loads(line)
        obj["proxies"] = [p for p in proxies if p["node"] == obj.get("name")]
        out.append(json.dumps(obj) + "\n")
    return "".join(out)


def cmd_wait(args) -> int:
    name, rd, state = rf.resolve(args.name)
    if state.get("stoppedAt"):
        raise ClusterError(f"cluster {name} is stopped; start it with `python -m rmqha.cluster up --name {name} ...`")
    backend = attach(name, rd, state)
    try:
        elapsed, _ = wait_ready(state, backend, timeout=args.timeout, registration=args.registration, out=sys.stderr)
    except ProcessExited as e:
        raise ClusterError(f"{e}; `python -m rmqha.cluster down --name {name}` stops the rest") from None
    sys.stderr.write(f"cluster {name} is ready ({elapsed:.1f}s)\n")
    return 0


def cmd_logs(args) -> int:
    name, rd, state = rf.resolve(args.name)
    backend = attach(name, rd, state)
    nodes = [args.node] if args.node else ["namesrv"] + backend.node_names()
    for n in nodes:
        backend.process_state(n)  # an unknown node name fails here, listing the known ones
    if args.follow:
        try:
            backend.follow_logs(nodes, lines=args.lines if args.lines is not None else 10)
        except KeyboardInterrupt:
            pass
        return 0
    n_lines = args.lines if args.lines is not None else (100 if args.node else 20)
    for n in nodes:
        if len(nodes) > 1:
            sys.stdout.write(f"==> {n}: {backend.log_location(n)} <==\n")
        for line in backend.log_tail(n, n_lines):
            sys.stdout.write(line + "\n")
        if len(nodes) > 1:
            sys.stdout.write("\n")
    return 0


def cmd_sample(args) -> int:
    from pathlib import Path

    from .sample import run_sampler

    name, rd, state = rf.resolve(args.name)
    path = Path(args.out) if args.out else rd / "metrics" / "samples.jsonl"
    sys.stderr.write(f"sampling cluster {name} every {args.interval_ms} ms into {path} (Ctrl-C stops)\n")
    run_sampler(
        state,
        None,
        path,
        interval_ms=args.interval_ms,
        duration=args.duration,
        count=args.count,
        out=sys.stderr,
        served_path=rd / "served" / "pulls.jsonl",
    )
    return 0


def cmd_down(args) -> int:
    name, rd, state = rf.resolve(args.name)
    from .handle import Cluster

    # through the handle: it also heals the proxies and takes the stores off their size-limited tmpfs
    notes = Cluster(attach(name, rd, state)).down(keep_data=args.keep_data, timeout=args.timeout)
    for note in notes:
        sys.stderr.write(f"  {note}\n")
    kept = f"stores kept in {rd}/nodes/*/store" if args.keep_data else "stores removed"
    sys.stderr.write(f"cluster {name} stopped; {kept}; logs in {rd}\n")
    return 0


def cmd_ls(args) -> int:
    current = rf.get_current()
    names = rf.list_clusters()
    if not names:
        sys.stdout.write(f"no clusters under {rf.run_root()}\n")
        return 0
    rows = []
    for n in names:
        st = rf.read_state(rf.run_dir(n)) or {}
        try:
            b = attach(n, rf.run_dir(n), st)
            alive = sum(b.process_state(x).running for x in ["namesrv"] + b.node_names())
            state = (
                f"running {alive}/{1 + len(b.node_names())}"
                if alive
                else ("stopped" if st.get("stoppedAt") else "exited")
            )
        except ClusterError:
            state = "?"
        rows.append(
            (
                "*" if n == current else "",
                n,
                st.get("topology", "?"),
                st.get("backend", "?"),
                state,
                str(st.get("basePort", "?")),
                (st.get("namesrv") or {}).get("endpoint") or (st.get("namesrv") or {}).get("addr", "?"),
            )
        )
    from .status import format_table

    sys.stdout.write(format_table(("", "NAME", "TOPOLOGY", "BACKEND", "STATE", "BASE PORT", "NAME SERVER"), rows))
    return 0


def cmd_repair(args) -> int:
    import json

    from .handle import Cluster
    from .repair import repair_group

    c = Cluster.attach(args.name)
    results = repair_group(
        c,
        args.group,
        say=lambda m: sys.stderr.write(m + "\n"),
        catchup_timeout=args.timeout,
        accept_loss=frozenset(args.accept_loss),
    )
    for r in results:
        sys.stdout.write(json.dumps(r.to_json()) + "\n")
    return 0


COMMANDS = {
    "up": cmd_up,
    "status": cmd_status,
    "wait": cmd_wait,
    "logs": cmd_logs,
    "sample": cmd_sample,
    "down": cmd_down,
    "ls": cmd_ls,
    "repair": cmd_repair,
}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except ClusterError as e:
        sys.stderr.write(f"error: {e}\n")
        return 1
    except BrokenPipeError:  # `... | head`: the reader left; not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        sys.stderr.write(
            "\ninterrupted; processes already started keep running "
            "(`python -m rmqha.cluster status` / `python -m rmqha.cluster down`)\n"
        )
        return 130


if __name__ == "__main__":
    sys.exit(main())
