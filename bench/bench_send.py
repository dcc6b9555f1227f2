"""Send benchmark: TPS and latency of 1 KiB messages from the official client, beside the limits.

Measured in one run, on this machine's loopback:

  raw echo     a minimal Python TCP echo of a ~1 KiB length-prefixed frame between two processes:
               one-at-a-time round trips (the latency floor) and a pipelined rate (the runtime's
               request/response ceiling for a Python process on each end);
  stub         a trivial broker built on rmqha/broker/remoting that answers SEND_MESSAGE at once (with its
               own name server in the same process): the official client's own ceiling;
  async        a real ASYNC_MASTER broker (name server + broker processes);
  sync         a real SYNC_MASTER with its SLAVE (replies wait for the slave's ack).

For each target: a load run (several producer processes, each with many send_async in flight) for
TPS, then a paced run (send_sync at --paced-rate msg/s from one producer) for per-message latency.
Targets (issue 3): async >= 20k msg/s per broker; sync >= 60 % of async; p99 <= 5 ms at 1k msg/s.

    .venv/bin/python bench/bench_send.py [--duration 8] [--producers 2] [--inflight 512]
                                         [--paced-rate 1000] [--paced-seconds 10] [--only async,sync]

BENCH_PROFILE_DIR=<dir> runs the brokers under cProfile (<dir>/<target>-<node>.prof) and prints the
master's hottest functions. Client and brokers share this machine's cores (see the printed count).
The latency CDF goes to build/bench/send-latency.png, the figures to build/bench/send.json.
"""

from __future__ import annotations

import argparse
import glob
import itertools
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

TOPIC = "BenchSend"
OUT_DIR = os.path.join(REPO, "build", "bench")


# ---- percentiles ------------------------------------------------------------------------------


def summary(lat_us) -> dict:
    """p50/p99/p999/max in milliseconds of latencies given in microseconds."""
    import numpy as np

    a = np.asarray(lat_us, dtype=np.float64)
    if not len(a):
        return {"n": 0}
    p50, p99, p999 = np.percentile(a, [50, 99, 99.9])
    return {
        "n": int(len(a)),
        "p50_ms": p50 / 1e3,
        "p99_ms": p99 / 1e3,
        "p999_ms": p999 / 1e3,
        "max_ms": float(a.max()) / 1e3,
    }


# ---- raw loopback: a minimal echo of ~1 KiB frames between two processes ------------------------

ECHO_SERVER = r"""
import socket, struct
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 0)); srv.listen(1)
print(srv.getsockname()[1], flush=True)
conn, _ = srv.accept()
conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
buf = bytearray()
while True:
    data = conn.recv(262144)
    if not data:
        break
    buf += data
    # answer every complete frame in this read (one write per read, as an event loop would)
    pos, out = 0, []
    while len(buf) - pos >= 4:
        n = int.from_bytes(buf[pos:pos + 4], "big")
        if len(buf) - pos - 4 < n:
            break
        out.append(bytes(buf[pos:pos + 4 + n]))
        pos += 4 + n
    del buf[:pos]
    if out:
        conn.sendall(b"".join(out))
"""


def raw_echo(size: int, round_trips: int, pipelined_s: float, window: int) -> dict:
    srv = subprocess.Popen([sys.executable, "-c", ECHO_SERVER], stdout=subprocess.PIPE)
    try:
        port = int(srv.stdout.readline())
        frame = len(os.urandom(size)).to_bytes(4, "big") + os.urandom(size)
        flen = len(frame)
        with socket.create_connection(("127.0.0.1", port)) as c:
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            buf = bytearray(1 << 20)
            view = memoryview(buf)

            def read_frames(k: int) -> None:
                need = k * flen
                while need:
                    need -= c.recv_into(view[: min(need, len(buf))])

            for _ in range(1000):  # warm up
                c.sendall(frame)
                read_frames(1)
            lat = []
            clock = time.perf_counter_ns
            for _ in range(round_trips):
                t0 = clock()
                c.sendall(frame)
                read_frames(1)
                lat.append((clock() - t0) / 1e3)
            # pipelined: keep `window` frames in flight, refill as replies come back
            sent = done = rest = 0
            batch = frame * 16
            t0 = time.perf_counter()
            end = t0 + pipelined_s
            while time.perf_counter() < end:
                while sent - done < window:
                    c.sendall(batch)
                    sent += 16
                rest += c.recv_into(view)
                done += rest // flen
                rest %= flen
            rate = done / (time.perf_counter() - t0)
            left = (sent - done) * flen - rest
            while left > 0:
                left -= c.recv_into(view[: min(left, len(buf))])
        out = summary(lat)
        out["sequential_rps"] = round_trips / (sum(lat) / 1e6)
        out["pipelined_rps"] = rate
        out["lat_us"] = lat
        return out
    finally:
        srv.kill()
        srv.wait()


# ---- the stub broker: answers SEND_MESSAGE at once (rmqha/broker/remoting), with its own name server ---


def serve_stub(ns_port: int, broker_port: int) -> None:
    from twisted.internet import reactor, task

    from rmqha.broker.namesrv.register_body import RegisterBrokerBody, TopicConfig
    from rmqha.broker.namesrv.server import NameServer
    from rmqha.broker.remoting.codes import RequestCode, ResponseCode
    from rmqha.broker.remoting.protocol import ProcessorRegistry, RemotingServerFactory
    from rmqha.broker.store import record

    ns = NameServer(reactor)
    ns.listen(ns_port, "127.0.0.1")
    addr = f"127.0.0.1:{broker_port}"
    body = RegisterBrokerBody(topic_configs={TOPIC: TopicConfig(TOPIC, 4, 4)})

    def register():
        ns.routes.register_broker(
            "StubCluster", addr, "stub", 0, "127.0.0.1:0", body, "stub-channel", int(time.time() * 1000)
        )

    task.LoopingCall(register).start(10.0)
    store_host = ("127.0.0.1", broker_port)
    offsets = itertools.count()

    def send(req, ctx):
        n = next(offsets)
        return req.make_response(
            ResponseCode.SUCCESS,
            None,
            {
                "msgId": record.offset_msg_id(store_host, n * 1200),
                "queueId": req.ext_fields.get("queueId", "0"),
                "queueOffset": n,
                "MSG_REGION": "DefaultRegion",
                "TRACE_ON": "true",
            },
        )

    def ok(req, ctx):
        return req.make_response(ResponseCode.SUCCESS)

    registry = ProcessorRegistry()
    for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        registry.register(code, send)
    for code in (RequestCode.HEART_BEAT, RequestCode.UNREGISTER_CLIENT):
        registry.register(code, ok)
    reactor.listenTCP(broker_port, RemotingServerFactory(registry), interface="127.0.0.1")
    prof = os.environ.get("BENCH_STUB_PROFILE")
    if prof:
        import cProfile

        p = cProfile.Profile()
        p.enable()
        reactor.addSystemEventTrigger("after", "shutdown", lambda: (p.disable(), p.dump_stats(prof)))
    print("ready", flush=True)
    reactor.run()


# ---- the producer worker (its own process: the official client) -------------------------------


def make_body(size: int) -> bytes:
    # The client's SetMessageBody takes a C string, so the body must hold no NUL byte.
    return bytes(97 + (i * 7) % 26 for i in range(size))


class _CallbackRefs(dict):
    """Stands in for the binding's Producer._callback_refs list (append/remove by identity).

    rocketmq 0.4.4's send_async appends two ctypes callbacks per message to a list and removes only
    the one that fired, with list.remove: the list grows by one entry per message sent, and each
    completion scans it, so a producer slows down without bound (measured: 250-450 us of client CPU
    per message after 20k sends, 70 % of it in list_remove). Same contract, O(1); --binding-as-is
    keeps the original list.
    """

    def append(self, item) -> None:
        self[id(item)] = item

    def remove(self, item) -> None:
        del self[id(item)]


def worker(job: dict) -> None:
    import gc

    import numpy as np
    from rocketmq.client import Message, Producer, SendStatus

    p = Producer(job["group"], timeout=job.get("timeout_ms", 10000))
    if job.get("fix_binding", True):
        p._callback_refs = _CallbackRefs()
        gc.set_threshold(50000, 20, 20)  # each send_async leaves ctypes closure cycles behind
    p.set_namesrv_addr(job["namesrv"])
    p.start()
    body = make_body(job["size"])
    topic = job["topic"]

    def message():
        m = Message(topic)
        m.set_keys("k")
        m.set_body(body)
        return m

    # Warm up: route lookup, connection, topic auto-creation. The 1.0.1 client sometimes fails the
    # first request to a broker at once ("GetTransport timed_mutex"); such a send never left the client.
    ok = 0
    deadline = time.time() + 30
    while ok < 20 and time.time() < deadline:
        try:
            if p.send_sync(message()).status == SendStatus.OK:
                ok += 1
        except Exception:
            time.sleep(0.1)
    if ok < 20:
        print(json.dumps({"error": "warm-up failed: the client could not send"}), flush=True)
        os._exit(1)
    start, dur = job["start_at"], job["duration"]
    while time.time() < start:
        time.sleep(min(0.01, max(0.0, start - time.time())))
    clock = time.perf_counter_ns
    cpu0 = os.times()
    lat: list[float] = []
    errors = [0]
    statuses: dict[int, int] = {}
    if job["mode"] == "load":
        window = threading.BoundedSemaphore(job["inflight"])
        counted = [0]
        t_end = start + dur

        def on_ok(r, t0):
            t1 = clock()
            if time.time() < t_end:
                counted[0] += 1
                lat.append((t1 - t0) / 1e3)
            statuses[int(r.status)] = statuses.get(int(r.status), 0) + 1
            window.release()

        def on_err(e):
            errors[0] += 1
            window.release()

        while time.time() < t_end:
            window.acquire()
            t0 = clock()
            try:
                p.send_async(message(), lambda r, t0=t0: on_ok(r, t0), on_err)
            except Exception:
                errors[0] += 1
                window.release()
        for _ in range(job["inflight"]):  # wait for the stragglers
            if not window.acquire(timeout=15):
                break
        done = counted[0]
    else:  # paced send_sync
        rate = job["rate"]
        n = int(rate * dur)
        late = 0
        t_start = time.perf_counter()
        for i in range(n):
            due = t_start + i / rate
            now = time.perf_counter()
            if due > now:
                time.sleep(due - now)
            elif now - due > 0.001:
                late += 1
            m = message()
            t0 = clock()
            try:
                r = p.send_sync(m)
                t1 = clock()
                lat.append((t1 - t0) / 1e3)
                statuses[int(r.status)] = statuses.get(int(r.status), 0) + 1
            except Exception:
                errors[0] += 1
        done = len(lat)
        dur = time.perf_counter() - t_start
    cpu1 = os.times()
    np.save(job["lat_file"], np.asarray(lat, dtype=np.float64))
    print(
        json.dumps(
            {
                "cpu_s": (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system),
                "done": done,
                "duration": dur,
                "errors": errors[0],
                "statuses": statuses,
                "late": late if job["mode"] == "paced" else 0,
            }
        ),
        flush=True,
    )
    sys.stdout.flush()
    os._exit(0)  # the native client's teardown can hang; everything is written


# ---- the raw-protocol producer (its own process): pre-encoded SEND_MESSAGE_V2, pipelined ----------


def raw_frames(job: dict, count: int = 4096) -> list[bytes]:
    """`count` distinct SEND_MESSAGE_V2 (310) requests, encoded once: the load generator then only
    writes bytes and counts replies, so it is never what limits the broker."""
    from rmqha.broker.remoting import codec
    from rmqha.broker.remoting.codes import RequestCode
    from rmqha.broker.remoting.command import RemotingCommand

    body = make_body(job["size"])
    out = []
    for i in range(count):
        props = f"KEYS\x01k\x02UNIQ_KEY\x01{job['tag']}{i:024X}\x02WAIT\x01true\x02"
        fields = {
            "a": job["group"],
            "b": job["topic"],
            "c": "TBW102",
            "d": "4",
            "e": str(i % 4),
            "f": "0",
            "g": str(int(time.time() * 1000)),
            "h": "0",
            "i": props,
            "j": "0",
            "k": "false",
            "m": "false",
        }
        out.append(
            codec.encode(
                RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, fields, body=body, language="PYTHON", opaque=i)
            )
        )
    return out


def raw_worker(job: dict) -> None:
    """Keep job["inflight"] requests in flight on each of job["connections"] sockets until the end
    time; count replies (and their response codes) that came back inside the window."""
    import selectors

    frames = raw_frames(job)
    host, port = job["broker"].rsplit(":", 1)
    socks = []
    for _ in range(job["connections"]):
        c = socket.create_connection((host, int(port)))
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        socks.append(c)
    # warm-up: one request at a time on every connection (topic auto-creation, route lookups)
    for c in socks:
        for f in frames[:20]:
            c.sendall(f)
            _read_replies(c, 1, {})
    start, dur = job["start_at"], job["duration"]
    while time.time() < start:
        time.sleep(min(0.01, max(0.0, start - time.time())))
    t_end = start + dur
    sel = selectors.DefaultSelector()
    state = {}
    for c in socks:
        c.setblocking(False)
        state[c] = {"inflight": 0, "buf": bytearray(), "next": 0, "out": b""}
        sel.register(c, selectors.EVENT_READ | selectors.EVENT_WRITE)
    done = 0
    codes: dict[int, int] = {}
    batch = 16
    closing = False
    while True:
        now = time.time()
        if now >= t_end and not closing:
            closing = True
        if closing and all(st["inflight"] == 0 for st in state.values()):
            break
        if closing and now > t_end + 15:
            break
        for key, ev in sel.select(0.1):
            c, st = key.fileobj, state[key.fileobj]
            if ev & selectors.EVENT_WRITE:
                if not st["out"] and not closing and st["inflight"] + batch <= job["inflight"]:
                    i = st["next"]
                    st["out"] = b"".join(frames[(i + k) % len(frames)] for k in range(batch))
                    st["next"] = i + batch
                    st["inflight"] += batch
                if st["out"]:
                    try:
                        n = c.send(st["out"])
                        st["out"] = st["out"][n:]
                    except BlockingIOError:
                        pass
            if ev & selectors.EVENT_READ:
                try:
                    data = c.recv(1 << 18)
                except BlockingIOError:
                    data = None
                if data == b"":
                    raise SystemExit("the broker closed a connection")
                if data:
                    got = _take_replies(st["buf"], data, codes if time.time() < t_end else None)
                    st["inflight"] -= got
                    if time.time() < t_end:
                        done += got
    cpu = os.times()
    print(json.dumps({"done": done, "codes": codes, "cpu_s": cpu.user + cpu.system}), flush=True)


def _take_replies(buf: bytearray, data: bytes, codes) -> int:
    """Append data; drop every complete reply frame from buf and count it (and its code)."""
    from rmqha.broker.remoting import codec

    buf += data
    pos, got, n = 0, 0, len(buf)
    while n - pos >= 4:
        length = int.from_bytes(buf[pos : pos + 4], "big")
        if n - pos - 4 < length:
            break
        if codes is not None and got % 64 == 0:  # sample the codes: decoding every reply costs the client
            code = codec.decode_frame(bytes(buf[pos + 4 : pos + 4 + length])).code
            codes[code] = codes.get(code, 0) + 1
        pos += 4 + length
        got += 1
    del buf[:pos]
    return got


def _read_replies(c, k: int, codes) -> None:
    buf = bytearray()
    got = 0
    while got < k:
        got += _take_replies(buf, c.recv(65536), codes)


def run_raw(broker: str, n: int, args, tag: str, servers: dict) -> dict:
    """n raw producer processes against one broker address; TPS and the servers' CPU per message."""
    start_at = time.time() + 2.0
    server_cpu: dict[str, float] = {}

    def sample():
        time.sleep(max(0.0, start_at - time.time()))
        before = {k: proc_cpu_s(pid) for k, pid in servers.items()}
        time.sleep(args.duration)
        server_cpu.update({k: proc_cpu_s(pid) - before[k] for k, pid in servers.items()})

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    procs = []
    for i in range(n):
        job = {
            "broker": broker,
            "group": f"BenchRaw-{tag}-{i}",
            "topic": TOPIC,
            "size": args.size,
            "tag": f"{tag[:3]}{i}",
            "start_at": start_at,
            "duration": args.duration,
            "inflight": args.raw_inflight,
            "connections": args.raw_connections,
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, __file__, "--raw-worker", json.dumps(job)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        )
    results = []
    for pr in procs:
        out, err = pr.communicate(timeout=args.duration + 60)
        lines = [ln for ln in out.decode().splitlines() if ln.startswith("{")]
        if not lines:
            raise SystemExit(f"raw {tag}: a producer failed: {err.decode()[-2000:]}")
        results.append(json.loads(lines[-1]))
    sampler.join()
    done = sum(r["done"] for r in results)
    codes: dict[str, int] = {}
    for r in results:
        for k, v in r["codes"].items():
            codes[k] = codes.get(k, 0) + v
    return {
        "tps": done / args.duration,
        "n": done,
        "codes_sampled": codes,
        "client_cpu_s": sum(r["cpu_s"] for r in results),
        "server_cpu": {k: v / args.duration for k, v in server_cpu.items()},
        "server_cpu_us_per_msg": {k: v * 1e6 / max(1, done) for k, v in server_cpu.items()},
    }


def proc_cpu_s(pid: int) -> float:
    """utime + stime of a process, seconds."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_workers(namesrv: str, mode: str, n: int, args, tag: str, tmp: str, servers: dict) -> dict:
    import numpy as np

    start_at = time.time() + args.warmup
    dur = args.duration if mode == "load" else args.paced_seconds
    server_cpu: dict[str, float] = {}

    def sample():  # the servers' CPU seconds over the measured window
        time.sleep(max(0.0, start_at - time.time()))
        before = {k: proc_cpu_s(pid) for k, pid in servers.items()}
        time.sleep(dur)
        server_cpu.update({k: proc_cpu_s(pid) - before[k] for k, pid in servers.items()})

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    procs = []
    for i in range(n):
        job = {
            "namesrv": namesrv,
            "group": f"BenchPG-{tag}-{mode}-{i}",
            "topic": TOPIC,
            "size": args.size,
            "mode": mode,
            "start_at": start_at,
            "duration": args.duration if mode == "load" else args.paced_seconds,
            "inflight": args.inflight,
            "rate": args.paced_rate / n,
            "fix_binding": not args.binding_as_is,
            "lat_file": os.path.join(tmp, f"{tag}-{mode}-{i}.npy"),
        }
        procs.append(
            (
                job,
                subprocess.Popen(
                    [sys.executable, __file__, "--worker", json.dumps(job)],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    cwd=tmp,
                ),
            )
        )
    results, lat = [], []
    for job, pr in procs:
        out, _ = pr.communicate(timeout=args.warmup + job["duration"] + 90)
        lines = [ln for ln in out.decode().splitlines() if ln.startswith("{")]
        if not lines:
            raise SystemExit(f"{tag} {mode}: a producer printed nothing (exit {pr.returncode})")
        r = json.loads(lines[-1])
        if "error" in r:
            raise SystemExit(f"{tag} {mode}: {r['error']}")
        results.append(r)
        lat.append(np.load(job["lat_file"]))
    sampler.join()
    lat_all = np.concatenate(lat) if lat else np.zeros(0)
    out = summary(lat_all)
    total = sum(r["done"] for r in results)
    if mode == "load":
        out["tps"] = total / args.duration
    else:
        out["tps"] = total / max(r["duration"] for r in results)
        out["late"] = sum(r["late"] for r in results)
    out["errors"] = sum(r["errors"] for r in results)
    out["client_cpu_s"] = sum(r["cpu_s"] for r in results)
    out["server_cpu"] = {k: v / dur for k, v in server_cpu.items()}  # cores busy
    st: dict[str, int] = {}
    for r in results:
        for k, v in r["statuses"].items():
            st[k] = st.get(k, 0) + v
    out["statuses"] = st
    out["lat_us"] = lat_all
    return out


# ---- targets ----------------------------------------------------------------------------------


def start_stub(tmp: str):
    from rmqha.cluster.standalone import free_ports

    ns_port, b_port = free_ports(1), free_ports(1)
    env = dict(os.environ)
    prof = os.environ.get("BENCH_PROFILE_DIR")
    if prof:
        env["BENCH_STUB_PROFILE"] = os.path.join(prof, "stub.prof")
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve-stub", str(ns_port), str(b_port)],
        stdout=subprocess.PIPE,
        stderr=open(os.path.join(tmp, "stub.log"), "w"),
        env=env,
    )
    if proc.stdout.readline().strip() != b"ready":
        raise SystemExit("the stub broker did not start; see " + os.path.join(tmp, "stub.log"))
    return f"127.0.0.1:{ns_port}", [proc], {"stub+namesrv": proc.pid}, f"127.0.0.1:{b_port}"


def mount_crashfs(work: str) -> int:
    """The whole work folder of a run (name server and broker stores) on crashfs (images/crashfs); returns
    the daemon's pid, whose CPU counts beside the broker's."""
    from rmqha.cluster import crashfs

    why = crashfs.unavailable()
    if why:
        raise SystemExit(f"--crashfs: crashfs cannot mount here: {why}")
    os.makedirs(work, exist_ok=True)
    m = crashfs.mount(Path(work))
    return json.loads((m.work / "mount.json").read_text())["pid"]


def crash_cost(results: dict) -> None:
    """Sends with the store on crashfs against a plain directory, beside the goal (within 2x)."""
    plain, on = results.get("async") or {}, results.get("crashfs") or {}
    for kind, what in (("raw", "raw producer"), ("load", "official client")):
        if kind in plain and kind in on:
            ratio = on[kind]["tps"] / max(plain[kind]["tps"], 1e-9)
            print(
                f"  crashfs cost ({what}): {on[kind]['tps']:.0f} msg/s on crashfs, {plain[kind]['tps']:.0f} on a plain "
                f"directory = {ratio:.2f} of plain (goal: within 2x, >= 0.50)  {'MET' if ratio >= 0.5 else 'MISSED'}"
            )


def start_cluster(tmp: str, tag: str, sync: bool, file_size: int, settings: dict | None = None):
    from rmqha.cluster.standalone import BrokerProcess, NameServerProcess

    prof = os.environ.get("BENCH_PROFILE_DIR")

    class Broker(BrokerProcess):
        def _spawn(self, args):
            if prof:
                args = ["-m", "cProfile", "-o", os.path.join(prof, f"{tag}-{self.name}.prof"), *args]
            super()._spawn(args)

    work = os.path.join(tmp, tag)
    ns = NameServerProcess(work).start()
    extra = {
        "mappedFileSizeCommitLog": str(file_size),
        "registerNameServerPeriod": "30000",
        "syncFlushTimeout": "5000",
        **(settings or {}),
    }
    nodes = [ns]
    master = Broker(work, "broker-a", ns.addr, role="SYNC_MASTER" if sync else "ASYNC_MASTER", extra=extra)
    nodes.append(master.start())
    if sync:
        slave = Broker(work, "broker-a", ns.addr, role="SLAVE", extra=extra).start()
        nodes.append(slave)
        deadline = time.time() + 30
        while not (master.status().get("ha") or {}).get("connectionCount"):
            if time.time() > deadline:
                raise SystemExit("the slave did not connect to the SYNC_MASTER")
            time.sleep(0.1)
    servers = {"master": master.proc.pid}
    if sync:
        servers["slave"] = slave.proc.pid
    return ns.addr, nodes, servers, master.addr


PEER_BINARY = "rocketmq-broker-rust"  # crates.io rocketmq-broker (rocketmq-rust): `make peer-broker`
PEER_CACHE = os.path.expanduser("~/.cache/rocketmq-ha-refcluster")


def find_peer() -> str | None:
    """rocketmq-broker-rust on PATH, else the newest one `make peer-broker` built into the cache."""
    found = shutil.which(PEER_BINARY)
    if found:
        return found
    builds = sorted(glob.glob(os.path.join(PEER_CACHE, "rocketmq-rust-*", "bin", PEER_BINARY)))
    return builds[-1] if builds else None


def start_peer(tmp: str, exe: str, file_size: int):
    """Another implementation's broker as an ASYNC_MASTER beside ours: any executable that takes the
    Java broker's `-c <properties> -n <name server>` (rocketmq-rust's rocketmq-broker-rust does), fed by
    the same raw producer; its process CPU per message is what is compared."""
    from rmqha.cluster.standalone import NameServerProcess, free_ports

    work = os.path.join(tmp, "peer")
    os.makedirs(work, exist_ok=True)
    ns = NameServerProcess(work).start()
    port = free_ports(5) + 2  # the Java layout it follows: fast listener at listenPort-2, HA at listenPort+1
    cfg = os.path.join(work, "broker.properties")
    with open(cfg, "w") as fh:
        fh.write(
            "\n".join(
                f"{k}={v}"
                for k, v in {
                    "brokerClusterName": "DefaultCluster",
                    "brokerName": "peer-a",
                    "brokerId": 0,
                    "brokerRole": "ASYNC_MASTER",
                    "flushDiskType": "ASYNC_FLUSH",
                    "listenPort": port,
                    "brokerIP1": "127.0.0.1",
                    "namesrvAddr": ns.addr,
                    "autoCreateTopicEnable": "true",
                    "storePathRootDir": os.path.join(work, "store"),
                    "mappedFileSizeCommitLog": file_size,
                }.items()
            )
            + "\n"
        )
    log = open(os.path.join(work, "peer.log"), "w")
    proc = subprocess.Popen(
        [exe, "-c", cfg, "-n", ns.addr], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    deadline = time.time() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                stop_nodes([proc, ns])
                log.close()
                lines = re.sub(r"\x1b\[[0-9;]*m", "", open(log.name, errors="replace").read()).splitlines()
                tail = "\n".join(([ln for ln in lines if " ERROR " in ln or " WARN " in ln] + lines[-1:])[-12:])
                raise SystemExit(
                    f"the peer broker {exe} did not listen on {port} (exit code {proc.poll()}); "
                    f"its warnings and errors:\n{tail}"
                ) from None
            time.sleep(0.2)
    return ns.addr, [ns, proc], {"master": proc.pid}, f"127.0.0.1:{port}"


def stop_nodes(nodes) -> None:
    for n in reversed(nodes):
        if isinstance(n, subprocess.Popen):
            n.terminate()
            try:
                n.wait(10)
            except subprocess.TimeoutExpired:
                n.kill()
                n.wait()
        else:
            n.stop()


def print_profile(path: str, top: int) -> None:
    import pstats

    if not os.path.exists(path):
        print(f"  (no profile at {path})")
        return
    print(f"\n  profile {path} (top {top} by own time):")
    st = pstats.Stats(path)
    st.sort_stats("tottime").print_stats(top)


# ---- plot -------------------------------------------------------------------------------------


def plot(results: dict, path: str, paced_rate: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    styles = {
        "raw echo": ("0.4", "round trip, 1 in flight"),
        "stub": ("tab:green", "stub broker"),
        "async": ("tab:blue", "ASYNC_MASTER"),
        "sync": ("tab:red", "SYNC_MASTER + slave"),
    }
    for name, (color, label) in styles.items():
        r = results.get(name)
        if not r or (name != "raw echo" and "paced" not in r):
            continue
        lat = r["paced"]["lat_us"] if name != "raw echo" else r["lat_us"]
        a = np.sort(np.asarray(lat)) / 1e3
        if not len(a):
            continue
        y = np.arange(1, len(a) + 1) / len(a)
        ax1.plot(a, y, color=color, label=f"{label} (p99 {np.percentile(a, 99):.2f} ms)")
        ax2.plot(a, 1 - y + 1 / len(a), color=color, label=label)
    ax1.axvline(5.0, color="k", ls=":", lw=1, label="target p99 5 ms")
    ax1.set_xscale("log")
    ax1.set_xlabel("latency (ms, log)")
    ax1.set_ylabel("fraction of messages")
    ax1.set_title(f"send_sync latency CDF at {paced_rate:.0f} msg/s, 1 KiB")
    ax1.legend(loc="lower right", fontsize=8)
    ax1.grid(True, which="both", alpha=0.3)
    ax2.set_xscale("log")
    ax2.set_yscale("log")
    ax2.axhline(0.01, color="k", ls=":", lw=1)
    ax2.axhline(0.001, color="k", ls=":", lw=1)
    ax2.set_xlabel("latency (ms, log)")
    ax2.set_ylabel("fraction slower (log): p99 at 1e-2, p99.9 at 1e-3")
    ax2.set_title("tail")
    ax2.grid(True, which="both", alpha=0.3)
    ax2.legend(loc="lower left", fontsize=8)
    tps = [(k, results[k]["load"]["tps"]) for k in ("stub", "async", "sync") if "load" in (results.get(k) or {})]
    if tps:
        fig.suptitle(
            "loaded TPS: "
            + ", ".join(f"{k} {v / 1000:.1f}k msg/s" for k, v in tps)
            + f"   ({os.cpu_count()} cores shared by client and broker)",
            fontsize=10,
        )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---- main -------------------------------------------------------------------------------------


def fmt(r: dict) -> str:
    return f"{r.get('p50_ms', 0):7.2f} {r.get('p99_ms', 0):7.2f} {r.get('p999_ms', 0):7.2f} {r.get('max_ms', 0):7.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=8.0, help="seconds of each load run")
    ap.add_argument("--producers", type=int, default=2, help="producer processes in a load run")
    ap.add_argument("--inflight", type=int, default=512, help="send_async in flight per producer")
    ap.add_argument("--paced-rate", type=float, default=1000.0, help="msg/s of the send_sync latency run")
    ap.add_argument("--paced-seconds", type=float, default=10.0)
    ap.add_argument("--size", type=int, default=1024, help="message body bytes")
    ap.add_argument("--warmup", type=float, default=4.0, help="seconds the producers get to connect")
    ap.add_argument("--only", default="raw,stub,async,sync,peer", help="comma list of raw,stub,async,sync,peer")
    ap.add_argument("--file-size", type=int, default=256 << 20, help="mappedFileSizeCommitLog")
    ap.add_argument(
        "--crashfs",
        action="store_true",
        default=os.environ.get("BENCH_CRASHFS") == "1",
        help="also run the ASYNC_MASTER with its store on crashfs (images/crashfs; root and /dev/fuse) and print "
        "its cost against a plain directory (make bench-send CRASHFS=1)",
    )
    ap.add_argument(
        "--broker-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a broker property for our brokers (repeatable), e.g. sendFastPath=false for the Python path",
    )
    ap.add_argument(
        "--binding-as-is",
        action="store_true",
        help="keep the binding's O(n) send_async callback list (see _CallbackRefs)",
    )
    ap.add_argument("--profile-top", type=int, default=30)
    ap.add_argument(
        "--load",
        choices=("raw", "client", "both"),
        default="both",
        help="load generator: the raw pipelined producer, the official client, or both",
    )
    ap.add_argument("--raw-producers", type=int, default=1, help="raw producer processes")
    ap.add_argument("--raw-connections", type=int, default=2, help="connections per raw producer")
    ap.add_argument("--raw-inflight", type=int, default=256, help="requests in flight per raw connection")
    ap.add_argument(
        "--peer-broker",
        default=find_peer(),
        help=f"another broker to measure beside ours with the raw producer, as an ASYNC_MASTER: an "
        f"executable taking `-c <properties> -n <namesrv>` (default: {PEER_BINARY} on PATH or from "
        f"`make peer-broker`, i.e. rocketmq-rust's broker; without one the peer line says so)",
    )
    ap.add_argument("--raw-worker", help=argparse.SUPPRESS)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--serve-stub", nargs=2, type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(json.loads(args.worker))
    if args.raw_worker:
        return raw_worker(json.loads(args.raw_worker))
    if args.serve_stub:
        return serve_stub(*args.serve_stub)

    only = set(args.only.split(",")) | ({"crashfs", "async"} if args.crashfs else set())
    os.makedirs(OUT_DIR, exist_ok=True)
    prof = os.environ.get("BENCH_PROFILE_DIR")
    if prof:
        os.makedirs(prof, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="bench-send-")
    cores = os.cpu_count()
    print(
        f"send benchmark: {args.size}-byte messages, official client rocketmq 0.4.4 (C++ 1.0.1); "
        f"load: {args.producers} producer processes x {args.inflight} send_async in flight, "
        f"{args.duration:.0f}s; latency: send_sync paced at {args.paced_rate:.0f} msg/s for "
        f"{args.paced_seconds:.0f}s; {cores} cores shared by client and broker"
        + ("; brokers under cProfile" if prof else ""),
        flush=True,
    )
    results: dict = {}
    try:
        if "raw" in only:
            results["raw echo"] = raw_echo(args.size, 20000, 3.0, 64)
            print("  raw echo done", flush=True)
        for tag in ("stub", "async", "crashfs", "sync", "peer"):
            if tag not in only:
                continue
            if tag == "peer" and not args.peer_broker:
                print(
                    f"  peer: no {PEER_BINARY} on PATH or in {PEER_CACHE} and no --peer-broker: no peer figure "
                    "(`make peer-broker` builds rocketmq-rust's, about 35 min on 2 cores)",
                    flush=True,
                )
                continue
            if tag == "stub":
                namesrv, nodes, servers, broker = start_stub(tmp)
            elif tag == "peer":
                namesrv, nodes, servers, broker = start_peer(tmp, args.peer_broker, args.file_size)
                if args.load == "client":
                    print("  peer: measured with the raw producer only", flush=True)
            else:
                daemon = mount_crashfs(os.path.join(tmp, tag)) if tag == "crashfs" else None
                namesrv, nodes, servers, broker = start_cluster(
                    tmp, tag, tag == "sync", args.file_size, dict(kv.split("=", 1) for kv in args.broker_set)
                )
                if daemon:
                    servers["crashfs"] = daemon
            results[tag] = {}
            try:
                if args.load in ("raw", "both") or tag == "peer":
                    results[tag]["raw"] = run_raw(broker, args.raw_producers, args, tag, servers)
                    print(f"  {tag} raw producer done: {results[tag]['raw']['tps']:.0f} msg/s", flush=True)
                if args.load in ("client", "both") and tag != "peer":
                    results[tag]["load"] = run_workers(namesrv, "load", args.producers, args, tag, tmp, servers)
                    results[tag]["paced"] = run_workers(namesrv, "paced", 1, args, tag, tmp, servers)
                    print(f"  {tag} official client done: {results[tag]['load']['tps']:.0f} msg/s", flush=True)
            finally:
                stop_nodes(nodes)
                if tag == "crashfs":
                    from rmqha.cluster import crashfs

                    crashfs.unmount(Path(tmp) / tag)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"\n  {'':34} {'msg/s':>9}   {'p50':>7} {'p99':>7} {'p99.9':>7} {'max':>7}  (ms)")
    raw = results.get("raw echo")
    if raw:
        print(f"  {'raw echo, 1 in flight':34} {raw['sequential_rps']:9.0f}   {fmt(raw)}")
        print(f"  {'raw echo, pipelined (64 in flight)':34} {raw['pipelined_rps']:9.0f}")
    labels = (
        ("stub", "stub broker (client ceiling)"),
        ("async", "ASYNC_MASTER"),
        ("crashfs", "ASYNC_MASTER, store on crashfs"),
        ("sync", "SYNC_MASTER + slave"),
        ("peer", f"peer {os.path.basename(args.peer_broker or PEER_BINARY)}"),
    )
    for tag, label in labels:
        r = results.get(tag) or {}
        rw = r.get("raw")
        if rw:
            per = ", ".join(f"{k} {v:.1f} us" for k, v in rw["server_cpu_us_per_msg"].items())
            print(
                f"  {label + ', raw producer':34} {rw['tps']:9.0f}   broker CPU per message: {per}; "
                f"producer cores busy {rw['client_cpu_s'] / args.duration:.2f}; reply codes (sampled) "
                f"{rw['codes_sampled']}"
            )
        if "load" not in r:
            continue
        ld, pc = r["load"], r["paced"]
        cpu = ", ".join(f"{k} {v:.2f}" for k, v in ld["server_cpu"].items())
        print(
            f"  {label + ', official client':34} {ld['tps']:9.0f}   {fmt(ld)}  errors={ld['errors']} "
            f"statuses={ld['statuses']}"
        )
        server = next(iter(ld["server_cpu"].values()), 0.0)
        print(
            f"  {'':34} cores busy: producers {ld['client_cpu_s'] / args.duration:.2f}, {cpu}; CPU per "
            f"message: client {ld['client_cpu_s'] / max(1, ld['n']) * 1e6:.0f} us, "
            f"{next(iter(ld['server_cpu']), '?')} {server * 1e6 / max(1.0, ld['tps']):.0f} us "
            f"(= {ld['tps'] / max(server, 1e-9):.0f} msg/s per core)"
        )
        print(
            f"  {label + f', send_sync @{args.paced_rate:.0f}/s':34} {pc['tps']:9.0f}   {fmt(pc)}  "
            f"errors={pc['errors']} late={pc['late']}"
        )
    print()
    for tag, limit in (("async", 25.0), ("sync", 40.0)):
        rw = (results.get(tag) or {}).get("raw")
        if rw:
            us = rw["server_cpu_us_per_msg"].get("master", 0.0)
            print(
                f"  target broker CPU per message, {tag:5} <= {limit:.0f} us (raw producer): {us:6.1f} us  "
                f"{'MET' if us <= limit else 'MISSED'}"
            )
    peer, ours = ((results.get(k) or {}).get("raw") for k in ("peer", "async"))
    if peer:
        pus = peer["server_cpu_us_per_msg"].get("master", 0.0)
        line = f"  peer broker CPU per message (ASYNC_MASTER, raw producer): {pus:6.1f} us"
        if ours:
            us = ours["server_cpu_us_per_msg"].get("master", 0.0)
            ratio = us / max(pus, 1e-9)
            line += (
                f"; ours {us:.1f} us = {ratio:.1f}x the peer's"
                if ratio >= 1
                else f"; ours {us:.1f} us, the peer's {1 / max(ratio, 1e-9):.1f}x ours"
            )
        print(line)
    crash_cost(results)
    a, s, st = (results.get(k) or {} for k in ("async", "sync", "stub"))
    if "load" in a:
        print(
            f"  target async >= 20000 msg/s (official client): {a['load']['tps']:8.0f}  "
            f"{'MET' if a['load']['tps'] >= 20000 else 'MISSED'}"
        )
    if "load" in a and "load" in s:
        ratio = s["load"]["tps"] / a["load"]["tps"] * 100
        print(f"  target sync >= 60 % of async:     {ratio:7.1f} %  {'MET' if ratio >= 60 else 'MISSED'}")
    for tag, r in (("async", a), ("sync", s)):
        if "paced" in r:
            p99 = r["paced"].get("p99_ms", 0)
            print(f"  target p99 <= 5 ms at 1k/s, {tag:5}: {p99:6.2f} ms  {'MET' if p99 <= 5 else 'MISSED'}")
    if "load" in st and "load" in a:
        print(f"  async / stub (broker vs client ceiling): {a['load']['tps'] / st['load']['tps'] * 100:5.1f} %")
    print(f"  note: {cores} cores; the producers, the broker(s) and the name server share them.")

    png = os.path.join(OUT_DIR, "send-latency.png")
    plot(results, png, args.paced_rate)
    print(f"  latency plot: {os.path.relpath(png, REPO)}")

    def strip(o):
        if isinstance(o, dict):
            return {k: strip(v) for k, v in o.items() if k != "lat_us"}
        return o

    with open(os.path.join(OUT_DIR, "send.json"), "w") as fh:
        json.dump(
            {
                "cores": cores,
                "args": {k: v for k, v in vars(args).items() if k not in ("worker", "serve_stub", "raw_worker")},
                "results": strip(results),
            },
            fh,
            indent=1,
            default=float,
        )
    if prof:
        for tag in ("async", "sync"):
            if tag in results:
                print_profile(os.path.join(prof, f"{tag}-broker-a-0.prof"), args.profile_top)


if __name__ == "__main__":
    main()
