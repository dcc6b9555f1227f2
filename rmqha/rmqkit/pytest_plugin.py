"""The pytest plugin (entry point `pytest11: rocketmq = rmqha.rmqkit.pytest_plugin`): HA RocketMQ clusters as
fixtures, with faults healed at teardown, recorded client histories and an optional audit.

    @pytest.mark.rocketmq(topology="2m-2s-sync", backend="docker", scope="module", audit=True)
    def test_orders(rocketmq_cluster, rocketmq_faults, rocketmq_history):
        producer = rocketmq_history.producer("OrderPG")              # official client, recorded
        rocketmq_faults.inject("kill-master", "broker-a")            # healed at teardown
        ...

Fixtures (all function-scoped views of a cluster that lives as long as its scope says):
  rocketmq_cluster   rmqkit.RocketMQCluster (namesrv_addr, handle, run_dir, create_topic, audit, ...)
  rocketmq_namesrv   its name server address, "127.0.0.1:P"
  rocketmq_faults    rmqha.rmqkit.faults.Faults: inject(kind, target, **params), heal, heal_all
  rocketmq_history   rmqha.rmqkit.history.Recorder: Producer / PushConsumer classes (drop-in for rocketmq.client's),
                     producer(group), push_consumer(group, topic, callback); RUN/history/<test>.jsonl

Marker keywords (the closest marker wins per keyword; options give the defaults):
  topology  2m-2s-sync | 2m-2s-async | 2m-noslave | dledger --rocketmq-topology (2m-2s-sync)
            (dledger: one DLedger group of three nodes; its faults are kill-leader, kill-follower, ...)
  backend   docker | local                                --rocketmq-backend (docker)
  broker    ours | apache | rust | ours,broker-a-s=apache (mixed): which broker runs the nodes
                                                          --rocketmq-broker (ours; apache needs
                                                          --rocketmq-home or $ROCKETMQ_HOME, a 4.9.x
                                                          distribution; the test is skipped without one)
  scope     session | module | function: how long a cluster is reused; tests asking for the same
            topology, backend and sets share it           --rocketmq-scope (session)
  sets      {"key": value, "node:key": value} broker settings (as `make cluster-up SET=`)
  acl       True: aclEnable with a kit-written plain_acl.yml (as `make cluster-up ACL=1`); the recorders'
            clients and the kit's checks sign with its account (rocketmq_cluster.credentials)
  audit     True: after the test, the Spark audit of the run folder; a FAIL verdict fails the test
            (~30 s each)                                  --rocketmq-audit (for every test)

At teardown every fault is healed and every node brought back (a fault that cannot be healed fails the
test, and the cluster is replaced), recorders are closed, then the audit runs when asked; the next test
gets the cluster once it is ready again (slaves reconnected and in sync), else a new one. Each
pytest-xdist worker has its own clusters (names kit-<pid>-<n>, a port block per worker) under the
worker's pytest temp folder, and holds one cluster at a time: a test that asks for another topology,
backend or sets replaces it. When the cluster cannot start (no Docker engine, no compose tool, no
images, ports taken, no Java for the audit) the test fails saying what to do, or is skipped with
--rocketmq-if-unavailable=skip.
"""

from __future__ import annotations

import os
import re

import pytest

SCOPES = ("session", "module", "function")
KEYWORDS = ("topology", "backend", "broker", "scope", "sets", "audit", "acl")


def pytest_addoption(parser):
    g = parser.getgroup("rocketmq", "RocketMQ HA clusters (rmqkit)")
    g.addoption(
        "--rocketmq-backend",
        choices=("docker", "local"),
        default=os.environ.get("RMQKIT_BACKEND") or "docker",
        help="where clusters run: docker containers with Toxiproxy links (default), or local processes "
        "(node faults only); a test's @pytest.mark.rocketmq(backend=...) wins",
    )
    from rmqha.cluster.implementations import broker_options

    for flag, keywords in broker_options("--rocketmq-"):
        g.addoption(flag, **keywords)
    g.addoption(
        "--rocketmq-topology",
        default=os.environ.get("RMQKIT_TOPOLOGY") or "2m-2s-sync",
        help="default topology: 2m-2s-sync, 2m-2s-async, 2m-noslave or dledger",
    )
    g.addoption(
        "--rocketmq-scope",
        choices=SCOPES,
        default="session",
        help="default reuse of a cluster: session (default), module or function",
    )
    g.addoption(
        "--rocketmq-audit",
        action="store_true",
        default=False,
        help="audit the run folder after every test that uses a cluster (Spark, ~30 s each)",
    )
    g.addoption(
        "--rocketmq-if-unavailable",
        choices=("fail", "skip"),
        default="fail",
        help="when a cluster cannot start here (no Docker engine, no images, ...): fail (default) or skip",
    )


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "rocketmq(topology=None, backend=None, broker=None, scope=None, sets=None, audit=False, acl=False): the RocketMQ "
        "cluster the rocketmq_* fixtures give this test (rmqkit)",
    )


def _settings(request) -> dict:
    opt = request.config.getoption
    got: dict = {}
    for m in request.node.iter_markers("rocketmq"):  # closest first
        if m.args:
            raise pytest.UsageError(
                f"{request.node.nodeid}: @pytest.mark.rocketmq takes keywords only ({', '.join(KEYWORDS)})"
            )
        for k, v in m.kwargs.items():
            if k not in KEYWORDS:
                raise pytest.UsageError(
                    f"{request.node.nodeid}: unknown @pytest.mark.rocketmq keyword {k!r}; known: {', '.join(KEYWORDS)}"
                )
            got.setdefault(k, v)
    s = {
        "topology": got.get("topology") or opt("--rocketmq-topology"),
        "backend": got.get("backend") or opt("--rocketmq-backend"),
        "broker": got.get("broker") or opt("--rocketmq-broker"),
        "rocketmq_home": opt("--rocketmq-home"),
        "scope": got.get("scope") or opt("--rocketmq-scope"),
        "sets": {k: str(v) for k, v in (got.get("sets") or {}).items()},
        "audit": bool(got.get("audit")) or opt("--rocketmq-audit"),
        "acl": bool(got.get("acl")),
    }
    if s["scope"] not in SCOPES:
        raise pytest.UsageError(f"{request.node.nodeid}: rocketmq scope {s['scope']!r}: use one of {', '.join(SCOPES)}")
    return s


def _unavailable(request, message: str):
    hint = (
        "\n(rmqkit: pick the backend with --rocketmq-backend=local|docker or @pytest.mark.rocketmq(backend=...); "
        "--rocketmq-if-unavailable=skip skips these tests instead)"
    )
    if request.config.getoption("--rocketmq-if-unavailable") == "skip":
        pytest.skip(f"RocketMQ cluster unavailable: {message}")
    pytest.fail(f"RocketMQ cluster unavailable: {message}{hint}", pytrace=False)


class ClusterPool:
    """The clusters of one pytest process (one xdist worker): at most one running at a time."""

    def __init__(self, run_root):
        self.run_root = run_root
        self.current = None  # (key, owner, RocketMQCluster)

    def get(self, s: dict, owner: str):
        from rmqha.cluster import ClusterError

        from .cluster import RocketMQCluster

        key = (s["topology"], s["backend"], s.get("broker"), tuple(sorted(s["sets"].items())), s.get("acl", False))
        if self.current is not None:
            k, o, c = self.current
            if k == key and o == owner and self._healthy(c) and self._ready(c):
                return c
            self.release()

        def make():
            return RocketMQCluster(
                s["topology"],
                s["backend"],
                sets=s["sets"],
                run_root=self.run_root,
                acl=s.get("acl", False),
                broker=s.get("broker") or "ours",
                rocketmq_home=s.get("rocketmq_home"),
            )

        c = make()
        try:
            c.start()
        except ClusterError as e:
            if "ports are taken" not in str(e) and "is in use" not in str(e):
                raise
            c = make()
            c.start()  # another process took the block between the check and the bind: once more
        self.current = (key, owner, c)
        return c

    @staticmethod
    def _healthy(c) -> bool:
        try:
            h = c.handle
            return all(h.running(n) for n in h.nodes) and h.backend.process_state("namesrv").running
        except Exception:
            return False

    @staticmethod
    def _ready(c, timeout: float = 60.0) -> bool:
        """A reused cluster is handed on only once it is ready again: the last test's heal restarted its
        nodes but did not wait for the slaves to reconnect, and a SYNC_MASTER answers SLAVE_NOT_AVAILABLE
        until they have (which the 0.4.4 client's send_sync reports as "No route info"). Not ready within
        the timeout: the cluster is replaced."""
        try:
            c.handle.wait_ready(timeout=timeout)
            return True
        except Exception:
            return False

    def release(self, owner: str | None = None, keep_data: bool = False) -> list[str]:
        if self.current is None or (owner is not None and self.current[1] != owner):
            return []
        c = self.current[2]
        self.current = None
        return c.stop(keep_data=keep_data)


@pytest.fixture(scope="session")
def rocketmq_cluster_pool(tmp_path_factory):
    """The session's ClusterPool (per xdist worker); stops what it holds at the end."""
    pool = ClusterPool(tmp_path_factory.getbasetemp() / "rocketmq")
    yield pool
    pool.release()


@pytest.fixture(scope="module")
def _rocketmq_module(request, rocketmq_cluster_pool):
    yield request.node.nodeid
    rocketmq_cluster_pool.release(owner=f"module:{request.node.nodeid}")


@pytest.fixture
def rocketmq_cluster(request, rocketmq_cluster_pool, _rocketmq_module):
    """The test's cluster (rmqkit.RocketMQCluster), chosen by @pytest.mark.rocketmq and the options."""
    from rmqha.cluster import ClusterError

    s = _settings(request)
    owner = {
        "session": "session",
        "module": f"module:{_rocketmq_module}",
        "function": f"function:{request.node.nodeid}",
    }[s["scope"]]
    if s["broker"] != "ours":
        from .cluster import broker_unavailable_reason

        why = broker_unavailable_reason(s["broker"], s["rocketmq_home"], s["backend"])
        if why:  # a distribution is the user's to bring (`make test-apache ROCKETMQ_HOME=<dir>`)
            pytest.skip(f"broker {s['broker']} not available: {why}")
    if s["audit"]:
        from .audit import java_missing

        why = java_missing()
        if why:
            _unavailable(request, why)
    try:
        c = rocketmq_cluster_pool.get(s, owner)
    except ClusterError as e:
        _unavailable(request, str(e))
    yield c
    # Teardown: recorders of this test are closed by their own fixture first (it depends on this one).
    errors = c.heal_all()
    if errors:
        rocketmq_cluster_pool.release()
        pytest.fail(
            "faults that could not be healed (the cluster was replaced):\n  " + "\n  ".join(errors), pytrace=False
        )
    if s["audit"]:
        result = c.audit(check=False)
        if result.failed:
            rocketmq_cluster_pool.release(keep_data=True)  # the stores stay for a second look
            try:
                result.check()
            except AssertionError as e:
                pytest.fail(str(e), pytrace=False)
    if s["scope"] == "function":
        rocketmq_cluster_pool.release(owner)


@pytest.fixture
def rocketmq_namesrv(rocketmq_cluster) -> str:
    """The name server address of the test's cluster ("127.0.0.1:P")."""
    return rocketmq_cluster.namesrv_addr


@pytest.fixture
def rocketmq_faults(rocketmq_cluster):
    """rmqha.rmqkit.faults.Faults on the test's cluster; everything is healed at teardown."""
    return rocketmq_cluster.faults


@pytest.fixture
def rocketmq_history(request, rocketmq_cluster):
    """rmqha.rmqkit.history.Recorder for this test (RUN/history/<test>.jsonl); its clients are shut down and
    the file closed at teardown, before the audit."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.nodeid)[-120:].strip("_") or "test"
    rec = rocketmq_cluster.recorder(name)
    yield rec
    rec.close()
