"""`make mutation` in miniature, inside `make test`: fixed mutants of the HA modules, each run against
the one test that must kill it (tools/mutation; the full run is `make mutation`)."""

import os

import pytest

from tools.mutation import engine

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
T = "tests/unit/ha/"

PICKS = {
    "rmqha.broker.ha.group_transfer": [
        (
            "GroupTransfer.wait",
            "if next_offset <= self.acked:",
            "<= -> <",
            T + "test_group_transfer_deadlines.py::test_a_wait_for_exactly_the_acked_offset_succeeds_at_once",
        ),
        (
            "GroupTransfer._arm",
            "delay = max(0.0,",
            "- -> +",
            T + "test_group_transfer_deadlines.py::test_a_wait_that_starts_late_times_out_at_its_own_deadline",
        ),
        (
            "GroupTransfer.shutdown",
            "self._finish(d, PutStatus.FLUSH_SLAVE_TIMEOUT",
            "stmt -> pass",
            T + "test_group_transfer_deadlines.py::test_shutdown_fails_every_pending_waiter_and_cancels_the_timer",
        ),
    ],
    "rmqha.broker.ha.master_session": [
        (
            "MasterSession._choose_start",
            "if request and request < self.log.min_offset:",
            "< -> <=",
            T
            + "test_master_session.py::test_a_slave_asking_for_exactly_the_masters_min_offset_streams_and_one_below_is_unavailable",
        ),
        (
            "MasterSession.heartbeat",
            "self.last_write = now",
            "stmt -> pass",
            T + "test_master_session.py::test_heartbeats_count_over_several_intervals_each_at_its_deadline",
        ),
    ],
    "rmqha.broker.ha.slave_session": [
        (
            "SlaveSession.heartbeat",
            "if now - self.last_write >= self.heartbeat_s:",
            ">= -> >",
            T + "test_slave_session.py::test_heartbeats_count_over_several_intervals_each_at_its_deadline",
        ),
    ],
    "rmqha.broker.ha.wire": [
        (
            "check_header",
            "if size < 0 or size > max_body:",
            "> -> >=",
            T + "test_wire_limits.py::test_a_frame_of_exactly_4_mib_is_accepted_and_one_byte_more_is_not",
        ),
        (
            "check_header",
            "if offset < 0:",
            "0 -> 1",
            T + "test_wire_limits.py::test_offset_zero_is_a_valid_frame_and_minus_one_is_not",
        ),
    ],
}


@pytest.mark.parametrize("module", sorted(PICKS))
def test_fixed_mutants_are_killed(module):
    results = engine.smoke(module, PICKS[module], ROOT)
    survivors = [m.describe() for m, outcome in results if outcome not in ("killed", "timeout")]
    assert not survivors, "mutants no test kills any more:\n" + "\n".join(survivors)
