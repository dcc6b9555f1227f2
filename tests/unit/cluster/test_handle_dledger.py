"""rmqha/cluster/handle.py on a DLedger group, from canned /status answers: who leads (masters, slaves,
master_of, slaves_of), caught_up, lags and dledger_lag (entries, as cluster-status's lagEntries), and
power_loss cutting a DLedger node's files at its durable positions. Classic groups beside it keep their state.json roles."""

from __future__ import annotations

import pytest

from rmqha.cluster import ClusterError
from rmqha.cluster.handle import Cluster
from rmqha.cluster.status import ClusterStatus, NodeStatus, node_json

N0, N1, N2 = "broker-n0", "broker-n1", "broker-n2"
PEERS = "n0-127.0.0.1:20003;n1-127.0.0.1:20013;n2-127.0.0.1:20023"


def dl_spec(i):
    return {
        "name": f"broker-n{i}",
        "brokerName": "RaftNode00",
        "brokerId": -1,
        "master": None,
        "addr": f"127.0.0.1:{20000 + 10 * i}",
        "statusUrl": f"http://127.0.0.1:{20002 + 10 * i}/status",
        "overrides": {"dLegerPeers": PEERS},
    }


CLASSIC = [
    {"name": "broker-a", "brokerName": "broker-a", "brokerId": 0, "master": None},
    {"name": "broker-a-s", "brokerName": "broker-a", "brokerId": 1, "master": "broker-a"},
]


def dl(role, committed, end=None, dispatched=None, term=2, broker_role=None, max_phy=0):
    end = committed if end is None else end
    return {
        "role": broker_role or ("SYNC_MASTER" if role == "LEADER" else "SLAVE"),
        "maxPhyOffset": max_phy,
        "dledger": {
            "role": role,
            "term": term,
            "committedIndex": committed,
            "endIndex": end,
            "dispatchedIndex": committed if dispatched is None else dispatched,
        },
    }


class Backend:
    def __init__(self, nodes):
        self.state = {"name": "t", "backend": "local", "nodes": nodes}


class Canned(Cluster):
    """A handle whose /status answers are canned (None: the node does not answer)."""

    def __init__(self, answers, nodes=None):
        super().__init__(Backend(nodes if nodes is not None else [dl_spec(i) for i in range(3)]))
        self.answers = answers
        self.asked = 0

    def statuses(self):
        self.asked += 1
        return {n: self.answers.get(n) for n in self.nodes}

    def status(self, node, timeout=1.0):
        return self.answers.get(node)


def healthy(c=41):
    return {N0: dl("FOLLOWER", c), N1: dl("LEADER", c), N2: dl("FOLLOWER", c)}


def test_roles_come_from_who_leads_now():
    c = Canned(healthy())
    assert c.dledger_groups() == {"RaftNode00": [N0, N1, N2]}
    assert (c.masters(), c.slaves()) == ([N1], [N0, N2])
    assert (c.master_of(N0), c.master_of(N1), c.slaves_of(N1), c.slaves_of(N0)) == (N1, None, [N0, N2], [])
    assert c.is_dledger(N0) and c.lag_unit(N0) == "entries"


def test_a_deposed_leader_that_has_not_heard_of_the_new_term_is_not_the_leader():
    c = Canned({N0: dl("LEADER", 40, term=2), N1: dl("LEADER", 41, term=3), N2: dl("FOLLOWER", 41, term=3)})
    assert c.dledger_leader("RaftNode00") == N1 and c.masters() == [N1]


def test_no_leader_no_master_every_member_a_slave_and_never_caught_up():
    c = Canned({N0: dl("CANDIDATE", 41), N1: None, N2: dl("CANDIDATE", 41)})
    assert (c.masters(), c.slaves(), c.master_of(N0)) == ([], [N0, N1, N2], None)
    assert not c.caught_up()
    assert c.lags() == {N0: None, N1: None, N2: None}


def test_caught_up_when_every_member_holds_the_leaders_log_committed_and_dispatched():
    assert Canned(healthy()).caught_up() and Canned(healthy()).lags() == {N0: 0, N2: 0}
    for n, behind in [
        (N0, dl("FOLLOWER", 39)),  # committed behind
        (N2, dl("FOLLOWER", 41, end=40)),  # log shorter than the leader's
        (N2, dl("FOLLOWER", 41, end=43)),  # stale entries past it (to be truncated)
        (N0, dl("FOLLOWER", 41, dispatched=40)),  # not dispatched to the consume queues
        (N1, dl("LEADER", 41, end=42)),  # the leader's last entry not committed
        (N2, None),
    ]:  # a member down
        c = Canned({**healthy(), n: behind})
        assert not c.caught_up(), (n, behind)
        assert not c.caught_up([N0]) and c.caught_up([])  # named by any member; an empty list asks nothing


def test_lag_is_in_entries_as_cluster_status_shows_it():
    answers = {N0: dl("FOLLOWER", 36, max_phy=9000), N1: dl("LEADER", 41, max_phy=9999), N2: dl("FOLLOWER", 41)}
    c = Canned(answers)
    assert c.lags() == {N0: 5, N2: 0} and c.asked == 1  # one round of /status for the whole group
    assert c.dledger_lag(N1) == 0  # the leader
    # cluster-status's lagEntries for the same answers (its leader: the name server's brokerId 0)
    nodes = [
        NodeStatus(spec=dl_spec(i), status=answers[n], registered=True, registered_id=[1, 0, 3][i])
        for i, n in enumerate((N0, N1, N2))
    ]
    cs = ClusterStatus(state={"nodes": [dl_spec(i) for i in range(3)]}, nodes=nodes, namesrv_up=True)
    assert {n.name: node_json(cs, n)["dledger"]["lagEntries"] for n in nodes if n.name != N1} == c.lags()


def test_classic_groups_beside_a_dledger_group_keep_their_planned_roles():
    answers = {
        **healthy(),
        "broker-a": {"role": "SYNC_MASTER", "maxPhyOffset": 500, "ha": {"slaves": [{"slaveAckOffset": 500}]}},
        "broker-a-s": {"role": "SLAVE", "maxPhyOffset": 300},
    }
    c = Canned(answers, nodes=CLASSIC + [dl_spec(i) for i in range(3)])
    assert c.masters() == ["broker-a", N1] and c.slaves() == ["broker-a-s", N0, N2]
    assert c.master_of("broker-a-s") == "broker-a" and c.lag_unit("broker-a-s") == "bytes"
    assert c.lags() == {"broker-a-s": 200, N0: 0, N2: 0}
    assert not c.caught_up() and c.caught_up([N2]) and not c.caught_up(["broker-a"])
    answers["broker-a-s"]["maxPhyOffset"] = 500
    assert c.caught_up()


def _cut_store(tmp_path, answers):
    """A handle whose broker-n1 (selfId n1) has a real DLedger store in tmp_path: three entries fsynced,
    two more in the page cache only; kill() closes it as a SIGKILL would."""
    from rmqha.broker.dledger.file_store import FileStore

    fs = FileStore(str(tmp_path), "n1", data_file_size=4096, index_file_size=32 * 16)
    for body in (b"one", b"two", b"three"):
        fs.append_as_leader(body, 1)
    fs.flush()
    synced = fs.durable_positions
    for body in (b"four", b"five"):
        fs.append_as_leader(body, 1)
    answers[N1]["dledger"].update(selfId="n1", durableDataPos=synced[0], durableIndexPos=synced[1])
    c = Canned(answers)
    c.power_model = "reported"  # the cut at the reported positions (rmqha/cluster/store_cut.py), not crashfs
    c.killed = []
    c.kill = lambda node: (c.killed.append(node), fs.release())
    c.store_path = lambda node: tmp_path
    return c, fs, synced


def test_power_loss_on_a_dledger_node_cuts_its_files_where_the_last_fsync_reached(tmp_path):
    from rmqha.broker.dledger.file_store import FileStore

    c, fs, synced = _cut_store(tmp_path, healthy())
    info = c.power_loss(N1)
    assert c.killed == [N1]
    assert (info["durableDataPos"], info["durableIndexPos"]) == synced == tuple(info["recordDurable"])
    assert info["droppedDataBytes"] == 52 + 52 and info["droppedIndexBytes"] == 64
    r = FileStore(str(tmp_path), "n1", data_file_size=4096, index_file_size=32 * 16)
    assert [e.body for e in r.entries()] == [b"one", b"two", b"three"]


def test_the_record_read_after_the_kill_wins_over_the_poll(tmp_path):
    """A truncation between the poll and the kill lowers the record: the poll alone would keep bytes
    that were never fsynced."""
    answers = healthy()
    c, fs, synced = _cut_store(tmp_path, answers)
    answers[N1]["dledger"]["durableDataPos"] += 52  # as if polled before a cut lowered it
    info = c.power_loss(N1)
    assert info["polledDurable"][0] == synced[0] + 52 and info["durableDataPos"] == synced[0]


def test_power_loss_needs_the_durable_positions_before_killing():
    c = Canned(healthy())
    c.power_model = "reported"
    c.kill = lambda node: pytest.fail("killed")
    with pytest.raises(ClusterError, match="durableDataPos"):
        c.power_loss(N1)
