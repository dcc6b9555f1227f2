"""The guarantee matrix without processes: the sweep's schedule, the promises, and the cell verdicts
(FAIL only for what the promise excludes, WEAK with its size, never PASS without an acknowledged send)."""

import pytest

from rmqha.matrix import cells, evidence, figures, plan, promises, render, table
from rmqha.matrix.promises import judge, promise


from .fabricate import (
    AUDITED,
    CG,
    TOPIC,
    audited_summary,
    cell_samples_by_id,
    fabricate,
    fault,
    sample,
    summary_of,
    write_consumer,
    write_samples,
)


def test_only_an_async_master_with_async_flush_may_lose_acknowledged_sends_in_a_power_loss():
    allowed = {(t, fl) for t, fl in plan.CONFIGS if promise(t, fl, "power-loss", "master")["loss_allowed"]}
    assert allowed == {("2m-2s-async", "ASYNC_FLUSH")}
    assert not any(
        promise(t, fl, k, r)["loss_allowed"]
        for t, fl in plan.CONFIGS
        for k, r in [("kill-master", "master"), ("power-loss", "slave"), ("disk-full", "master")]
    )
    assert promise("2m-2s-sync", "SYNC_FLUSH", "power-loss", "master")["divergence_allowed"]
    assert not promise("2m-2s-sync", "SYNC_FLUSH", "kill-master", "master")["divergence_allowed"]


def test_a_divergence_goes_to_its_groups_master_power_loss_not_to_a_slave_fault(tmp_path):
    from rmqha.matrix.cells import cell_samples

    (tmp_path / "history").mkdir()
    (tmp_path / "history" / "producer-1.jsonl").write_text(
        '{"op": "send", "start_ms": 1500, "end_ms": 1510, "status": "SEND_OK"}\n'
    )

    def fault(id_, kind, target, role, start):
        return {
            "id": id_,
            "kind": kind,
            "target": target,
            "group": "broker-a",
            "role": role,
            "link": None,
            "start_ms": start,
            "end_ms": start + 1000,
        }

    faults = [
        fault(1, "kill-master", "broker-a", "master", 1000),
        fault(2, "power-loss", "broker-a-s", "slave", 3000),
        fault(3, "power-loss", "broker-a", "master", 5000),
    ]
    blamed = ["broker-a/broker-a-s at 777"]
    summary = {
        "faults": faults,
        "lostByFault": {},
        "divergentByFault": {f"#{f['id']} {f['kind']} {f['target']}": blamed for f in faults},
    }
    got = {(s["kind"], s["role"]): s["divergent"] for s in cell_samples(tmp_path, summary, "2m-2s-sync", "ASYNC_FLUSH")}
    assert got == {("kill-master", "master"): 0, ("power-loss", "slave"): 0, ("power-loss", "master"): 1}
    # with no master power loss in the group, the slave power loss and the kill carry it
    summary["faults"] = faults[:2]
    got = {(s["kind"], s["role"]): s["divergent"] for s in cell_samples(tmp_path, summary, "2m-2s-sync", "ASYNC_FLUSH")}
    assert got == {("kill-master", "master"): 1, ("power-loss", "slave"): 1}


def test_audit_failures_no_cell_accounts_for_fail_the_matrix():
    faults = [{"id": 1, "kind": "power-loss", "target": "broker-a"}]
    fail = {"status": "FAIL", "name": "x", "detail": ""}
    base = {
        "faults": faults,
        "lostByFault": {},
        "deliveryByFault": {"#1 power-loss broker-a": {"delivery.stranded": 3}},
    }
    assert cells.unexplained_failures(base | {"verdicts": [fail | {"id": "delivery.stranded"}]}) == []
    assert cells.unexplained_failures(base | {"verdicts": [fail | {"id": "delivery.unexpected", "name": "u"}]}) == [
        "u (delivery.unexpected)"
    ]
    nf = base | {"deliveryByFault": {"no fault": {"delivery.lost": 1}}}
    assert cells.unexplained_failures(nf | {"verdicts": [fail | {"id": "delivery.lost", "name": "l"}]}) == [
        "l (delivery.lost)"
    ]
    # a summary from before every verdict had an id: keyed by the id the pipeline's table gives its name
    assert cells.unexplained_failures(base | {"verdicts": [fail | {"name": "log integrity broker-a"}]}) == [
        "log integrity broker-a (log.integrity)"
    ]
    assert cells.unexplained_failures(base | {"verdicts": [fail | {"name": "no such verdict"}]}) == [
        "no such verdict (no id)"
    ]
    lost = fail | {"name": "no acknowledged send lost"}  # history.acked-lost, blamed on a fault: a cell's
    assert cells.unexplained_failures(base | {"lostByFault": {"#1 power-loss broker-a": 1}, "verdicts": [lost]}) == []


def test_a_node_fault_no_sample_saw_is_not_exercised(tmp_path):
    """A nemesis that silently does nothing (the node never went away) must not count as coverage."""
    import json

    (tmp_path / "history").mkdir()
    (tmp_path / "history" / "producer-1.jsonl").write_text(
        "".join(
            json.dumps({"op": "send", "start_ms": t, "end_ms": t + 5, "status": "SEND_OK"}) + "\n"
            for t in range(1000, 9000, 100)
        )
    )
    (tmp_path / "metrics").mkdir()
    rows = []
    for ts in range(1, 10):
        for node, role, master in (("broker-a", "SYNC_MASTER", None), ("broker-a-s", "SLAVE", "broker-a")):
            up = not (node == "broker-a" and 2 <= ts <= 3)  # the kill at 2 s took broker-a away
            rows.append({"ts": ts, "node": node, "role": role, "master": master, "up": up, "maxPhyOffset": 10})
    (tmp_path / "metrics" / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    def fault(id_, kind, target, start):
        return {
            "id": id_,
            "kind": kind,
            "target": target,
            "group": "broker-a",
            "role": "master",
            "link": None,
            "start_ms": start,
            "end_ms": start + 1500,
        }

    summary = {
        "faults": [fault(1, "kill-master", "broker-a", 1900), fault(2, "kill-master", "broker-a", 6000)],
        "lostByFault": {},
        "divergentByFault": {},
    }
    got = cell_samples_by_id(tmp_path, summary)
    assert got[1]["not_exercised"] is None
    assert "no sample saw broker-a down" in got[2]["not_exercised"]  # the second kill did nothing visible
    p = promise("2m-2s-sync", "ASYNC_FLUSH", "kill-master", "master")
    assert judge(p, [got[2] | AUDITED])[0] == "not exercised" and judge(p, [got[1] | AUDITED])[0] == "PASS"
    assert judge(p, [got[1]])[0] == "not audited"  # this summary has no delivery figures


@pytest.mark.parametrize("kind", ["group-power-loss", "slave-then-master-power-loss", "cluster-power-loss"])
def test_a_power_cut_of_every_copy_may_lose_what_no_node_fsynced_in_either_topology(kind):
    allowed = {(t, fl) for t, fl in plan.CONFIGS if promise(t, fl, kind, "master")["loss_allowed"]}
    assert allowed == {("2m-2s-sync", "ASYNC_FLUSH"), ("2m-2s-async", "ASYNC_FLUSH")}
    assert all(promise(t, fl, kind, "master")["divergence_allowed"] for t, fl in plan.CONFIGS)
    assert "unsynced tail everywhere" in promise("2m-2s-sync", "ASYNC_FLUSH", kind, "master")["why"]


def test_a_slave_ahead_of_its_master_or_with_an_unknown_offset_never_recovers(tmp_path):
    # the master came back 400 bytes behind its slave (a fork), then the slave stopped answering
    write_samples(tmp_path, [(1.0, 900, 900), (3.0, 500, 900), (4.0, 600, 900), (5.0, 700, None)])
    assert evidence.lags_over_time(tmp_path) == [(1000.0, 0), (3000.0, 400), (4000.0, 300), (5000.0, -1)]
    got = cell_samples_by_id(tmp_path, summary_of([fault(1, "power-loss")]))[1]
    assert got["recovery_s"] is None and got["recovery_never"]
    # a slave that answers but whose offset is unknown is not caught up either
    write_samples(tmp_path, [(3.0, 500, 500)])
    rows = (
        (tmp_path / "metrics" / "samples.jsonl")
        .read_text()
        .replace('"maxPhyOffset": 500}\n', '"maxPhyOffset": null}\n', 1)
    )
    (tmp_path / "metrics" / "samples.jsonl").write_text(rows)
    assert cell_samples_by_id(tmp_path, summary_of([fault(1, "power-loss")]))[1]["recovery_never"]
    # equal offsets after the heal are a recovery, unless the audit says the bytes differ (a fork the
    # master's new writes walked past: same offset, other records)
    write_samples(tmp_path, [(1.0, 900, 900), (3.0, 500, 900), (4.0, 900, 900), (5.0, 950, 950)])
    got = cell_samples_by_id(tmp_path, summary_of([fault(1, "power-loss")]))[1]
    assert (got["recovery_s"], got["recovery_never"]) == (2.0, False)
    forked = summary_of(
        [fault(1, "power-loss")],
        verdicts=[
            {
                "id": "replica.consistent",
                "subject": "broker-a-s",
                "status": "WARN",
                "name": "replica broker-a",
                "detail": "an allowed fork at offset 500",
            }
        ],
    )
    got = cell_samples_by_id(tmp_path, forked)[1]
    assert got["recovery_s"] is None and got["recovery_never"]
    # the run's ending says so too (rmqha/chaos/run.py wait_catch_up)
    (tmp_path / "chaos").mkdir()
    (tmp_path / "chaos" / "ending-1.json").write_text('{"catchUp": {"broker-a-s": "forked: SLAVE_AHEAD"}}')
    assert cell_samples_by_id(tmp_path, summary_of([fault(1, "power-loss")]))[1]["recovery_never"]
    cell = cells.build(
        [
            {
                "topology": "2m-2s-sync",
                "flush": "ASYNC_FLUSH",
                "backend": "local",
                "samples": [got, got | {"recovery_s": 1.5, "recovery_never": False}],
            }
        ]
    )[0]
    assert (cell["recovery_s"], cell["recovery_never"], render.recovery_text(cell)) == (1.5, 1, "never (1/2), else 1.5")


def test_losses_blamed_on_a_fault_that_was_not_exercised_go_to_the_fault_that_caused_them(tmp_path):
    """The published case: ours sync ASYNC_FLUSH cluster-power-loss read WEAK with 0 acknowledged in 3 runs,
    its losses those of an earlier fork of the group."""
    faults = [
        fault(1, "power-loss", start=1000, end=2000),
        fault(2, "kill-slave", role="slave", start=3000, end=4000),
        fault(
            3,
            "cluster-power-loss",
            start=5000,
            end=6000,
            group=None,
            info={"notExercised": "group broker-a cannot replicate"},
        ),
    ]
    summary = summary_of(
        faults,
        deliveryByFault={
            "#1 power-loss broker-a": {"delivery.stranded": 5},
            "#3 cluster-power-loss broker-a": {"delivery.stranded": 88, "delivery.lost": 117},
        },
        ackedOnGroupByFault={
            "#1 power-loss broker-a": 40,
            "#2 kill-slave broker-a-s": 30,
            "#3 cluster-power-loss broker-a": 0,
        },
    )
    got = cell_samples_by_id(tmp_path, summary)
    assert (got[3]["stranded"], got[3]["undelivered"]) == (0, 0)
    assert got[3]["blamed_on"] == {"fault": "#1 power-loss broker-a", "stranded": 88, "undelivered": 117}
    assert (got[1]["stranded"], got[1]["undelivered"], got[1]["inherited_from"]) == (
        88,
        117,
        ["#3 cluster-power-loss broker-a"],
    )
    assert got[2]["stranded"] == 0  # a slave kill between them is not the cause
    sync = ("2m-2s-sync", "ASYNC_FLUSH")
    assert judge(promise(*sync, "cluster-power-loss", "master"), [got[3] | AUDITED])[0] == "not exercised"
    assert judge(promise(*sync, "power-loss", "master"), [got[1]])[0] == "FAIL"
    # with no earlier exercised fault to carry them, they fail the not-exercised fault's own cell
    alone = summary_of([faults[2]], deliveryByFault=summary["deliveryByFault"])
    orphan = cell_samples_by_id(tmp_path, alone)[3]
    assert orphan["unattributed"] == {"stranded": 88, "undelivered": 117}
    verdict, note = judge(promise(*sync, "cluster-power-loss", "master"), [orphan])
    assert verdict == "FAIL" and "not exercised" in note
    # and judge() never lets such losses make a cell WEAK, even unmoved
    idle = sample(ok=0, lost=3) | {"not_exercised": "group broker-a cannot replicate"}
    assert judge(promise("2m-2s-async", "ASYNC_FLUSH", "power-loss", "master"), [idle])[0] == "FAIL"


def test_a_cell_says_how_many_of_its_runs_were_exercised():
    p = promise("2m-2s-sync", "ASYNC_FLUSH", "kill-master", "master")
    idle = sample() | {"acked_on_group": 9, "not_exercised": "group broker-a cannot replicate"}
    verdict, note = judge(p, [sample(), idle, idle])
    assert verdict == "PASS" and note.startswith("only 1 of 3 runs exercised")
    cell = cells.build(
        [
            {
                "topology": "2m-2s-sync",
                "flush": "ASYNC_FLUSH",
                "backend": "local",
                "samples": [
                    s | {"kind": "kill-master", "role": "master", "recovery_s": None} for s in (sample(), idle, idle)
                ],
            }
        ]
    )[0]
    assert (cell["exercised"], cell["runs"]) == (1, 3)
    # a cluster-wide fault that could not exercise one group says which
    part = sample() | {"groups_not_exercised": ["broker-b"]}
    assert judge(promise("2m-2s-sync", "ASYNC_FLUSH", "cluster-power-loss", "master"), [part]) == (
        "PASS",
        "not exercised on broker-b (that group could not replicate)",
    )


def test_a_group_the_samples_show_forked_before_a_fault_does_not_exercise_it(tmp_path):
    """Runs the nemesis did not judge (recorded before it judged per group): the samples tell a group that
    no longer replicates, a slave ahead of its master or storing nothing while its master grows."""
    import json

    (tmp_path / "metrics").mkdir()
    rows = []
    for k in range(20):  # rounds every 500 ms from 0 to 9.5 s
        ts = k * 0.5
        for g, m, s in (
            ("broker-a", 1000 + 100 * k, 900),  # forked: the slave is stuck
            ("broker-b", 1000 + 100 * k, 1000 + 100 * k - 50),  # replicating
            ("broker-c", 500, 900),
        ):  # the master came back behind its slave
            rows.append({"ts": ts, "node": g, "brokerName": g, "role": "SYNC_MASTER", "up": True, "maxPhyOffset": m})
            rows.append(
                {
                    "ts": ts,
                    "node": g + "-s",
                    "brokerName": g,
                    "role": "SLAVE",
                    "master": g,
                    "up": True,
                    "maxPhyOffset": s,
                }
            )
    (tmp_path / "metrics" / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert evidence.stuck_groups(tmp_path, 5000) == {
        "broker-a": "group broker-a cannot replicate: broker-a-s stored nothing while its master's log grew "
        "before the fault (a fork)",
        "broker-c": "group broker-c cannot replicate: broker-c-s was ahead of its master before the fault (a fork)",
    }
    faults = [
        fault(1, "kill-master", start=5000, end=6000),
        fault(2, "kill-master", start=5000, end=6000, group="broker-b", target="broker-b"),
        fault(3, "cluster-power-loss", start=5000, end=6000, group=None),
    ]
    got = cell_samples_by_id(tmp_path, summary_of(faults))
    assert "broker-a-s stored nothing" in got[1]["not_exercised"]
    assert "no sample saw broker-b down" in got[2]["not_exercised"]  # replicating: only its own effect is missing
    assert got[3]["groups_not_exercised"] == ["broker-a", "broker-c"]


def test_delivered_counts_the_faulted_groups_acknowledged_sends_some_consumer_received(tmp_path):
    ok = [("SEND_OK", 10500, 10510)]
    fabricate(
        tmp_path,
        [
            ("a1", "broker-a", ok),
            ("a2", "broker-a", ok),
            ("a3", "broker-a", ok),
            ("a4", "broker-a", [("ERROR", 10200, 10300), ("SEND_OK", 10600, 10620)]),  # on its retry
            ("b1", "broker-b", ok),  # the other group's
            ("a0", "broker-a", [("SEND_OK", 3900, 4000)]),  # 6 s before the fault
            ("e1", "broker-a", [("SEND_OK", 6900, 7000)]),  # 3 s before it: at stake
            ("a5", "broker-a", [("SEND_OK", 11900, 12000)]),
        ],  # after its heal
        receives=[
            ("a1", None, 15000),
            (None, "U-a2-1", 15000),  # by KEYS, by UNIQ_KEY only
            # recorded in the same ms as its try's invoke, before it in time order
            ("a4", None, 10600),
            ("b1", None, 15000),
            ("a0", None, 15000),
            ("e1", None, 15000),
            ("a5", None, 15000),
        ],
    )
    f = [fault(1, "kill-master", start=10000, end=11000)]
    got = cell_samples_by_id(tmp_path, audited_summary(f, {"#1 kill-master broker-a": 5}, 8, 7))[1]
    # acknowledged by broker-a from 5 s before the fault to its heal: a1 a2 a3 a4 e1; a3 never received
    assert (got["acked_recounted"], got["delivered"]) == (5, 4)
    assert got["excluded"] == {} and got["not_audited"] is None
    cell = cells.build([{"topology": "2m-2s-sync", "flush": "ASYNC_FLUSH", "backend": "local", "samples": [got, got]}])[
        0
    ]
    assert (cell["delivered"], cell["acked_during"]) == (8, 10)
    # a cluster-wide fault counts every group's acknowledged sends
    f = [fault(1, "cluster-power-loss", start=10000, end=11000, group=None)]
    got = cell_samples_by_id(tmp_path, audited_summary(f, {"#1 cluster-power-loss broker-a": 6}, 8, 7))[1]
    assert (got["acked_recounted"], got["delivered"]) == (6, 5)


def test_indeterminate_counts_the_sends_no_broker_answered_and_judges_them_neither_lost_nor_delivered(tmp_path):
    fabricate(
        tmp_path,
        [
            ("i1", None, [("ERROR", 1100, 1200)]),  # a client error
            ("i2", None, [(None, 1300, None)]),  # never answered at all
            ("i3", None, [("ERROR", 1400, 1500), ("ERROR", 1600, 1700)]),  # every try failed
            ("k1", "broker-a", [("ERROR", 1100, 1200), ("SEND_OK", 1300, 1310)]),  # acked on a retry
            ("u1", "broker-a", [("SLAVE_NOT_AVAILABLE", 1100, 1200)]),  # answered: unconfirmed
            ("o1", None, [("ERROR", 500, 600)]),  # before the fault
            ("x1", "broker-b", [("ERROR", 1100, 1200), (None, 1300, None)]),
        ],
        receives=[("k1", None, 5000)],
    )
    # x1: the client timed out, but broker-b stored it: another group's, not this fault's
    f = [fault(1, "kill-master", start=1000, end=2000)]
    got = cell_samples_by_id(tmp_path, audited_summary(f, {"#1 kill-master broker-a": 1}, 1))[1]
    assert got["indeterminate"] == 3  # i1, i2, i3 (their group is unknown)
    assert got["delivered"] == 1 and got["lost"] == 0 and got["undelivered"] == 0
    assert judge(promise("2m-2s-sync", "ASYNC_FLUSH", "kill-master", "master"), [got]) == ("PASS", "")


def test_availability_per_group_is_the_share_each_group_accepted_and_the_time_it_accepted_none(tmp_path):
    sends = []
    for k, t in enumerate(range(1000, 6000, 100)):  # one send per 100 ms to each group
        sends.append((f"b{k}", "broker-b", [("SEND_OK", t, t + 5)]))
        # broker-a refuses from 2000 to 4000 (its slave is gone: SLAVE_NOT_AVAILABLE), accepts otherwise
        status = "SLAVE_NOT_AVAILABLE" if 2000 <= t < 4000 else "SEND_OK"
        sends.append((f"a{k}", "broker-a", [(status, t, t + 5)]))
    sends.append(("e1", None, [("ERROR", 2500, 2600)]))
    fabricate(tmp_path, sends)
    f = [fault(1, "kill-slave", role="slave", start=1000, end=6000)]
    got = cell_samples_by_id(tmp_path, audited_summary(f, {"#1 kill-slave broker-a-s": 30}, 80, 0))[1]
    ga = got["group_availability"]
    assert ga["broker-a"] | {"unwritable_s": None, "longest_gap_s": None} == {
        "answered": 50,
        "accepted": 30,
        "share": 0.6,
        "not_accepted": {"SLAVE_NOT_AVAILABLE": 20},
        "unwritable_s": None,
        "longest_gap_s": None,
    }
    # refused from the try at 2000 to the next accepted answer at 4005 (1905 -> 2000: nobody asked)
    assert ga["broker-a"]["unwritable_s"] == 2.0 and ga["broker-a"]["longest_gap_s"] == 2.0
    assert ga["broker-b"]["share"] == 1.0 and ga["broker-b"]["unwritable_s"] == 0.0
    assert ga["?"] == {"errors": 1, "unknown": 0}
    assert promises.group_availability_text(ga) == (
        "broker-a 60 % (30/50), unwritable 2.0 s [SLAVE_NOT_AVAILABLE 20]; broker-b 100 % (50/50), unwritable 0.0 s; "
        "group unknown: 1 failed tries (timeouts, errors, refusals)"
    )
    # a cell over two runs: answers summed, the longest unwritable time
    merged = promises.merge_groups(
        [
            got,
            got
            | {
                "group_availability": {
                    "broker-a": {"answered": 10, "accepted": 10, "not_accepted": {}, "unwritable_s": 5.0}
                }
            },
        ]
    )
    assert (
        merged["broker-a"]["accepted"],
        merged["broker-a"]["answered"],
        merged["broker-a"]["unwritable_s"],
        merged["broker-a"]["share"],
    ) == (40, 60, 5.0, 0.667)
    # no try at all in a gap is not unwritable: nobody asked
    quiet = table.RunTable()  # accepted at 1005, then no try until 4600, answered at 5100: 0.5 s, not a gap
    quiet.tries = [(1000, 1005, "SEND_OK", "broker-a"), (4600, 5100, "SEND_OK", "broker-a")]
    assert figures.group_availability(quiet, 1000, 6000)["broker-a"]["unwritable_s"] == 0.0
    # a recorder that knows the broker of a failed try (the history's broker_name): it counts against that group
    # and an answer whose copy is on no node (a power cut took it) has no group either
    quiet.tries += [
        (2000, 2100, "ERROR", "broker-a"),
        (2000, 2100, "ERROR", None),
        (2000, 2100, "SLAVE_NOT_AVAILABLE", None),
    ]
    got = figures.group_availability(quiet, 1000, 6000)
    assert (got["broker-a"]["answered"], got["broker-a"]["accepted"], got["broker-a"]["not_accepted"]) == (
        3,
        2,
        {"ERROR": 1},
    )
    assert got["?"] == {"errors": 1, "unknown": 1}


def test_records_the_audit_excluded_are_counted_named_and_fail_the_cell_unless_explained(tmp_path):
    p = promise("2m-2s-sync", "ASYNC_FLUSH", "kill-master", "master")
    f = [fault(1, "kill-master", start=1000, end=2000)]
    sends = [("a1", "broker-a", [("SEND_OK", 1500, 1510)]), ("a2", "broker-a", [("SEND_OK", 1600, 1610)])]
    recv = [("a1", None, 3000), ("a2", None, 3000)]
    clean = audited_summary(f, {"#1 kill-master broker-a": 2}, 2)
    fabricate(tmp_path, sends, recv)
    got = cell_samples_by_id(tmp_path, clean)[1]
    assert got["excluded"] == {} and judge(p, [got]) == ("PASS", "")
    # a history line the audit could not parse: no time, so every cell of the run names it
    fabricate(tmp_path, sends, recv, producer_tail='{"op": "send", "send_id": "a3", "sta\n')
    got = cell_samples_by_id(tmp_path, clean)[1]
    assert got["excluded"] == {"unparsable history line": 1}
    assert judge(p, [got]) == (
        "FAIL",
        "records excluded from the audit, unexplained: 1 unparsable history line (first: producer-1.jsonl:5)",
    )
    # the same line torn at the end of its file (the recorder stopped mid-line) is explained: named, not failed
    fabricate(tmp_path, sends, recv, producer_tail='{"op": "send", "send_id": "a3", "sta')
    got = cell_samples_by_id(tmp_path, clean)[1]
    assert got["excluded"] == {"torn last history line": 1} and judge(p, [got])[0] == "PASS"
    assert promises.excluded_text([got]) == "1 torn last history line (first: producer-1.jsonl:5) (explained)"
    # a line with no known op, and a send without a send_id
    fabricate(
        tmp_path, sends, recv, producer_tail='{"op": "sned"}\n{"op": "send", "status": "SEND_OK", "start_ms": 1500}\n'
    )
    got = cell_samples_by_id(tmp_path, clean)[1]
    assert got["excluded"] == {"history line with no known op": 1, "send without a send_id": 1}
    # an acknowledged send owed to no consumer group: its group shut down before it was acknowledged
    fabricate(tmp_path, sends, recv, unsubscribe_at=1550)
    got = cell_samples_by_id(tmp_path, audited_summary(f, {"#1 kill-master broker-a": 2}, 1))[1]
    assert got["excluded"] == {"acknowledged, owed to no consumer group (outside every audited window)": 1}
    assert judge(p, [got])[0] == "FAIL"
    # the audit's counts must be the histories': a fault's acknowledged sends, a consumer group's
    fabricate(tmp_path, sends, recv)
    got = cell_samples_by_id(tmp_path, audited_summary(f, {"#1 kill-master broker-a": 3}, 2))[1]
    assert got["excluded"] == {"acknowledged the audit counted 3, its per-send table 2": 1}
    got = cell_samples_by_id(tmp_path, audited_summary(f, {"#1 kill-master broker-a": 2}, 5, 2))[1]
    assert got["excluded"] == {f"{CG}: the audit owed 5 acknowledged, its per-send table 2": 3}
    assert "3 CG1: the audit owed 5" in judge(p, [got])[1]


def test_a_cell_without_delivery_figures_says_not_audited_and_fails_the_matrix(tmp_path):
    p = promise("2m-2s-sync", "ASYNC_FLUSH", "kill-master", "master")
    f = [fault(1, "kill-master", start=1000, end=2000)]
    fabricate(tmp_path, [("a1", "broker-a", [("SEND_OK", 1500, 1510)])], [("a1", None, 3000)])
    # a summary without the delivery checker's figures (no consumer group was audited)
    got = cell_samples_by_id(tmp_path, summary_of(f, ackedOnGroupByFault={"#1 kill-master broker-a": 1}))[1]
    assert got["delivered"] is None and got["indeterminate"] is None
    assert "no delivery block" in got["not_audited"]
    assert judge(p, [got]) == (
        "not audited",
        "1 of 1 runs: summary.json has no delivery block (no consumer group was audited)",
    )
    assert judge(p, [got | AUDITED])[0] == "PASS"
    # one run of a cell without them: the cell is not audited, whatever the others say
    assert judge(p, [got | AUDITED, got])[0] == "not audited"
    # no commit log: no send has a group
    import shutil

    shutil.rmtree(tmp_path / "nodes")
    got = cell_samples_by_id(tmp_path, audited_summary(f, {"#1 kill-master broker-a": 1}, 1))[1]
    assert "no commit log" in got["not_audited"] and judge(p, [got])[0] == "not audited"
    cell = cells.build([{"topology": "2m-2s-sync", "flush": "ASYNC_FLUSH", "backend": "local", "samples": [got]}])[0]
    assert (cell["delivered"], cell["indeterminate"], cell["verdict"]) == (None, None, "not audited")
    out = tmp_path / "out"
    out.mkdir()
    render.write(out, [cell], [], "cmd")
    row = next(x for x in (out / "matrix.md").read_text().splitlines() if x.startswith("| ours"))
    assert row.count("| not audited |") == 3  # delivered, indeterminate, duplicates
    assert "**not audited**" in row and "| 1/1 |" in row
    # a losing cell stays FAIL: not audited never hides a loss
    assert judge(p, [got | {"stranded": 2}])[0] == "FAIL"


def test_an_acknowledged_send_no_consumer_received_never_passes_unnoticed(tmp_path):
    """review-1 M1: 3 acknowledged by broker-a during a kill-master, a3 received by nobody, and an audit
    summary that (wrongly) says every owed send was delivered and blames nothing: the cell read PASS."""
    ok = [("SEND_OK", 1500, 1510)]
    fabricate(
        tmp_path,
        [("a1", "broker-a", ok), ("a2", "broker-a", ok), ("a3", "broker-a", ok)],
        receives=[("a1", None, 3000), ("a2", None, 3000)],
    )
    f = [fault(1, "kill-master", start=1000, end=2000)]
    p = promise("2m-2s-sync", "ASYNC_FLUSH", "kill-master", "master")
    got = cell_samples_by_id(tmp_path, audited_summary(f, {"#1 kill-master broker-a": 3}, 3))[1]
    assert (got["acked_recounted"], got["delivered"]) == (3, 2)
    assert got["excluded"] == {f"{CG}: the audit counted 3 delivered, its per-send table 2": 1}
    verdict, note = judge(p, [got])
    assert verdict == "FAIL" and "the audit counted 3 delivered, its per-send table 2" in note
    # an audit whose per-group figures do not add up (acknowledged = delivered + lost + stranded + parked)
    s = audited_summary(f, {"#1 kill-master broker-a": 3}, 3, 2)
    s["delivery"][CG]["lost"] = 0
    got = cell_samples_by_id(tmp_path, s)[1]
    assert got["excluded"] == {
        f"{CG}: the audit's 3 acknowledged are not 2 delivered + 0 lost + 0 stranded + 0 parked": 1
    }
    # the audit agrees (a3 lost) but blames a later power loss of the group: the kill's cell says where it went
    f2 = f + [fault(2, "power-loss", start=4000, end=5000)]
    s = audited_summary(
        f2,
        {"#1 kill-master broker-a": 3, "#2 power-loss broker-a": 3},
        3,
        2,
        lostByFault={"#2 power-loss broker-a": 1},
        deliveryByFault={"#2 power-loss broker-a": {"delivery.lost": 1}},
    )
    got = cell_samples_by_id(tmp_path, s)
    assert got[1]["excluded"] == {} and got[1]["not_delivered"] == 1
    verdict, note = judge(p, [got[1]])
    assert (
        verdict == "PASS"
        and "1 acknowledged during the fault not delivered: the audit blames them on another fault of the run" in note
    )


def test_delivered_means_every_consumer_group_owed_the_send_received_it(tmp_path):
    """review-1 M1: a send received by CG1 but owed to CG2 as well is not delivered."""
    ok = [("SEND_OK", 1500, 1510)]
    fabricate(
        tmp_path, [("a1", "broker-a", ok), ("a2", "broker-a", ok)], receives=[("a1", None, 3000), ("a2", None, 3000)]
    )
    write_consumer(tmp_path, "c2", "CG2", [("a1", 3000)])
    f = [fault(1, "kill-master", start=1000, end=2000)]
    s = audited_summary(f, {"#1 kill-master broker-a": 2}, 2)
    s["delivery"]["CG2"] = {"acknowledged": 2, "delivered": 1, "lost": 1, "stranded": 0, "parked": 0}
    got = cell_samples_by_id(tmp_path, s)[1]
    assert (got["acked_recounted"], got["delivered"], got["excluded"]) == (2, 1, {})


def test_an_ack_counted_on_two_faults_says_so(tmp_path):
    """review-1 M1: the sweep's gap (4-5 s) is shorter than the 5 s look-back, so one acknowledged send is
    at stake in two faults; both cells count it (as the audit does) and say with which fault they share it."""
    ok = [("SEND_OK", 1500, 1510)]
    fabricate(
        tmp_path,
        [("a1", "broker-a", ok), ("a2", "broker-a", [("SEND_OK", 4500, 4510)])],
        receives=[("a1", None, 9000), ("a2", None, 9000)],
    )
    f = [fault(1, "kill-master", start=1000, end=2000), fault(2, "kill-slave", role="slave", start=6000, end=7000)]
    got = cell_samples_by_id(
        tmp_path, audited_summary(f, {"#1 kill-master broker-a": 1, "#2 kill-slave broker-a-s": 2}, 2)
    )
    assert got[2]["acked_recounted"] == 2 and got[2]["shared_acks"] == {"#1 kill-master broker-a": 1}
    assert got[1]["shared_acks"] == {"#2 kill-slave broker-a-s": 1}
    note = judge(promise("2m-2s-sync", "ASYNC_FLUSH", "kill-slave", "slave"), [got[2]])[1]
    assert "1 acknowledged send(s) also counted on #1 kill-master broker-a" in note


def test_a_consumer_group_name_cannot_explain_away_a_mismatch(tmp_path):
    """review-1 L5: excluded records are explained by their kind, not by the text they start with."""
    ok = [("SEND_OK", 1500, 1510)]
    evil = "torn last history line"
    fabricate(tmp_path, [("a1", "broker-a", ok)], receives=[("a1", None, 3000)])
    f = [fault(1, "kill-master", start=1000, end=2000)]
    s = audited_summary(f, {"#1 kill-master broker-a": 1}, 1)
    s["delivery"][evil] = {"acknowledged": 7, "delivered": 7, "lost": 0, "stranded": 0, "parked": 0}
    got = cell_samples_by_id(tmp_path, s)[1]
    assert any(k.startswith(evil) for k in got["excluded"])
    assert judge(promise("2m-2s-sync", "ASYNC_FLUSH", "kill-master", "master"), [got])[0] == "FAIL"


def test_a_torn_send_answer_that_could_hide_a_loss_fails_the_cell(tmp_path):
    """review-1 L6: a3 was invoked, its answer line is torn, and no consumer received it: a SEND_OK could
    be what was torn, so a lost acknowledged send could hide there."""
    import json

    ok = [("SEND_OK", 1500, 1510)]
    p = promise("2m-2s-sync", "ASYNC_FLUSH", "kill-master", "master")
    f = [fault(1, "kill-master", start=1000, end=2000)]
    invoke = (
        json.dumps(
            {
                "client": "p1",
                "seq": 9,
                "op": "invoke",
                "group": "PG",
                "topic": TOPIC,
                "send_id": "a3",
                "attempt": 1,
                "start_ms": 1600,
                "end_ms": 1600,
            }
        )
        + "\n"
    )
    fabricate(
        tmp_path,
        [("a1", "broker-a", ok)],
        receives=[("a1", None, 3000)],
        table={"a3": {"first_ms": 1600}},  # the audit's line of the send the invoke begins
        producer_tail=invoke + '{"client": "p1", "seq": 10, "op": "send", "send_id": "a3", "sta',
    )
    got = cell_samples_by_id(tmp_path, audited_summary(f, {"#1 kill-master broker-a": 1}, 1))[1]
    assert got["excluded"] == {
        "torn last history line, the answer of a3, which no consumer group received "
        "(a lost acknowledged send could hide there)": 1
    }
    assert judge(p, [got])[0] == "FAIL"
    # received after all: the torn answer hides nothing
    fabricate(
        tmp_path,
        [("a1", "broker-a", ok)],
        receives=[("a1", None, 3000), ("a3", None, 3000)],
        table={"a3": {"first_ms": 1600}},  # the audit's line of the send the invoke begins
        producer_tail=invoke + '{"client": "p1", "seq": 10, "op": "send", "send_id": "a3", "sta',
    )
    got = cell_samples_by_id(tmp_path, audited_summary(f, {"#1 kill-master broker-a": 1}, 1))[1]
    assert got["excluded"] == {"torn last history line": 1} and judge(p, [got])[0] == "PASS"
    # torn before its send_id: every unanswered send of that file is a candidate
    fabricate(
        tmp_path,
        [("a1", "broker-a", ok)],
        receives=[("a1", None, 3000)],
        table={"a3": {"first_ms": 1600}},  # the audit's line of the send the invoke begins
        producer_tail=invoke + '{"client": "p1", "seq": 10, "op": "se',
    )
    got = cell_samples_by_id(tmp_path, audited_summary(f, {"#1 kill-master broker-a": 1}, 1))[1]
    assert judge(p, [got])[0] == "FAIL"


def test_a_cluster_fault_counts_an_acknowledged_send_parked_on_a_master_and_stays_weak(tmp_path):
    """review-1 L4: cluster-power-loss with ASYNC_FLUSH may lose acknowledged sends (WEAK). a3 is a delayed
    message whose only copy is parked in SCHEDULE_TOPIC_XXXX: acknowledged and stored, not due, not owed
    (the audit's "parked"). The audit counts it on the cluster-wide fault; so must the matrix, or the
    mismatch turns the allowed WEAK into FAIL."""
    ok = [("SEND_OK", 1500, 1510)]
    fabricate(
        tmp_path,
        [("a1", "broker-a", ok), ("a2", "broker-b", ok), ("a3", None, ok), ("a4", "broker-a", ok)],
        receives=[("a1", None, 3000), ("a2", None, 3000)],
        extra_copies=[("broker-a", "a3", "U-a3-1", "SCHEDULE_TOPIC_XXXX")],
    )
    f = [fault(1, "cluster-power-loss", start=1000, end=2000, group=None)]
    label = "#1 cluster-power-loss broker-a"
    s = audited_summary(
        f, {label: 4}, 4, 2, parked=1, lostByFault={label: 1}, deliveryByFault={label: {"delivery.lost": 1}}
    )
    got = cell_samples_by_id(tmp_path, s)[1]
    assert (got["acked_recounted"], got["delivered"], got["parked"], got["excluded"]) == (4, 2, 1, {})
    verdict, note = judge(promise("2m-2s-sync", "ASYNC_FLUSH", "cluster-power-loss", "master"), [got])
    assert verdict == "WEAK" and "1 parked" in note
    # a group fault counts it on the group that parked it (its acknowledged try's copy), as the audit does
    f = [fault(1, "kill-master", start=1000, end=2000)]
    got = cell_samples_by_id(tmp_path, audited_summary(f, {"#1 kill-master broker-a": 3}, 4, 2, parked=1))[1]
    assert got["acked_recounted"] == 3 and got["excluded"] == {}
    got = cell_samples_by_id(tmp_path, audited_summary(f, {"#1 kill-master broker-a": 2}, 4, 2, parked=1))[1]
    assert got["excluded"] == {"acknowledged the audit counted 2, its per-send table 3": 1}


def test_the_audits_count_of_a_faults_acknowledged_sends_must_be_exact(tmp_path):
    """The audit and the matrix give a send the group that acknowledged it, so the audit's ackedOnGroupByFault
    must equal the recount: one off either way is named. x1's first try timed out on broker-a, which stored
    it; its retry was acknowledged by broker-b. r1's answer names broker-b (the Rust client) and no node
    holds it: broker-b's, and a cluster-wide fault's too. y1's copies in both groups cannot be told apart:
    no group's (an excluded record), a cluster-wide fault's."""
    ok = [("SEND_OK", 10500, 10510)]
    fabricate(
        tmp_path,
        [
            ("a1", "broker-a", ok),
            ("b1", "broker-b", ok),
            (
                "x1",
                None,
                [("ERROR", 10100, 10200, {"group": "broker-a"}), ("SEND_OK", 10300, 10310, {"group": "broker-b"})],
            ),
            ("r1", None, [("SEND_OK", 10400, 10410, {"line": {"broker_name": "broker-b"}})]),
            ("y1", "broker-b", [("SEND_OK", 10600, 10610, {"uniq": "U-y1"})]),
        ],
        receives=[(sid, None, 13000) for sid in ("a1", "b1", "x1", "r1", "y1")],
        extra_copies=[("broker-a", "y1", "U-y1", TOPIC)],
        # the audit's word (tests/unit/pipeline/test_delivery_groups.py): y1 is in no group
        table={"y1": {"group": None, "ambiguous": ["broker-a", "broker-b"]}},
    )
    amb = "acknowledged, stored in two groups, the answer names neither (broker-a, broker-b)"
    for kind, group, right in (
        ("kill-master", "broker-a", 1),
        ("kill-master", "broker-b", 3),
        ("cluster-power-loss", None, 5),
    ):
        f = [fault(1, kind, start=10000, end=11000, group=group, target=group)]
        label = f"#1 {kind} {group or 'broker-a'}"
        for said in (right - 1, right, right + 1):
            got = cell_samples_by_id(tmp_path, audited_summary(f, {label: said}, 5))[1]
            assert got["acked_recounted"] == right
            off = {} if said == right else {f"acknowledged the audit counted {said}, its per-send table {right}": 1}
            assert got["excluded"] == {amb: 1} | off, (kind, said)


def test_availability_per_group_lists_groups_in_name_order_whatever_the_hash_seed():
    # the rendered table joins the groups in this order: a set's order (PYTHONHASHSEED) must not reach it
    facts = table.RunTable()
    facts.tries = [(1000 + k, 1005 + k, "SEND_OK", g) for k, g in enumerate(["broker-c", "broker-a", "broker-b"])]
    facts.tries.append((1500, 1600, "ERROR", None))
    assert list(figures.group_availability(facts, 900, 2000)) == ["broker-a", "broker-b", "broker-c", "?"]


def test_a_checker_that_crashed_fails_the_matrix():
    """A checker that raised leaves an UNKNOWN verdict (rmqha/pipeline/checker.py crashed): what it checks
    (the replicas, the queues, phantoms, ...) was never judged, so the run cannot pass the matrix however
    its cells look; a WARN or an INFO verdict does not fail it."""
    base = {"faults": [{"id": 1, "kind": "power-loss", "target": "broker-a"}], "lostByFault": {}}
    crashed = {"status": "UNKNOWN", "name": "checker replicas", "id": "checker.crashed", "subject": "replicas"}
    assert cells.unexplained_failures(base | {"verdicts": [crashed]}) == ["checker replicas (checker.crashed)"]
    # one whose id a cell carries (a delivery verdict) is no cell's either: its counts were not judged
    unknown_delivery = {"status": "UNKNOWN", "name": "d", "id": "delivery.lost"}
    assert cells.unexplained_failures(base | {"verdicts": [unknown_delivery]}) == ["d (delivery.lost)"]
    others = [{"status": s, "name": s.lower(), "id": "x"} for s in ("PASS", "WARN", "INFO")]
    assert cells.unexplained_failures(base | {"verdicts": others}) == []


def _lost_during_kill_slave(tmp_path, a2_acked_ms, later):
    """a1 and a3 acknowledged by broker-a and received; a2 acknowledged at a2_acked_ms and on no node, never
    received. Faults: a kill-slave of broker-a (2-7 s), then `later` (a3 is at stake in it). The summary is
    an audit's from before issue 32: its lostByFault and deliveryByFault count a2 on the kill-slave too, and
    the matrix counts again by the audit's rule from its per-send findings (summary.json's `lost`,
    report/delivery.jsonl)."""
    import json

    ok = [("SEND_OK", 3000, 3010)]
    fabricate(
        tmp_path,
        [
            ("a1", "broker-a", ok),
            ("a2", None, [("SEND_OK", a2_acked_ms - 10, a2_acked_ms)]),
            ("a3", "broker-a", [("SEND_OK", 9000, 9010)]),
        ],
        receives=[("a1", None, 20000), ("a3", None, 20000)],
    )
    detail = {"verdict": "delivery.lost", "group": CG, "send_id": "a2", "topic": TOPIC, "producer": "p1"}
    detail |= {"reason": "nowhere", "acked_ms": a2_acked_ms, "where": [], "faults": []}
    (tmp_path / "report" / "delivery.jsonl").write_text(json.dumps(detail) + "\n")
    f = [fault(1, "kill-slave", role="slave", start=2000, end=7000), later]
    labels = ["#1 kill-slave broker-a-s", f"#2 {later['kind']} {later['target']}"]
    s = audited_summary(
        f,
        {labels[0]: 1, labels[1]: 1},
        3,
        2,
        lost=[["U-a2-1", "a2", "p1", TOPIC, a2_acked_ms]],
        lostByFault={x: 1 for x in labels},
        deliveryByFault={x: {"delivery.lost": 1} for x in labels},
    )
    return cell_samples_by_id(tmp_path, s), s


def test_a_loss_acknowledged_during_a_kill_slave_counts_in_the_later_group_power_losss_cell(tmp_path):
    """Issue 32: a2, acknowledged while broker-a's slave was killed, was destroyed by the group's power cut
    after it. The kill-slave's cell must not count it (its promise excludes any loss: it would FAIL); the
    cut's cell does (WEAK: an ASYNC_FLUSH group cut may drop it)."""
    got, s = _lost_during_kill_slave(tmp_path, 3005, fault(2, "group-power-loss", start=10000, end=12000))
    assert (got[1]["lost"], got[1]["undelivered"]) == (0, 0)
    assert (got[2]["lost"], got[2]["undelivered"]) == (1, 1)
    assert judge(promise("2m-2s-sync", "ASYNC_FLUSH", "kill-slave", "slave"), [got[1]])[0] == "PASS"
    assert judge(promise("2m-2s-sync", "ASYNC_FLUSH", "group-power-loss", "master"), [got[2]])[0] == "WEAK"
    # the matrix and the audit count by the same rule: an audit written since gives the same counts
    again = cells.reblame(tmp_path, s)
    assert again["lostByFault"] == {"#2 group-power-loss broker-a": 1}
    assert again["deliveryByFault"] == {"#2 group-power-loss broker-a": {"delivery.lost": 1}}
    assert (
        cells.unexplained_failures(again | {"verdicts": [{"status": "FAIL", "name": "l", "id": "delivery.lost"}]}) == []
    )


def test_a_loss_acknowledged_with_no_fault_active_counts_in_the_later_cuts_cell(tmp_path):
    got, _s = _lost_during_kill_slave(tmp_path, 1000, fault(2, "group-power-loss", start=10000, end=12000))
    assert (got[1]["lost"], got[1]["undelivered"]) == (0, 0)
    assert (got[2]["lost"], got[2]["undelivered"]) == (1, 1)


def test_a_loss_no_later_fault_could_destroy_stays_in_the_cell_of_the_fault_at_its_acknowledgement(tmp_path):
    """A pause of the slave after it destroys nothing the master holds: the loss stays the kill-slave's,
    whose promise excludes it."""
    got, _s = _lost_during_kill_slave(tmp_path, 3005, fault(2, "pause-slave", role="slave", start=8000, end=12000))
    assert (got[1]["lost"], got[1]["undelivered"]) == (1, 1)
    assert (got[2]["lost"], got[2]["undelivered"]) == (0, 0)
    assert judge(promise("2m-2s-sync", "ASYNC_FLUSH", "kill-slave", "slave"), [got[1]])[0] == "FAIL"
