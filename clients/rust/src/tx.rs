//! `tx-send`: transactional messages through the crate's TransactionMQProducer and a TransactionListener.
//!
//!   rmq-rust-client --namesrv NS tx-send --topic T [--tx commit,rollback,check-commit,check-rollback,unknown]
//!                   [--count N --prefix P --tags TAG --size BYTES | --stdin] [--unknown-checks K]
//!                   [--expect-checks N] [--wait-s S] [--linger-ms MS] [--group PG] [--timeout-ms MS]
//!
//! Message i gets the i-th entry of --tx (cycling; default commit), or its stdin line's "tx". The listener's
//! local transaction answers COMMIT_MESSAGE for `commit`, ROLLBACK_MESSAGE for `rollback` and UNKNOW for the
//! others, which leaves them to the broker's check-back (CHECK_TRANSACTION_STATE). A check is answered
//! UNKNOW the first K times for one message (--unknown-checks, default 0), then COMMIT_MESSAGE for
//! `check-commit`, ROLLBACK_MESSAGE for `check-rollback`, and always UNKNOW for `unknown`; a check about a
//! `commit` or `rollback` message (which the broker should never send) is answered as that message's mode.
//! The mode travels in the message's user property TX_PROPERTY, so a check knows it.
//!
//! Lines: one per message {"i","tx","status","localState","msgId","offsetMsgId","transactionId","brokerName",
//! "queueId","queueOffset","body","keys","ms"} (or {"i","tx","error",...,"ms"}); one per check answered, the
//! checked message as `consume` prints it plus {"check": n-th check of this message, "tx", "answer",
//! "checkTimes" (its TRANSACTION_CHECK_TIMES), "transactionId", "commitLogOffset"}; then {"done":true,
//! "sent","checks","unresolved":[msgIds of check-* messages no check resolved],"ms"}. The command ends when
//! every check-* message got its final answer and at least --expect-checks checks were answered, or after
//! --wait-s (default 30), and then stays --linger-ms (default 500) more for the oneway END_TRANSACTION.
use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rocketmq_client_rust::{ClientRuntime, LocalTransactionState, TransactionListener, TransactionMQProducer};
use rocketmq_model::common::message::message_ext::MessageExt;
use rocketmq_model::common::message::MessageTrait;
use serde_json::{json, Value};

use crate::{build_message, emit, error_fields, fatal, message_json, specs, usage, Args};

/// The user property that carries a message's mode to the check-back.
pub const TX_PROPERTY: &str = "rmqTxMode";
const MODES: &[&str] = &["commit", "rollback", "check-commit", "check-rollback", "unknown"];

fn prop_of<'a>(props: impl IntoIterator<Item = (&'a str, &'a str)>, name: &str) -> Option<String> {
    props.into_iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
}

struct TxState {
    started: Instant,
    unknown_checks: usize,
    answered: Mutex<HashMap<String, usize>>, // UNIQ_KEY -> checks answered
    resolved: Mutex<HashSet<String>>,        // UNIQ_KEYs a check answered COMMIT or ROLLBACK
    total: Mutex<usize>,
}

struct Listener(Arc<TxState>);

impl TransactionListener for Listener {
    fn execute_local_transaction(&self, msg: &dyn MessageTrait, arg: Option<&(dyn Any + Send + Sync)>)
                                 -> LocalTransactionState {
        let mode = arg
            .and_then(|a| a.downcast_ref::<String>().cloned())
            .or_else(|| prop_of(msg.get_properties().iter().map(|(k, v)| (k.as_str(), v.as_str())), TX_PROPERTY))
            .unwrap_or_default();
        match mode.as_str() {
            "commit" => LocalTransactionState::CommitMessage,
            "rollback" => LocalTransactionState::RollbackMessage,
            _ => LocalTransactionState::Unknown,
        }
    }

    fn check_local_transaction(&self, msg: &MessageExt) -> LocalTransactionState {
        let st = &self.0;
        let props = || msg.properties().iter().map(|(k, v)| (k.as_str(), v.as_str()));
        let mode = prop_of(props(), TX_PROPERTY).unwrap_or_default();
        let uniq = prop_of(props(), "UNIQ_KEY").unwrap_or_else(|| msg.msg_id().to_string());
        let n = {
            let mut g = st.answered.lock().unwrap_or_else(|e| e.into_inner());
            let c = g.entry(uniq.clone()).or_default();
            *c += 1;
            *c
        };
        let answer = match mode.as_str() {
            "commit" => LocalTransactionState::CommitMessage,
            "rollback" => LocalTransactionState::RollbackMessage,
            "check-commit" if n > st.unknown_checks => LocalTransactionState::CommitMessage,
            "check-rollback" if n > st.unknown_checks => LocalTransactionState::RollbackMessage,
            _ => LocalTransactionState::Unknown,
        };
        let mut v = message_json(msg, "CHECK", st.started);
        v["check"] = json!(n);
        v["tx"] = json!(mode);
        v["answer"] = json!(answer.to_string());
        v["checkTimes"] = json!(prop_of(props(), "TRANSACTION_CHECK_TIMES"));
        v["transactionId"] = json!(MessageTrait::transaction_id(msg).map(|s| s.to_string()));
        v["commitLogOffset"] = json!(msg.commit_log_offset());
        emit(v);
        if answer != LocalTransactionState::Unknown {
            st.resolved.lock().unwrap_or_else(|e| e.into_inner()).insert(uniq);
        }
        *st.total.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        answer
    }
}

pub async fn cmd_tx_send(rt: Arc<ClientRuntime>, ns: String, args: &Args) {
    let topic = args.req("topic");
    let timeout_ms: u64 = args.num("timeout-ms", 3000);
    let modes: Vec<String> = args.str_or("tx", "commit").split(',').map(|s| s.trim().to_string()).collect();
    for m in &modes {
        if !MODES.contains(&m.as_str()) {
            usage(&format!("--tx: unknown mode {m:?} (one of {})", MODES.join(", ")));
        }
    }
    let specs = specs(args);
    let state = Arc::new(TxState {
        started: Instant::now(),
        unknown_checks: args.num("unknown-checks", 0),
        answered: Mutex::new(HashMap::new()),
        resolved: Mutex::new(HashSet::new()),
        total: Mutex::new(0),
    });
    // The broker sends a check-back only to a producer whose HEART_BEAT it got; the client's first one goes
    // 1 s after start (then every 30 s) to the brokers it knows then. Naming the topic makes start() fetch
    // its route, so that first heartbeat reaches the topic's broker even when the sends come later.
    let mut producer = TransactionMQProducer::builder(rt)
        .producer_group(args.str_or("group", "rust_client_tx_pg"))
        .topics(vec![topic.clone()])
        .name_server_addr(ns)
        .send_msg_timeout(timeout_ms as u32)
        .transaction_listener(Listener(state.clone()))
        .build();
    if let Err(e) = producer.start().await {
        fatal("transaction producer start", e);
    }

    let mut waiting: HashSet<String> = HashSet::new(); // check-* messages the broker has to ask about
    for (i, s) in specs.iter().enumerate() {
        let mode = s.tx.clone().unwrap_or_else(|| modes[i % modes.len()].clone());
        if !MODES.contains(&mode.as_str()) {
            usage(&format!("stdin line {i}: unknown tx mode {mode:?}"));
        }
        let mut spec = s.clone();
        spec.props.push((TX_PROPERTY.to_string(), mode.clone()));
        let msg = build_message(&topic, &spec);
        let t0 = Instant::now();
        let res = producer.send_message_in_transaction(msg, Some(mode.clone())).await;
        let ms = t0.elapsed().as_millis() as u64;
        emit(match res {
            Ok(r) => {
                let sr = r.send_result.as_ref();
                let mq = sr.and_then(|x| x.message_queue.as_ref());
                let msg_id = sr.and_then(|x| x.msg_id.as_ref()).map(|x| x.to_string());
                let ok = sr.is_some_and(|x| x.send_status.to_string() == "SEND_OK");
                if ok && mode.starts_with("check-") {
                    if let Some(id) = &msg_id {
                        waiting.insert(id.clone());
                    }
                }
                json!({
                    "i": i, "tx": mode,
                    "status": sr.map(|x| x.send_status.to_string()),
                    "localState": r.local_transaction_state.map(|x| x.to_string()),
                    "msgId": msg_id,
                    "offsetMsgId": sr.and_then(|x| x.offset_msg_id.clone()),
                    "transactionId": sr.and_then(|x| x.transaction_id.clone()),
                    "brokerName": mq.map(|q| q.broker_name().to_string()),
                    "queueId": mq.map(|q| q.queue_id()),
                    "queueOffset": sr.map(|x| x.queue_offset),
                    "body": spec.body, "keys": spec.keys, "ms": ms,
                })
            }
            Err(e) => {
                let mut v = json!({ "i": i, "tx": mode, "ms": ms });
                error_fields(&mut v, &e);
                v
            }
        });
    }

    let expect_checks: usize = args.num("expect-checks", 0);
    let deadline = Instant::now() + Duration::from_secs_f64(args.num("wait-s", 30.0));
    let unresolved = |st: &TxState| -> Vec<String> {
        let done = st.resolved.lock().unwrap_or_else(|e| e.into_inner());
        let mut left: Vec<String> = waiting.iter().filter(|id| !done.contains(*id)).cloned().collect();
        left.sort();
        left
    };
    while Instant::now() < deadline
        && (!unresolved(&state).is_empty() || *state.total.lock().unwrap_or_else(|e| e.into_inner()) < expect_checks)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(args.num("linger-ms", 500))).await;
    let left: Value = json!(unresolved(&state));
    let total = *state.total.lock().unwrap_or_else(|e| e.into_inner());
    let _ = tokio::time::timeout(Duration::from_secs(10), producer.shutdown()).await;
    emit(json!({
        "done": true, "sent": specs.len(), "checks": total, "unresolved": left,
        "ms": state.started.elapsed().as_millis() as u64,
    }));
}
