//! One proxied connection: client <-> proxy <-> upstream.
//!
//! Each direction has a reader task (socket -> bounded queue, stamping each chunk
//! with its arrival time) and a writer task that applies the toxics of that
//! direction, in the order they were added, before writing to the other socket.
//! The toxic list is watched, so adding, changing or removing a toxic affects
//! connections that are already open, as in Shopify Toxiproxy.

use crate::toxics::{Kind, Rng, Stream, Toxic};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tokio::time::{sleep_until, Instant};
use tokio_util::sync::CancellationToken;

pub type ToxicList = Arc<Vec<Toxic>>;

const READ_BUFFER: usize = 32 * 1024;
const QUEUE_CHUNKS: usize = 64;
const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

enum Msg {
    Data(Instant, Vec<u8>),
    Eof,
    Failed,
}

/// Shared control of one connection: cancelling the token ends all four tasks,
/// which drops every socket half; with `reset`, the client socket's linger is
/// set to zero first so that the close sends an RST.
struct ConnCtl {
    token: CancellationToken,
    // A duplicate of the client socket's descriptor: keeps it valid for
    // set_linger however the halves are dropped.
    client: std::net::TcpStream,
}

impl ConnCtl {
    fn kill(&self, reset: bool) {
        if reset {
            let _ = socket2::SockRef::from(&self.client).set_linger(Some(Duration::ZERO));
        }
        self.token.cancel();
    }
}

/// Handle one accepted client: connect upstream, then pipe both directions.
pub async fn serve(
    proxy: Arc<str>,
    client: TcpStream,
    upstream: Arc<str>,
    toxics: watch::Receiver<ToxicList>,
    token: CancellationToken,
) {
    let peer = client.peer_addr().map(|a| a.to_string()).unwrap_or_default();
    let server = tokio::select! {
        _ = token.cancelled() => return,
        r = tokio::time::timeout(UPSTREAM_CONNECT_TIMEOUT, TcpStream::connect(&*upstream)) => match r {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                log(&format!("proxy={proxy} client={peer} upstream={upstream}: cannot connect upstream: {e}"));
                return;
            }
            Err(_) => {
                log(&format!("proxy={proxy} client={peer} upstream={upstream}: upstream connect timed out"));
                return;
            }
        }
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);

    // Duplicate the client descriptor (std round trip) for ConnCtl.
    let client = match client.into_std() {
        Ok(s) => s,
        Err(_) => return,
    };
    let dup = match client.try_clone() {
        Ok(d) => d,
        Err(_) => return,
    };
    let client = match TcpStream::from_std(client) {
        Ok(c) => c,
        Err(_) => return,
    };
    let ctl = Arc::new(ConnCtl { token, client: dup });

    let (client_r, client_w) = client.into_split();
    let (server_r, server_w) = server.into_split();
    let (up_tx, up_rx) = mpsc::channel(QUEUE_CHUNKS);
    let (down_tx, down_rx) = mpsc::channel(QUEUE_CHUNKS);

    tokio::spawn(reader(client_r, up_tx, ctl.clone()));
    tokio::spawn(reader(server_r, down_tx, ctl.clone()));
    let up = tokio::spawn(writer(up_rx, server_w, Stream::Upstream, toxics.clone(), ctl.clone()));
    let down = tokio::spawn(writer(down_rx, client_w, Stream::Downstream, toxics, ctl.clone()));
    let _ = tokio::join!(up, down);
    // Both directions are done (closed, failed or killed): stop the readers too.
    ctl.token.cancel();
}

async fn reader(mut src: OwnedReadHalf, tx: mpsc::Sender<Msg>, ctl: Arc<ConnCtl>) {
    let mut buf = vec![0u8; READ_BUFFER];
    loop {
        let r = tokio::select! {
            _ = ctl.token.cancelled() => return,
            r = src.read(&mut buf) => r,
        };
        let (msg, last) = match r {
            Ok(0) => (Msg::Eof, true),
            Ok(n) => (Msg::Data(Instant::now(), buf[..n].to_vec()), false),
            Err(_) => (Msg::Failed, true),
        };
        tokio::select! {
            _ = ctl.token.cancelled() => return,
            r = tx.send(msg) => if r.is_err() { return },
        }
        if last {
            return;
        }
    }
}

/// Per-connection state of one toxic, keyed by toxic name.
struct Seen {
    id: u64,
    active: bool,
    since: Instant,
    passed: u64,
}

struct Writer {
    dst: OwnedWriteHalf,
    stream: Stream,
    toxics: watch::Receiver<ToxicList>,
    ctl: Arc<ConnCtl>,
    seen: HashMap<String, Seen>,
    rng: Rng,
    bandwidth_next: Instant,
    last_data: Instant,
}

enum Wake {
    Reached,
    Changed,
    Stop,
}

async fn sleep_opt(at: Option<Instant>) {
    match at {
        Some(at) => sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn min_opt(a: Option<Instant>, b: Instant) -> Option<Instant> {
    Some(a.map_or(b, |a| a.min(b)))
}

impl Writer {
    /// The toxics of this direction that are active on this connection, in order.
    fn active(&mut self) -> Vec<Toxic> {
        let list = self.toxics.borrow_and_update().clone();
        let now = Instant::now();
        let mut out = Vec::new();
        let mut present = Vec::new();
        for t in list.iter().filter(|t| t.stream == self.stream) {
            present.push(t.name.clone());
            let fresh = self.seen.get(&t.name).map_or(true, |s| s.id != t.id);
            if fresh {
                let active = t.toxicity >= 1.0 || self.rng.unit() < t.toxicity;
                self.seen.insert(t.name.clone(), Seen { id: t.id, active, since: now, passed: 0 });
            }
            if self.seen[&t.name].active {
                out.push(t.clone());
            }
        }
        self.seen.retain(|name, _| present.contains(name));
        out
    }

    /// Sleep until `at`, waking early if the toxics change or the link is stopped.
    async fn wait(&mut self, at: Instant) -> Wake {
        tokio::select! {
            _ = self.ctl.token.cancelled() => Wake::Stop,
            _ = sleep_until(at) => Wake::Reached,
            r = self.toxics.changed() => if r.is_ok() { Wake::Changed } else { Wake::Stop },
        }
    }

    async fn pause(&mut self, d: Duration) -> bool {
        tokio::select! {
            _ = self.ctl.token.cancelled() => false,
            _ = tokio::time::sleep(d) => true,
        }
    }

    async fn run(&mut self, mut rx: mpsc::Receiver<Msg>) {
        loop {
            let active = self.active();
            let mut dropping = false;
            let mut close_at = None;
            for t in &active {
                if let Kind::Timeout { timeout } = t.kind {
                    dropping = true;
                    if timeout > 0 {
                        let since = self.seen[&t.name].since.max(self.last_data);
                        close_at = min_opt(close_at, since + Duration::from_millis(timeout));
                    }
                }
            }
            // biased: a stop or a toxic change seen together with data is handled first, so data that came
            // after a toxic was removed is never judged by the toxics of before
            let msg = tokio::select! {
                biased;
                _ = self.ctl.token.cancelled() => return,
                r = self.toxics.changed() => {
                    if r.is_err() {
                        // The proxy is gone.
                        self.ctl.kill(false);
                        return;
                    }
                    continue;
                }
                _ = sleep_opt(close_at) => {
                    // timeout toxic: the connection is closed once it has been quiet that long.
                    self.ctl.kill(false);
                    return;
                }
                m = rx.recv() => m,
            };
            match msg {
                None | Some(Msg::Failed) => {
                    self.ctl.kill(false);
                    return;
                }
                Some(Msg::Eof) => {
                    if !self.close_slowly().await {
                        return;
                    }
                    let _ = self.dst.shutdown().await;
                    return;
                }
                Some(Msg::Data(arrived, data)) => {
                    // the toxics as they are now: they may have changed while this data waited in the channel
                    if dropping && self.active().iter().any(|t| matches!(t.kind, Kind::Timeout { .. })) {
                        // timeout toxic: data is dropped on the floor while it is active.
                        self.last_data = Instant::now();
                        continue;
                    }
                    if !self.forward(arrived, data).await {
                        return;
                    }
                }
            }
        }
    }

    /// slow_close: hold the close back by `delay` ms.
    async fn close_slowly(&mut self) -> bool {
        let start = Instant::now();
        loop {
            let delay = self
                .active()
                .iter()
                .filter_map(|t| match t.kind {
                    Kind::SlowClose { delay } => Some(delay),
                    _ => None,
                })
                .max()
                .unwrap_or(0);
            let at = start + Duration::from_millis(delay);
            if Instant::now() >= at {
                return true;
            }
            match self.wait(at).await {
                Wake::Reached => return true,
                Wake::Changed => continue,
                Wake::Stop => return false,
            }
        }
    }

    /// Pass one chunk through latency, reset_peer, slicer, bandwidth and
    /// limit_data; false when the connection is over.
    async fn forward(&mut self, arrived: Instant, data: Vec<u8>) -> bool {
        // latency (+/- jitter), measured from when the chunk was read, so a
        // stream of chunks is delayed, not slowed down.
        loop {
            let mut delay: i64 = 0;
            for t in self.active() {
                if let Kind::Latency { latency, jitter } = t.kind {
                    delay += latency as i64 + self.rng.spread(jitter);
                }
            }
            let at = arrived + Duration::from_millis(delay.max(0) as u64);
            if Instant::now() >= at {
                break;
            }
            match self.wait(at).await {
                Wake::Reached => break,
                Wake::Changed => continue,
                Wake::Stop => return false,
            }
        }

        let active = self.active();

        // reset_peer: on data, wait `timeout` ms, then reset the connection (TCP RST).
        if let Some(timeout) = active.iter().find_map(|t| match t.kind {
            Kind::ResetPeer { timeout } => Some(timeout),
            _ => None,
        }) {
            if timeout > 0 && !self.pause(Duration::from_millis(timeout)).await {
                return false;
            }
            self.ctl.kill(true);
            return false;
        }

        let slicer = active.iter().find_map(|t| match t.kind {
            Kind::Slicer { average_size, size_variation, delay } => Some((average_size, size_variation, delay)),
            _ => None,
        });
        let rate = active
            .iter()
            .filter_map(|t| match t.kind {
                Kind::Bandwidth { rate } if rate > 0 => Some(rate),
                _ => None,
            })
            .min();
        let limits: Vec<String> = active
            .iter()
            .filter(|t| matches!(t.kind, Kind::LimitData { .. }))
            .map(|t| t.name.clone())
            .collect();
        let limit_of = |t: &Toxic| match t.kind {
            Kind::LimitData { bytes } => bytes,
            _ => u64::MAX,
        };

        // Cut the chunk into the pieces that are written one by one.
        let mut pieces: Vec<&[u8]> = Vec::new();
        let mut rest = &data[..];
        while !rest.is_empty() {
            let mut n = rest.len();
            if let Some((avg, var, _)) = slicer {
                let size = avg.max(1) as i64 + self.rng.spread(var.min(avg.saturating_sub(1)));
                n = n.min(size.max(1) as usize);
            }
            if let Some(rate) = rate {
                // at most ~100 ms of traffic per write keeps the rate smooth
                n = n.min(((rate * 1024) / 10).max(1) as usize);
            }
            pieces.push(&rest[..n]);
            rest = &rest[n..];
        }

        let count = pieces.len();
        for (i, piece) in pieces.into_iter().enumerate() {
            let mut piece = piece;
            let mut close_after = false;
            for name in &limits {
                let toxic = active.iter().find(|t| &t.name == name).unwrap();
                let seen = &self.seen[name];
                let left = limit_of(toxic).saturating_sub(seen.passed);
                if (piece.len() as u64) >= left {
                    piece = &piece[..left as usize];
                    close_after = true;
                }
            }
            if let Some(rate) = rate {
                let cost = Duration::from_secs_f64(piece.len() as f64 / (rate as f64 * 1024.0));
                self.bandwidth_next = self.bandwidth_next.max(Instant::now()) + cost;
                let at = self.bandwidth_next;
                if let Wake::Stop = self.wait_plain(at).await {
                    return false;
                }
            }
            if !piece.is_empty() {
                let ok = tokio::select! {
                    _ = self.ctl.token.cancelled() => false,
                    r = self.dst.write_all(piece) => r.is_ok(),
                };
                if !ok {
                    self.ctl.kill(false);
                    return false;
                }
            }
            for name in &limits {
                if let Some(s) = self.seen.get_mut(name) {
                    s.passed += piece.len() as u64;
                }
            }
            if close_after {
                // limit_data: the limit is reached, close the connection.
                self.ctl.kill(false);
                return false;
            }
            if let Some((_, _, delay_us)) = slicer {
                if delay_us > 0 && i + 1 < count && !self.pause(Duration::from_micros(delay_us)).await {
                    return false;
                }
            }
        }
        self.last_data = Instant::now();
        true
    }

    async fn wait_plain(&mut self, at: Instant) -> Wake {
        tokio::select! {
            _ = self.ctl.token.cancelled() => Wake::Stop,
            _ = sleep_until(at) => Wake::Reached,
        }
    }
}

async fn writer(
    rx: mpsc::Receiver<Msg>,
    dst: OwnedWriteHalf,
    stream: Stream,
    toxics: watch::Receiver<ToxicList>,
    ctl: Arc<ConnCtl>,
) {
    let now = Instant::now();
    let mut w = Writer {
        dst,
        stream,
        toxics,
        ctl,
        seen: HashMap::new(),
        rng: Rng::new(),
        bandwidth_next: now,
        last_data: now,
    };
    w.run(rx).await;
    // Dropping a tokio write half would shut down its direction (a FIN) first,
    // which a client reads as a clean end of stream before any reset; a clean
    // close has already sent its shutdown in run(). Closing is left to the
    // last handle of the socket, with linger 0 when the link was reset.
    w.dst.forget();
}

pub fn log(msg: &str) {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    println!("{}.{:03} {}", t.as_secs(), t.subsec_millis(), msg);
}
