"""The fault table, seeded schedules, the fault log, the power-loss truncation and the audit's fault
attribution: no processes, no Spark."""

from __future__ import annotations

import json
import os
import random
import struct
from types import SimpleNamespace

import pytest

from rmqha.runs.faultlog import FaultLog, read_faults
from rmqha.chaos.nemesis import ACTIONS, Fault, Nemesis, make_schedule
from rmqha.runs.faults import ALL_FAULTS, FAULTS, applicable_faults
from rmqha.cluster.store_cut import drop_after, read_checkpoint_durable
from rmqha.pipeline import faults as pf


def fake_cluster(kind="local", topology="2m-2s-sync"):
    nodes = [
        {"name": "broker-a", "brokerName": "broker-a", "master": None},
        {"name": "broker-a-s", "brokerName": "broker-a", "master": "broker-a"},
        {"name": "broker-b", "brokerName": "broker-b", "master": None},
        {"name": "broker-b-s", "brokerName": "broker-b", "master": "broker-b"},
    ]
    calls = []

    class C:
        state = {"nodes": nodes, "topology": topology}

        def __getattr__(self, op):
            return lambda *a, **k: calls.append((op, a)) or {"op": op}

        def ha_link(self, s):
            return f"{s}-ha"

        def client_link(self, n):
            return n

        # the read-only queries the nemesis asks before a fault (is the group still replicating?)
        ahead: dict = {}

        def slaves_ahead(self):
            return self.ahead

        def masters(self):
            return [n["name"] for n in nodes if n["master"] is None]

        def node(self, name):
            return next(n for n in nodes if n["name"] == name)

    c = C()
    c.kind = kind
    c.nodes = [n["name"] for n in nodes]
    return c, calls


def test_every_fault_is_a_start_stop_pair_with_backends():
    for name, k in FAULTS.items():
        assert k.name == name and callable(ACTIONS[name].start) and callable(ACTIONS[name].stop)
        assert set(k.backends) <= {"local", "docker"} and k.targets in ("slave", "master", "node")
    usable, dropped = applicable_faults(list(ALL_FAULTS), "local", "2m-2s-sync")
    assert set(usable) == {
        "pause-slave",
        "restart-slave",
        "kill-slave",
        "pause-master",
        "restart-master",
        "kill-master",
        "power-loss",
        "group-power-loss",
        "slave-then-master-power-loss",
        "cluster-power-loss",
        "disk-full",
    }
    assert {"latency", "cut", "partition", "client-cut"} <= set(dropped)


def test_a_schedule_is_reproducible_from_its_seed_and_targets_the_right_roles():
    c, _ = fake_cluster()
    kinds = ["kill-master", "power-loss", "pause-slave"]
    a = make_schedule(random.Random(7), kinds, c, 60)
    b = make_schedule(random.Random(7), kinds, c, 60)
    assert [f.to_json() for f in a] == [f.to_json() for f in b] and len(a) >= 5
    for f in a:
        want = {"kill-master": {"master"}, "pause-slave": {"slave"}, "power-loss": {"master", "slave"}}[f.kind]
        assert f.role in want and (f.target.endswith("-s")) == (f.role == "slave")
    ends = [(f.at, f.at + f.hold) for f in a]
    assert all(e1 <= s2 for (_, e1), (s2, _) in zip(ends, ends[1:]))  # one at a time
    assert max(e for _, e in ends) <= 60 - 3


def test_overlapping_schedules_never_put_two_faults_on_one_group():
    c, _ = fake_cluster("docker")
    sched = make_schedule(random.Random(3), ["kill-master", "pause-slave", "latency"], c, 120, overlap=True)
    overl = [(f, g) for f in sched for g in sched if f.id < g.id and f.at < g.at + g.hold and g.at < f.at + f.hold]
    assert overl, "seed 3 over 120 s overlaps at least once"
    assert all(f.group != g.group for f, g in overl)


def test_inject_and_heal_go_through_the_handle_and_into_the_fault_log(tmp_path):
    c, calls = fake_cluster("docker")
    log = FaultLog(tmp_path / "faults" / "f.jsonl")
    nem = Nemesis(c, fault_log=log)
    f = Fault(0, 1, "client-cut", "broker-a", "broker-a", {"mode": "timeout"}, "master")
    nem.inject(f)
    assert nem.current is f and f.link == "broker-a"
    nem.heal(f)
    assert nem.current is None
    assert [op for op, _ in calls] == ["cut_link", "heal_link"]
    recs = read_faults(tmp_path)
    assert [r["op"] for r in recs] == ["inject", "heal"] and recs[0]["id"] == recs[1]["id"]
    assert recs[0]["kind"] == "client-cut" and recs[0]["params"] == {"mode": "timeout"} and recs[0]["result"] == "ok"
    with pytest.raises(ValueError):
        Nemesis(fake_cluster("local")[0]).inject(Fault(0, 1, "partition", "broker-a", "broker-a"))


def test_power_loss_keeps_exactly_the_durable_bytes(tmp_path):
    d = tmp_path / "commitlog"
    d.mkdir()
    size = 1 << 16
    a, b = os.urandom(size), os.urandom(1000) + bytes(size - 1000)
    (d / f"{0:020d}").write_bytes(a)
    (d / f"{size:020d}").write_bytes(b)
    (d / f"{2 * size:020d}").write_bytes(bytes(size))
    dropped = drop_after(d, size + 400)
    assert dropped == 600
    assert (d / f"{0:020d}").read_bytes() == a
    kept = (d / f"{size:020d}").read_bytes()
    assert len(kept) == size and kept[:400] == b[:400] and kept[400:] == bytes(size - 400)
    assert not (d / f"{2 * size:020d}").exists()
    ck = tmp_path / "checkpoint"
    ck.write_bytes(struct.pack(">qqqq", 1, 2, 3, 12345).ljust(4096, b"\0"))
    assert read_checkpoint_durable(tmp_path) == 12345


def test_the_store_writes_its_durable_offset_into_the_checkpoint(tmp_path):
    from rmqha.broker.store.message_store import MessageStore
    from rmqha.broker.store.record import Message

    s = MessageStore(str(tmp_path), commitlog_file_size=1 << 20)
    s.start()
    s.put_message(Message(topic="T", body=b"x" * 100, queue_id=0, properties={"UNIQ_KEY": "k"}))
    end = s.max_offset
    assert s.flush() == end
    assert read_checkpoint_durable(tmp_path) == end
    s.put_message(Message(topic="T", body=b"y" * 100, queue_id=0, properties={"UNIQ_KEY": "k2"}))
    assert read_checkpoint_durable(tmp_path) == end  # not flushed yet
    s.shutdown()
    assert read_checkpoint_durable(tmp_path) == s.max_offset


def write_faults(tmp_path, recs):
    (tmp_path / "faults").mkdir()
    (tmp_path / "faults" / "f.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))


def test_the_audit_pairs_faults_and_blames_each_event_on_what_was_active(tmp_path):
    write_faults(
        tmp_path,
        [
            {
                "op": "inject",
                "id": 1,
                "kind": "latency",
                "target": "broker-a-s",
                "link": "broker-a-s-ha",
                "group": "broker-a",
                "role": "slave",
                "params": {"ms": 2500},
                "start_ms": 10_000,
                "ts_ms": 10_050,
            },
            {"op": "heal", "id": 1, "kind": "latency", "target": "broker-a-s", "start_ms": 13_000, "ts_ms": 13_010},
            {
                "op": "inject",
                "id": 2,
                "kind": "power-loss",
                "target": "broker-b",
                "group": "broker-b",
                "role": "master",
                "params": {},
                "start_ms": 30_000,
                "ts_ms": 30_100,
                "info": {"droppedBytes": 4096},
            },
        ],
    )
    fl = pf.load(str(tmp_path))
    assert [(f.id, f.start_ms, f.end_ms) for f in fl] == [(1, 10_000, 13_010), (2, 30_000, None)]
    assert pf.blame(fl, 12_000, 13_500) == ["#1 latency broker-a-s-ha"]
    assert pf.blame(fl, 17_000, 17_100) == ["#1 latency broker-a-s-ha"]  # within the grace after the heal
    assert pf.blame(fl, 19_000, 19_100) == [pf.NO_FAULT]
    assert pf.blame(fl, 90_000) == ["#2 power-loss broker-b"]  # never healed: active to the end
    pairs = [
        SimpleNamespace(master="broker-b", slave="broker-b-s", first_divergent_offset=777),
        SimpleNamespace(master="broker-a", slave="broker-a-s", first_divergent_offset=None),
    ]
    a = pf.attribute(
        fl,
        [("FLUSH_SLAVE_TIMEOUT", 11_000, 12_500), ("ERROR", 20_000, 20_001)],
        [("U1", "s1", "c", "T", 31_000)],
        pairs,
        {"broker-b": "broker-b", "broker-a": "broker-a"},
    )
    assert a.non_ok == {"#1 latency broker-a-s-ha": {"FLUSH_SLAVE_TIMEOUT": 1}, pf.NO_FAULT: {"ERROR": 1}}
    assert a.lost == {"#2 power-loss broker-b": ["U1"]}
    assert a.divergent == {"#2 power-loss broker-b": ["broker-b/broker-b-s at 777"]}
    names = [v.name for v in pf.verdicts(fl, a)]
    assert names == ["faults injected", "non-OK sends by fault", "acknowledged losses by fault", "divergences by fault"]
    md = "\n".join(pf.markdown(fl, a))
    assert "never healed" in md and "| #1 latency broker-a-s-ha | FLUSH_SLAVE_TIMEOUT 1 | 0 | - |" in md


def test_fault_shading_draws_one_span_per_fault(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fl = [
        pf.FaultInterval(1, "kill-master", "broker-a", "broker-a", "master", None, {}, 1000, 3000),
        pf.FaultInterval(2, "kill-master", "broker-b", "broker-b", "master", None, {}, 5000, None),
    ]
    fig, ax = plt.subplots()
    pf.shade(ax, fl, 0, 1000.0, end_ms=9000)
    assert len(ax.patches) == 2
    assert [t for t in ax.get_legend_handles_labels()[1]] == ["fault: kill-master"]
    plt.close(fig)


def test_a_fault_on_a_group_that_cannot_replicate_is_logged_not_exercised(tmp_path):
    c, calls = fake_cluster("docker")
    log = FaultLog(tmp_path / "faults" / "f.jsonl")
    nem = Nemesis(c, fault_log=log)
    ok = Fault(0, 1, "kill-slave", "broker-b", "broker-b-s", {}, "slave")
    nem.inject(ok)
    c.ahead = {"broker-a": [{"state": "SLAVE_AHEAD", "slaveAckOffset": 4096}]}
    idle = Fault(0, 1, "kill-slave", "broker-a", "broker-a-s", {}, "slave")
    nem.inject(idle)
    recs = read_faults(tmp_path)
    assert "notExercised" not in recs[0]["info"]
    assert "broker-a cannot replicate" in recs[1]["info"]["notExercised"]
    from rmqha.pipeline import faults as pf

    vs = pf.verdicts(pf.load(str(tmp_path)), pf.Attribution())
    assert [v.status for v in vs if v.id == "faults.not-exercised"] == ["WARN"]


def test_a_cluster_power_loss_is_judged_per_group_not_by_its_target_group(tmp_path):
    """cluster-power-loss hits every group: a fork in one group must show, and only a cluster where no
    group can replicate makes the whole fault not exercised."""
    c, _ = fake_cluster()
    nem = Nemesis(c, fault_log=FaultLog(tmp_path / "faults" / "f.jsonl"))
    # its target is broker-a's master, but broker-b is the forked group
    c.ahead = {"broker-b": [{"state": "SLAVE_AHEAD", "slaveAckOffset": 4096}]}
    nem.inject(Fault(0, 1, "cluster-power-loss", "broker-a", "broker-a", {}, "master"))
    c.ahead = {m: [{"state": "SLAVE_AHEAD", "slaveAckOffset": 1}] for m in ("broker-a", "broker-b")}
    nem.inject(Fault(0, 1, "cluster-power-loss", "broker-a", "broker-a", {}, "master"))
    partial, total = (r["info"] for r in read_faults(tmp_path))
    assert list(partial["notExercisedGroups"]) == ["broker-b"] and "notExercised" not in partial
    # beside what each node's cut reported, which the note does not replace
    assert partial["nodes"] == {n: {"op": "power_loss"} for n in ("broker-a", "broker-b", "broker-a-s", "broker-b-s")}
    assert sorted(total["notExercisedGroups"]) == ["broker-a", "broker-b"]
    assert "broker-a cannot replicate" in total["notExercised"] and "broker-b" in total["notExercised"]
