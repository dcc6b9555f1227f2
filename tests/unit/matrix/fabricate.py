"""Run folders fabricated as a chaos run leaves them, and the samples and summaries the matrix tests share (not a test module)."""

# what an audited sample carries besides its losses (fault_figures); without them a cell is "not audited"
AUDITED = {"delivered": 0, "indeterminate": 0, "not_audited": None, "excluded": {}, "group_availability": {}}


def sample(ok=10, lost=0, divergent=0, error=None):
    return {"ok": ok, "sends": ok + 1, "lost": lost, "divergent": divergent, "error": error} | AUDITED


def cell_samples_by_id(run, summary):
    from rmqha.matrix.cells import cell_samples

    return dict(zip((f["id"] for f in summary["faults"]), cell_samples(run, summary, "2m-2s-sync", "ASYNC_FLUSH")))


def write_samples(run, rounds):
    """rounds: [(ts s, master offset, slave offset)] for group broker-a (None: did not answer)."""
    import json

    (run / "metrics").mkdir(parents=True, exist_ok=True)
    rows = []
    for ts, m, s in rounds:
        rows.append(
            {
                "ts": ts,
                "node": "broker-a",
                "brokerName": "broker-a",
                "role": "SYNC_MASTER",
                "up": m is not None,
                "maxPhyOffset": m,
            }
        )
        rows.append(
            {
                "ts": ts,
                "node": "broker-a-s",
                "brokerName": "broker-a",
                "role": "SLAVE",
                "master": "broker-a",
                "up": s is not None,
                "maxPhyOffset": s,
            }
        )
    (run / "metrics" / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def fault(id_, kind, role="master", start=1000, end=2000, group="broker-a", target=None, info=None):
    return {
        "id": id_,
        "kind": kind,
        "target": target or ("broker-a" if role == "master" else "broker-a-s"),
        "group": group,
        "role": role,
        "link": None,
        "start_ms": start,
        "end_ms": end,
        "info": info or {},
    }


def summary_of(faults, **extra):
    return {"faults": faults, "lostByFault": {}, "divergentByFault": {}} | extra


TOPIC, CG = "TopicChaos", "CG1"


def fabricate(rd, sends, receives=(), unsubscribe_at=None, producer_tail="", extra_copies=(), table=None):
    """sends: [(send_id, stored on this broker group or None, [(status or None, start_ms, end_ms), ...])]: one
    invoke line per try and, unless its status is None (never answered), its answer; every answered try of
    a send with a group is stored on its group's master with KEYS = send_id. receives: [(send_id or None, uniq_key or
    None, at_ms)]. The consumer group subscribes FROM_FIRST at 0 and unsubscribes at unsubscribe_at.
    A try may carry a 4th item, {"group": stored on this group instead, "uniq": its UNIQ_KEY, "line": more
    fields of its answer line}. extra_copies: [(group, send_id, uniq_key, topic)] more copies on a master
    (a client's internal retry, a delayed message parked in SCHEDULE_TOPIC_XXXX). A copy's queue offset
    is its place in its group's commit log, from 0. The audit's tables (report/sends.jsonl, tries.jsonl) are
    written by hand as audit_tables() says; table: {send_id: {field: value}} overrides a send's line."""
    import json

    from rmqha.broker.store import record

    lines, seq, stored = [], 0, {}
    for sid, group, tries in sends:
        for attempt, (status, t0, t1, *more) in enumerate(tries, 1):
            opts = more[0] if more else {}
            base = {"client": "p1", "group": "PG", "topic": TOPIC, "send_id": sid, "attempt": attempt}
            lines.append(base | {"seq": seq, "op": "invoke", "start_ms": t0, "end_ms": t0})
            seq += 1
            if status is None:
                continue
            uniq = opts.get("uniq") or (f"U-{sid}-{attempt}" if status != "ERROR" else None)
            lines.append(
                base
                | {
                    "seq": seq,
                    "op": "send",
                    "status": status,
                    "uniq_key": uniq,
                    "start_ms": t0,
                    "end_ms": t1,
                    "error": "ProducerSendAsyncFailed: b''" if status == "ERROR" else None,
                }
                | opts.get("line", {})
            )
            seq += 1
            at = opts.get("group", group)
            if at:  # an ERROR try stored anyway: the client timed out on a send the broker kept
                stored.setdefault(at, []).append((sid, uniq or f"U-{sid}-{attempt}-unseen", TOPIC))
    for group, sid, uniq, topic in extra_copies:
        stored.setdefault(group, []).append((sid, uniq, topic))
    (rd / "history").mkdir(parents=True, exist_ok=True)
    (rd / "history" / "producer-1.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines) + producer_tail)
    cons = [
        {
            "client": "c1",
            "seq": 0,
            "op": "subscribe",
            "group": CG,
            "topic": TOPIC,
            "status": "FROM_FIRST",
            "start_ms": 0,
            "end_ms": 0,
        }
    ]
    for i, (sid, uniq, at) in enumerate(receives, 1):
        cons.append(
            {
                "client": "c1",
                "seq": i,
                "op": "receive",
                "group": CG,
                "topic": TOPIC,
                "send_id": sid,
                "uniq_key": uniq,
                "status": "RECEIVED",
                "start_ms": at,
                "end_ms": at,
            }
        )
    if unsubscribe_at is not None:
        cons.append(
            {
                "client": "c1",
                "seq": len(cons),
                "op": "unsubscribe",
                "group": CG,
                "start_ms": unsubscribe_at,
                "end_ms": unsubscribe_at,
            }
        )
    (rd / "history" / "consumer-1.jsonl").write_text("".join(json.dumps(x) + "\n" for x in cons))
    for group in ("broker-a", "broker-b"):
        for node, broker_id in ((group, 0), (group + "-s", 1)):
            nd = rd / "nodes" / node
            (nd / "store" / "commitlog").mkdir(parents=True, exist_ok=True)
            (nd / "node.json").write_text(json.dumps({"name": node, "brokerName": group, "brokerId": broker_id}))
            buf, off = bytearray(), 0
            for i, (sid, uniq, topic) in enumerate(stored.get(group, []) if broker_id == 0 else []):
                enc = record.encode(record.Message(topic=topic, body=b"x", properties={"KEYS": sid, "UNIQ_KEY": uniq}))
                buf += enc.finish(i, off)
                off += enc.size
            (nd / "store" / "commitlog" / ("0" * 20)).write_bytes(bytes(buf) + bytes(256))
    audit_tables(rd, sends, receives, unsubscribe_at, stored, table or {})


def audit_tables(rd, sends, receives, unsubscribe_at, stored, table):
    """report/sends.jsonl and tries.jsonl as the audit (rmqha/pipeline/delivery_table.py, tested on its own
    histories there) writes them for a fabricated run whose copies are each in one group: a try's group is
    the recorder's broker_name, else the group storing its UNIQ_KEY in the topic (else parked there); a send's
    is its SEND_OK try's, else (never acknowledged) its copies'. CG is owed what was acknowledged (else first
    tried) before unsubscribe_at."""
    import json

    from rmqha.runs.history import SEND_STATUSES

    where: dict[str, list] = {}  # UNIQ_KEY or send_id -> [(group, topic)]
    for group, copies in stored.items():
        for sid, uniq, topic in copies:
            where.setdefault(uniq, []).append((group, topic))
            where.setdefault(sid, []).append((group, topic))

    def group_of(key):
        top = {g for g, t in where.get(key, []) if t == TOPIC}
        top = top or {g for g, t in where.get(key, []) if t in ("SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC")}
        return top.pop() if len(top) == 1 else None

    got: dict[str, dict[str, int]] = {}
    uniq_to_sid = {}
    rows, tries = {}, []
    for sid, _group, ts in sends:
        for attempt, (status, t0, t1, *more) in enumerate(ts, 1):
            opts = more[0] if more else {}
            uniq = opts.get("uniq") or (f"U-{sid}-{attempt}" if status not in ("ERROR", None) else None)
            if uniq:
                uniq_to_sid.setdefault(uniq, sid)
            if status is None:
                continue
            named = opts.get("line", {}).get("broker_name")
            st = status if status in SEND_STATUSES else "ERROR"
            g = named if named or st == "ERROR" else group_of(uniq)
            tries.append({"send_id": sid, "start_ms": t0, "end_ms": t1 or t0, "status": st, "group": g})
        answered = [t for t in tries if t["send_id"] == sid]
        ok = next((t for t in answered if t["status"] == "SEND_OK"), None)
        state = "acked" if ok else "unconfirmed" if any(t["status"] != "ERROR" for t in answered) else "indeterminate"
        copies = where.get(sid, [])
        rows[sid] = {
            "send_id": sid,
            "topic": TOPIC,
            "state": state,
            "first_ms": ts[0][1],
            "acked_ms": ok["end_ms"] if ok else None,
            "group": ok["group"] if ok else group_of(sid),
            "ambiguous": None,
            "stored": bool(copies),
            "parked": bool(copies) and all(t != TOPIC for _g, t in copies),
            "owed": [],
            "received": [],
            "duplicates": 0,
        }
    for sid in set(table) - set(rows):  # a send only the tail of a history names (a torn line's invoke)
        rows[sid] = {"send_id": sid, "topic": TOPIC, "state": "indeterminate", "acked_ms": None, "group": None}
        rows[sid] |= {"ambiguous": None, "stored": False, "parked": False} | table[sid]
    for sid, uniq, _at in receives:
        sid = sid or uniq_to_sid.get(uniq)
        if sid in rows:
            got.setdefault(CG, {})[sid] = got.get(CG, {}).get(sid, 0) + 1
    for sid, r in rows.items():
        at = r["acked_ms"] or r["first_ms"]
        r["owed"] = [CG] if unsubscribe_at is None or at <= unsubscribe_at else []
        r["received"] = [CG] if got.get(CG, {}).get(sid) else []
        r["duplicates"] = max(0, got.get(CG, {}).get(sid, 0) - 1)
        r.update(table.get(sid, {}))
    (rd / "report").mkdir(parents=True, exist_ok=True)
    (rd / "report" / "sends.jsonl").write_text("".join(json.dumps(rows[k]) + "\n" for k in sorted(rows)))
    (rd / "report" / "tries.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tries))


def audited_summary(faults, acked_on_group, acknowledged, delivered=None, parked=0, **extra):
    """summary.json as the audit writes it: acked_on_group {fault label: n}; acknowledged: what the
    delivery checker owed CG, delivered (default: all of it but the parked) and parked of those; the rest lost."""
    delivered = acknowledged - parked if delivered is None else delivered
    return (
        summary_of(
            faults,
            failed=False,
            verdicts=[],
            ackedOnGroupByFault=acked_on_group,
            delivery={
                CG: {
                    "acknowledged": acknowledged,
                    "delivered": delivered,
                    "parked": parked,
                    "stranded": 0,
                    "lost": acknowledged - delivered - parked,
                }
            },
        )
        | extra
    )


def write_consumer(rd, name, group, receives):
    """One more consumer group's history: subscribes FROM_FIRST at 0 and receives [(send_id, at_ms)]."""
    import json

    rows = [
        {
            "client": name,
            "seq": 0,
            "op": "subscribe",
            "group": group,
            "topic": TOPIC,
            "status": "FROM_FIRST",
            "start_ms": 0,
            "end_ms": 0,
        }
    ]
    rows += [
        {
            "client": name,
            "seq": i,
            "op": "receive",
            "group": group,
            "topic": TOPIC,
            "send_id": sid,
            "status": "RECEIVED",
            "start_ms": at,
            "end_ms": at,
        }
        for i, (sid, at) in enumerate(receives, 1)
    ]
    (rd / "history" / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    # the audit owes the group every send (it subscribed from the first) and counts what it received
    table = rd / "report" / "sends.jsonl"
    lines = [json.loads(x) for x in table.read_text().splitlines()]
    mine = {sid for sid, _at in receives}
    for x in lines:
        x["owed"] = sorted(x["owed"] + [group])
        x["received"] = sorted(x["received"] + ([group] if x["send_id"] in mine else []))
    table.write_text("".join(json.dumps(x) + "\n" for x in lines))
