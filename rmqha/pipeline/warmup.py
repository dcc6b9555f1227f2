"""A tiny audit run before the real one: a fresh Spark session is slow the first time it runs each kind
of job (Python workers start, queries are compiled), so an audit started ahead of time (rmqha.chaos.run's
`--wait-for`) audits a run folder of a few records while the workload is still running; the real
audit then runs warm (measured: a 60 s run's audit 42 s cold, 17 s warm)."""

from __future__ import annotations

import os
import shutil
import tempfile

from rmqha.runs.layout import node_json, write_node_json

from . import report


def tiny_run(root: str, n: int = 40) -> str:
    """A run folder: one SYNC_MASTER group, its slave a byte copy, a history of sends and receives."""
    from rmqha.broker.store.message_store import MessageStore
    from rmqha.broker.store.record import Message
    from rmqha.runs.history import HistoryWriter

    run = os.path.join(root, "run")
    mdir, sdir = os.path.join(run, "nodes", "w-0"), os.path.join(run, "nodes", "w-1")
    write_node_json(mdir, node_json("w-0", "w", 0, "SYNC_MASTER", addr="w-0:10911"))
    write_node_json(sdir, node_json("w-1", "w", 1, "SLAVE", addr="w-1:10911"))
    store = MessageStore(os.path.join(mdir, "store"), commitlog_file_size=64 << 10, cq_file_size=20 * 100)
    store.start()
    sends = HistoryWriter(os.path.join(run, "history", "producer-w.jsonl"))
    recvs = HistoryWriter(os.path.join(run, "history", "consumer-w.jsonl"))
    t = 1_700_000_000_000
    for i in range(n):
        uk, sid = f"W{i:030d}", f"w-{i}"
        r = store.put_message(
            Message(
                topic="W", body=b"w" * 100, queue_id=i % 2, born_timestamp=t, properties={"UNIQ_KEY": uk, "KEYS": sid}
            )
        )
        sends.append(
            {
                "client": "producer-w",
                "op": "send",
                "topic": "W",
                "send_id": sid,
                "attempt": 1,
                "uniq_key": uk,
                "status": "SEND_OK",
                "start_ms": t + i,
                "end_ms": t + i + 1,
            }
        )
        recvs.append(
            {
                "client": "consumer-w",
                "op": "receive",
                "topic": "W",
                "send_id": sid,
                "uniq_key": uk,
                "status": "RECEIVED",
                "queue_id": i % 2,
                "queue_offset": r.queue_offset,
                "start_ms": t + i + 2,
                "end_ms": t + i + 2,
            }
        )
    sends.close()
    recvs.close()
    store.shutdown()
    shutil.copytree(os.path.join(mdir, "store", "commitlog"), os.path.join(sdir, "store", "commitlog"))
    return run


def warm_up(spark) -> None:
    """Audit a tiny run and throw the result away. Never raises: the real audit must still run."""
    root = tempfile.mkdtemp(prefix="audit-warmup-")
    try:
        report.run(spark, tiny_run(root), os.path.join(root, "out"))
    except Exception as e:  # the warm-up only saves time; a failure here is the real audit's to show
        import sys

        print(f"note: the audit warm-up failed ({type(e).__name__}: {e}); auditing cold", file=sys.stderr)
    finally:
        shutil.rmtree(root, ignore_errors=True)
