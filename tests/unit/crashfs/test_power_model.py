"""The power model's decisions without a mount (rmqha/cluster/power.py, rmqha/chaos/run_setup.py): a store
not on crashfs is never cut the old way behind the caller's back, and a machine without FUSE drops its
power faults and says so."""

from __future__ import annotations

import argparse

import pytest

from rmqha.chaos import run_setup
from rmqha.cluster import crashfs, power

from ..chaos.fakes import FakeHandle


class Handle(FakeHandle):
    def __init__(self, store_root):
        super().__init__(kind="local")
        self.store_root = store_root

    def store_path(self, node):
        return self.store_root / node / "store"


def args(model="fs"):
    return argparse.Namespace(power_model=model, cut_mode="lose-unsynced", fs_semantics="posix", schedule=None)


def test_a_store_not_on_crashfs_is_not_cut_and_the_node_not_killed(tmp_path):
    h = Handle(tmp_path)
    with pytest.raises(power.PowerNotModelled, match="not exercised"):
        power.fs_power_loss(h, "broker-a")
    assert h.names() == []  # nothing killed: the fault did not happen, rather than half of it


def test_without_fuse_the_power_faults_are_dropped_and_said(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(crashfs, "unavailable", lambda: "no /dev/fuse on this machine")
    h = Handle(tmp_path)
    usable = run_setup.power_on_crashfs(h, ["kill-master", "power-loss", "group-power-loss"], args(), 11)
    assert usable == ["kill-master"]
    assert "not exercised" in capsys.readouterr().out
    assert h.power_model == "fs" and h.cut_seed == 11


def test_the_reported_model_keeps_its_faults_and_mounts_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(crashfs, "unavailable", lambda: "no /dev/fuse on this machine")
    h = Handle(tmp_path)
    usable = run_setup.power_on_crashfs(h, ["power-loss"], args("reported"), 3)
    assert usable == ["power-loss"] and h.power_model == "reported" and h.names() == []


def test_stores_on_disk_fulls_tmpfs_drop_the_power_faults_before_any_mount(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(crashfs, "unavailable", lambda: None)
    monkeypatch.setattr(crashfs, "mount", lambda *a, **k: pytest.fail("nothing may be mounted"))
    h = Handle(tmp_path)
    h.limited = set(h.nodes)
    usable = run_setup.power_on_crashfs(h, ["kill-master", "power-loss"], args(), 11)
    assert usable == ["kill-master"]
    assert "disk-full's tmpfs" in capsys.readouterr().out
    assert h.names() == []  # no node stopped for a mount that cannot happen


def test_a_failed_mount_starts_its_node_again(tmp_path, monkeypatch):
    monkeypatch.setattr(crashfs, "unavailable", lambda: None)
    monkeypatch.setattr(crashfs, "find", lambda store: None)

    def busy(*a, **k):
        raise OSError(16, "Device or resource busy")

    monkeypatch.setattr(crashfs, "mount", busy)
    h = Handle(tmp_path)
    first = h.nodes[0]
    with pytest.raises(OSError):
        power.mount_stores(h, [first])
    assert h.names() == ["stop", "start"] and h.running(first)  # stopped for the mount, started again


@pytest.mark.parametrize(
    "cut_mode,write_through", [("lose-unsynced", False), ("torn", False), ("keep-prefix", True), (None, False)]
)
def test_the_stores_are_write_through_only_for_keep_prefix(tmp_path, monkeypatch, cut_mode, write_through):
    """crashfs refuses a keep-prefix cut over the kernel's writeback cache (it reorders writes): a run with
    that cut mode mounts its stores write-through, every other run keeps the cache (and its speed)."""
    monkeypatch.setattr(crashfs, "unavailable", lambda: None)
    monkeypatch.setattr(crashfs, "find", lambda store: None)
    asked = []
    monkeypatch.setattr(crashfs, "mount", lambda store, **k: asked.append(k["write_through"]))
    h = Handle(tmp_path)
    if cut_mode:
        h.cut_mode = cut_mode
    power.mount_stores(h, h.nodes[:2])
    assert asked == [write_through, write_through]
