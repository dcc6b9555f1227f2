"""rmqkit's pieces that need no cluster: marker and option resolution, the message recorder, audit results."""

from types import SimpleNamespace

import pytest

from rmqha.rmqkit import pytest_plugin
from rmqha.rmqkit.audit import AuditFailed, AuditResult


class FakeRequest:
    def __init__(self, markers, **options):
        self.node = SimpleNamespace(nodeid="t.py::test", iter_markers=lambda name: iter(markers))
        opts = {
            "--rocketmq-topology": "2m-2s-sync",
            "--rocketmq-backend": "docker",
            "--rocketmq-broker": "ours",
            "--rocketmq-home": None,
            "--rocketmq-scope": "session",
            "--rocketmq-audit": False,
            **options,
        }
        self.config = SimpleNamespace(getoption=opts.__getitem__)


def mark(**kw):
    return pytest.mark.rocketmq(**kw).mark


def test_closest_marker_wins_per_keyword_and_options_fill_the_rest():
    req = FakeRequest(
        [mark(backend="local"), mark(topology="2m-noslave", backend="docker", audit=True)],
        **{"--rocketmq-scope": "module"},
    )
    assert pytest_plugin._settings(req) == {
        "topology": "2m-noslave",
        "backend": "local",
        "broker": "ours",
        "rocketmq_home": None,
        "scope": "module",
        "sets": {},
        "audit": True,
        "acl": False,
    }


def test_sets_become_strings_and_the_audit_option_applies_to_every_test():
    req = FakeRequest([mark(sets={"syncFlushTimeout": 1500})], **{"--rocketmq-audit": True})
    s = pytest_plugin._settings(req)
    assert s["sets"] == {"syncFlushTimeout": "1500"} and s["audit"] is True


@pytest.mark.parametrize(
    "m, words",
    [
        (mark(topolgy="x"), "unknown @pytest.mark.rocketmq keyword 'topolgy'"),
        (pytest.mark.rocketmq("2m-2s-sync").mark, "keywords only"),
        (mark(scope="class"), "use one of session, module, function"),
    ],
)
def test_a_bad_marker_is_a_usage_error_naming_it(m, words):
    with pytest.raises(pytest.UsageError, match=words):
        pytest_plugin._settings(FakeRequest([m]))


def test_the_pool_reuses_a_cluster_only_for_the_same_key_and_owner(monkeypatch):
    started, stopped = [], []

    class FakeCluster:
        def __init__(self, topology, backend, sets, run_root, acl=False, broker="ours", rocketmq_home=None):
            self.args = (topology, backend, tuple(sets.items()), acl)

        def start(self):
            started.append(self.args)
            return self

        def stop(self, keep_data=False):
            stopped.append(self.args)
            return []

    monkeypatch.setattr("rmqha.rmqkit.cluster.RocketMQCluster", FakeCluster)
    monkeypatch.setattr(pytest_plugin.ClusterPool, "_healthy", staticmethod(lambda c: True))
    monkeypatch.setattr(pytest_plugin.ClusterPool, "_ready", staticmethod(lambda c: True))
    pool = pytest_plugin.ClusterPool("/tmp/x")
    s = {"topology": "2m-2s-sync", "backend": "docker", "sets": {}}
    a = pool.get(s, "session")
    assert pool.get(dict(s), "session") is a and len(started) == 1
    b = pool.get({**s, "topology": "2m-noslave"}, "session")  # another topology replaces it
    assert b is not a and stopped == [a.args]
    c = pool.get({**s, "topology": "2m-noslave", "acl": True}, "session")  # so does ACL on the same topology
    assert c is not b and c.args[-1] is True and stopped == [a.args, b.args]
    b = c
    pool.release(owner="module:other.py")  # not its owner: kept
    assert pool.current[2] is b
    pool.release()
    assert stopped[-1] == c.args and pool.current is None


def test_the_pool_replaces_a_cluster_whose_slaves_do_not_come_back(monkeypatch):
    """The last test healed a kill-slave: the node runs but has not reconnected. The next test must get a
    ready cluster (its SYNC_MASTER would answer SLAVE_NOT_AVAILABLE), so a reuse waits, and a cluster that
    stays unready is replaced."""
    from rmqha.cluster.wait import WaitTimeout

    waited, made = [], []

    class Handle:
        def __init__(self, ready):
            self.ready = ready

        def wait_ready(self, timeout):
            waited.append(timeout)
            if not self.ready:
                raise WaitTimeout("broker-a-s: HA client CONNECTING to broker-a")

    class FakeCluster:
        def __init__(self, *a, **kw):
            self.handle = Handle(ready=True)
            made.append(self)

        def start(self):
            return self

        def stop(self, keep_data=False):
            return []

    monkeypatch.setattr("rmqha.rmqkit.cluster.RocketMQCluster", FakeCluster)
    monkeypatch.setattr(pytest_plugin.ClusterPool, "_healthy", staticmethod(lambda c: True))
    pool = pytest_plugin.ClusterPool("/tmp/x")
    s = {"topology": "2m-2s-sync", "backend": "docker", "sets": {}}
    a = pool.get(s, "session")
    assert waited == []  # a new cluster: Cluster.up already waited for it
    assert pool.get(s, "session") is a and waited == [60.0]
    a.handle.ready = False
    b = pool.get(s, "session")
    assert b is not a and len(made) == 2 and waited == [60.0, 60.0]


def test_messages_remember_topic_and_keys_and_a_send_without_keys_gets_a_send_id(tmp_path):
    pytest.importorskip("rocketmq.client")
    from rocketmq.client import Message

    from rmqha.rmqkit.history import Recorder

    rec = Recorder(tmp_path / "h.jsonl", "c1", "127.0.0.1:1")
    m = Message("Orders")
    m.set_keys("order-1")
    m.set_body("{}")
    r = rec.send_record(m)
    assert (r["topic"], r["send_id"], r["body_len"]) == ("Orders", "order-1", 2)
    m2 = Message("Orders")
    m2.set_body(b"xyz")
    r2 = rec.send_record(m2)
    assert r2["send_id"].startswith("c1-") and m2._rmqkit["keys"] == r2["send_id"]
    res = SimpleNamespace(msg_id=b"UNIQ1", status=0, offset=7)
    rec._append(rec.history.answered(r, res))
    rec.close()
    rec._append(rec.history.answered(r2, res))  # after close: dropped, no error
    (line,) = rec.records()
    assert (line["status"], line["uniq_key"], line["queue_offset"], line["send_id"]) == (
        "SEND_OK",
        "UNIQ1",
        7,
        "order-1",
    )


def test_an_audit_result_fails_on_a_fail_verdict_and_on_a_run_that_did_not_run(tmp_path):
    ok = AuditResult(tmp_path, tmp_path / "report.md", 0, "", 1.0, ["PASS  a: fine", "WARN  b: lag"])
    assert ok.check() is ok and not ok.failed
    bad = AuditResult(tmp_path, tmp_path / "report.md", 1, "", 1.0, ["PASS  a: fine", "FAIL  lost: 1 message"])
    with pytest.raises(AuditFailed, match="FAIL  lost: 1 message"):
        bad.check()
    broken = AuditResult(tmp_path, tmp_path / "report.md", 2, "error: not a run folder", 1.0)
    with pytest.raises(AuditFailed, match=r"(?s)did not run .exit 2.*not a run folder"):
        broken.check()


def test_a_broker_without_its_distribution_skips_with_the_fix(monkeypatch):
    """broker="apache" without ROCKETMQ_HOME: the kit names the missing distribution (the plugin skips on it)."""
    from rmqha.rmqkit.cluster import broker_unavailable_reason

    monkeypatch.delenv("ROCKETMQ_HOME", raising=False)
    assert "ROCKETMQ_HOME" in broker_unavailable_reason("apache")
    assert broker_unavailable_reason("ours") is None
    req = FakeRequest([mark(broker="apache")])
    assert pytest_plugin._settings(req)["broker"] == "apache"


def test_the_recorder_refuses_rocketmq_rusts_brokers_which_the_official_client_gets_no_answer_from():
    from rmqha.cluster import ClusterError
    from rmqha.rmqkit import RocketMQCluster

    with pytest.raises(ClusterError, match="No route info"):
        RocketMQCluster("2m-2s-sync", "local", broker="rust").recorder("producer")
