"""What RocketMQ 4.9 promises for a cell, and a cell's verdict against it (tests/unit/matrix/test_promises.py)."""

from __future__ import annotations


from rmqha.runs.faults import GROUP_POWER, master_power_cut
from .evidence import LOSS_FIELDS
from rmqha.pipeline.delivery import AT_RISK_MS
from .plan import is_dledger


def promise(topology: str, flush: str, kind: str, role: str) -> dict:
    """What RocketMQ 4.9 promises for one cell: may acknowledged sends be lost, may the replicas diverge."""
    if is_dledger(topology):
        # every DLedger fault of the kit takes one node of three (killed, paused or cut off): a minority
        return {
            "loss_allowed": False,
            "divergence_allowed": False,
            "why": "SEND_OK means a majority (2 of 3) appended it and it is committed; with one node down, "
            "frozen or cut off the other two still hold every committed entry, and only a node holding them "
            "all can be elected (Raft): nothing acknowledged is lost, the committed prefix never diverges",
        }
    sync = topology == "2m-2s-sync"
    group_power = kind in GROUP_POWER
    master_power = master_power_cut(kind, role)
    # SEND_OK on a SYNC_MASTER: a slave reported the bytes (docs/ha-protocol.md §5). With SYNC_FLUSH: fsynced on the
    # master. A SIGKILL keeps the page cache. So only an ASYNC_MASTER + ASYNC_FLUSH power loss can lose what
    # the slave had not received yet; and when the whole group loses power, with ASYNC_FLUSH what no node
    # had fsynced is gone in both topologies (a slave's report says it received the bytes, not that they are
    # on its disk).
    loss = master_power and flush == "ASYNC_FLUSH" and (group_power or not sync)
    # A master power loss can leave the slave holding bytes the master lost (replication runs ahead of the
    # master's flush in every configuration): the logs fork if the master then takes writes (SLAVE_AHEAD).
    diverge = master_power
    why = ("SEND_OK means a slave holds it" if sync else "SEND_OK means the master stored it") + (
        "; fsynced on the master" if flush == "SYNC_FLUSH" else ""
    )
    if loss and group_power:
        why += "; the power cut of every node holding it drops its unsynced tail everywhere"
    elif loss:
        why += "; a power cut drops the master's unsynced tail, and what the slave had not received is gone"
    elif master_power:
        why += "; the master's unsynced tail may be on the slave only (SLAVE_AHEAD, a fork if the master writes)"
    return {"loss_allowed": loss, "divergence_allowed": diverge, "why": why}


def excluded_text(samples: list[dict], explained: bool | None = None) -> str:
    """The records the audit excluded over a cell's samples, counted and named ("" when none); explained:
    only those EXPLAINED says cannot hide a loss (True) or only the others (False)."""
    total: dict[str, int] = {}
    where: dict[str, str] = {}
    why = {k for s in samples for k in s.get("explained") or ()}
    for s in samples:
        for k, n in (s.get("excluded") or {}).items():
            if n and (explained is None or (k in (s.get("explained") or ())) == explained):
                total[k] = total.get(k, 0) + n
                if (s.get("excluded_where") or {}).get(k):
                    where.setdefault(k, s["excluded_where"][k])
    return "; ".join(
        f"{n} {k}" + (f" (first: {where[k]})" if k in where else "") + (" (explained)" if k in why else "")
        for k, n in sorted(total.items())
    )


def group_availability_text(groups: dict[str, dict]) -> str:
    """ "broker-a 62 % (31/50), unwritable 3.1 s [SLAVE_NOT_AVAILABLE 19]; ?: 40 errors" for a cell."""
    parts = []
    for g in sorted(k for k in groups if k != "?"):
        c = groups[g]
        share = (
            f"{c['accepted'] / c['answered'] * 100:.0f} % ({c['accepted']}/{c['answered']})"
            if c["answered"]
            else "no answer"
        )
        why = ", ".join(f"{k} {v}" for k, v in sorted(c["not_accepted"].items()))
        parts.append(f"{g} {share}, unwritable {c['unwritable_s']} s" + (f" [{why}]" if why else ""))
    if "?" in groups:
        u = groups["?"]
        parts.append(
            f"group unknown: {u['errors']} failed tries (timeouts, errors, refusals)"
            + (f", {u['unknown']} answers stored nowhere" if u["unknown"] else "")
        )
    return "; ".join(parts) or "-"


def merge_groups(samples: list[dict]) -> dict[str, dict]:
    """A cell's per-group availability over its runs: answers summed, the longest unwritable time."""
    out: dict[str, dict] = {}
    for s in samples:
        for g, c in (s.get("group_availability") or {}).items():
            if g == "?":
                u = out.setdefault("?", {"errors": 0, "unknown": 0})
                u["errors"] += c["errors"]
                u["unknown"] += c["unknown"]
                continue
            m = out.setdefault(g, {"answered": 0, "accepted": 0, "not_accepted": {}, "unwritable_s": 0.0})
            m["answered"] += c["answered"]
            m["accepted"] += c["accepted"]
            m["unwritable_s"] = max(m["unwritable_s"], c["unwritable_s"])
            for k, v in c["not_accepted"].items():
                m["not_accepted"][k] = m["not_accepted"].get(k, 0) + v
    for g, m in out.items():
        if g != "?":
            m["share"] = round(m["accepted"] / m["answered"], 3) if m["answered"] else None
    return out


def _sum_or_none(samples: list[dict], key: str) -> int | None:
    """The sum of a figure over a cell's runs, or None when any run lacks it (the cell is not audited)."""
    xs = [s.get(key) for s in samples]
    return None if not xs or any(x is None for x in xs) else sum(xs)


def unavailable_s(samples: list[dict]) -> float | None:
    """The longest time the faulted group (every group, for a cluster-wide fault) accepted no send while
    sends were tried, over a cell's runs (group_availability's longest gap); None: no figures."""
    gaps = [
        c["longest_gap_s"]
        for s in samples
        for g, c in (s.get("group_availability") or {}).items()
        if g != "?" and "longest_gap_s" in c and s.get("group") in (None, g)
    ]
    return max(gaps) if gaps else None


def exercised(samples: list[dict]) -> list[dict]:
    """The samples that count as coverage: the fault had its effect, on a group that could replicate, and
    the group acknowledged a send while it was active."""
    return [
        s
        for s in samples
        if not s.get("not_exercised") and (s["acked_on_group"] if s.get("acked_on_group") is not None else s["ok"]) > 0
    ]


def _losses(mine: list[dict]) -> tuple[int, int, int, int]:
    """(on no node, undelivered (never or received then gone), stranded on a slave, divergent pairs) over
    the exercised samples."""
    lost = sum(s["lost"] for s in mine)
    undelivered = sum(s.get("undelivered", 0) + s.get("lost_after_delivery", 0) for s in mine)
    stranded = sum(s.get("stranded", 0) for s in mine)
    div = sum(s["divergent"] for s in mine)
    return lost, undelivered, stranded, div


def _loss_text(lost: int, undelivered: int, stranded: int, div: int) -> str:
    return (
        f"{lost} acknowledged on no node, {undelivered} undelivered, {stranded} stranded on a slave, "
        f"{div} divergent pair(s)"
    )


def _orphan_losses(samples: list[dict]) -> int:
    """The losses and divergences blamed on a fault that was not exercised that no earlier fault of its
    group explains."""
    orphan = [
        (s.get("unattributed") or {k: s.get(k, 0) for k in LOSS_FIELDS if s.get(k)})
        for s in samples
        if s.get("not_exercised")
    ]
    return sum(sum(o.values()) for o in orphan)


def _fail(p: dict, samples: list[dict], mine: list[dict]) -> tuple[str, str] | None:
    """A FAIL verdict, the first reason that applies; None when the cell does not fail."""
    errors = [s["error"] for s in samples if s["error"]]
    if errors:
        return "FAIL", f"fault could not be injected/healed: {errors[0]}"
    unexplained = excluded_text(samples, explained=False)
    if unexplained:
        return "FAIL", f"records excluded from the audit, unexplained: {unexplained}"
    orphan_n = _orphan_losses(samples)
    if orphan_n:
        return "FAIL", (
            f"{orphan_n} loss(es)/divergence(s) blamed on a fault that was not exercised, and no earlier "
            "exercised fault of its group explains them"
        )
    lost, undelivered, stranded, div = _losses(mine)
    users_lost = max(lost, undelivered) + stranded
    if (users_lost and not p["loss_allowed"]) or (div and not p["divergence_allowed"]):
        return "FAIL", f"{_loss_text(lost, undelivered, stranded, div)}: the promise excludes it"
    return None


def _beside_verdict(mine: list[dict]) -> list[str]:
    """What the cell's own figures show beside its verdict: acknowledged sends not delivered that the audit
    blames on another fault (each owed group's delivered count agrees with the audit's: run_checks), the
    parked ones, and the sends the at-risk look-back also counts on another fault."""
    gap = sum(
        max(
            0,
            (s.get("not_delivered") or 0)
            - (s.get("parked") or 0)
            - max(s["lost"], s.get("undelivered", 0) + s.get("lost_after_delivery", 0))
            - s.get("stranded", 0),
        )
        for s in mine
    )
    parked = sum(s.get("parked") or 0 for s in mine)
    shared: dict[str, int] = {}
    for s in mine:
        for k, n in (s.get("shared_acks") or {}).items():
            shared[k] = shared.get(k, 0) + n
    return (
        (
            [f"{gap} acknowledged during the fault not delivered: the audit blames them on another fault of the run"]
            if gap
            else []
        )
        + ([f"{parked} parked (delayed or half messages not due: owed to no group yet)"] if parked else [])
        + (
            [
                f"{sum(shared.values())} acknowledged send(s) also counted on {', '.join(sorted(shared))} (the "
                f"{AT_RISK_MS // 1000} s at-risk look-back is longer than the gap between the faults)"
            ]
            if shared
            else []
        )
    )


def _coverage(samples: list[dict], extra: list[str]) -> tuple[str, str]:
    """A cell with nothing the promise excludes or allows: not exercised, or PASS with how many of its runs
    exercised it."""
    done = exercised(samples)
    idle = next((s["not_exercised"] for s in samples if s.get("not_exercised")), None)
    if not done:
        return "not exercised", idle or "no send acknowledged by the faulted group while the fault was active"
    partial = sorted({g for s in done for g in s.get("groups_not_exercised") or []})
    also = f"; not exercised on {', '.join(partial)} (that group could not replicate)" if partial else ""
    tail = "".join(f"; {x}" for x in extra)
    if len(done) < len(samples):
        return "PASS", (
            f"only {len(done)} of {len(samples)} runs exercised"
            + (f" ({idle})" if idle else " (the others: no send acknowledged by the faulted group)")
            + also
            + tail
        )
    return "PASS", (also + tail)[2:]


def judge(p: dict, samples: list[dict]) -> tuple[str, str]:
    """A cell's verdict. Losses are judged as users meet them: an acknowledged message no consumer can get
    (lost, stranded on a slave, or received and then gone) is lost, whatever disk holds it. Only samples
    whose fault was exercised carry losses (a not-exercised fault's go to the earlier fault that caused
    them: reattribute()); losses a not-exercised fault is blamed for that no fault explains fail the cell."""
    mine = [s for s in samples if not s.get("not_exercised")]
    failed = _fail(p, samples, mine)
    if failed:
        return failed
    missing = [
        s.get("not_audited") or "no delivered/indeterminate figures"
        for s in samples
        if s.get("not_audited") or s.get("delivered") is None or s.get("indeterminate") is None
    ]
    if missing:
        return "not audited", f"{len(missing)} of {len(samples)} runs: {missing[0]}"
    extra = _beside_verdict(mine)
    lost, undelivered, stranded, div = _losses(mine)
    if max(lost, undelivered) + stranded or div:
        return "WEAK", "; ".join([f"allowed: {_loss_text(lost, undelivered, stranded, div)}"] + extra)
    return _coverage(samples, extra)
