"""The project's one waiter, and the wait until a cluster is ready.

wait_until(predicate, timeout, what, *, interval, on_timeout) polls with a deadline; the cluster handle,
rmqha/cluster/standalone.py and the tests that poll real processes wait through it (the handle's wait_until
adds the nodes' log tails).

wait_ready waits until a cluster is ready, showing progress live. Ready means:
  - the name server answers GET_BROKER_CLUSTER_INFO;
  - every broker process runs and answers /status;
  - every broker is registered with the name server (see "registration" below);
  - every master counts as many validated HA connections as the topology gives it slaves;
  - every slave's HA client is CONNECTED and its reported offset equals its master's maxPhyOffset.

A DLedger group (enableDLegerCommitLog=true, topology `dledger`) has no HA client and no planned
master: it is ready when exactly one of its nodes is master (brokerId 0 in the name server's cluster
info, SYNC_MASTER and DLedger LEADER on /status), every other node is a SLAVE registered under its own
id (dLegerSelfId's number + 1, the id its /status shows), and every follower's committed index is
within DLEDGER_MAX_LAG entries of the leader's (0: equal). Registration is always required there.

registration: "required", "optional", or "auto" (the default): required when this checkout has
rmqha/broker/managers/registration.py or when any broker of the cluster is already registered, optional otherwise
(registration is being written; until it lands no broker registers and waiting for it would hang).

A process that exits while we wait fails at once, with the last lines of its log.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from dataclasses import dataclass

from . import ClusterError
from .backend import Backend
from .status import ClusterStatus, NodeStatus, collect, unavailable

REGISTRATION_MODES = ("auto", "required", "optional")
LOG_TAIL_LINES = 20
SPINNER = "|/-\\"
DLEDGER_MAX_LAG = 0  # entries a follower's committedIndex may trail the leader's when `up` returns


def registration_required(mode: str, cs: ClusterStatus) -> bool:
    if mode == "required":
        return True
    if mode == "optional":
        return False
    if cs.registered_count() > 0:
        return True
    return importlib.util.find_spec("rmqha.broker.managers.registration") is not None


@dataclass
class Check:
    ready: bool
    text: str


def check_node(cs: ClusterStatus, n: NodeStatus, need_registration: bool) -> Check:
    if not n.up:
        return Check(False, "starting: no answer on /status yet")
    if n.is_dledger:
        return check_dledger_node(cs, n)
    if need_registration and not n.registered:
        if not cs.namesrv_up:
            return Check(False, "waiting for the name server to answer")
        return Check(False, f"not registered with the name server {cs.namesrv_endpoint} yet")
    s = n.status
    if n.is_master:
        mo = n.max_offset
        want = sum(1 for o in cs.nodes if o.spec.get("master") == n.name)
        have = (s.get("ha") or {}).get("connectionCount")
        if have is None and unavailable(s, "ha.connectionCount"):  # a 4.9 broker off this machine
            return Check(True, f"up, maxPhyOffset {mo}; slave connections unavailable ({n.spec.get('implementation')})")
        have = have or 0
        if have < want:
            return Check(False, f"up at maxPhyOffset {mo}; {have}/{want} slaves connected")
        return Check(True, f"up, maxPhyOffset {mo}" + (f", {have} slave(s) connected" if want else ""))
    hc = s.get("haClient") or {}
    state = hc.get("state")
    if state is None and unavailable(s, "haClient.state"):
        state = "CONNECTED"  # not served (4.9 off this machine): judged by the offsets alone
    if state != "CONNECTED":
        return Check(False, f"HA client {state} to {hc.get('haMasterAddress')}")
    m = cs.master_of(n)
    if m is None or not m.up:
        return Check(False, f"waiting for its master {n.spec.get('master')}")
    reported, mo = hc.get("currentReportedOffset"), m.max_offset
    if reported is None or reported < 0:
        return Check(False, "CONNECTED, no offset reported yet")
    if reported != mo:
        return Check(False, f"catching up: reported {reported} of master's {mo}")
    return Check(True, f"CONNECTED, in sync with {m.name} at {mo}")


def check_dledger_node(cs: ClusterStatus, n: NodeStatus, max_lag: int | None = None) -> Check:
    """One node of a DLedger group (see the module docstring)."""
    max_lag = DLEDGER_MAX_LAG if max_lag is None else max_lag
    s, d = n.status or {}, n.dledger
    if not d:
        return Check(False, "up, but /status shows no DLedger state (is enableDLegerCommitLog=true?)")
    role, term, ci = d.get("role"), d.get("term"), d.get("committedIndex")
    here = f"DLedger {role} term {term} committed {ci}"
    if not cs.namesrv_up:
        return Check(False, f"{here}; waiting for the name server to answer")
    group = cs.dledger_group(n)
    masters = [o for o in group if o.up and o.role != "SLAVE"]
    if n.registered_id is None:
        return Check(False, f"{here}; not registered with the name server {cs.namesrv_endpoint} yet")
    if n.registered_id != n.broker_id:
        return Check(False, f"{here}; registered as brokerId {n.registered_id}, /status says {n.broker_id}")
    leader = cs.dledger_leader(n)
    if leader is None:
        return Check(False, f"{here}; no master (brokerId 0) in the name server yet")
    if len(masters) != 1:
        return Check(
            False,
            f"{here}; {len(masters)} nodes of {n.spec.get('brokerName')} claim a master role: "
            + ", ".join(o.name for o in masters),
        )
    if n is leader:
        if (s.get("role"), role) != ("SYNC_MASTER", "LEADER") or n.broker_id != 0:
            return Check(
                False, f"{here}; the name server's master, but /status says {s.get('role')} brokerId {n.broker_id}"
            )
        return Check(True, f"master (brokerId 0), {here}")
    if s.get("role") != "SLAVE":
        return Check(False, f"{here}; {s.get('role')} brokerId {n.broker_id}, not a slave yet")
    self_id = d.get("selfId") or ""
    want = int(self_id[1:]) + 1 if self_id[1:].isdigit() else None
    if want is not None and n.broker_id != want:
        return Check(False, f"{here}; SLAVE with brokerId {n.broker_id}, expected {want} ({self_id})")
    lc = leader.dledger.get("committedIndex")
    if unavailable(s, "dledger.committedIndex") or unavailable(leader.status, "dledger.committedIndex"):
        # 4.9 serves no committed index (this node, or the leader of a mixed group): the commit logs' ends
        # stand for it on both sides (4.9's and ours's maxPhyOffset: the end of the committed entries)
        lc, ci = leader.max_offset, n.max_offset
    if lc is None or ci is None or lc - ci > max_lag:
        return Check(False, f"{here}; catching up: leader {leader.name} committed {lc}")
    return Check(True, f"slave (brokerId {n.broker_id}), {here}, in sync with {leader.name}")


def check_namesrv(cs: ClusterStatus) -> Check:
    if cs.namesrv_up:
        return Check(True, f"up at {cs.namesrv_endpoint}, {cs.registered_count()}/{len(cs.nodes)} brokers registered")
    return Check(False, f"not answering at {cs.namesrv_endpoint}")


class ProcessExited(ClusterError):
    """A process of the cluster ended while we waited for it."""


class WaitTimeout(ClusterError, AssertionError):
    """A wait_until gave up. An AssertionError too, so a test that waits fails as a failed check."""


def wait_until(predicate, timeout: float, what: str, *, interval: float = 0.1, on_timeout=None):
    """The one wait: poll predicate() until it returns something true, and return that.

    An exception from the predicate counts as "not yet" (kept for the message), except ProcessExited,
    which ends the wait at once: a dead process will not get better. On timeout raise WaitTimeout
    naming `what`, the last value or error, and on_timeout()'s text (the handle passes the nodes' log
    tails). Sleeps `interval` between polls, never past the deadline."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            value = predicate()
            if value:
                return value
            last = f"last value {value!r}"
        except ProcessExited:
            raise
        except Exception as e:  # not ready yet
            last = f"last error {type(e).__name__}: {e}"
        now = time.monotonic()
        if now >= deadline:
            extra = ""
            if on_timeout is not None:
                try:
                    extra = "\n" + str(on_timeout())
                except Exception as e:
                    extra = f"\n(could not collect details: {e})"
            raise WaitTimeout(f"timed out after {timeout:g}s waiting for {what} ({last}){extra}")
        time.sleep(min(interval, max(0.0, deadline - now)))


def _exited_error(backend: Backend, name: str, cluster: str, detail: str) -> ClusterError:
    lines = backend.log_tail(name, LOG_TAIL_LINES)
    where = backend.log_location(name)
    body = "\n".join("    " + line for line in lines) if lines else "    (the log is empty)"
    return ProcessExited(
        f"{name} {detail} while the cluster was starting. Last {len(lines)} lines of {where}:\n{body}\n"
        f"next: fix the cause above (`python -m rmqha.cluster logs {name}` shows the whole log)"
    )


class Progress:
    """One line per node, redrawn in place on a terminal; only changes otherwise."""

    def __init__(self, out, names: list[str]):
        self.out = out
        self.names = names
        self.tty = hasattr(out, "isatty") and out.isatty()
        self.drawn = 0
        self.last: dict[str, str] = {}
        self.width = max(len(n) for n in names) if names else 8

    def update(self, elapsed: float, header: str, checks: dict[str, Check]) -> None:
        lines = [header] + [
            f"  [{'ok' if c.ready else '..'}] {name:<{self.width}}  {c.text}" for name, c in checks.items()
        ]
        if self.tty:
            buf = f"\x1b[{self.drawn}F" if self.drawn else ""
            buf += "".join(f"\x1b[2K{line}\n" for line in lines)
            self.out.write(buf)
            self.drawn = len(lines)
        else:
            for name, c in checks.items():
                text = f"[{'ok' if c.ready else '..'}] {c.text}"
                if self.last.get(name) != text:
                    self.out.write(f"{elapsed:6.1f}s {name:<{self.width}}  {text}\n")
                    self.last[name] = text
        self.out.flush()


def wait_ready(
    state: dict,
    backend: Backend,
    *,
    timeout: float = 60.0,
    registration: str | None = None,
    out=None,
    poll: float = 0.2,
) -> tuple[float, ClusterStatus]:
    """Block until the cluster is ready; return (seconds waited, last status). ClusterError otherwise."""
    out = out or sys.stderr
    mode = registration or state.get("registration") or "auto"
    if mode not in REGISTRATION_MODES:
        raise ClusterError(f"registration must be one of {', '.join(REGISTRATION_MODES)}, got {mode!r}")
    cluster = state.get("name", "?")
    names = ["namesrv"] + [n["name"] for n in state.get("nodes", [])]
    progress = Progress(out, names)
    start = time.monotonic()
    deadline = start + timeout
    tick = 0
    while True:
        cs = collect(state, backend, timeout=min(1.0, max(0.2, poll * 2)))
        now = time.monotonic()
        # A dead process will not get better: fail now, with its log.
        for name in names:
            ps = backend.process_state(name)
            if not ps.running and ps.detail != "unknown":
                raise _exited_error(backend, name, cluster, ps.detail)
        need_reg = registration_required(mode, cs)
        checks = {"namesrv": check_namesrv(cs)}
        for n in cs.nodes:
            checks[n.name] = check_node(cs, n, need_reg)
        elapsed = now - start
        ready = all(c.ready for c in checks.values())
        mark = "ready" if ready else SPINNER[tick % len(SPINNER)]
        progress.update(
            elapsed,
            f"{elapsed:5.1f}s {mark} waiting for cluster {cluster} ({state.get('topology')}, timeout {timeout:.0f}s)",
            checks,
        )
        tick += 1
        if ready:
            if not need_reg:
                out.write(
                    "  note: broker registration with the name server was not required "
                    f"(registration={mode}; rmqha/broker/managers/registration.py is not in this checkout yet)\n"
                )
            return elapsed, cs
        if now >= deadline:
            raise _timeout_error(state, backend, checks, timeout)
        time.sleep(poll)


def _timeout_error(state: dict, backend: Backend, checks: dict[str, Check], timeout: float) -> ClusterError:
    cluster = state.get("name", "?")
    lines = [f"cluster {cluster} is not ready after {timeout:.0f}s:"]
    first = None
    for name, c in checks.items():
        if not c.ready:
            first = first or name
            lines.append(f"  {name}: {c.text}  (log: {backend.log_location(name)})")
    lines.append(
        f"next: `python -m rmqha.cluster status --name {cluster}` for details, "
        f"`python -m rmqha.cluster logs {first}` for the log, "
        f"`python -m rmqha.cluster wait --name {cluster} --timeout {int(timeout * 2)}` to wait longer, "
        f"or `python -m rmqha.cluster down --name {cluster}` to stop it"
    )
    if any("registered" in c.text for c in checks.values() if not c.ready):
        lines.append("if brokers do not register with the name server yet, pass --registration optional")
    return ClusterError("\n".join(lines))
