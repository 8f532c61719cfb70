//! Storage benchmarks (one shard, one core), in the units of issue 2's targets: standard1
//! writes through commitlog (periodic) + memtable (mutations/s), point reads from the row
//! cache and from SSTables in the page cache (reads/s), flush and major compaction (MB/s of
//! raw standard1 data), memtable memory per raw byte (printed), and the memtable's
//! partition map alone (wall time per `find_or_insert`).
//!
//! Writes and point reads are timed in CPU time, not wall time: the machine is shared, and
//! run-queue waits would otherwise be counted as work. Point reads run on the shard
//! (calling) thread alone and are timed in its CPU time (`CLOCK_THREAD_CPUTIME_ID`). Writes
//! are timed in the CPU time of the whole process (`CLOCK_PROCESS_CPUTIME_ID`: the shard
//! thread, the commitlog's sync thread, the flushes they trigger and their SSTable syncs)
//! minus the calling thread's time spent building and dropping the mutations, so the figure
//! is everything the storage engine spends on a write, on whatever thread. Flat sampling:
//! 50 samples of ~80 ms. Flush and compaction are timed in wall time of the job.
//!
//! `cargo bench -p amphora-storage --bench storage`

use std::hint::black_box;
use std::time::{Duration, Instant};

use amphora_storage::memtable::Memtable;
use amphora_storage::{PartitionRange, ReadCommand, ShardStorage, StorageConfig};
use amphora_types::data::{Mutation, PartitionKey};
use amphora_types::schema::TableId;
use bytes::Bytes;
use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use rustix::time::{ClockId, clock_gettime};

#[path = "support/standard1.rs"]
mod standard1;
use standard1::{mutation, standard1, standard1_with_chunk_kb};

/// CPU time of a clock, in nanoseconds.
fn cpu_ns(clock: ClockId) -> u64 {
    let t = clock_gettime(clock);
    (t.tv_sec as u64) * 1_000_000_000 + t.tv_nsec as u64
}

/// Runs `f` and returns the calling thread's CPU time for it.
fn cpu_timed(mut f: impl FnMut()) -> Duration {
    let start = cpu_ns(ClockId::ThreadCPUTime);
    f();
    Duration::from_nanos(cpu_ns(ClockId::ThreadCPUTime).saturating_sub(start))
}

/// The process's resident memory in bytes (VmRSS of /proc/self/status; 0 if unreadable).
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|st| {
            st.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// Raw bytes of one standard1 row: 10-byte key + five 34-byte values.
const RAW_ROW_BYTES: u64 = 10 + 5 * 34;

fn open(dir: &std::path::Path, budget: u64) -> ShardStorage {
    open_with_caches(dir, budget, None, None)
}

/// `row_cache_bytes`, `block_cache_bytes`: None = the default size.
fn open_with_caches(
    dir: &std::path::Path,
    budget: u64,
    row_cache_bytes: Option<u64>,
    block_cache_bytes: Option<u64>,
) -> ShardStorage {
    open_table(dir, budget, row_cache_bytes, block_cache_bytes, standard1())
}

fn open_table(
    dir: &std::path::Path,
    budget: u64,
    row_cache_bytes: Option<u64>,
    block_cache_bytes: Option<u64>,
    table: std::sync::Arc<amphora_types::schema::TableSchema>,
) -> ShardStorage {
    let mut cfg = StorageConfig::new(dir, 0);
    cfg.memtable_budget_bytes = budget;
    cfg.auto_compaction = false;
    cfg.row_cache_bytes = row_cache_bytes;
    cfg.block_cache_bytes = block_cache_bytes;
    ShardStorage::open(cfg, vec![table]).expect("open").0
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt")
}

fn writes(c: &mut Criterion) {
    let rt = rt();
    let dir = tempfile::tempdir().expect("tmp");
    let s = open(dir.path(), 64 << 20);
    let mut n = 0u64;
    let batch = 64u64;
    let mut g = c.benchmark_group("write");
    g.sampling_mode(SamplingMode::Flat).sample_size(50);
    g.throughput(Throughput::Elements(batch));
    g.bench_function("standard1_periodic_batch64", |b| {
        // Timed: the storage engine's work on every thread (apply, commitlog and its sync
        // thread, memtable, the flushes it triggers, acks): the process's CPU time minus
        // this thread's time building and dropping the mutations (the coordinator's job,
        // timed by its own `execute/*: bind + mutation` benches).
        b.iter_custom(|iters| {
            let start = cpu_ns(ClockId::ProcessCPUTime);
            let mut building = Duration::ZERO;
            for _ in 0..iters {
                let mut muts: Vec<Mutation> = Vec::new();
                building += cpu_timed(|| {
                    muts = (0..batch)
                        .map(|_| {
                            n += 1;
                            mutation(n, n as i64)
                        })
                        .collect();
                });
                rt.block_on(async {
                    let mut acks = Vec::with_capacity(batch as usize);
                    for m in &muts {
                        acks.push(s.apply(m).expect("apply"));
                    }
                    for a in acks {
                        a.await.expect("ack");
                    }
                });
                building += cpu_timed(|| drop(std::mem::take(&mut muts)));
            }
            Duration::from_nanos(cpu_ns(ClockId::ProcessCPUTime).saturating_sub(start))
                .saturating_sub(building)
        })
    });
    g.finish();
    let m = s.metrics();
    eprintln!(
        "write bench: {} writes, {} flushes, memtable {} bytes for {} partitions ({:.2}x raw)",
        m.writes,
        m.flushes,
        m.memtable_bytes,
        m.memtable_partitions,
        m.memtable_bytes as f64 / (m.memtable_partitions.max(1) * RAW_ROW_BYTES) as f64
    );
}

/// A shard holding `rows` standard1 rows in one SSTable.
fn flushed_rows(
    dir: &std::path::Path,
    rows: u64,
    row_cache_bytes: Option<u64>,
    block_cache_bytes: Option<u64>,
) -> ShardStorage {
    flushed_rows_of(dir, rows, row_cache_bytes, block_cache_bytes, standard1())
}

/// A shard holding `rows` rows of `table` (standard1's columns) in one SSTable.
fn flushed_rows_of(
    dir: &std::path::Path,
    rows: u64,
    row_cache_bytes: Option<u64>,
    block_cache_bytes: Option<u64>,
    table: std::sync::Arc<amphora_types::schema::TableSchema>,
) -> ShardStorage {
    let rt = rt();
    let s = open_table(dir, 1 << 30, row_cache_bytes, block_cache_bytes, table);
    rt.block_on(async {
        for n in 0..rows {
            drop(s.apply(&mutation(n, 1)).expect("apply"));
        }
        s.flush_all().await.expect("flush");
    });
    s
}

/// Random point reads of the first `rows` keys (keys are made before the timed loop).
fn bench_point_reads(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    s: &ShardStorage,
    rows: u64,
) {
    let keys: Vec<PartitionKey> = (0..rows)
        .map(|n| PartitionKey::new(Bytes::from(format!("{n:010}"))))
        .collect();
    let mut x = 12345u64;
    g.bench_function(name, |b| {
        b.iter_custom(|iters| {
            cpu_timed(|| {
                for _ in 0..iters {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let k = keys[(x % rows) as usize].clone();
                    let r = s
                        .read(&ReadCommand::new(TableId(1), PartitionRange::Single(k), 0))
                        .expect("read");
                    black_box(r);
                }
            })
        })
    });
}

fn point_reads(c: &mut Criterion) {
    let rows = 200_000u64;
    let mut g = c.benchmark_group("read");
    g.sampling_mode(SamplingMode::Flat).sample_size(50);
    g.throughput(Throughput::Elements(1));
    {
        // Row cache off: the block cache (decompressed chunks) serves the SSTable.
        let dir = tempfile::tempdir().expect("tmp");
        let s = flushed_rows(dir.path(), rows, Some(0), None);
        bench_point_reads(&mut g, "sstable_point_read", &s, rows);
    }
    {
        // Row cache and block cache off: every read takes its chunk from the page cache
        // (pread) and decompresses and verifies it.
        let dir = tempfile::tempdir().expect("tmp");
        let s = flushed_rows(dir.path(), rows, Some(0), Some(0));
        bench_point_reads(&mut g, "sstable_point_read_page_cache", &s, rows);
    }
    {
        // The same with 4 KiB chunks (`chunk_length_in_kb: 4`; Cassandra's default is 16).
        let dir = tempfile::tempdir().expect("tmp");
        let s = flushed_rows_of(
            dir.path(),
            rows,
            Some(0),
            Some(0),
            standard1_with_chunk_kb(4),
        );
        bench_point_reads(&mut g, "sstable_point_read_page_cache_4k_chunks", &s, rows);
    }
    {
        let dir = tempfile::tempdir().expect("tmp");
        let s = flushed_rows(dir.path(), rows, None, None);
        // Warm: every key is cached.
        for n in 0..rows {
            let k = PartitionKey::new(Bytes::from(format!("{n:010}")));
            s.read(&ReadCommand::new(TableId(1), PartitionRange::Single(k), 0))
                .expect("read");
        }
        let before = s.row_cache_stats();
        bench_point_reads(&mut g, "rowcache_point_read", &s, rows);
        // 10k hot partitions (~8 MB of entries): the CPU caches hold most of them.
        bench_point_reads(&mut g, "rowcache_point_read_hot10k", &s, 10_000);
        let after = s.row_cache_stats();
        eprintln!(
            "row cache: {} partitions, {} bytes, {} hits and {} misses while measured",
            after.partitions,
            after.bytes,
            after.hits - before.hits,
            after.misses - before.misses
        );
    }
    g.finish();
}

/// Memory a memtable holds for 500k standard1 rows, per raw byte (issue 2: at most 2x):
/// the growth of the process's resident memory while they are inserted (the inputs are
/// built first; this runs before any other bench so no freed memory is reused), and the
/// memtable's own accounting (`size_bytes`, what the flush budget sees).
fn memtable_memory(_c: &mut Criterion) {
    let rows = 500_000u64;
    let muts: Vec<Mutation> = (0..rows).map(|n| mutation(n, 1)).collect();
    let schema = standard1();
    let before = rss_bytes();
    let mut mem = Memtable::new(schema);
    for m in &muts {
        mem.apply(&m.key, &m.update, None);
    }
    let grown = rss_bytes().saturating_sub(before);
    let raw = rows * RAW_ROW_BYTES;
    eprintln!(
        "memtable memory: {rows} standard1 rows ({raw} raw bytes): resident memory grew {grown} bytes = {:.2}x raw; accounted size_bytes {} = {:.2}x raw",
        grown as f64 / raw as f64,
        mem.size_bytes,
        mem.size_bytes as f64 / raw as f64
    );
    black_box(mem);
}

fn flush_and_compaction(c: &mut Criterion) {
    let rt = rt();
    let rows = 100_000u64;
    let mut g = c.benchmark_group("background");
    g.sample_size(10);
    g.throughput(Throughput::BytesDecimal(rows * RAW_ROW_BYTES));
    g.bench_function("flush_100k_standard1", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let dir = tempfile::tempdir().expect("tmp");
                let s = open(dir.path(), 1 << 30);
                rt.block_on(async {
                    for n in 0..rows {
                        drop(s.apply(&mutation(n, 1)).expect("apply"));
                    }
                    let t = Instant::now();
                    s.flush_all().await.expect("flush");
                    total += t.elapsed();
                });
            }
            total
        })
    });
    g.bench_function("major_compaction_4x25k_standard1", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let dir = tempfile::tempdir().expect("tmp");
                let s = open(dir.path(), 1 << 30);
                rt.block_on(async {
                    for part in 0..4u64 {
                        for n in 0..rows / 4 {
                            drop(s.apply(&mutation(n * 4 + part, 1)).expect("apply"));
                        }
                        s.flush_all().await.expect("flush");
                    }
                    let t = Instant::now();
                    s.compact_major(TableId(1)).await.expect("compact");
                    total += t.elapsed();
                });
            }
            total
        })
    });
    g.finish();
}

/// The memtable's partition map alone: `find_or_insert` of uniform random keys into a map
/// already holding 1M partitions (a memtable mid-way under a uniform write load: about
/// half the keys are new). Its cost is cache misses; wall time per operation.
fn partition_map(c: &mut Criterion) {
    use amphora_storage::memtable::MemPartition;
    use amphora_storage::partmap::PartitionMap;
    const UNIVERSE: u64 = 2_000_000;
    // Static key bytes: cloning and dropping a key then touches no reference count (in
    // the server the key is a fresh, cached copy).
    let all: &'static [u8] = Vec::leak(
        (0..UNIVERSE)
            .flat_map(|i| format!("{i:010}").into_bytes())
            .collect(),
    );
    let keys: Vec<PartitionKey> = all
        .chunks(10)
        .map(|k| PartitionKey::new(Bytes::from_static(k)))
        .collect();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % UNIVERSE) as usize
    };
    let mut g = c.benchmark_group("memtable");
    g.sampling_mode(SamplingMode::Flat).sample_size(10);
    g.throughput(Throughput::Elements(1));
    g.bench_function("partition_map_find_or_insert_1m", |b| {
        // Every sample times the same work, OPS operations on a fresh map of 1M (scaled to
        // the iterations asked for): a map that grew with the iterations would make the
        // samples unlike each other.
        const OPS: u64 = 300_000;
        b.iter_custom(|iters| {
            let mut m = PartitionMap::new();
            while m.len() < 1_000_000 {
                m.find_or_insert(keys[next()].clone(), || MemPartition::Single(Bytes::new()));
            }
            let ops: Vec<PartitionKey> = (0..OPS).map(|_| keys[next()].clone()).collect();
            let start = Instant::now();
            for k in ops {
                black_box(m.find_or_insert(k, || MemPartition::Single(Bytes::new())));
            }
            let took = start.elapsed();
            drop(m);
            took.mul_f64(iters as f64 / OPS as f64)
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(4)).warm_up_time(Duration::from_secs(1));
    targets = memtable_memory, partition_map, writes, point_reads, flush_and_compaction
}
criterion_main!(benches);
