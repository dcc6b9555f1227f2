"""The docker cluster's Toxiproxy links (rmqha/cluster/docker_backend.py says how they are addressed): each
node's client and VIP proxies, each slave's HA proxy, both directions of every DLedger peer link and the
5.x proxy's client link, with the addresses each node's config then names. Tests:
tests/unit/cluster/test_port_block.py, tests/unit/cluster/test_cluster_topology.py."""

from __future__ import annotations

from pathlib import Path

from . import ClusterError
from . import runfolder as rf
from .topology import DLEDGER_PORT_OFFSET, PortPlan, Topology, effective_config, is_dledger

CONTAINER_STORE = "/var/lib/rocketmq/store"


def dledger_link_port(plan: PortPlan, topology: Topology, src: str, dst: str) -> int:
    """Where toxiproxy listens for src's DLedger connections to dst: dst's P + 4 + src's index, inside
    dst's port stride (P+3 is dst's own DLedger port; P+8 is the next node's VIP channel)."""
    return plan.node_ports(topology.node(dst))["listenPort"] + DLEDGER_PORT_OFFSET + 1 + topology.node(src).index


def dledger_links(topology: Topology, plan: PortPlan, overrides: dict[str, dict[str, str]]) -> list[dict]:
    """The proxies of every DLedger peer link, one per direction, and each DLedger node's own
    dLegerPeers (in `overrides`): itself on 0.0.0.0:P+3, every other member through its proxy."""
    groups: dict[str, list] = {}
    for n in topology.nodes:
        if is_dledger(n.props):
            groups.setdefault(n.props.get("dLegerGroup", "").strip(), []).append(n)
    proxies = []
    for members in groups.values():
        for a in members:
            peers = []
            for b in members:
                b_id = b.props["dLegerSelfId"].strip()
                b_port = plan.node_ports(b)["listenPort"] + DLEDGER_PORT_OFFSET
                if a is b:
                    peers.append(f"{b_id}-0.0.0.0:{b_port}")
                    continue
                port = dledger_link_port(plan, topology, a.name, b.name)
                peers.append(f"{b_id}-toxiproxy:{port}")
                proxies.append(
                    {
                        "name": f"{a.name}-dl-{b.name}",
                        "kind": "dledger",
                        "node": a.name,
                        "peer": b.name,
                        "listen": f"0.0.0.0:{port}",
                        "upstream": f"{b.name}:{b_port}",
                        "hostEndpoint": None,
                    }
                )
            overrides[a.name]["dLegerPeers"] = ";".join(peers)
    return proxies


def toxiproxy_proxies(state: dict) -> list[dict]:
    """The proxy list (Toxiproxy -config format) for a cluster's state."""
    return [
        {"name": p["name"], "listen": p["listen"], "upstream": p["upstream"], "enabled": True} for p in state["proxies"]
    ]


def client_proxies(topology: Topology, configs: dict, host: str) -> tuple[list[dict], set[int]]:
    """Each node's client and VIP proxies, and the ports they listen on in the toxiproxy container."""
    proxies, used_listen = [], set()
    for n in topology.nodes:
        c = configs[n.name]
        proxies.append(
            {
                "name": n.name,
                "kind": "client",
                "node": n.name,
                "listen": f"0.0.0.0:{c.listenPort}",
                "upstream": f"{n.name}:{c.listenPort}",
                "hostEndpoint": f"{host}:{c.listenPort}",
            }
        )
        proxies.append(
            {
                "name": f"{n.name}-vip",
                "kind": "vip",
                "node": n.name,
                "listen": f"0.0.0.0:{c.fast_listen_port}",
                "upstream": f"{n.name}:{c.fast_listen_port}",
                "hostEndpoint": f"{host}:{c.fast_listen_port}",
            }
        )
        used_listen.update((c.listenPort, c.fast_listen_port))
    return proxies, used_listen


def ha_proxies(
    topology: Topology, configs: dict, overrides: dict[str, dict[str, str]], host: str, used_listen: set[int]
) -> list[dict]:
    """The HA link of each slave: a proxy listening on toxiproxy:<master's HA port>; sets the slave's
    master addresses and its master's recovery peers in `overrides`."""
    proxies = []
    for n in topology.slaves:
        m = topology.master_of(n)
        mc = configs[m.name]
        port = mc.ha_port
        if port in used_listen:  # a second slave of the same master: its own port
            port = configs[n.name].ha_port
        used_listen.add(port)
        proxies.append(
            {
                "name": f"{n.name}-ha",
                "kind": "ha",
                "node": n.name,
                "master": m.name,
                "listen": f"0.0.0.0:{port}",
                "upstream": f"{m.name}:{mc.ha_port}",
                "hostEndpoint": None,
            }
        )
        overrides[n.name]["haMasterAddress"] = f"toxiproxy:{port}"
        # Topic config and consumer offsets come straight from the master's container: the
        # address it registers (127.0.0.1:P, for host clients) is this container itself.
        overrides[n.name]["slaveSyncMasterAddress"] = f"{m.name}:{mc.listenPort}"
        # A recovering master (haRecoveryEnable) fetches from its slave's HA port, container to
        # container: a partition (network disconnect) cuts it, a fault on the `-ha` proxy does not.
        sources = [
            a for a in overrides[m.name].get("haRecoveryPeers", "").split(",") if a and not a.startswith(host + ":")
        ]
        overrides[m.name]["haRecoveryPeers"] = ",".join(sources + [f"{n.name}:{configs[n.name].ha_port}"])
    return proxies


def proxies_and_configs(
    run_dir: Path,
    topology: Topology,
    plan: PortPlan,
    host: str,
    overrides: dict[str, dict[str, str]],
    extra: dict,
    per_node: dict,
) -> tuple[list[dict], dict]:
    """Every proxy, and each node's final config: our addressing, then the user's --set (as the local
    backend). Completes `overrides` in place."""
    configs = {}
    for n in topology.nodes:  # masters first
        o = {**overrides[n.name], **extra, **per_node.get(n.name, {})}
        configs[n.name] = effective_config(n, o)
    proxies, used_listen = client_proxies(topology, configs, host)
    proxies += dledger_links(topology, plan, overrides)
    proxies += ha_proxies(topology, configs, overrides, host, used_listen)
    for n in topology.nodes:
        overrides[n.name].update(extra)
        overrides[n.name].update(per_node.get(n.name, {}))
        configs[n.name] = effective_config(n, overrides[n.name])
        c = configs[n.name]
        if c.storePathRootDir != CONTAINER_STORE:
            raise ClusterError(
                f"{n.name}: storePathRootDir is {CONTAINER_STORE} in containers (the host "
                f"folder {rf.store_dir(run_dir, n.name)} is mounted there); do not --set it"
            )
    return proxies, configs


def proxy5_link(plan: PortPlan, host: str) -> dict:
    """The 5.x gRPC proxy's client link: host port -> toxiproxy -> proxy:8081 (its brokers it reaches
    through their own client links: --broker-host-map 127.0.0.1=toxiproxy in the compose files)."""
    return {
        "name": "proxy",
        "kind": "client",
        "node": "proxy",
        "listen": f"0.0.0.0:{plan.proxy_port}",
        "upstream": "proxy:8081",
        "hostEndpoint": f"{host}:{plan.proxy_port}",
    }
