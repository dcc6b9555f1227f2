//! `query`: the message index through the crate's MQAdmin API on DefaultMQProducer (as Java's
//! DefaultMQProducer.queryMessage / viewMessage).
//!
//!   rmq-rust-client --namesrv NS query --topic T --key K [--begin-ms B] [--end-ms E] [--max N]
//!   rmq-rust-client --namesrv NS query --topic T --id OFFSET_MSG_ID
//!
//! --key: QUERY_MESSAGE to one broker of every group in the topic's route (its master, else a slave), for
//! the messages of T whose KEYS hold K stored between --begin-ms (default 0) and --end-ms (default: no
//! end), at most --max (default 32) from each; the client drops index hits whose topic or keys differ.
//! --id: VIEW_MESSAGE_BY_ID at the broker the offsetMsgId names (its store host) for the record at the
//! commit-log offset it names; when that fails the client, like Java's, queries the id as a UNIQ_KEY.
//! Only an id naming a loopback host is taken: a UNIQ_KEY given by mistake would decode to the producer's
//! IP and process id and send the client to that address.
//!
//! Lines: one per message, as `consume` prints it with "action":"FOUND" plus {"commitLogOffset","storeHost",
//! "sysFlag"}; then {"done":true,"found":N,"indexLastUpdateTimestamp" (--key),"host" (--id),"ms"}, with
//! the client's error when it found nothing: "error", "errorCode", "errorMessage" (main.rs error_fields;
//! e.g. 208 NO_MESSAGE, "query message by key finished, but no message.").
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::Instant;

use rocketmq_client_rust::{ClientRuntime, DefaultMQProducer};
use rocketmq_model::common::message::message_ext::MessageExt;
use serde_json::json;

use crate::{emit, error_fields, fatal, message_json, usage, Args};

/// The store host an offsetMsgId names: 4 (IPv4) or 16 (IPv6) address bytes, 4 port bytes, 8 offset bytes.
fn id_host(id: &str) -> Option<(IpAddr, u16)> {
    if id.len() % 2 != 0 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let bytes: Vec<u8> = (0..id.len()).step_by(2).map(|i| u8::from_str_radix(&id[i..i + 2], 16).unwrap_or(0)).collect();
    let (ip, rest): (IpAddr, &[u8]) = match bytes.len() {
        16 => (IpAddr::V4(Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3])), &bytes[4..]),
        28 => {
            let mut a = [0u8; 16];
            a.copy_from_slice(&bytes[..16]);
            (IpAddr::V6(Ipv6Addr::from(a)), &bytes[16..])
        }
        _ => return None,
    };
    let port = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]);
    u16::try_from(port).ok().map(|p| (ip, p))
}

fn found_json(m: &MessageExt, started: Instant) -> serde_json::Value {
    let mut v = message_json(m, "FOUND", started);
    v["commitLogOffset"] = json!(m.commit_log_offset());
    v["storeHost"] = json!(m.store_host().to_string());
    v["sysFlag"] = json!(m.sys_flag());
    v
}

pub async fn cmd_query(rt: Arc<ClientRuntime>, ns: String, args: &Args) {
    let topic = args.req("topic");
    let started = Instant::now();
    let (key, id) = (args.get("key"), args.get("id"));
    if key.is_some() == id.is_some() {
        usage("query: give exactly one of --key and --id");
    }
    let host = id.map(|id| match id_host(id) {
        Some((ip, port)) if ip.is_loopback() => format!("{ip}:{port}"),
        Some((ip, port)) => usage(&format!("--id names {ip}:{port}, not a loopback broker (is it a UNIQ_KEY?)")),
        None => usage(&format!("--id {id:?} is not an offsetMsgId")),
    });
    let mut producer = DefaultMQProducer::builder(rt)
        .producer_group(args.str_or("group", "rust_client_query"))
        .name_server_addr(ns)
        .send_msg_timeout(args.num::<u32>("timeout-ms", 3000))
        .build();
    if let Err(e) = producer.start().await {
        fatal("producer start", e);
    }
    let mut done = json!({ "done": true, "found": 0 });
    if let Some(key) = key {
        let begin: u64 = args.num("begin-ms", 0);
        let end: u64 = args.num("end-ms", i64::MAX as u64);
        match producer.query_message(&topic, key, args.num("max", 32), begin, end).await {
            Ok(r) => {
                for m in r.message_list() {
                    emit(found_json(m, started));
                }
                done["found"] = json!(r.message_list().len());
                done["indexLastUpdateTimestamp"] = json!(r.index_last_update_timestamp());
            }
            Err(e) => error_fields(&mut done, &e),
        }
    } else if let Some(id) = id {
        done["host"] = json!(host);
        match producer.view_message(&topic, id).await {
            Ok(m) => {
                emit(found_json(&m, started));
                done["found"] = json!(1);
            }
            Err(e) => error_fields(&mut done, &e),
        }
    }
    done["ms"] = json!(started.elapsed().as_millis() as u64);
    producer.shutdown().await;
    emit(done);
}
