"""The honest end of a chaos run (rmqha/chaos/run.py, phase 6), what fills RUN/chaos/ending-<id>.json: wait
until every slave holds its master's log (or say why it cannot: a fork), repair forked groups on request,
and wait until every consumer group has consumed every queue to its end."""

from __future__ import annotations

import time

from rmqha.chaos.run_status import fmt_lag, say
from rmqha.cluster import ClusterError


def wait_catch_up(cluster, timeout: float) -> dict:
    """Until every slave holds exactly its master's log, or it is clear why one cannot: a slave AHEAD of
    its master (the master came back behind it: a fork, replication is off for that group until an
    operator acts) is never counted as caught up. Returns {slave: "caught up" | reason}."""
    say(f"waiting up to {timeout:g}s for every slave to catch up")
    deadline = time.monotonic() + timeout
    while True:
        lags = cluster.lags()
        ahead = cluster.slaves_ahead()
        forked = {s for m in ahead for s in cluster.slaves_of(m)}
        result = {}
        for s, v in sorted(lags.items()):
            if s in forked:
                a = ahead[cluster.master_of(s)][0]
                result[s] = (
                    f"forked: SLAVE_AHEAD, holds up to {a.get('slaveAckOffset')} of a history its master "
                    f"lost (master at {(cluster.status(cluster.master_of(s)) or {}).get('maxPhyOffset')})"
                )
            elif v == 0:
                result[s] = "caught up"
            else:
                result[s] = f"lag {fmt_lag(v, cluster.lag_unit(s))}" if v is not None else "not answering"
        if all(r == "caught up" or r.startswith("forked") for r in result.values()):
            break
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    for s, r in result.items():
        say(f"  {s}: {r}" if r == "caught up" else f"  warning: {s} did not catch up: {r}")
    return result


def repair_forks(cluster, catch_up: dict) -> list[dict]:
    """rmqha/cluster/repair.py on every group with a forked slave; returns what each repair did."""
    from rmqha.cluster.repair import repair_group

    done = []
    for group in sorted(
        {cluster.node(cluster.master_of(s)).get("brokerName") for s, r in catch_up.items() if r.startswith("forked")}
    ):
        say(f"repairing forked group {group}")
        try:
            done += [r.to_json() for r in repair_group(cluster, group, say=lambda m: say("  " + m))]
        except ClusterError as e:
            say(f"  error: the repair of {group} failed: {e}")
            done.append({"group": group, "error": str(e)})
    return done


def drain_groups(cluster, groups: list[str], topic: str, timeout: float) -> dict:
    """Until every consumer group has committed every queue of the topic on every master to its end.
    Returns {group: {"drained": bool, "backlog": {master: {queue: n}}}} and says what is left."""
    deadline = time.monotonic() + timeout
    if timeout > 0:
        say(f"draining {len(groups)} consumer group(s) to the end of every queue (up to {timeout:g}s)")
    while True:
        offsets = {g: cluster.group_offsets(g, topic) for g in groups}
        backlog = {
            g: {
                m: {q: (None if o is None else max(0, o["max"] - o["committed"])) for q, o in qs.items()}
                for m, qs in per.items()
            }
            for g, per in offsets.items()
        }
        left = {g: {m: {q: n for q, n in qs.items() if n != 0} for m, qs in b.items()} for g, b in backlog.items()}
        left = {g: {m: qs for m, qs in b.items() if qs} for g, b in left.items()}
        if not any(left.values()) or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    out = {}
    for g in groups:
        # committed: where the group's consumers stopped, per master and queue; the audit calls an
        # acknowledged message at or past it "backlog" (still queued: the consumer stalled), not "queued"
        out[g] = {
            "drained": not left[g],
            "backlog": left[g],
            "committed": {m: {q: (o or {}).get("committed") for q, o in qs.items()} for m, qs in offsets[g].items()},
        }
        if left[g]:
            say(
                f"  warning: group {g} not drained: "
                + "; ".join(
                    f"{m} " + ", ".join(f"q{q}: {'no answer' if n is None else f'{n} left'}" for q, n in qs.items())
                    for m, qs in left[g].items()
                )
            )
        else:
            say(f"  group {g}: every queue consumed to its end")
    return out
