"""Repair a forked broker group: put the slave's stranded messages back on the master, then resync the slave.

    python -m rmqha.cluster repair broker-a [--name NAME]      (make repair GROUP=broker-a)

A master that comes back behind its slave (a power loss with an unflushed tail) takes new writes at
offsets its slave already holds: the logs fork, the slave is SLAVE_AHEAD and never replicated again,
and every acknowledged message that only the slave holds is stranded: stored, but no consumer served
by the master can get it. The default broker leaves that to an operator (4.9 does the same, worse:
see docs/ha-protocol.md §9). This is the operator's tool:

1. stop the slave; find the fork: the first record of the slave's log that the master does not hold
   byte for byte at the same offset;
2. every message the slave holds from the fork on that the master does not hold is sent to the master
   again (SEND_MESSAGE) with its original topic, queue id, flag, sysFlag, born timestamp, body and
   properties (KEYS, TAGS, UNIQ_KEY...: consumers can deduplicate) plus REPAIR_OF=<slave>@<offset>:
   delayed messages to their real topic with their DELAY level, retry messages to their retry topic,
   unresolved transaction halves as halves (rmqha/cluster/repair_plan.py says how each kind is put back).
   A record that cannot be put back (a topic no client may send to) stops the repair before anything
   is sent, naming it; any answer but SUCCESS / FLUSH_*_TIMEOUT / SLAVE_NOT_AVAILABLE (all three
   mean stored on the master) aborts before anything is truncated;
3. the master's log is read again: every re-sent message must be there (its REPAIR_OF tag with the
   same body CRC, KEYS and topic, UNIQ_KEY or not), else nothing is truncated;
4. only then the slave's log is cut at the fork (its consume queues drop what pointed past it when
   it recovers), and the slave starts, reports the fork offset, and copies the master from there.

Transaction op records and prepared / rolled-back records are not re-sent (nothing reads them as
messages); they are counted in the result. Running it twice re-sends nothing the master already holds.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import ClusterError

from .repair_plan import PRODUCER_GROUP, missing, plan

STORED = {0: "SUCCESS", 10: "FLUSH_DISK_TIMEOUT", 12: "FLUSH_SLAVE_TIMEOUT", 11: "SLAVE_NOT_AVAILABLE"}


@dataclass
class RepairResult:
    group: str
    master: str
    slave: str
    fork: int | None = None  # None: the logs do not fork, nothing to do
    slave_end: int = 0
    stranded: int = 0  # messages the slave holds from the fork on: resent + already_on_master
    resent: int = 0
    resent_by_kind: dict = field(default_factory=dict)  # message / retry / delayed / half -> count
    already_on_master: int = 0
    skipped: dict = field(default_factory=dict)  # not re-sent, nothing lost: why -> count
    truncated_bytes: int = 0
    caught_up_s: float | None = None

    def to_json(self) -> dict:
        return asdict(self)


# -- reading a commit log (the record layout is rmqha/broker/store/record.py's) ---------------------------


def records(commitlog: Path, start: int = 0):
    """(offset, Message, raw bytes) of every message from `start` on, file after file (mapped, not read
    whole); stops at the written end. The files may be growing (the master runs): what is there is read."""
    import mmap

    from rmqha.broker.store.mapped_file import list_files
    from rmqha.broker.store.record import Scan, scan

    for base, path in list_files(str(commitlog)):
        with open(path, "rb") as fh:
            size = fh.seek(0, 2)
            if base + size <= start or size == 0:
                continue
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
                pos = 0
                while pos < size:
                    r = scan(data, pos)
                    if r.kind == Scan.MESSAGE:
                        if base + pos >= start:
                            yield base + pos, r.message, data[pos : pos + r.size]
                        pos += r.size
                    elif r.kind == Scan.BLANK:
                        break
                    else:
                        return  # the written end (zeros) or a torn tail


def find_fork(master_log: Path, slave_log: Path) -> tuple[int | None, int]:
    """(fork offset or None, slave end): the first slave record the master does not hold byte for byte
    at the same offset. Both logs are walked side by side in offset order."""
    mit = records(master_log)
    cur = next(mit, None)
    fork, end = None, 0
    for off, _m, raw in records(slave_log):
        end = off + len(raw)
        if fork is not None:
            continue
        while cur is not None and cur[0] < off:
            cur = next(mit, None)
        if cur is None or cur[0] != off or cur[2] != raw:
            fork = off
    return fork, end


# -- one blocking producer connection -------------------------------------------------------------


class Sender:
    def __init__(self, addr: str, timeout: float = 10.0, credentials: dict | None = None):
        host, _, port = addr.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.opaque = 0
        self.credentials = credentials  # a cluster started with --acl: every send is signed

    def close(self) -> None:
        self.sock.close()

    def send(self, m, extra_props: dict[str, str] | None = None, producer_group: str = PRODUCER_GROUP) -> int:
        from rmqha.broker.remoting.codec import decode_frame, encode
        from rmqha.broker.remoting.codes import RequestCode
        from rmqha.broker.remoting.command import RemotingCommand
        from rmqha.broker.store.record import encode_properties

        props = dict(m.properties) | (extra_props or {})
        fields = {
            "producerGroup": producer_group,
            "topic": m.topic,
            "defaultTopic": "TBW102",
            "defaultTopicQueueNums": 4,
            "queueId": m.queue_id,
            "sysFlag": m.sys_flag,
            "bornTimestamp": m.born_timestamp,
            "flag": m.flag,
            "properties": encode_properties(props),
            "reconsumeTimes": m.reconsume_times,
            "unitMode": "false",
            "batch": "false",
        }
        self.opaque += 1
        req = RemotingCommand.request(RequestCode.SEND_MESSAGE, fields, body=m.body, opaque=self.opaque)
        if self.credentials:
            from rmqha.broker.acl.rules import sign_request

            sign_request(req, self.credentials["accessKey"], self.credentials["secretKey"])
        self.sock.sendall(encode(req))
        (length,) = struct.unpack(">I", self._exact(4))
        if length > 64 << 20:
            raise ClusterError(f"the master answered a frame of {length} bytes: not a broker?")
        return decode_frame(self._exact(length)).code

    def _exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ClusterError("the master closed the connection during the repair")
            buf += chunk
        return bytes(buf)


# -- the repair -----------------------------------------------------------------------------------


def repair_group(
    cluster, group: str, say=print, catchup_timeout: float = 120.0, accept_loss: frozenset[str] = frozenset()
) -> list[RepairResult]:
    """Repair every slave of broker group `group` whose log forks from its master's."""
    master = next((m for m in cluster.masters() if cluster.node(m).get("brokerName") == group), None)
    if master is None:
        raise ClusterError(
            f"no broker group {group!r}; groups: "
            + ", ".join(sorted(cluster.node(m).get("brokerName") for m in cluster.masters()))
        )
    out = []
    for slave in cluster.slaves_of(master):
        out.append(repair_slave(cluster, group, master, slave, say, catchup_timeout, accept_loss))
    return out


def repair_slave(
    cluster,
    group: str,
    master: str,
    slave: str,
    say=print,
    catchup_timeout: float = 120.0,
    accept_loss: frozenset[str] = frozenset(),
) -> RepairResult:
    from .store_cut import drop_after

    res = RepairResult(group, master, slave)
    mlog, slog = cluster.store_path(master) / "commitlog", cluster.store_path(slave) / "commitlog"
    if not cluster.running(master):
        raise ClusterError(f"{master} is not running: start it first (the repair sends to it)")
    if cluster.running(slave):
        say(f"stopping {slave} (its log is read and cut while it is down)")
        cluster.stop(slave)
    res.fork, res.slave_end = find_fork(mlog, slog)
    if res.fork is None:
        say(f"{slave}: no fork, its log is a prefix of {master}'s; nothing to repair")
        cluster.start(slave)
        return res
    say(f"{slave}: forks from {master} at offset {res.fork}; it holds [{res.fork}, {res.slave_end})")
    stranded = [(off, m) for off, m, _raw in records(slog, res.fork)]
    p = plan(stranded, (m for _o, m, _r in records(mlog, res.fork)), slave, accept_loss)
    res.skipped = dict(p.skipped)
    res.already_on_master = p.already_on_master
    res.stranded = len(p.resend) + p.already_on_master
    if p.blocked:
        cluster.start(slave)
        raise ClusterError(
            f"{len(p.blocked)} stranded record(s) on {slave} cannot be put back on {master}, so "
            f"nothing was sent or truncated ({slave} is running again, still forked):\n  "
            + "\n  ".join(p.blocked[:20])
            + ("\n  ..." if len(p.blocked) > 20 else "")
            + "\nRead them from its store first if they matter, then run the repair with "
            "--accept-loss TOPIC for each of those topics"
        )
    sender = Sender(cluster.addr(master), credentials=cluster.credentials)
    try:
        for i, r in enumerate(p.resend, 1):
            code = sender.send(r.message, producer_group=r.producer_group)
            if code not in STORED:
                m = r.message
                raise ClusterError(
                    f"{master} refused the stranded {r.kind} at {slave}@{r.offset} (topic {m.topic}, "
                    f"UNIQ_KEY {m.uniq_key}) with response code {code}; nothing was truncated: "
                    f"fix the cause and run the repair again (it re-sends only what is missing)"
                )
            res.resent += 1
            res.resent_by_kind[r.kind] = res.resent_by_kind.get(r.kind, 0) + 1
            if i % 500 == 0:
                say(f"  re-sent {i}/{len(p.resend)}")
    finally:
        sender.close()
    gone = missing(p.resend, (m for _o, m, _r in records(mlog, res.fork)))
    if gone:
        raise ClusterError(
            f"{len(gone)} re-sent message(s) are not in {master}'s log (first: the {gone[0].kind} "
            f"{gone[0].tag}, topic {gone[0].message.topic}); {slave} was NOT truncated and is "
            f"left stopped"
        )
    res.truncated_bytes = drop_after(slog, res.fork, int(cluster.node(slave).get("commitlogFileSize") or 0))
    say(
        f"{slave}: {res.resent} stranded message(s) re-sent to {master} {res.resent_by_kind} "
        f"({res.already_on_master} were there already; not re-sent: {res.skipped or 'none'}), "
        f"log cut at {res.fork} ({res.truncated_bytes} bytes); starting it"
    )
    cluster.start(slave)
    t0 = time.monotonic()
    cluster.wait_caught_up(catchup_timeout, masters=[master])
    res.caught_up_s = round(time.monotonic() - t0, 1)
    say(f"{slave}: holds {master}'s log again ({res.caught_up_s} s)")
    return res
