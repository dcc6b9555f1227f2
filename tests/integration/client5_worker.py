"""Runs the official 5.x Python client (PyPI rocketmq-python-client 5.1.2, unmodified) in its own
environment, .venv-client5 (`make venv-client5`): it installs as top-level `rocketmq`, like the 4.x
client in .venv, so the two cannot share one.

    .venv-client5/bin/python client5_worker.py '<json job>'  -> one JSON line per event, then {"done": ...}

job: {"endpoint": "host:port", "op": ..., ...}
  produce: topic, sends: [{mode: sync|async, body, tag, keys, group (FIFO), delay_s, transaction:
           commit|rollback|none (none: end nothing, the server's check decides), props}], checker:
           commit|rollback (the answer to a server check). One line per send: {"i", "message_id",
           "offset"} or {"i", "error", "code"}; a check answered: {"checked": message_id}.
  simple:  group, topic, expect (distinct bodies acked), deadline_s, invisible_s, plan: {"<body>":
           ["ack" | "skip" | "change:<s>"] by delivery attempt, default ack}; one line per delivery:
           {"body", "message_id", "attempt", "action", "t" (ms: received), "asked" (ms: the receive
           call began)}.
  push:    group, topic, expect, deadline_s, fail: [bodies to answer FAILURE once]; one line per delivery.
           simple's stop_after: end after this many deliveries (a receive left unacked on purpose).
  seq:     jobs: [job, ...] one after the other in this process (one interpreter start and client import
           for all); every line carries "step": the job's op.
"""

import json
import sys
import threading
import time

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)


STEP = {}  # what every line carries (surface: the step it belongs to)


def emit(obj):
    sys.stdout.write(json.dumps({**STEP, **obj}) + "\n")
    sys.stdout.flush()


def config(job):
    return ClientConfiguration(job["endpoint"], Credentials(), request_timeout=job.get("request_timeout", 5))


def error(e):
    code = getattr(e, "code", None)  # the client's exceptions carry the gRPC status code; grpc's own a method
    return {"error": f"{type(e).__name__}: {e}", "code": code if isinstance(code, int) else None}


class Checker(TransactionChecker):
    def __init__(self, answer):
        self.answer = answer

    def check(self, message):
        emit({"checked": message.message_id})
        return TransactionResolution.COMMIT if self.answer == "commit" else TransactionResolution.ROLLBACK


def build(topic, s):
    m = Message()
    m.topic = topic
    m.body = s["body"].encode()
    if s.get("tag"):
        m.tag = s["tag"]
    if s.get("keys"):
        m.keys = s["keys"]
    if s.get("group"):
        m.message_group = s["group"]
    if s.get("delay_s"):
        m.delivery_timestamp = int(time.time()) + s["delay_s"]  # 5.1.2 takes seconds since the epoch
    for k, v in (s.get("props") or {}).items():
        m.add_property(k, v)
    return m


def produce(job):
    topic = job["topic"]
    p = Producer(config(job), (topic,), Checker(job.get("checker", "commit")))
    p.startup()
    try:
        for i, s in enumerate(job["sends"]):
            t0 = int(time.time() * 1000)
            m = build(topic, s)
            try:
                if s.get("transaction"):
                    tx = p.begin_transaction()
                    r = p.send(m, tx)
                    if s["transaction"] == "commit":
                        tx.commit()
                    elif s["transaction"] == "rollback":
                        tx.rollback()
                elif s.get("mode") == "async":
                    r = p.send_async(m).result(timeout=30)
                else:
                    r = p.send(m)
                emit({"i": i, "body": s["body"], "message_id": r.message_id, "offset": r.offset, "sent_ms": t0})
            except Exception as e:
                emit({"i": i, "body": s["body"], **error(e)})
        time.sleep(job.get("linger_s", 0))
    finally:
        p.shutdown()


def simple(job):
    c = SimpleConsumer(
        config(job),
        job["group"],
        {job["topic"]: FilterExpression(job.get("tag", "*"))},
        await_duration=job.get("await_s", 5),
    )
    c.startup()
    acked, attempts, errors, delivered = set(), {}, 0, 0
    deadline = time.monotonic() + job.get("deadline_s", 60)
    plan = job.get("plan") or {}
    stop_after = job.get("stop_after") or float("inf")
    try:
        while len(acked) < job["expect"] and delivered < stop_after and time.monotonic() < deadline:
            asked = int(time.time() * 1000)  # the broker's pop time (its invisible time's start) is no earlier
            try:
                msgs = c.receive(job.get("batch", 16), job.get("invisible_s", 10))
            except Exception as e:
                errors += 1
                if errors <= 5:  # the first few say why; the rest are the same
                    emit(error(e))
                time.sleep(0.5)
                continue
            for m in msgs or []:
                delivered += 1
                body = m.body.decode()
                n = attempts[body] = attempts.get(body, 0) + 1
                steps = plan.get(body) or []
                action = steps[n - 1] if n <= len(steps) else "ack"
                line = {
                    "body": body,
                    "message_id": m.message_id,
                    "attempt": m.delivery_attempt,
                    "action": action,
                    "t": int(time.time() * 1000),
                    "asked": asked,
                }
                try:
                    if action == "ack":
                        c.ack(m)
                        acked.add(body)
                    elif action.startswith("change:"):
                        c.change_invisible_duration(m, int(action.split(":")[1]))
                except Exception as e:
                    line.update(error(e))
                emit(line)
    finally:
        c.shutdown()


class Listener(MessageListener):
    def __init__(self, fail):
        self.fail, self.lock, self.seen = set(fail), threading.Lock(), set()

    def consume(self, message):
        body = message.body.decode()
        with self.lock:
            emit({"body": body, "message_id": message.message_id, "attempt": message.delivery_attempt})
            if body in self.fail:
                self.fail.discard(body)
                return ConsumeResult.FAILURE
            self.seen.add(body)
        return ConsumeResult.SUCCESS


def push(job):
    listener = Listener(job.get("fail") or [])
    c = PushConsumer(config(job), job["group"], listener, {job["topic"]: FilterExpression("*")})
    c.startup()
    deadline = time.monotonic() + job.get("deadline_s", 60)
    try:
        while len(listener.seen) < job["expect"] and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        c.shutdown()


def seq(job):
    for sub in job["jobs"]:
        STEP["step"] = sub["op"]
        OPS[sub["op"]](dict(sub, endpoint=job["endpoint"]))


OPS = {"produce": produce, "simple": simple, "push": push, "seq": seq}


def main():
    job = json.loads(sys.argv[1])
    try:
        OPS[job["op"]](job)
    except Exception as e:
        emit({"fatal": True, **error(e)})
    STEP.clear()
    emit({"done": True})


if __name__ == "__main__":
    main()
