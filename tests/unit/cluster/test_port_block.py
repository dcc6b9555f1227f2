"""Every port every node of every topology opens lies inside its cluster's 50-port block, on both backends
(rmqha/cluster/topology.py PortPlan, rmqha/cluster/docker_backend.py): two clusters in neighbouring blocks
never meet. Computed from each node's effective configuration, the ports the broker itself derives
(haListenPort, metricsPort, the VIP channel listenPort - 2, its own DLedger port), not from the plan's list."""

import pytest

from rmqha.broker.config.properties import dledger_peers
from rmqha.cluster import docker_backend, docker_links
from rmqha.cluster.topology import (
    CLUSTER_PORT_SPAN,
    TOPOLOGIES,
    PortPlan,
    effective_config,
    load_topology,
    node_overrides,
)


def broker_ports(config) -> dict[str, int]:
    ports = {
        "listenPort": config.listenPort,
        "VIP channel (listenPort - 2)": config.fast_listen_port,
        "haListenPort": config.ha_port,
        "metricsPort": config.metrics_port,
    }
    if config.enableDLegerCommitLog:
        own = dledger_peers(config.dLegerPeers)[config.dLegerSelfId]
        ports["DLedger port"] = int(own.rpartition(":")[2])
    return ports


def local_ports(topology, plan) -> list[tuple[str, str, int]]:
    overrides = node_overrides(topology, plan, host="127.0.0.1", store_dir_of=lambda n: f"/tmp/rmqha-ports/{n}")
    out = [("namesrv", "name server port", plan.namesrv_port), ("proxy", "5.x gRPC proxy", plan.proxy_port)]
    for n in topology.nodes:
        for what, port in broker_ports(effective_config(n, overrides[n.name])).items():
            out.append((n.name, what, port))
    return out


def docker_ports(topology, plan) -> list[tuple[str, str, int]]:
    """What the host sees published (name server, Toxiproxy's API, each node's proxies and metrics) and
    what toxiproxy listens on inside its container (HA and DLedger links): the block is the host's."""
    overrides = docker_backend._container_overrides(topology, plan, "127.0.0.1")
    proxies, configs = docker_links.proxies_and_configs(None, topology, plan, "127.0.0.1", overrides, {}, {})
    out = [
        ("namesrv", "published name server port", plan.namesrv_port),
        ("toxiproxy", "API", docker_backend.toxiproxy_api_port(plan)),
    ]
    for p in proxies:
        out.append((p["name"], f"proxy ({p['kind']})", int(p["listen"].rpartition(":")[2])))
    for name, c in configs.items():
        for what, port in broker_ports(c).items():
            out.append((name, what, port))
    return out


@pytest.mark.parametrize("backend", ["local", "docker"])
@pytest.mark.parametrize("topology", TOPOLOGIES)
@pytest.mark.parametrize("base", [20100, 20150, 25000])
def test_every_port_a_node_opens_is_inside_its_cluster_block(topology, backend, base):
    topo = load_topology(topology)
    plan = PortPlan.make(base)
    block = plan.block()
    assert len(block) == CLUSTER_PORT_SPAN
    ports = (local_ports if backend == "local" else docker_ports)(topo, plan)
    outside = [(who, what, p) for who, what, p in ports if p not in block]
    assert not outside, f"{topology} ({backend}) block {block}: outside it: {outside}"
    # and the next block up and down share none of them
    assert not set(block) & set(PortPlan.make(base + CLUSTER_PORT_SPAN).block())
    assert not set(block) & set(PortPlan.make(base - CLUSTER_PORT_SPAN).block())


def test_the_default_cluster_keeps_a_stock_install_s_ports():
    plan = PortPlan.make(10911)
    topo = load_topology("2m-2s-sync")
    ports = {(who, what): p for who, what, p in local_ports(topo, plan)}
    assert ports[("broker-a", "listenPort")] == 10911
    assert ports[("broker-a", "VIP channel (listenPort - 2)")] == 10909
    assert ports[("broker-a", "haListenPort")] == 10912
    assert plan.namesrv_port == 9876 and docker_backend.toxiproxy_api_port(plan) == 8474
