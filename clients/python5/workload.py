"""The chaos workload with the official 5.x Python client (rocketmq-python-client 5.1.2, unmodified),
through the cluster's 5.x gRPC proxy: `make chaos CLIENT=python5` (rmqha/chaos/workload.py execs this
with .venv-client5's Python; the 5.x client cannot live in .venv beside the 4.x one).

Same files and output as the other workloads: RUN/history/producer-<rid>.jsonl and consumer-<rid>.jsonl in
the history format of rmqha/runs/history.py (loaded from its file: it needs only the standard library),
RUN/chaos/progress-<rid>.json, and the final counters as one JSON line on stdout.

The producer sends asynchronously at --rate, the send_id in KEYS; the client retries a failed send itself
(3 attempts, the proxy's settings), and a send that still fails is sent again (a new attempt) up to 3
times. Its failures name the SYNC_MASTER outcome: SLAVE_PERSISTENCE_TIMEOUT is recorded as
FLUSH_SLAVE_TIMEOUT, HA_NOT_AVAILABLE as SLAVE_NOT_AVAILABLE, MASTER_PERSISTENCE_TIMEOUT as
FLUSH_DISK_TIMEOUT (stored, replication or flush not confirmed), anything else as ERROR.
The consumer group is a SimpleConsumer: every receive is a "receive" line with the delivery attempt, every
ack an "ack" line (ACKED or ERROR), so the delivery checker tells a redelivery (before the ack) from a
duplicate (after it).
"""

import argparse
import importlib.util
import json
import os
import sys
import threading
import time
import uuid

from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("rmqha_history", os.path.join(ROOT, "rmqha", "runs", "history.py"))
H = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(H)

MAX_ATTEMPTS = 3
STATUS_OF_CODE = {50402: "FLUSH_SLAVE_TIMEOUT", 50002: "SLAVE_NOT_AVAILABLE", 50401: "FLUSH_DISK_TIMEOUT"}
INVISIBLE_S = 10  # the proxy's shortest (5.x: 10 s)


def write_json_atomic(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(obj, fh)
    os.replace(tmp, path)


class Run:
    def __init__(self, a):
        self.a = a
        self.rid = a.run_id
        self.group = f"ChaosCG{self.rid}"
        hist = os.path.join(a.run_dir, "history")
        self.prod = H.HistoryWriter(os.path.join(hist, f"producer-{self.rid}.jsonl"), library=H.PYTHON5_LIBRARY)
        self.cons = H.HistoryWriter(os.path.join(hist, f"consumer-{self.rid}.jsonl"), library=H.PYTHON5_LIBRARY)
        os.makedirs(os.path.join(a.run_dir, "chaos"), exist_ok=True)
        self.progress = os.path.join(a.run_dir, "chaos", f"progress-{self.rid}.json")
        self.lock = threading.Lock()
        self.c = {"attempts": 0, "inflight": 0, "received": 0, "gave_up": 0, H.ERROR: 0, "acked": 0}
        for s in H.SEND_STATUSES:
            self.c[s] = 0
        self.stored, self.received_ids = set(), set()
        self.retries = []
        self.phase = "starting"
        self.stop = threading.Event()
        self.n = 0
        conf = ClientConfiguration(a.endpoint, Credentials(), request_timeout=max(3, a.timeout_ms // 1000))
        self.producer = Producer(conf, (a.topic,))
        self.consumer = SimpleConsumer(conf, self.group, {a.topic: FilterExpression("*")}, await_duration=2)

    def snapshot(self, phase):
        with self.lock:
            c = self.c
            return {
                "phase": phase,
                "groups": [self.group],
                "attempts": c["attempts"],
                "ok": c["SEND_OK"],
                "timeouts": c["FLUSH_SLAVE_TIMEOUT"] + c["FLUSH_DISK_TIMEOUT"],
                "not_available": c["SLAVE_NOT_AVAILABLE"],
                "errors": c[H.ERROR],
                "gave_up": c["gave_up"],
                "inflight": c["inflight"],
                "received": c["received"],
                "received_unique": len(self.received_ids),
                "stored_unique": len(self.stored),
                "received_late": 0,
                "groupTopics": {self.group: self.a.topic},
                "orderly_ok": 0,
                "received_orderly": 0,
                "ts": time.time(),
            }

    def progress_loop(self):
        while not self.stop.wait(0.5):
            write_json_atomic(self.progress, self.snapshot(self.phase))

    # ---- sends --------------------------------------------------------------------------------------

    def send(self, send_id, attempt):
        a = self.a
        body = (send_id + " ").encode() + b"x" * max(0, a.body_size - len(send_id) - 1)
        rec = {
            "client": f"producer-{self.rid}",
            "group": f"ChaosPG{self.rid}",
            "topic": a.topic,
            "send_id": send_id,
            "attempt": attempt,
            "body_len": len(body),
            "start_ms": H.now_ms(),
        }
        m = Message()
        m.topic = a.topic
        m.body = body
        m.keys = send_id
        with self.lock:
            self.c["attempts"] += 1
            self.c["inflight"] += 1
        self.prod.append(rec | {"op": H.INVOKE, "end_ms": rec["start_ms"]})
        try:
            fut = self.producer.send_async(m)
        except Exception as e:
            self.answered(rec, None, e)
            return
        fut.add_done_callback(lambda f: self.answered(rec, f, None))

    def answered(self, rec, fut, exc):
        if fut is not None:
            try:
                r = fut.result()
            except Exception as e:
                exc = e
        out = rec | {"op": H.SEND, "end_ms": H.now_ms()}
        if exc is None:
            out |= {"status": "SEND_OK", "uniq_key": r.message_id, "queue_offset": r.offset}
        else:
            code = getattr(exc, "code", None)
            out |= {
                "status": STATUS_OF_CODE.get(code, H.ERROR) if isinstance(code, int) else H.ERROR,
                "error": f"{type(exc).__name__}: {exc}"[:500],
            }
        self.prod.append(out)
        with self.lock:
            self.c[out["status"]] += 1
            self.c["inflight"] -= 1
            if out["status"] != H.ERROR:
                self.stored.add(rec["send_id"])
            elif rec["attempt"] < MAX_ATTEMPTS:
                self.retries.append((rec["send_id"], rec["attempt"] + 1))
            else:
                self.c["gave_up"] += 1

    def new_id(self):
        self.n += 1
        return f"{self.rid}-{self.n}-{uuid.uuid4().hex[:6]}"

    def send_for_duration(self):
        a = self.a
        self.phase = "sending"
        start = time.monotonic()
        end = start + a.duration
        i = 0
        while time.monotonic() < end:
            with self.lock:
                again, self.retries = self.retries, []
            for sid, att in again:
                self.send(sid, att)
            due = int((time.monotonic() - start) * a.rate)
            while i < due and self.c["inflight"] < a.max_inflight:
                self.send(self.new_id(), 1)
                i += 1
            time.sleep(0.01)

    def drain_sends(self):
        self.phase = "draining sends"
        deadline = time.monotonic() + MAX_ATTEMPTS * self.a.timeout_ms / 1000.0 * 3 + 5
        while time.monotonic() < deadline:
            with self.lock:
                again, self.retries = self.retries, []
                busy = self.c["inflight"] > 0
            for sid, att in again:
                self.send(sid, att)
            if not busy and not again:
                return
            time.sleep(0.05)

    # ---- the consumer group ---------------------------------------------------------------------------

    def consume_loop(self):
        base = {"client": f"consumer-{self.rid}", "group": self.group, "topic": self.a.topic}
        while not self.stop.is_set():
            try:
                msgs = self.consumer.receive(32, INVISIBLE_S)
            except Exception:
                time.sleep(0.2)
                continue
            for m in msgs or []:
                t = H.now_ms()
                sid = next(iter(m.keys), None) if m.keys else None
                self.cons.append(
                    base
                    | {
                        "op": H.RECEIVE,
                        "send_id": sid,
                        "uniq_key": m.message_id,
                        "status": H.RECEIVED,
                        "attempt": m.delivery_attempt,
                        "store_timestamp": None,
                        "body_len": len(m.body),
                        "start_ms": t,
                        "end_ms": t,
                    }
                )
                with self.lock:
                    self.c["received"] += 1
                try:
                    self.consumer.ack(m)
                    st, err = H.ACKED, None
                except Exception as e:
                    st, err = H.ERROR, f"{type(e).__name__}: {e}"[:500]
                t2 = H.now_ms()
                self.cons.append(
                    base
                    | {
                        "op": H.ACK,
                        "send_id": sid,
                        "uniq_key": m.message_id,
                        "status": st,
                        "error": err,
                        "start_ms": t2,
                        "end_ms": t2,
                    }
                )
                if st == H.ACKED:
                    with self.lock:
                        self.c["acked"] += 1
                        if sid:
                            self.received_ids.add(sid)

    def await_drain(self):
        a = self.a
        self.phase = "awaiting drain"
        if a.drain_signal:
            deadline = time.monotonic() + 30 * a.drain
            while time.monotonic() < deadline and not os.path.exists(a.drain_signal):
                time.sleep(0.1)
        # then what was popped and not acked (a consumer's ack lost to a fault) comes back after its
        # invisible time: wait for it as well, up to --drain
        self.phase = "draining receives"
        deadline = time.monotonic() + a.drain
        while time.monotonic() < deadline:
            with self.lock:
                if self.stored <= self.received_ids:
                    return
            time.sleep(0.1)


def main():
    ap = argparse.ArgumentParser(prog="clients/python5/workload.py")
    ap.add_argument("--endpoint", required=True, help="the 5.x proxy, host:port")
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--rate", type=float, default=50.0)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--run-id", default=str(int(time.time())))
    ap.add_argument("--topic", default="TopicChaos")
    ap.add_argument("--body-size", type=int, default=256)
    ap.add_argument("--timeout-ms", type=int, default=10000)
    ap.add_argument("--max-inflight", type=int, default=2000)
    ap.add_argument("--drain", type=float, default=20.0)
    ap.add_argument("--drain-signal", default=None)
    a = ap.parse_args()
    run = Run(a)
    threading.Thread(target=run.progress_loop, daemon=True).start()
    run.producer.startup()
    run.consumer.startup()
    sub = {
        "client": f"consumer-{run.rid}",
        "op": H.SUBSCRIBE,
        "group": run.group,
        "topic": a.topic,
        "status": H.FROM_FIRST,
        "ordered": False,
        "start_ms": H.now_ms(),
        "end_ms": H.now_ms(),
    }
    run.cons.append(sub)
    consumers = [threading.Thread(target=run.consume_loop, daemon=True) for _ in range(2)]
    for t in consumers:
        t.start()
    run.send_for_duration()
    run.drain_sends()
    run.await_drain()
    run.stop.set()
    for t in consumers:
        t.join(timeout=10)
    snap = run.snapshot("done")
    for closer in (run.consumer.shutdown, run.producer.shutdown):
        try:
            closer()
        except Exception:
            pass
    now = H.now_ms()
    run.cons.append(
        {
            "client": f"consumer-{run.rid}",
            "op": H.UNSUBSCRIBE,
            "group": run.group,
            "topic": a.topic,
            "start_ms": now,
            "end_ms": now,
        }
    )
    write_json_atomic(run.progress, snap)
    run.prod.close()
    run.cons.close()
    sys.stdout.write(json.dumps(snap) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
