//! Per-shard transport metrics and the Prometheus `/metrics` endpoint.
//!
//! Each shard owns its counters (thread-local `Cell`s: no atomics, no cross-core traffic on
//! the request path); a scrape gathers them from every shard with `submit_to_all` and renders
//! the Prometheus text format:
//!
//! - `amphora_cql_requests_total{shard}`: request messages handled on the shard
//! - `amphora_cql_connections{shard}`: open client connections
//! - `amphora_cql_inflight_requests{shard}`: requests being executed
//! - `amphora_cql_errors_total{shard,code}`: ERROR responses sent, by CQL error code

use std::cell::{Cell, RefCell};
use std::fmt::Write as _;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use amphora_rt::{ShardId, Shards};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

thread_local! {
    static REQUESTS: Cell<u64> = const { Cell::new(0) };
    static CONNECTIONS: Cell<i64> = const { Cell::new(0) };
    static INFLIGHT: Cell<i64> = const { Cell::new(0) };
    /// (code, count), few distinct codes: a vector beats a map.
    static ERRORS: RefCell<Vec<(i32, u64)>> = const { RefCell::new(Vec::new()) };
}

/// One request message handled on this shard.
#[inline]
pub fn record_request() {
    REQUESTS.with(|c| c.set(c.get() + 1));
}

/// One ERROR response with `code` sent from this shard.
pub fn record_error(code: i32) {
    ERRORS.with(|e| {
        let mut e = e.borrow_mut();
        match e.iter_mut().find(|(c, _)| *c == code) {
            Some((_, n)) => *n += 1,
            None => e.push((code, 1)),
        }
    });
}

pub fn connection_opened() {
    CONNECTIONS.with(|c| c.set(c.get() + 1));
}

pub fn connection_closed() {
    CONNECTIONS.with(|c| c.set(c.get() - 1));
}

#[inline]
pub fn inflight_add(delta: i64) {
    INFLIGHT.with(|c| c.set(c.get() + delta));
}

/// One shard's counters at a point in time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShardSnapshot {
    pub shard: ShardId,
    pub requests_total: u64,
    pub connections: i64,
    pub inflight_requests: i64,
    /// (CQL error code, count), sorted by code.
    pub errors_total: Vec<(i32, u64)>,
}

/// The calling shard's counters.
pub fn local_snapshot(shard: ShardId) -> ShardSnapshot {
    let mut errors_total = ERRORS.with(|e| e.borrow().clone());
    errors_total.sort_unstable();
    ShardSnapshot {
        shard,
        requests_total: REQUESTS.with(|c| c.get()),
        connections: CONNECTIONS.with(|c| c.get()),
        inflight_requests: INFLIGHT.with(|c| c.get()),
        errors_total,
    }
}

/// Every shard's counters, in shard order.
pub async fn gather(shards: &Shards) -> Result<Vec<ShardSnapshot>, amphora_rt::RtError> {
    shards
        .submit_to_all(|shard| async move { local_snapshot(shard) })
        .await
}

/// Prometheus text exposition format (0.0.4).
pub fn render(snaps: &[ShardSnapshot]) -> String {
    let mut out = String::with_capacity(256 + snaps.len() * 200);
    let family = |name: &str, kind: &str, help: &str, out: &mut String| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
    };
    family(
        "amphora_cql_requests_total",
        "counter",
        "CQL request messages handled, by shard.",
        &mut out,
    );
    for s in snaps {
        let _ = writeln!(
            out,
            "amphora_cql_requests_total{{shard=\"{}\"}} {}",
            s.shard, s.requests_total
        );
    }
    family(
        "amphora_cql_connections",
        "gauge",
        "Open CQL client connections, by shard.",
        &mut out,
    );
    for s in snaps {
        let _ = writeln!(
            out,
            "amphora_cql_connections{{shard=\"{}\"}} {}",
            s.shard, s.connections
        );
    }
    family(
        "amphora_cql_inflight_requests",
        "gauge",
        "CQL requests being executed, by shard.",
        &mut out,
    );
    for s in snaps {
        let _ = writeln!(
            out,
            "amphora_cql_inflight_requests{{shard=\"{}\"}} {}",
            s.shard, s.inflight_requests
        );
    }
    family(
        "amphora_cql_errors_total",
        "counter",
        "CQL ERROR responses sent, by shard and error code.",
        &mut out,
    );
    for s in snaps {
        for (code, n) in &s.errors_total {
            let _ = writeln!(
                out,
                "amphora_cql_errors_total{{shard=\"{}\",code=\"0x{:04X}\"}} {}",
                s.shard, code, n
            );
        }
    }
    out
}

/// Largest HTTP request head we read.
const MAX_HTTP_REQUEST_BYTES: usize = 8 * 1024;
/// A scrape connection that sends nothing for this long is dropped.
const HTTP_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The running `/metrics` endpoint.
pub struct MetricsHandle {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
}

impl MetricsHandle {
    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Closes the listener.
    pub fn stop(&self) {
        let _ = self.stop.send(true);
    }
}

impl Drop for MetricsHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Serves `GET /metrics` on `addr`. Binds now (errors are returned here); the accept loop
/// runs on shard 0.
pub fn start(addr: SocketAddr, shards: Shards) -> io::Result<MetricsHandle> {
    let listener = std::net::TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    let bound = listener.local_addr()?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let for_loop = shards.clone();
    let submitted = shards.submit_to(0, move || serve_http(listener, for_loop, stop_rx));
    drop(submitted);
    Ok(MetricsHandle {
        addr: bound,
        stop: stop_tx,
    })
}

async fn serve_http(
    listener: std::net::TcpListener,
    shards: Shards,
    mut stop: watch::Receiver<bool>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "metrics: cannot register the listener");
            return;
        }
    };
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, _)) => {
                    let shards = shards.clone();
                    tokio::task::spawn_local(async move {
                        if let Err(e) = answer_http(stream, &shards).await {
                            tracing::debug!(error = %e, "metrics: scrape connection failed");
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "metrics: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            _ = stop.changed() => break,
        }
    }
}

async fn answer_http(mut stream: tokio::net::TcpStream, shards: &Shards) -> io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        if head.len() > MAX_HTTP_REQUEST_BYTES {
            return respond(&mut stream, "431 Request Header Fields Too Large", "").await;
        }
        let n = tokio::time::timeout(HTTP_READ_TIMEOUT, stream.read(&mut chunk))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "request head timed out"))??;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(chunk.get(..n).unwrap_or_default());
    }
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    if method != "GET" {
        return respond(&mut stream, "405 Method Not Allowed", "").await;
    }
    if path != "/metrics" {
        return respond(&mut stream, "404 Not Found", "").await;
    }
    match gather(shards).await {
        Ok(snaps) => respond(&mut stream, "200 OK", &render(&snaps)).await,
        Err(e) => {
            tracing::warn!(error = %e, "metrics: gathering shard counters failed");
            respond(&mut stream, "503 Service Unavailable", "").await
        }
    }
}

async fn respond(stream: &mut tokio::net::TcpStream, status: &str, body: &str) -> io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prometheus_text() {
        let snaps = vec![
            ShardSnapshot {
                shard: 0,
                requests_total: 5,
                connections: 1,
                inflight_requests: 0,
                errors_total: vec![(0x2200, 2)],
            },
            ShardSnapshot {
                shard: 1,
                requests_total: 7,
                ..Default::default()
            },
        ];
        let text = render(&snaps);
        assert!(text.contains("amphora_cql_requests_total{shard=\"0\"} 5\n"));
        assert!(text.contains("amphora_cql_requests_total{shard=\"1\"} 7\n"));
        assert!(text.contains("amphora_cql_errors_total{shard=\"0\",code=\"0x2200\"} 2\n"));
        assert!(text.contains("# TYPE amphora_cql_connections gauge\n"));
    }

    #[test]
    fn local_counters_accumulate() {
        let before = local_snapshot(0);
        record_request();
        record_error(0x000A);
        record_error(0x000A);
        let after = local_snapshot(0);
        assert_eq!(after.requests_total, before.requests_total + 1);
        let n = |s: &ShardSnapshot| {
            s.errors_total
                .iter()
                .find(|(c, _)| *c == 0x000A)
                .map_or(0, |(_, n)| *n)
        };
        assert_eq!(n(&after), n(&before) + 2);
    }
}
