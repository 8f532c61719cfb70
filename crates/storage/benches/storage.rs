//! Storage benchmarks (one shard, one core): the standard1 write path through commitlog
//! (periodic) + memtable, SSTable point reads, flush and major compaction throughput.
//!
//! `cargo bench -p amphora-storage --bench storage`

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use amphora_storage::{PartitionRange, ReadCommand, ShardStorage, StorageConfig};
use amphora_types::CqlType;
use amphora_types::data::{
    Cell, Clustering, ColumnData, LivenessInfo, Mutation, PartitionKey, PartitionUpdate, Row,
};
use amphora_types::schema::{
    ClusteringOrder, ColumnDef, ColumnKind, TableId, TableOptions, TableSchema,
};
use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

fn standard1() -> Arc<TableSchema> {
    let cd = |n: &str, kind| ColumnDef {
        name: n.into(),
        ty: CqlType::Blob,
        kind,
        position: 0,
        order: ClusteringOrder::Asc,
    };
    let mut cols = vec![cd("key", ColumnKind::PartitionKey)];
    for i in 0..5 {
        cols.push(cd(&format!("C{i}"), ColumnKind::Regular));
    }
    Arc::new(TableSchema::new(
        TableId(1),
        "keyspace1",
        "standard1",
        cols,
        TableOptions::default(),
    ))
}

/// Raw bytes of one standard1 row: 10-byte key + five 34-byte values.
const RAW_ROW_BYTES: u64 = 10 + 5 * 34;

fn mutation(n: u64, ts: i64) -> Mutation {
    let key = Bytes::from(format!("{:010}", n % 10_000_000_000));
    let v: Vec<u8> = (0..34u8)
        .map(|i| i.wrapping_mul(n as u8).wrapping_add(i))
        .collect();
    let v = Bytes::from(v);
    Mutation {
        table: TableId(1),
        key: PartitionKey::new(key),
        update: PartitionUpdate {
            rows: vec![Row {
                clustering: Clustering::empty(),
                marker: Some(LivenessInfo::new(ts)),
                deletion: None,
                cells: (1..6)
                    .map(|c| (c, ColumnData::Simple(Cell::live(ts, v.clone()))))
                    .collect(),
            }],
            ..Default::default()
        },
    }
}

fn open(dir: &std::path::Path, budget: u64) -> ShardStorage {
    let mut cfg = StorageConfig::new(dir, 0);
    cfg.memtable_budget_bytes = budget;
    cfg.auto_compaction = false;
    ShardStorage::open(cfg, vec![standard1()]).expect("open").0
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
    g.throughput(Throughput::Elements(batch));
    g.bench_function("standard1_periodic_batch64", |b| {
        b.iter(|| {
            rt.block_on(async {
                let mut acks = Vec::with_capacity(batch as usize);
                for _ in 0..batch {
                    n += 1;
                    acks.push(s.apply(&mutation(n, n as i64)).expect("apply"));
                }
                for a in acks {
                    a.await.expect("ack");
                }
            })
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

fn point_reads(c: &mut Criterion) {
    let rt = rt();
    let dir = tempfile::tempdir().expect("tmp");
    let s = open(dir.path(), 1 << 30);
    let rows = 200_000u64;
    rt.block_on(async {
        for n in 0..rows {
            drop(s.apply(&mutation(n, 1)).expect("apply"));
        }
        s.flush_all().await.expect("flush");
    });
    let mut x = 12345u64;
    let mut g = c.benchmark_group("read");
    g.throughput(Throughput::Elements(1));
    g.bench_function("sstable_point_read", |b| {
        b.iter(|| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let k = PartitionKey::new(Bytes::from(format!("{:010}", x % rows)));
            let r = s
                .read(&ReadCommand::new(TableId(1), PartitionRange::Single(k), 0))
                .expect("read");
            black_box(r);
        })
    });
    g.finish();
}

fn flush_and_compaction(c: &mut Criterion) {
    let rt = rt();
    let rows = 100_000u64;
    let mut g = c.benchmark_group("background");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(rows * RAW_ROW_BYTES));
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

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(4)).warm_up_time(Duration::from_secs(1));
    targets = writes, point_reads, flush_and_compaction
}
criterion_main!(benches);
