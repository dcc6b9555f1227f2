"""Runs the official client (PyPI rocketmq 0.4.4, Apache C++ client 1.0.1) in its own process.

    python official_client_worker.py produce '<json job>'   -> one JSON line: {"results": [...]}
    python official_client_worker.py consume '<json job>'   -> one JSON line per message received,
                                                               then {"done": true, ...}

produce job: namesrv, group, timeout_ms, sends: [{mode: sync|async|oneway|orderly|batch, topic,
  messages: [{body, tags, keys, props, arg}]}]. Each result: {"status": int, "msg_id", "offset"} or
  {"error": "..."}; async results are waited for.
consume job: namesrv, group, topic, expect (stop after that many, optional), deadline_s, stop_file
  (stop when it exists, optional), instance (instance name, optional).
Both: credentials ([access key, secret key], optional): the client signs every request (ACL).
"""

import json
import os
import sys
import threading
import time

from rocketmq.client import Message, Producer, PushConsumer


def make_message(topic, spec):
    m = Message(topic)
    if spec.get("keys"):
        m.set_keys(spec["keys"])
    if spec.get("tags"):
        m.set_tags(spec["tags"])
    for k, v in (spec.get("props") or {}).items():
        m.set_property(k, v)
    if spec.get("delay"):
        m.set_delay_time_level(spec["delay"])
    m.set_body(spec["body"])
    return m


def result_of(r):
    return {"status": int(r.status), "msg_id": r.msg_id, "offset": r.offset}


def send_one(p, mode, msg, s, job):
    try:
        if mode == "sync":
            return result_of(p.send_sync(msg))
        if mode == "oneway":
            p.send_oneway(msg)
            return {"status": None}
        if mode == "orderly":
            return result_of(p.send_orderly(msg, s.get("arg", 0), retry_times=s.get("retry", 3)))
        if mode == "async":
            ev, box = threading.Event(), []
            p.send_async(
                msg, lambda r: (box.append(result_of(r)), ev.set()), lambda e: (box.append({"error": str(e)}), ev.set())
            )
            ev.wait(job.get("timeout_ms", 8000) / 1000.0 + 5)
            return box[0] if box else {"error": "async callback never came"}
        return {"error": f"unknown mode {mode}"}
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}


def produce(job):
    p = Producer(job.get("group", "PG"), timeout=job.get("timeout_ms", 8000))
    p.set_namesrv_addr(job["namesrv"])
    if job.get("credentials"):  # ACL: the client's signing hook (access key, secret key, channel)
        p.set_session_credentials(*job["credentials"], "")
    p.start()
    out = []
    try:
        for send in job["sends"]:
            mode, topic = send["mode"], send["topic"]
            specs = send["messages"]
            if mode == "batch":
                for attempt in range(1 + job.get("retries", 0)):
                    try:
                        r = result_of(p.send_batch([make_message(topic, s) for s in specs]))
                        break
                    except Exception as e:
                        r = {"error": f"{type(e).__name__}: {e}"}
                        time.sleep(0.2)
                r["attempts"] = attempt + 1
                out.append(r)
                continue
            for s in specs:
                # The 1.0.1 client sometimes fails a request at once when two of its threads open the
                # first connection to a broker together ("GetTransport ... get timed_mutex timeout",
                # reported as "No route info of this topic"); nothing reached the broker, so such a
                # send may be retried (job "retries"; the status tests use 0).
                for attempt in range(1 + job.get("retries", 0)):
                    r = send_one(p, mode, make_message(topic, s), s, job)
                    if "error" not in r:
                        break
                    time.sleep(0.2)
                r["attempts"] = attempt + 1
                out.append(r)
    finally:
        p.shutdown()
    print(json.dumps({"results": out}), flush=True)


def consume(job):
    lock = threading.Lock()
    got = [0]

    def on_message(msg):
        rec = {
            "id": msg.id,
            "topic": msg.topic,
            "tags": (msg.tags or b"").decode(),
            "keys": (msg.keys or b"").decode(),
            "body": msg.body.decode("utf-8", "replace"),
            "queue_id": msg.queue_id,
            "queue_offset": msg.queue_offset,
            "reconsume_times": msg.reconsume_times,
            "received_ms": int(time.time() * 1000),
            "born_ms": msg.born_timestamp,
            "store_ms": msg.store_timestamp,
            "props": {k: (msg.get_property(k) or b"").decode() for k in job.get("props", [])},
        }
        with lock:
            got[0] += 1
            print(json.dumps(rec), flush=True)

    print(json.dumps({"pid": os.getpid()}), flush=True)  # its native log: ~/logs/rocketmq-cpp/<pid>_*
    c = PushConsumer(job["group"])
    c.set_namesrv_addr(job["namesrv"])
    if job.get("credentials"):
        c.set_session_credentials(*job["credentials"], "")
    if job.get("instance"):
        c.set_instance_name(job["instance"])
    c.subscribe(job["topic"], on_message, job.get("expression", "*"))
    c.start()
    end = time.time() + job.get("deadline_s", 60)
    expect, stop_file = job.get("expect"), job.get("stop_file")
    while time.time() < end:
        if expect is not None and got[0] >= expect:
            time.sleep(job.get("linger_s", 0.5))  # let offsets be committed and late duplicates show
            break
        if stop_file and os.path.exists(stop_file):
            break
        time.sleep(0.05)
    c.shutdown()
    print(json.dumps({"done": True, "received": got[0]}), flush=True)


if __name__ == "__main__":
    {"produce": produce, "consume": consume}[sys.argv[1]](json.loads(sys.argv[2]))
    sys.stdout.flush()
    os._exit(0)  # the native client's atexit teardown can hang; everything is flushed already
