"""The guarantee matrix's DLedger rows without processes: the plan, the promise, the verdicts, and the
figures (failover, recovery, unavailability, duplicates) from synthetic run folders laid out as a chaos run
on topology dledger leaves them: histories, each node's DLedger data files (entries written with the
broker's own encoders), the status samples' "dledger" block, the audit's summary.json."""

import json

import pytest

from rmqha.matrix import cells, dledger, evidence, plan, render, sweeps
from rmqha.matrix.promises import judge, promise

from .fabricate import CG, TOPIC, audit_tables, summary_of

pytestmark = pytest.mark.fast

GROUP = "RaftNode00"
NODES = {"broker-n0": "n0", "broker-n1": "n1", "broker-n2": "n2"}


# ---- the plan


def test_dledger_is_one_configuration_of_its_own_in_the_default_plan_and_by_name():
    assert plan.parse_configs("dledger") == [plan.DLEDGER] == plan.parse_configs("dledger/ASYNC_FLUSH")
    assert plan.parse_configs("all") == plan.CONFIGS + [plan.DLEDGER]
    assert plan.parse_configs("2m-2s-sync/SYNC_FLUSH,dledger") == [("2m-2s-sync", "SYNC_FLUSH"), plan.DLEDGER]
    with pytest.raises(ValueError, match="known: .*dledger"):
        plan.parse_configs("dledger/SYNC_FLUSH")
    with pytest.raises(ValueError):
        plan.parse_configs("2m-2s-sync")
    # its flush is what the topology's config gives the broker (compose/dledger sets none: the default)
    from rmqha.broker.config.properties import BrokerConfig
    from rmqha.cluster.topology import load_topology

    flushes = {n.props.get("flushDiskType", BrokerConfig().flushDiskType) for n in load_topology("dledger").nodes}
    assert flushes == {plan.DLEDGER[1]}


def test_the_dledger_sweep_has_every_dledger_fault_of_its_backend_and_no_classic_one():
    from rmqha.runs.faults import FAULTS

    assert plan.DLEDGER_LOCAL_FAULTS == [
        "kill-leader",
        "pause-leader",
        "kill-follower",
        "pause-follower",
        "power-loss-leader",
        "power-loss-follower",
    ]
    # a node goes down under both power losses; the leader's is judged for its failover
    assert {"power-loss-leader", "power-loss-follower"} <= set(evidence.NODE_DOWN_FAULTS)
    assert "power-loss-leader" in dledger.LEADER_FAULTS and "power-loss-follower" not in dledger.LEADER_FAULTS
    assert plan.DLEDGER_DOCKER_FAULTS == ["partition-leader", "partition-follower"]
    planned = plan.make_plan([plan.DLEDGER], ["local", "docker"], ["ours", "4.9", "recovery"], 1, 2, long_holds=True)
    # one sweep per seed and backend, mode "ours" only (the other modes are classic HA settings)
    assert [(b, tuple(f), seed, mode) for _t, _fl, b, f, seed, mode in planned] == [
        ("local", tuple(plan.DLEDGER_LOCAL_FAULTS), 1, "ours"),
        ("local", tuple(plan.DLEDGER_LOCAL_FAULTS), 2, "ours"),
        ("docker", tuple(plan.DLEDGER_DOCKER_FAULTS), 1, "ours"),
        ("docker", tuple(plan.DLEDGER_DOCKER_FAULTS), 2, "ours"),
    ]
    assert all(FAULTS[f].backends == ("docker",) for f in plan.DLEDGER_DOCKER_FAULTS)
    assert [plan.run_name(t, fl, b, seed, mode, f) for t, fl, b, f, seed, mode in planned] == [
        "mx-dl-l1",
        "mx-dl-l2",
        "mx-dl-d1",
        "mx-dl-d2",
    ]


def test_the_classic_plan_is_unchanged_and_dledger_runs_after_it_in_the_first_sweep():
    classic = plan.make_plan(plan.CONFIGS, ["local"], ["ours", "4.9"], 1, 3, long_holds=True)
    # what main() planned before dledger: backend, sweep, mode, configuration, seed
    before = [
        (t, fl, "local", faults, seed, mode)
        for faults in plan.LOCAL_SWEEPS + [plan.LONG_FAULTS]
        for mode in ["ours", "4.9"]
        for t, fl in plan.CONFIGS
        for seed in (1, 2, 3)
    ]
    assert classic == before
    full = plan.make_plan(plan.parse_configs("all"), ["local"], ["ours", "4.9"], 1, 3)
    assert [p for p in full if p[0] != "dledger"] == [p for p in before if p[3] != plan.LONG_FAULTS]
    dl = [i for i, p in enumerate(full) if p[0] == "dledger"]
    assert dl == [12, 13, 14]  # after the four classic configurations' first sweep in mode "ours"
    assert plan.run_name("2m-2s-sync", "ASYNC_FLUSH", "local", 1) == "mx-sa-l1"


def test_a_dledger_sweep_sets_no_flush_type_a_classic_one_does(tmp_path, monkeypatch):
    import argparse
    import subprocess

    cmds = []

    class Done:
        returncode = 0

    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: cmds.append(cmd) or Done())
    monkeypatch.setattr(sweeps, "free_base", lambda *a, **kw: None)
    args = argparse.Namespace(duration=10, rate=200)
    sweeps.sweep("dledger", "ASYNC_FLUSH", "local", plan.DLEDGER_LOCAL_FAULTS, 1, args, tmp_path, 0)
    sweeps.sweep("2m-2s-sync", "SYNC_FLUSH", "local", ["kill-master"], 1, args, tmp_path, 0)
    assert not any(a.startswith("flushDiskType=") for a in cmds[0])
    assert "--topology" in cmds[0] and cmds[0][cmds[0].index("--topology") + 1] == "dledger"
    assert "flushDiskType=SYNC_FLUSH" in cmds[1]
    # room after the DLedger faults for the ones a slow leader delayed; the classic sweep as asked
    assert [c[c.index("--duration") + 1] for c in cmds] == [str(plan.DLEDGER_MIN_DURATION_S), "10"]


# ---- the promise and the verdicts


@pytest.mark.parametrize(
    "kind,role",
    [
        ("kill-leader", "master"),
        ("pause-leader", "master"),
        ("partition-leader", "master"),
        ("kill-follower", "slave"),
        ("pause-follower", "slave"),
        ("partition-follower", "slave"),
    ],
)
def test_a_minority_failure_may_lose_nothing_and_fork_nothing(kind, role):
    p = promise("dledger", "ASYNC_FLUSH", kind, role)
    assert (p["loss_allowed"], p["divergence_allowed"]) == (False, False)
    assert "majority" in p["why"]
    # the classic promise is untouched: an async master's power loss may lose
    assert promise("2m-2s-async", "ASYNC_FLUSH", "power-loss", "master")["loss_allowed"]


def dl_sample(**kw):
    return {
        "ok": 10,
        "sends": 11,
        "lost": 0,
        "divergent": 0,
        "error": None,
        "delivered": 10,
        "indeterminate": 0,
        "not_audited": None,
        "excluded": {},
        "group_availability": {},
        "acked_on_group": 10,
        "not_exercised": None,
    } | kw


@pytest.mark.parametrize(
    "loss",
    [{"lost": 1}, {"undelivered": 1}, {"stranded": 1}, {"lost_after_delivery": 1}, {"divergent": 1}],
)
def test_any_acknowledged_loss_or_divergence_fails_a_dledger_cell(loss):
    p = promise("dledger", "ASYNC_FLUSH", "kill-leader", "master")
    assert judge(p, [dl_sample()]) == ("PASS", "")
    verdict, note = judge(p, [dl_sample(**loss)])
    assert verdict == "FAIL" and "the promise excludes it" in note


# ---- synthetic run folders


def entry_files(messages):
    """One DLedger data file holding a no-op-free log: each message one entry whose body is a classic record
    with PHYSICALOFFSET = pos + 48 (rmqha/broker/store/dledger_commitlog.py's layout), then a blank."""
    from rmqha.broker.dledger.entry import BODY_OFFSET, DLedgerEntry, encode_blank, encode_entry
    from rmqha.broker.store import record

    buf = bytearray()
    for i, (sid, uniq) in enumerate(messages):
        pos = len(buf)
        enc = record.encode(record.Message(topic=TOPIC, body=b"x", properties={"KEYS": sid, "UNIQ_KEY": uniq}))
        body = bytes(enc.finish(i, pos + BODY_OFFSET))
        e = DLedgerEntry(body=body, index=i, term=1, pos=pos)
        e.compute_size()
        buf += encode_entry(e)
    return bytes(buf) + encode_blank(64)


def fabricate_dledger(rd, sends, receives=(), rounds=(), stored_on=tuple(NODES), table=None):
    """sends: [(send_id, [(status or None, start_ms, end_ms)])]: every answered try but an ERROR one is stored
    (an ERROR try with a 4th item True too: a timeout on a send the leader kept). receives: [(send_id, at_ms)].
    rounds: [(ts s, {node: (role, term, leaderId, committedIndex, endIndex) or None (did not answer)})]."""
    lines, seq, stored = [], 0, []
    for sid, tries in sends:
        for attempt, (status, t0, t1, *kept) in enumerate(tries, 1):
            base = {"client": "p1", "group": "PG", "topic": TOPIC, "send_id": sid, "attempt": attempt}
            lines.append(base | {"seq": seq, "op": "invoke", "start_ms": t0, "end_ms": t0})
            seq += 1
            if status is None:
                continue
            uniq = f"U-{sid}-{attempt}"
            answer = {"seq": seq, "op": "send", "status": status, "start_ms": t0, "end_ms": t1}
            lines.append(base | answer | {"uniq_key": uniq if status != "ERROR" else None})
            seq += 1
            if status != "ERROR" or kept:
                stored.append((sid, uniq))
    (rd / "history").mkdir(parents=True, exist_ok=True)
    (rd / "history" / "producer-1.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    cons = [{"client": "c1", "seq": 0, "op": "subscribe", "group": CG, "topic": TOPIC, "status": "FROM_FIRST"}]
    cons[0] |= {"start_ms": 0, "end_ms": 0}
    for i, (sid, at) in enumerate(receives, 1):
        cons.append(
            {"client": "c1", "seq": i, "op": "receive", "group": CG, "topic": TOPIC, "send_id": sid}
            | {"uniq_key": None, "status": "RECEIVED", "start_ms": at, "end_ms": at}
        )
    (rd / "history" / "consumer-1.jsonl").write_text("".join(json.dumps(x) + "\n" for x in cons))
    for node, self_id in NODES.items():
        nd = rd / "nodes" / node
        data = nd / "store" / f"dledger-{self_id}" / "data"
        data.mkdir(parents=True)
        meta = {"name": node, "brokerName": GROUP, "brokerId": -1, "commitLog": "dledger", "dLegerSelfId": self_id}
        (nd / "node.json").write_text(json.dumps(meta))
        (data / ("0" * 20)).write_bytes(entry_files(stored if node in stored_on else []))
    rows = []
    for ts, states in rounds:
        for node, st in states.items():
            row = {"ts": ts, "node": node, "brokerName": GROUP, "brokerId": -1, "up": st is not None}
            if st is not None:
                role, term, leader, committed, end = st
                row["role"] = "SYNC_MASTER" if role == "LEADER" else "SLAVE"
                row["maxPhyOffset"] = 0
                row["dledger"] = {"role": role, "term": term, "selfId": NODES[node], "leaderId": leader}
                row["dledger"] |= {"committedIndex": committed, "endIndex": end}
            rows.append(row)
    (rd / "metrics").mkdir(parents=True, exist_ok=True)
    (rd / "metrics" / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    # the audit's tables (its committed entries: every node's, here)
    audit_tables(
        rd,
        [(sid, None, [t[:3] for t in tries]) for sid, tries in sends],
        [(sid, None, at) for sid, at in receives],
        None,
        {GROUP: [(sid, uniq, TOPIC) for sid, uniq in stored]} if stored_on else {},
        table or {},
    )


def dl_fault(id_, kind, start, end, target, leader="broker-n0"):
    role = "master" if kind.endswith("leader") else "slave"
    return {
        "id": id_,
        "kind": kind,
        "target": target,
        "group": GROUP,
        "role": role,
        "link": None,
        "start_ms": start,
        "end_ms": end,
        "info": {"leader": leader},
    }


def dl_summary(faults, acked_on_group, acknowledged, delivered=None, **extra):
    delivered = acknowledged if delivered is None else delivered
    delivery = {"acknowledged": acknowledged, "delivered": delivered, "parked": 0, "stranded": 0}
    return summary_of(
        faults,
        failed=False,
        verdicts=[],
        ackedOnGroupByFault=acked_on_group,
        delivery={CG: delivery | {"lost": acknowledged - delivered}},
        **extra,
    )


def samples_by_id(run, summary):
    return dict(zip((f["id"] for f in summary["faults"]), cells.cell_samples(run, summary, *plan.DLEDGER)))


L, F, C = "LEADER", "FOLLOWER", "CANDIDATE"


def kill_leader_rounds(new_leader_at=7.0, back_at=9.0, caught_up_at=11.0):
    """n0 leads in term 1 and is killed at 2 s; n1 leads from new_leader_at (term 2; None: never), n0 is back
    at back_at as a follower behind, and equal to the leader's committed index from caught_up_at."""
    rounds = [
        (1.0, {"broker-n0": (L, 1, "n0", 10, 10), "broker-n1": (F, 1, "n0", 10, 10), "broker-n2": (F, 1, "n0", 10, 10)})
    ]
    t = 2.5
    while t <= 14.0:
        elected = new_leader_at is not None and t >= new_leader_at
        term, lead = (2, "n1") if elected else (1, "n0")
        n1 = (L if elected else F, term, lead, 20, 20)
        n0 = (
            None
            if t < back_at
            else ((F, 2, "n1", 12 if t < caught_up_at else 20, 20) if elected else (L, 1, "n0", 20, 20))
        )
        n2 = (F, term, lead, 20 if elected else 10, 20)
        rounds.append((t, {"broker-n0": n0, "broker-n1": n1, "broker-n2": n2}))
        t += 0.5
    return rounds


def test_failover_is_the_time_until_another_node_leads_and_recovery_needs_every_committed_index_equal(tmp_path):
    sends = [(f"s{k}", [("SEND_OK", 1000 + 100 * k, 1005 + 100 * k)]) for k in range(10)]
    # refused while nobody led (from 2.1 s), accepted again from 7.2 s, after the election
    sends += [(f"e{k}", [("ERROR", 2100 + 200 * k, 2150 + 200 * k)]) for k in range(25)]
    sends += [(f"t{k}", [("SEND_OK", 7200 + 100 * k, 7205 + 100 * k)]) for k in range(10)]
    fabricate_dledger(tmp_path, sends, [(sid, 20000) for sid, _ in sends], kill_leader_rounds())
    f = [dl_fault(1, "kill-leader", 2000, 10000, "broker-n0")]
    got = samples_by_id(tmp_path, dl_summary(f, {"#1 kill-leader broker-n0": 20}, 20))[1]
    assert got["failover_s"] == 5.0  # killed at 2.0 s, n1 leads in the round at 7.0 s
    assert got["not_exercised"] is None
    # healed at 10 s; n0 answers from 9 s but is behind (12 of 20) until 11 s: not caught up before
    assert (got["recovery_s"], got["recovery_never"]) == (1.0, False)
    # the group accepted nothing from the first try in the fault (2.1 s) to the answer at 7.205 s
    assert got["group_availability"][GROUP]["longest_gap_s"] == 5.1
    assert got["indeterminate"] == 25 and got["delivered"] == 20
    cell = cells.build([{"topology": "dledger", "flush": "ASYNC_FLUSH", "backend": "local", "samples": [got]}])[0]
    assert (cell["failover_s"], cell["unavailable_s"], cell["verdict"]) == (5.0, 5.1, "PASS")
    assert render.failover_text(cell) == "5.0"


def test_a_member_ahead_of_the_leader_is_not_caught_up(tmp_path):
    rounds = kill_leader_rounds(caught_up_at=99.0)
    # from 11 s n0 reports 25 committed, the leader 20: ahead, never equal
    rounds = [(ts, st | {"broker-n0": (F, 2, "n1", 25, 25)}) if ts >= 11.0 else (ts, st) for ts, st in rounds]
    fabricate_dledger(tmp_path, [("s1", [("SEND_OK", 1000, 1005)])], [("s1", 20000)], rounds)
    f = [dl_fault(1, "kill-leader", 2000, 10000, "broker-n0")]
    got = samples_by_id(tmp_path, dl_summary(f, {"#1 kill-leader broker-n0": 1}, 1))[1]
    assert (got["recovery_s"], got["recovery_never"]) == (None, True)
    cell = cells.build([{"topology": "dledger", "flush": "ASYNC_FLUSH", "backend": "local", "samples": [got]}])[0]
    assert render.recovery_text(cell) == "never"


def test_recovery_is_not_measured_when_no_member_reports_a_committed_index(tmp_path):
    # Apache's 4.9.8: roles only (its term, leader and committed index are unavailable to the sampler)
    rounds = [
        (ts, {n: st and (st[0], None, None, None, None) for n, st in g.items()}) for ts, g in kill_leader_rounds()
    ]
    fabricate_dledger(tmp_path, [("s1", [("SEND_OK", 1000, 1005)])], [("s1", 20000)], rounds)
    f = [dl_fault(1, "kill-leader", 2000, 10000, "broker-n0")]
    got = samples_by_id(tmp_path, dl_summary(f, {"#1 kill-leader broker-n0": 1}, 1))[1]
    assert (got["recovery_s"], got["recovery_never"]) == (None, False)
    cell = cells.build([{"topology": "dledger", "flush": "ASYNC_FLUSH", "backend": "local", "samples": [got]}])[0]
    assert render.recovery_text(cell) == "-"


def test_the_leader_is_known_from_its_followers_when_it_does_not_answer(tmp_path):
    rounds = kill_leader_rounds()
    # the new leader n1 does not answer /status in time; n2 follows it in term 2
    rounds = [(ts, st | {"broker-n1": None}) if ts >= 7.0 else (ts, st) for ts, st in rounds]
    fabricate_dledger(tmp_path, [("s1", [("SEND_OK", 1000, 1005)])], [("s1", 20000)], rounds)
    f = [dl_fault(1, "kill-leader", 2000, 10000, "broker-n0")]
    got = samples_by_id(tmp_path, dl_summary(f, {"#1 kill-leader broker-n0": 1}, 1))[1]
    assert got["failover_s"] == 5.0
    assert got["recovery_never"]  # its committed index is unknown: nobody is known to be caught up


def test_a_leader_fault_that_caused_no_election_is_not_exercised(tmp_path):
    # n0 is killed and back before its followers gave up on it: leader again in term 1
    fabricate_dledger(
        tmp_path,
        [(f"s{k}", [("SEND_OK", 1000 + 500 * k, 1005 + 500 * k)]) for k in range(20)],
        [(f"s{k}", 20000) for k in range(20)],
        kill_leader_rounds(new_leader_at=None, back_at=5.0),
    )
    f = [dl_fault(1, "kill-leader", 2000, 4500, "broker-n0")]
    # acknowledged from 5 s before the fault to its heal: s0..s6
    got = samples_by_id(tmp_path, dl_summary(f, {"#1 kill-leader broker-n0": 7}, 20))[1]
    assert got["failover_s"] is None
    assert "caused no election" in got["not_exercised"]
    p = promise("dledger", "ASYNC_FLUSH", "kill-leader", "master")
    verdict, note = judge(p, [got])
    assert verdict == "not exercised" and "caused no election" in note
    cell = cells.build([{"topology": "dledger", "flush": "ASYNC_FLUSH", "backend": "local", "samples": [got]}])[0]
    assert render.failover_text(cell) == "none" and cell["exercised"] == 0
    # the same rounds with an election 3 s after the heal (before the next fault): exercised
    fabricate_dledger(
        tmp_path / "late", [("s1", [("SEND_OK", 1000, 1005)])], [("s1", 20000)], kill_leader_rounds(7.5, 5.0)
    )
    got = samples_by_id(tmp_path / "late", dl_summary(f, {"#1 kill-leader broker-n0": 1}, 1))[1]
    assert got["failover_s"] == 5.5 and got["not_exercised"] is None
    # ... but not after the next fault began
    two = f + [dl_fault(2, "kill-follower", 6000, 8000, "broker-n2")]
    got = samples_by_id(
        tmp_path / "late", dl_summary(two, {f"#{x['id']} {x['kind']} {x['target']}": 1 for x in two}, 1)
    )
    assert got[1]["failover_s"] is None and "caused no election" in got[1]["not_exercised"]


def test_a_planted_loss_in_a_dledger_cell_fails_it(tmp_path):
    # s3 was acknowledged during the follower kill, but no node stores it and nobody received it
    sends = [(f"s{k}", [("SEND_OK", 1000 + 500 * k, 1005 + 500 * k)]) for k in range(6)]
    up = {"broker-n0": (L, 1, "n0", 10, 10), "broker-n1": (F, 1, "n0", 10, 10), "broker-n2": (F, 1, "n0", 10, 10)}
    rounds = [(t / 2, up | ({"broker-n2": None} if 4 <= t <= 6 else {})) for t in range(1, 12)]
    # the audit reads no copy of s3: no group
    s3 = {"s3": {"group": None, "stored": False}}
    fabricate_dledger(tmp_path, sends, [(f"s{k}", 20000) for k in range(6) if k != 3], rounds, table=s3)
    rd = tmp_path / "nodes"
    for node, self_id in NODES.items():
        stored = [(f"s{k}", f"U-s{k}-1") for k in range(6) if k != 3]
        (rd / node / "store" / f"dledger-{self_id}" / "data" / ("0" * 20)).write_bytes(entry_files(stored))
    f = [dl_fault(1, "kill-follower", 2000, 3000, "broker-n2", leader="broker-n0")]
    label = "#1 kill-follower broker-n2"
    summary = dl_summary(
        f,
        {label: 3},  # s0..s3 acknowledged from 5 s before to the heal; s3, on no node, has no group
        6,
        delivered=5,
        lostByFault={label: 1},
        deliveryByFault={label: {"delivery.lost": 1}},
    )
    got = samples_by_id(tmp_path, summary)[1]
    assert got["not_exercised"] is None and got["failover_s"] is None
    p = promise("dledger", "ASYNC_FLUSH", "kill-follower", "slave")
    verdict, note = judge(p, [got])
    assert verdict == "FAIL" and "1 acknowledged on no node" in note
    cell = cells.build([{"topology": "dledger", "flush": "ASYNC_FLUSH", "backend": "local", "samples": [got]}])[0]
    assert cell["verdict"] == "FAIL" and cell["lost"] == 1 and render.failover_text(cell) == "n/a"


def test_duplicates_count_the_receives_beyond_the_first_of_the_sends_at_stake(tmp_path):
    # s1 timed out on the old leader (which kept it) and was acknowledged on a retry: two copies, both
    # received; s2 was redelivered once; s3, acknowledged after the heal, is no business of this fault
    sends = [
        ("s1", [("ERROR", 2100, 5100, True), ("SEND_OK", 7300, 7305)]),
        ("s2", [("SEND_OK", 7400, 7405)]),
        ("s3", [("SEND_OK", 10500, 10505)]),
    ]
    receives = [("s1", 8000), ("s1", 8001), ("s2", 8000), ("s2", 9000), ("s3", 11000), ("s3", 12000)]
    fabricate_dledger(tmp_path, sends, receives, kill_leader_rounds())
    f = [dl_fault(1, "kill-leader", 2000, 10000, "broker-n0")]
    got = samples_by_id(tmp_path, dl_summary(f, {"#1 kill-leader broker-n0": 2}, 3))[1]
    assert got["duplicates"] == 2  # s1 once more, s2 once more
    assert got["delivered"] == 2 and got["indeterminate"] == 0


def test_the_report_has_failover_unavailability_and_duplicates_beside_the_classic_columns(tmp_path):
    dl = dl_sample(failover_s=5.0, duplicates=3, group="RaftNode00", recovery_s=1.0, recovery_never=False)
    dl |= {"group_availability": {GROUP: {"answered": 9, "accepted": 9, "not_accepted": {}}}}
    dl["group_availability"][GROUP] |= {"unwritable_s": 6.0, "longest_gap_s": 5.5}
    classic = dl_sample(duplicates=0, group="broker-a", recovery_s=0.5, recovery_never=False)
    results = [
        {
            "topology": "dledger",
            "flush": "ASYNC_FLUSH",
            "backend": "local",
            "samples": [dl | {"kind": "kill-leader", "role": "master"}],
        },
        {
            "topology": "dledger",
            "flush": "ASYNC_FLUSH",
            "backend": "local",
            "samples": [dl | {"kind": "pause-follower", "role": "slave", "failover_s": None}],
        },
        {
            "topology": "2m-2s-sync",
            "flush": "ASYNC_FLUSH",
            "backend": "local",
            "samples": [classic | {"kind": "kill-master", "role": "master"}],
        },
    ]
    got_cells = cells.build(results)
    render.write(tmp_path, got_cells, [], "cmd")
    md = (tmp_path / "matrix.md").read_text().splitlines()
    header = next(x for x in md if x.startswith("| broker"))
    cols = [c.strip() for c in header.strip("|").split("|")]
    assert len(cols) == md[md.index(header) + 1].count("---")
    rows = {r.split("|")[3].strip(): [c.strip() for c in r.strip("|").split("|")] for r in md if r.startswith("| ours")}
    at = {name: cols.index(name) for name in ("failover (s, max)", "unavailable (s, max)", "duplicates")}
    assert [rows["kill-leader (master)"][at[k]] for k in at] == ["5.0", "5.5", "3"]
    assert [rows["pause-follower (slave)"][at[k]] for k in at] == ["n/a", "5.5", "3"]
    assert rows["kill-master (master)"][at["failover (s, max)"]] == "n/a"
    assert rows["kill-leader (master)"][1] == "dledger ASYNC_FLUSH"
    saved = json.loads((tmp_path / "matrix.json").read_text())["cells"]
    assert {(c["kind"], c["failover_s"], c["duplicates"]) for c in saved} == {
        ("kill-leader", 5.0, 3),
        ("pause-follower", None, 3),
        ("kill-master", None, 0),
    }


def test_failover_counts_from_when_the_inject_took_effect(tmp_path):
    # the inject began at 2.0 s but asked a slow leader who leads: n0 was killed at 3.0 s (its end)
    fabricate_dledger(tmp_path, [("s1", [("SEND_OK", 1000, 1005)])], [("s1", 20000)], kill_leader_rounds())
    f = [dl_fault(1, "kill-leader", 2000, 10000, "broker-n0")]
    (tmp_path / "faults").mkdir()
    log = [
        {"ts_ms": 3000, "start_ms": 2000, "op": "inject", "id": 1, "kind": "kill-leader", "result": "ok"},
        {"ts_ms": 10000, "start_ms": 9000, "op": "heal", "id": 1, "kind": "kill-leader", "result": "ok"},
    ]
    (tmp_path / "faults" / "faults-1.jsonl").write_text("".join(json.dumps(x) + "\n" for x in log))
    assert dledger.took_effect(tmp_path) == {1: 3000}
    got = samples_by_id(tmp_path, dl_summary(f, {"#1 kill-leader broker-n0": 1}, 1))[1]
    assert got["failover_s"] == 4.0


def test_mode_apache_runs_the_real_broker_locally_classic_and_dledger():
    planned = plan.make_plan(
        [("2m-2s-sync", "ASYNC_FLUSH"), plan.DLEDGER], ["local", "docker"], ["4.9", "apache"], 1, 1
    )
    apache = [(t, b, mode) for t, _fl, b, _f, _s, mode in planned if mode == "apache"]
    # on both backends (docker: the image built from ROCKETMQ_HOME), and DLedger too (a group of 4.9 brokers)
    assert {(t, b) for t, b, _m in apache} == {(t, b) for t in ("2m-2s-sync", "dledger") for b in ("local", "docker")}
    assert {t for t, _b, _m in apache} == {"2m-2s-sync", "dledger"}
    assert not [p for p in planned if p[0] == "dledger" and p[5] == "4.9"]
    names = [plan.run_name(t, fl, b, s, m, f) for t, fl, b, f, s, m in planned if m == "apache"]
    assert "mx-dl-l1-ap" in names and all(n.endswith("-ap") for n in names)
    assert plan.MODE_ARGS["apache"] == ["--broker", "apache"]
