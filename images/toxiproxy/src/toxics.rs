//! Toxic definitions: how they are parsed from and rendered to Toxiproxy's JSON.
//!
//! Attribute names, units and defaults follow Shopify Toxiproxy 2.x:
//! latency/jitter/delay/timeout in milliseconds, slicer `delay` in microseconds,
//! bandwidth `rate` in KB/s, limit_data `bytes` in bytes. A missing attribute is 0.

use serde_json::{json, Map, Value};
use std::sync::atomic::{AtomicU64, Ordering};

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A fresh identity for a toxic; a changed toxic gets a new one, so every
/// connection re-rolls its toxicity and restarts its per-toxic state.
pub fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// client -> upstream server
    Upstream,
    /// upstream server -> client
    Downstream,
}

impl Stream {
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Upstream => "upstream",
            Stream::Downstream => "downstream",
        }
    }

    pub fn parse(s: &str) -> Option<Stream> {
        match s {
            "upstream" => Some(Stream::Upstream),
            "downstream" => Some(Stream::Downstream),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    Noop,
    Latency { latency: u64, jitter: u64 },
    Bandwidth { rate: u64 },
    SlowClose { delay: u64 },
    Timeout { timeout: u64 },
    ResetPeer { timeout: u64 },
    Slicer { average_size: u64, size_variation: u64, delay: u64 },
    LimitData { bytes: u64 },
}

fn attr(attrs: &Map<String, Value>, key: &str) -> Result<u64, String> {
    match attrs.get(key) {
        None | Some(Value::Null) => Ok(0),
        Some(v) => {
            if let Some(n) = v.as_u64() {
                Ok(n)
            } else if let Some(f) = v.as_f64() {
                if f >= 0.0 && f.is_finite() {
                    Ok(f as u64)
                } else {
                    Err(format!("attribute {key} must not be negative"))
                }
            } else {
                Err(format!("attribute {key} must be a number"))
            }
        }
    }
}

impl Kind {
    pub fn type_name(&self) -> &'static str {
        match self {
            Kind::Noop => "noop",
            Kind::Latency { .. } => "latency",
            Kind::Bandwidth { .. } => "bandwidth",
            Kind::SlowClose { .. } => "slow_close",
            Kind::Timeout { .. } => "timeout",
            Kind::ResetPeer { .. } => "reset_peer",
            Kind::Slicer { .. } => "slicer",
            Kind::LimitData { .. } => "limit_data",
        }
    }

    pub fn parse(type_name: &str, attrs: &Map<String, Value>) -> Result<Kind, String> {
        Ok(match type_name {
            "noop" => Kind::Noop,
            "latency" => Kind::Latency { latency: attr(attrs, "latency")?, jitter: attr(attrs, "jitter")? },
            "bandwidth" => Kind::Bandwidth { rate: attr(attrs, "rate")? },
            "slow_close" => Kind::SlowClose { delay: attr(attrs, "delay")? },
            "timeout" => Kind::Timeout { timeout: attr(attrs, "timeout")? },
            "reset_peer" => Kind::ResetPeer { timeout: attr(attrs, "timeout")? },
            "slicer" => Kind::Slicer {
                average_size: attr(attrs, "average_size")?,
                size_variation: attr(attrs, "size_variation")?,
                delay: attr(attrs, "delay")?,
            },
            "limit_data" => Kind::LimitData { bytes: attr(attrs, "bytes")? },
            other => return Err(format!("invalid toxic type: {other:?}")),
        })
    }

    pub fn attributes(&self) -> Value {
        match *self {
            Kind::Noop => json!({}),
            Kind::Latency { latency, jitter } => json!({"latency": latency, "jitter": jitter}),
            Kind::Bandwidth { rate } => json!({"rate": rate}),
            Kind::SlowClose { delay } => json!({"delay": delay}),
            Kind::Timeout { timeout } => json!({"timeout": timeout}),
            Kind::ResetPeer { timeout } => json!({"timeout": timeout}),
            Kind::Slicer { average_size, size_variation, delay } => {
                json!({"average_size": average_size, "size_variation": size_variation, "delay": delay})
            }
            Kind::LimitData { bytes } => json!({"bytes": bytes}),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Toxic {
    pub id: u64,
    pub name: String,
    pub stream: Stream,
    pub toxicity: f64,
    pub kind: Kind,
}

fn toxicity_of(body: &Map<String, Value>) -> Result<Option<f64>, String> {
    match body.get("toxicity") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_f64() {
            Some(t) if (0.0..=1.0).contains(&t) => Ok(Some(t)),
            _ => Err("toxicity must be a number between 0 and 1".into()),
        },
    }
}

fn attributes_of(body: &Map<String, Value>) -> Result<Map<String, Value>, String> {
    match body.get("attributes") {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(m)) => Ok(m.clone()),
        Some(_) => Err("attributes must be an object".into()),
    }
}

impl Toxic {
    /// Parse the body of `POST /proxies/{proxy}/toxics`.
    pub fn from_json(body: &Value) -> Result<Toxic, String> {
        let body = body.as_object().ok_or("request body must be a JSON object")?;
        let type_name = body.get("type").and_then(Value::as_str).ok_or("missing toxic type")?;
        let stream = match body.get("stream").or_else(|| body.get("direction")) {
            None | Some(Value::Null) => Stream::Downstream,
            Some(Value::String(s)) if s.is_empty() => Stream::Downstream,
            Some(Value::String(s)) => Stream::parse(s).ok_or(format!("invalid stream: {s:?}"))?,
            Some(_) => return Err("stream must be \"upstream\" or \"downstream\"".into()),
        };
        let kind = Kind::parse(type_name, &attributes_of(body)?)?;
        let name = match body.get("name").and_then(Value::as_str) {
            Some(n) if !n.is_empty() => n.to_string(),
            _ => format!("{}_{}", kind.type_name(), stream.as_str()),
        };
        let toxicity = toxicity_of(body)?.unwrap_or(1.0);
        Ok(Toxic { id: next_id(), name, stream, toxicity, kind })
    }

    /// Apply the body of `POST /proxies/{proxy}/toxics/{toxic}`: new attributes
    /// (merged over the current ones) and/or a new toxicity; type and stream stay.
    pub fn updated(&self, body: &Value) -> Result<Toxic, String> {
        let body = body.as_object().ok_or("request body must be a JSON object")?;
        let mut attrs = match self.kind.attributes() {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        for (k, v) in attributes_of(body)? {
            attrs.insert(k, v);
        }
        let kind = Kind::parse(self.kind.type_name(), &attrs)?;
        let toxicity = toxicity_of(body)?.unwrap_or(self.toxicity);
        Ok(Toxic { id: next_id(), name: self.name.clone(), stream: self.stream, toxicity, kind })
    }

    pub fn to_json(&self) -> Value {
        json!({
            "name": self.name,
            "type": self.kind.type_name(),
            "stream": self.stream.as_str(),
            "toxicity": self.toxicity,
            "attributes": self.kind.attributes(),
        })
    }
}

/// A small xorshift64* generator: toxicity rolls, jitter and slice sizes need
/// no cryptographic quality, and this keeps the binary free of extra crates.
#[derive(Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new() -> Rng {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let seed = nanos ^ next_id().wrapping_mul(0x9E37_79B9_7F4A_7C15);
        Rng(seed | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [-spread, +spread].
    pub fn spread(&mut self, spread: u64) -> i64 {
        if spread == 0 {
            return 0;
        }
        (self.next_u64() % (2 * spread + 1)) as i64 - spread as i64
    }
}
