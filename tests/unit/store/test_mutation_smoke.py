"""`make mutation` in miniature, inside `make test`: fixed mutants of record.py, each run against the
one test that must kill it (tools/mutation; the full run is `make mutation`)."""

import os

from tools.mutation import engine

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
T = "tests/unit/store/test_record_oracle.py::"

PICKS = [
    (
        "encode",
        "if not topic or len(topic) > MAX_TOPIC_BYTES:",
        "> -> >=",
        T + "test_a_127_byte_topic_is_stored_and_read_back_and_128_is_refused",
    ),
    (
        "MAX_PROPERTIES_BYTES",
        "MAX_PROPERTIES_BYTES = 32767",
        "32767 -> 32768",
        T + "test_properties_of_exactly_32767_bytes_are_stored_and_one_more_is_refused",
    ),
    ("scan", "avail = len(buf) - pos", "- -> +", T + "test_every_scanner_reads_at_a_non_zero_position"),
    (
        "_decode_fields",
        "p += store_len",
        "+= -> -=",
        T + "test_scan_reads_every_field_of_a_hand_built_record",
    ),
]


def test_fixed_mutants_of_the_record_format_are_killed():
    results = engine.smoke("rmqha.broker.store.record", PICKS, ROOT)
    survivors = [m.describe() for m, outcome in results if outcome not in ("killed", "timeout")]
    assert not survivors, "mutants no test kills any more:\n" + "\n".join(survivors)
