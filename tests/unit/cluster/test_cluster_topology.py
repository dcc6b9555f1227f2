"""Topology parsing, the port plan and per-node overrides (no processes)."""

import pytest

from rmqha.broker.config.properties import BrokerConfig, parse_properties
from rmqha.cluster import ClusterError
from rmqha.cluster.topology import (
    COMPOSE_DIR,
    DEFAULT_NAMESRV_PORT,
    TOPOLOGIES,
    PortPlan,
    effective_config,
    load_topology,
    node_overrides,
    parse_sets,
    set_args,
)

OFFICIAL_KEYS = {
    "brokerClusterName",
    "brokerName",
    "brokerId",
    "deleteWhen",
    "fileReservedTime",
    "brokerRole",
    "flushDiskType",
}

EXPECTED = {
    "2m-2s-async": [
        ("broker-a", "broker-a", 0, "ASYNC_MASTER"),
        ("broker-a-s", "broker-a", 1, "SLAVE"),
        ("broker-b", "broker-b", 0, "ASYNC_MASTER"),
        ("broker-b-s", "broker-b", 1, "SLAVE"),
    ],
    "2m-2s-sync": [
        ("broker-a", "broker-a", 0, "SYNC_MASTER"),
        ("broker-a-s", "broker-a", 1, "SLAVE"),
        ("broker-b", "broker-b", 0, "SYNC_MASTER"),
        ("broker-b-s", "broker-b", 1, "SLAVE"),
    ],
    "2m-noslave": [("broker-a", "broker-a", 0, "ASYNC_MASTER"), ("broker-b", "broker-b", 0, "ASYNC_MASTER")],
}


CLASSIC = [t for t in TOPOLOGIES if t != "dledger"]


def test_the_dledger_topology_is_4_9s_conf_dledger(tmp_path):
    topo = load_topology("dledger")
    # brokerId -1 until elected (4.9's BrokerStartup); one broker name, three DLedger nodes
    assert [(n.name, n.broker_name, n.broker_id) for n in topo.nodes] == [
        ("broker-n0", "RaftNode00", -1),
        ("broker-n1", "RaftNode00", -1),
        ("broker-n2", "RaftNode00", -1),
    ]
    plan = PortPlan.make(20000)
    over = node_overrides(topo, plan, host="127.0.0.1", store_dir_of=lambda n: tmp_path / n)
    peers = "n0-127.0.0.1:20003;n1-127.0.0.1:20013;n2-127.0.0.1:20023"
    assert {o["dLegerPeers"] for o in over.values()} == {peers}
    assert ("broker-n1", "DLedger port (listenPort + 3)", 20013) in plan.all_ports(topo)
    c = effective_config(topo.node("broker-n2"), over["broker-n2"])
    assert (c.enableDLegerCommitLog, c.dLegerSelfId, c.brokerId) == (True, "n2", -1)


@pytest.mark.parametrize("name", CLASSIC)
def test_official_topologies(name):
    topo = load_topology(name)
    assert [(n.name, n.broker_name, n.broker_id, n.role) for n in topo.nodes] == EXPECTED[name]
    for n in topo.nodes:
        assert n.cluster_name == "DefaultCluster"
        # Exactly the official file's keys: no ports, addresses or paths.
        assert set(n.props) == OFFICIAL_KEYS, n.conf_file
        assert n.props["deleteWhen"] == "04" and n.props["fileReservedTime"] == "48"
        assert n.props["flushDiskType"] == "ASYNC_FLUSH"
        # The broker itself reads the file as-is.
        assert BrokerConfig.load(str(n.conf_file)).brokerRole == n.role
    for s in topo.slaves:
        assert topo.master_of(s).name == s.name[:-2]


def test_unknown_topology_lists_the_known_ones():
    with pytest.raises(ClusterError) as e:
        load_topology("3m-1s")
    assert "2m-2s-sync" in str(e.value) and "available" in str(e.value)


def write(d, name, text):
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_text(text)


def test_a_file_that_pins_ports_is_refused(tmp_path):
    write(tmp_path / "t", "broker-a.properties", "brokerName=broker-a\nbrokerId=0\nlistenPort=10911\n")
    with pytest.raises(ClusterError, match="listenPort"):
        load_topology("t", tmp_path)


def test_a_slave_without_master_is_refused(tmp_path):
    write(tmp_path / "t", "broker-a-s.properties", "brokerName=broker-a\nbrokerId=1\nbrokerRole=SLAVE\n")
    with pytest.raises(ClusterError, match="no master"):
        load_topology("t", tmp_path)


def test_duplicate_ids_are_refused(tmp_path):
    write(tmp_path / "t", "broker-a.properties", "brokerName=broker-a\nbrokerId=0\n")
    write(tmp_path / "t", "broker-x.properties", "brokerName=broker-a\nbrokerId=0\n")
    with pytest.raises(ClusterError, match="both"):
        load_topology("t", tmp_path)


def test_a_bad_role_names_the_file(tmp_path):
    write(tmp_path / "t", "broker-a.properties", "brokerName=broker-a\nbrokerId=0\nbrokerRole=MASTER\n")
    with pytest.raises(ClusterError, match="broker-a.properties.*brokerRole"):
        load_topology("t", tmp_path)


def test_port_plan_default_and_custom(monkeypatch):
    monkeypatch.delenv("CLUSTER_BASE_PORT", raising=False)
    topo = load_topology("2m-2s-sync")
    plan = PortPlan.make()
    assert (plan.base_port, plan.namesrv_port) == (10911, DEFAULT_NAMESRV_PORT)
    assert plan.node_ports(topo.node("broker-a")) == {"listenPort": 10911, "haListenPort": 10912, "metricsPort": 10913}
    assert plan.node_ports(topo.node("broker-b-s"))["listenPort"] == 10941
    custom = PortPlan.make(20000)
    assert custom.namesrv_port == 20047  # inside the block [20000 - 2, 20000 + 48)
    monkeypatch.setenv("CLUSTER_BASE_PORT", "20100")
    assert PortPlan.make().base_port == 20100
    assert PortPlan.make(20000, 9999).namesrv_port == 9999


def test_port_blocks_of_neighbour_clusters_do_not_overlap():
    topo = load_topology("2m-2s-sync")
    a = {p for _, _, p in PortPlan.make(20000).all_ports(topo)}
    b = {p for _, _, p in PortPlan.make(20050).all_ports(topo)}
    assert len(a) == 18 and not a & b  # 4 brokers x 4, the name server, the 5.x proxy (base + 45)
    assert max(a) < 20050 and min(a) == 19998  # broker-a's VIP channel: listenPort - 2


def test_port_plan_holds_each_broker_s_vip_channel():
    topo = load_topology("2m-2s-sync")
    vip = {(owner, p) for owner, what, p in PortPlan.make().all_ports(topo) if what == "VIP channel (listenPort - 2)"}
    assert vip == {("broker-a", 10909), ("broker-a-s", 10919), ("broker-b", 10929), ("broker-b-s", 10939)}


def test_port_plan_rejects_bad_values():
    with pytest.raises(ClusterError, match="out of range"):
        PortPlan.make(80)
    with pytest.raises(ClusterError, match="collides"):
        PortPlan.make(20000, 20011).all_ports(load_topology("2m-2s-sync"))


def test_overrides(tmp_path):
    topo = load_topology("2m-2s-sync")
    over = node_overrides(topo, PortPlan.make(20000), host="127.0.0.1", store_dir_of=lambda n: tmp_path / n / "store")
    assert over["broker-a"] == {
        "listenPort": "20000",
        "haListenPort": "20001",
        "metricsPort": "20002",
        "brokerIP1": "127.0.0.1",
        "metricsBindAddress": "127.0.0.1",
        "namesrvAddr": "127.0.0.1:20047",
        "storePathRootDir": str(tmp_path / "broker-a" / "store"),
        "maxHashSlotNum": "50000",
        "maxIndexNum": "200000",
        # its slave's HA port, where it fetches from when it recovers (haRecoveryEnable)
        "haRecoveryPeers": "127.0.0.1:20011",
    }
    assert over["broker-a-s"]["haMasterAddress"] == "127.0.0.1:20001"
    assert over["broker-b-s"]["haMasterAddress"] == "127.0.0.1:20021"
    assert "haMasterAddress" not in over["broker-b"]
    # Every node's effective config is valid and its ports are distinct across the cluster.
    ports = []
    for n in topo.nodes:
        c = effective_config(n, over[n.name])
        ports += [c.listenPort, c.ha_port, c.metrics_port]
        assert c.broker_addr == f"127.0.0.1:{over[n.name]['listenPort']}"
    assert len(set(ports)) == len(ports)
    # with recovery on, every master's config is valid: it gets its sources (a master without is a ConfigError)
    rec = node_overrides(
        topo,
        PortPlan.make(20000),
        host="127.0.0.1",
        store_dir_of=lambda n: tmp_path / n,
        extra={"haRecoveryEnable": "true"},
    )
    assert all(effective_config(n, rec[n.name]).haRecoveryEnable for n in topo.nodes)


def test_extra_sets_apply_last_and_slaves_follow_their_master(tmp_path):
    topo = load_topology("2m-2s-async")
    extra, per_node = parse_sets(["mappedFileSizeCommitLog=1048576", "broker-a:haListenPort=29999"], topo)
    assert extra == {"mappedFileSizeCommitLog": "1048576"}
    assert per_node == {"broker-a": {"haListenPort": "29999"}}
    over = node_overrides(
        topo,
        PortPlan.make(20000),
        host="127.0.0.1",
        store_dir_of=lambda n: tmp_path / n,
        extra=extra,
        extra_per_node=per_node,
    )
    assert over["broker-a"]["haListenPort"] == "29999"
    assert over["broker-a-s"]["haMasterAddress"] == "127.0.0.1:29999"
    assert all(o["mappedFileSizeCommitLog"] == "1048576" for o in over.values())


def test_parse_sets_errors():
    topo = load_topology("2m-noslave")
    with pytest.raises(ClusterError, match="KEY=VALUE"):
        parse_sets(["listenPort"], topo)
    with pytest.raises(ClusterError, match="no node 'broker-a-s'"):
        parse_sets(["broker-a-s:listenPort=1"], topo)


def test_invalid_override_is_reported_with_the_node(tmp_path):
    topo = load_topology("2m-2s-sync")
    over = node_overrides(
        topo,
        PortPlan.make(20000),
        host="127.0.0.1",
        store_dir_of=lambda n: tmp_path / n,
        extra_per_node={"broker-a-s": {"brokerId": "0"}},
    )
    with pytest.raises(ClusterError, match="broker-a-s.*brokerId=0"):
        effective_config(topo.node("broker-a-s"), over["broker-a-s"])


def test_set_args_round_trip_through_the_broker_parser(tmp_path):
    from rmqha.broker.__main__ import main

    topo = load_topology("2m-2s-sync")
    over = node_overrides(topo, PortPlan.make(20000), host="127.0.0.1", store_dir_of=lambda n: tmp_path / n)
    args = ["-c", str(topo.node("broker-b-s").conf_file), "--check"] + set_args(over["broker-b-s"])
    assert main(args) == 0


def test_compose_files_are_plain_properties():
    for name in TOPOLOGIES:
        for f in (COMPOSE_DIR / name).glob("*.properties"):
            props = parse_properties(f.read_text())
            assert props["brokerClusterName"] == ("RaftCluster" if name == "dledger" else "DefaultCluster")


def test_a_base_port_in_the_ephemeral_range_is_refused_with_advice(monkeypatch):
    # a restarted node must bind its port again; an outgoing connection may have taken it meanwhile
    from rmqha.cluster import topology

    monkeypatch.setattr(topology, "ephemeral_range", lambda: (32768, 60999))
    for base in (47000, 32768 - 47, 60999):  # the block is [base - 2, base + 48)
        with pytest.raises(ClusterError, match="ephemeral port range 32768..60999.*below 32718"):
            PortPlan.make(base)
    with pytest.raises(ClusterError, match="name server 40000"):
        PortPlan.make(20000, 40000)
    assert PortPlan.make(32768 - 50).base_port == 32718
    assert PortPlan.make(32768 - 48).block()[-1] == 32767


def test_docker_dledger_peer_links_go_through_one_proxy_per_direction():
    from rmqha.cluster.docker_links import dledger_links

    topo = load_topology("dledger")
    plan = PortPlan.make(20100)
    overrides = {n.name: {} for n in topo.nodes}
    proxies = dledger_links(topo, plan, overrides)
    assert sorted(p["name"] for p in proxies) == sorted(
        f"broker-n{a}-dl-broker-n{b}" for a in range(3) for b in range(3) if a != b
    )
    p = next(p for p in proxies if p["name"] == "broker-n0-dl-broker-n2")
    # toxiproxy listens in broker-n2's stride (P+4+index of broker-n0), upstream is broker-n2's own P+3
    assert (p["kind"], p["node"], p["peer"], p["listen"], p["upstream"]) == (
        "dledger",
        "broker-n0",
        "broker-n2",
        "0.0.0.0:20124",
        "broker-n2:20123",
    )
    assert overrides["broker-n0"]["dLegerPeers"] == "n0-0.0.0.0:20103;n1-toxiproxy:20114;n2-toxiproxy:20124"
    assert overrides["broker-n2"]["dLegerPeers"] == "n0-toxiproxy:20106;n1-toxiproxy:20116;n2-0.0.0.0:20123"
    listens = [int(p["listen"].rpartition(":")[2]) for p in proxies]
    assert len(set(listens)) == len(listens)
    taken = {port for _, _, port in plan.all_ports(topo)}
    assert not taken & set(listens)  # no clash with a client, VIP, metrics or DLedger port


def test_topologies_and_run_root_when_installed_rather_than_cloned(monkeypatch, tmp_path):
    """A wheel carries compose/ as rmqha/cluster/compose (setup.py), and an installed package keeps its
    runs in ./run, not in site-packages; RMQHA_COMPOSE_DIR and CLUSTER_RUN_ROOT still win."""
    from rmqha.cluster import runfolder, topology

    assert topology.IS_CHECKOUT and topology.compose_dir() == topology.REPO_ROOT / "compose"
    monkeypatch.setattr(topology, "IS_CHECKOUT", False)
    monkeypatch.setattr(runfolder, "IS_CHECKOUT", False)
    monkeypatch.delenv("RMQHA_COMPOSE_DIR", raising=False)
    monkeypatch.delenv("CLUSTER_RUN_ROOT", raising=False)
    assert topology.compose_dir() == topology.BUNDLED_COMPOSE_DIR
    monkeypatch.chdir(tmp_path)
    assert runfolder.run_root() == tmp_path / "run"
    monkeypatch.setenv("RMQHA_COMPOSE_DIR", str(tmp_path / "mine"))
    assert topology.compose_dir() == tmp_path / "mine"
    monkeypatch.setenv("CLUSTER_RUN_ROOT", str(tmp_path / "elsewhere"))
    assert runfolder.run_root() == tmp_path / "elsewhere"
