//! rmq-rust-client: a small command-line client on `rocketmq-client-rust` (crates.io), so the
//! integration tests can drive a second, independently written RocketMQ client against our broker.
//!
//! One invocation per operation; every result is one JSON line on stdout (logs go to stderr):
//!
//!   rmq-rust-client --namesrv HOST:PORT send    --topic T [--mode sync|async|oneway|batch|orderly]
//!                   [--count N --prefix P --tags TAG --size BYTES | --stdin]
//!                   [--queue Q [--broker NAME]] [--timeout-ms MS] [--retries N] [--group PG]
//!   rmq-rust-client --namesrv HOST:PORT consume --topic T --group G [--mode push|orderly|pull|lite]
//!                   [--expect N] [--timeout-s S] [--expr '*'] [--reconsume-later] [--linger-ms MS]
//!   rmq-rust-client --namesrv HOST:PORT offsets --topic T [--group G]
//!   rmq-rust-client --namesrv HOST:PORT workload --run-dir RUN [--rate R --duration S ...]  (src/workload.rs)
//!   rmq-rust-client --namesrv HOST:PORT tx-send --topic T --tx commit,rollback,check-commit,... [--count N ...]
//!                   [--unknown-checks K] [--expect-checks N] [--wait-s S]                  (src/tx.rs)
//!   rmq-rust-client --namesrv HOST:PORT query   --topic T (--key K [--begin-ms B --end-ms E --max N] | --id ID)
//!                                                                                          (src/query.rs)
//!   rmq-rust-client --namesrv HOST:PORT admin AREA [ACTION] [options]   (DefaultMQAdminExt; src/admin.rs)
//!
//! send: one line per message {"i","mode","status":"SEND_OK"|...,"msgId","offsetMsgId","brokerName",
//!   "queueId","queueOffset","ms","key"} or {"i","mode","error","ms"}; a batch gives one line with "count";
//!   oneway gives "status":null. `--stdin` reads one JSON object per line: {"body","tags","keys","props"}
//!   (and for tx-send "tx").
//!   `orderly` sends with a queue selector (the argument is --queue, default 0: the same queue each time).
//! consume: one line per delivery {"msgId","offsetMsgId","topic","brokerName","queueId","queueOffset",
//!   "keys","tags","body","reconsumeTimes","storeTimestamp","bornTimestamp","props","action","ms"}, then
//!   {"done":true,"received":N,...}; "ms" counts from the consumer's start.
//!   `--reconsume-later` makes the listener answer RECONSUME_LATER (orderly: SUSPEND_CURRENT_QUEUE_A_MOMENT)
//!   the first time it sees each message id; such deliveries carry "action":"RECONSUME_LATER" and do not
//!   count towards --expect.
//! tx-send, query: see their modules.
//! offsets: one line per queue {"brokerName","queueId","minOffset","maxOffset","consumerOffset"}
//!   (a failed query gives "<field>Error" with the client's error text instead).
//!
//! send and consume (push) take `--trace` (the client's trace dispatcher writes a trace record per send,
//! or per consumed message, to `--trace-topic`, default RMQ_SYS_TRACE_TOPIC).
//! send and consume (push, orderly) take `--access-key AK --secret-key SK`: the client's own ACL hook
//! (AclClientRPCHook) signs every request, as RocketMQ 4.9's Java client does.
//!
//! Exit status: 0 when the command ran (per-message failures are in the lines), 2 for usage errors,
//! 1 when the client could not be set up or started (the error is on stderr and in a {"fatal":...} line).
#![allow(deprecated)] // DefaultMQPullConsumer (classic pull) is deprecated in favour of lite pull; we test both.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rocketmq_client_rust::{
    AclClientRPCHook, SessionCredentials,
    ClientError, ClientResult, ClientRuntime, ClientRuntimeConfig, ConsumeConcurrentlyStatus, ConsumeOrderlyStatus,
    DefaultLitePullConsumer, DefaultMQProducer, DefaultMQPullConsumer, DefaultMQPushConsumer, MQClientException,
    MQPushConsumer, PullStatus, SendResult,
};
use rocketmq_model::common::consumer::consume_from_where::ConsumeFromWhere;
use rocketmq_model::common::message::message_ext::MessageExt;
use rocketmq_model::common::message::message_queue::MessageQueue;
use rocketmq_model::common::message::message_single::Message;
use rocketmq_runtime::{RuntimeConfig, RuntimeOwner};
use serde_json::{json, Value};

mod admin;
mod query;
mod tx;
mod workload;

const USAGE: &str =
    "usage: rmq-rust-client --namesrv HOST:PORT (send|consume|offsets|workload|tx-send|query|admin) [options]; see main.rs";
const BOOL_FLAGS: &[&str] =
    &["stdin", "reconsume-later", "trace", "order", "remove-offset", "jstack", "force", "offline", "cluster-wide"];

// ---- output ---------------------------------------------------------------------------------------

static OUT: Mutex<()> = Mutex::new(());

fn emit(v: Value) {
    let _guard = OUT.lock().unwrap_or_else(|e| e.into_inner());
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

fn fatal(what: &str, err: impl std::fmt::Display) -> ! {
    let text = format!("{what}: {err}");
    eprintln!("rmq-rust-client: {text}");
    emit(json!({ "fatal": text }));
    std::process::exit(1);
}

// ---- arguments ------------------------------------------------------------------------------------

struct Args {
    command: String,
    rest: Vec<String>, // admin: the positional words after the command (area, action)
    opts: HashMap<String, String>,
    flags: HashSet<String>,
}

impl Args {
    fn parse() -> Args {
        let mut it = std::env::args().skip(1);
        let mut command = None;
        let mut opts = HashMap::new();
        let mut flags = HashSet::new();
        let mut rest = Vec::new();
        while let Some(a) = it.next() {
            if let Some(name) = a.strip_prefix("--") {
                if BOOL_FLAGS.contains(&name) {
                    flags.insert(name.to_string());
                } else {
                    match it.next() {
                        Some(v) => {
                            opts.insert(name.to_string(), v);
                        }
                        None => usage(&format!("--{name} needs a value")),
                    }
                }
            } else if command.is_none() {
                command = Some(a);
            } else if command.as_deref() == Some("admin") {
                rest.push(a);
            } else {
                usage(&format!("unexpected argument {a:?}"));
            }
        }
        Args { command: command.unwrap_or_else(|| usage("no command")), rest, opts, flags }
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.opts.get(name).map(String::as_str)
    }

    fn req(&self, name: &str) -> String {
        self.get(name).map(str::to_string).unwrap_or_else(|| usage(&format!("--{name} is required")))
    }

    fn str_or(&self, name: &str, default: &str) -> String {
        self.get(name).unwrap_or(default).to_string()
    }

    fn num<T: std::str::FromStr>(&self, name: &str, default: T) -> T {
        match self.get(name) {
            None => default,
            Some(v) => v.parse().unwrap_or_else(|_| usage(&format!("--{name}: not a number: {v:?}"))),
        }
    }

    fn opt_num<T: std::str::FromStr>(&self, name: &str) -> Option<T> {
        self.get(name).map(|v| v.parse().unwrap_or_else(|_| usage(&format!("--{name}: not a number: {v:?}"))))
    }

    fn flag(&self, name: &str) -> bool {
        self.flags.contains(name)
    }
}

fn usage(msg: &str) -> ! {
    eprintln!("rmq-rust-client: {msg}\n{USAGE}");
    std::process::exit(2);
}

// ---- messages -------------------------------------------------------------------------------------

#[derive(Clone)]
struct Spec {
    body: String,
    tags: Option<String>,
    keys: Option<String>,
    props: Vec<(String, String)>,
    tx: Option<String>, // tx-send: the line's transaction mode
}

fn specs(args: &Args) -> Vec<Spec> {
    if args.flag("stdin") {
        let mut out = Vec::new();
        for line in std::io::stdin().lock().lines() {
            let line = line.unwrap_or_else(|e| fatal("reading stdin", e));
            if line.trim().is_empty() {
                continue;
            }
            let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| fatal("a stdin line is not JSON", e));
            let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
            let props = v
                .get("props")
                .and_then(Value::as_object)
                .map(|m| m.iter().map(|(k, x)| (k.clone(), x.as_str().unwrap_or_default().to_string())).collect())
                .unwrap_or_default();
            let (body, tags, keys, tx) = (s("body").unwrap_or_default(), s("tags"), s("keys"), s("tx"));
            out.push(Spec { body, tags, keys, props, tx });
        }
        return out;
    }
    let count: usize = args.num("count", 1);
    let prefix = args.str_or("prefix", "rust");
    let size: usize = args.num("size", 0);
    let tags = args.get("tags").map(str::to_string);
    (0..count)
        .map(|i| {
            let mut body = format!("{prefix}-{i}");
            if body.len() < size {
                body.push('-');
                body.extend(std::iter::repeat_n('x', size - body.len()));
            }
            Spec { body, tags: tags.clone(), keys: Some(format!("{prefix}-key-{i}")), props: Vec::new(), tx: None }
        })
        .collect()
}

fn build_message(topic: &str, spec: &Spec) -> Message {
    let mut b = Message::builder().topic(topic).body_slice(spec.body.as_bytes());
    if let Some(t) = &spec.tags {
        b = b.tags(t.as_str());
    }
    if let Some(k) = &spec.keys {
        b = b.key(k.as_str());
    }
    for (k, v) in &spec.props {
        b = b.raw_property(k.as_str(), v.as_str()).unwrap_or_else(|e| fatal("message property", e));
    }
    b.build().unwrap_or_else(|e| fatal("building a message", e))
}

fn result_json(i: usize, mode: &str, r: &SendResult, started: Instant) -> Value {
    let mq = r.message_queue.as_ref();
    json!({
        "i": i,
        "mode": mode,
        "status": r.send_status.to_string(),
        "msgId": r.msg_id.as_ref().map(|s| s.to_string()),
        "offsetMsgId": r.offset_msg_id,
        "brokerName": mq.map(|q| q.broker_name().to_string()),
        "queueId": mq.map(|q| q.queue_id()),
        "queueOffset": r.queue_offset,
        "ms": started.elapsed().as_millis() as u64,
    })
}

fn error_json(i: usize, mode: &str, err: impl std::fmt::Display, started: Instant) -> Value {
    json!({ "i": i, "mode": mode, "error": err.to_string(), "ms": started.elapsed().as_millis() as u64 })
}

/// The client's error into `v`: "error" (its display: a catalog code and text, e.g. "core.argument.invalid:
/// Argument is invalid"), and from the error's causes "errorCode" (the MQClientException's or broker's
/// response code) and "errorMessage" (the MQClientException's text), which the display leaves out.
fn error_fields(v: &mut Value, e: &ClientError) {
    v["error"] = json!(e.to_string());
    if let Some(x) = e.source_ref::<MQClientException>() {
        v["errorCode"] = json!(x.response_code());
        v["errorMessage"] = json!(x.error_message());
    } else if let Some(code) = e.broker_response_code() {
        v["errorCode"] = json!(code);
    }
}

fn message_json(m: &MessageExt, action: &str, started: Instant) -> Value {
    let props = m.properties();
    let prop = |k: &str| props.iter().find(|(pk, _)| pk.as_str() == k).map(|(_, v)| v.to_string());
    let all: serde_json::Map<String, Value> =
        props.iter().map(|(k, v)| (k.to_string(), Value::String(v.to_string()))).collect();
    let body = m.body().map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default();
    json!({
        "msgId": prop("UNIQ_KEY").unwrap_or_else(|| m.msg_id().to_string()),
        "offsetMsgId": m.msg_id().to_string(),
        "topic": m.topic().to_string(),
        "brokerName": m.broker_name(),
        "queueId": m.queue_id(),
        "queueOffset": m.queue_offset(),
        "keys": prop("KEYS"),
        "tags": prop("TAGS"),
        "body": body,
        "reconsumeTimes": m.reconsume_times(),
        "storeTimestamp": m.store_timestamp(),
        "bornTimestamp": m.born_timestamp(),
        "props": all,
        "action": action,
        "ms": started.elapsed().as_millis() as u64,
    })
}

fn message_key(m: &MessageExt) -> String {
    m.properties()
        .iter()
        .find(|(k, _)| k.as_str() == "UNIQ_KEY")
        .map(|(_, v)| v.to_string())
        .unwrap_or_else(|| m.msg_id().to_string())
}

// ---- send -----------------------------------------------------------------------------------------

/// The client's ACL hook for --access-key/--secret-key, else for $RMQHA_ACCESS_KEY/$RMQHA_SECRET_KEY (how
/// the kit hands a cluster's credentials to its workloads, out of their argv), else none.
pub(crate) fn acl_hook(args: &Args) -> Option<Arc<AclClientRPCHook>> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let pair = match (args.get("access-key"), args.get("secret-key")) {
        (Some(ak), Some(sk)) => Some((ak.to_string(), sk.to_string())),
        (None, None) => env("RMQHA_ACCESS_KEY").zip(env("RMQHA_SECRET_KEY")),
        _ => usage("--access-key and --secret-key go together"),
    };
    pair.map(|(ak, sk)| Arc::new(AclClientRPCHook::new(SessionCredentials::with_keys(ak, sk))))
}

/// A client config with the client's own trace dispatcher on: a trace record per send (Pub) or per
/// consumed message (SubBefore, SubAfter), to --trace-topic (RMQ_SYS_TRACE_TOPIC, 4.9's default).
pub(crate) fn trace_config(args: &Args) -> rocketmq_client_rust::ClientConfig {
    let mut cc = rocketmq_client_rust::ClientConfig::new();
    cc.set_enable_trace(true);
    cc.set_trace_topic(args.str_or("trace-topic", "RMQ_SYS_TRACE_TOPIC").into());
    cc
}

async fn cmd_send(rt: Arc<ClientRuntime>, ns: String, args: &Args) {
    let topic = args.req("topic");
    let mode = args.str_or("mode", "sync");
    let timeout_ms: u64 = args.num("timeout-ms", 3000);
    let specs = specs(args);
    let mut builder = DefaultMQProducer::builder(rt).producer_group(args.str_or("group", "rust_client_pg"));
    if args.flag("trace") {
        builder = builder.client_config(trace_config(args));
    }
    let mut builder = builder.name_server_addr(ns).send_msg_timeout(timeout_ms as u32);
    if let Some(n) = args.opt_num::<u32>("retries") {
        builder = builder.retry_times_when_send_failed(n).retry_times_when_send_async_failed(n);
    }
    if let Some(hook) = acl_hook(args) {
        builder = builder.rpc_hook(hook);
    }
    let mut producer = builder.build();
    if let Err(e) = producer.start().await {
        fatal("producer start", e);
    }
    let queue: Option<i32> = args.opt_num("queue");
    // An exact queue: --broker and --queue, or --queue alone resolved against the topic's publish queues.
    let target: Option<MessageQueue> = match (queue, args.get("broker")) {
        (Some(q), Some(b)) if mode != "orderly" => Some(MessageQueue::from_parts(topic.as_str(), b, q)),
        (Some(q), None) if mode != "orderly" => match producer.fetch_publish_message_queues(&topic).await {
            Ok(mut mqs) if !mqs.is_empty() => {
                mqs.sort();
                Some(mqs[q as usize % mqs.len()].clone())
            }
            Ok(_) => fatal("publish queues", "the topic has no writable queue"),
            Err(e) => fatal("publish queues", e),
        },
        _ => None,
    };

    match mode.as_str() {
        "sync" | "orderly" => {
            for (i, s) in specs.iter().enumerate() {
                let msg = build_message(&topic, s);
                let t0 = Instant::now();
                let res = if mode == "orderly" {
                    let arg = queue.unwrap_or(0);
                    producer
                        .send_with_selector_timeout(
                            msg,
                            |mqs: &[MessageQueue], _m: &Message, arg: &i32| {
                                let mut sorted = mqs.to_vec();
                                sorted.sort();
                                sorted.get(*arg as usize % sorted.len().max(1)).cloned()
                            },
                            arg,
                            timeout_ms,
                        )
                        .await
                } else if let Some(mq) = &target {
                    producer.send_to_queue_with_timeout(msg, mq.clone(), timeout_ms).await
                } else {
                    producer.send_with_timeout(msg, timeout_ms).await
                };
                emit(match res {
                    Ok(Some(r)) => result_json(i, &mode, &r, t0),
                    Ok(None) => error_json(i, &mode, "the client returned no send result", t0),
                    Err(e) => error_json(i, &mode, e, t0),
                });
            }
        }
        "async" => {
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Value>();
            let mut pending = 0usize;
            for (i, s) in specs.iter().enumerate() {
                let msg = build_message(&topic, s);
                let t0 = Instant::now();
                let txc = tx.clone();
                let mode_c = mode.clone();
                let cb = move |r: Option<&SendResult>, e: Option<&rocketmq_client_rust::ClientError>| {
                    let v = match (r, e) {
                        (Some(r), _) => result_json(i, &mode_c, r, t0),
                        (None, Some(e)) => error_json(i, &mode_c, e, t0),
                        (None, None) => error_json(i, &mode_c, "callback with neither result nor error", t0),
                    };
                    let _ = txc.send(v);
                };
                let res = match &target {
                    Some(mq) => producer.send_to_queue_with_callback_timeout(msg, mq.clone(), cb, timeout_ms).await,
                    None => producer.send_with_callback_timeout(msg, cb, timeout_ms).await,
                };
                match res {
                    Ok(()) => pending += 1,
                    Err(e) => emit(error_json(i, &mode, e, t0)),
                }
            }
            drop(tx);
            let deadline = tokio::time::Instant::now() + Duration::from_millis(timeout_ms + 5000);
            while pending > 0 {
                match tokio::time::timeout_at(deadline, rx.recv()).await {
                    Ok(Some(v)) => {
                        pending -= 1;
                        emit(v);
                    }
                    Ok(None) => break,
                    Err(_) => {
                        emit(json!({ "mode": "async", "error": format!("{pending} callbacks never came") }));
                        break;
                    }
                }
            }
        }
        "oneway" => {
            for (i, s) in specs.iter().enumerate() {
                let msg = build_message(&topic, s);
                let t0 = Instant::now();
                let res = match &target {
                    Some(mq) => producer.send_oneway_to_queue(msg, mq.clone()).await,
                    None => producer.send_oneway(msg).await,
                };
                emit(match res {
                    Ok(()) => json!({ "i": i, "mode": "oneway", "status": Value::Null,
                                      "ms": t0.elapsed().as_millis() as u64 }),
                    Err(e) => error_json(i, "oneway", e, t0),
                });
            }
        }
        "batch" => {
            let msgs: Vec<Message> = specs.iter().map(|s| build_message(&topic, s)).collect();
            let t0 = Instant::now();
            let res = match &target {
                Some(mq) => producer.send_batch_to_queue_with_timeout(msgs, mq.clone(), timeout_ms).await,
                None => producer.send_batch_with_timeout(msgs, timeout_ms).await,
            };
            let mut v = match res {
                Ok(r) => result_json(0, "batch", &r, t0),
                Err(e) => error_json(0, "batch", e, t0),
            };
            v["count"] = json!(specs.len());
            emit(v);
        }
        other => usage(&format!("unknown send mode {other:?}")),
    }
    producer.shutdown().await;
}

// ---- consume --------------------------------------------------------------------------------------

struct Tally {
    received: AtomicUsize,
    later: AtomicUsize,
    seen: Mutex<HashSet<String>>,
    reconsume_later: bool,
    started: Instant,
}

impl Tally {
    /// Whether this delivery should be answered "later" (first sight of the id, flag on).
    fn first_time_later(&self, m: &MessageExt) -> bool {
        if !self.reconsume_later {
            return false;
        }
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).insert(message_key(m))
    }

    fn deliver(&self, msgs: &[&MessageExt]) -> bool {
        let later = msgs.iter().any(|m| self.first_time_later(m));
        for m in msgs {
            if later {
                self.later.fetch_add(1, Ordering::SeqCst);
                emit(message_json(m, "RECONSUME_LATER", self.started));
            } else {
                emit(message_json(m, "CONSUME_SUCCESS", self.started));
                self.received.fetch_add(1, Ordering::SeqCst);
            }
        }
        later
    }
}

async fn wait_for(tally: &Tally, expect: Option<usize>, deadline: Instant) {
    loop {
        if let Some(n) = expect {
            if tally.received.load(Ordering::SeqCst) >= n {
                return;
            }
        }
        if Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn cmd_consume(rt: Arc<ClientRuntime>, ns: String, args: &Args) {
    let topic = args.req("topic");
    let group = args.req("group");
    let mode = args.str_or("mode", "push");
    let expr = args.str_or("expr", "*");
    let expect: Option<usize> = args.opt_num("expect");
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(args.num("timeout-s", 30.0));
    let linger = Duration::from_millis(args.num("linger-ms", 500));
    let tally = Arc::new(Tally {
        received: AtomicUsize::new(0),
        later: AtomicUsize::new(0),
        seen: Mutex::new(HashSet::new()),
        reconsume_later: args.flag("reconsume-later"),
        started,
    });

    match mode.as_str() {
        "push" | "orderly" => {
            let mut consumer_builder = DefaultMQPushConsumer::builder(rt);
            if args.flag("trace") {
                consumer_builder = consumer_builder.client_config(trace_config(args));
            }
            let mut consumer = consumer_builder
                .consumer_group(group.as_str())
                .name_server_addr(ns)
                .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
                .consume_message_batch_max_size(1)
                .rpc_hook(acl_hook(args).map(|h| h as _))
                .build();
            if let Err(e) = consumer.subscribe(topic.as_str(), expr.as_str()).await {
                fatal("subscribe", e);
            }
            let t = tally.clone();
            if mode == "push" {
                consumer.register_message_listener_concurrently(
                    move |msgs: &[&MessageExt], _ctx: &rocketmq_client_rust::ConsumeConcurrentlyContext| {
                        Ok(if t.deliver(msgs) {
                            ConsumeConcurrentlyStatus::ReconsumeLater
                        } else {
                            ConsumeConcurrentlyStatus::ConsumeSuccess
                        })
                    },
                );
            } else {
                consumer.register_message_listener_orderly(
                    move |msgs: &[&MessageExt], _ctx: &mut rocketmq_client_rust::ConsumeOrderlyContext| {
                        Ok(if t.deliver(msgs) {
                            ConsumeOrderlyStatus::SuspendCurrentQueueAMoment
                        } else {
                            ConsumeOrderlyStatus::Success
                        })
                    },
                );
            }
            if let Err(e) = consumer.start().await {
                fatal("push consumer start", e);
            }
            wait_for(&tally, expect, deadline).await;
            tokio::time::sleep(linger).await; // let offsets be committed and late duplicates show
            consumer.shutdown().await;
        }
        "lite" => {
            let consumer = DefaultLitePullConsumer::builder(rt)
                .consumer_group(group.as_str())
                .name_server_addr(ns)
                .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
                .auto_commit(true)
                .auto_commit_interval_millis(1000)
                // Short long-polls: the client's shutdown waits (5 s per queue) for a pull the broker holds.
                .broker_suspend_max_time_millis(1000)
                .consumer_timeout_millis_when_suspend(3000)
                .build()
                .unwrap_or_else(|e| fatal("lite pull consumer", e));
            if let Err(e) = consumer.subscribe_with_expression(&topic, &expr).await {
                fatal("subscribe", e);
            }
            if let Err(e) = consumer.start().await {
                fatal("lite pull consumer start", e);
            }
            while expect.is_none_or(|n| tally.received.load(Ordering::SeqCst) < n) && Instant::now() < deadline {
                let left = deadline.saturating_duration_since(Instant::now()).as_millis() as u64;
                let msgs = consumer.poll_with_timeout(left.clamp(1, 1000)).await;
                let refs: Vec<&MessageExt> = msgs.iter().collect();
                for m in refs {
                    emit(message_json(m, "CONSUME_SUCCESS", started));
                    tally.received.fetch_add(1, Ordering::SeqCst);
                }
            }
            tokio::time::sleep(linger).await;
            consumer.shutdown().await;
        }
        "pull" => {
            let consumer = DefaultMQPullConsumer::builder(rt)
                .consumer_group(group.as_str())
                .name_server_addr(ns)
                .broker_suspend_max_time(Duration::from_millis(1000))
                .consumer_timeout_when_suspend(Duration::from_millis(3000))
                .build()
                .unwrap_or_else(|e| fatal("pull consumer", e));
            if let Err(e) = consumer.start().await {
                fatal("pull consumer start", e);
            }
            let mut mqs = consumer
                .fetch_subscribe_message_queues(&topic)
                .await
                .unwrap_or_else(|e| fatal("subscribe queues", e));
            mqs.sort();
            let mut next: Vec<i64> = Vec::with_capacity(mqs.len());
            for mq in &mqs {
                next.push(consumer.fetch_consume_offset(mq, true).await.unwrap_or(-1).max(0));
            }
            let mut warned = HashSet::new();
            'outer: while Instant::now() < deadline {
                let mut found_any = false;
                for (k, mq) in mqs.iter().enumerate() {
                    if expect.is_some_and(|n| tally.received.load(Ordering::SeqCst) >= n) || Instant::now() >= deadline {
                        break 'outer;
                    }
                    match consumer.pull(mq, &expr, next[k], 32).await {
                        Ok(r) => {
                            if matches!(r.pull_status(), PullStatus::Found) {
                                found_any = true;
                                for m in r.msg_found_list().unwrap_or_default() {
                                    emit(message_json(m, "CONSUME_SUCCESS", started));
                                    tally.received.fetch_add(1, Ordering::SeqCst);
                                }
                            }
                            if r.next_begin_offset() as i64 != next[k] {
                                next[k] = r.next_begin_offset() as i64;
                                let _ = consumer.update_consume_offset(mq, next[k]).await;
                            }
                        }
                        Err(e) => {
                            let text = e.to_string();
                            if warned.insert(text.clone()) {
                                emit(json!({ "warn": format!("pull {}:{}: {text}", mq.broker_name(), mq.queue_id()) }));
                            }
                        }
                    }
                }
                if !found_any {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            let _ = consumer.shutdown().await;
        }
        other => usage(&format!("unknown consume mode {other:?}")),
    }
    emit(json!({
        "done": true,
        "received": tally.received.load(Ordering::SeqCst),
        "reconsumeLater": tally.later.load(Ordering::SeqCst),
        "ms": started.elapsed().as_millis() as u64,
    }));
}

// ---- offsets --------------------------------------------------------------------------------------

async fn cmd_offsets(rt: Arc<ClientRuntime>, ns: String, args: &Args) {
    let topic = args.req("topic");
    let group = args.get("group").map(str::to_string);
    let consumer = DefaultMQPullConsumer::builder(rt)
        .consumer_group(group.clone().unwrap_or_else(|| "rust_client_offsets".to_string()))
        .name_server_addr(ns)
        .build()
        .unwrap_or_else(|e| fatal("pull consumer", e));
    if let Err(e) = consumer.start().await {
        fatal("pull consumer start", e);
    }
    let mut mqs = consumer
        .fetch_subscribe_message_queues(&topic)
        .await
        .unwrap_or_else(|e| fatal("subscribe queues", e));
    mqs.sort();
    for mq in &mqs {
        let mut v = json!({ "brokerName": mq.broker_name().to_string(), "queueId": mq.queue_id() });
        let mut put = |name: &str, r: ClientResult<i64>| match r {
            Ok(x) => v[name] = json!(x),
            Err(e) => v[format!("{name}Error")] = json!(e.to_string()),
        };
        put("minOffset", consumer.min_offset(mq).await);
        put("maxOffset", consumer.max_offset(mq).await);
        if group.is_some() {
            put("consumerOffset", consumer.fetch_consume_offset(mq, true).await);
        }
        emit(v);
    }
    let _ = consumer.shutdown().await;
}

// ---- main -----------------------------------------------------------------------------------------

fn main() {
    let args = Args::parse();
    let ns = args.req("namesrv");
    // The client runs message listeners on the runtime's metadata-io blocking lane. Its profile for two
    // cores (4 running, 16 queued) refuses a consumer's backlog ("runtime.capacity.exhausted"; the
    // client then treats the message as RECONSUME_LATER), so: 20 listeners as Java's consumeThreadMin,
    // and a deep queue as Java's unbounded consume executor.
    let mut rcfg = RuntimeConfig::for_parallelism("rmq-rust-client", 2)
        .with_max_blocking_threads(32)
        .unwrap_or_else(|e| fatal("runtime config", e));
    rcfg.blocking_lane_policies.metadata_io.max_concurrency = 20;
    rcfg.blocking_lane_policies.metadata_io.max_queue_depth = 1 << 16;
    let owner = RuntimeOwner::plan(rcfg)
        .unwrap_or_else(|e| fatal("runtime config", e))
        .build()
        .unwrap_or_else(|e| fatal("runtime", e));
    let mut log = rocketmq_observability::TelemetryBootstrapConfig::default();
    log.logging.filter = std::env::var("RMQ_CLIENT_LOG").unwrap_or_else(|_| "warn".to_string());
    log.logging.console.ansi = false;
    let telemetry = rocketmq_observability::install_global(&log).unwrap_or_else(|e| fatal("logging", e));
    let rt = ClientRuntime::try_new(owner.root_context().component("client"), ClientRuntimeConfig::default(),
                                    telemetry.handle())
        .unwrap_or_else(|e| fatal("client runtime", e));
    owner.block_on(async {
        match args.command.as_str() {
            "send" => cmd_send(rt.clone(), ns, &args).await,
            "consume" => cmd_consume(rt.clone(), ns, &args).await,
            "offsets" => cmd_offsets(rt.clone(), ns, &args).await,
            "workload" => workload::cmd_workload(rt.clone(), ns, &args).await,
            "tx-send" => tx::cmd_tx_send(rt.clone(), ns, &args).await,
            "query" => query::cmd_query(rt.clone(), ns, &args).await,
            "admin" => admin::cmd_admin(rt.clone(), ns, &args).await,
            other => usage(&format!("unknown command {other:?}")),
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), rt.shutdown()).await;
    });
    // Everything is printed and flushed; do not wait for lingering background tasks.
    let _ = std::io::stdout().flush();
    std::process::exit(0);
}
