"""rmqha/chaos/run.py's main as its phases: whatever a live phase does (returns, raises, is interrupted),
the faults are healed, the fault log closed, the workload and the sampler stopped and the cluster stopped
with its stores kept, and the exit code says which (0, EXIT_RUN_FAILED, 130). Every process and the
cluster handle are fakes recording what was done to them; the real run is tests/integration's."""

from __future__ import annotations

import pytest

from rmqha.chaos import run


class FakeProc:
    """A subprocess.Popen that runs until terminated or killed."""

    def __init__(self):
        self.returncode = None
        self.calls: list[str] = []

    def poll(self):
        return self.returncode

    def terminate(self):
        self.calls.append("terminate")
        self.returncode = -15

    def kill(self):
        self.calls.append("kill")
        self.returncode = -9

    def wait(self, timeout=None):
        self.calls.append("wait")
        return self.returncode


class FakeNemesis:
    def __init__(self):
        self.heals = 0
        self.done: list = []
        self.skipped: list = []

    def heal_all(self):
        self.heals += 1
        return []


class FakeFaultLog:
    closed = False

    def close(self):
        self.closed = True


class FakeCluster:
    """What stop_cluster and wait_catch_up ask of the handle (rmqha/cluster/handle.py's Cluster)."""

    downs: list[bool] = []

    @classmethod
    def attach(cls, name):
        return cls()

    def lags(self):
        return {}

    def slaves_ahead(self):
        return {}

    def down(self, keep_data=False):
        FakeCluster.downs.append(keep_data)
        return []


@pytest.fixture
def world(monkeypatch, tmp_path):
    """main() with fake setup phases: a sampler and a workload running, a prewarmed audit waiting, a
    nemesis and fault log; the live phases are the test's."""
    monkeypatch.setenv("CLUSTER_RUN_ROOT", str(tmp_path))
    monkeypatch.setattr(run, "Cluster", FakeCluster)
    FakeCluster.downs = []
    made: dict = {}

    def fake_setup(ctx):
        (ctx.rd / "chaos").mkdir(parents=True)
        ctx.line = run.StatusLine(False)
        ctx.nemesis, ctx.fault_log = FakeNemesis(), FakeFaultLog()
        ctx.workload, sampler, ctx.audit_proc = FakeProc(), FakeProc(), FakeProc()
        ctx.procs = [sampler, ctx.workload]
        ctx.procs_audit = [ctx.audit_proc]
        made.update(ctx=ctx, sampler=sampler)

    monkeypatch.setattr(run, "SETUP_PHASES", (fake_setup,))
    return made


def cleaned_up(world) -> None:
    ctx = world["ctx"]
    assert ctx.stop.is_set()
    assert ctx.nemesis.heals == 1 and ctx.fault_log.closed
    assert ctx.workload.calls[0] == "terminate" and world["sampler"].calls[0] == "terminate"
    assert FakeCluster.downs == [True]  # cluster down --keep-data
    assert "catchUp" in ctx.ending  # where the slaves are, said even after a broken run


@pytest.mark.parametrize(
    "raised, rc, said",
    [
        (RuntimeError("boom"), run.EXIT_RUN_FAILED, "error: RuntimeError: boom"),
        (KeyboardInterrupt(), 130, "interrupted: healing, then stopping the cluster"),
    ],
)
def test_a_live_phase_that_raises_still_heals_and_stops_everything(world, monkeypatch, capsys, raised, rc, said):
    ran = []

    def sampler_started(ctx):
        ran.append("first")

    def breaks(ctx):
        raise raised

    def never(ctx):
        ran.append("after the break")

    monkeypatch.setattr(run, "LIVE_PHASES", (sampler_started, breaks, never))
    assert run.main(["--backend", "local", "--name", "t1", "--nemesis", "none"]) == rc
    out = capsys.readouterr().out
    assert ran == ["first"] and said in out, out
    cleaned_up(world)
    # the prewarmed audit is cancelled, not run
    assert (world["ctx"].audit_go).read_text() == "cancel" and "$ python -m rmqha.pipeline" not in out, out


def test_a_run_that_ends_normally_heals_once_and_audits(world, monkeypatch, capsys):
    monkeypatch.setattr(run, "LIVE_PHASES", (run.heal, run.catch_up))
    told = []

    def communicate():  # the prewarmed audit, once told to go
        told.append(world["ctx"].audit_go.read_text())
        world["ctx"].audit_proc.returncode = 0
        return "PASS  every guarantee\n", None

    def audit_answers(ctx):
        ctx.audit_proc.communicate = communicate

    monkeypatch.setattr(run, "SETUP_PHASES", run.SETUP_PHASES + (audit_answers,))
    rc = run.main(["--backend", "local", "--name", "t2", "--nemesis", "none"])
    out = capsys.readouterr().out
    assert rc == 0 and told == ["go"], out
    assert "PASS  every guarantee\naudit: PASS: every guarantee held\n" in out, out
    assert world["ctx"].ending["healed"] is True and world["ctx"].ending["skipped"] == []
    cleaned_up(world)  # heal_all once: by the heal phase, not again by the cleanup


def test_the_faults_the_nemesis_skipped_are_said_and_kept_in_the_ending(world, monkeypatch, capsys):
    from rmqha.chaos.nemesis import Fault

    why = "28.0s late (earlier faults took long), its 5s hold would end at t=38.0s, past t=37.0s"
    f = Fault(5.0, 5.0, "kill-slave", "broker-b", "broker-b-s", id=2)

    def skipped_one(ctx):
        ctx.nemesis.skipped = [(f, why)]

    monkeypatch.setattr(run, "SETUP_PHASES", run.SETUP_PHASES + (skipped_one,))
    monkeypatch.setattr(run, "LIVE_PHASES", (run.heal, run.catch_up))
    assert run.main(["--backend", "local", "--name", "t5", "--nemesis", "none", "--no-audit"]) == 0
    assert f"warning: fault 2 (kill-slave broker-b-s) was not injected: {why}" in capsys.readouterr().out
    assert world["ctx"].ending["skipped"] == [dict(f.to_json(), skipped=why)]


def test_a_setup_phase_that_refuses_ends_the_run_before_anything_starts(monkeypatch, tmp_path):
    monkeypatch.setenv("CLUSTER_RUN_ROOT", str(tmp_path))
    monkeypatch.setattr(run, "SETUP_PHASES", (lambda ctx: None, lambda ctx: 2, lambda ctx: pytest.fail("ran on")))
    monkeypatch.setattr(run, "LIVE_PHASES", (lambda ctx: pytest.fail("a live phase ran"),))
    assert run.main(["--backend", "local", "--name", "t3", "--nemesis", "none"]) == 2


def test_the_command_line_is_checked_before_any_phase(monkeypatch, capsys):
    monkeypatch.setattr(run, "SETUP_PHASES", (lambda ctx: pytest.fail("a phase ran"),))
    assert run.main(["--nemesis", "no-such-fault"]) == 2
    assert run.main(["--trace", "--client", "python"]) == 2
    out = capsys.readouterr().out
    assert "error: unknown fault(s) no-such-fault" in out and "error: --trace needs --client rust" in out, out


@pytest.mark.parametrize(
    "flag, said, downs",
    [
        ("--no-audit", "audit left to the caller (--no-audit): python -m rmqha.pipeline ", [True]),
        ("--keep-running", "cluster t4 left running (--keep-running): audit skipped", []),
    ],
)
def test_no_audit_and_keep_running_end_after_the_stop(world, monkeypatch, capsys, flag, said, downs):
    monkeypatch.setattr(run, "LIVE_PHASES", (run.heal, run.catch_up))
    assert run.main(["--backend", "local", "--name", "t4", "--nemesis", "none", flag]) == 0
    out = capsys.readouterr().out
    assert said in out and "$ python -m rmqha.pipeline" not in out, out
    assert FakeCluster.downs == downs
    assert world["ctx"].workload.calls[0] == "terminate" and world["sampler"].calls[0] == "terminate"


def test_a_sweep_leaves_another_brokers_restarts_room_before_the_next_fault():
    import random

    from rmqha.chaos.nemesis import make_sweep

    from .test_nemesis_and_faults import fake_cluster

    c, _ = fake_cluster()
    kinds = ["kill-master", "power-loss", "kill-slave", "group-power-loss", "cluster-power-loss"]
    for broker, (lo, hi) in ((None, (4.0, 5.0)), ("ours", (4.0, 5.0)), ("apache", (25.0, 30.0))):
        assert run.sweep_gap(broker) == (lo, hi)
        sched = make_sweep(random.Random(3), kinds, c, gap=run.sweep_gap(broker))
        gaps = [round(b.at - (a.at + a.hold), 1) for a, b in zip(sched, sched[1:])]
        assert gaps and all(lo <= g <= hi for g in gaps), (broker, gaps)
    assert run.sweep_gap("ours,broker-a-s=apache") == (25.0, 30.0)  # one 4.9 node restarts as slowly


def test_the_workload_client_is_one_rocketmq_rusts_brokers_answer(monkeypatch, capsys):
    # the official C++ client gets no answer from rocketmq-rust 1.0.0 (rmqha/cluster/implementations/rust.py)
    assert run.choose_client(None, None) == ("python", None)
    assert run.choose_client(None, "apache") == ("python", None)
    assert run.choose_client(None, "rust") == ("rust", None)
    assert run.choose_client(None, "ours,broker-a-s=rust") == ("rust", None)
    assert run.choose_client("rust", "ours") == ("rust", None)
    client, why = run.choose_client("python", "rust")
    assert client == "python" and "No route info" in why and "CLIENT=rust" in why
    monkeypatch.setattr(run, "SETUP_PHASES", (lambda ctx: pytest.fail("a phase ran"),))
    assert run.main(["--broker", "rust", "--client", "python", "--nemesis", "none"]) == 2
    assert "error: --client python: rocketmq-rust's broker" in capsys.readouterr().out


def test_a_running_rust_cluster_gets_the_rust_client_unless_python_is_asked(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("CLUSTER_RUN_ROOT", str(tmp_path))
    monkeypatch.delenv("CLIENT", raising=False)
    running = type("Running", (), {"kind": "local", "state": {"broker": "rust", "topology": "2m-2s-sync"}})()
    monkeypatch.setattr(run, "cluster_running", lambda name: running)
    ctx = run.parse_run(["--backend", "local", "--name", "t6", "--nemesis", "none"])
    assert ctx.args.client == "python" and run.start_cluster(ctx) is None and ctx.args.client == "rust"
    ctx = run.parse_run(["--backend", "local", "--name", "t6", "--nemesis", "none", "--client", "python"])
    assert run.start_cluster(ctx) == run.EXIT_RUN_FAILED
    out = capsys.readouterr().out
    assert "note: the rust client: the running cluster's brokers are rust" in out
    assert "error: the running cluster t6 (rust) and --client python" in out
