"""Recovery without stranding (haRecoveryEnable, rmqha/broker/ha/recovery.py) in a real chaos run: the power
loss of tests/integration/test_delivery_verdicts.py, which forks broker-a's group without recovery,
leaves nothing stranded with it. Its own file so pytest-xdist runs it beside the repair run."""

from __future__ import annotations

import json

import pytest

from .test_delivery_verdicts import SCHEDULE, SETS
from .test_planted_bugs import AUDITED, chaos_run

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]
pytest.importorskip("rocketmq.client")


@pytest.mark.parametrize("audit", AUDITED)
def test_recovery_mode_fetches_the_tail_so_nothing_is_stranded(tmp_path, audit):
    """The same power loss with haRecoveryEnable (rmqha/broker/ha/recovery.py): broker-a restarts behind its
    slave, holds writes, fetches the slave's tail over the HA wire (roles reversed), verifies it and only
    then takes writes. No fork: the slave catches up as usual, a group started after the heal gets every
    acknowledged message, and the group that read them before the power loss finds them again."""
    rc, out, run_dir = chaos_run(
        tmp_path,
        "recovery-it",
        "2m-2s-sync",
        SCHEDULE,
        {**SETS, "haRecoveryEnable": "true"},
        ["--late-consumer-after-heal"] + ([] if audit else ["--no-audit"]),
    )
    log = (run_dir / "nodes" / "broker-a" / "broker.log").read_text(errors="replace")
    assert "recovery: unclean shutdown; holding writes" in log, out
    fetched = [line for line in log.splitlines() if "recovery DONE after" in line]
    assert fetched and "fetched 0 bytes" not in fetched[-1], (fetched, out)
    ending = json.loads(next((run_dir / "chaos").glob("ending-*.json")).read_text())
    assert ending["catchUp"] == {"broker-a-s": "caught up", "broker-b-s": "caught up"}, ending
    assert all(g["drained"] for g in ending["drain"].values()), ending
    if not audit:
        assert rc == 0, out
        return
    summary = json.loads((run_dir / "report" / "summary.json").read_text())
    groups = summary["delivery"]
    late = next(g for g in groups if g.startswith("ChaosLateCG"))
    d = groups[late]
    assert d["lost"] == d["stranded"] == d["lostAfterDelivery"] == 0, (late, d)
    assert d["delivered"] == d["acknowledged"] - d["parked"] > 0, (late, d)
    for g, d in groups.items():
        assert d["stranded"] == d["lostAfterDelivery"] == 0, (g, d)
    failed = {(v["id"], v["subject"]) for v in summary["verdicts"] if v["status"] == "FAIL"}
    assert not failed and rc == 0, (failed, out)
