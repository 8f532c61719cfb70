//! Flush and major compaction of standard1 rows, once each, for profiling
//! (`valgrind --tool=callgrind`, `perf record`) and quick before/after checks: prints the
//! wall time and the process CPU time (the shard thread is parked meanwhile, so that is
//! the background thread's) of a flush of `ROWS` rows and of a major compaction of four
//! SSTables of `ROWS / 4` interleaved rows, in MB/s of raw standard1 data.
//!
//! `cargo run --profile bench -p amphora-storage --example flush_compact [ROWS] [flush|compact]`

use std::time::{Duration, Instant};

use amphora_storage::{ShardStorage, StorageConfig};
use amphora_types::schema::TableId;

const RAW_ROW_BYTES: u64 = 10 + 5 * 34;

/// Process CPU time (user + system) from /proc/self/stat, in clock ticks of 10 ms.
#[path = "../benches/support/standard1.rs"]
mod standard1;
use standard1::{mutation, standard1};

fn cpu_time() -> Duration {
    let ticks = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            let rest = s.rsplit_once(')')?.1.to_string();
            let f: Vec<&str> = rest.split_whitespace().collect();
            Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
        })
        .unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

fn open(dir: &std::path::Path) -> ShardStorage {
    let mut cfg = StorageConfig::new(dir, 0);
    cfg.memtable_budget_bytes = 1 << 30;
    cfg.auto_compaction = false;
    ShardStorage::open(cfg, vec![standard1()]).expect("open").0
}

fn report(what: &str, rows: u64, wall: Duration, cpu: Duration) {
    let mb = (rows * RAW_ROW_BYTES) as f64 / 1e6;
    println!(
        "{what}: {rows} rows, wall {:.1} ms ({:.1} MB/s), cpu {:.0} ms ({:.1} MB/s per core)",
        wall.as_secs_f64() * 1e3,
        mb / wall.as_secs_f64(),
        cpu.as_secs_f64() * 1e3,
        mb / cpu.as_secs_f64().max(1e-9),
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rows: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let which = args.next().unwrap_or_default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    if which.is_empty() || which == "flush" {
        let dir = tempfile::tempdir().expect("tmp");
        let s = open(dir.path());
        rt.block_on(async {
            for n in 0..rows {
                drop(s.apply(&mutation(n, 1)).expect("apply"));
            }
            let (t, c) = (Instant::now(), cpu_time());
            s.flush_all().await.expect("flush");
            report("flush", rows, t.elapsed(), cpu_time().saturating_sub(c));
        });
    }
    if which.is_empty() || which == "compact" {
        let dir = tempfile::tempdir().expect("tmp");
        let s = open(dir.path());
        rt.block_on(async {
            for part in 0..4u64 {
                for n in 0..rows / 4 {
                    drop(s.apply(&mutation(n * 4 + part, 1)).expect("apply"));
                }
                s.flush_all().await.expect("flush");
            }
            // Let the flushed memtables be freed before timing.
            std::thread::sleep(Duration::from_millis(200));
            let (t, c) = (Instant::now(), cpu_time());
            s.compact_major(TableId(1)).await.expect("compact");
            report(
                "major compaction",
                rows,
                t.elapsed(),
                cpu_time().saturating_sub(c),
            );
        });
    }
}
