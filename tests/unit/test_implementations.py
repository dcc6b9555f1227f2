"""rmqha/cluster/implementations/: the broker choice, Apache's launcher and the 4.9 status reader."""

import os
import socket
from pathlib import Path

import pytest

from rmqha.cluster import ClusterError
from rmqha.cluster import status as st
from rmqha.cluster.implementations import BrokerChoice, check_available, parse_choice
from rmqha.cluster.implementations import apache, rust, rust_image
from rmqha.cluster.implementations.runtime_status import build_status, established, ha_links

NODES = ["broker-a", "broker-a-s", "broker-b", "broker-b-s"]


def test_choice_defaults_to_ours_everywhere(monkeypatch):
    monkeypatch.delenv("ROCKETMQ_HOME", raising=False)
    c = parse_choice(None)
    assert (c.default, c.per_node, c.namesrv, c.home) == ("ours", {}, "ours", None)
    assert c.of("broker-a") == "ours" and c.spec() == "ours"


def test_choice_apache_takes_its_name_server_and_home(tmp_path):
    c = parse_choice("apache", home=str(tmp_path))
    assert c.of("broker-a-s") == "apache" and c.namesrv == "apache" and c.home == str(tmp_path.resolve())
    assert parse_choice(c.spec(), home=c.home) == c


def test_mixed_groups_and_the_name_server_are_per_node():
    c = parse_choice("ours,broker-a-s=apache,broker-b=apache,namesrv=apache", nodes=NODES)
    assert [c.of(n) for n in NODES] == ["ours", "apache", "apache", "ours"]
    assert c.namesrv == "apache" and c.kinds == {"ours", "apache"}
    assert parse_choice(c.spec(), nodes=NODES) == c


@pytest.mark.parametrize(
    "spec, words",
    [
        ("oracle", "unknown broker"),
        ("4.9", "emulation"),
        ("ours,broker-z=apache", "no node 'broker-z'"),
        ("ours,apache", "only the first item"),
        ("apache,namesrv=rust", "not wired"),
    ],
)
def test_bad_choices_say_what_is_wrong(spec, words):
    with pytest.raises(ClusterError, match=words):
        parse_choice(spec, nodes=NODES)


def _distribution(root: Path) -> Path:
    for p in apache.REQUIRED:
        if p == "conf":
            (root / p).mkdir(parents=True, exist_ok=True)
        else:
            (root / p).parent.mkdir(parents=True, exist_ok=True)
            (root / p).write_text("#!/bin/sh\n")
    (root / "lib").mkdir(exist_ok=True)
    (root / "lib" / "rocketmq-broker-4.9.8.jar").write_bytes(b"PK")
    return root


def test_apache_needs_a_distribution(tmp_path, monkeypatch):
    monkeypatch.delenv("ROCKETMQ_HOME", raising=False)
    with pytest.raises(ClusterError, match="ROCKETMQ_HOME"):
        check_available(parse_choice("apache"))
    with pytest.raises(ClusterError, match="missing bin/mqbroker"):
        check_available(parse_choice("apache", home=str(tmp_path)))
    monkeypatch.setenv("PATH", os.environ["PATH"])
    if os.environ.get("JAVA_HOME") or any((Path(d) / "java").exists() for d in os.environ["PATH"].split(os.pathsep)):
        check_available(parse_choice("apache", home=str(_distribution(tmp_path / "d"))))


def test_rust_not_built_says_how_to_build(monkeypatch, tmp_path):
    monkeypatch.setattr(rust_image, "CACHE", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ClusterError, match="make peer-broker"):
        check_available(parse_choice("rust"))


def test_the_official_client_is_refused_wherever_a_rust_broker_runs():
    from rmqha.cluster.implementations import official_client_refusal

    for spec in ("ours", "apache", "ours,broker-a-s=apache"):
        assert official_client_refusal(parse_choice(spec, home="/opt/x")) is None
    why = official_client_refusal(parse_choice("rust"))
    # the cause named (the headers rocketmq-rust does not decode), the symptom the client shows, the way out
    assert "serializeTypeCurrentRPC" in why and "No route info" in why and "CLIENT=rust" in why
    assert "nodes broker-a-s" in official_client_refusal(parse_choice("ours,broker-a-s=rust", nodes=NODES))


def test_apache_properties_live_in_the_run_folder(tmp_path):
    conf = tmp_path / "broker-a-s.properties"
    conf.write_text("brokerClusterName=C\nbrokerName=broker-a\nbrokerId=1\nbrokerRole=SLAVE\n")
    before = conf.read_text()
    home = _distribution(tmp_path / "home")
    node = {
        "name": "broker-a-s",
        "conf": str(conf),
        "overrides": {
            "listenPort": "20010",
            "brokerIP1": "127.0.0.1",
            "storePathRootDir": str(tmp_path / "run/nodes/broker-a-s/store"),
            "metricsPort": "20012",
            "haAllowedAddresses": "127.0.0.1",
            "haMasterAddress": "127.0.0.1:20001",
        },
    }
    launch = apache.broker_launch(node, tmp_path / "run", BrokerChoice("apache", home=str(home)))
    props_path = tmp_path / "run/nodes/broker-a-s/broker.properties"
    assert launch.cmd == ["sh", str(home / "bin/mqbroker"), "-c", str(props_path)]
    text = props_path.read_text()
    assert "haMasterAddress=127.0.0.1:20001" in text and "brokerRole=SLAVE" in text
    assert f"storePathCommitLog={tmp_path}/run/nodes/broker-a-s/store/commitlog" in text
    assert "brokerIP2=127.0.0.1" in text
    assert "metricsPort" not in text and "haAllowedAddresses" not in text
    assert conf.read_text() == before  # the repository's file is never written
    assert "-Xmx256m" in launch.env["JAVA_OPT_EXT"]
    assert f"-Duser.home={tmp_path}/run/nodes/broker-a-s" in launch.env["JAVA_OPT_EXT"]
    assert launch.env["ROCKETMQ_HOME"] == str(home)


def _tree(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


def test_an_apache_broker_reads_the_kit_acl_file_from_a_home_of_its_own(tmp_path):
    """4.9.8 reads plain_acl.yml from <rocketmq.home.dir>/conf (else $ROCKETMQ_HOME's) and has no
    aclConfigFile: each broker gets RUN/nodes/NODE/rocketmq-home, the distribution's conf/ copied but for
    its ACL files, conf/plain_acl.yml linked to the kit's file in the store; the distribution is never
    written."""
    from rmqha.cluster import acl

    home = _distribution(tmp_path / "home")
    (home / "conf" / "logback_broker.xml").write_text("<configuration/>\n")
    (home / "conf" / "plain_acl.yml").write_text("accounts:\n  - accessKey: RocketMQ\n")
    (home / "conf" / "acl").mkdir()
    (home / "conf" / "acl" / "more.yml").write_text("accounts: []\n")
    (home / "conf" / "2m-noslave").mkdir()
    (home / "conf" / "2m-noslave" / "broker-a.properties").write_text("brokerName=broker-a\n")
    before = _tree(home)
    conf = tmp_path / "broker-a.properties"
    conf.write_text("brokerClusterName=C\nbrokerName=broker-a\nbrokerId=0\nbrokerRole=ASYNC_MASTER\n")
    run = tmp_path / "run"
    store = run / "nodes/broker-a/store"
    creds = acl.new_credentials()
    acl.write_file(store, creds)
    node = {
        "name": "broker-a",
        "conf": str(conf),
        "overrides": {"listenPort": "20000", "storePathRootDir": str(store), **acl.broker_sets(str(store), creds)},
    }
    choice = BrokerChoice("apache", home=str(home))
    launch = apache.broker_launch(node, run, choice)

    nhome = run / "nodes/broker-a/rocketmq-home"
    assert f"-Drocketmq.home.dir={nhome.absolute()}" in launch.env["JAVA_OPT_EXT"]
    assert launch.env["ROCKETMQ_HOME"] == str(home)  # the scripts' bin/ and lib/
    link = nhome / "conf/plain_acl.yml"
    assert link.is_symlink() and link.resolve() == (store / acl.FILE_IN_STORE).resolve()
    assert creds["secretKey"] in link.read_text()
    assert (nhome / "conf/logback_broker.xml").read_text() == "<configuration/>\n"  # BrokerStartup reads it
    assert (nhome / "conf/2m-noslave/broker-a.properties").is_file()
    assert not (nhome / "conf/acl").exists()  # 4.9 would load the distribution's accounts from there

    # updateAclConfig rewrites the file 4.9 reads: the kit's, in the node's folder, never the distribution's
    with open(link, "w") as fh:
        fh.write("accounts: []\n")
    assert (store / acl.FILE_IN_STORE).read_text() == "accounts: []\n"
    assert _tree(home) == before

    # the same node started again without ACL: no link left behind
    path = Path(run / "nodes/broker-a/broker.properties")
    path.write_text(path.read_text().replace("aclEnable=true", "aclEnable=false"))
    apache.broker_launch(node, run, choice)
    assert not os.path.lexists(link)
    assert _tree(home) == before


def test_established_sees_this_process_connections():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    cli = socket.create_connection(("127.0.0.1", port))
    acc, _ = srv.accept()
    try:
        conns = established(os.getpid())
        assert (cli.getsockname()[1], port) in conns
        assert ha_links(os.getpid(), serving_port=port) == 1  # the accepted side
        assert ha_links(os.getpid(), master_port=port) == 1  # the connecting side
        assert ha_links(None, serving_port=port) is None
    finally:
        for s in (cli, acc, srv):
            s.close()
    assert ha_links(os.getpid(), serving_port=port) == 0


INFO = {"commitLogMaxOffset": "4096", "commitLogMinOffset": "0", "brokerVersionDesc": "V4_9_8"}


def _config(**kw):
    base = {
        "brokerClusterName": "C",
        "brokerName": "broker-a",
        "brokerId": "0",
        "brokerRole": "SYNC_MASTER",
        "brokerIP1": "127.0.0.1",
        "listenPort": "20000",
    }
    return {**base, **kw}


def test_a_49_master_status_names_what_it_cannot_tell():
    seen = {}

    def links(**kw):
        seen.update(kw)
        return 1

    spec = {"name": "broker-a", "implementation": "apache", "addr": "127.0.0.1:20000", "brokerName": "broker-a"}
    s = build_status(spec, INFO, _config(), 77, links)
    assert seen == {"serving_port": 20001}  # 4.9: haListenPort = listenPort + 1
    assert s["role"] == "SYNC_MASTER" and s["maxPhyOffset"] == 4096 and s["ha"]["connectionCount"] == 1
    assert "ha.slaves[].slaveAckOffset" in s["unavailable"]
    cs = st.ClusterStatus(state={"nodes": [spec]}, nodes=[st.NodeStatus(spec=spec, status=s)])
    j = st.node_json(cs, cs.nodes[0])
    assert j["slaves"] is None and j["implementation"] == "apache"  # unavailable, not an empty list
    row = st.table_rows(cs)[0]
    assert "unavailable" in row[-1] and "ack 0" not in row[-1]


def test_a_49_slave_off_this_machine_has_no_ha_state():
    spec = {"name": "broker-a-s", "implementation": "apache", "master": "broker-a"}
    cfg = _config(brokerId="1", brokerRole="SLAVE", haMasterAddress="127.0.0.1:20001")
    s = build_status(spec, INFO, cfg, None, lambda **kw: None)
    assert s["haClient"] == {"state": None, "haMasterAddress": "127.0.0.1:20001", "currentReportedOffset": 4096}
    assert "haClient.state" in s["unavailable"]
    cs = st.ClusterStatus(state={"nodes": [spec]}, nodes=[st.NodeStatus(spec=spec, status=s)])
    assert "state unavailable" in st.table_rows(cs)[0][-1]
    s2 = build_status(spec, INFO, cfg, 5, lambda **kw: 1)
    assert s2["haClient"]["state"] == "CONNECTED" and "haClient.state" not in s2["unavailable"]


def test_a_49_dledger_node_role_comes_from_its_config():
    cfg = _config(enableDLegerCommitLog="true", dLegerSelfId="n1", brokerRole="SLAVE", brokerId="2")
    s = build_status({"name": "broker-n1"}, INFO, cfg, None, lambda **kw: None)
    assert s["dledger"]["role"] == "FOLLOWER" and s["dledger"]["committedIndex"] is None
    assert "dledger.committedIndex" in s["unavailable"] and s["brokerId"] == 2
    master = _config(enableDLegerCommitLog="true", dLegerSelfId="n1", brokerRole="SYNC_MASTER", brokerId="0")
    assert build_status({"name": "broker-n1"}, INFO, master, None, lambda **kw: None)["dledger"]["role"] == "LEADER"
    # restarted, no role event yet: the file's role and brokerId -1 (4.9 may lead in DLedger, not yet master)
    fresh = _config(enableDLegerCommitLog="true", dLegerSelfId="n1", brokerRole="ASYNC_MASTER", brokerId="-1")
    assert build_status({"name": "broker-n1"}, INFO, fresh, None, lambda **kw: None)["dledger"]["role"] == "CANDIDATE"


@pytest.mark.parametrize(
    "text, major",
    [
        ('openjdk version "17.0.15" 2025-04-15', 17),
        ('java version "1.8.0_392"', 8),
        ('openjdk version "21"', 21),
        ("", 8),
    ],
)
def test_java_major(text, major):
    assert apache.parse_java_major(text) == major


# --- rocketmq-rust: its canonical TOML ----------------------------------------------------------------


def _rust_node(tmp_path, conf_text, **overrides):
    conf = tmp_path / "broker.properties"
    conf.write_text(conf_text)
    base = {
        "listenPort": "20010",
        "haListenPort": "20011",
        "metricsPort": "20012",
        "brokerIP1": "127.0.0.1",
        "namesrvAddr": "127.0.0.1:20047",
        "storePathRootDir": str(tmp_path / "run/nodes/n/store"),
        "maxHashSlotNum": "50000",
        "maxIndexNum": "200000",
    }
    base.update(overrides)
    return {"name": "n", "conf": str(conf), "overrides": base}


SLAVE_CONF = "brokerClusterName=C\nbrokerName=broker-a\nbrokerId=1\ndeleteWhen=04\nfileReservedTime=48\nbrokerRole=SLAVE\nflushDiskType=ASYNC_FLUSH\n"


def test_rust_slave_names_its_role_for_the_broker_and_the_store(tmp_path):
    import tomllib

    node = _rust_node(tmp_path, SLAVE_CONF, haMasterAddress="127.0.0.1:20001")
    before = Path(node["conf"]).read_text()
    path = rust.write_run_properties(tmp_path / "run", "n", node["conf"], node["overrides"])
    assert path == tmp_path / "run" / "nodes" / "n" / "broker.toml"
    doc = tomllib.loads(path.read_text())
    # rocketmq-rust starts a slave's HA client and metadata sync from the broker section's role; its
    # .properties reader sets only the store's, so a slave from a .properties file never replicates
    assert doc["broker"]["brokerRole"] == doc["store"]["brokerRole"] == "SLAVE"
    assert doc["store"]["haMasterAddress"] == "127.0.0.1:20001"
    assert doc["broker"]["brokerIdentity"] == {"brokerClusterName": "C", "brokerName": "broker-a", "brokerId": 1}
    assert doc["store"]["deleteWhen"] == "04" and doc["store"]["fileReservedTime"] == 48  # a string stays one
    assert doc["broker"]["listenPort"] == 20010 and doc["store"]["haListenPort"] == 20011
    assert doc["broker"]["storePathRootDir"] == doc["store"]["storePathRootDir"]
    assert doc["store"]["storePathCommitLog"].endswith("store/commitlog")
    assert "metricsPort" not in path.read_text()  # ours only, as for Apache's
    assert (path.parent / "broker.properties").is_file()  # the 4.x keys it came from, beside it
    assert Path(node["conf"]).read_text() == before


def test_rust_sync_master_waits_for_its_slave_unless_told_otherwise():
    base = {"brokerName": "a", "brokerId": "0", "brokerRole": "SYNC_MASTER"}
    doc = rust.canonical_config(base)
    assert (doc["store"]["inSyncReplicas"], doc["store"]["totalReplicas"]) == (2, 2)
    doc = rust.canonical_config(dict(base, inSyncReplicas="1"))
    assert doc["store"]["inSyncReplicas"] == 1
    assert "inSyncReplicas" not in rust.canonical_config(dict(base, brokerRole="ASYNC_MASTER"))["store"]


def test_rust_async_flush_sync_master_flushes_thoroughly_each_interval_so_its_sync_wait_is_bounded():
    # rocketmq-rust's sync wait includes the master's own flushed offset, which ASYNC_FLUSH moves at 4
    # dirty pages or every 10 s otherwise
    # (it refuses flushCommitLogLeastPages=0 with ASYNC_FLUSH: a thorough flush every interval instead)
    store = rust.canonical_config({"brokerRole": "SYNC_MASTER"})["store"]
    assert store["flushCommitLogThoroughInterval"] == 500 and "flushCommitLogLeastPages" not in store
    store = rust.canonical_config({"brokerRole": "SYNC_MASTER", "flushIntervalCommitLog": "200"})["store"]
    assert store["flushCommitLogThoroughInterval"] == 200
    store = rust.canonical_config({"brokerRole": "SYNC_MASTER", "flushCommitLogThoroughInterval": "2000"})["store"]
    assert store["flushCommitLogThoroughInterval"] == 2000  # the user's own setting stands
    for props in ({"brokerRole": "SYNC_MASTER", "flushDiskType": "SYNC_FLUSH"}, {"brokerRole": "ASYNC_MASTER"}):
        assert "flushCommitLogThoroughInterval" not in rust.canonical_config(props).get("store", {})


def test_rust_refuses_dledger_and_keys_it_cannot_place():
    with pytest.raises(ClusterError, match="no DLedger commit log.*dLegerPeers"):
        rust.canonical_config({"brokerName": "a", "enableDLegerCommitLog": "true", "dLegerPeers": "n0-x:1"})
    with pytest.raises(ClusterError, match="transientStorePoolEnable"):
        rust.canonical_config({"brokerName": "a", "transientStorePoolEnable": "true"})
    with pytest.raises(ClusterError, match="not a whole number"):
        rust.canonical_config({"listenPort": "ten"})
    with pytest.raises(ClusterError, match="not true or false"):
        rust.canonical_config({"autoCreateTopicEnable": "yes"})


def test_rust_toml_escapes_strings():
    import tomllib

    text = rust.to_toml(
        {"broker": {"namesrvAddr": 'a"b\\c\u00e9', "brokerIdentity": {"brokerId": 0}}, "store": {"x": True}}
    )
    assert tomllib.loads(text) == {
        "broker": {"namesrvAddr": 'a"b\\c\u00e9', "brokerIdentity": {"brokerId": 0}},
        "store": {"x": True},
    }


def test_rust_launch_runs_the_toml(tmp_path, monkeypatch):
    monkeypatch.setattr(rust, "find_binary", lambda: "/opt/rocketmq-broker-rust")
    node = _rust_node(tmp_path, SLAVE_CONF, haMasterAddress="127.0.0.1:20001")
    launch = rust.broker_launch(node, tmp_path / "run", BrokerChoice("rust"))
    assert launch.cmd == [
        "/opt/rocketmq-broker-rust",
        "-c",
        str(tmp_path / "run/nodes/n/broker.toml"),
        "-n",
        "127.0.0.1:20047",
    ]
    assert "NAMESRV_ADDR" not in launch.env


def test_rust_brokers_start_once_the_name_server_listens(tmp_path):
    # rocketmq-rust's broker gives up its start when its first registration finds no name server
    import socket as _socket
    import subprocess
    import sys

    from rmqha.cluster import local_backend

    srv = _socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    try:
        local_backend._wait_listening("127.0.0.1", port, {"pid": os.getpid()}, timeout=5)
    finally:
        srv.close()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with pytest.raises(ClusterError, match="exited before it listened"):
        local_backend._wait_listening("127.0.0.1", port, {"pid": dead.pid}, timeout=30)


def test_another_brokers_status_gets_the_time_its_admin_requests_take(monkeypatch):
    # rocketmq-rust's GET_BROKER_RUNTIME_INFO took 140-640 ms idle and over 1 s under load: our /status's
    # 1 s made working nodes look dead
    from rmqha.cluster.implementations import runtime_status

    seen = []
    monkeypatch.setattr(runtime_status, "read_status", lambda spec, timeout, creds: seen.append(timeout) or ({}, None))
    st.node_status({"implementation": "rust", "addr": "127.0.0.1:1"}, 1.0)
    st.node_status({"implementation": "apache", "addr": "127.0.0.1:1"}, 8.0)
    assert seen == [st.OTHER_BROKER_TIMEOUT, 8.0] and st.OTHER_BROKER_TIMEOUT >= 3
