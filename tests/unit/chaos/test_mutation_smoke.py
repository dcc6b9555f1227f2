"""`make mutation` in miniature, inside `make test`: fixed mutants of rmqha/chaos/nemesis.py, each run against
the one test that must kill it (tools/mutation; the full run is `make mutation`)."""

import os

from tools.mutation import engine

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
T = "tests/unit/chaos/test_fault_table.py::"
S = "tests/unit/chaos/test_fault_schedules.py::"

PICKS = [
    (
        "_event_order",
        "return round(at, 3), not is_heal or f.hold == 0, is_heal",
        "not x -> x",
        T + "test_a_fault_ending_as_the_next_begins_is_healed_first",
    ),
    (
        "Nemesis.heal_all",
        "self.cluster.start(node, timeout=60)",
        "60 -> 61",
        T + "test_heal_all_undoes_the_active_faults_then_every_link_and_node",
    ),
    (
        "Nemesis.run",
        "if f.id in errors else",
        "in -> not in",
        T + "test_a_failing_inject_or_heal_in_a_run_is_recorded_not_raised",
    ),
    (
        "make_schedule",
        "c2 = [(g, n, r) for g, n, r in _candidates(k2, groups) if g != group and r != role]",
        "and -> or",
        S + "test_overlapping_schedules_for_any_seed",
    ),
]


def test_fixed_mutants_of_the_fault_table_are_killed():
    results = engine.smoke("rmqha.chaos.nemesis", PICKS, ROOT)
    survivors = [m.describe() for m, outcome in results if outcome not in ("killed", "timeout")]
    assert not survivors, "mutants no test kills any more:\n" + "\n".join(survivors)
