//! `workload`: the chaos workload (rmqha/chaos/workload.py's contract) with this client instead of the official one.
//!
//!   rmq-rust-client --namesrv NS workload --run-dir RUN [--rate 200] [--duration 60] [--run-id ID]
//!                   [--topic TopicChaos] [--body-size 256] [--timeout-ms 10000] [--max-inflight 4000] [--drain 20]
//!                   [--drain-signal FILE] [--trace [--trace-topic T]]
//!
//! Writes RUN/history/producer-<id>.jsonl and consumer-<id>.jsonl in rmqha/runs/recorder.py's format (plus
//! "library", naming this client), rewrites RUN/chaos/progress-<id>.json every 0.5 s with the counters
//! `python -m rmqha.chaos.run` shows, and ends with the final counters as one JSON line on stdout.
//! Sends are async (the callback reports every status as the broker answered it); a send the client
//! failed (ERROR) is tried again with the same send_id, up to 3 attempts. KEYS = send_id.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rocketmq_client_rust::{
    ClientError, ClientRuntime, ConsumeConcurrentlyStatus, DefaultMQProducer, DefaultMQPushConsumer, MQPushConsumer,
    SendResult,
};
use rocketmq_model::common::consumer::consume_from_where::ConsumeFromWhere;
use rocketmq_model::common::message::message_ext::MessageExt;
use rocketmq_model::common::message::message_single::Message;
use serde_json::{json, Map, Value};

use crate::{emit, fatal, Args};

pub const LIBRARY: &str = "rocketmq-client-rust 1.0.0";
const MAX_ATTEMPTS: u32 = 3;
const FIELDS: &[&str] = &[
    "client", "seq", "op", "group", "shard", "topic", "send_id", "attempt", "uniq_key", "status", "error", "offset_msg_id",
    "broker_name", "queue_id", "queue_offset", "commit_log_offset", "store_timestamp", "ordered", "start_ms",
    "end_ms", "body_len", "library",
];

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// One history file: every line has history.py's fields, in its order, and a per-file seq.
struct History {
    client: String,
    file: Mutex<(File, u64)>,
}

impl History {
    fn open(path: &Path, client: String) -> History {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap_or_else(|e| fatal("history dir", e));
        }
        let f = OpenOptions::new().create(true).append(true).open(path).unwrap_or_else(|e| fatal("history", e));
        History { client, file: Mutex::new((f, 0)) }
    }

    fn append(&self, mut rec: Map<String, Value>) {
        rec.insert("client".into(), json!(self.client));
        rec.insert("library".into(), json!(LIBRARY));
        let mut g = self.file.lock().unwrap_or_else(|e| e.into_inner());
        rec.insert("seq".into(), json!(g.1));
        g.1 += 1;
        let mut out = Map::new();
        for k in FIELDS {
            out.insert((*k).to_string(), rec.remove(*k).unwrap_or(Value::Null));
        }
        let _ = writeln!(g.0, "{}", Value::Object(out));
    }
}

#[derive(Default)]
struct Counters {
    c: HashMap<&'static str, i64>,
    received_ids: HashSet<String>,
    stored_ids: HashSet<String>,
}

struct Shared {
    counters: Mutex<Counters>,
    retries: Mutex<VecDeque<(String, u32)>>,
    phase: Mutex<&'static str>,
    prod: History,
    cons: History,
    ids: AtomicU64,
    pgroup: String,
    cgroup: String,
}

impl Shared {
    fn add(&self, key: &'static str, n: i64) {
        *self.counters.lock().unwrap_or_else(|e| e.into_inner()).c.entry(key).or_default() += n;
    }

    fn get(&self, key: &'static str) -> i64 {
        self.counters.lock().unwrap_or_else(|e| e.into_inner()).c.get(key).copied().unwrap_or(0)
    }

    fn snapshot(&self) -> Value {
        let phase = *self.phase.lock().unwrap_or_else(|e| e.into_inner());
        let g = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        let c = |k: &str| g.c.get(k).copied().unwrap_or(0);
        json!({
            "phase": phase, "attempts": c("attempts"), "ok": c("SEND_OK"),
            "timeouts": c("FLUSH_SLAVE_TIMEOUT") + c("FLUSH_DISK_TIMEOUT"),
            "not_available": c("SLAVE_NOT_AVAILABLE"), "errors": c("ERROR"), "gave_up": c("gave_up"),
            "inflight": c("inflight"), "received": c("received"), "received_unique": g.received_ids.len(),
            "stored_unique": g.stored_ids.len(), "groups": [self.cgroup.clone()],
            "ts": SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0),
            "library": LIBRARY,
        })
    }

    fn new_send_id(&self) -> String {
        let n = self.ids.fetch_add(1, Ordering::SeqCst) + 1;
        let salt = (now_ms() ^ (std::process::id() as u64).rotate_left(20) ^ n.wrapping_mul(0x9E37_79B9)) & 0xffff_ffff;
        format!("{}-{n}-{salt:08x}", self.prod.client)
    }
}

fn set_phase(sh: &Shared, phase: &'static str) {
    *sh.phase.lock().unwrap_or_else(|e| e.into_inner()) = phase;
}

fn write_json_atomic(path: &Path, v: &Value) {
    let tmp = path.with_extension("json.tmp");
    if std::fs::write(&tmp, v.to_string()).is_ok() {
        let _ = std::fs::rename(&tmp, path);
    }
}

fn make_body(send_id: &str, size: usize) -> Vec<u8> {
    let mut b = format!("{send_id} ").into_bytes();
    if b.len() < size {
        b.resize(size, b'x');
    }
    b
}

fn message(topic: &str, send_id: &str, body: &[u8]) -> Message {
    Message::builder()
        .topic(topic)
        .key(send_id)
        .body_slice(body)
        .build()
        .unwrap_or_else(|e| fatal("building a message", e))
}

/// The fields of one send try; the "invoke" line (written before the call, so a try that is never
/// answered is still in the history) is the same with op "invoke".
fn send_fields(sh: &Shared, topic: &str, send_id: &str, attempt: u32, body_len: usize, start_ms: u64) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("op".into(), json!("send"));
    m.insert("group".into(), json!(sh.pgroup));
    m.insert("topic".into(), json!(topic));
    m.insert("send_id".into(), json!(send_id));
    m.insert("attempt".into(), json!(attempt));
    m.insert("body_len".into(), json!(body_len));
    m.insert("start_ms".into(), json!(start_ms));
    let mut invoke = m.clone();
    invoke.insert("op".into(), json!("invoke"));
    invoke.insert("end_ms".into(), json!(start_ms));
    sh.prod.append(invoke);
    m
}

/// Record a send's outcome; a failed try is queued again (same send_id) when `retry` and attempts remain.
fn record_result(sh: &Shared, mut rec: Map<String, Value>, send_id: &str, attempt: u32, res: Result<&SendResult, String>,
                 retry: bool) {
    rec.insert("end_ms".into(), json!(now_ms()));
    let mut g = sh.counters.lock().unwrap_or_else(|e| e.into_inner());
    *g.c.entry("inflight").or_default() -= 1;
    match res {
        Ok(r) => {
            let st: &'static str = match r.send_status.to_string().as_str() {
                "SEND_OK" => "SEND_OK",
                "FLUSH_DISK_TIMEOUT" => "FLUSH_DISK_TIMEOUT",
                "FLUSH_SLAVE_TIMEOUT" => "FLUSH_SLAVE_TIMEOUT",
                _ => "SLAVE_NOT_AVAILABLE",
            };
            rec.insert("status".into(), json!(st));
            rec.insert("uniq_key".into(), json!(r.msg_id.as_ref().map(|s| s.to_string())));
            rec.insert("offset_msg_id".into(), json!(r.offset_msg_id));
            rec.insert("queue_offset".into(), json!(r.queue_offset));
            if let Some(mq) = &r.message_queue {
                rec.insert("broker_name".into(), json!(mq.broker_name().to_string()));
                rec.insert("queue_id".into(), json!(mq.queue_id()));
            }
            *g.c.entry(st).or_default() += 1;
            g.stored_ids.insert(send_id.to_string());
        }
        Err(text) => {
            rec.insert("status".into(), json!("ERROR"));
            rec.insert("error".into(), json!(text));
            *g.c.entry("ERROR").or_default() += 1;
            if !retry {
            } else if attempt < MAX_ATTEMPTS {
                sh.retries.lock().unwrap_or_else(|e| e.into_inner()).push_back((send_id.to_string(), attempt + 1));
            } else {
                *g.c.entry("gave_up").or_default() += 1;
            }
        }
    }
    drop(g);
    sh.prod.append(rec);
}

async fn send_async(sh: &Arc<Shared>, producer: &DefaultMQProducer, topic: &str, send_id: String, attempt: u32,
                    body_size: usize, timeout_ms: u64) {
    let body = make_body(&send_id, body_size);
    let rec = send_fields(sh, topic, &send_id, attempt, body.len(), now_ms());
    sh.add("attempts", 1);
    sh.add("inflight", 1);
    let msg = message(topic, &send_id, &body);
    let shc = sh.clone();
    let (rec_c, id_c) = (rec.clone(), send_id.clone());
    let cb = move |r: Option<&SendResult>, e: Option<&ClientError>| {
        let res = match (r, e) {
            (Some(r), _) => Ok(r),
            (None, Some(e)) => Err(e.to_string()),
            (None, None) => Err("callback with neither result nor error".to_string()),
        };
        record_result(&shc, rec_c.clone(), &id_c, attempt, res, true);
    };
    if let Err(e) = producer.send_with_callback_timeout(msg, cb, timeout_ms).await {
        record_result(sh, rec, &send_id, attempt, Err(e.to_string()), true);
    }
}

fn record_receive(sh: &Shared, m: &MessageExt) {
    let t = now_ms();
    let props = m.properties();
    let prop = |k: &str| props.iter().find(|(pk, _)| pk.as_str() == k).map(|(_, v)| v.to_string());
    let keys = prop("KEYS");
    let mut rec = Map::new();
    rec.insert("op".into(), json!("receive"));
    rec.insert("group".into(), json!(sh.cgroup));
    rec.insert("topic".into(), json!(m.topic().to_string()));
    rec.insert("send_id".into(), json!(keys));
    rec.insert("uniq_key".into(), json!(prop("UNIQ_KEY")));
    rec.insert("status".into(), json!("RECEIVED"));
    rec.insert("offset_msg_id".into(), json!(m.msg_id().to_string()));
    rec.insert("broker_name".into(), json!(m.broker_name()));
    rec.insert("queue_id".into(), json!(m.queue_id()));
    rec.insert("queue_offset".into(), json!(m.queue_offset()));
    rec.insert("commit_log_offset".into(), json!(m.commit_log_offset()));
    rec.insert("store_timestamp".into(), json!(m.store_timestamp()));
    rec.insert("ordered".into(), json!(false));
    rec.insert("start_ms".into(), json!(t));
    rec.insert("end_ms".into(), json!(t));
    rec.insert("body_len".into(), json!(m.body().map(|b| b.len())));
    sh.cons.append(rec);
    let mut g = sh.counters.lock().unwrap_or_else(|e| e.into_inner());
    *g.c.entry("received").or_default() += 1;
    if let Some(k) = keys {
        g.received_ids.insert(k);
    }
}

pub async fn cmd_workload(rt: Arc<ClientRuntime>, ns: String, args: &Args) {
    let run_dir = PathBuf::from(args.req("run-dir"));
    let rate: f64 = args.num("rate", 200.0);
    let duration: f64 = args.num("duration", 60.0);
    let rid = args.str_or("run-id", &(now_ms() / 1000).to_string());
    let topic = args.str_or("topic", "TopicChaos");
    let body_size: usize = args.num("body-size", 256);
    let timeout_ms: u64 = args.num("timeout-ms", 10000);
    let max_inflight: i64 = args.num("max-inflight", 4000);
    let drain: f64 = args.num("drain", 20.0);

    let chaos_dir = run_dir.join("chaos");
    std::fs::create_dir_all(&chaos_dir).unwrap_or_else(|e| fatal("run dir", e));
    let progress_path = chaos_dir.join(format!("progress-{rid}.json"));
    let hist = run_dir.join("history");
    let sh = Arc::new(Shared {
        counters: Mutex::new(Counters::default()),
        retries: Mutex::new(VecDeque::new()),
        phase: Mutex::new("starting"),
        prod: History::open(&hist.join(format!("producer-{rid}.jsonl")), format!("producer-{rid}")),
        cons: History::open(&hist.join(format!("consumer-{rid}.jsonl")), format!("consumer-{rid}")),
        ids: AtomicU64::new(0),
        pgroup: format!("ChaosPG{rid}"),
        cgroup: format!("ChaosCG{rid}"),
    });

    let progress = {
        let sh = sh.clone();
        let path = progress_path.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                write_json_atomic(&path, &sh.snapshot());
            }
        })
    };

    // --trace: the client's own trace dispatcher records every send (Pub) and consume (SubBefore/After)
    // in --trace-topic, which the audit reads (its "message trace" line)
    let mut producer_builder = DefaultMQProducer::builder(rt.clone());
    if args.flag("trace") {
        producer_builder = producer_builder.client_config(crate::trace_config(args));
    }
    let producer_builder = producer_builder
        .producer_group(format!("ChaosPG{rid}"))
        .name_server_addr(ns.clone())
        .send_msg_timeout(timeout_ms as u32);
    let producer_builder = match crate::acl_hook(args) {
        Some(hook) => producer_builder.rpc_hook(hook),
        None => producer_builder,
    };
    let mut producer = producer_builder.build();
    if let Err(e) = producer.start().await {
        fatal("producer start", e);
    }

    // A first sync send creates the topic (autoCreateTopicEnable) before the consumer subscribes.
    let first_id = sh.new_send_id();
    for attempt in 1..=5u32 {
        let body = make_body(&first_id, body_size);
        let rec = send_fields(&sh, &topic, &first_id, attempt, body.len(), now_ms());
        sh.add("attempts", 1);
        sh.add("inflight", 1);
        let res = producer.send_with_timeout(message(&topic, &first_id, &body), timeout_ms).await;
        let ok = matches!(res, Ok(Some(_)));
        let r = match &res {
            Ok(Some(r)) => Ok(r),
            Ok(None) => Err("the client returned no send result".to_string()),
            Err(e) => Err(e.to_string()),
        };
        record_result(&sh, rec, &first_id, attempt, r, false); // this loop does its own retries
        if ok {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let mut consumer_builder = DefaultMQPushConsumer::builder(rt.clone());
    if args.flag("trace") {
        consumer_builder = consumer_builder.client_config(crate::trace_config(args));
    }
    let mut consumer = consumer_builder
        .consumer_group(format!("ChaosCG{rid}"))
        .name_server_addr(ns.clone())
        .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
        .rpc_hook(crate::acl_hook(args).map(|h| h as _))
        .build();
    if let Err(e) = consumer.subscribe(topic.as_str(), "*").await {
        fatal("subscribe", e);
    }
    let mut sub = Map::new();
    let t = now_ms();
    for (k, v) in [("op", json!("subscribe")), ("group", json!(sh.cgroup)), ("topic", json!(topic)),
                   ("ordered", json!(false)), ("start_ms", json!(t)), ("end_ms", json!(t))] {
        sub.insert(k.into(), v);
    }
    sh.cons.append(sub);
    let shc = sh.clone();
    consumer.register_message_listener_concurrently(
        move |msgs: &[&MessageExt], _ctx: &rocketmq_client_rust::ConsumeConcurrentlyContext| {
            for m in msgs {
                record_receive(&shc, m);
            }
            Ok(ConsumeConcurrentlyStatus::ConsumeSuccess)
        },
    );
    if let Err(e) = consumer.start().await {
        fatal("push consumer start", e);
    }

    set_phase(&sh, "sending");
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(duration);
    let mut i: u64 = 0;
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        let retry: Vec<(String, u32)> = sh.retries.lock().unwrap_or_else(|e| e.into_inner()).drain(..).collect();
        for (id, attempt) in retry {
            send_async(&sh, &producer, &topic, id, attempt, body_size, timeout_ms).await;
        }
        let due = ((now - start).as_secs_f64() * rate) as u64;
        while i < due && sh.get("inflight") < max_inflight {
            let id = sh.new_send_id();
            send_async(&sh, &producer, &topic, id, 1, body_size, timeout_ms).await;
            i += 1;
        }
        tokio::time::sleep(Duration::from_millis(10).min(end.saturating_duration_since(Instant::now()))).await;
    }

    set_phase(&sh, "draining sends");
    let deadline = Instant::now() + Duration::from_millis(3 * timeout_ms + 5000);
    while Instant::now() < deadline {
        let retry: Vec<(String, u32)> = sh.retries.lock().unwrap_or_else(|e| e.into_inner()).drain(..).collect();
        let had_retries = !retry.is_empty();
        for (id, attempt) in retry {
            send_async(&sh, &producer, &topic, id, attempt, body_size, timeout_ms).await;
        }
        if sh.get("inflight") <= 0 && !had_retries && sh.retries.lock().unwrap_or_else(|e| e.into_inner()).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    if let Some(signal) = args.get("drain-signal").map(PathBuf::from) {
        // The run, not this process, knows when the cluster is healed and every group is at the end of
        // every queue: the consumer keeps consuming until it writes the file (or is gone too long).
        set_phase(&sh, "awaiting drain");
        let deadline = Instant::now() + Duration::from_secs_f64(30.0 * drain);
        while Instant::now() < deadline && !signal.exists() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    } else {
        set_phase(&sh, "draining receives");
        let deadline = Instant::now() + Duration::from_secs_f64(drain);
        while Instant::now() < deadline {
            {
                let g = sh.counters.lock().unwrap_or_else(|e| e.into_inner());
                if g.stored_ids.is_subset(&g.received_ids) {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    set_phase(&sh, "done");
    let snap = sh.snapshot();
    let _ = tokio::time::timeout(Duration::from_secs(10), consumer.shutdown()).await;
    let _ = tokio::time::timeout(Duration::from_secs(10), producer.shutdown()).await;
    progress.abort();
    write_json_atomic(&progress_path, &snap);
    emit(snap);
}
