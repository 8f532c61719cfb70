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
//!
//! plus the storage and per-table families of [`render_storage`] (gathered the same way,
//! from each shard's `ShardStorage::metrics`, `table_stats` and the replica's per-table
//! counters; nothing is added to the write or read path for them), and the process-wide
//! allocator figures `amphora_memory_allocator_*_bytes` when the binary registered a source
//! with [`set_allocator_stats`] (jemalloc's `stats.*`).

use std::cell::{Cell, RefCell};
use std::fmt::Write as _;
use std::io;
use std::net::SocketAddr;
use std::sync::OnceLock;
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

/// One process-wide figure of the memory allocator, in bytes.
#[derive(Debug, Clone, Copy)]
pub struct AllocatorStat {
    /// Rendered as `amphora_memory_allocator_<name>_bytes`.
    pub name: &'static str,
    pub help: &'static str,
    pub bytes: u64,
}

static ALLOCATOR_STATS: OnceLock<fn() -> Vec<AllocatorStat>> = OnceLock::new();

/// Registers the allocator's statistics source (the binary does, when built with jemalloc).
/// Only the first registration counts.
pub fn set_allocator_stats(source: fn() -> Vec<AllocatorStat>) {
    let _ = ALLOCATOR_STATS.set(source);
}

/// The allocator's figures now (empty when no source is registered).
pub fn allocator_stats() -> Vec<AllocatorStat> {
    ALLOCATOR_STATS.get().map(|f| f()).unwrap_or_default()
}

fn render_allocator(stats: &[AllocatorStat], out: &mut String) {
    for s in stats {
        let name = format!("amphora_memory_allocator_{}_bytes", s.name);
        let _ = writeln!(out, "# HELP {name} {}", s.help);
        let _ = writeln!(out, "# TYPE {name} gauge");
        let _ = writeln!(out, "{name} {}", s.bytes);
    }
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
        Ok(snaps) => {
            let mut body = render(&snaps);
            match gather_storage(shards).await {
                Ok(st) => body.push_str(&render_storage(&st)),
                Err(e) => tracing::warn!(error = %e, "metrics: gathering storage metrics failed"),
            }
            render_allocator(&allocator_stats(), &mut body);
            respond(&mut stream, "200 OK", &body).await
        }
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

/// One table's numbers on one shard.
#[derive(Debug, Clone, Default)]
pub struct TableSnapshot {
    pub keyspace: String,
    pub table: String,
    pub stats: amphora_storage::TableStats,
    pub counters: amphora_replica::stats::TableCounters,
}

/// One shard's storage engine numbers.
#[derive(Debug, Clone, Default)]
pub struct StorageSnapshot {
    pub shard: ShardId,
    pub metrics: amphora_storage::StorageMetrics,
    /// Sorted by (keyspace, table).
    pub tables: Vec<TableSnapshot>,
    /// Time the shard's event loop spent running tasks (tokio's busy duration; it grows
    /// each time the loop parks), in nanoseconds.
    pub reactor_busy_ns: u64,
    /// The shard's block cache of decompressed SSTable chunks and index blocks.
    pub block_cache: amphora_storage::cache::BlockCacheStats,
}

/// The calling shard's storage numbers (`None` before the shard's database exists).
pub fn local_storage_snapshot(shard: ShardId) -> Option<StorageSnapshot> {
    let db = amphora_replica::local().ok()?;
    let storage = db.storage();
    let counters = db.table_counters();
    let mut tables: Vec<TableSnapshot> = storage
        .table_ids()
        .into_iter()
        .filter_map(|id| {
            let schema = storage.schema(id)?;
            Some(TableSnapshot {
                keyspace: schema.keyspace.clone(),
                table: schema.name.clone(),
                stats: storage.table_stats(id).unwrap_or_default(),
                counters: counters.get(&id).cloned().unwrap_or_default(),
            })
        })
        .collect();
    tables.sort_by(|a, b| (&a.keyspace, &a.table).cmp(&(&b.keyspace, &b.table)));
    let rt = tokio::runtime::Handle::current().metrics();
    Some(StorageSnapshot {
        shard,
        metrics: storage.metrics(),
        tables,
        // A shard runs a current_thread runtime: worker 0 is the shard's loop.
        reactor_busy_ns: u64::try_from(rt.worker_total_busy_duration(0).as_nanos())
            .unwrap_or(u64::MAX),
        block_cache: storage.block_cache_stats(),
    })
}

/// Every shard's storage numbers, in shard order (shards without a database are skipped).
pub async fn gather_storage(shards: &Shards) -> Result<Vec<StorageSnapshot>, amphora_rt::RtError> {
    let all = shards
        .submit_to_all(|shard| async move { local_storage_snapshot(shard) })
        .await?;
    Ok(all.into_iter().flatten().collect())
}

/// (name, type, help, value) of a metric family.
type Family<X> = (&'static str, &'static str, &'static str, fn(&X) -> u64);

/// Escapes a Prometheus label value.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Latency histogram buckets exported (µs): every 4th bucket of the replica's
/// Cassandra-style histogram (about ×2 apart), so a table costs ~23 series per histogram.
fn exported_latency_bounds() -> Vec<(usize, u64)> {
    amphora_replica::stats::bucket_offsets()
        .iter()
        .copied()
        .enumerate()
        .filter(|(i, _)| i % 4 == 3)
        .collect()
}

fn render_histogram(
    out: &mut String,
    name: &str,
    labels: &str,
    h: &amphora_replica::stats::Histogram,
    bounds: &[(usize, u64)],
) {
    let mut cumulative = 0u64;
    let mut next = 0usize;
    for (i, le) in bounds {
        while next <= *i {
            cumulative += h.buckets.get(next).copied().unwrap_or(0);
            next += 1;
        }
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {cumulative}");
    }
    let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", h.count);
    let _ = writeln!(out, "{name}_sum{{{labels}}} {}", h.sum);
    let _ = writeln!(out, "{name}_count{{{labels}}} {}", h.count);
}

/// Storage and per-table families (ScyllaDB's names with the `amphora_` prefix and its
/// label names `shard`, `ks`, `cf`):
///
/// - per shard: `amphora_database_total_reads`, `amphora_database_total_writes`,
///   `amphora_memtables_real_dirty_memory` (bytes), `amphora_memtables_partitions`,
///   `amphora_memtables_pending_flushes`, `amphora_memtables_flushes_total`,
///   `amphora_memtables_flushed_bytes_total`, `amphora_sstables_live`,
///   `amphora_sstables_live_bytes`, `amphora_sstables_corrupt`,
///   `amphora_compaction_manager_pending_compactions`,
///   `amphora_compaction_manager_completed_compactions_total`,
///   `amphora_compaction_manager_stopped_compactions_total`,
///   `amphora_compaction_manager_large_compactions_total`,
///   `amphora_compaction_manager_compacted_bytes_in_total` / `_out_total`,
///   `amphora_commitlog_disk_total_bytes`, `amphora_commitlog_segments`,
///   `amphora_commitlog_spare_segments`, `amphora_commitlog_reused_segments_total`,
///   `amphora_commitlog_map_fallbacks_total`,
///   `amphora_sstables_spare_data_bytes`, `amphora_sstables_spare_data_reused_total`,
///   `amphora_memtable_pool_bytes`, `amphora_memtable_chunks_fresh_total` /
///   `_reused_total` / `_prefaulted_total`,
///   `amphora_commitlog_syncs_total`, `amphora_commitlog_writes_total`,
///   `amphora_cache_row_hits_total` / `_misses_total` / `_insertions_total` /
///   `_evictions_total` / `_flush_replacements_total` / `_defrag_moves_total` /
///   `_rejections_total`, `amphora_cache_row_bytes`, `amphora_cache_row_partitions` (the
///   row cache), `amphora_cache_block_hits_total` / `_misses_total`,
///   `amphora_cache_block_entries`, `amphora_cache_block_bytes`,
///   `amphora_cache_block_capacity_bytes` (the block cache of decompressed SSTable chunks and
///   index blocks), `amphora_storage_background_errors_total`,
///   `amphora_database_sstables_per_read` (histogram of SSTables touched per read),
///   `amphora_compaction_manager_owed_total`, `amphora_storage_granted_slices_total` (core
///   time a busy shard gives an owed compaction),
///   `amphora_reactor_busy_seconds_total` (rate = the shard's utilisation);
/// - per table (`shard`, `ks`, `cf`): `amphora_column_family_live_sstable`,
///   `amphora_column_family_live_disk_space`, `amphora_column_family_memtable_bytes`,
///   `amphora_column_family_memtable_partitions`, `amphora_column_family_pending_flushes`,
///   `amphora_column_family_estimated_partitions`, `amphora_column_family_reads_total`,
///   `amphora_column_family_writes_total`, `amphora_column_family_read_latency` and
///   `amphora_column_family_write_latency` (histograms, µs).
pub fn render_storage(snaps: &[StorageSnapshot]) -> String {
    use amphora_storage::StorageMetrics as M;
    let mut out = String::with_capacity(4096 + snaps.len() * 4096);
    let family = |out: &mut String, name: &str, kind: &str, help: &str| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
    };
    let shard_families: [Family<M>; 36] = [
        (
            "amphora_database_total_reads",
            "counter",
            "Local reads served by the shard's storage.",
            |m| m.reads,
        ),
        (
            "amphora_database_total_writes",
            "counter",
            "Mutations applied to the shard's storage.",
            |m| m.writes,
        ),
        (
            "amphora_memtables_real_dirty_memory",
            "gauge",
            "Bytes held by memtables (active and flushing).",
            |m| m.memtable_bytes,
        ),
        (
            "amphora_memtables_partitions",
            "gauge",
            "Partitions in memtables.",
            |m| m.memtable_partitions,
        ),
        (
            "amphora_memtables_pending_flushes",
            "gauge",
            "Memtable flushes submitted and not finished.",
            |m| m.pending_flushes,
        ),
        (
            "amphora_memtables_flushes_total",
            "counter",
            "Memtables flushed to SSTables.",
            |m| m.flushes,
        ),
        (
            "amphora_memtables_flushed_bytes_total",
            "counter",
            "Memtable bytes flushed.",
            |m| m.flushed_bytes,
        ),
        ("amphora_sstables_live", "gauge", "Live SSTables.", |m| {
            m.sstable_count
        }),
        (
            "amphora_sstables_live_bytes",
            "gauge",
            "Bytes of live SSTable data files.",
            |m| m.sstable_bytes,
        ),
        (
            "amphora_sstables_corrupt",
            "gauge",
            "SSTables taken out of service as unreadable.",
            |m| m.corrupt_sstables,
        ),
        (
            "amphora_compaction_manager_pending_compactions",
            "gauge",
            "Compactions submitted and not finished.",
            |m| m.pending_compactions,
        ),
        (
            "amphora_compaction_manager_completed_compactions_total",
            "counter",
            "Compactions finished.",
            |m| m.compactions,
        ),
        (
            "amphora_compaction_manager_stopped_compactions_total",
            "counter",
            "Strategy compactions a major compaction stopped before they finished.",
            |m| m.compactions_stopped,
        ),
        (
            "amphora_compaction_manager_large_compactions_total",
            "counter",
            "Compactions run on the shard's second compaction thread (large_compaction_bytes).",
            |m| m.large_compactions,
        ),
        (
            "amphora_compaction_manager_compacted_bytes_in_total",
            "counter",
            "Bytes of SSTables compacted (inputs).",
            |m| m.compacted_bytes_in,
        ),
        (
            "amphora_compaction_manager_compacted_bytes_out_total",
            "counter",
            "Bytes of SSTables written by compaction.",
            |m| m.compacted_bytes_out,
        ),
        (
            "amphora_compaction_manager_backlog_bytes",
            "gauge",
            "Bytes compaction still has to write (the backlog controller's input).",
            |m| m.compaction_backlog_bytes,
        ),
        (
            "amphora_compaction_manager_backlog_share_permille",
            "gauge",
            "Share of the compaction thread given by the backlog controller, per mille.",
            |m| m.compaction_share_permille,
        ),
        (
            "amphora_storage_write_memory_waits_total",
            "counter",
            "Writes that waited for a flush because memtables were over budget.",
            |m| m.write_memory_waits,
        ),
        (
            "amphora_storage_read_disk_waits_total",
            "counter",
            "Reads that needed SSTable bytes outside the page cache: the shard served other requests while a helper thread read them from the disk, then ran the read again.",
            |m| m.disk_waits,
        ),
        (
            "amphora_compaction_manager_owed_total",
            "counter",
            "Times a running compaction became owed the shard's core time because requests read many SSTables each (compaction_grant_amplification) or compactions were queued behind it (compaction_grant_pending).",
            |m| m.compaction_owed_windows,
        ),
        (
            "amphora_storage_granted_slices_total",
            "counter",
            "Slices of core time a busy shard slept for its background threads (an owed compaction, or a flush with the background gate).",
            |m| m.granted_slices,
        ),
        (
            "amphora_commitlog_disk_total_bytes",
            "gauge",
            "Bytes of commitlog segments on disk.",
            |m| m.commitlog_bytes,
        ),
        (
            "amphora_commitlog_segments",
            "gauge",
            "Commitlog segments on disk.",
            |m| m.commitlog_segments,
        ),
        (
            "amphora_commitlog_spare_segments",
            "gauge",
            "Discarded commitlog segment files kept for reuse by new segments.",
            |m| m.commitlog_spare_segments,
        ),
        (
            "amphora_commitlog_reused_segments_total",
            "counter",
            "Commitlog segments that reused a discarded segment's file.",
            |m| m.commitlog_reused_segments,
        ),
        (
            "amphora_commitlog_map_fallbacks_total",
            "counter",
            "Commitlog writes that fell back from the segment's memory mapping to pwritev \
             (a reused file's page no longer in the page cache).",
            |m| m.commitlog_map_fallbacks,
        ),
        (
            "amphora_sstables_spare_data_bytes",
            "gauge",
            "Bytes of replaced flush outputs' data files kept for new flushes to write over.",
            |m| m.spare_data_bytes,
        ),
        (
            "amphora_sstables_spare_data_reused_total",
            "counter",
            "Flushes that wrote their data file over a kept (spare) one.",
            |m| m.spare_data_reused,
        ),
        (
            "amphora_memtable_pool_bytes",
            "gauge",
            "Bytes of memtable arena chunks kept from flushed memtables for the next ones.",
            |m| m.memtable_pool_bytes,
        ),
        (
            "amphora_memtable_chunks_fresh_total",
            "counter",
            "Memtable arena chunks newly allocated (memory the shard faults in).",
            |m| m.memtable_chunks_fresh,
        ),
        (
            "amphora_memtable_chunks_reused_total",
            "counter",
            "Memtable arena chunks taken from those kept from flushed memtables.",
            |m| m.memtable_chunks_reused,
        ),
        (
            "amphora_memtable_chunks_prefaulted_total",
            "counter",
            "Memtable arena chunks allocated and faulted in off the shard, ahead of its writes.",
            |m| m.memtable_chunks_prefaulted,
        ),
        (
            "amphora_commitlog_syncs_total",
            "counter",
            "fdatasyncs of commitlog segments (one per group-commit round in batch/group mode).",
            |m| m.commitlog_syncs,
        ),
        (
            "amphora_commitlog_writes_total",
            "counter",
            "Writes (pwrite calls) handing buffered commitlog entries to the OS.",
            |m| m.commitlog_writes,
        ),
        (
            "amphora_storage_background_errors_total",
            "counter",
            "Failed flushes and compactions.",
            |m| m.background_errors,
        ),
    ];
    for (name, kind, help, get) in shard_families {
        family(&mut out, name, kind, help);
        for s in snaps {
            let _ = writeln!(out, "{name}{{shard=\"{}\"}} {}", s.shard, get(&s.metrics));
        }
    }
    let row_families: [Family<amphora_storage::StorageMetrics>; 9] = [
        (
            "amphora_cache_row_hits_total",
            "counter",
            "Single-partition reads served by the row cache (no SSTable read).",
            |m| m.row_cache_hits,
        ),
        (
            "amphora_cache_row_misses_total",
            "counter",
            "Single-partition reads that read SSTables (then cached unless too large or not admitted).",
            |m| m.row_cache_misses,
        ),
        (
            "amphora_cache_row_insertions_total",
            "counter",
            "Partitions put into the row cache.",
            |m| m.row_cache_insertions,
        ),
        (
            "amphora_cache_row_evictions_total",
            "counter",
            "Partitions evicted from the row cache to make room.",
            |m| m.row_cache_evictions,
        ),
        (
            "amphora_cache_row_flush_replacements_total",
            "counter",
            "Cached partitions a flush replaced whole, its row newer than all of the entry (no merge).",
            |m| m.row_cache_flush_replacements,
        ),
        (
            "amphora_cache_row_defrag_moves_total",
            "counter",
            "Cached partitions copied out of sparsely used allocator slabs (fragmentation).",
            |m| m.row_cache_defrag_moves,
        ),
        (
            "amphora_cache_row_rejections_total",
            "counter",
            "Row cache misses not cached: the cache was full and the partition was asked for less often lately than the entry it would have evicted (TinyLFU admission).",
            |m| m.row_cache_rejections,
        ),
        (
            "amphora_cache_row_bytes",
            "gauge",
            "Bytes held by the row cache (estimated).",
            |m| m.row_cache_bytes,
        ),
        (
            "amphora_cache_row_partitions",
            "gauge",
            "Partitions held by the row cache.",
            |m| m.row_cache_partitions,
        ),
    ];
    for (name, kind, help, get) in row_families {
        family(&mut out, name, kind, help);
        for s in snaps {
            let _ = writeln!(out, "{name}{{shard=\"{}\"}} {}", s.shard, get(&s.metrics));
        }
    }
    let block_families: [Family<amphora_storage::cache::BlockCacheStats>; 5] = [
        (
            "amphora_cache_block_hits_total",
            "counter",
            "Reads of an SSTable chunk or index block served by the block cache.",
            |c| c.hits,
        ),
        (
            "amphora_cache_block_misses_total",
            "counter",
            "Reads of an SSTable chunk or index block that went to the file and filled the block cache (a row cache fill reads a chunk it does not find without caching it, and does not count it).",
            |c| c.misses,
        ),
        (
            "amphora_cache_block_entries",
            "gauge",
            "Chunks and index blocks held by the block cache.",
            |c| c.entries,
        ),
        (
            "amphora_cache_block_bytes",
            "gauge",
            "Bytes held by the block cache.",
            |c| c.bytes,
        ),
        (
            "amphora_cache_block_capacity_bytes",
            "gauge",
            "Capacity of the block cache in bytes.",
            |c| c.capacity,
        ),
    ];
    for (name, kind, help, get) in block_families {
        family(&mut out, name, kind, help);
        for s in snaps {
            let _ = writeln!(
                out,
                "{name}{{shard=\"{}\"}} {}",
                s.shard,
                get(&s.block_cache)
            );
        }
    }
    family(
        &mut out,
        "amphora_reactor_busy_seconds_total",
        "counter",
        "Time the shard's event loop spent running tasks; its rate is the shard's utilisation (0..1).",
    );
    for s in snaps {
        let _ = writeln!(
            out,
            "amphora_reactor_busy_seconds_total{{shard=\"{}\"}} {:.6}",
            s.shard,
            s.reactor_busy_ns as f64 / 1e9
        );
    }
    family(
        &mut out,
        "amphora_database_sstables_per_read",
        "histogram",
        "SSTables touched per read (le = SSTable count; the last bucket counts 15 or more).",
    );
    for s in snaps {
        let mut cumulative = 0u64;
        let per = &s.metrics.sstables_per_read;
        for (i, n) in per.iter().enumerate().take(per.len().saturating_sub(1)) {
            cumulative += n;
            let _ = writeln!(
                out,
                "amphora_database_sstables_per_read_bucket{{shard=\"{}\",le=\"{i}\"}} {cumulative}",
                s.shard
            );
        }
        let total: u64 = per.iter().sum();
        let sum: u64 = per.iter().enumerate().map(|(i, n)| i as u64 * n).sum();
        let _ = writeln!(
            out,
            "amphora_database_sstables_per_read_bucket{{shard=\"{}\",le=\"+Inf\"}} {total}",
            s.shard
        );
        let _ = writeln!(
            out,
            "amphora_database_sstables_per_read_sum{{shard=\"{}\"}} {sum}",
            s.shard
        );
        let _ = writeln!(
            out,
            "amphora_database_sstables_per_read_count{{shard=\"{}\"}} {total}",
            s.shard
        );
    }

    type T = TableSnapshot;
    let table_families: [Family<T>; 8] = [
        (
            "amphora_column_family_live_sstable",
            "gauge",
            "Live SSTables of the table.",
            |t| t.stats.sstable_count,
        ),
        (
            "amphora_column_family_live_disk_space",
            "gauge",
            "Bytes of the table's live SSTable data files.",
            |t| t.stats.sstable_bytes,
        ),
        (
            "amphora_column_family_memtable_bytes",
            "gauge",
            "Bytes in the table's active memtable.",
            |t| t.stats.memtable_bytes,
        ),
        (
            "amphora_column_family_memtable_partitions",
            "gauge",
            "Partitions in the table's active memtable.",
            |t| t.stats.memtable_partitions,
        ),
        (
            "amphora_column_family_pending_flushes",
            "gauge",
            "The table's memtables being flushed.",
            |t| t.stats.flushing_memtables,
        ),
        (
            "amphora_column_family_estimated_partitions",
            "gauge",
            "Estimated partitions (SSTables + memtable).",
            |t| t.stats.estimated_partitions,
        ),
        (
            "amphora_column_family_reads_total",
            "counter",
            "Local reads of the table.",
            |t| t.counters.reads,
        ),
        (
            "amphora_column_family_writes_total",
            "counter",
            "Local writes to the table.",
            |t| t.counters.writes,
        ),
    ];
    let labels = |s: &StorageSnapshot, t: &TableSnapshot| {
        format!(
            "shard=\"{}\",ks=\"{}\",cf=\"{}\"",
            s.shard,
            label(&t.keyspace),
            label(&t.table)
        )
    };
    for (name, kind, help, get) in table_families {
        family(&mut out, name, kind, help);
        for s in snaps {
            for t in &s.tables {
                let _ = writeln!(out, "{name}{{{}}} {}", labels(s, t), get(t));
            }
        }
    }
    let bounds = exported_latency_bounds();
    family(
        &mut out,
        "amphora_column_family_read_latency",
        "histogram",
        "Local read latency of the table, in microseconds.",
    );
    for s in snaps {
        for t in &s.tables {
            render_histogram(
                &mut out,
                "amphora_column_family_read_latency",
                &labels(s, t),
                &t.counters.read_latency,
                &bounds,
            );
        }
    }
    family(
        &mut out,
        "amphora_column_family_write_latency",
        "histogram",
        "Local write latency of the table (until durable per commitlog_sync), in microseconds.",
    );
    for s in snaps {
        for t in &s.tables {
            render_histogram(
                &mut out,
                "amphora_column_family_write_latency",
                &labels(s, t),
                &t.counters.write_latency,
                &bounds,
            );
        }
    }
    out
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
    fn renders_allocator_gauges() {
        let mut text = String::new();
        let stats = [AllocatorStat {
            name: "resident",
            help: "Resident bytes.",
            bytes: 123,
        }];
        render_allocator(&stats, &mut text);
        assert_eq!(
            text,
            "# HELP amphora_memory_allocator_resident_bytes Resident bytes.\n\
             # TYPE amphora_memory_allocator_resident_bytes gauge\n\
             amphora_memory_allocator_resident_bytes 123\n"
        );
    }

    #[test]
    fn renders_storage_families() {
        let mut t = TableSnapshot {
            keyspace: "ks".into(),
            table: "we\"ird".into(),
            ..Default::default()
        };
        t.counters.writes = 3;
        for v in [10, 20, 5000] {
            t.counters.write_latency.record(v);
        }
        let mut m = amphora_storage::StorageMetrics {
            sstable_count: 4,
            ..Default::default()
        };
        m.sstables_per_read[1] = 7;
        m.row_cache_hits = 31;
        m.row_cache_evictions = 2;
        m.row_cache_partitions = 12;
        let text = render_storage(&[StorageSnapshot {
            shard: 1,
            metrics: m,
            tables: vec![t],
            reactor_busy_ns: 1_500_000_000,
            block_cache: amphora_storage::cache::BlockCacheStats {
                hits: 90,
                misses: 10,
                entries: 3,
                bytes: 48_000,
                capacity: 1 << 20,
            },
        }]);
        assert!(text.contains("amphora_sstables_live{shard=\"1\"} 4\n"));
        assert!(text.contains("amphora_cache_block_hits_total{shard=\"1\"} 90\n"));
        assert!(text.contains("amphora_cache_row_hits_total{shard=\"1\"} 31\n"));
        assert!(text.contains("amphora_cache_row_evictions_total{shard=\"1\"} 2\n"));
        assert!(text.contains("amphora_cache_row_partitions{shard=\"1\"} 12\n"));
        assert!(text.contains("# TYPE amphora_cache_row_bytes gauge\n"));
        assert!(text.contains("amphora_cache_block_misses_total{shard=\"1\"} 10\n"));
        assert!(text.contains("amphora_cache_block_capacity_bytes{shard=\"1\"} 1048576\n"));
        assert!(text.contains("amphora_reactor_busy_seconds_total{shard=\"1\"} 1.500000\n"));
        assert!(text.contains(
            "amphora_column_family_writes_total{shard=\"1\",ks=\"ks\",cf=\"we\\\"ird\"} 3\n"
        ));
        assert!(
            text.contains("amphora_database_sstables_per_read_bucket{shard=\"1\",le=\"0\"} 0\n")
        );
        assert!(
            text.contains("amphora_database_sstables_per_read_bucket{shard=\"1\",le=\"1\"} 7\n")
        );
        let labels = "shard=\"1\",ks=\"ks\",cf=\"we\\\"ird\"";
        assert!(text.contains(&format!(
            "amphora_column_family_write_latency_bucket{{{labels},le=\"+Inf\"}} 3\n"
        )));
        assert!(text.contains(&format!(
            "amphora_column_family_write_latency_count{{{labels}}} 3\n"
        )));
        assert!(text.contains(&format!(
            "amphora_column_family_write_latency_sum{{{labels}}} 5030\n"
        )));
        // Buckets are cumulative and end at the total.
        let buckets: Vec<u64> = text
            .lines()
            .filter(|l| l.starts_with("amphora_column_family_write_latency_bucket"))
            .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
            .collect();
        assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{buckets:?}");
        assert_eq!(buckets.last(), Some(&3));
        assert!(
            buckets.contains(&2),
            "10 µs and 20 µs fall below 5000 µs: {buckets:?}"
        );
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
