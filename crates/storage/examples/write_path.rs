//! Write-path profile: N standard1 mutations (periodic commitlog + memtable), no flush.
//! Prints wall time and the write loop's thread CPU time (user + system; the system part is
//! mostly the commitlog `pwrite`s and memtable page faults), which is steadier on a busy
//! machine: `cargo run --release -p amphora-storage --example write_path -- 500000`.
//! Instructions per write: `valgrind --tool=callgrind target/release/examples/write_path
//! 200000`, then `Runtime::block_on` minus `Memtable::apply` (inclusive) / 200000 is the
//! storage path outside the memtable.

use std::time::Instant;

use amphora_storage::{ShardStorage, StorageConfig};
use amphora_types::data::Mutation;

#[path = "../benches/support/standard1.rs"]
mod standard1;
use standard1::{mutation, standard1};

/// (user, system) CPU seconds of the calling thread, from `/proc/thread-self/stat`
/// (clock ticks, assumed 100 Hz); zeros if unreadable.
fn thread_cpu() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    match (f.get(11), f.get(12)) {
        (Some(u), Some(s)) => (u / 100.0, s / 100.0),
        _ => (0.0, 0.0),
    }
}

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
    let (user0, sys0) = thread_cpu();
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
    let (user1, sys1) = thread_cpu();
    let cpu = (user1 - user0) + (sys1 - sys0);
    println!(
        "thread CPU {:.2}s user + {:.2}s system: {:.0} writes/s of CPU time",
        user1 - user0,
        sys1 - sys0,
        n as f64 / cpu.max(1e-9)
    );
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
