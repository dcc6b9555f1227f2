"""disk-full on a 2m-2s-sync cluster in containers: the same round as test_disk_full_local.py (a full
store refuses sends clearly, loses nothing, recovers by itself), with the master's store a tmpfs on the
host that its container bind-mounts (Cluster.limit_disk restarts the container onto it)."""

from __future__ import annotations

import os

import pytest

from .test_disk_full_local import SETS, disk_full_round

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
pytest.importorskip("rocketmq.client")
if os.geteuid() != 0:
    pytest.skip("a size-limited store is a tmpfs mount: needs root", allow_module_level=True)


def test_a_full_disk_in_a_container_refuses_sends_loses_nothing_and_recovers(docker_cluster_pool):
    cluster = docker_cluster_pool.get("2m-2s-sync", SETS)
    try:
        disk_full_round(cluster)
    finally:
        for node in cluster.nodes:
            if cluster.disk_limited(node):
                cluster.free_disk(node)
