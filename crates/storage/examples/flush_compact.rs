//! Flush and major-compaction throughput on standard1 rows (MB/s of raw row data).
//! `cargo run --release -p amphora-storage --example flush_compact -- 200000`

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
        .unwrap_or(200_000);
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
    let dir = std::env::temp_dir().join(format!("amphora-flush-{}", std::process::id()));
    let mut cfg = StorageConfig::new(&dir, 0);
    cfg.memtable_budget_bytes = 1 << 40;
    cfg.auto_compaction = false;
    let (s, _) = ShardStorage::open(cfg, vec![schema]).expect("open");
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("rt");
    let raw_mb = (n * 180) as f64 / 1e6;
    rt.block_on(async {
        let mut flush_secs = 0.0;
        for part in 0..4u64 {
            for i in 0..n / 4 {
                let i = i * 4 + part;
                let v = Bytes::from(
                    (0..34u8)
                        .map(|j| j.wrapping_mul(i as u8))
                        .collect::<Vec<u8>>(),
                );
                let m = Mutation {
                    table: TableId(1),
                    key: PartitionKey::new(Bytes::from(format!("{:010}", i))),
                    update: PartitionUpdate {
                        rows: vec![Row {
                            clustering: Clustering::empty(),
                            marker: Some(LivenessInfo::new(1)),
                            deletion: None,
                            cells: (1..6)
                                .map(|c| (c, ColumnData::Simple(Cell::live(1, v.clone()))))
                                .collect(),
                        }],
                        ..Default::default()
                    },
                };
                drop(s.apply(&m).expect("apply"));
            }
            let t = Instant::now();
            s.flush_all().await.expect("flush");
            flush_secs += t.elapsed().as_secs_f64();
        }
        println!(
            "flush: {raw_mb:.1} MB raw in {flush_secs:.2}s = {:.1} MB/s",
            raw_mb / flush_secs
        );
        let t = Instant::now();
        s.compact_major(TableId(1)).await.expect("compact");
        let e = t.elapsed().as_secs_f64();
        println!(
            "major compaction: {raw_mb:.1} MB raw in {e:.2}s = {:.1} MB/s",
            raw_mb / e
        );
    });
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}
