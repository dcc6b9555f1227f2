"""Status JSON, the table, readiness checks and the name-server client, from canned data."""

import io
import json
import socket
import struct
import threading

import pytest

from rmqha.broker.remoting import json_body
from rmqha.broker.remoting.codec import decode_frame, encode
from rmqha.cluster.status import (
    ClusterStatus,
    NamesrvError,
    NodeStatus,
    cluster_info,
    node_json,
    registered_addrs,
    render_json,
    render_table,
)
from rmqha.cluster.wait import Progress, check_namesrv, check_node, registration_required


def spec(name, bname, bid, role, base, master=None):
    return {
        "name": name,
        "brokerName": bname,
        "brokerId": bid,
        "role": role,
        "clusterName": "DefaultCluster",
        "addr": f"127.0.0.1:{base}",
        "haAddr": f"127.0.0.1:{base + 1}",
        "metricsUrl": f"http://127.0.0.1:{base + 2}/metrics",
        "statusUrl": f"http://127.0.0.1:{base + 2}/status",
        "master": master,
        "process": {"pid": 4000 + base % 100},
    }


def master_status(s, max_offset, acks):
    return {
        "clusterName": "DefaultCluster",
        "brokerName": s["brokerName"],
        "brokerId": 0,
        "role": s["role"],
        "addr": s["addr"],
        "haAddr": s["haAddr"],
        "maxPhyOffset": max_offset,
        "pid": 111,
        "ha": {
            "push2SlaveMaxOffset": max(acks, default=0),
            "connectionCount": len(acks),
            "slaves": [
                {
                    "addr": f"127.0.0.1:5000{i}",
                    "slaveAckOffset": a,
                    "lagBytes": max_offset - a,
                    "state": "STREAMING",
                    "problem": "",
                }
                for i, a in enumerate(acks)
            ],
        },
    }


def slave_status(s, max_offset, state, reported, master_ha):
    return {
        "clusterName": "DefaultCluster",
        "brokerName": s["brokerName"],
        "brokerId": 1,
        "role": "SLAVE",
        "addr": s["addr"],
        "haAddr": s["haAddr"],
        "maxPhyOffset": max_offset,
        "pid": 222,
        "haClient": {"state": state, "haMasterAddress": master_ha, "currentReportedOffset": reported},
    }


def make_cluster(a_max=1000, a_acks=(1000,), as_state="CONNECTED", as_reported=1000, b_up=True):
    specs = [
        spec("broker-a", "broker-a", 0, "SYNC_MASTER", 20000),
        spec("broker-a-s", "broker-a", 1, "SLAVE", 20010, master="broker-a"),
        spec("broker-b", "broker-b", 0, "SYNC_MASTER", 20020),
        spec("broker-b-s", "broker-b", 1, "SLAVE", 20030, master="broker-b"),
    ]
    state = {
        "name": "t",
        "topology": "2m-2s-sync",
        "backend": "local",
        "runDir": "/tmp/run/t",
        "namesrv": {"addr": "127.0.0.1:20049", "endpoint": "127.0.0.1:20049"},
        "nodes": specs,
    }
    nodes = [NodeStatus(spec=s, process="running", running=True) for s in specs]
    nodes[0].status = master_status(specs[0], a_max, list(a_acks))
    nodes[1].status = slave_status(specs[1], as_reported, as_state, as_reported, "127.0.0.1:20001")
    if b_up:
        nodes[2].status = master_status(specs[2], 0, [0])
        nodes[3].status = slave_status(specs[3], 0, "CONNECTED", 0, "127.0.0.1:20021")
    else:
        nodes[2].error = "http://127.0.0.1:20022/status: Connection refused"
        nodes[3].status = slave_status(specs[3], 0, "CONNECTING", -1, "127.0.0.1:20021")
    for n in nodes:
        n.registered = n.up
    return ClusterStatus(
        state=state, nodes=nodes, namesrv_endpoint="127.0.0.1:20049", namesrv_process="running", namesrv_up=True
    )


def test_json_has_one_object_per_node_with_the_required_keys():
    cs = make_cluster()
    lines = render_json(cs).splitlines()
    assert len(lines) == 4
    objs = [json.loads(line) for line in lines]
    for o in objs:
        for key in ("name", "brokerName", "brokerId", "role", "addr", "haAddr", "maxPhyOffset", "metricsUrl"):
            assert key in o
    a, a_s = objs[0], objs[1]
    assert a["role"] == "SYNC_MASTER" and a["slaves"][0]["ackOffset"] == 1000 and a["maxPhyOffset"] == 1000
    assert a_s["role"] == "SLAVE" and a_s["haClient"]["state"] == "CONNECTED" and a_s["lagBytes"] == 0
    assert a_s["master"] == "broker-a"


def test_json_of_a_node_that_is_down_falls_back_to_the_plan():
    cs = make_cluster(b_up=False)
    b = node_json(cs, cs.nodes[2])
    assert (b["up"], b["maxPhyOffset"], b["addr"], b["role"]) == (False, None, "127.0.0.1:20020", "SYNC_MASTER")
    assert "Connection refused" in b["error"] and b["slaves"] == []
    assert node_json(cs, cs.nodes[3])["lagBytes"] is None


def test_table():
    cs = make_cluster(a_max=2048, a_acks=(1024,), as_reported=1024)
    text = render_table(cs)
    lines = text.splitlines()
    assert lines[0].startswith("cluster t  topology 2m-2s-sync  backend local")
    assert "4/4 brokers registered" in lines[1]
    header = lines[2].split()
    assert header[:3] == ["NODE", "ROLE", "ID"] and "REPLICATION" in header
    row_a = lines[3].split()
    assert row_a[:3] == ["broker-a", "SYNC_MASTER", "0"] and "2048" in row_a
    assert "ack 1024 lag 1024" in lines[3]
    assert "CONNECTED reported 1024 lag 1024" in lines[4]
    # Columns line up: every row starts its ROLE column at the same place.
    col = lines[2].index("ROLE")
    assert all(line[col - 2 : col] == "  " and line[col] != " " for line in lines[3:7])


def test_table_of_a_partly_down_cluster():
    cs = make_cluster(b_up=False)
    cs.nodes[2].running = False
    cs.nodes[2].process = "exited"
    text = render_table(cs)
    row = next(line for line in text.splitlines() if line.startswith("broker-b "))
    assert " exited " in row and " no " in row


def test_readiness_checks():
    cs = make_cluster()
    assert all(check_node(cs, n, True).ready for n in cs.nodes)
    assert check_namesrv(cs).ready
    lag = make_cluster(a_max=4096, as_reported=1024)
    c = check_node(lag, lag.nodes[1], True)
    assert not c.ready and "1024" in c.text and "4096" in c.text
    conn = make_cluster(as_state="CONNECTING", a_acks=())
    assert "CONNECTING" in check_node(conn, conn.nodes[1], True).text
    assert "0/1 slaves" in check_node(conn, conn.nodes[0], True).text
    down = make_cluster(b_up=False)
    assert "no answer" in check_node(down, down.nodes[2], True).text
    unreg = make_cluster()
    unreg.nodes[0].registered = False
    assert not check_node(unreg, unreg.nodes[0], True).ready
    assert check_node(unreg, unreg.nodes[0], False).ready


def test_registration_modes():
    cs = make_cluster()
    assert registration_required("required", cs) and not registration_required("optional", cs)
    assert registration_required("auto", cs)  # some broker registered: all must


def test_progress_without_a_terminal_prints_changes_only():
    out = io.StringIO()
    p = Progress(out, ["broker-a"])
    cs = make_cluster()
    checks = {"broker-a": check_node(cs, cs.nodes[0], True)}
    p.update(0.5, "hdr", checks)
    p.update(0.7, "hdr", checks)
    assert out.getvalue().count("broker-a") == 1 and "[ok]" in out.getvalue()


def test_registered_addrs():
    info = {
        "brokerAddrTable": {
            "broker-a": {
                "brokerName": "broker-a",
                "cluster": "DefaultCluster",
                "brokerAddrs": {"0": "127.0.0.1:1", "1": "127.0.0.1:2"},
            }
        },
        "clusterAddrTable": {"DefaultCluster": ["broker-a"]},
    }
    assert registered_addrs(info) == {("broker-a", 0): "127.0.0.1:1", ("broker-a", 1): "127.0.0.1:2"}
    assert registered_addrs({}) == {}


def _one_shot_server(reply_body: bytes, code: int = 0):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    seen = {}

    def serve():
        conn, _ = srv.accept()
        with conn:
            (n,) = struct.unpack(">I", conn.recv(4))
            data = b""
            while len(data) < n:
                data += conn.recv(n - len(data))
            req = decode_frame(data)
            seen["code"] = req.code
            conn.sendall(encode(req.make_response(code=code, body=reply_body)))
        srv.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return f"127.0.0.1:{srv.getsockname()[1]}", seen, t


def test_cluster_info_client_speaks_the_remoting_protocol():
    body = json_body.dumps(
        {
            "brokerAddrTable": {
                "broker-a": {"brokerName": "broker-a", "cluster": "C", "brokerAddrs": {"0": "127.0.0.1:10911"}}
            },
            "clusterAddrTable": {"C": ["broker-a"]},
        }
    )
    endpoint, seen, t = _one_shot_server(body)
    info = cluster_info(endpoint)
    t.join(5)
    assert seen["code"] == 106
    assert registered_addrs(info) == {("broker-a", 0): "127.0.0.1:10911"}


def test_cluster_info_errors_are_readable():
    endpoint, _, t = _one_shot_server(b"", code=1)
    with pytest.raises(NamesrvError, match="code 1"):
        cluster_info(endpoint)
    t.join(5)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(NamesrvError, match=f"127.0.0.1:{port}"):
        cluster_info(f"127.0.0.1:{port}")
