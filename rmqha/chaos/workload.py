"""The chaos workload: the official client at a fixed send rate and a push consumer, every outcome recorded.

    python -m rmqha.chaos.workload RUN_DIR NAMESRV --rate 200 --duration 60 [--run-id ID] [--topic TopicChaos]
                             [--client python|rust]

--client rust (or CLIENT=rust) runs the same workload with the second client instead: clients/rust's
`workload` command (rocketmq-client-rust; `make rust-client` builds it, RUST_CLIENT_BIN overrides the
path), which takes the same options, writes the same files and prints the same final line. Every
history line names the library that did it ("library").

Writes RUN_DIR/history/producer-<id>.jsonl and consumer-<id>.jsonl (rmqha/runs/history.py's format) and
RUN_DIR/chaos/progress-<id>.json (counters, rewritten every 0.5 s, read by `python -m rmqha.chaos.run` for
its status line). Ends with one JSON line on stdout: the final counters.

Sends are `send_async`: rocketmq 0.4.4's `send_sync` retries every non-OK status and ends with "No route
info", while the async callback reports FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE as they are. A send
that fails in the client (exception callback: the 1.0.1 client's occasional transport race, a client
timeout) is recorded as ERROR and tried again with the same send_id (attempt 2, 3); the history ties
the tries together through KEYS.

A try records no `broker_name` (the guarantee matrix shows failed tries as "group unknown"): rocketmq 0.4.4
cannot say where a send went. Its SendResult is (status, msgId, offset); the exception callback's CMQException
is (error, line, file, msg, type), and msg is empty for these failures (all 22,443 async ERRORs in the run
folders on this machine on 2026-11-27 read `ProducerSendAsyncFailed: b''`); the binding exposes no message
queue anywhere. A MessageQueueSelector does not help: the C callback it becomes gets only the number of
queues (mq_size, msg, arg), not the queues, so a selector knows an index into the client's private route table, whose broker order
the workload cannot see and which changes during exactly the faults in question (a master that leaves the
route takes its queues out); it would also replace the client's own queue choice with ours and, through
send_orderly, make the sends synchronous. (The .so exports SendMessageOrderlyAsync, unwrapped by the binding,
with the same count-only selector.) Answered tries are placed by their stored copy (uniq_key); a failed try
stays "group unknown" (the Rust client names the broker only of answered tries: its failed tries lack it too).

--orderly-rate R adds an orderly lane beside it: R sends a second, one at a time (`send_orderly`, sync: the
next send of a key waits for the previous one's answer, as an orderly producer must), to --orderly-topic,
the sharding key cycling over --orderly-shards keys; the queue selector is the binding's
hashing_queue_selector (key % number of queues), so with no more keys than queues each key has a queue of
its own. Every try is recorded with its key (`shard`), and an orderly push consumer group
(ChaosOrderlyCG<id>, `PushConsumer(orderly=True)`: one queue consumed by one thread, in queue-offset order)
records each receive with `ordered`, its queue id and queue offset: the delivery checker's `reordered`
(per sharding key, in acknowledgement order) and the per-queue order check judge it.
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import os
import sys
import threading
import time

from rmqha.runs.recorder import HistoryRecorder, status_name
from rmqha.runs.history import ERROR, now_ms

MAX_ATTEMPTS = 3


class _CallbackRefs(dict):
    """rocketmq 0.4.4 keeps two ctypes callbacks per send_async in a list and removes the one that fired
    with list.remove (O(n) per completion); same contract, O(1) (see bench/bench_send.py)."""

    def append(self, item) -> None:
        self[id(item)] = item

    def remove(self, item) -> None:
        self.pop(id(item), None)


class Counters:
    def __init__(self):
        self.lock = threading.Lock()
        self.c = collections.Counter()
        self.received_ids: set[str] = set()
        self.late_ids: set[str] = set()  # received by the late consumer group (--late-consumer-at)
        self.orderly_ids: set[str] = set()  # received by the orderly consumer group (--orderly-rate)
        self.orderly_stored: set[str] = set()  # orderly send_ids the broker stored
        self.group_topics: dict[str, str] = {}  # consumer group -> its topic (rmqha.chaos.run drains each)
        self.stored_ids: set[str] = set()  # send_ids the broker stored (any non-ERROR status)
        self.groups: set[str] = set()  # consumer groups started (rmqha.chaos.run drains each)

    def add(self, key: str, n: int = 1) -> None:
        with self.lock:
            self.c[key] += n

    def snapshot(self, phase: str) -> dict:
        with self.lock:
            return {
                "phase": phase,
                "groups": sorted(self.groups),
                "attempts": self.c["attempts"],
                "ok": self.c["SEND_OK"],
                "timeouts": self.c["FLUSH_SLAVE_TIMEOUT"] + self.c["FLUSH_DISK_TIMEOUT"],
                "not_available": self.c["SLAVE_NOT_AVAILABLE"],
                "errors": self.c[ERROR],
                "gave_up": self.c["gave_up"],
                "inflight": self.c["inflight"],
                "received": self.c["received"],
                "received_unique": len(self.received_ids),
                "stored_unique": len(self.stored_ids),
                "received_late": self.c["received_late"],
                "groupTopics": dict(self.group_topics),
                "orderly_ok": self.c["orderly_SEND_OK"],
                "received_orderly": self.c["received_orderly"],
                "ts": time.time(),
            }


def write_json_atomic(path: str, obj) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(obj, fh)
    os.replace(tmp, path)


def make_body(send_id: str, size: int) -> bytes:
    # The client's SetMessageBody takes a C string: no NUL bytes.
    head = (send_id + " ").encode()
    return (head + b"x" * max(0, size - len(head)))[: max(size, len(head))]


RUST_BIN = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    "clients",
    "rust",
    "target",
    "release",
    "rmq-rust-client",
)


def _shared_workload_args(args) -> list[str]:
    """The options the python5 and the rust workloads take as this one does (files, rate, lengths, drain)."""
    return [
        "--run-dir",
        args.run_dir,
        "--rate",
        str(args.rate),
        "--duration",
        str(args.duration),
        "--run-id",
        args.run_id,
        "--topic",
        args.topic,
        "--body-size",
        str(args.body_size),
        "--timeout-ms",
        str(args.timeout_ms),
        "--max-inflight",
        str(args.max_inflight),
        "--drain",
        str(args.drain),
        *(["--drain-signal", args.drain_signal] if args.drain_signal else []),
    ]


def exec_python5_workload(args) -> int:
    """Replace this process with clients/python5/workload.py in .venv-client5 (same files and output)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    python = os.path.join(root, ".venv-client5", "bin", "python")
    if not os.access(python, os.X_OK):
        sys.stderr.write(f"error: {python} is missing: run `make venv-client5`\n")
        return 3
    argv = [
        python,
        os.path.join(root, "clients", "python5", "workload.py"),
        "--endpoint",
        args.namesrv,
        *_shared_workload_args(args),
    ]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(python, argv)
    return 3  # not reached


def exec_rust_workload(args) -> int:
    """Replace this process with clients/rust's `workload` command (same options, files and output)."""
    binary = os.environ.get("RUST_CLIENT_BIN") or RUST_BIN
    if not os.access(binary, os.X_OK):
        sys.stderr.write(f"error: {binary} is not built: run `make rust-client`\n")
        return 3
    argv = [
        binary,
        "--namesrv",
        args.namesrv,
        "workload",
        *_shared_workload_args(args),
        *(["--trace"] if args.trace else []),
    ]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(binary, argv)
    return 3  # not reached


def orderly_send(prod, p, args, counters, send_id: str, shard: int) -> None:
    """One orderly message: send_orderly (sync) to the shard's queue, tried again with the same send_id after
    a client error (up to MAX_ATTEMPTS): the next message of the key is not sent before this one is done."""
    body = make_body(send_id, args.body_size)
    for attempt in range(1, MAX_ATTEMPTS + 1):
        counters.add("attempts")
        try:
            r = prod.send_orderly(p, args.orderly_topic, body, shard, send_id=send_id, attempt=attempt)
        except Exception:
            counters.add(ERROR)
            continue
        st = status_name(r.status)
        with counters.lock:
            counters.c[st] += 1
            counters.c["orderly_" + st] += 1
            counters.orderly_stored.add(send_id)
        return
    counters.add("gave_up")


def orderly_lane(prod, p, args, counters, start: float, end: float) -> None:
    """--orderly-rate sends a second until `end`, the sharding key cycling over --orderly-shards keys."""
    i = 0
    while True:
        now = time.monotonic()
        if now >= end:
            return
        if i < int((now - start) * args.orderly_rate):
            orderly_send(prod, p, args, counters, prod.new_send_id(), shard=i % max(1, args.orderly_shards))
            i += 1
        else:
            time.sleep(0.005)


def add_lane_options(ap: argparse.ArgumentParser) -> None:
    """The consumer groups and send lanes beside the main one, and the end of the run they wait for."""
    ap.add_argument(
        "--planted-drop-every",
        type=int,
        default=0,
        metavar="N",
        help="a planted consumer bug (the delivery checker's own test): the consumer swallows every "
        "Nth message it gets, acknowledged to the broker and never recorded",
    )
    ap.add_argument(
        "--late-consumer-after-heal",
        action="store_true",
        help="with --drain-signal: start the late consumer group (reading every queue from its start) "
        "once rmqha.chaos.run has healed the cluster (it writes FILE.healed), before the drain",
    )
    ap.add_argument(
        "--drain-signal",
        default=None,
        metavar="FILE",
        help="after the sends, keep the consumers running (phase 'awaiting drain') until FILE exists: "
        "rmqha.chaos.run heals the cluster, waits for the slaves and for every group to consume each "
        "queue to its end, then writes it (--drain is then the wait for FILE, x30)",
    )
    ap.add_argument(
        "--late-consumer-at",
        type=float,
        default=None,
        metavar="SECONDS",
        help="start a second consumer group this many seconds into the sending, reading every "
        "queue from its start: one that subscribes during a master outage gets a route "
        "without the master and reads that group's queues from its slave (python client only)",
    )
    ap.add_argument(
        "--orderly-rate",
        type=float,
        default=0.0,
        metavar="R",
        help="also R orderly sends a second (send_orderly, one at a time, sharding key = send number "
        "modulo --orderly-shards) to --orderly-topic, consumed by an orderly push consumer group "
        "(python client only; 0: none)",
    )
    ap.add_argument("--orderly-topic", default="TopicChaosOrderly")
    ap.add_argument(
        "--orderly-shards",
        type=int,
        default=8,
        help="sharding keys of the orderly lane (at most the topic's queues: a queue per key)",
    )


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m rmqha.chaos.workload")
    ap.add_argument("run_dir")
    ap.add_argument("namesrv")
    ap.add_argument("--rate", type=float, default=200.0, help="logical sends per second")
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of sending")
    ap.add_argument("--run-id", default=str(int(time.time())))
    ap.add_argument("--topic", default="TopicChaos")
    ap.add_argument("--body-size", type=int, default=256)
    ap.add_argument("--timeout-ms", type=int, default=10000, help="client send timeout (above the sync wait)")
    ap.add_argument("--max-inflight", type=int, default=4000)
    ap.add_argument("--drain", type=float, default=20.0, help="seconds to wait for the consumer at the end")
    add_lane_options(ap)
    ap.add_argument(
        "--trace",
        action="store_true",
        help="with --client rust: the client's trace dispatcher (a trace record per send and consume)",
    )
    ap.add_argument(
        "--client",
        choices=("python", "rust", "python5"),
        default=os.environ.get("CLIENT") or "python",
        help="python: the official client (PyPI rocketmq); rust: clients/rust (rocketmq-client-rust); python5: "
        "the official 5.x client (rocketmq-python-client, .venv-client5) through the cluster's 5.x proxy, whose "
        "endpoint is then the second argument",
    )
    return ap


class Workload:
    """One python-client run, in the order main calls its steps; the progress thread reads `phase`."""

    def __init__(self, args) -> None:
        self.args = args
        self.rid = rid = args.run_id
        self.hist = os.path.join(args.run_dir, "history")
        chaos_dir = os.path.join(args.run_dir, "chaos")
        os.makedirs(chaos_dir, exist_ok=True)
        self.progress_path = os.path.join(chaos_dir, f"progress-{rid}.json")
        self.counters = Counters()
        self.phase = "starting"
        self.prod = HistoryRecorder(os.path.join(self.hist, f"producer-{rid}.jsonl"), client=f"producer-{rid}")
        self.cons = HistoryRecorder(os.path.join(self.hist, f"consumer-{rid}.jsonl"), client=f"consumer-{rid}")
        self.p = self.prod.producer(f"ChaosPG{rid}", namesrv=args.namesrv, timeout_ms=args.timeout_ms)
        self.p._callback_refs = _CallbackRefs()
        gc.set_threshold(50000, 20, 20)  # each send_async leaves ctypes closure cycles behind
        self.stop_progress = threading.Event()
        self.consumer = None
        self.orderly: dict = {}  # the orderly lane, with --orderly-rate: its recorder, consumer and sender thread
        self.late: dict = {}  # the late consumer group, once started: its recorder and consumer
        self.retries: collections.deque = collections.deque()  # (send_id, attempt)

    def start_progress(self) -> None:
        def progress_loop():
            while not self.stop_progress.wait(0.5):
                write_json_atomic(self.progress_path, self.counters.snapshot(self.phase))

        threading.Thread(target=progress_loop, daemon=True).start()

    def create_topic(self) -> None:
        """A first send_sync creates the topic (autoCreateTopicEnable) before the consumer subscribes."""
        args, prod, counters = self.args, self.prod, self.counters
        first_id = prod.new_send_id()
        for attempt in range(1, 6):
            counters.add("attempts")
            try:
                r = prod.send(
                    self.p, args.topic, make_body(first_id, args.body_size), send_id=first_id, attempt=attempt
                )
                st = status_name(r.status)
                counters.add(st)
                if st != ERROR:
                    counters.stored_ids.add(first_id)
                break
            except Exception:
                counters.add(ERROR)
                time.sleep(0.5)

    def counting(self, counter: str, ids: set):
        """A consumer callback: counts the receive and remembers its send_id (KEYS)."""
        counters = self.counters

        def on_message(msg):
            counters.add(counter)
            k = msg.keys.decode() if isinstance(msg.keys, bytes) else msg.keys
            if k:
                with counters.lock:
                    ids.add(k)

        return on_message

    def start_consumer(self) -> None:
        args, rid, counters = self.args, self.rid, self.counters
        self.consumer = self.cons.push_consumer(
            f"ChaosCG{rid}",
            args.topic,
            namesrv=args.namesrv,
            on_message=self.counting("received", counters.received_ids),
            drop_every=args.planted_drop_every,
        )
        counters.groups.add(f"ChaosCG{rid}")
        counters.group_topics[f"ChaosCG{rid}"] = args.topic

    def start_orderly_consumer(self) -> None:
        args, rid, counters = self.args, self.rid, self.counters
        # the topic exists before the orderly group subscribes (rmqha.chaos.run creates it on every master;
        # run alone, this first send auto-creates it)
        orderly_send(self.prod, self.p, args, counters, self.prod.new_send_id(), shard=0)
        orec = HistoryRecorder(
            os.path.join(self.hist, f"consumer-orderly-{rid}.jsonl"), client=f"consumer-orderly-{rid}"
        )
        self.orderly["recorder"] = orec
        self.orderly["consumer"] = orec.push_consumer(
            f"ChaosOrderlyCG{rid}",
            args.orderly_topic,
            namesrv=args.namesrv,
            ordered=True,
            on_message=self.counting("received_orderly", counters.orderly_ids),
        )
        counters.groups.add(f"ChaosOrderlyCG{rid}")
        counters.group_topics[f"ChaosOrderlyCG{rid}"] = args.orderly_topic

    def send_async(self, send_id: str, attempt: int) -> None:
        args, prod, counters = self.args, self.prod, self.counters
        body = make_body(send_id, args.body_size)
        rec = prod.send_record(args.topic, send_id, attempt, len(body))
        msg = prod._message(args.topic, body, send_id, None, None)

        def on_ok(res):
            uniq = res.msg_id.decode() if isinstance(res.msg_id, bytes) else res.msg_id
            st = status_name(res.status)
            prod.writer.append(
                rec | {"end_ms": now_ms(), "status": st, "uniq_key": uniq or None, "queue_offset": res.offset}
            )
            with counters.lock:
                counters.c[st] += 1
                counters.c["inflight"] -= 1
                counters.stored_ids.add(send_id)

        def on_err(exc):
            prod.writer.append(rec | {"end_ms": now_ms(), "status": ERROR, "error": f"{type(exc).__name__}: {exc}"})
            with counters.lock:
                counters.c[ERROR] += 1
                counters.c["inflight"] -= 1
                if attempt < MAX_ATTEMPTS:
                    self.retries.append((send_id, attempt + 1))
                else:
                    counters.c["gave_up"] += 1

        with counters.lock:
            counters.c["attempts"] += 1
            counters.c["inflight"] += 1
        prod.invoked(rec)
        try:
            self.p.send_async(msg, on_ok, on_err)
        except Exception as e:  # refused before it left the client
            on_err(e)

    def start_late_consumer(self) -> None:
        args, rid, counters = self.args, self.rid, self.counters
        rec = HistoryRecorder(os.path.join(self.hist, f"consumer-late-{rid}.jsonl"), client=f"consumer-late-{rid}")
        self.late["recorder"] = rec
        self.late["consumer"] = rec.push_consumer(
            f"ChaosLateCG{rid}",
            args.topic,
            namesrv=args.namesrv,
            on_message=self.counting("received_late", counters.late_ids),
        )
        counters.groups.add(f"ChaosLateCG{rid}")
        counters.group_topics[f"ChaosLateCG{rid}"] = args.topic

    def send_for_duration(self) -> None:
        """--rate sends a second for --duration, at most --max-inflight unanswered; retries go first."""
        args, counters = self.args, self.counters
        self.phase = "sending"
        start = time.monotonic()
        end = start + args.duration
        if self.orderly:
            self.orderly["thread"] = threading.Thread(
                target=orderly_lane, args=(self.prod, self.p, args, counters, start, end), daemon=True
            )
            self.orderly["thread"].start()
        i = 0
        while True:
            now = time.monotonic()
            if now >= end:
                break
            if args.late_consumer_at is not None and not self.late and now - start >= args.late_consumer_at:
                self.start_late_consumer()
            while self.retries:
                self.send_async(*self.retries.popleft())
            due = int((now - start) * args.rate)
            while i < due and counters.c["inflight"] < args.max_inflight:
                self.send_async(self.prod.new_send_id(), 1)
                i += 1
            time.sleep(min(0.01, max(0.0, end - time.monotonic())))

    def drain_sends(self) -> None:
        """Let every send finish (statuses come back; client errors get their retries)."""
        args = self.args
        self.phase = "draining sends"
        deadline = time.monotonic() + 3 * args.timeout_ms / 1000.0 + 5
        if self.orderly:
            self.orderly["thread"].join(timeout=MAX_ATTEMPTS * args.timeout_ms / 1000.0 + 5)
        while time.monotonic() < deadline:
            while self.retries:
                self.send_async(*self.retries.popleft())
            if self.counters.c["inflight"] <= 0 and not self.retries:
                break
            time.sleep(0.05)

    def await_drain_signal(self) -> None:
        """The run, not this process, knows when the cluster is healed and every group is at the end of
        every queue: consumers keep consuming until it says so (or it is gone for too long)."""
        args = self.args
        self.phase = "awaiting drain"
        deadline = time.monotonic() + 30 * args.drain
        while time.monotonic() < deadline and not os.path.exists(args.drain_signal):
            if args.late_consumer_after_heal and not self.late and os.path.exists(args.drain_signal + ".healed"):
                self.start_late_consumer()
            time.sleep(0.1)

    def drain_receives(self) -> None:
        """Wait up to --drain for every group to have received every stored send."""
        counters = self.counters
        self.phase = "draining receives"
        deadline = time.monotonic() + self.args.drain
        while time.monotonic() < deadline:
            with counters.lock:
                if (
                    counters.stored_ids <= counters.received_ids
                    and (not self.late or counters.stored_ids <= counters.late_ids)
                    and counters.orderly_stored <= counters.orderly_ids
                ):
                    break
            time.sleep(0.1)

    def shutdown(self) -> dict:
        """Stop the consumers and the producer, write the final counters; returns them."""
        rid = self.rid
        snap = self.counters.snapshot("done")
        for c, rec, group in (
            (self.consumer, self.cons, f"ChaosCG{rid}"),
            (self.late.get("consumer"), self.late.get("recorder"), f"ChaosLateCG{rid}"),
            (self.orderly.get("consumer"), self.orderly.get("recorder"), f"ChaosOrderlyCG{rid}"),
        ):
            try:
                if c is not None:
                    c.shutdown()
                    rec.unsubscribed(group)
            except Exception:
                pass
        if self.late:
            self.late["recorder"].close()
        if self.orderly:
            self.orderly["recorder"].close()
        try:
            self.p.shutdown()
        except Exception:
            pass
        self.stop_progress.set()
        write_json_atomic(self.progress_path, snap)
        self.prod.close()
        self.cons.close()
        return snap


def main(argv=None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.trace and args.client != "rust":
        ap.error("--trace needs --client rust (the C++ 1.0.1 client in PyPI rocketmq has no trace dispatcher)")
    if args.client == "python5":
        if args.late_consumer_at is not None or args.late_consumer_after_heal or args.orderly_rate:
            ap.error("the late consumer and the orderly lane need --client python")
        return exec_python5_workload(args)
    if args.client == "rust":
        if args.late_consumer_at is not None or args.late_consumer_after_heal:
            ap.error("the late consumer (--late-consumer-at, --late-consumer-after-heal) needs --client python")
        if args.orderly_rate:
            ap.error("--orderly-rate needs --client python")
        return exec_rust_workload(args)

    w = Workload(args)
    w.start_progress()
    w.create_topic()
    w.start_consumer()
    if args.orderly_rate > 0:
        w.start_orderly_consumer()
    w.send_for_duration()
    w.drain_sends()
    if args.drain_signal:
        w.await_drain_signal()
    else:
        w.drain_receives()
    snap = w.shutdown()
    sys.stdout.write(json.dumps(snap) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
