"""The audit names the divergence that follows a master coming back behind its slave (SLAVE_AHEAD):
the master lost its tail in a power loss, then wrote new records at offsets its slave already held."""

import os
import shutil
from pathlib import Path

import pytest

from rmqha.runs.layout import node_json, write_node_json
from rmqha.broker.store.message_store import MessageStore
from rmqha.cluster.store_cut import drop_after
from rmqha.pipeline import audit, decode, runfolder
from rmqha.pipeline.verdict import FAIL, WARN

from .conftest import FILE_SIZE, RunBuilder, audit_only, flip_byte

PAIR = "replica broker-a: broker-a-0 vs broker-a-1"
DAMAGED = "replica broker-a: broker-a-0 vs broker-a-2"


def _power_loss_then(run_builder, new_writes, same_size=False):
    run_builder.master(n=200)
    run_builder.close()
    run_builder.slave()  # the slave got all 200
    cut = run_builder.sent[150][2].wrote_offset  # the master had fsynced 150 of them
    log_dir = Path(run_builder.node_dir("broker-a-0")) / "store" / "commitlog"
    assert drop_after(log_dir, cut, FILE_SIZE) > 0
    store = MessageStore(
        os.path.join(run_builder.node_dir("broker-a-0"), "store"),
        commitlog_file_size=FILE_SIZE,
        cq_file_size=20 * 1000,
        now_ms=run_builder._tick,
    )
    store.start()
    assert store.max_offset == cut
    run_builder.store = store
    for i in range(new_writes):
        if same_size:  # records exactly as long as the lost ones: they land at the slave's offsets
            run_builder.put("T", f"broker-a-X{i:05d}", f"broker-a-Z{i:05d}", 200, i % 4)
        else:
            run_builder.put("T", f"NEW-U{i:05d}", f"NEW-S{i:05d}", 300, i % 4)
    run_builder.close()
    return cut


class Forked:
    """A master that lost its last 50 of 200 messages in a power loss and wrote 80 new ones over its
    slaves' tail, audited once (Spark) for the tests that judge it with different allowed forks (pure
    Python): broker-a-1 holds all 200; broker-a-2 too, with one body byte flipped at the 11th message
    (damage before the fork). Each pair's verdict depends on that pair alone."""

    def __init__(self, spark, root):
        rb = self.rb = RunBuilder(root)
        self.cut = _power_loss_then(rb, 80)
        src, dst = rb.node_dir("broker-a-1"), rb.node_dir("broker-a-2")
        shutil.copytree(os.path.join(src, "store"), os.path.join(dst, "store"))
        write_node_json(dst, node_json("broker-a-2", "broker-a", 1, "SLAVE", addr="broker-a-2:10911"))
        d = Path(dst) / "store" / "commitlog"
        self.victim = rb.sent[10][2]
        f = sorted(os.listdir(d))[self.victim.wrote_offset // FILE_SIZE]
        flip_byte(str(d / f), self.victim.wrote_offset % FILE_SIZE + 120)
        self.nodes = runfolder.load_nodes(rb.root)
        df = decode.decode(spark, self.nodes, 16384).cache()
        self.integrity = audit.node_integrity(df, self.nodes)
        self.pairs = audit.audit_pairs(spark, df, self.nodes, self.integrity)
        df.unpersist()

    def verdicts(self, allowed=None):
        return {v.name: v for v in audit.verdicts(self.pairs, self.integrity, self.nodes, None, allowed)}

    def pair(self, slave):
        (p,) = [p for p in self.pairs if p.slave == slave]
        return p


@pytest.fixture(scope="module")
def forked(spark, tmp_path_factory):
    return Forked(spark, tmp_path_factory.mktemp("forked") / "run")


def test_a_master_that_wrote_over_its_slaves_tail_is_a_named_fork(forked):
    cut, v, p = forked.cut, forked.verdicts(), forked.pair("broker-a-1")
    assert p.fork_offset == cut == p.first_divergent_offset
    assert v[PAIR].status == FAIL
    assert f"the logs fork at offset {cut}" in v[PAIR].detail and "SLAVE_AHEAD" in v[PAIR].detail


def test_a_master_that_only_lost_its_tail_is_not_a_fork(spark, run_builder):
    cut = _power_loss_then(run_builder, 0)
    v, pairs = audit_only(spark, run_builder.root)
    p = pairs["broker-a-1"]
    assert p.fork_offset is None and p.master_end == cut
    assert v[PAIR].status == WARN and "past the master's end" in v[PAIR].detail


def test_one_flipped_record_is_not_a_fork(slaves):
    v, p = slaves.verdicts, slaves.pairs["broker-a-1"]  # one body byte flipped (conftest.Slaves)
    assert p.fork_offset is None and p.crc_mismatches == 1 and "fork" not in v[PAIR].detail


def test_a_fork_after_a_master_power_loss_is_an_allowed_warning(forked):
    cut = forked.cut
    v = forked.verdicts({"broker-a": "power loss #3 power-loss broker-a-0"})
    assert v[PAIR].status == WARN, v[PAIR].detail
    assert f"an allowed fork at offset {cut}, after power loss #3" in v[PAIR].detail
    # a power loss of another group explains nothing here
    assert forked.verdicts({"broker-b": "power loss #4"})[PAIR].status == FAIL


def test_a_fork_with_damage_before_it_still_fails(forked):
    assert forked.victim.wrote_offset < forked.cut
    v = forked.verdicts({"broker-a": "power loss #3"})
    assert v[DAMAGED].status == FAIL and "CRC mismatch" in v[DAMAGED].detail


def test_forks_allowed_are_master_power_losses_that_were_injected():
    from rmqha.pipeline import faults as pf

    fl = [
        pf.FaultInterval(1, "power-loss", "broker-a-s", "broker-a", "slave", None, {}, 0, 1),
        pf.FaultInterval(2, "kill-master", "broker-b", "broker-b", "master", None, {}, 0, 1),
        pf.FaultInterval(3, "power-loss", "broker-c", "broker-c", "master", None, {}, 0, 1, inject_error="x"),
        pf.FaultInterval(4, "power-loss", "broker-d", "broker-d", "master", None, {}, 0, 1),
        pf.FaultInterval(5, "power-loss", "broker-d", "broker-d", "master", None, {}, 5, 6),
    ]
    assert pf.forks_allowed(fl) == {"broker-d": "power loss #4 power-loss broker-d"}


def test_a_fork_of_same_size_records_across_a_file_end_is_still_a_fork(spark, run_builder):
    # the new records sit at the old offsets, and the blank that ends the file is identical on both sides:
    # it must not count as "the same after the divergence"
    cut = _power_loss_then(run_builder, 80, same_size=True)
    first = run_builder.sent[200][2]
    assert first.wrote_offset == cut  # the new records start exactly where the lost ones did
    assert cut < FILE_SIZE < run_builder.sent[199][2].next_offset  # the slave's copy crosses the file end...
    assert FILE_SIZE < run_builder.sent[-1][2].next_offset  # ...and so do the master's new records
    v, pairs = audit_only(spark, run_builder.root)
    p = pairs["broker-a-1"]
    assert p.fork_offset == cut, (p, v[PAIR].detail)
    assert f"the logs fork at offset {cut}" in v[PAIR].detail
