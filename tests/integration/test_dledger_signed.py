"""Three DLedger node processes with a cluster secret (signed peer traffic, rmqha/broker/dledger/signing.py)
and a preferred leader: they elect a leader over signed requests and answers, hand leadership to the
preferred node, commit a signed append, and refuse an unsigned one with NO_PERMISSION, counted."""

import pytest

from rmqha.broker.dledger import client
from rmqha.cluster.wait import wait_until
from tests.integration.test_dledger_processes import GROUP, IDS, Group

pytestmark = pytest.mark.integration

SECRET = "dledger-test-secret-0123456789"


@pytest.fixture
def signed_group(tmp_path):
    secret = tmp_path / "cluster.secret"
    secret.write_text(SECRET + "\n")
    g = Group(tmp_path, ["--cluster-secret-file", str(secret), "--preferred-leader", "n2"])
    try:
        yield g
    finally:
        g.stop_all()


def test_a_signed_group_elects_hands_over_to_the_preferred_node_and_refuses_unsigned_requests(signed_group):
    g = signed_group
    g.start("n0")
    g.start("n1")
    first = wait_until(lambda: g.leader(["n0", "n1"]), 15, "n0 or n1 to lead", interval=0.1, on_timeout=g.log_tail)
    g.start("n2")
    # the leader hands over to n2 once n2 answers its heartbeats (every 1 s at this scale; answers to
    # the ones sent while n2 was down say NETWORK_ERROR for up to rpcTimeoutMs, 1.5 s), at its next
    # check (every second): one election
    lead = wait_until(
        lambda: (s := g.leader()) and s["selfId"] == "n2" and s,
        20,
        "n2 to lead",
        interval=0.1,
        on_timeout=g.log_tail,
    )
    assert all(g.status(i)["signed"] for i in IDS)
    # one election; the leader may have started more than one transfer (on a loaded machine the first
    # can time out before n2 has caught up, and checkPreferredLeader tries again a second later)
    assert lead["term"] == first["term"] + 1 and g.status(first["selfId"])["autoTransfers"] >= 1
    r = client.append(g.addr["n2"], GROUP, "n2", b"signed", secret=SECRET)
    assert r.code == 200 and r.index >= 0
    wait_until(
        lambda: all(g.status(i)["committedIndex"] >= r.index for i in IDS),
        10,
        "the append committed everywhere",
        on_timeout=g.log_tail,
    )
    with pytest.raises(ConnectionError, match="remoting code 16: DLedger request refused: not signed"):
        client.append(g.addr["n2"], GROUP, "n2", b"unsigned")
    with pytest.raises(ConnectionError, match="remoting code 16: DLedger request refused: the signature"):
        client.append(g.addr["n2"], GROUP, "n2", b"wrong", secret="another-secret-0123456789")
    sts = {i: g.status(i) for i in IDS}
    assert sts["n2"]["refused_unsigned"] == 1 and sts["n2"]["refused_bad_signature"] == 1
    # the peers' own traffic was all signed right
    for i in IDS:
        assert sts[i]["refused_replayed"] == sts[i]["refused_stale"] == 0, sts[i]
        assert sts[i]["bad_answer_signatures"] == sts[i]["refused_by_peer"] == 0, sts[i]
    assert g.leader()["selfId"] == "n2" and g.leader()["term"] == lead["term"]
