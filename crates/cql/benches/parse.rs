//! Parser throughput on the statements the benchmarks and drivers send most.

use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;

const STRESS_UPDATE: &str =
    r#"UPDATE "standard1" SET "C0" = ?,"C1" = ?,"C2" = ?,"C3" = ?,"C4" = ? WHERE KEY=?"#;
const TYPICAL_SELECT: &str = "SELECT machine_id, sensor_name, time, sensor_value FROM baselines.iot \
     WHERE machine_id = ? AND sensor_name = ? AND time >= ? LIMIT 10";
const SYSTEM_SELECT: &str =
    "SELECT * FROM system_schema.tables WHERE keyspace_name = 'ks' AND table_name = 't'";

fn bench(c: &mut Criterion) {
    for (name, q) in [
        ("stress_update", STRESS_UPDATE),
        ("typical_select", TYPICAL_SELECT),
        ("system_select", SYSTEM_SELECT),
    ] {
        c.bench_function(name, |b| b.iter(|| amphora_cql::parse(black_box(q))));
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
