//! Proxies: a listening socket, an upstream address, a toxic list, and the
//! accept loop that hands each client to `link::serve`.

use crate::link::{self, log, ToxicList};
use crate::toxics::Toxic;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

#[derive(Debug)]
pub struct ApiError {
    pub status: u16,
    pub message: String,
}

impl ApiError {
    pub fn new(status: u16, message: impl Into<String>) -> ApiError {
        ApiError { status, message: message.into() }
    }
    pub fn not_found(what: &str) -> ApiError {
        ApiError::new(404, format!("{what} not found"))
    }
    pub fn bad(message: impl Into<String>) -> ApiError {
        ApiError::new(400, message)
    }
}

struct Running {
    token: CancellationToken,
    accept: JoinHandle<()>,
}

pub struct Proxy {
    name: String,
    /// What the client asked for; a port 0 here is replaced by the bound port.
    listen: String,
    upstream: String,
    enabled: bool,
    toxics: watch::Sender<ToxicList>,
    running: Option<Running>,
}

impl Proxy {
    fn new(name: String, listen: String, upstream: String) -> Proxy {
        let (toxics, _) = watch::channel(Arc::new(Vec::new()));
        Proxy { name, listen, upstream, enabled: false, toxics, running: None }
    }

    pub fn to_json(&self) -> Value {
        let toxics: Vec<Value> = self.toxics.borrow().iter().map(Toxic::to_json).collect();
        json!({
            "name": self.name,
            "listen": self.listen,
            "upstream": self.upstream,
            "enabled": self.enabled,
            "toxics": toxics,
        })
    }

    pub fn toxic_list(&self) -> ToxicList {
        self.toxics.borrow().clone()
    }

    fn set_toxics(&self, list: Vec<Toxic>) {
        self.toxics.send_replace(Arc::new(list));
    }

    /// Bind and start accepting. Binding happens here, synchronously, so that a
    /// bad or busy address is an API error and a port 0 is known at once.
    fn start(&mut self) -> Result<(), ApiError> {
        if self.running.is_some() {
            self.enabled = true;
            return Ok(());
        }
        let std_listener = std::net::TcpListener::bind(&self.listen)
            .map_err(|e| ApiError::new(500, format!("listen tcp {}: {e}", self.listen)))?;
        std_listener
            .set_nonblocking(true)
            .map_err(|e| ApiError::new(500, e.to_string()))?;
        let bound = std_listener.local_addr().map_err(|e| ApiError::new(500, e.to_string()))?;
        let listener =
            tokio::net::TcpListener::from_std(std_listener).map_err(|e| ApiError::new(500, e.to_string()))?;
        self.listen = with_port(&self.listen, bound);

        let token = CancellationToken::new();
        let name: Arc<str> = self.name.as_str().into();
        let upstream: Arc<str> = self.upstream.as_str().into();
        let toxics = self.toxics.subscribe();
        let stop = token.clone();
        let accept = tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    _ = stop.cancelled() => break,
                    r = listener.accept() => r,
                };
                match accepted {
                    Ok((client, _)) => {
                        tokio::spawn(link::serve(
                            name.clone(),
                            client,
                            upstream.clone(),
                            toxics.clone(),
                            stop.child_token(),
                        ));
                    }
                    Err(e) => {
                        log(&format!("proxy={name}: accept failed: {e}"));
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    }
                }
            }
            // Dropping the listener here closes the port.
        });
        self.running = Some(Running { token, accept });
        self.enabled = true;
        log(&format!("proxy={} listen={} upstream={}: started", self.name, self.listen, self.upstream));
        Ok(())
    }

    /// Stop listening and close every connection; waits until the port is closed.
    async fn stop(&mut self) {
        self.enabled = false;
        if let Some(r) = self.running.take() {
            r.token.cancel();
            let _ = r.accept.await;
            log(&format!("proxy={}: stopped", self.name));
        }
    }
}

/// Report the bound port when the client asked for port 0, keeping its host spelling.
fn with_port(listen: &str, bound: SocketAddr) -> String {
    match listen.rsplit_once(':') {
        Some((host, "0")) => format!("{host}:{}", bound.port()),
        Some(_) => listen.to_string(),
        None => bound.to_string(),
    }
}

#[derive(Default)]
pub struct Manager {
    proxies: BTreeMap<String, Proxy>,
}

fn field<'a>(body: &'a Value, key: &str) -> Option<&'a str> {
    body.get(key).and_then(Value::as_str).filter(|s| !s.is_empty())
}

fn enabled_field(body: &Value) -> Result<Option<bool>, ApiError> {
    match body.get("enabled") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(ApiError::bad("enabled must be true or false")),
    }
}

impl Manager {
    pub fn list(&self) -> Value {
        let mut m = serde_json::Map::new();
        for (name, p) in &self.proxies {
            m.insert(name.clone(), p.to_json());
        }
        Value::Object(m)
    }

    pub fn get(&self, name: &str) -> Result<&Proxy, ApiError> {
        self.proxies.get(name).ok_or_else(|| ApiError::not_found("proxy"))
    }

    fn get_mut(&mut self, name: &str) -> Result<&mut Proxy, ApiError> {
        self.proxies.get_mut(name).ok_or_else(|| ApiError::not_found("proxy"))
    }

    pub fn create(&mut self, body: &Value) -> Result<Value, ApiError> {
        let name = field(body, "name").ok_or_else(|| ApiError::bad("missing required field: name"))?;
        let upstream =
            field(body, "upstream").ok_or_else(|| ApiError::bad("missing required field: upstream"))?;
        let listen = field(body, "listen").unwrap_or("127.0.0.1:0");
        let enabled = enabled_field(body)?.unwrap_or(true);
        if self.proxies.contains_key(name) {
            return Err(ApiError::new(409, "proxy already exists"));
        }
        let mut p = Proxy::new(name.to_string(), listen.to_string(), upstream.to_string());
        if enabled {
            p.start()?;
        }
        let out = p.to_json();
        self.proxies.insert(name.to_string(), p);
        Ok(out)
    }

    /// `POST /proxies/{name}`: change enabled, listen and/or upstream.
    pub async fn update(&mut self, name: &str, body: &Value) -> Result<Value, ApiError> {
        let p = self.get_mut(name)?;
        let enabled = enabled_field(body)?.unwrap_or(p.enabled);
        let listen = field(body, "listen").unwrap_or(&p.listen).to_string();
        let upstream = field(body, "upstream").unwrap_or(&p.upstream).to_string();
        let moved = listen != p.listen || upstream != p.upstream;
        if moved || !enabled {
            p.stop().await;
        }
        p.listen = listen;
        p.upstream = upstream;
        if enabled {
            p.start()?;
        }
        Ok(p.to_json())
    }

    pub async fn delete(&mut self, name: &str) -> Result<(), ApiError> {
        let mut p = self.proxies.remove(name).ok_or_else(|| ApiError::not_found("proxy"))?;
        p.stop().await;
        log(&format!("proxy={name}: deleted"));
        Ok(())
    }

    /// `POST /reset`: enable every proxy and remove every toxic.
    pub fn reset(&mut self) -> Result<(), ApiError> {
        for p in self.proxies.values_mut() {
            p.set_toxics(Vec::new());
            p.start()?;
        }
        Ok(())
    }

    /// `POST /populate`: create or replace proxies from a list; proxies that are
    /// already there with the same listen and upstream are kept as they are.
    pub async fn populate(&mut self, body: &Value) -> Result<Value, ApiError> {
        let items = match body {
            Value::Array(a) => a.clone(),
            Value::Object(o) => match o.get("proxies") {
                Some(Value::Array(a)) => a.clone(),
                _ => return Err(ApiError::bad("expected a JSON list of proxies")),
            },
            _ => return Err(ApiError::bad("expected a JSON list of proxies")),
        };
        let mut out = Vec::new();
        for item in &items {
            let name = field(item, "name").ok_or_else(|| ApiError::bad("missing required field: name"))?;
            if let Some(p) = self.proxies.get_mut(name) {
                let same_upstream = field(item, "upstream").map_or(true, |u| u == p.upstream);
                let same_listen = field(item, "listen").map_or(true, |l| l == p.listen);
                if same_upstream && same_listen {
                    match enabled_field(item)? {
                        Some(false) => p.stop().await,
                        _ => p.start()?,
                    }
                    out.push(p.to_json());
                    continue;
                }
                self.delete(name).await?;
            }
            out.push(self.create(item)?);
        }
        Ok(json!({ "proxies": out }))
    }

    pub fn add_toxic(&mut self, proxy: &str, body: &Value) -> Result<Value, ApiError> {
        let p = self.get(proxy)?;
        let toxic = Toxic::from_json(body).map_err(ApiError::bad)?;
        let mut list = (*p.toxic_list()).clone();
        if list.iter().any(|t| t.name == toxic.name) {
            return Err(ApiError::new(409, "toxic already exists"));
        }
        let out = toxic.to_json();
        log(&format!("proxy={proxy}: add toxic {out}"));
        list.push(toxic);
        p.set_toxics(list);
        Ok(out)
    }

    pub fn get_toxic(&self, proxy: &str, toxic: &str) -> Result<Value, ApiError> {
        let p = self.get(proxy)?;
        let list = p.toxic_list();
        let t = list.iter().find(|t| t.name == toxic).ok_or_else(|| ApiError::not_found("toxic"))?;
        Ok(t.to_json())
    }

    pub fn update_toxic(&mut self, proxy: &str, toxic: &str, body: &Value) -> Result<Value, ApiError> {
        let p = self.get(proxy)?;
        let mut list = (*p.toxic_list()).clone();
        let slot = list.iter_mut().find(|t| t.name == toxic).ok_or_else(|| ApiError::not_found("toxic"))?;
        *slot = slot.updated(body).map_err(ApiError::bad)?;
        let out = slot.to_json();
        log(&format!("proxy={proxy}: update toxic {out}"));
        p.set_toxics(list);
        Ok(out)
    }

    pub fn delete_toxic(&mut self, proxy: &str, toxic: &str) -> Result<(), ApiError> {
        let p = self.get(proxy)?;
        let mut list = (*p.toxic_list()).clone();
        let before = list.len();
        list.retain(|t| t.name != toxic);
        if list.len() == before {
            return Err(ApiError::not_found("toxic"));
        }
        log(&format!("proxy={proxy}: remove toxic {toxic}"));
        p.set_toxics(list);
        Ok(())
    }
}
