//! Write-path profile: N standard1 mutations (periodic commitlog + memtable), no flush.
//! Run under `perf stat -e task-clock` to get CPU time per write on a busy machine:
//! `cargo run --release -p amphora-storage --example write_path -- 500000`

use std::sync::Arc;
use std::time::Instant;

use amphora_storage::{ShardStorage, StorageConfig};
use amphora_types::CqlType;
use amphora_types::data::{
    Cell, Clustering, ColumnData, LivenessInfo, Mutation, PartitionKey, PartitionUpdate, Row,
};
use amphora_types::schema::{
    ClusteringOrder, ColumnDef, ColumnKind, TableId, TableOptions, TableSchema,
};
use bytes::Bytes;

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(500_000);
    let cd = |name: &str, kind| ColumnDef {
        name: name.into(),
        ty: CqlType::Blob,
        kind,
        position: 0,
        order: ClusteringOrder::Asc,
    };
    let mut cols = vec![cd("key", ColumnKind::PartitionKey)];
    for i in 0..5 {
        cols.push(cd(&format!("C{i}"), ColumnKind::Regular));
    }
    let schema = Arc::new(TableSchema::new(
        TableId(1),
        "keyspace1",
        "standard1",
        cols,
        TableOptions::default(),
    ));
    let dir = std::env::temp_dir().join(format!("amphora-write-path-{}", std::process::id()));
    let mut cfg = StorageConfig::new(&dir, 0);
    cfg.memtable_budget_bytes = 1 << 40;
    cfg.commitlog_total_space_bytes = 1 << 40;
    let (s, _) = ShardStorage::open(cfg, vec![schema]).expect("open");
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("rt");
    let muts: Vec<Mutation> = (0..n)
        .map(|i| {
            let v: Vec<u8> = (0..34u8).map(|j| j.wrapping_mul(i as u8)).collect();
            let v = Bytes::from(v);
            Mutation {
                table: TableId(1),
                key: PartitionKey::new(Bytes::from(format!("{:010}", i))),
                update: PartitionUpdate {
                    rows: vec![Row {
                        clustering: Clustering::empty(),
                        marker: Some(LivenessInfo::new(i as i64)),
                        deletion: None,
                        cells: (1..6)
                            .map(|c| (c, ColumnData::Simple(Cell::live(i as i64, v.clone()))))
                            .collect(),
                    }],
                    ..Default::default()
                },
            }
        })
        .collect();
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
