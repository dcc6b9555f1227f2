"""rmqha/chaos/nemesis.py's start/stop table (ACTIONS, keyed by rmqha/runs/faults.py) and its Nemesis, against a recording fake of the cluster handle
(tests/unit/chaos/fakes.py): every fault's start and stop (exact operations, targets and parameters),
the fault log each writes, failing operations, heal_all, and Nemesis.run on a fake clock."""

from __future__ import annotations

import random

import pytest

import rmqha.runs.faultlog
from rmqha.chaos import nemesis
from rmqha.runs.faultlog import FaultLog, read_faults
from rmqha.chaos.nemesis import Fault, Nemesis
from rmqha.runs import faults as vocabulary
from rmqha.runs.faults import ALL_FAULTS, FAULTS, applicable_faults
from rmqha.cluster import ClusterError

from .fakes import Clock, FakeHandle, FakeStop

A, AS, B, BS = "broker-a", "broker-a-s", "broker-b", "broker-b-s"


def started(node):
    return ("start", {"node": node, "wait": True, "timeout": 60})  # waits for /status, up to a minute


def node_op(op, node):
    return (op, {"node": node})


# kind -> (targets, backends, target, params, [start operations], [stop operations])
TABLE = {
    "latency": (
        "slave",
        "docker",
        AS,
        {"ms": 2500},
        [("slow_link", {"link": "broker-a-s-ha", "ms": 2500, "stream": "downstream"})],
        [("heal_link", {"link": "broker-a-s-ha"})],
    ),
    "cut": (
        "slave",
        "docker",
        AS,
        {"mode": "timeout"},
        [("cut_link", {"link": "broker-a-s-ha", "mode": "timeout"})],
        [("heal_link", {"link": "broker-a-s-ha"})],
    ),
    "slicer": (
        "slave",
        "docker",
        AS,
        {"average_size": 7, "size_variation": 3, "delay_us": 10},
        [
            (
                "slice_link",
                {
                    "link": "broker-a-s-ha",
                    "average_size": 7,
                    "size_variation": 3,
                    "delay_us": 10,
                    "stream": "downstream",
                },
            )
        ],
        [("heal_link", {"link": "broker-a-s-ha"})],
    ),
    "pause-slave": ("slave", "both", AS, {}, [node_op("pause", AS)], [node_op("resume", AS)]),
    "restart-slave": ("slave", "both", AS, {}, [("stop", {"node": AS, "timeout": 10.0})], [started(AS)]),
    "kill-slave": ("slave", "both", AS, {}, [node_op("kill", AS)], [started(AS)]),
    "pause-master": ("master", "both", A, {}, [node_op("pause", A)], [node_op("resume", A)]),
    "restart-master": ("master", "both", A, {}, [("stop", {"node": A, "timeout": 10.0})], [started(A)]),
    "kill-master": ("master", "both", A, {}, [node_op("kill", A)], [started(A)]),
    "power-loss": ("node", "both", A, {}, [node_op("power_loss", A)], [started(A)]),
    # the whole group: master first, then its slave; back on together, then each waited for
    "group-power-loss": (
        "master",
        "both",
        A,
        {},
        [node_op("power_loss", A), node_op("power_loss", AS)],
        [
            ("start", {"node": A, "wait": False, "timeout": 30.0}),
            ("start", {"node": AS, "wait": False, "timeout": 30.0}),
            ("wait_up", {"node": A, "timeout": 60}),
            ("wait_up", {"node": AS, "timeout": 60}),
        ],
    ),
    # slaves first, gap_s later the master (a gap of 0 here: no sleeping in a unit test)
    "slave-then-master-power-loss": (
        "master",
        "both",
        A,
        {"gap_s": 0},
        [node_op("power_loss", AS), node_op("power_loss", A)],
        [
            ("start", {"node": A, "wait": False, "timeout": 30.0}),
            ("start", {"node": AS, "wait": False, "timeout": 30.0}),
            ("wait_up", {"node": A, "timeout": 60}),
            ("wait_up", {"node": AS, "timeout": 60}),
        ],
    ),
    # every broker, masters first
    "cluster-power-loss": (
        "master",
        "both",
        A,
        {},
        [node_op("power_loss", n) for n in (A, B, AS, BS)],
        [("start", {"node": n, "wait": False, "timeout": 30.0}) for n in (A, B, AS, BS)]
        + [("wait_up", {"node": n, "timeout": 60}) for n in (A, B, AS, BS)],
    ),
    "disk-full": ("node", "both", AS, {}, [("fill_disk", {"node": AS, "leave_bytes": 0})], [node_op("free_disk", AS)]),
    "partition": ("node", "docker", B, {}, [node_op("partition", B)], [node_op("heal_partition", B)]),
    "client-latency": (
        "master",
        "docker",
        B,
        {"ms": 3000},
        [("slow_link", {"link": B, "ms": 3000, "stream": "downstream"})],
        [("heal_link", {"link": B})],
    ),
    "client-cut": (
        "master",
        "docker",
        A,
        {"mode": "disabled"},
        [("cut_link", {"link": A, "mode": "disabled"})],
        [("heal_link", {"link": A})],
    ),
}
LINKS = {
    "latency": "broker-a-s-ha",
    "cut": "broker-a-s-ha",
    "slicer": "broker-a-s-ha",
    "client-latency": B,
    "client-cut": A,
}


def fault(kind, target, params=None, role=None, **kw):
    group = target.removesuffix("-s")
    return Fault(
        kw.pop("at", 0.0),
        kw.pop("hold", 1.0),
        kind,
        group,
        target,
        dict(params or {}),
        role or ("slave" if target.endswith("-s") else "master"),
        **kw,
    )


def test_the_table_is_the_documented_one():
    # the classic faults; the DLedger ones: tests/unit/chaos/test_dledger_faults.py
    assert set(TABLE) == {k for k, v in FAULTS.items() if v.modes == (vocabulary.CLASSIC,)} and ALL_FAULTS == tuple(
        FAULTS
    )
    for name, (targets, backends, *_rest) in TABLE.items():
        k = FAULTS[name]
        assert (k.name, k.targets, k.backends) == (
            name,
            targets,
            {"both": ("local", "docker"), "docker": ("docker",)}[backends],
        )
        assert (k.link is not None) == (name in LINKS)
    assert vocabulary.DEFAULT_FAULTS == ("latency", "cut", "pause-slave", "restart-slave", "slicer")
    assert set(vocabulary.MASTER_FAULTS) == {n for n, row in TABLE.items() if row[0] in ("master", "node")} | {
        "kill-leader",
        "pause-leader",
        "partition-leader",
        "power-loss-leader",
    }


def test_applicable_faults_splits_by_backend_keeping_the_order():
    kinds = ["partition", "kill-master", "latency", "power-loss"]
    assert applicable_faults(kinds, "local") == (["kill-master", "power-loss"], ["partition", "latency"])
    assert applicable_faults(kinds, "docker") == (kinds, [])
    assert applicable_faults(kinds, "docker", "2m-2s-sync") == (kinds, [])
    assert applicable_faults(kinds, "docker", "dledger") == ([], kinds)


@pytest.mark.parametrize("kind", sorted(TABLE))
def test_every_fault_starts_and_stops_through_the_handle(kind, tmp_path):
    _, _, target, params, start_ops, stop_ops = TABLE[kind]
    h = FakeHandle("docker")
    nem = Nemesis(h, fault_log=FaultLog(tmp_path / "faults" / "f.jsonl"))
    f = fault(kind, target, params)
    nem.inject(f)
    assert h.calls == start_ops
    assert f.link == LINKS.get(kind) and nem.current is f
    nem.heal(f)
    assert h.calls == start_ops + stop_ops
    assert nem.current is None and nem.active == {}
    recs = read_faults(tmp_path)
    assert [
        (r["op"], r["id"], r["kind"], r["target"], r["link"], r["group"], r["role"], r["params"], r["result"])
        for r in recs
    ] == [(op, 1001, kind, target, LINKS.get(kind), f.group, f.role, params, "ok") for op in ("inject", "heal")]


@pytest.mark.parametrize("kind", sorted(k for k, row in TABLE.items() if row[1] == "both"))
def test_node_faults_work_on_the_local_backend(kind):
    _, _, target, params, start_ops, stop_ops = TABLE[kind]
    h = FakeHandle("local")
    nem = Nemesis(h)
    f = fault(kind, target, params)
    nem.inject(f)
    nem.heal(f)
    assert h.calls == start_ops + stop_ops


@pytest.mark.parametrize("kind", sorted(k for k, row in TABLE.items() if row[1] == "docker"))
def test_docker_faults_are_refused_on_the_local_backend_before_anything_is_done(kind, tmp_path):
    h = FakeHandle("local")
    nem = Nemesis(h, fault_log=FaultLog(tmp_path / "faults" / "f.jsonl"))
    with pytest.raises(ValueError, match="needs the docker backend"):
        nem.inject(fault(kind, TABLE[kind][2], TABLE[kind][3]))
    assert h.calls == [] and nem.active == {} and read_faults(tmp_path) == []


def test_an_unknown_fault_is_refused():
    nem = Nemesis(FakeHandle())
    with pytest.raises(ValueError, match="unknown fault 'meteor'"):
        nem.inject(fault("meteor", A))
    assert nem.active == {}


def test_parameters_drawn_for_each_kind():
    def drawn(kind, seeds=range(40), w=1500):
        return [FAULTS[kind].params(random.Random(s), w) for s in seeds]

    assert drawn("latency", [0], 1500) == [{"ms": 2500}] and drawn("latency", [0], 4000) == [{"ms": 5000}]
    for kind in ("cut", "client-cut"):
        assert {p["mode"] for p in drawn(kind)} == {"timeout", "disabled"}
    assert {p["ms"] for p in drawn("client-latency")} == {200, 1000, 3000}
    assert drawn("slicer", [0]) == [{"average_size": 7, "size_variation": 3, "delay_us": 10}]
    for kind in (
        "pause-slave",
        "restart-slave",
        "kill-slave",
        "pause-master",
        "restart-master",
        "kill-master",
        "power-loss",
        "disk-full",
        "partition",
    ):
        assert drawn(kind, [0]) == [{}]


def test_describe_and_to_json():
    f = fault("latency", AS, {"ms": 2500}, link="broker-a-s-ha", id=3)
    assert f.describe() == "latency broker-a-s-ha (ms=2500)"
    assert fault("kill-master", A).describe() == "kill-master broker-a"
    assert (
        fault("slicer", AS, {"average_size": 7, "delay_us": 10}).describe()
        == "slicer broker-a-s (average_size=7 delay_us=10)"
    )
    assert f.to_json() == {
        "at": 0.0,
        "hold": 1.0,
        "kind": "latency",
        "group": A,
        "target": AS,
        "params": {"ms": 2500},
        "role": "slave",
        "link": "broker-a-s-ha",
        "id": 3,
    }


# -- ids, links, what inject and heal return ------------------------------------------------------


def test_faults_outside_a_schedule_are_numbered_from_1001_and_scheduled_ids_are_kept():
    nem = Nemesis(FakeHandle())
    a, b, c = fault("pause-slave", AS), fault("kill-master", B), fault("pause-slave", BS, id=7)
    for f in (a, b, c):
        nem.inject(f)
    assert (a.id, b.id, c.id) == (1001, 1002, 7)
    assert list(nem.active) == [1001, 1002, 7] and nem.current is a
    assert nem.describe_active() == "pause-slave broker-a-s, kill-master broker-b, pause-slave broker-b-s"
    nem.heal(b)
    assert list(nem.active) == [1001, 7]


def test_a_link_fault_keeps_the_link_it_was_given():
    h = FakeHandle()
    f = fault("latency", AS, {"ms": 2500}, link="broker-a-s-ha-spare")
    Nemesis(h).inject(f)
    assert f.link == "broker-a-s-ha-spare" and h.calls[0][1]["link"] == "broker-a-s-ha-spare"


def test_nothing_active_reads_none():
    nem = Nemesis(FakeHandle())
    assert nem.current is None and nem.describe_active() == "none"


def test_inject_and_heal_return_what_the_operation_measured_and_the_fault_log_keeps_it(tmp_path, monkeypatch):
    clock = Clock(1_700_000_000.0)
    monkeypatch.setattr(rmqha.runs.faultlog, "now_ms", lambda: int(round(clock.now * 1000)))
    h = FakeHandle(clock=clock)
    took = {"power_loss": 0.12, "start": 2.5, "stop": 0.3}
    orig = h._record

    def timed(name, args):  # each operation takes its time on the clock
        clock.now += took.get(name, 0.0)
        return orig(name, args)

    h._record = timed
    loss = {"durableOffset": 4096, "droppedBytes": 100}
    h.returns = {"power_loss": loss, "stop": "SIGTERM", "free_disk": {"freedBytes": 1 << 20}}
    nem = Nemesis(h, fault_log=FaultLog(tmp_path / "faults" / "f.jsonl"))
    pl, rs, df = fault("power-loss", A), fault("restart-slave", BS), fault("disk-full", AS)
    assert nem.inject(pl) == loss
    assert nem.heal(pl) is None
    assert nem.inject(rs) == "SIGTERM"  # the handle's answer, not a dict: not written as info
    nem.heal(rs)
    assert nem.inject(df) is None
    assert nem.heal(df) == {"freedBytes": 1 << 20}
    recs = read_faults(tmp_path)
    assert [(r["op"], r["kind"], r["info"], r["error"]) for r in recs] == [
        ("inject", "power-loss", loss, None),
        ("heal", "power-loss", {}, None),
        ("inject", "restart-slave", {}, None),
        ("heal", "restart-slave", {}, None),
        ("inject", "disk-full", {}, None),
        ("heal", "disk-full", {"freedBytes": 1 << 20}, None),
    ]
    t0 = 1_700_000_000_000
    assert [(r["start_ms"] - t0, r["ts_ms"] - t0) for r in recs[:4]] == [
        (0, 120),
        (120, 2620),
        (2620, 2920),
        (2920, 5420),
    ]


def test_a_failing_start_is_written_to_the_log_raised_and_left_active_for_heal_all(tmp_path):
    h = FakeHandle()
    h.fail["power_loss"] = ClusterError("broker-a does not answer /status")
    nem = Nemesis(h, fault_log=FaultLog(tmp_path / "faults" / "f.jsonl"))
    f = fault("power-loss", A)
    with pytest.raises(ClusterError, match="does not answer"):
        nem.inject(f)
    assert nem.current is f  # half done, perhaps: heal_all undoes it
    (rec,) = read_faults(tmp_path)
    assert (rec["op"], rec["result"], rec["error"], rec["info"]) == (
        "inject",
        "error",
        "ClusterError: broker-a does not answer /status",
        {},
    )


def test_a_failing_stop_is_written_to_the_log_raised_and_no_longer_active(tmp_path):
    h = FakeHandle()
    h.fail["heal_link"] = OSError("toxiproxy down")
    nem = Nemesis(h, fault_log=FaultLog(tmp_path / "faults" / "f.jsonl"))
    f = fault("cut", AS, {"mode": "timeout"})
    nem.inject(f)
    with pytest.raises(OSError, match="toxiproxy down"):
        nem.heal(f)
    assert nem.active == {}
    assert [(r["op"], r["result"], r["error"]) for r in read_faults(tmp_path)] == [
        ("inject", "ok", None),
        ("heal", "error", "OSError: toxiproxy down"),
    ]


def test_without_a_fault_log_the_handles_own_error_is_raised():
    h = FakeHandle()
    h.fail["kill"] = ClusterError("no such process")
    with pytest.raises(ClusterError, match="no such process"):
        Nemesis(h).inject(fault("kill-master", A))
    h.fail.clear()
    nem = Nemesis(h)
    assert nem.inject(fault("pause-slave", AS)) is None and h.calls[-1] == node_op("pause", AS)


# -- heal_all ---------------------------------------------------------------------------------------


def test_heal_all_undoes_the_active_faults_then_every_link_and_node(tmp_path):
    h = FakeHandle("docker")
    nem = Nemesis(h, fault_log=FaultLog(tmp_path / "faults" / "f.jsonl"))
    km, lat = fault("kill-master", A), fault("latency", BS, {"ms": 2500})
    nem.inject(km)
    nem.inject(lat)
    h.kill(BS)  # what a test did to the handle directly: a killed slave, a full disk
    h.limited.add(B)
    del h.calls[:]
    assert nem.heal_all() == []
    assert h.calls == [
        started(A),
        ("heal_link", {"link": "broker-b-s-ha"}),
        ("heal_links", {}),
        node_op("heal_partition", A),
        node_op("resume", A),
        node_op("heal_partition", AS),
        node_op("resume", AS),
        node_op("heal_partition", B),
        node_op("resume", B),
        node_op("free_disk", B),
        node_op("heal_partition", BS),
        node_op("resume", BS),
        started(BS),
    ]
    assert nem.active == {}
    assert [(r["op"], r["kind"]) for r in read_faults(tmp_path)] == [
        ("inject", "kill-master"),
        ("inject", "latency"),
        ("heal", "kill-master"),
        ("heal", "latency"),
    ]


def test_heal_all_on_the_local_backend_has_no_partitions_to_heal():
    h = FakeHandle("local")
    nem = Nemesis(h)
    nem.inject(fault("restart-slave", AS))
    del h.calls[:]
    assert nem.heal_all() == []
    assert h.calls == [started(AS), ("heal_links", {})] + [node_op("resume", n) for n in (A, AS, B, BS)]


def test_heal_all_returns_every_error_and_still_heals_the_rest():
    h = FakeHandle("docker")
    nem = Nemesis(h)
    nem.inject(fault("kill-master", A))
    nem.inject(fault("pause-slave", BS))
    h.fail[("start", A)] = ClusterError("broker-a did not answer /status in 60 s")
    h.fail["heal_links"] = ConnectionError("refused")
    h.fail[("heal_partition", AS)] = ClusterError("not partitioned")  # nothing to heal: not an error
    h.fail[("resume", B)] = RuntimeError("docker: no such container")
    del h.calls[:]
    assert nem.heal_all() == [
        "healing kill-master broker-a: ClusterError: broker-a did not answer /status in 60 s",
        "Toxiproxy reset: ConnectionError: refused",
        "bringing broker-a back: ClusterError: broker-a did not answer /status in 60 s",
        "bringing broker-b back: RuntimeError: docker: no such container",
    ]
    assert nem.active == {}
    assert h.calls == [
        started(A),
        node_op("resume", BS),
        ("heal_links", {}),
        node_op("heal_partition", A),
        node_op("resume", A),
        started(A),
        node_op("heal_partition", AS),
        node_op("resume", AS),
        node_op("heal_partition", B),
        node_op("resume", B),
        node_op("heal_partition", BS),
        node_op("resume", BS),
    ]


# -- the schedule on a fake clock -------------------------------------------------------------------


@pytest.fixture
def clock(monkeypatch):
    c = Clock(100.0)
    monkeypatch.setattr(nemesis, "time", c)
    return c


def run(nem, schedule, clock, stop_at=None):
    stop = FakeStop(clock, None if stop_at is None else clock.now + stop_at)
    nem.run(schedule, clock.now, stop)
    return stop


def test_run_injects_and_heals_each_fault_at_its_time_and_says_so(clock):
    h = FakeHandle(clock=clock)
    h.returns["power_loss"] = {"durableOffset": 4096, "droppedBytes": 100}
    lines = []
    nem = Nemesis(h, log=lines.append)
    sched = [
        fault("power-loss", A, at=3.0, hold=2.0, id=1),
        fault("latency", BS, {"ms": 2500}, at=5.5, hold=1.5, link="broker-b-s-ha", id=2),
    ]
    run(nem, sched, clock)
    assert h.timeline() == [
        (103.0, "power_loss", A),
        (105.0, "start", A),
        (105.5, "slow_link", "broker-b-s-ha"),
        (107.0, "heal_link", "broker-b-s-ha"),
    ]
    assert lines == [
        "t=  3.0s inject power-loss broker-a on broker-a for 2s",
        "  durableOffset=4096 droppedBytes=100",
        "t=  5.0s healed power-loss broker-a",
        "t=  5.5s inject latency broker-b-s-ha (ms=2500) on broker-b for 1.5s",
        "t=  7.0s healed latency broker-b-s-ha (ms=2500)",
    ]
    assert nem.done == [(sched[0], None), (sched[1], None)] and nem.active == {}


def test_run_started_late_injects_at_once_then_keeps_every_hold_and_gap(clock):
    h = FakeHandle(clock=clock)
    t0 = clock.now - 10.0  # the workload began 10 s ago: both faults are due
    nem = Nemesis(h)
    stop = FakeStop(clock)
    nem.run(
        [fault("kill-slave", AS, at=2.0, hold=3.0, id=1), fault("pause-master", B, at=6.0, hold=5.0, id=2)], t0, stop
    )
    # the first is injected at once, 8 s late, and held its 3 s; the second keeps its 1 s gap and its 5 s
    assert h.timeline() == [(100.0, "kill", AS), (103.0, "start", AS), (104.0, "pause", B), (109.0, "resume", B)]
    assert stop.waits == [0.0, 3.0, 1.0, 5.0]


def test_run_without_a_log(clock):
    h = FakeHandle(clock=clock)
    Nemesis(h).run([fault("pause-slave", AS, at=1.0, hold=1.0, id=1)], clock.now, FakeStop(clock))
    assert h.names() == ["pause", "resume"]


def test_run_stops_early_and_leaves_the_rest_to_heal_all(clock):
    h = FakeHandle(clock=clock)
    nem = Nemesis(h)
    sched = [
        fault("kill-master", A, at=1.0, hold=2.0, id=1),
        fault("kill-master", B, at=4.0, hold=2.0, id=2),
        fault("pause-slave", AS, at=9.0, hold=1.0, id=3),
    ]
    run(nem, sched, clock, stop_at=5.0)
    assert h.timeline() == [(101.0, "kill", A), (103.0, "start", A), (104.0, "kill", B)]
    assert list(nem.active) == [2] and nem.done == [(sched[0], None)] and clock.now == 105.0


def test_a_failing_inject_or_heal_in_a_run_is_recorded_not_raised(clock, tmp_path):
    h = FakeHandle(clock=clock)
    h.fail[("kill", A)] = ClusterError("kill: no such process")
    h.fail[("start", A)] = ClusterError("broker-a did not answer /status in 60 s")
    h.fail[("resume", BS)] = ClusterError("not paused")
    lines = []
    nem = Nemesis(h, log=lines.append, fault_log=FaultLog(tmp_path / "faults" / "f.jsonl"))
    sched = [
        fault("kill-master", A, at=1.0, hold=2.0, id=1),
        fault("pause-slave", BS, at=4.0, hold=1.0, id=2),
        fault("disk-full", AS, at=6.0, hold=1.0, id=3),
    ]
    run(nem, sched, clock)
    # the failed inject's heal is still tried (the fault may be half done); every fault runs
    assert h.timeline() == [
        (101.0, "kill", A),
        (103.0, "start", A),
        (104.0, "pause", BS),
        (105.0, "resume", BS),
        (106.0, "fill_disk", AS),
        (107.0, "free_disk", AS),
    ]
    assert nem.done == [
        (
            sched[0],
            "inject: ClusterError: kill: no such process; heal: ClusterError: broker-a did not answer /status in 60 s",
        ),
        (sched[1], "heal: ClusterError: not paused"),
        (sched[2], None),
    ]
    assert lines == [
        "t=  1.0s inject kill-master broker-a on broker-a for 2s",
        "  kill-master broker-a: inject: ClusterError: kill: no such process",
        "  healing kill-master broker-a: inject: ClusterError: kill: no such process; "
        "heal: ClusterError: broker-a did not answer /status in 60 s",
        "t=  4.0s inject pause-slave broker-b-s on broker-b for 1s",
        "  healing pause-slave broker-b-s: heal: ClusterError: not paused",
        "t=  6.0s inject disk-full broker-a-s on broker-a for 1s",
        "t=  7.0s healed disk-full broker-a-s",
    ]
    assert [(r["op"], r["id"], r["result"]) for r in read_faults(tmp_path)] == [
        ("inject", 1, "error"),
        ("heal", 1, "error"),
        ("inject", 2, "ok"),
        ("heal", 2, "error"),
        ("inject", 3, "ok"),
        ("heal", 3, "ok"),
    ]


def test_overlapping_faults_are_taken_in_time_order(clock):
    h = FakeHandle(clock=clock)
    run(
        Nemesis(h),
        [
            fault("kill-master", A, at=1.0, hold=4.0, id=1),
            fault("pause-slave", BS, at=2.0, hold=1.0, id=2),
            fault("kill-slave", AS, at=2.5, hold=3.0, id=3),
        ],
        clock,
    )
    assert h.timeline() == [
        (101.0, "kill", A),
        (102.0, "pause", BS),
        (102.5, "kill", AS),
        (103.0, "resume", BS),
        (105.0, "start", A),
        (105.5, "start", AS),
    ]


@pytest.mark.parametrize("first_at, first_hold, next_at", [(0.0, 5.0, 5.0), (3.1, 2.2, 5.3), (0.0, 5.0004, 5.0)])
def test_a_fault_ending_as_the_next_begins_is_healed_first(clock, first_at, first_hold, next_at):
    """One at a time means end <= next start: at the same instant (to the millisecond, whatever the float
    sum says) the heal comes first, so the master is back before its slave is killed."""
    h = FakeHandle(clock=clock)
    nem = Nemesis(h)
    sched = [
        fault("kill-slave", AS, at=next_at, hold=1.0, id=2),
        fault("kill-master", A, at=first_at, hold=first_hold, id=1),
    ]
    run(nem, sched, clock)
    assert [(name, node) for _, name, node in h.timeline()] == [("kill", A), ("start", A), ("kill", AS), ("start", AS)]


def test_a_fault_held_for_no_time_is_healed_right_after_its_inject(clock):
    h = FakeHandle(clock=clock)
    run(
        Nemesis(h),
        [
            fault("pause-slave", AS, at=2.0, hold=0.0, id=1),
            fault("kill-master", B, at=1.0, hold=1.0, id=2),
            fault("pause-master", A, at=2.0, hold=0.0, id=3),
        ],
        clock,
    )
    assert h.timeline() == [
        (101.0, "kill", B),
        (102.0, "start", B),
        (102.0, "pause", AS),
        (102.0, "pause", A),
        (102.0, "resume", AS),
        (102.0, "resume", A),
    ]


# -- late faults keep their holds; what follows keeps its gaps ------------------------------------


def test_a_fault_injected_late_after_a_slow_restart_is_held_in_full_and_what_follows_moves(
    clock, tmp_path, monkeypatch
):
    """Apache 4.9.8 restarts in 15-47 s: the next fault, due 2 s after the restart was due, was injected
    as the restart ended and healed at once (its heal was due by then): held 0-20 ms, not exercised."""
    monkeypatch.setattr(rmqha.runs.faultlog, "now_ms", lambda: int(round(clock.now * 1000)))
    h = FakeHandle(clock=clock)
    h.took["start"] = 30.0
    lines = []
    nem = Nemesis(h, log=lines.append, fault_log=FaultLog(tmp_path / "faults" / "f.jsonl"))
    run(
        nem,
        [
            fault("kill-master", A, at=1.0, hold=2.0, id=1),
            fault("kill-slave", BS, at=5.0, hold=3.0, id=2),
            fault("pause-slave", AS, at=10.0, hold=2.0, id=3),
        ],
        clock,
    )
    # broker-a is back at 133: kill-slave, 28 s late, is held its 3 s from then, and pause-slave moves by
    # as much (due at 138), but broker-b-s is back only at 166: pause-slave too is held its 2 s from then
    assert h.timeline() == [
        (101.0, "kill", A),
        (103.0, "start", A),
        (133.0, "kill", BS),
        (136.0, "start", BS),
        (166.0, "pause", AS),
        (168.0, "resume", AS),
    ]
    assert (
        "t= 33.0s inject kill-slave broker-b-s on broker-b for 3s (28.0s late: held in full, what follows moves)"
        in lines
    )
    # the fault log has the real times (what the audit blames by) and how late each inject was
    recs = [(r["op"], r["id"], r["start_ms"] - 100_000, r["ts_ms"] - 100_000, r["info"]) for r in read_faults(tmp_path)]
    assert recs == [
        ("inject", 1, 1000, 1000, {}),
        ("heal", 1, 3000, 33000, {}),
        ("inject", 2, 33000, 33000, {"lateS": 28.0}),
        ("heal", 2, 36000, 66000, {}),
        ("inject", 3, 66000, 66000, {"lateS": 56.0}),
        ("heal", 3, 68000, 68000, {}),
    ]


# kill-master broker-a from 1 s for 4 s; inside it restart-slave broker-b-s from 2 s for 1 s (overlap: another
# group, the other role); after both, pause-slave broker-a-s 2 s after broker-a is back, for 2 s
OVERLAPPING = [("kill-master", A, 1.0, 4.0), ("restart-slave", BS, 2.0, 1.0), ("pause-slave", AS, 7.0, 2.0)]
STOPS = {"kill": "start", "stop": "start", "pause": "resume"}


@pytest.mark.parametrize(
    "took",
    [{}, {"kill": 4.0}, {"stop": 6.0}, {"start": 30.0}, {"stop": 3.0, "start": 20.0, "kill": 1.5}, {"pause": 2.0}],
)
def test_however_long_each_operation_takes_order_holds_gaps_and_overlap_are_kept(clock, took):
    h = FakeHandle(clock=clock)
    h.took = took
    sched = [fault(k, n, at=at, hold=hold, id=i) for i, (k, n, at, hold) in enumerate(OVERLAPPING, 1)]
    run(Nemesis(h), sched, clock)
    # the operations in the schedule's order: the overlapping fault is injected and healed inside the first
    assert [(op, n) for _, op, n in h.timeline()] == [
        ("kill", A),
        ("stop", BS),
        ("start", BS),
        ("start", A),
        ("pause", AS),
        ("resume", AS),
    ]
    # (start, end) of each operation on the clock
    (kill_a, stop_bs, start_bs, start_a, pause_as, resume_as) = [
        (t, t + took.get(op, 0.0)) for t, op, _ in h.timeline()
    ]
    # each fault held its full hold from when its inject ended, to when its heal began
    assert start_a[0] - kill_a[1] >= 4.0
    assert start_bs[0] - stop_bs[1] >= 1.0
    assert resume_as[0] - pause_as[1] >= 2.0
    # still overlapping: broker-b-s down while broker-a is
    assert kill_a[1] <= stop_bs[0] and start_bs[1] <= start_a[0]
    # pause-slave keeps its 2 s gap from broker-a's heal (a slow restart may use the gap up)
    assert pause_as[0] - start_a[0] >= 2.0


def test_a_slow_inject_of_the_outer_fault_is_held_in_full_and_the_inner_one_still_overlaps_it(clock):
    h = FakeHandle(clock=clock)
    h.took["stop"] = 6.0  # a clean shutdown of broker-a (restart-master) takes 6 s
    sched = [
        fault("restart-master", A, at=1.0, hold=4.0, id=1),
        fault("pause-slave", BS, at=2.0, hold=1.0, id=2),
        fault("kill-slave", AS, at=8.0, hold=2.0, id=3),
    ]
    run(Nemesis(h), sched, clock)
    # broker-a down from 107 to 111 (4 s); broker-b-s paused 107-108 inside it; kill-slave 3 s after 111
    assert h.timeline() == [
        (101.0, "stop", A),
        (107.0, "pause", BS),
        (108.0, "resume", BS),
        (111.0, "start", A),
        (114.0, "kill", AS),
        (116.0, "start", AS),
    ]


def test_a_fault_moved_past_the_runs_end_is_skipped_said_and_written_to_the_fault_log(clock, tmp_path):
    """The sends end at `end`: a fault whose full hold, moved, would end less than 1 s before it is not
    injected (healed at the stop it would be cut short), and never silently: the log, `skipped`, and a
    "skip" line in the fault log."""
    h = FakeHandle(clock=clock)
    h.took["start"] = 30.0
    lines = []
    nem = Nemesis(h, log=lines.append, fault_log=FaultLog(tmp_path / "faults" / "f.jsonl"))
    sched = [
        fault("kill-master", A, at=1.0, hold=2.0, id=1),  # broker-a back at 33 s
        fault("kill-slave", BS, at=5.0, hold=5.0, id=2),  # reached at 33 s: to 38 s, past 38 - 1
        fault("pause-slave", AS, at=6.0, hold=1.0, id=3),  # 33-34 s: fits; what follows moves 27 s
        fault("pause-master", A, at=8.0, hold=2.0, id=4),  # 35-37 s: fits, just
        fault("pause-slave", BS, at=10.5, hold=1.0, id=5),  # 37.5-38.5 s: does not
    ]
    nem.run(sched, clock.now, FakeStop(clock), end=38.0)
    assert h.timeline() == [
        (101.0, "kill", A),
        (103.0, "start", A),
        (133.0, "pause", AS),
        (134.0, "resume", AS),
        (135.0, "pause", A),
        (137.0, "resume", A),
    ]
    assert [f.id for f, _ in nem.skipped] == [2, 5] and [f.id for f, _ in nem.done] == [1, 3, 4]
    assert nem.skipped[0][1] == (
        "28.0s late (earlier faults took long), its 5s hold would end at t=38.0s, past t=37.0s "
        "(1s before the sends end at t=38s)"
    )
    assert any(ln.startswith("t= 33.0s skip kill-slave broker-b-s on broker-b: 28.0s late") for ln in lines)
    recs = read_faults(tmp_path)
    skips = [r for r in recs if r["op"] == "skip"]
    assert [(r["id"], r["info"]["scheduledAtS"], r["info"]["lateS"]) for r in skips] == [
        (2, 5.0, 28.0),
        (5, 10.5, 27.0),
    ]
    assert [(r["op"], r["id"]) for r in recs if r["op"] != "skip"] == [
        ("inject", 1),
        ("heal", 1),
        ("inject", 3),
        ("heal", 3),
        ("inject", 4),
        ("heal", 4),
    ]


def test_a_fault_the_schedule_itself_puts_in_the_last_seconds_is_not_skipped(clock):
    h = FakeHandle(clock=clock)
    nem = Nemesis(h)
    nem.run([fault("pause-slave", AS, at=6.0, hold=3.5, id=1)], clock.now, FakeStop(clock), end=10.0)
    assert h.timeline() == [(106.0, "pause", AS), (109.5, "resume", AS)] and nem.skipped == []


def test_a_fault_the_stop_cuts_short_is_healed_once_by_heal_all_and_its_heal_line_says_so(clock, tmp_path):
    h = FakeHandle(clock=clock)
    lines = []
    nem = Nemesis(h, log=lines.append, fault_log=FaultLog(tmp_path / "faults" / "f.jsonl"))
    f = fault("kill-master", A, at=1.0, hold=4.0, id=1)
    run(nem, [f], clock, stop_at=3.0)  # the sends end 2 s into its hold (it was injected late)
    assert nem.heal_all() == []
    recs = read_faults(tmp_path)
    assert [(r["op"], r["id"]) for r in recs] == [("inject", 1), ("heal", 1)]
    assert recs[1]["info"] == {"cutShort": "healed at the run's end after 2.0 s of its 4 s hold"}
    assert lines[-1] == "  kill-master broker-a: healed at the run's end after 2.0s of its 4s hold"
    assert nem.heal(f) is None and len(read_faults(tmp_path)) == 2  # healed already: nothing done again


def test_heal_all_waits_for_the_schedules_heal_under_way_and_heals_each_fault_once(clock, tmp_path):
    """The stop comes while the nemesis heals a fault (a restart that takes long): heal_all must not heal
    it again (two heal lines for one id, two starts of one broker)."""
    import threading

    class SlowStart(FakeHandle):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.healing, self.release = threading.Event(), threading.Event()

        def start(self, node, wait=True, timeout=60):
            if not self.healing.is_set():
                self.healing.set()
                assert self.release.wait(30)  # held until the test lets the restart end
            return super().start(node, wait, timeout)

    h = SlowStart(clock=clock)
    nem = Nemesis(h, fault_log=FaultLog(tmp_path / "faults" / "f.jsonl"))
    stop = threading.Event()
    sched = [fault("kill-slave", AS, at=1.0, hold=0.0, id=1)]  # due: no real wait on the real Event
    nemesis_thread = threading.Thread(target=nem.run, args=(sched, clock.now - 10.0, stop))
    nemesis_thread.start()
    assert h.healing.wait(30)  # the nemesis is restarting broker-a-s: its scheduled heal
    stop.set()  # the run ends now
    errors: list[str] = []
    healer = threading.Thread(target=lambda: errors.extend(nem.heal_all()))
    healer.start()
    h.release.set()
    nemesis_thread.join(30)
    healer.join(30)
    assert not nemesis_thread.is_alive() and not healer.is_alive() and errors == []
    assert [(r["op"], r["id"]) for r in read_faults(tmp_path)] == [("inject", 1), ("heal", 1)]
    assert h.names().count("start") == 1


def test_slave_then_master_power_loss_cuts_the_master_gap_s_after_its_slaves(clock):
    """What the master acknowledged in the gap was only ever on it: the gap must really pass, and the
    fault log keeps what each node's cut dropped."""
    h = FakeHandle(clock=clock)
    h.returns["power_loss"] = {"droppedBytes": 100}
    info = Nemesis(h).inject(fault("slave-then-master-power-loss", A, {"gap_s": 2.5}))
    assert h.timeline() == [(100.0, "power_loss", AS), (102.5, "power_loss", A)]
    assert info == {"nodes": {AS: {"droppedBytes": 100}, A: {"droppedBytes": 100}}}
    Nemesis(h).inject(fault("slave-then-master-power-loss", B, {}))  # no gap drawn: none waited
    assert h.timeline()[2:] == [(102.5, "power_loss", BS), (102.5, "power_loss", B)]


def test_a_fault_the_run_stops_before_is_skipped_in_the_open(clock, tmp_path):
    """The sends end while earlier faults, moved by a slow restart, still run: the faults never reached
    are written as skips, with why, not left out of the fault log."""
    h = FakeHandle(clock=clock)
    h.took["start"] = 30.0
    lines = []
    nem = Nemesis(h, log=lines.append, fault_log=FaultLog(tmp_path / "faults" / "f.jsonl"))
    sched = [
        fault("kill-master", A, at=1.0, hold=2.0, id=1),  # broker-a back at 33 s
        fault("pause-slave", AS, at=20.0, hold=1.0, id=2),  # due at 20 s: reached at 33 s, past the stop
    ]
    run(nem, sched, clock, stop_at=25.0)
    assert [(op, n) for _, op, n in h.timeline()] == [("kill", A), ("start", A)]
    assert [f.id for f, _ in nem.skipped] == [2]
    assert nem.skipped[0][1] == "not reached before the run stopped (due at t=20.0s, the stop seen at t=33.0s)"
    recs = read_faults(tmp_path)
    assert [(r["op"], r["id"]) for r in recs] == [("inject", 1), ("heal", 1), ("skip", 2)]
    assert any(" skip pause-slave broker-a-s on broker-a: not reached before the run stopped" in ln for ln in lines)


def test_every_fault_reached_leaves_no_skip(clock, tmp_path):
    h = FakeHandle(clock=clock)
    nem = Nemesis(h, fault_log=FaultLog(tmp_path / "faults" / "f.jsonl"))
    run(nem, [fault("pause-slave", AS, at=1.0, hold=1.0, id=1)], clock, stop_at=25.0)
    assert nem.skipped == [] and [r["op"] for r in read_faults(tmp_path)] == ["inject", "heal"]
