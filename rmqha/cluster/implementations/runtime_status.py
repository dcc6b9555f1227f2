"""A broker's status from what every 4.9 broker serves: no /status, nothing of ours inside it.

Tests: tests/unit/test_runtime_status.py; tests/integration/test_apache_broker.py against a 4.9.8.

    status, error = read_status(spec, timeout)     # the shape of our /status, as far as 4.9 tells it

Sources, and nothing else:
  - GET_BROKER_RUNTIME_INFO (28): commitLogMaxOffset and commitLogMinOffset (the store's offsets);
  - GET_BROKER_CONFIG (26): brokerRole, brokerId, brokerName, addresses; a DLedger node's role handler
    rewrites brokerRole and brokerId on each election, so these say who leads now: brokerId 0 once it is
    master (changeToMaster), SLAVE as a follower; until its first role event a restarted node keeps its
    file's brokerRole with brokerId -1, shown as CANDIDATE (it may be DLedger leader already, not master);
  - the process (local backend; docker: the broker's process in the node's container, seen in this machine's
    /proc):
    the TCP connections it holds on the HA port, which say whether a slave's HA client is connected and
    how many slaves a master has.
4.9 does not serve a slave's acknowledged offset on the master, a push2SlaveMaxOffset, the HA client's
state, a DLedger term or committed index, the durable (fsynced) offset or the pulls it served. Those are
None here and named in status["unavailable"]; the table and the sampler print "unavailable", never 0.
A slave's currentReportedOffset is its commitLogMaxOffset: what a 4.9 slave reports to its master.
"""

from __future__ import annotations

import os

from rmqha.broker.config.properties import parse_properties
from rmqha.broker.remoting import json_body
from rmqha.broker.remoting.codes import RequestCode

from .. import ClusterError

UNAVAILABLE_MASTER = ("ha.slaves[].slaveAckOffset", "ha.push2SlaveMaxOffset")
UNAVAILABLE_COMMON = ("durableOffset", "served pulls")
UNAVAILABLE_DLEDGER = ("dledger.term", "dledger.leaderId", "dledger.committedIndex", "dledger.endIndex")


def runtime_info(addr: str, timeout: float, credentials: dict | None = None) -> dict[str, str]:
    """GET_BROKER_RUNTIME_INFO's table ({"table": {key: value}} in the body)."""
    from ..status import NamesrvError, namesrv_request

    r = namesrv_request(addr, RequestCode.GET_BROKER_RUNTIME_INFO, timeout=timeout, credentials=credentials)
    if r.code != 0 or not r.body:
        raise NamesrvError(f"{addr}: GET_BROKER_RUNTIME_INFO answered code {r.code} {r.remark or ''}")
    try:
        table = json_body.loads(r.body).get("table")
    except (ValueError, AttributeError) as e:
        raise NamesrvError(f"{addr}: runtime info is not a KVTable: {e}") from e
    return {str(k): str(v) for k, v in (table or {}).items()}


def broker_config(addr: str, timeout: float, credentials: dict | None = None) -> dict[str, str]:
    """GET_BROKER_CONFIG's body: every setting as a properties text."""
    from ..status import NamesrvError, namesrv_request

    r = namesrv_request(addr, RequestCode.GET_BROKER_CONFIG, timeout=timeout, credentials=credentials)
    if r.code != 0 or r.body is None:
        raise NamesrvError(f"{addr}: GET_BROKER_CONFIG answered code {r.code} {r.remark or ''}")
    return parse_properties(r.body.decode("utf-8", "replace"))


def _int(v) -> int | None:
    try:
        return int(str(v).strip())
    except (TypeError, ValueError):
        return None


# ---- the process: TCP connections on the HA port --------------------------------------------------


def _socket_inodes(pid: int) -> set[str]:
    out = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                out.add(link[8:-1])
    except OSError:
        pass
    return out


def _hex_port(endpoint: str) -> int:
    return int(endpoint.rpartition(":")[2], 16)


def established(pid: int) -> list[tuple[int, int]] | None:
    """(local port, remote port) of every ESTABLISHED TCP connection the process holds; None when the
    process cannot be read (gone, or not on this machine)."""
    inodes = _socket_inodes(pid)
    if not inodes and not os.path.isdir(f"/proc/{pid}"):
        return None
    out = []
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if len(f) > 9 and f[3] == "01" and f[9] in inodes:  # 01: ESTABLISHED
                out.append((_hex_port(f[1]), _hex_port(f[2])))
    return out


def ha_links(pid: int | None, *, serving_port: int | None = None, master_port: int | None = None) -> int | None:
    """Connections the process holds as an HA master (accepted on serving_port) or as a slave (to
    master_port); None when unknown."""
    if not pid:
        return None
    conns = established(pid)
    if conns is None:
        return None
    if serving_port is not None:
        return sum(1 for local, _ in conns if local == serving_port)
    return sum(1 for _, remote in conns if remote == master_port)


# ---- the status ----------------------------------------------------------------------------------


def build_status(spec: dict, info: dict[str, str], config: dict[str, str], pid: int | None, links) -> dict:
    """Our /status's shape from a 4.9 broker's runtime info and config. links(kwargs) counts HA links."""
    role = config.get("brokerRole") or spec.get("role")
    bid = _int(config.get("brokerId"))
    ip = config.get("brokerIP1") or spec.get("addr", ":").rpartition(":")[0]
    listen = _int(config.get("listenPort"))
    ha_port = listen + 1 if listen else None  # 4.9's BrokerStartup: haListenPort = listenPort + 1, always
    unavailable = list(UNAVAILABLE_COMMON)
    s = {
        "implementation": spec.get("implementation", "apache"),
        "brokerName": config.get("brokerName") or spec.get("brokerName"),
        "brokerId": bid if bid is not None else spec.get("brokerId"),
        "clusterName": config.get("brokerClusterName") or spec.get("clusterName"),
        "role": role,
        "addr": f"{ip}:{listen}" if listen else spec.get("addr"),
        "haAddr": f"{config.get('brokerIP2') or ip}:{ha_port}" if ha_port else spec.get("haAddr"),
        "maxPhyOffset": _int(info.get("commitLogMaxOffset")),
        "minPhyOffset": _int(info.get("commitLogMinOffset")),
        "brokerVersion": info.get("brokerVersionDesc"),
        "pid": pid,
    }
    if str(config.get("enableDLegerCommitLog", "")).lower() == "true":
        s["dledger"] = {
            "role": "FOLLOWER" if role == "SLAVE" else ("LEADER" if bid == 0 else "CANDIDATE"),
            "selfId": config.get("dLegerSelfId"),
            "term": None,
            "leaderId": None,
            "committedIndex": None,
            "endIndex": None,
        }
        unavailable += UNAVAILABLE_DLEDGER
    elif role == "SLAVE":
        master = config.get("haMasterAddress") or ""
        n = links(master_port=_int(master.rpartition(":")[2])) if master else None
        state = None if n is None else ("CONNECTED" if n else "READY")
        s["haClient"] = {
            "state": state,
            "haMasterAddress": master or None,
            "currentReportedOffset": s["maxPhyOffset"],
        }
        if state is None:
            unavailable.append("haClient.state")
    else:
        n = links(serving_port=ha_port) if ha_port else None
        s["ha"] = {"connectionCount": n, "push2SlaveMaxOffset": None, "slaves": None}
        unavailable += UNAVAILABLE_MASTER
        if n is None:
            unavailable.append("ha.connectionCount")
    s["unavailable"] = unavailable
    return s


def read_status(spec: dict, timeout: float, credentials: dict | None = None) -> tuple[dict | None, str | None]:
    """(status, None) or (None, why): a 4.9 broker's status from its admin API and its process."""
    from ..status import NamesrvError

    addr = spec.get("adminAddr") or spec.get("addr")
    try:
        info = runtime_info(addr, timeout, credentials)
        config = broker_config(addr, timeout, credentials)
    except NamesrvError as e:
        return None, str(e)
    pid = (spec.get("process") or {}).get("pid")
    if pid is None and spec.get("composeProject"):  # docker: the JVM in the node's container
        from ..docker_backend import container_broker_pid

        try:
            pid = container_broker_pid(
                spec["composeProject"], spec.get("service") or spec["name"], spec.get("implementation", "apache")
            )
        except ClusterError:
            pid = None  # the engine does not answer: the HA connections are unavailable, not zero

    def links(**kw):
        return ha_links(pid, **kw)

    return build_status(spec, info, config, pid, links), None
