"""Readiness and the status table of a DLedger group (rmqha/cluster/wait.py, status.py), from canned data."""

from rmqha.cluster.status import ClusterStatus, NodeStatus, collect, node_json, render_table
from rmqha.cluster.wait import check_dledger_node, check_node

PEERS = "n0-127.0.0.1:20003;n1-127.0.0.1:20013;n2-127.0.0.1:20023"


def spec(i):
    base = 20000 + 10 * i
    return {
        "name": f"broker-n{i}",
        "brokerName": "RaftNode00",
        "brokerId": -1,
        "role": "ASYNC_MASTER",
        "clusterName": "RaftCluster",
        "addr": f"127.0.0.1:{base}",
        "haAddr": f"127.0.0.1:{base + 1}",
        "statusUrl": f"http://127.0.0.1:{base + 2}/status",
        "master": None,
        "overrides": {"dLegerPeers": PEERS},
    }


def status(i, role, bid, dl_role, committed, term=2, leader="n1"):
    s = spec(i)
    return {
        "brokerName": "RaftNode00",
        "brokerId": bid,
        "role": role,
        "addr": s["addr"],
        "maxPhyOffset": 0,
        "dledger": {
            "role": dl_role,
            "term": term,
            "leaderId": leader,
            "selfId": f"n{i}",
            "committedIndex": committed,
            "endIndex": committed,
            "dispatchedIndex": committed,
        },
    }


def group(statuses, table):
    """statuses: one /status per node (None: down); table: brokerId -> node index (the name server)."""
    specs = [spec(i) for i in range(3)]
    nodes = [NodeStatus(spec=s, process="running", running=True, status=st) for s, st in zip(specs, statuses)]
    by_index = {i: bid for bid, i in table.items()}
    for i, n in enumerate(nodes):
        n.registered_id = by_index.get(i)
        n.registered = n.registered_id is not None
    state = {"name": "dl", "topology": "dledger", "backend": "local", "nodes": specs}
    return ClusterStatus(state=state, nodes=nodes, namesrv_endpoint="127.0.0.1:20049", namesrv_up=True)


def ready(cs):
    return {n.name: check_node(cs, n, True).ready for n in cs.nodes}


def healthy(c0=7, c1=7, c2=7):
    return [
        status(0, "SLAVE", 1, "FOLLOWER", c0),
        status(1, "SYNC_MASTER", 0, "LEADER", c1),
        status(2, "SLAVE", 3, "FOLLOWER", c2),
    ]


def test_a_group_with_one_master_and_followers_in_sync_is_ready():
    cs = group(healthy(), {0: 1, 1: 0, 3: 2})
    assert ready(cs) == {"broker-n0": True, "broker-n1": True, "broker-n2": True}
    assert "master (brokerId 0)" in check_node(cs, cs.nodes[1], True).text


def test_a_follower_behind_the_leader_is_not_ready_unless_within_the_bound():
    cs = group(healthy(c0=5), {0: 1, 1: 0, 3: 2})
    c = check_node(cs, cs.nodes[0], True)
    assert not c.ready and "catching up: leader broker-n1 committed 7" in c.text
    assert check_dledger_node(cs, cs.nodes[0], max_lag=2).ready
    assert not check_dledger_node(cs, cs.nodes[0], max_lag=1).ready


def as_49(st, max_phy):
    """A 4.9 node's /status (runtime_status.build_status): no term, no indexes; the committed end's offset."""
    d = dict(st["dledger"], term=None, leaderId=None, committedIndex=None, endIndex=None)
    d.pop("dispatchedIndex", None)
    return dict(st, dledger=d, maxPhyOffset=max_phy, unavailable=["dledger.term", "dledger.committedIndex"])


def test_a_mixed_group_compares_commit_log_ends_where_a_member_is_49():
    st = healthy()
    for s in st:
        s["maxPhyOffset"] = 800
    st[2] = as_49(st[2], 800)  # ours leads, a 4.9 follower
    cs = group(st, {0: 1, 1: 0, 3: 2})
    assert ready(cs) == {"broker-n0": True, "broker-n1": True, "broker-n2": True}
    st[2] = as_49(st[2], 600)
    cs = group(st, {0: 1, 1: 0, 3: 2})
    c = check_node(cs, cs.nodes[2], True)
    assert not c.ready and "catching up: leader broker-n1 committed 800" in c.text
    st = healthy()
    for s in st:
        s["maxPhyOffset"] = 800
    st[1] = as_49(st[1], 800)  # a 4.9 leader, our followers
    st[0]["maxPhyOffset"] = 700
    cs = group(st, {0: 1, 1: 0, 3: 2})
    assert ready(cs) == {"broker-n0": False, "broker-n1": True, "broker-n2": True}


def test_no_master_in_the_name_server_is_not_ready():
    cs = group(healthy(), {1: 0, 3: 2})  # the leader has not registered as master yet
    assert ready(cs) == {"broker-n0": False, "broker-n1": False, "broker-n2": False}
    assert "not registered" in check_node(cs, cs.nodes[1], True).text


def test_a_node_still_in_its_file_role_or_a_second_master_is_not_ready():
    st = healthy()
    st[0] = status(0, "ASYNC_MASTER", -1, "CANDIDATE", 7)  # no role event yet: the file's role, id -1
    cs = group(st, {0: 1, 1: 0, 3: 2})
    assert not any(ready(cs).values())
    assert "2 nodes of RaftNode00 claim a master role" in check_node(cs, cs.nodes[1], True).text


def test_registered_under_another_id_than_status_shows_is_not_ready():
    cs = group(healthy(), {0: 1, 2: 0, 3: 2})  # n0 still under a stale id
    c = check_node(cs, cs.nodes[0], True)
    assert not c.ready and "registered as brokerId 2, /status says 1" in c.text


def test_a_slave_with_the_wrong_id_is_not_ready():
    st = healthy()
    st[2] = status(2, "SLAVE", 2, "FOLLOWER", 7)
    cs = group(st, {0: 1, 1: 0, 2: 2})
    c = check_node(cs, cs.nodes[2], True)
    assert not c.ready and "expected 3 (n2)" in c.text


def test_a_node_down_is_not_ready():
    st = healthy()
    st[2] = None
    cs = group(st, {0: 1, 1: 0})
    assert ready(cs) == {"broker-n0": True, "broker-n1": True, "broker-n2": False}


def test_json_and_table_show_the_dledger_role_term_and_committed_index():
    cs = group(healthy(c0=5), {0: 1, 1: 0, 3: 2})
    j = node_json(cs, cs.nodes[0])
    assert j["registeredId"] == 1 and j["brokerId"] == 1 and j["role"] == "SLAVE"
    assert j["dledger"] == {
        "role": "FOLLOWER",
        "term": 2,
        "leaderId": "n1",
        "selfId": "n0",
        "committedIndex": 5,
        "endIndex": 5,
        "dispatchedIndex": 5,
        "lagEntries": 2,
    }
    assert "haClient" not in j
    table = render_table(cs)
    assert "DLedger LEADER term 2 committed 7 end 7" in table
    assert "DLedger FOLLOWER term 2 committed 5 end 5 leader n1 lag 2" in table


def test_collect_reads_a_dledger_nodes_id_from_the_name_server(monkeypatch):
    from rmqha.cluster import status as st

    statuses = {spec(i)["statusUrl"]: s for i, s in enumerate(healthy())}
    monkeypatch.setattr(st, "fetch_status", lambda url, timeout: (statuses[url], None))
    info = {
        "brokerAddrTable": {
            "RaftNode00": {
                "brokerName": "RaftNode00",
                "brokerAddrs": {"0": "127.0.0.1:20010", "1": "127.0.0.1:20000", "3": "127.0.0.1:20020"},
            }
        }
    }
    monkeypatch.setattr(st, "cluster_info", lambda ep, timeout: info)
    state = {"name": "dl", "nodes": [spec(i) for i in range(3)], "namesrv": {"endpoint": "127.0.0.1:20049"}}
    cs = collect(state)
    assert [n.registered_id for n in cs.nodes] == [1, 0, 3]
    assert all(n.registered for n in cs.nodes)
    assert all(check_node(cs, n, True).ready for n in cs.nodes)
