//! `admin`: the crate's admin API (DefaultMQAdminExt, feature `admin-full`: the RouteAdmin, TopicAdmin,
//! ConsumerAdmin, BrokerAdmin and OffsetAdmin capabilities, as Java's DefaultMQAdminExt), one call per
//! invocation, as mqadmin's sub-commands make them.
//!
//!   rmq-rust-client --namesrv NS admin AREA [ACTION] [options]
//!
//!   cluster-list                                   cluster info + every broker's runtime info (mqadmin clusterList)
//!   broker-config get|update --broker-addr A [--props JSON]
//!   topic create|update (--broker-addr A | --cluster C) --topic T [--read-queues N --write-queues N --perm P --order]
//!   topic delete --topic T (--cluster C | --broker-addr A)   |  topic list [--cluster C]  |  topic route --topic T
//!   topic stats --topic T [--broker-addr A]  |  topic config --broker-addr A --topic T
//!   topic consumed-by --topic T
//!   sub-group create|update (--broker-addr A | --cluster C) --group G [--config JSON]
//!   sub-group delete (--broker-addr A | --cluster C) --group G [--remove-offset]
//!   sub-group list --broker-addr A  |  sub-group get --broker-addr A --group G
//!   consumer-connection --group G  |  producer-connection --group PG --topic T
//!   consume-stats --group G [--topic T] [--broker-addr A]  |  broker-consume-stats --broker-addr A [--order]
//!   consumer-running-info --group G --client-id ID [--jstack]
//!   reset-offset-by-time --group G --topic T --timestamp MS [--force]   (offline group: the old way)
//!   clone-group-offset --src G --dest G --topic T [--offline]
//!   query-msg --topic T --id OFFSET_MSG_ID             (VIEW_MESSAGE_BY_ID at the id's store host)
//!   view-broker-stats-data --broker-addr A --stats-name NAME --stats-key KEY
//!   namesrv-config get|update [--props JSON]         (every name server given to --namesrv)
//!   wipe-write-perm|add-write-perm --broker-name B [--namesrv-addr A]
//!   kv put|get|delete --namespace N --key K [--value V]  |  kv list --namespace N
//!   ha-status --broker-addr A  |  producer-info --broker-addr A  |  topic-cluster-list --topic T
//!   query-cq --broker-addr A --topic T [--queue-id Q --index I --count N --group G]
//!   order-conf --topic T --value 'broker-a:4;broker-b:4' [--cluster-wide]
//!   clean-unused-topic|clean-expired-cq|delete-expired-commitlog (--broker-addr A | --cluster C)
//!
//! Output: one JSON object. Success: the call's result, as the crate decodes it, under a key named for
//! it (maps keyed by a MessageQueue keep the crate's encoding: the key is the queue as a JSON string).
//! Failure: {"error","errorCode","errorMessage"} (main.rs error_fields) and exit status 3.
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use rocketmq_client_rust::{
    BrokerAdmin, ClientError, ClientResult, ClientRuntime, ConsumerAdmin, DefaultMQAdminExt,
    OffsetAdmin, RouteAdmin, TopicAdmin,
};
use cheetah_string::CheetahString;
use rocketmq_model::common::config::TopicConfig;
use rocketmq_model::common::message::message_queue::MessageQueue;
use serde::Serialize;
use serde_json::{json, Value};

use crate::{emit, error_fields, fatal, usage, Args};

const TIMEOUT_MS: u64 = 5000;

fn to_json<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or_else(|e| json!({ "unencodable": e.to_string() }))
}

/// `--props '{"k":"v"}'`: string values as the update requests carry them (numbers and booleans are
/// turned into their text).
fn props(args: &Args) -> Vec<(String, String)> {
    let raw = args.req("props");
    let v: Value = serde_json::from_str(&raw).unwrap_or_else(|e| usage(&format!("--props: not JSON: {e}")));
    let Some(m) = v.as_object() else { usage("--props: not a JSON object") };
    m.iter()
        .map(|(k, x)| (k.clone(), x.as_str().map(str::to_string).unwrap_or_else(|| x.to_string())))
        .collect()
}

fn json_opt(args: &Args, name: &str) -> serde_json::Map<String, Value> {
    match args.get(name) {
        None => serde_json::Map::new(),
        Some(raw) => match serde_json::from_str::<Value>(raw) {
            Ok(Value::Object(m)) => m,
            _ => usage(&format!("--{name}: not a JSON object")),
        },
    }
}

/// The queues of a MessageQueue-keyed map as a list (such keys do not make JSON object keys).
fn queue_list<V: Serialize>(m: impl IntoIterator<Item = (MessageQueue, V)>) -> Value {
    let mut rows: Vec<Value> = m
        .into_iter()
        .map(|(q, v)| {
            json!({"topic": q.topic().to_string(), "brokerName": q.broker_name().to_string(), "queueId": q.queue_id(),
                   "value": to_json(&v)})
        })
        .collect();
    rows.sort_by_key(|r| (r["brokerName"].as_str().unwrap_or("").to_string(), r["queueId"].as_i64().unwrap_or(0)));
    Value::Array(rows)
}

/// Every broker address (masters and slaves) a cluster info names, optionally only the masters (id 0),
/// optionally only one cluster's.
fn broker_addrs(info: &Value, cluster: Option<&str>, masters_only: bool) -> Vec<String> {
    let names: Option<Vec<String>> = cluster.map(|c| {
        info["clusterAddrTable"][c].as_array().map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect())
            .unwrap_or_default()
    });
    let mut out = Vec::new();
    if let Some(table) = info["brokerAddrTable"].as_object() {
        for (name, data) in table {
            if names.as_ref().is_some_and(|n| !n.contains(name)) {
                continue;
            }
            if let Some(addrs) = data["brokerAddrs"].as_object() {
                for (id, addr) in addrs {
                    if !masters_only || id == "0" {
                        out.extend(addr.as_str().map(str::to_string));
                    }
                }
            }
        }
    }
    out.sort();
    out
}

/// --broker-addr A, or every master of --cluster C (as mqadmin's -b / -c).
async fn targets(admin: &DefaultMQAdminExt, args: &Args) -> ClientResult<Vec<String>> {
    if let Some(a) = args.get("broker-addr") {
        return Ok(vec![a.to_string()]);
    }
    let Some(c) = args.get("cluster") else { usage("--broker-addr or --cluster is required") };
    let info = to_json(&RouteAdmin::examine_broker_cluster_info(admin).await?);
    let addrs = broker_addrs(&info, Some(c), true);
    if addrs.is_empty() {
        return Err(ClientError::illegal_argument(format!("cluster {c:?} has no master")));
    }
    Ok(addrs)
}

fn sub(args: &Args) -> &str {
    args.rest.get(1).map(String::as_str).unwrap_or_else(|| usage("admin: this area needs an action"))
}

async fn run(admin: &DefaultMQAdminExt, ns: &str, args: &Args) -> ClientResult<Value> {
    let area = args.rest.first().map(String::as_str).unwrap_or_else(|| usage("admin: which area?"));
    let s = |name: &str| -> CheetahString { args.req(name).into() };
    Ok(match area {
        "cluster-list" => {
            let info = to_json(&RouteAdmin::examine_broker_cluster_info(admin).await?);
            let mut runtime = serde_json::Map::new();
            for addr in broker_addrs(&info, None, false) {
                let v = match admin.fetch_broker_runtime_stats(addr.clone().into()).await {
                    Ok(kv) => to_json(&kv)["table"].clone(),
                    Err(e) => err_json(&e),
                };
                runtime.insert(addr, v);
            }
            json!({ "clusterInfo": info, "runtime": runtime })
        }
        "broker-config" => {
            let addr = args.req("broker-addr");
            match sub(args) {
                "get" => json!({ "config": to_json(&admin.get_broker_config(addr.into()).await?) }),
                "update" => {
                    let p = props(args).into_iter().map(|(k, v)| (k.into(), v.into())).collect::<HashMap<_, _>>();
                    admin.update_broker_config(addr.into(), p).await?;
                    json!({ "updated": true })
                }
                other => usage(&format!("broker-config {other:?}?")),
            }
        }
        "topic" => match sub(args) {
            "create" | "update" => {
                let mut tc = TopicConfig::new(args.req("topic"));
                tc.read_queue_nums = args.num("read-queues", 8);
                tc.write_queue_nums = args.num("write-queues", 8);
                tc.perm = args.num("perm", 6);
                tc.order = args.flag("order");
                let mut done = Vec::new();
                for addr in targets(admin, args).await? {
                    admin.create_and_update_topic_config(addr.clone().into(), tc.clone()).await?;
                    done.push(addr);
                }
                json!({ "brokers": done, "topicConfig": to_json(&tc) })
            }
            "delete" => {
                // as mqadmin deleteTopic: the cluster's masters, then every name server. (The crate's
                // delete_topic sends DELETE_TOPIC_IN_BROKER to the slaves too, which a 4.9.8 slave refuses.)
                let masters: HashSet<CheetahString> = targets(admin, args).await?.into_iter().map(Into::into).collect();
                admin.delete_topic_in_broker(masters, s("topic")).await?;
                let servers: HashSet<CheetahString> = ns.split(';').map(|a| a.to_string().into()).collect();
                let cluster = args.get("cluster").map(|c| c.to_string().into());
                admin.delete_topic_in_name_server(servers, cluster, s("topic")).await?;
                json!({ "deleted": true })
            }
            "list" => match args.get("cluster") {
                Some(c) => json!({ "topicList": to_json(&admin.fetch_topics_by_cluster(c.to_string().into()).await?) }),
                None => json!({ "topicList": to_json(&admin.fetch_all_topic_list().await?) }),
            },
            "route" => json!({ "route": to_json(&TopicAdmin::examine_topic_route_info(admin, s("topic")).await?) }),
            "stats" => {
                let addr = args.get("broker-addr").map(|a| a.to_string().into());
                json!({ "stats": to_json(&admin.examine_topic_stats(s("topic"), addr).await?) })
            }
            "config" => json!({ "topicConfig": to_json(&admin.examine_topic_config(s("broker-addr"), s("topic")).await?) }),
            "consumed-by" => json!({ "groupList": to_json(&admin.query_topic_consume_by_who(s("topic")).await?) }),
            other => usage(&format!("topic {other:?}?")),
        },
        "sub-group" => match sub(args) {
            "create" | "update" => {
                let mut cfg = json_opt(args, "config");
                cfg.insert("groupName".into(), json!(args.req("group")));
                let mut done = Vec::new();
                for addr in targets(admin, args).await? {
                    let c = serde_json::from_value(Value::Object(cfg.clone()))
                        .map_err(|e| ClientError::illegal_argument(format!("--config: {e}")))?;
                    admin.create_and_update_subscription_group_config(addr.clone().into(), c).await?;
                    done.push(addr);
                }
                json!({ "brokers": done })
            }
            "delete" => {
                let mut done = Vec::new();
                for addr in targets(admin, args).await? {
                    let remove = Some(args.flag("remove-offset"));
                    admin.delete_subscription_group(addr.clone().into(), s("group"), remove).await?;
                    done.push(addr);
                }
                json!({ "brokers": done })
            }
            "list" => json!({ "groups": to_json(&admin.get_all_subscription_group(s("broker-addr"), TIMEOUT_MS).await?) }),
            "get" => json!({ "config": to_json(&admin.examine_subscription_group_config(s("broker-addr"), s("group")).await?) }),
            other => usage(&format!("sub-group {other:?}?")),
        },
        "consumer-connection" => {
            json!({ "connection": to_json(&ConsumerAdmin::examine_consumer_connection_info(admin, s("group"), None).await?) })
        }
        "producer-connection" => json!({ "connection": to_json(
            &ConsumerAdmin::examine_producer_connection_info(admin, s("group"), s("topic")).await?) }),
        "consume-stats" => {
            // without --broker-addr the crate asks every master in the route of %RETRY%<group>, as 4.9's
            let topic = args.get("topic").map(|t| t.to_string().into());
            let addr = args.get("broker-addr").map(|a| a.to_string().into());
            let stats = ConsumerAdmin::examine_consume_stats(admin, s("group"), topic, None, addr, None).await?;
            json!({ "stats": to_json(&stats), "totalDiff": stats.compute_total_diff(), "consumeTps": stats.get_consume_tps() })
        }
        "broker-consume-stats" => json!({ "stats": to_json(
            &admin.fetch_consume_stats_in_broker(s("broker-addr"), args.flag("order"), TIMEOUT_MS).await?) }),
        "consumer-running-info" => json!({ "info": to_json(
            &admin.get_consumer_running_info(s("group"), s("client-id"), args.flag("jstack"), None).await?) }),
        "reset-offset-by-time" => {
            let ts: u64 = args.opt_num("timestamp").unwrap_or_else(|| usage("--timestamp is required"));
            // as mqadmin resetOffsetByTime: the broker resets the group's running clients
            // (INVOKE_BROKER_TO_RESET_OFFSET); with none online (CONSUMER_NOT_ONLINE, 206) the old way,
            // the offsets themselves per queue (searchOffset + UPDATE_CONSUMER_OFFSET)
            let force = args.flag("force");
            match admin.reset_offset_by_timestamp(None, s("topic"), s("group"), ts, force).await {
                Ok(m) => json!({ "offsets": queue_list(m) }),
                Err(e) if response_code(&e) == Some(206) => {
                    let old = admin.reset_offset_by_timestamp_old(None, s("group"), s("topic"), ts, force).await?;
                    json!({ "notOnline": err_json(&e), "rollbackStats": to_json(&old) })
                }
                Err(e) => return Err(e),
            }
        }
        "clone-group-offset" => {
            admin.clone_group_offset(s("src"), s("dest"), s("topic"), args.flag("offline")).await?;
            json!({ "cloned": true })
        }
        "query-msg" => {
            // by offsetMsgId only: the admin API has no query by key or unique key (`query` does those)
            let m = ConsumerAdmin::query_message(admin, "".into(), s("topic"), s("id")).await?;
            let mut v = crate::message_json(&m, "FOUND", std::time::Instant::now());
            v["commitLogOffset"] = json!(m.commit_log_offset());
            v["storeHost"] = json!(m.store_host().to_string());
            json!({ "message": v })
        }
        "view-broker-stats-data" => json!({ "statsData": to_json(
            &admin.view_broker_stats_data(s("broker-addr"), s("stats-name"), s("stats-key")).await?) }),
        "namesrv-config" => {
            let servers: Vec<_> = ns.split(';').map(|a| a.to_string().into()).collect();
            match sub(args) {
                "get" => json!({ "config": to_json(&admin.get_name_server_config(servers).await?) }),
                "update" => {
                    let p = props(args).into_iter().map(|(k, v)| (k.into(), v.into())).collect::<HashMap<_, _>>();
                    admin.update_name_server_config(p, Some(servers)).await?;
                    json!({ "updated": true })
                }
                other => usage(&format!("namesrv-config {other:?}?")),
            }
        }
        "wipe-write-perm" | "add-write-perm" => {
            let nsa = args.get("namesrv-addr").unwrap_or(ns).to_string();
            let n = if area == "wipe-write-perm" {
                admin.wipe_write_perm_of_broker(nsa.into(), s("broker-name")).await?
            } else {
                admin.add_write_perm_of_broker(nsa.into(), s("broker-name")).await?
            };
            json!({ "topicCount": n })
        }
        "kv" => match sub(args) {
            "put" => {
                admin.create_and_update_kv_config(s("namespace"), s("key"), s("value")).await?;
                json!({ "put": true })
            }
            "get" => json!({ "value": admin.get_kv_config(s("namespace"), s("key")).await?.to_string() }),
            "delete" => {
                admin.delete_kv_config(s("namespace"), s("key")).await?;
                json!({ "deleted": true })
            }
            "list" => json!({ "table": to_json(&admin.get_kv_list_by_namespace(s("namespace")).await?)["table"] }),
            other => usage(&format!("kv {other:?}?")),
        },
        "producer-info" => json!({ "producers": to_json(&admin.get_all_producer_info(s("broker-addr")).await?) }),
        "query-cq" => {
            let (queue, index, count) = (args.num("queue-id", 0), args.num("index", 0), args.num("count", 10));
            let group = args.str_or("group", "").into();
            json!({ "cq": to_json(&admin.query_consume_queue(s("broker-addr"), s("topic"), queue, index, count, group).await?) })
        }
        "topic-cluster-list" => {
            let mut c: Vec<String> = admin.get_topic_cluster_list(args.req("topic")).await?.iter().map(|x| x.to_string()).collect();
            c.sort();
            json!({ "clusters": c })
        }
        "order-conf" => {
            admin.create_or_update_order_conf(s("topic"), s("value"), args.flag("cluster-wide")).await?;
            json!({ "updated": true })
        }
        "clean-unused-topic" | "clean-expired-cq" | "delete-expired-commitlog" => {
            let (cluster, addr) = (args.get("cluster").map(|c| c.to_string().into()), args.get("broker-addr").map(|a| a.to_string().into()));
            let ok = match area {
                "clean-unused-topic" => admin.clean_unused_topic(cluster, addr).await?,
                "clean-expired-cq" => admin.clean_expired_consumer_queue(cluster, addr).await?,
                _ => admin.delete_expired_commit_log(cluster, addr).await?,
            };
            json!({ "result": ok })
        }
        "ha-status" => json!({ "ha": to_json(&admin.get_broker_ha_status(s("broker-addr")).await?) }),
        other => usage(&format!("admin: unknown area {other:?}")),
    })
}

fn response_code(e: &ClientError) -> Option<i32> {
    let mut v = json!({});
    error_fields(&mut v, e);
    v["errorCode"].as_i64().map(|c| c as i32)
}

/// The error as main.rs reports one, plus "causes": the texts of its source chain (a broker's remark is
/// often only there).
fn err_json(e: &ClientError) -> Value {
    let mut v = json!({});
    error_fields(&mut v, e);
    let mut causes = Vec::new();
    let mut cur = std::error::Error::source(e);
    while let Some(c) = cur {
        causes.push(c.to_string());
        cur = c.source();
    }
    v["causes"] = json!(causes);
    v
}

pub async fn cmd_admin(rt: Arc<ClientRuntime>, ns: String, args: &Args) {
    let timeout = Duration::from_millis(args.num("timeout-ms", TIMEOUT_MS));
    let mut admin = DefaultMQAdminExt::with_timeout(rt, timeout);
    admin.set_namesrv_addr(ns.as_str());
    if let Err(e) = admin.start().await {
        fatal("admin start", e);
    }
    let result = run(&admin, &ns, args).await;
    admin.shutdown().await;
    match result {
        Ok(v) => emit(v),
        Err(e) => {
            eprintln!("rmq-rust-client: admin {}: {e}", args.rest.join(" "));
            emit(err_json(&e));
            let _ = std::io::Write::flush(&mut std::io::stdout());
            std::process::exit(3);
        }
    }
}
