"""Replica audit: per broker group, the master's commit log against each slave's, record by record.

Records are compared by physical offset: a slave's log is a byte copy of the master's from the slave's
first file on, so the same offset must hold the same bytes (same size and same CRC32 of the whole
record; the body CRC alone does not cover the header and properties). Everything is one Spark plan over
the decoded rows; only the per-pair summaries and the (merged) ranges come back to the driver.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import ids
from .runfolder import Node
from .verdict import FAIL, PASS, WARN, Verdict

MAX_LISTED = 20  # ranges/offsets listed per finding in the report
ID_INTEGRITY, ID_REPLICA = ids.LOG_INTEGRITY, ids.REPLICA  # verdict ids (subject: node / slave)
_GOOD = ("ok", "blank")  # statuses of a readable record or an end-of-file blank


@dataclass
class PairAudit:
    broker_name: str
    master: str
    slave: str
    master_role: str
    slave_start: int  # the slave's first file base (it may start at the master's last file)
    compare_start: int  # max(master start, slave start)
    master_end: int  # end of the master's last ok/blank record
    slave_end: int
    common_prefix_bytes: int  # identical bytes from compare_start
    first_divergent_offset: int | None  # first offset where both hold something and it differs,
    # or one side has a hole inside the other's extent
    crc_mismatches: int
    crc_mismatch_offsets: list[int] = field(default_factory=list)
    missing_ranges: list[tuple[int, int]] = field(default_factory=list)  # on master, not on slave
    missing_bytes: int = 0
    interior_missing_bytes: int = 0  # missing below slave_end (a hole, not lag)
    slave_only_records: int = 0
    slave_only_ranges: list[tuple[int, int]] = field(default_factory=list)
    # The logs fork: from this offset on, where both hold records, none is the same (a master that
    # came back behind its slave, SLAVE_AHEAD, and wrote new data at offsets the slave already held).
    fork_offset: int | None = None

    @property
    def lag_bytes(self) -> int:
        return max(0, self.master_end - self.slave_end)


@dataclass
class NodeIntegrity:
    node: str
    records: int
    invalid: list[tuple[int, int, str]]  # (offset, size, reason)
    torn: list[tuple[int, int, str]]
    short_files: list[tuple[str, int, int]]  # (file, length, mapped size)
    start: int
    end: int


def groups(nodes: list[Node]) -> dict[str, tuple[Node | None, list[Node]]]:
    """broker name -> (master, slaves). The master is the brokerId 0 / master-role node."""
    out: dict[str, tuple[Node | None, list[Node]]] = {}
    for name in sorted({n.broker_name for n in nodes}):
        members = sorted((n for n in nodes if n.broker_name == name), key=lambda n: n.broker_id)
        masters = [n for n in members if n.is_master]
        master = masters[0] if masters else None
        out[name] = (master, [n for n in members if n is not master])
    return out


class _Found:
    """What differs between a master and a slave, folded from the rows sorted by offset."""

    def __init__(self):
        self.first = None
        self.differ = 0
        self.differ_offsets: list[int] = []
        self.slave_only_records = 0
        self.ranges: dict[str, list[tuple[int, int]]] = {"master_only": [], "slave_only": []}

    def add(self, off: int, size: int, kind: str, s_status) -> None:
        if self.first is None:
            self.first = off
        if kind == "differ":
            self.differ += 1
            if len(self.differ_offsets) < MAX_LISTED:
                self.differ_offsets.append(off)
            return
        if kind == "slave_only" and s_status in ("ok", "blank"):
            self.slave_only_records += 1
        rs = self.ranges[kind]
        if rs and off <= rs[-1][1]:
            rs[-1] = (rs[-1][0], max(rs[-1][1], off + size))
        else:
            rs.append((off, off + size))


def _fold_pairs(rows):
    """mapPartitions: rows sorted by (pair, offset) -> (pair, _Found)."""
    cur, found = None, None
    for pair, off, size, kind, s_status in rows:
        if pair != cur:
            if found is not None:
                yield cur, found
            cur, found = pair, _Found()
        found.add(off, size, kind, s_status)
    if found is not None:
        yield cur, found


def node_integrity(df, nodes: list[Node]) -> list[NodeIntegrity]:
    from pyspark.sql import functions as F

    # one job: per node its counts and its (few) unreadable spans, sorted by offset
    bad_row = F.when(F.col("status").isin("invalid", "torn"), F.struct("physical_offset", "size", "reason", "status"))
    stats = {
        r["node"]: r
        for r in df.groupBy("node")
        .agg(
            F.sum(F.when(F.col("status") == "ok", 1).otherwise(0)).alias("records"),
            F.min(F.when(F.col("status").isin("ok", "blank"), F.col("physical_offset"))).alias("start"),
            F.max(F.when(F.col("status").isin("ok", "blank"), F.col("physical_offset") + F.col("size"))).alias("end"),
            F.sort_array(F.collect_list(bad_row)).alias("bad"),
        )
        .collect()
    }
    bad: dict[str, dict[str, list]] = {}
    for node, r in stats.items():
        for b in r["bad"] or []:
            bad.setdefault(node, {"invalid": [], "torn": []})[b["status"]].append(
                (b["physical_offset"], b["size"], b["reason"])
            )
    out = []
    for n in nodes:
        s = stats.get(n.name)
        b = bad.get(n.name, {"invalid": [], "torn": []})
        out.append(
            NodeIntegrity(
                n.name,
                int(s["records"]) if s else 0,
                b["invalid"],
                b["torn"],
                [(f.path, f.length, f.mapped_size) for f in n.files if f.length != f.mapped_size],
                int(s["start"] or n.start_offset) if s else n.start_offset,
                int(s["end"] or 0) if s else 0,
            )
        )
    return out


# a pair: (pair key, broker name, master, slave, master role, slave start, compare start)
_Pair = tuple[str, str, str, str, str, int, int]


def _pairs(nodes: list[Node]) -> list[_Pair]:
    """Every slave with its group's master; a group without a master has no pair."""
    pairs = []
    for name, (master, slaves) in groups(nodes).items():
        if master is None:
            continue
        for s in slaves:
            pairs.append(
                (
                    f"{name}|{s.name}",
                    name,
                    master.name,
                    s.name,
                    master.role,
                    s.start_offset,
                    max(master.start_offset, s.start_offset),
                )
            )
    return pairs


def _side(rec, pairs: list[_Pair], role: int, prefix: str):
    """rec's rows of each pair's master (role 2) or slave (3) from the pair's compare start: a literal
    map node -> [(pair, compare start)] exploded, not a join (a join with a local table costs a job).
    Columns: pair, physical_offset, and <prefix>_size, <prefix>_status, <prefix>_crc (record_crc)."""
    from pyspark.sql import functions as F

    by_node: dict[str, list] = {}
    for p in pairs:
        by_node.setdefault(p[role], []).append(
            F.struct(F.lit(p[0]).alias("pair"), F.lit(p[6]).cast("long").alias("compare_start"))
        )
    lookup = F.create_map(*[x for node, ps in by_node.items() for x in (F.lit(node), F.array(*ps))])
    return (
        rec.select("*", F.explode(lookup[F.col("node")]).alias("p"))
        .filter(F.col("physical_offset") >= F.col("p.compare_start"))
        .withColumn("pair", F.col("p.pair"))
        .select(
            "pair",
            "physical_offset",
            F.col("size").alias(f"{prefix}_size"),
            F.col("status").alias(f"{prefix}_status"),
            F.col("record_crc").alias(f"{prefix}_crc"),
        )
    )


def _compared(df, pairs: list[_Pair]):
    """Each pair's master and slave rows joined by offset (no job yet), each offset with its kind: same,
    differ, master_only or slave_only."""
    from pyspark.sql import functions as F

    rec = df.filter(F.col("status") != "torn").select("node", "physical_offset", "size", "status", "record_crc")
    m = _side(rec, pairs, 2, "m")
    s = _side(rec, pairs, 3, "s")
    j = m.join(s, ["pair", "physical_offset"], "full_outer")
    j = j.withColumn(
        "kind",
        F.when(F.col("m_status").isNull(), "slave_only")
        .when(F.col("s_status").isNull(), "master_only")
        .when(
            (F.col("m_size") == F.col("s_size"))
            & (F.col("m_status") == F.col("s_status"))
            & (F.col("m_crc") == F.col("s_crc"))
            & F.col("m_status").isin(*_GOOD),
            "same",
        )
        .otherwise("differ"),
    )
    return j.withColumn("size", F.coalesce("m_size", "s_size"))


def _differences(j) -> dict[str, _Found]:
    """One job: only the offsets that are not identical travel, sorted per pair, and are folded into
    ranges on the executors; the driver gets one small summary per pair."""
    from pyspark.sql import functions as F

    return {
        r[0]: r[1]
        for r in (
            j.filter(F.col("kind") != "same")
            .select("pair", "physical_offset", "size", "kind", "s_status")
            .repartition("pair")
            .sortWithinPartitions("pair", "physical_offset")
            .rdd.mapPartitions(_fold_pairs)
            .collect()
        )
    }


def _last_same(j) -> dict[str, int]:
    """The last identical message of each pair: nothing identical after the first divergence is a fork.
    End-of-file blanks do not count: with messages of one size the master's new records land at the
    slave's old offsets, and so does the blank that ends the file, identical on both sides."""
    from pyspark.sql import functions as F

    return {
        r["pair"]: r["last"]
        for r in j.filter((F.col("kind") == "same") & (F.col("m_status") == "ok"))
        .groupBy("pair")
        .agg(F.max("physical_offset").alias("last"))
        .collect()
    }


def _log_ends(df, integrity: list[NodeIntegrity] | None) -> dict[str, int]:
    """node -> the end of its last ok/blank record: from integrity when known (no job), else one job."""
    from pyspark.sql import functions as F

    if integrity is not None:  # a node with no ok/blank record has end 0 there, and no end here
        return {ni.node: ni.end for ni in integrity if ni.end}
    ends = {}
    for r in (
        df.filter(F.col("status").isin(*_GOOD))
        .groupBy("node")
        .agg(F.max(F.col("physical_offset") + F.col("size")).alias("end"))
        .collect()
    ):
        ends[r["node"]] = r["end"]
    return ends


def _pair_audit(pair: _Pair, ends: dict[str, int], fd: _Found, same_after: int | None) -> PairAudit:
    """One pair's audit from its log ends, its differences and its last identical message."""
    key, name, master, slave, role, slave_start, cstart = pair
    m_end = int(ends[master]) if master in ends else cstart
    s_end = int(ends[slave]) if slave in ends else cstart
    miss = fd.ranges["master_only"]
    fb = fd.first
    prefix_end = fb if fb is not None else max(m_end, s_end)
    # Pure lag (the slave stops, the master goes on) is not a divergence.
    divergent = fb
    if fb is not None and fb >= s_end and not fd.differ and not fd.ranges["slave_only"]:
        divergent = None
    fork = (
        divergent
        if divergent is not None and divergent < min(m_end, s_end) and (same_after is None or same_after < divergent)
        else None
    )
    return PairAudit(
        broker_name=name,
        master=master,
        slave=slave,
        master_role=role,
        slave_start=slave_start,
        compare_start=cstart,
        master_end=m_end,
        slave_end=s_end,
        common_prefix_bytes=max(0, min(prefix_end, m_end, s_end) - cstart),
        first_divergent_offset=divergent,
        crc_mismatches=fd.differ,
        crc_mismatch_offsets=fd.differ_offsets,
        missing_ranges=miss,
        missing_bytes=sum(e - b for b, e in miss),
        interior_missing_bytes=sum(max(0, min(e, s_end) - b) for b, e in miss),
        slave_only_records=fd.slave_only_records,
        slave_only_ranges=fd.ranges["slave_only"],
        fork_offset=fork,
    )


def audit_pairs(spark, df, nodes: list[Node], integrity: list[NodeIntegrity] | None = None) -> list[PairAudit]:
    """Compare every slave with its master. df: the decoded rows (rmqha.pipeline.decode); integrity:
    node_integrity's result on the same rows, when known (its log ends save a Spark job)."""
    pairs = _pairs(nodes)
    if not pairs:
        return []
    j = _compared(df, pairs)
    found = _differences(j)
    last_same = _last_same(j)
    ends = _log_ends(df, integrity)
    return [_pair_audit(p, ends, found.get(p[0]) or _Found(), last_same.get(p[0])) for p in pairs]


def _fmt_ranges(rs, limit=5) -> str:
    txt = ", ".join(f"[{b}, {e})" for b, e in rs[:limit])
    return txt + (f" and {len(rs) - limit} more" if len(rs) > limit else "")


def _integrity_verdict(ni: NodeIntegrity) -> Verdict:
    """FAIL for an unreadable span inside the log, WARN for a torn tail or a short file, else PASS."""
    name = f"log integrity {ni.node}"
    if ni.invalid:
        return Verdict(
            name,
            FAIL,
            f"{len(ni.invalid)} unreadable span(s) inside the log, first at "
            f"{ni.invalid[0][0]} ({ni.invalid[0][2]}): " + _fmt_ranges([(o, o + s) for o, s, _ in ni.invalid]),
            ID_INTEGRITY,
            ni.node,
        )
    if ni.torn or ni.short_files:
        parts = []
        if ni.torn:
            parts.append(f"torn tail at {ni.torn[0][0]} ({ni.torn[0][1]} bytes: {ni.torn[0][2]})")
        if ni.short_files:
            parts.append(
                "files shorter than the mapped size (RocketMQ would not load them): "
                + ", ".join(f"{p.rsplit('/', 1)[-1]} {ln}/{ms}" for p, ln, ms in ni.short_files)
            )
        return Verdict(name, WARN, "; ".join(parts), ID_INTEGRITY, ni.node)
    return Verdict(name, PASS, f"{ni.records} records in [{ni.start}, {ni.end})", ID_INTEGRITY, ni.node)


def _pair_facts(p: PairAudit) -> str:
    return (
        f"slave starts at {p.slave_start}, common prefix {p.common_prefix_bytes} bytes from "
        f"{p.compare_start}, master end {p.master_end}, slave end {p.slave_end}"
    )


def _allowed_fork(
    p: PairAudit, final_ack: dict[str, int] | None, allowed_forks: dict[str, str] | None
) -> Verdict | None:
    """The WARN for a fork a fault explains, when nothing else is wrong before it (None otherwise)."""
    fork = p.fork_offset
    allowed = (allowed_forks or {}).get(p.broker_name) or (allowed_forks or {}).get("*") if fork is not None else None
    if not allowed or fork is None:
        return None
    # what follows the fork is the fork; only damage before it (or a lost ack) still fails
    before = [o for o in p.crc_mismatch_offsets if o < fork]
    holes = [r for r in p.missing_ranges if r[0] < min(p.slave_end, fork)]
    only = [r for r in p.slave_only_ranges if r[0] < min(p.master_end, fork)]
    ack = (final_ack or {}).get(p.slave)
    if before or holes or only or (ack is not None and ack > p.slave_end):
        return None
    return Verdict(
        f"replica {p.broker_name}: {p.master} vs {p.slave}",
        WARN,
        f"an allowed fork at offset {fork}, after {allowed}: the master came "
        "back behind its slave (it lost an unsynced tail the slave holds) and wrote "
        f"new data at [{fork}, {min(p.master_end, p.slave_end)}); the slave's "
        f"{p.slave_end - fork} bytes from {fork} are a history the master lost "
        f"(SLAVE_AHEAD; the README's guarantee matrix) ({_pair_facts(p)})",
        ID_REPLICA,
        p.slave,
    )


def _replica_problems(p: PairAudit, final_ack: dict[str, int] | None) -> list[str]:
    """What fails the pair: a fork, differing records, holes, records only on the slave inside the
    master's extent, acknowledged bytes the slave lost."""
    problems = []
    if p.fork_offset is not None:
        problems.append(
            f"the logs fork at offset {p.fork_offset}: the master wrote new data at "
            f"[{p.fork_offset}, {min(p.master_end, p.slave_end)}) where the slave already held other records, "
            f"and nothing is the same after it; the slave's {p.slave_end - p.fork_offset} bytes from "
            f"{p.fork_offset} are a history the master lost (a master that came back behind its slave, "
            "SLAVE_AHEAD, and took writes; see the README)"
        )
    if p.crc_mismatches:
        problems.append(
            f"{p.crc_mismatches} record(s) differ at the same offset (CRC mismatch), first at "
            + ", ".join(map(str, p.crc_mismatch_offsets[:5]))
        )
    if p.interior_missing_bytes:
        problems.append(
            f"{p.interior_missing_bytes} bytes missing inside the slave's extent: "
            + _fmt_ranges([r for r in p.missing_ranges if r[0] < p.slave_end])
        )
    inside = [r for r in p.slave_only_ranges if r[0] < p.master_end]
    if inside:
        problems.append(f"records only on the slave inside the master's extent: {_fmt_ranges(inside)}")
    ack = (final_ack or {}).get(p.slave)
    if ack is not None and ack > p.slave_end:
        problems.append(
            f"the master last saw ackOffset {ack} from this slave but its log ends at "
            f"{p.slave_end}: the slave lost acknowledged bytes"
        )
    return problems


def _replica_notes(p: PairAudit) -> list[str]:
    """What the pair allows but the report should say: the slave's lag, records past the master's end."""
    notes = []
    if p.lag_bytes:
        notes.append(
            f"slave behind by {p.lag_bytes} bytes: missing "
            + _fmt_ranges([r for r in p.missing_ranges if r[0] >= p.slave_end])
        )
    beyond = [r for r in p.slave_only_ranges if r[0] >= p.master_end]
    if beyond:
        notes.append(f"the slave holds records past the master's end (master lost its tail?): {_fmt_ranges(beyond)}")
    return notes


def _replica_verdict(p: PairAudit, final_ack: dict[str, int] | None, allowed_forks: dict[str, str] | None) -> Verdict:
    """An allowed fork's WARN, else FAIL for a problem, WARN for a note, PASS for identical logs."""
    allowed = _allowed_fork(p, final_ack, allowed_forks)
    if allowed is not None:
        return allowed
    name = f"replica {p.broker_name}: {p.master} vs {p.slave}"
    facts = _pair_facts(p)
    problems = _replica_problems(p, final_ack)
    if problems:
        return Verdict(
            name,
            FAIL,
            f"first divergent offset {p.first_divergent_offset}; " + "; ".join(problems) + f" ({facts})",
            ID_REPLICA,
            p.slave,
        )
    notes = _replica_notes(p)
    if notes:
        return Verdict(name, WARN, "; ".join(notes) + f" ({facts})", ID_REPLICA, p.slave)
    return Verdict(name, PASS, f"identical ({facts})", ID_REPLICA, p.slave)


def verdicts(
    pairs: list[PairAudit],
    integrity: list[NodeIntegrity],
    nodes: list[Node],
    final_ack: dict[str, int] | None = None,
    allowed_forks: dict[str, str] | None = None,
) -> list[Verdict]:
    """final_ack: slave node -> the last ackOffset its master reported for it (from metrics).
    allowed_forks: broker name -> the fault that explains a fork of its logs (a power loss of its master:
    the master lost an unsynced tail its slave holds, which every configuration allows). Such a fork is
    a WARN, not a FAIL, when nothing else is wrong before it."""
    out = [_integrity_verdict(ni) for ni in integrity]
    for name, (master, _slaves) in groups(nodes).items():
        if master is None:
            out.append(
                Verdict(
                    f"replicas {name}",
                    WARN,
                    "no master node in this group (role/brokerId); slaves not compared",
                    ids.REPLICA_NO_MASTER,
                    name,
                )
            )
    out += [_replica_verdict(p, final_ack, allowed_forks) for p in pairs]
    return out
