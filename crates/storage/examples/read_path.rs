//! Point-read profile: standard1 rows flushed to one SSTable, then random point reads,
//! timed in CPU time of this thread. Modes: `rowcache` (every key cached first), `sstable`
//! (row cache off), `miss` (a row cache too small to hold the keys: nearly every read
//! misses, reads the SSTable and inserts). For instruction counts per read:
//! `valgrind --tool=callgrind --toggle-collect='*run_reads*' target/release/examples/read_path rowcache 20000 200000`
//! `cargo run --release -p amphora-storage --example read_path -- rowcache 200000 2000000`

use std::hint::black_box;
use std::time::Instant;

use amphora_storage::{PartitionRange, ReadCommand, ShardStorage, StorageConfig};
use amphora_types::data::PartitionKey;
use amphora_types::schema::TableId;
use bytes::Bytes;

#[path = "../benches/support/standard1.rs"]
mod standard1;
use standard1::{mutation, standard1};

fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|st| st.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

#[inline(never)]
fn run_reads(s: &ShardStorage, keys: &[PartitionKey], reads: u64) -> usize {
    let mut x = 12345u64;
    let mut found = 0;
    for _ in 0..reads {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let k = keys[(x % keys.len() as u64) as usize].clone();
        let r = s
            .read(&ReadCommand::new(TableId(1), PartitionRange::Single(k), 0))
            .expect("read");
        found += r.partitions.len();
        black_box(r);
    }
    found
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "rowcache".into());
    let rows: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let reads: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(200_000);
    let dir = tempfile::tempdir().expect("tmp");
    let mut cfg = StorageConfig::new(dir.path(), 0);
    cfg.memtable_budget_bytes = 1 << 30;
    cfg.auto_compaction = false;
    cfg.row_cache_bytes = match mode.as_str() {
        "sstable" => Some(0),
        "miss" => Some(1 << 20),
        _ => None,
    };
    let s = ShardStorage::open(cfg, vec![standard1()]).expect("open").0;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(async {
        for n in 0..rows {
            drop(s.apply(&mutation(n, 1)).expect("apply"));
        }
        s.flush_all().await.expect("flush");
    });
    let keys: Vec<PartitionKey> = (0..rows)
        .map(|n| PartitionKey::new(Bytes::from(format!("{n:010}"))))
        .collect();
    if mode == "rowcache" {
        for k in &keys {
            s.read(&ReadCommand::new(
                TableId(1),
                PartitionRange::Single(k.clone()),
                0,
            ))
            .expect("read");
        }
    }
    let before = s.row_cache_stats();
    let (cpu, wall) = (thread_cpu_ns(), Instant::now());
    let found = run_reads(&s, &keys, reads);
    let cpu = thread_cpu_ns().saturating_sub(cpu);
    let after = s.row_cache_stats();
    assert_eq!(found as u64, reads, "every key is found");
    println!(
        "{mode}: {reads} reads of {rows} keys: {:.0} ns CPU per read ({:.0}k reads/s), wall {:?}; row cache {} hits {} misses",
        cpu as f64 / reads as f64,
        reads as f64 / (cpu as f64 / 1e9) / 1e3,
        wall.elapsed(),
        after.hits - before.hits,
        after.misses - before.misses,
    );
}
