"""The audit names the divergence that follows a master coming back behind its slave (SLAVE_AHEAD):
the master lost its tail in a power loss, then wrote new records at offsets its slave already held."""
import os
from pathlib import Path

from broker.store.message_store import MessageStore
from cluster.handle import drop_after
from pipeline.verdict import FAIL, WARN

from .conftest import FILE_SIZE
from .test_audit import _audit_only

PAIR = "replica broker-a: broker-a-0 vs broker-a-1"


def _power_loss_then(run_builder, new_writes):
    run_builder.master(n=200)
    run_builder.close()
    run_builder.slave()                            # the slave got all 200
    cut = run_builder.sent[150][2].wrote_offset    # the master had fsynced 150 of them
    log_dir = Path(run_builder.node_dir("broker-a-0")) / "store" / "commitlog"
    assert drop_after(log_dir, cut, FILE_SIZE) > 0
    store = MessageStore(os.path.join(run_builder.node_dir("broker-a-0"), "store"), commitlog_file_size=FILE_SIZE,
                         cq_file_size=20 * 1000, now_ms=run_builder._tick)
    store.start()
    assert store.max_offset == cut
    run_builder.store = store
    for i in range(new_writes):
        run_builder.put("T", f"NEW-U{i:05d}", f"NEW-S{i:05d}", 300, i % 4)
    run_builder.close()
    return cut


def test_a_master_that_wrote_over_its_slaves_tail_is_a_named_fork(spark, run_builder):
    cut = _power_loss_then(run_builder, 80)
    v, (p,) = _audit_only(spark, run_builder.root)
    assert p.fork_offset == cut == p.first_divergent_offset
    assert v[PAIR].status == FAIL
    assert f"the logs fork at offset {cut}" in v[PAIR].detail and "SLAVE_AHEAD" in v[PAIR].detail


def test_a_master_that_only_lost_its_tail_is_not_a_fork(spark, run_builder):
    cut = _power_loss_then(run_builder, 0)
    v, (p,) = _audit_only(spark, run_builder.root)
    assert p.fork_offset is None and p.master_end == cut
    assert v[PAIR].status == WARN and "past the master's end" in v[PAIR].detail


def test_one_flipped_record_is_not_a_fork(spark, run_builder):
    from .conftest import flip_byte
    run_builder.master(n=100)
    run_builder.close()
    d = run_builder.slave()
    victim = run_builder.sent[40][2]
    f = sorted(os.listdir(d))[victim.wrote_offset // FILE_SIZE]
    flip_byte(os.path.join(d, f), victim.wrote_offset % FILE_SIZE + 120)
    v, (p,) = _audit_only(spark, run_builder.root)
    assert p.fork_offset is None and p.crc_mismatches == 1 and "fork" not in v[PAIR].detail
