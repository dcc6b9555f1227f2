"""ConsumeQueue.put_many never drops a unit silently (review 2, A1): a repeat of a unit already there is
skipped, as 4.9's putMessagePositionInfo skips a queue built repeatedly; a different record claiming a
taken queue offset is reported (logged, counted, handed back) rather than discarded."""

import logging

from rmqha.broker.store.consume_queue import ConsumeQueue


def make(tmp_path):
    cq = ConsumeQueue(str(tmp_path), "T", 0, 20 * 10)
    cq.load()
    return cq


def test_repeats_are_skipped_quietly(tmp_path, caplog):
    cq = make(tmp_path)
    units = [(0, 100, 10, 0), (1, 110, 10, 0), (2, 120, 10, 0)]
    assert cq.put_many(units) == 3
    misplaced = []
    with caplog.at_level(logging.ERROR):
        assert cq.put_many(units + [(3, 130, 10, 0)], misplaced) == 1
    assert (cq.max_index, cq.misplaced, misplaced) == (4, 0, [])
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_different_record_at_a_taken_offset_is_reported_not_dropped_silently(tmp_path, caplog):
    cq = make(tmp_path)
    cq.put_many([(0, 100, 10, 0), (1, 110, 10, 0)])
    misplaced = []
    with caplog.at_level(logging.ERROR):
        written = cq.put_many([(1, 500, 10, 0), (2, 510, 10, 0)], misplaced)
    assert written == 1
    assert misplaced == [(1, 500, 10, 0)]  # the caller fails the send it belongs to
    assert cq.misplaced == 1
    assert any("queue offset 1 is taken" in r.getMessage() for r in caplog.records)
    assert [cq.get(i)[0] for i in range(3)] == [100, 110, 510]  # the unit there is kept


def test_a_unit_for_a_padded_slot_is_reported(tmp_path):
    cq = make(tmp_path)
    cq.put_many([(0, 100, 10, 0), (3, 130, 10, 0)])  # a gap: 1 and 2 are fillers
    misplaced = []
    cq.put_many([(1, 110, 10, 0)], misplaced)
    assert misplaced == [(1, 110, 10, 0)] and cq.misplaced == 1
