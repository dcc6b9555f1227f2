"""Fixtures shared by the integration tests.

`nemesis` is the fault table's Nemesis on the `cluster` fixture of the module that asks for it.

`rc` is the Rust client (rust_client.py's RustClient: the built binary, or fail/skip saying how to build
it), one per module.

`docker_cluster_pool` is per pytest-xdist worker (session scope runs once per worker process): it
holds at most one docker-backend cluster and replaces it when a module asks for another topology or
other settings. Nothing here is autouse, so the other integration tests (local processes) are not
affected; the docker tests skip, saying why, when there is no Docker engine or no images.
"""

from __future__ import annotations

import os
import uuid

import pytest

# testcontainers' Ryuk reaper image cannot be pulled here (no registry); we clean up ourselves.
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")


class DockerClusterPool:
    def __init__(self, run_root):
        self.run_root = run_root
        self.current = None
        self.seq = 0

    def get(self, topology: str, sets: dict[str, str] | None = None):
        from .docker_cluster import DockerCluster

        key = (topology, tuple(sorted((sets or {}).items())))
        if self.current is not None:
            if self.current.key == key and self._healthy(self.current):
                self.current.toxics.reset()
                return self.current
            self.current.down()
            self.current = None
        self.seq += 1
        self.current = DockerCluster.up(self.run_root, self.seq, topology, dict(sets or {}), key)
        return self.current

    @staticmethod
    def _healthy(c) -> bool:
        try:
            return all(
                c.backend.process_state(n).detail == "running"
                for n in ["namesrv", "toxiproxy"] + c.backend.node_names()
            )
        except Exception:
            return False

    def close(self):
        if self.current is not None:
            self.current.down()
            self.current = None


@pytest.fixture(scope="module")
def rc():
    from .rust_client import RustClient

    return RustClient.get()


@pytest.fixture
def nemesis(cluster):
    """rmqha.chaos.nemesis.Nemesis on the module's `cluster` handle (either backend), logging to a fault
    log of its own under the run's faults/; at teardown every fault it injected must heal."""
    from rmqha.runs.faultlog import FaultLog
    from rmqha.chaos.nemesis import Nemesis

    log = FaultLog(cluster.run_dir / "faults" / f"it-{uuid.uuid4().hex[:6]}.jsonl")
    nem = Nemesis(cluster, fault_log=log)
    yield nem
    assert nem.heal_all() == []
    log.close()


@pytest.fixture(scope="session")
def docker_cluster_pool(tmp_path_factory):
    from .docker_cluster import docker_unavailable_reason, sweep_leftovers

    reason = docker_unavailable_reason()
    if reason:
        pytest.skip(f"docker integration tests: {reason}")
    import docker

    sweep_leftovers(docker.from_env())
    pool = DockerClusterPool(tmp_path_factory.mktemp("docker-runs"))
    try:
        yield pool
    finally:
        pool.close()
