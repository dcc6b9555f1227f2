//! rmqha-toxiproxy: a TCP fault proxy that speaks Shopify Toxiproxy 2.x's REST API.
//!
//!   toxiproxy-server [-host 0.0.0.0] [-port 8474] [-config proxies.json]
//!
//! Endpoints: GET /version, POST /reset, GET|POST /proxies, POST /populate,
//! GET|POST|DELETE /proxies/{proxy}, GET|POST /proxies/{proxy}/toxics,
//! GET|POST|DELETE /proxies/{proxy}/toxics/{toxic}.
//! Toxics: latency, bandwidth, slow_close, timeout, reset_peer, slicer, limit_data, noop.

mod link;
mod proxy;
mod toxics;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use link::log;
use proxy::{ApiError, Manager};
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::sync::Mutex;

const VERSION: &str = concat!("2.5.0-rmqha.", env!("CARGO_PKG_VERSION"));

type Shared = Arc<Mutex<Manager>>;

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, json_body(&json!({"error": self.message, "status": self.status}))).into_response()
    }
}

fn json_body(v: &Value) -> ([(header::HeaderName, &'static str); 1], String) {
    ([(header::CONTENT_TYPE, "application/json")], v.to_string())
}

fn ok(status: StatusCode, v: Value) -> Response {
    (status, json_body(&v)).into_response()
}

/// Bodies are parsed by hand so that a client that sends JSON without a
/// Content-Type header (curl -d, as Toxiproxy's docs do) works too.
fn parse(body: &Bytes) -> Result<Value, ApiError> {
    if body.iter().all(|b| b.is_ascii_whitespace()) {
        return Ok(json!({}));
    }
    serde_json::from_slice(body).map_err(|e| ApiError::bad(format!("bad request body: {e}")))
}

async fn version() -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, "text/plain")], VERSION).into_response()
}

async fn reset(State(m): State<Shared>) -> Result<Response, ApiError> {
    m.lock().await.reset()?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn list_proxies(State(m): State<Shared>) -> Response {
    ok(StatusCode::OK, m.lock().await.list())
}

async fn create_proxy(State(m): State<Shared>, body: Bytes) -> Result<Response, ApiError> {
    let v = parse(&body)?;
    Ok(ok(StatusCode::CREATED, m.lock().await.create(&v)?))
}

async fn populate(State(m): State<Shared>, body: Bytes) -> Result<Response, ApiError> {
    let v = parse(&body)?;
    Ok(ok(StatusCode::CREATED, m.lock().await.populate(&v).await?))
}

async fn get_proxy(State(m): State<Shared>, Path(name): Path<String>) -> Result<Response, ApiError> {
    Ok(ok(StatusCode::OK, m.lock().await.get(&name)?.to_json()))
}

async fn update_proxy(
    State(m): State<Shared>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let v = parse(&body)?;
    Ok(ok(StatusCode::OK, m.lock().await.update(&name, &v).await?))
}

async fn delete_proxy(State(m): State<Shared>, Path(name): Path<String>) -> Result<Response, ApiError> {
    m.lock().await.delete(&name).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn list_toxics(State(m): State<Shared>, Path(name): Path<String>) -> Result<Response, ApiError> {
    let guard = m.lock().await;
    let list: Vec<Value> = guard.get(&name)?.toxic_list().iter().map(|t| t.to_json()).collect();
    Ok(ok(StatusCode::OK, Value::Array(list)))
}

async fn add_toxic(
    State(m): State<Shared>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let v = parse(&body)?;
    Ok(ok(StatusCode::OK, m.lock().await.add_toxic(&name, &v)?))
}

async fn get_toxic(
    State(m): State<Shared>,
    Path((name, toxic)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    Ok(ok(StatusCode::OK, m.lock().await.get_toxic(&name, &toxic)?))
}

async fn update_toxic(
    State(m): State<Shared>,
    Path((name, toxic)): Path<(String, String)>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let v = parse(&body)?;
    Ok(ok(StatusCode::OK, m.lock().await.update_toxic(&name, &toxic, &v)?))
}

async fn delete_toxic(
    State(m): State<Shared>,
    Path((name, toxic)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    m.lock().await.delete_toxic(&name, &toxic)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

struct Args {
    host: String,
    port: u16,
    config: Option<String>,
}

fn usage() -> ! {
    eprintln!("usage: toxiproxy-server [-host ADDR] [-port PORT] [-config FILE.json] [-version]");
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut a = Args { host: "localhost".into(), port: 8474, config: None };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let flag = arg.trim_start_matches('-');
        let (key, inline) = match flag.split_once('=') {
            Some((k, v)) => (k.to_string(), Some(v.to_string())),
            None => (flag.to_string(), None),
        };
        let mut value = || inline.clone().or_else(|| it.next()).unwrap_or_else(|| usage());
        match key.as_str() {
            "host" => a.host = value(),
            "port" => a.port = value().parse().unwrap_or_else(|_| usage()),
            "config" => a.config = Some(value()),
            "version" => {
                println!("{VERSION}");
                std::process::exit(0)
            }
            _ => usage(),
        }
    }
    a
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = parse_args();
    let manager: Shared = Arc::new(Mutex::new(Manager::default()));

    if let Some(path) = &args.config {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| {
            eprintln!("cannot read config {path}: {e}");
            std::process::exit(1)
        });
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| {
            eprintln!("config {path} is not valid JSON: {e}");
            std::process::exit(1)
        });
        if let Err(e) = manager.lock().await.populate(&v).await {
            eprintln!("config {path}: {}", e.message);
            std::process::exit(1)
        }
    }

    let app = Router::new()
        .route("/version", get(version))
        .route("/reset", post(reset))
        .route("/populate", post(populate))
        .route("/proxies", get(list_proxies).post(create_proxy))
        .route("/proxies/{proxy}", get(get_proxy).post(update_proxy).patch(update_proxy).delete(delete_proxy))
        .route("/proxies/{proxy}/toxics", get(list_toxics).post(add_toxic))
        .route(
            "/proxies/{proxy}/toxics/{toxic}",
            get(get_toxic).post(update_toxic).patch(update_toxic).delete(delete_toxic),
        )
        .with_state(manager);

    let addr = format!("{}:{}", args.host, args.port);
    let listener = tokio::net::TcpListener::bind(&addr).await.unwrap_or_else(|e| {
        eprintln!("cannot listen on {addr}: {e}");
        std::process::exit(1)
    });
    log(&format!("rmqha-toxiproxy {VERSION}: API listening on {addr}"));
    let shutdown = async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {},
            _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {},
        }
        log("shutting down");
    };
    if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(shutdown).await {
        eprintln!("API server failed: {e}");
        std::process::exit(1)
    }
}
