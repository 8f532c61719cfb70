//! cassandra-stress `standard1` fixtures shared by the storage benches and profiling
//! examples (included with `#[path]`): the table (10-byte blob key, five blob cells) and a
//! mutation with five 34-byte values.
#![allow(dead_code)] // each includer uses a part

use std::sync::Arc;

use amphora_types::CqlType;
use amphora_types::data::{
    Cell, Clustering, ColumnData, LivenessInfo, Mutation, PartitionKey, PartitionUpdate, Row,
};
use amphora_types::schema::{
    ClusteringOrder, ColumnDef, ColumnKind, TableId, TableOptions, TableSchema,
};
use bytes::Bytes;

/// `keyspace1.standard1` as table 1, with `chunk_length_in_kb` = `kb` (LZ4).
pub fn standard1_with_chunk_kb(kb: u32) -> Arc<TableSchema> {
    let mut t = (*standard1()).clone();
    t.options
        .compression
        .insert("chunk_length_in_kb".into(), kb.to_string());
    Arc::new(t)
}

/// `keyspace1.standard1` as table 1.
pub fn standard1() -> Arc<TableSchema> {
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

/// Row `n` written at timestamp `ts`: key `n` as 10 digits, five 34-byte values.
pub fn mutation(n: u64, ts: i64) -> Mutation {
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
