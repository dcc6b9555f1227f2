"""Topologies, port plans and per-node overrides.

A topology is a folder compose/<topology>/ holding the official RocketMQ conf files, one per broker:
broker-a.properties (master of group broker-a), broker-a-s.properties (its slave), and so on. The file
name without ".properties" is the node's name. The files carry no ports, addresses or paths: those
are per-deployment overrides, computed here: the local backend writes the file with them into the node's
run folder (runfolder.write_node_properties) and runs the broker on that copy; the docker backend passes
them as `--set key=value`.

Port plan: a cluster's ports lie in its block [base - 2, base + 48), CLUSTER_PORT_SPAN ports. Node i (in
the order broker-a, broker-a-s, broker-b, broker-b-s) gets listenPort = base + 10*i, haListenPort = +1
and metricsPort = +2, and listens on listenPort - 2 too (4.9's VIP channel, no key of its own: 10909
for the default broker-a, as a stock install); a DLedger node also on listenPort + 3. The docker
backend's Toxiproxy API is base + 46, the 5.x proxy base + 45 and the name server listens on base +
NAMESRV_OFFSET (47), except for the default base port (10911, RocketMQ's own), where they are 8474, 8081
and RocketMQ's 9876. Blocks 50
apart meet nowhere (tests/unit/cluster/test_port_block.py checks every port every node opens). So the
default cluster looks like a stock
install, and `--base-port 20000`, `--base-port 20100`, ... run side by side.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from rmqha.broker.config.properties import BrokerConfig, ConfigError, parse_properties

from . import ClusterError

REPO_ROOT = Path(__file__).resolve().parents[2]
# In a checkout the topologies are the repository's compose/; an installed package (pip install, not
# -e: a user of the pytest plugin) carries a copy as package data (setup.py's build step), and
# RMQHA_COMPOSE_DIR points anywhere else.
BUNDLED_COMPOSE_DIR = Path(__file__).resolve().parent / "compose"
IS_CHECKOUT = (REPO_ROOT / "compose").is_dir() and (REPO_ROOT / "pyproject.toml").is_file()


def compose_dir() -> Path:
    if os.environ.get("RMQHA_COMPOSE_DIR"):
        return Path(os.environ["RMQHA_COMPOSE_DIR"])
    return REPO_ROOT / "compose" if IS_CHECKOUT else BUNDLED_COMPOSE_DIR


COMPOSE_DIR = compose_dir()
TOPOLOGIES = ("2m-2s-async", "2m-2s-sync", "2m-noslave", "dledger")

DEFAULT_BASE_PORT = 10911
DEFAULT_NAMESRV_PORT = 9876
NODE_PORT_STRIDE = 10
NAMESRV_OFFSET = 47
PROXY_OFFSET = 45  # the 5.x gRPC proxy (rmqha/proxy): base + 45, or 5.x's 8081 for the default base port
DEFAULT_PROXY_PORT = 8081
CLUSTER_PORT_SPAN = 50
BLOCK_START = -2  # the block starts at node 0's VIP channel (listenPort - 2)
MAX_NODES = 4  # node 3's ports end at base + 37 (a docker DLedger link: listenPort + 7); base + 46.. are the cluster's

# Keys the tooling sets itself; a conf file must not pin them (the official ones do not).
DEPLOYMENT_KEYS = (
    "listenPort",
    "haListenPort",
    "metricsPort",
    "brokerIP1",
    "namesrvAddr",
    "haMasterAddress",
    "storePathRootDir",
    "dLegerPeers",
)
# A DLedger node's own port (dLegerPeers), free in every node's stride: listenPort + 3.
DLEDGER_PORT_OFFSET = 3


def is_dledger(props: dict) -> bool:
    """A conf file of a DLedger node (enableDLegerCommitLog=true, 4.9's conf/dledger)."""
    return str(props.get("enableDLegerCommitLog", "")).strip().lower() == "true"


# The message index of every broker the tooling starts (both backends). RocketMQ's defaults
# (maxHashSlotNum=5000000, maxIndexNum=20000000) make each index file 420 MB (sparse); a test cluster
# holds far fewer keys: 50000 slots and 200000 items make 4.2 MB files, ~200000 keys each (docs/broker.md,
# "The message index"). `--set` overrides them.
CLUSTER_INDEX_SIZES = {"maxHashSlotNum": "50000", "maxIndexNum": "200000"}


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for outgoing connections' local ports (Linux's default when unreadable)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as fh:
            lo, hi = (int(x) for x in fh.read().split()[:2])
            return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


@dataclass(frozen=True)
class NodeSpec:
    name: str  # broker-a, broker-a-s, ...
    conf_file: Path
    props: dict = field(compare=False, repr=False)
    cluster_name: str
    broker_name: str
    broker_id: int
    role: str
    index: int  # position in the node list; picks the node's port range

    @property
    def is_master(self) -> bool:
        return self.role != "SLAVE"


@dataclass(frozen=True)
class Topology:
    name: str
    directory: Path
    nodes: tuple[NodeSpec, ...]

    def node(self, name: str) -> NodeSpec:
        for n in self.nodes:
            if n.name == name:
                return n
        raise ClusterError(
            f"topology {self.name} has no node {name!r}; nodes: " + ", ".join(n.name for n in self.nodes)
        )

    def master_of(self, node: NodeSpec) -> NodeSpec:
        for n in self.nodes:
            if n.broker_name == node.broker_name and n.broker_id == 0:
                return n
        raise ClusterError(
            f"{node.name}: broker group {node.broker_name} has no master (brokerId=0) in {self.directory}"
        )

    @property
    def masters(self) -> list[NodeSpec]:
        return [n for n in self.nodes if n.is_master]

    @property
    def slaves(self) -> list[NodeSpec]:
        return [n for n in self.nodes if not n.is_master]


def available_topologies(compose_dir: Path = COMPOSE_DIR) -> list[str]:
    if not compose_dir.is_dir():
        return []
    return sorted(d.name for d in compose_dir.iterdir() if d.is_dir() and any(d.glob("broker-*.properties")))


def load_topology(name: str, compose_dir: Path | str = COMPOSE_DIR) -> Topology:
    """Read compose/<name>/broker-*.properties into a validated node list."""
    compose_dir = Path(compose_dir)
    directory = compose_dir / name
    files = sorted(directory.glob("broker-*.properties")) if directory.is_dir() else []
    if not files:
        known = ", ".join(available_topologies(compose_dir)) or "none"
        raise ClusterError(f"unknown topology {name!r}: no broker-*.properties in {directory} (available: {known})")
    raw = []
    for path in files:
        try:
            props = parse_properties(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as e:
            raise ClusterError(f"cannot read {path}: {e}") from e
        pinned = [k for k in DEPLOYMENT_KEYS if k in props]
        if pinned:
            raise ClusterError(
                f"{path} sets {', '.join(pinned)}; these are per-deployment and set by the "
                "cluster tooling: remove them from the file (pass extra keys with --set)"
            )
        try:
            # a DLedger node's peers are per deployment (node_overrides): validated with a stand-in here
            stand_in = (
                {"dLegerPeers": f"{props.get('dLegerSelfId', '').strip()}-127.0.0.1:1"} if is_dledger(props) else {}
            )
            cfg = BrokerConfig.from_properties({**props, **stand_in})
        except ConfigError as e:
            raise ClusterError(f"{path}: {e}") from e
        if not props.get("brokerName"):
            raise ClusterError(f"{path}: brokerName is missing")
        raw.append((path, props, cfg))
    # Masters before their slaves, groups in name order: broker-a, broker-a-s, broker-b, broker-b-s.
    raw.sort(key=lambda t: (t[2].brokerName, t[2].brokerId, t[0].name))
    if len(raw) > MAX_NODES:
        raise ClusterError(f"topology {name} has {len(raw)} brokers; the port plan fits {MAX_NODES}")
    nodes = tuple(
        NodeSpec(
            name=path.name[: -len(".properties")],
            conf_file=path,
            props=props,
            cluster_name=cfg.brokerClusterName,
            broker_name=cfg.brokerName,
            broker_id=cfg.brokerId,
            role=cfg.brokerRole,
            index=i,
        )
        for i, (path, props, cfg) in enumerate(raw)
    )
    topo = Topology(name=name, directory=directory, nodes=nodes)
    seen = {}
    for n in nodes:
        key = (n.broker_name, n.props.get("dLegerSelfId", "").strip() if is_dledger(n.props) else n.broker_id)
        if key in seen:
            raise ClusterError(
                f"{n.conf_file} and {seen[key].conf_file} are both brokerName={n.broker_name} brokerId={n.broker_id}"
            )
        seen[key] = n
        if not n.is_master:
            topo.master_of(n)
    if len({n.cluster_name for n in nodes}) != 1:
        raise ClusterError(
            f"{directory}: brokers disagree on brokerClusterName: " + ", ".join(sorted({n.cluster_name for n in nodes}))
        )
    return topo


@dataclass(frozen=True)
class PortPlan:
    base_port: int
    namesrv_port: int

    @classmethod
    def make(cls, base_port: int | None = None, namesrv_port: int | None = None) -> "PortPlan":
        if base_port is None:
            base_port = int(os.environ.get("CLUSTER_BASE_PORT") or DEFAULT_BASE_PORT)
        if not 1024 <= base_port <= 65535 - CLUSTER_PORT_SPAN:
            raise ClusterError(
                f"base port {base_port} is out of range: pick one in "
                f"1024..{65535 - CLUSTER_PORT_SPAN} (a cluster uses {CLUSTER_PORT_SPAN} ports)"
            )
        if namesrv_port is None:
            namesrv_port = DEFAULT_NAMESRV_PORT if base_port == DEFAULT_BASE_PORT else base_port + NAMESRV_OFFSET
        if not 1 <= namesrv_port <= 65535:
            raise ClusterError(f"name server port {namesrv_port} is out of range 1..65535")
        lo, hi = ephemeral_range()
        first, last = base_port + BLOCK_START, base_port + BLOCK_START + CLUSTER_PORT_SPAN - 1
        if first <= hi and last >= lo or lo <= namesrv_port <= hi:
            # a node restarted by a fault must bind its port again, and an outgoing connection may hold
            # it by then: the restart fails with "Address already in use"
            raise ClusterError(
                f"base port {base_port} (ports {first}..{last}, "
                f"name server {namesrv_port}) overlaps this machine's ephemeral port range "
                f"{lo}..{hi} (/proc/sys/net/ipv4/ip_local_port_range), which outgoing "
                f"connections take ports from: pick a base port below {lo - CLUSTER_PORT_SPAN}, "
                "e.g. 20000"
            )
        return cls(base_port, namesrv_port)

    @property
    def proxy_port(self) -> int:
        return DEFAULT_PROXY_PORT if self.base_port == DEFAULT_BASE_PORT else self.base_port + PROXY_OFFSET

    def block(self) -> range:
        """The cluster's CLUSTER_PORT_SPAN ports: every port a node of it opens, the VIP channel
        (listenPort - 2) and DLedger's included, and the 5.x proxy's, the name server's and the Toxiproxy
        API's (all three elsewhere for the default base port, at their stock ports)."""
        start = self.base_port + BLOCK_START
        return range(start, start + CLUSTER_PORT_SPAN)

    def node_ports(self, node: NodeSpec) -> dict[str, int]:
        listen = self.base_port + NODE_PORT_STRIDE * node.index
        return {"listenPort": listen, "haListenPort": listen + 1, "metricsPort": listen + 2}

    def all_ports(self, topology: Topology) -> list[tuple[str, str, int]]:
        """(owner, what, port) for every port the cluster listens on."""
        out = [("namesrv", "name server port", self.namesrv_port), ("proxy", "5.x gRPC proxy port", self.proxy_port)]
        for n in topology.nodes:
            ports = self.node_ports(n)
            for key, port in ports.items():
                out.append((n.name, key, port))
            out.append((n.name, "VIP channel (listenPort - 2)", ports["listenPort"] - 2))
            if is_dledger(n.props):
                out.append((n.name, "DLedger port (listenPort + 3)", ports["listenPort"] + DLEDGER_PORT_OFFSET))
        ports = [p for _, _, p in out]
        if len(set(ports)) != len(ports):
            raise ClusterError(
                f"port plan collides (base {self.base_port}, name server {self.namesrv_port}); "
                f"choose a name server port outside {self.base_port - 2}..{self.base_port + 37}"
            )
        return out


def add_set_argument(parser, help: str) -> None:
    """The repeatable `--set [NODE:]KEY=VALUE` option that parse_sets reads (the cluster CLI, chaos runs)."""
    parser.add_argument("--set", action="append", default=[], metavar="[NODE:]KEY=VALUE", help=help)


def parse_sets(items: list[str], topology: Topology) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """`--set KEY=VALUE` (every broker) and `--set NODE:KEY=VALUE` (one broker)."""
    common: dict[str, str] = {}
    per_node: dict[str, dict[str, str]] = {}
    names = {n.name for n in topology.nodes}
    for item in items:
        lhs, sep, value = item.partition("=")
        if not sep or not lhs.strip():
            raise ClusterError(f"--set expects KEY=VALUE or NODE:KEY=VALUE, got {item!r}")
        node, colon, key = lhs.strip().rpartition(":")
        if colon:
            if node not in names:
                raise ClusterError(
                    f"--set {item!r}: no node {node!r} in topology {topology.name} (nodes: {', '.join(sorted(names))})"
                )
            per_node.setdefault(node, {})[key.strip()] = value.strip()
        else:
            common[key.strip()] = value.strip()
    return common, per_node


def node_overrides(
    topology: Topology,
    plan: PortPlan,
    *,
    host: str,
    store_dir_of,
    extra: dict[str, str] | None = None,
    extra_per_node: dict[str, dict[str, str]] | None = None,
) -> dict[str, dict[str, str]]:
    """The `--set` keys for every node: ports, addresses, store path, the slave's master address.

    store_dir_of(node_name) gives the node's storePathRootDir. `extra` and `extra_per_node`
    (from --set) come last, so a user can override anything, ports included.
    """
    out: dict[str, dict[str, str]] = {}
    for n in topology.nodes:
        ports = plan.node_ports(n)
        o = {key: str(port) for key, port in ports.items()}
        o["brokerIP1"] = host
        o["metricsBindAddress"] = host  # where the kit reads /status and /metrics, and nowhere else
        o["namesrvAddr"] = f"{host}:{plan.namesrv_port}"
        o["storePathRootDir"] = str(store_dir_of(n.name))
        o.update(CLUSTER_INDEX_SIZES)
        out[n.name] = o
    groups: dict[str, list[NodeSpec]] = {}
    for n in topology.nodes:
        if is_dledger(n.props):
            groups.setdefault(n.props.get("dLegerGroup", "").strip(), []).append(n)
    for members in groups.values():  # each DLedger node's dLegerPeers: the group's nodes at listenPort + 3
        peers = ";".join(
            f"{m.props['dLegerSelfId'].strip()}-{host}:{plan.node_ports(m)['listenPort'] + DLEDGER_PORT_OFFSET}"
            for m in members
        )
        for m in members:
            out[m.name]["dLegerPeers"] = peers
    for n in topology.slaves:
        m = topology.master_of(n)
        # From the master's final overrides, so a --set of the master's haListenPort is followed.
        m_over = {**out[m.name], **(extra or {}), **(extra_per_node or {}).get(m.name, {})}
        # (only its ports are read: haRecoveryEnable would want the haRecoveryPeers filled in below)
        m_cfg = _config_or_error(m, {**m_over, "haRecoveryEnable": "false"})
        out[n.name]["haMasterAddress"] = f"{m_cfg.brokerIP2 or m_cfg.broker_ip}:{m_cfg.ha_port}"
        # where the master fetches from when it recovers after an unclean start (haRecoveryEnable)
        # (read from the keys, not validated here: effective_config reports a bad slave with its name)
        s_over = {**n.props, **out[n.name], **(extra or {}), **(extra_per_node or {}).get(n.name, {})}
        s_ha = s_over.get("haListenPort") or "0"
        listen = s_over.get("listenPort", "10911").strip()
        s_ha = s_ha.strip() if s_ha.strip() not in ("", "0") else (str(int(listen) + 1) if listen.isdigit() else "")
        if s_ha.isdigit():
            peers = out[m.name].get("haRecoveryPeers")
            out[m.name]["haRecoveryPeers"] = ",".join(
                filter(None, [peers, f"{s_over.get('brokerIP1') or host}:{s_ha}"])
            )
    for n in topology.nodes:
        out[n.name].update(extra or {})
        out[n.name].update((extra_per_node or {}).get(n.name, {}))
    return out


def _config_or_error(node: NodeSpec, overrides: dict[str, str]) -> BrokerConfig:
    try:
        return BrokerConfig.from_properties({**node.props, **overrides})
    except ConfigError as e:
        raise ClusterError(
            f"{node.name} ({node.conf_file}) with overrides "
            + " ".join(f"{k}={v}" for k, v in sorted(overrides.items()))
            + f": {e}"
        ) from e


def effective_config(node: NodeSpec, overrides: dict[str, str]) -> BrokerConfig:
    """The broker's configuration as it will run (file + overrides), validated like the broker does."""
    return _config_or_error(node, overrides)


def set_args(overrides: dict[str, str]) -> list[str]:
    """The broker command-line form of the overrides, in a stable order."""
    args: list[str] = []
    for key in sorted(overrides):
        args += ["--set", f"{key}={overrides[key]}"]
    return args
