"""`python -m rmqha.cluster sample`: replication offsets every N ms into RUN_DIR/metrics/samples.jsonl.

One line per node per round:
    {"ts": 1763770000.123, "node": "broker-a", "brokerName": "broker-a", "brokerId": 0,
     "role": "SYNC_MASTER", "up": true, "maxPhyOffset": 4096,
     "slaves": [{"addr": "127.0.0.1:53012", "ackOffset": 4096}],
     "consumerOffsets": {"TopicChaos@ChaosCG1": {"0": 120, "1": 118}}}      (masters)
    {..., "role": "SLAVE", "maxPhyOffset": 4096, "reportedOffset": 4096,
     "haState": "CONNECTED", "master": "broker-a"}                            (slaves)
    {..., "dledger": {"role": "LEADER", "term": 2, "selfId": "n1", "leaderId": "n1", "committedIndex": 812,
     "endIndex": 812}}                                                    (DLedger nodes, besides the above)
ts is the Unix time (seconds, float) when the round started; a node that did not answer has
"up": false and null offsets.

Beside it, RUN_DIR/served/pulls.jsonl: every pull each node answered with messages (its /served log,
rmqha/broker/observability/served.py), one line per pull, read incrementally each round:
    {"node": "broker-a-s", "brokerName": "broker-a", "brokerId": 1, "incarnation": 1763770000123,
     "seq": 7, "ts_ms": 1763770001234, "group": "ChaosCG1", "topic": "ChaosTopic", "queueId": 3,
     "from": 120, "next": 152, "messages": 32}
and {"node": ..., "incarnation": ..., "dropped": N} when N entries left a node's ring unread. Pulls a
node answered after the last round before it died are not in the file. A SIGTERM ends the sampler
after one last round, so a caller that stops it while the nodes are still up loses nothing.
"""

from __future__ import annotations

import json
import signal
import threading
import time
import urllib.parse
from pathlib import Path

from .backend import Backend
from .status import collect, fetch_status, unavailable


def sample_rows(state: dict, ts: float) -> list[dict]:
    cs = collect(state, None, with_namesrv=False, timeout=0.5)
    rows = []
    for n in cs.nodes:
        s = n.status or {}
        row = {
            "ts": round(ts, 3),
            "node": n.name,
            "brokerName": n.spec.get("brokerName"),
            "brokerId": n.spec.get("brokerId"),
            "role": n.role,
            "up": n.up,
            "maxPhyOffset": n.max_offset,
        }
        if n.is_dledger and n.up:  # who leads, and each member's committed index (the matrix's failover, recovery)
            row["dledger"] = {
                k: n.dledger.get(k) for k in ("role", "term", "selfId", "leaderId", "committedIndex", "endIndex")
            }
        if s.get("unavailable"):
            row["unavailable"] = list(s["unavailable"])  # figures this broker does not serve (4.9): not 0
        if n.is_master:
            row["slaves"] = (
                None
                if unavailable(s, "ha.slaves[].slaveAckOffset")
                else [
                    {"addr": sl.get("addr"), "ackOffset": sl.get("slaveAckOffset")}
                    for sl in (s.get("ha") or {}).get("slaves") or []
                ]
            )
            if n.up and n.spec.get("addr"):
                row["consumerOffsets"] = consumer_offsets(n.spec["addr"], credentials=state.get("acl"))
        else:
            hc = s.get("haClient") or {}
            row.update(
                reportedOffset=hc.get("currentReportedOffset"), haState=hc.get("state"), master=n.spec.get("master")
            )
        rows.append(row)
    return rows


def consumer_offsets(
    addr: str, timeout: float = 0.5, credentials: dict | None = None
) -> dict[str, dict[str, int]] | None:
    """The master's committed consumer offsets, {"topic@group": {"queue id": offset}}, by
    GET_ALL_CONSUMER_OFFSET (what 4.9 slaves copy); None when it does not answer. The audit looks for a
    group's committed offset moving back (rmqha/pipeline/offsets.py)."""
    from rmqha.broker.remoting import json_body
    from rmqha.broker.remoting.codes import RequestCode

    from .status import NamesrvError, namesrv_request

    try:
        r = namesrv_request(addr, RequestCode.GET_ALL_CONSUMER_OFFSET, timeout=timeout, credentials=credentials)
        table = json_body.loads(r.body).get("offsetTable") if r.code == 0 and r.body else None
    except (NamesrvError, ValueError, AttributeError):
        return None
    if not isinstance(table, dict):
        return None
    return {str(k): {str(q): int(o) for q, o in (v or {}).items()} for k, v in table.items()}


def served_url(status_url: str, after: int) -> str:
    parts = urllib.parse.urlsplit(status_url)
    return urllib.parse.urlunsplit(parts._replace(path="/served", query=f"after={after}"))


class ServedReader:
    """Reads every node's /served log from where it left off; a new incarnation starts from 0."""

    def __init__(self, state: dict):
        # only our broker keeps a /served log; another implementation's pulls are not observable
        self.specs = [s for s in state.get("nodes", []) if s.get("implementation", "ours") == "ours"]
        self.at: dict[str, tuple[int, int]] = {}  # node -> (incarnation, last seq read)

    def rows(self, timeout: float = 0.5) -> list[dict]:
        rows = []
        for spec in self.specs:
            name = spec["name"]
            inc, last = self.at.get(name, (None, 0))
            for _ in range(20):  # a node with a large backlog is read in pages of 10000
                got, _err = fetch_status(served_url(spec["statusUrl"], last), timeout)
                if not got:
                    break
                if got.get("incarnation") != inc:
                    if inc is not None or last:
                        inc, last = got.get("incarnation"), 0
                        continue  # a restarted node: read its new log from the start
                    inc = got.get("incarnation")
                base = {
                    "node": name,
                    "brokerName": spec.get("brokerName"),
                    "brokerId": spec.get("brokerId"),
                    "incarnation": inc,
                }
                if got.get("dropped"):
                    rows.append(base | {"dropped": got["dropped"]})
                for seq, ts_ms, group, topic, qid, frm, nxt, n in got.get("ranges") or []:
                    rows.append(
                        base
                        | {
                            "seq": seq,
                            "ts_ms": ts_ms,
                            "group": group,
                            "topic": topic,
                            "queueId": qid,
                            "from": frm,
                            "next": nxt,
                            "messages": n,
                        }
                    )
                    last = seq
                if last >= int(got.get("last") or 0):
                    break
            self.at[name] = (inc, last)
        return rows


class _Stopped(Exception):
    pass


def _stop(_signum, _frame):
    raise _Stopped()


def run_sampler(
    state: dict,
    backend: Backend | None,
    path: Path,
    *,
    interval_ms: int = 1000,
    duration: float | None = None,
    count: int | None = None,
    out=None,
    served_path: Path | None = None,
) -> int:
    """Append samples (and, with served_path, the nodes' served pulls) until duration/count is reached,
    Ctrl-C or SIGTERM. Returns the number of rounds."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if served_path is not None:
        served_path.parent.mkdir(parents=True, exist_ok=True)
    interval = interval_ms / 1000.0
    start = time.monotonic()
    rounds = 0
    next_at = start
    served = ServedReader(state) if served_path is not None else None
    served_fh = open(served_path, "a") if served_path is not None else None

    def read_served():
        if served is None:
            return
        for row in served.rows():
            served_fh.write(json.dumps(row) + "\n")
        served_fh.flush()

    main = threading.current_thread() is threading.main_thread()  # signal handlers live there only
    previous = signal.signal(signal.SIGTERM, _stop) if main else None
    try:
        with open(path, "a") as fh:
            try:
                while True:
                    ts = time.time()
                    for row in sample_rows(state, ts):
                        fh.write(json.dumps(row) + "\n")
                    fh.flush()
                    read_served()
                    rounds += 1
                    if count is not None and rounds >= count:
                        break
                    next_at += interval
                    if duration is not None and next_at - start > duration:
                        break
                    time.sleep(max(0.0, next_at - time.monotonic()))
            except (KeyboardInterrupt, _Stopped):
                if main:
                    signal.signal(signal.SIGTERM, signal.SIG_IGN)
                read_served()  # the pulls answered since the last round: the nodes are still up
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)
        if served_fh is not None:
            served_fh.close()
    if out is not None:
        out.write(
            f"{rounds} rounds written to {path}" + (f", served pulls to {served_path}" if served_path else "") + "\n"
        )
    return rounds
