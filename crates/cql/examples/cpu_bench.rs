//! CPU time per parse (from /proc/thread-self/schedstat), for a loaded machine where
//! criterion's wall-clock numbers are dominated by other processes.
//!
//! `cargo run --profile bench -p amphora-cql --example cpu_bench`

use std::hint::black_box;
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|x| x.parse().ok()))
        .unwrap_or(0)
}
fn main() {
    let qs = [
        (
            "stress_update",
            r#"UPDATE "standard1" SET "C0" = ?,"C1" = ?,"C2" = ?,"C3" = ?,"C4" = ? WHERE KEY=?"#,
        ),
        (
            "typical_select",
            "SELECT machine_id, sensor_name, time, sensor_value FROM baselines.iot WHERE machine_id = ? AND sensor_name = ? AND time >= ? LIMIT 10",
        ),
        (
            "system_select",
            "SELECT * FROM system_schema.tables WHERE keyspace_name = 'ks' AND table_name = 't'",
        ),
    ];
    for (name, q) in qs {
        for _ in 0..20000 {
            let _ = black_box(amphora_cql::parse(black_box(q)));
        }
        let n = 300_000u64;
        let (c0, w0) = (cpu_ns(), std::time::Instant::now());
        for _ in 0..n {
            let _ = black_box(amphora_cql::parse(black_box(q)));
        }
        let (c1, w1) = (cpu_ns(), w0.elapsed());
        println!(
            "{name}: {} ns/statement CPU, {} ns wall",
            (c1 - c0) / n,
            w1.as_nanos() as u64 / n
        );
    }
}
