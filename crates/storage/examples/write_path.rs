//! Write-path profile: N standard1 mutations (periodic commitlog + memtable), no flush.
//! Run under `perf stat -e task-clock` to get CPU time per write on a busy machine:
//! `cargo run --release -p amphora-storage --example write_path -- 500000`

use std::time::Instant;

use amphora_storage::{ShardStorage, StorageConfig};
use amphora_types::data::Mutation;

#[path = "../benches/support/standard1.rs"]
mod standard1;
use standard1::{mutation, standard1};

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(500_000);
    let schema = standard1();
    let dir = std::env::temp_dir().join(format!("amphora-write-path-{}", std::process::id()));
    let mut cfg = StorageConfig::new(&dir, 0);
    cfg.memtable_budget_bytes = 1 << 40;
    cfg.commitlog_total_space_bytes = 1 << 40;
    let (s, _) = ShardStorage::open(cfg, vec![schema]).expect("open");
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("rt");
    let muts: Vec<Mutation> = (0..n).map(|i| mutation(i, i as i64)).collect();
    let t = Instant::now();
    rt.block_on(async {
        for chunk in muts.chunks(64) {
            let acks: Vec<_> = chunk.iter().map(|m| s.apply(m).expect("apply")).collect();
            for a in acks {
                a.await.expect("ack");
            }
        }
    });
    let e = t.elapsed();
    let m = s.metrics();
    println!(
        "{n} writes in {:?}: {:.0} writes/s wall; memtable {} bytes = {:.2}x raw (180 B/row)",
        e,
        n as f64 / e.as_secs_f64(),
        m.memtable_bytes,
        m.memtable_bytes as f64 / (n as f64 * 180.0)
    );
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}
