"""The message index under a real power cut: its directory on a crashfs mount (images/crashfs), which drops
every change not made durable, names included. An index file's keys that were flushed must survive the cut.

Regression: a new index file's name was never made durable (its directory was not fsynced), so each power
cut of the 2026-11-28/29 DLedger sweeps took the whole file, and its keys with it (fault log: `uncreate
index/2026...`); a DLedger store does not rebuild its index from the log at start, so they stayed lost."""

from __future__ import annotations

import pytest

from rmqha.broker.store.index import IndexSettings
from rmqha.broker.store.index_service import IndexService

from ..crashfs.conftest import cfs, crashfs_ready  # noqa: F401 (fixtures)

# builds images/crashfs (cargo, cached per content): not in the fast tier
pytestmark = pytest.mark.compiles

SMALL = IndexSettings(max_hash_slot_num=64, max_index_num=4)  # three items a file: the test rolls over


def test_flushed_keys_survive_a_cut_in_index_files_made_after_the_store_started(cfs):  # noqa: F811
    directory = str(cfs.store / "index")
    clock = iter(range(1_000, 100_000, 7))
    svc = IndexService(directory, SMALL, now_ms=lambda: next(clock))
    svc.load()
    cfs.sync()  # the store as the kit mounts it: everything so far durable
    records = [("TopicT", 0, 2_000 + i, (f"uniq-{i}", f"key-{i}"), None, 100 * (i + 1)) for i in range(7)]
    assert svc.build_records(records) == 14  # two keys a record
    svc.flush()
    assert len(svc.files) >= 3
    for f in svc.files:
        f.backing.close()  # the process dies
    cfs.cut("lose-unsynced", 1)
    again = IndexService(directory, SMALL)
    again.load()
    try:
        found = {i: again.query("TopicT", f"key-{i}", 32, 0, 10_000).phy_offsets for i in range(7)}
        assert found == {i: [100 * (i + 1)] for i in range(7)}
    finally:
        for f in again.files:
            f.backing.close()
