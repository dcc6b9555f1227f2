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


def fabricate(rd, sends, receives=(), unsubscribe_at=None, producer_tail="", extra_copies=()):
    """sends: [(send_id, stored on this broker group or None, [(status or None, start_ms, end_ms), ...])]: one
    invoke line per try and, unless its status is None (never answered), its answer; every answered try of
    a send with a group is stored on its group's master with KEYS = send_id. receives: [(send_id or None, uniq_key or
    None, at_ms)]. The consumer group subscribes FROM_FIRST at 0 and unsubscribes at unsubscribe_at.
    A try may carry a 4th item, {"group": stored on this group instead, "uniq": its UNIQ_KEY, "line": more
    fields of its answer line}. extra_copies: [(group, send_id, uniq_key, topic)] more copies on a master
    (a client's internal retry, a delayed message parked in SCHEDULE_TOPIC_XXXX). A copy's queue offset
    is its place in its group's commit log, from 0."""
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
