"""What the cluster is doing now: each broker's /status, its process, and the name server's view.

`collect()` returns a ClusterStatus; `node_json()` is the per-node JSON object of
`python -m rmqha.cluster status --format json` (one object per line); `render_table()` is the table.
"""

from __future__ import annotations

import json
import socket
import struct
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from rmqha.broker.remoting import json_body
from rmqha.broker.remoting.codec import decode_frame, encode
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand

from .backend import Backend

HTTP_TIMEOUT = 1.0
# Another broker's status is two admin requests, slower than our /status: rocketmq-rust 1.0.0 took 140-640 ms
# for GET_BROKER_RUNTIME_INFO on an idle broker at load 7 (2026-11-29) and over 1 s under load, so with
# HTTP_TIMEOUT the kit saw working nodes as not answering (a restarted slave's heal waited 53-83 s, a
# cluster's start failed after 300 s at load 12). A slow answer is an answer: this is their floor.
OTHER_BROKER_TIMEOUT = 5.0
NAMESRV_TIMEOUT = 1.0


# ---- the name server: a blocking one-request client --------------------------------------------


class NamesrvError(Exception):
    pass


def namesrv_request(
    endpoint: str,
    code: int,
    ext_fields: dict | None = None,
    timeout: float = NAMESRV_TIMEOUT,
    credentials: dict | None = None,
) -> RemotingCommand:
    """One request, one reply, on a fresh connection (name server or broker). credentials: a cluster's
    "acl" entry of state.json ({"accessKey", "secretKey"}): the request is signed as a client's ACL
    hook signs it (a cluster started with --acl refuses the kit's requests otherwise)."""
    host, _, port = endpoint.rpartition(":")
    req = RemotingCommand.request(code, ext_fields, opaque=1)
    if credentials:
        from rmqha.broker.acl.rules import sign_request

        sign_request(req, credentials["accessKey"], credentials["secretKey"])
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(encode(req))
            head = _recv_exact(s, 4)
            (length,) = struct.unpack(">I", head)
            if length > 64 << 20:
                raise NamesrvError(f"{endpoint}: reply frame of {length} bytes is not plausible")
            return decode_frame(_recv_exact(s, length))
    except OSError as e:
        raise NamesrvError(f"{endpoint}: {e.strerror or e}") from e
    except ValueError as e:  # FrameError and friends
        raise NamesrvError(f"{endpoint}: bad reply: {e}") from e


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise NamesrvError("connection closed before the reply was complete")
        buf += chunk
    return bytes(buf)


def cluster_info(endpoint: str, timeout: float = NAMESRV_TIMEOUT) -> dict:
    """GET_BROKER_CLUSTER_INFO (106): {"brokerAddrTable": {...}, "clusterAddrTable": {...}}."""
    resp = namesrv_request(endpoint, RequestCode.GET_BROKER_CLUSTER_INFO, timeout=timeout)
    if resp.code != ResponseCode.SUCCESS:
        raise NamesrvError(f"{endpoint}: GET_BROKER_CLUSTER_INFO answered code {resp.code} {resp.remark or ''}")
    try:
        return json_body.loads(resp.body) if resp.body else {}
    except ValueError as e:
        raise NamesrvError(f"{endpoint}: cluster info body is not JSON: {e}") from e


def registered_addrs(info: dict) -> dict[tuple[str, int], str]:
    """(brokerName, brokerId) -> addr, from a cluster info body."""
    out = {}
    for name, bd in (info.get("brokerAddrTable") or {}).items():
        for bid, addr in (bd.get("brokerAddrs") or {}).items():
            try:
                out[(bd.get("brokerName") or name, int(bid))] = addr
            except (TypeError, ValueError):
                continue
    return out


# ---- one node ----------------------------------------------------------------------------------


def fetch_status(url: str, timeout: float = HTTP_TIMEOUT) -> tuple[dict | None, str | None]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return json.loads(r.read().decode("utf-8")), None
    except urllib.error.HTTPError as e:
        return None, f"HTTP {e.code} from {url}"
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        return None, f"{url}: {getattr(reason, 'strerror', None) or reason}"
    except ValueError as e:
        return None, f"{url}: not JSON ({e})"


def node_status(spec: dict, timeout: float = HTTP_TIMEOUT, credentials: dict | None = None):
    """(status, error) of one node: our broker's /status, or for another implementation (Apache's 4.9,
    rocketmq-rust's) what every 4.9 broker serves (rmqha/cluster/implementations/runtime_status.py)."""
    if spec.get("implementation", "ours") == "ours":
        return fetch_status(spec["statusUrl"], timeout)
    from .implementations.runtime_status import read_status

    return read_status(spec, max(timeout, OTHER_BROKER_TIMEOUT), credentials)


def unavailable(status: dict | None, key: str) -> bool:
    """Whether the broker cannot tell this figure (a 4.9 broker has no slave acks, HA state, ...)."""
    return bool(status) and key in (status.get("unavailable") or ())


@dataclass
class NodeStatus:
    spec: dict  # the node's entry in state.json
    process: str = "unknown"  # running / exited / stopped / not started
    running: bool = False
    status: dict | None = None  # the broker's /status, when it answered
    error: str | None = None  # why /status did not answer
    registered: bool | None = None  # None: the name server did not answer
    registered_id: int | None = None  # a DLedger node: the brokerId the name server has its address under

    @property
    def name(self) -> str:
        return self.spec["name"]

    @property
    def up(self) -> bool:
        return self.status is not None

    @property
    def role(self) -> str:
        return (self.status or {}).get("role") or self.spec.get("role", "?")

    @property
    def is_master(self) -> bool:
        return self.role != "SLAVE"

    @property
    def max_offset(self) -> int | None:
        return (self.status or {}).get("maxPhyOffset")

    @property
    def is_dledger(self) -> bool:
        """A node of a DLedger group (enableDLegerCommitLog=true): its role and id come from elections."""
        return is_dledger_spec(self.spec) or "dledger" in (self.status or {})

    @property
    def dledger(self) -> dict:
        """The broker's DLedger state from /status: role, term, leaderId, committedIndex, endIndex, ..."""
        return (self.status or {}).get("dledger") or {}

    @property
    def broker_id(self) -> int | None:
        """The id the broker has now (/status), else the planned one."""
        bid = (self.status or {}).get("brokerId", self.spec.get("brokerId"))
        return int(bid) if bid is not None else None


def is_dledger_spec(spec: dict) -> bool:
    """A state.json node entry of a DLedger node: its overrides carry dLegerPeers."""
    return bool(spec.get("dledger")) or "dLegerPeers" in (spec.get("overrides") or {})


@dataclass
class ClusterStatus:
    state: dict
    nodes: list[NodeStatus]
    namesrv_endpoint: str | None = None
    namesrv_process: str = "unknown"
    namesrv_up: bool = False
    namesrv_error: str | None = None
    namesrv_info: dict = field(default_factory=dict)
    # the 5.x gRPC proxy (rmqha/proxy): its client endpoint and its process, when the cluster has one
    proxy_endpoint: str | None = None
    proxy_process: str = "unknown"

    def proxy_json(self) -> dict | None:
        return None if self.proxy_endpoint is None else {"endpoint": self.proxy_endpoint, "process": self.proxy_process}

    def node(self, name: str) -> NodeStatus | None:
        return next((n for n in self.nodes if n.name == name), None)

    def master_of(self, n: NodeStatus) -> NodeStatus | None:
        return self.node(n.spec.get("master")) if n.spec.get("master") else None

    def registered_count(self) -> int:
        return sum(1 for n in self.nodes if n.registered)

    def dledger_group(self, n: NodeStatus) -> list[NodeStatus]:
        """The DLedger nodes of n's brokerName (n included)."""
        return [o for o in self.nodes if o.is_dledger and o.spec.get("brokerName") == n.spec.get("brokerName")]

    def dledger_leader(self, n: NodeStatus) -> NodeStatus | None:
        """The node of n's group that the name server names master (brokerId 0), if any."""
        return next((o for o in self.dledger_group(n) if o.registered_id == 0), None)


def collect(
    state: dict, backend: Backend | None = None, *, with_namesrv: bool = True, timeout: float = HTTP_TIMEOUT
) -> ClusterStatus:
    """One round of observation: /status of every node (in parallel), processes, the name server."""
    specs = state.get("nodes", [])
    nodes = [NodeStatus(spec=s) for s in specs]
    cs = ClusterStatus(state=state, nodes=nodes, namesrv_endpoint=(state.get("namesrv") or {}).get("endpoint"))

    def probe_namesrv():
        if not (with_namesrv and cs.namesrv_endpoint):
            return
        try:
            cs.namesrv_info = cluster_info(cs.namesrv_endpoint, timeout)
            cs.namesrv_up = True
        except NamesrvError as e:
            cs.namesrv_error = str(e)

    with ThreadPoolExecutor(max_workers=len(nodes) + 1) as pool:
        futures = [pool.submit(node_status, s, timeout, state.get("acl")) for s in specs]
        ns_future = pool.submit(probe_namesrv)
        for n, f in zip(nodes, futures):
            n.status, n.error = f.result()
        ns_future.result()

    if backend is not None:
        for n in nodes:
            ps = backend.process_state(n.name)
            n.running, n.process = ps.running, ps.detail
        ps = backend.process_state("namesrv")
        cs.namesrv_process = ps.detail
    cs.proxy_endpoint = (state.get("proxy") or {}).get("endpoint")
    if backend is not None and cs.proxy_endpoint:
        try:
            cs.proxy_process = backend.process_state("proxy").detail
        except Exception:  # a backend that does not run it as a process of its own
            pass
    if cs.namesrv_up:
        reg = registered_addrs(cs.namesrv_info)
        for n in nodes:
            if n.is_dledger:  # registered under whichever id its role gives it (0 leader, selfId + 1)
                ids = sorted(
                    bid
                    for (bname, bid), addr in reg.items()
                    if bname == n.spec["brokerName"] and addr == n.spec.get("addr")
                )
                n.registered_id = ids[0] if ids else None
                n.registered = bool(ids)
            else:
                n.registered = (n.spec["brokerName"], int(n.spec["brokerId"])) in reg
    return cs


# ---- JSON --------------------------------------------------------------------------------------


def node_json(cs: ClusterStatus, n: NodeStatus) -> dict:
    s = n.status or {}
    spec = n.spec
    out = {
        "name": n.name,
        "brokerName": s.get("brokerName", spec.get("brokerName")),
        "brokerId": s.get("brokerId", spec.get("brokerId")),
        "role": n.role,
        "clusterName": s.get("clusterName", spec.get("clusterName")),
        "addr": s.get("addr", spec.get("addr")),
        "haAddr": s.get("haAddr", spec.get("haAddr")),
        "maxPhyOffset": n.max_offset,
        "metricsUrl": spec.get("metricsUrl"),
        "statusUrl": spec.get("statusUrl"),
        "up": n.up,
        "process": n.process,
        "pid": s.get("pid", (spec.get("process") or {}).get("pid")),
        "registered": n.registered,
        "error": n.error if not n.up else None,
        "implementation": spec.get("implementation", "ours"),
    }
    if s.get("unavailable"):
        out["unavailable"] = list(s["unavailable"])
    if n.is_dledger:
        d = n.dledger
        out["registeredId"] = n.registered_id
        out["dledger"] = {
            k: d.get(k) for k in ("role", "term", "leaderId", "selfId", "committedIndex", "endIndex", "dispatchedIndex")
        }
        leader = cs.dledger_leader(n)
        lc, mc = leader.dledger.get("committedIndex") if leader else None, d.get("committedIndex")
        out["dledger"]["lagEntries"] = lc - mc if lc is not None and mc is not None else None
        return out
    if n.is_master:
        ha = s.get("ha") or {}
        out["push2SlaveMaxOffset"] = ha.get("push2SlaveMaxOffset")
        out["connectionCount"] = ha.get("connectionCount")
        out["slaves"] = (
            None
            if unavailable(s, "ha.slaves[].slaveAckOffset")
            else [
                {
                    "addr": sl.get("addr"),
                    "ackOffset": sl.get("slaveAckOffset"),
                    "lagBytes": sl.get("lagBytes"),
                    "state": sl.get("state"),
                    "problem": sl.get("problem"),
                }
                for sl in ha.get("slaves") or []
            ]
        )
    else:
        hc = s.get("haClient") or {}
        m = cs.master_of(n)
        reported = hc.get("currentReportedOffset")
        out["master"] = spec.get("master")
        out["haClient"] = {
            "state": hc.get("state"),
            "haMasterAddress": hc.get("haMasterAddress"),
            "reportedOffset": reported,
        }
        mo = m.max_offset if m else None
        out["lagBytes"] = mo - reported if mo is not None and reported is not None and reported >= 0 else None
    return out


def render_json(cs: ClusterStatus) -> str:
    """One line per node; "proxy" on each is the cluster's 5.x gRPC proxy (null when it has none)."""
    return "".join(json.dumps({**node_json(cs, n), "proxy": cs.proxy_json()}, sort_keys=False) + "\n" for n in cs.nodes)


# ---- the table ---------------------------------------------------------------------------------

COLUMNS = ("NODE", "ROLE", "ID", "ADDR", "HA ADDR", "PID", "STATE", "REG", "MAXPHYOFFSET", "REPLICATION")


def _reg(v: bool | None) -> str:
    return "-" if v is None else ("yes" if v else "no")


def _replication(cs: ClusterStatus, n: NodeStatus) -> str:
    j = node_json(cs, n)
    if not n.up:
        return ""
    if n.is_dledger:
        d = j["dledger"]
        if unavailable(n.status, "dledger.committedIndex"):
            return f"DLedger {d['role']}; term and committed index unavailable ({j['implementation']})"
        text = f"DLedger {d['role']} term {d['term']} committed {d['committedIndex']} end {d['endIndex']}" + (
            f" leader {d['leaderId']}" if d["leaderId"] and d["role"] != "LEADER" else ""
        )
        if d["lagEntries"] and d["role"] != "LEADER":
            text += f" lag {d['lagEntries']}"
        return text
    if n.is_master:
        slaves = j["slaves"]
        if slaves is None:  # a 4.9 broker does not serve its slaves' acks: say so, never 0
            count = j.get("connectionCount")
            return f"{'?' if count is None else count} HA connection(s); slave acks unavailable ({j['implementation']})"
        if not slaves:
            return (
                "no slave connected"
                if cs.state and any(s.get("master") == n.name for s in cs.state.get("nodes", []))
                else "-"
            )
        parts = []
        for sl in slaves:
            ack = sl["ackOffset"]
            lag = (n.max_offset - ack) if (ack is not None and ack >= 0 and n.max_offset is not None) else None
            parts.append(
                f"{sl['addr']} ack {ack}"
                + (f" lag {lag}" if lag is not None else "")
                + (f" [{sl['problem']}]" if sl.get("problem") else "")
            )
        return "; ".join(parts)
    hc = j["haClient"]
    state = "state unavailable" if hc["state"] is None and unavailable(n.status, "haClient.state") else hc["state"]
    text = f"{state} reported {hc['reportedOffset']}"
    if j["lagBytes"] is not None:
        text += f" lag {j['lagBytes']}"
    return text


def table_rows(cs: ClusterStatus) -> list[tuple[str, ...]]:
    rows = []
    for n in cs.nodes:
        j = node_json(cs, n)
        state = "up" if n.up else ("unreachable" if n.running else n.process)
        rows.append(
            (
                n.name,
                j["role"] or "?",
                str(j["brokerId"]),
                j["addr"] or "",
                j["haAddr"] or "",
                str(j["pid"] or "-"),
                state,
                _reg(n.registered),
                "-" if n.max_offset is None else str(n.max_offset),
                _replication(cs, n),
            )
        )
    return rows


def format_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = []
    for r in [header, *rows]:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return "\n".join(lines) + "\n"


def render_table(cs: ClusterStatus) -> str:
    st = cs.state
    head = (
        f"cluster {st.get('name')}  topology {st.get('topology')}  backend {st.get('backend')}  run {st.get('runDir')}"
    )
    if st.get("broker") not in (None, "ours"):
        head += f"  broker {st['broker']}"
    if st.get("stoppedAt"):
        head += "  (stopped)"
    if cs.namesrv_up:
        ns = f"name server {cs.namesrv_endpoint}: up, {cs.registered_count()}/{len(cs.nodes)} brokers registered"
    else:
        ns = f"name server {cs.namesrv_endpoint}: {cs.namesrv_process}" + (
            f", not answering ({cs.namesrv_error})" if cs.namesrv_error else ""
        )
    if cs.proxy_endpoint:
        ns += f"\n5.x gRPC proxy {cs.proxy_endpoint}: {cs.proxy_process}"
    out = head + "\n" + ns + "\n" + format_table(COLUMNS, table_rows(cs))
    for n in cs.nodes:
        if not n.up and n.error and n.running:
            out += f"  {n.name}: {n.error}\n"
    return out
