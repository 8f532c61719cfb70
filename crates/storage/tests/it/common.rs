use std::sync::Arc;

use amphora_storage::{ReadCommand, ShardStorage, StorageConfig};
use amphora_types::CqlType;
use amphora_types::data::{
    Cell, Clustering, ColumnData, LivenessInfo, Mutation, PartitionKey, PartitionUpdate, Row,
};
use amphora_types::schema::{
    ClusteringOrder, ColumnDef, ColumnKind, TableId, TableOptions, TableSchema,
};
use bytes::Bytes;

pub fn cd(
    name: &str,
    ty: CqlType,
    kind: ColumnKind,
    position: u16,
    order: ClusteringOrder,
) -> ColumnDef {
    ColumnDef {
        name: name.into(),
        ty,
        kind,
        position,
        order,
    }
}

/// `CREATE TABLE ks.t (k blob, c int, v blob, s blob static, PRIMARY KEY (k, c))`
pub fn clustered_schema(id: u128, order: ClusteringOrder) -> Arc<TableSchema> {
    clustered_table(id, order, true)
}

/// [`clustered_schema`], with or without its static column `s`.
pub fn clustered_table(id: u128, order: ClusteringOrder, with_static: bool) -> Arc<TableSchema> {
    let blob = |name: &str, kind| cd(name, CqlType::Blob, kind, 0, ClusteringOrder::Asc);
    let mut columns = vec![
        blob("k", ColumnKind::PartitionKey),
        cd("c", CqlType::Int, ColumnKind::Clustering, 0, order),
        blob("v", ColumnKind::Regular),
    ];
    if with_static {
        columns.push(blob("s", ColumnKind::Static));
    }
    Arc::new(TableSchema::new(
        TableId(id),
        "ks",
        &format!("t{id}"),
        columns,
        TableOptions::default(),
    ))
}

/// cassandra-stress standard1: `key blob PRIMARY KEY, C0..C4 blob`.
#[allow(dead_code)]
pub fn standard1(id: u128) -> Arc<TableSchema> {
    let mut cols = vec![cd(
        "key",
        CqlType::Blob,
        ColumnKind::PartitionKey,
        0,
        ClusteringOrder::Asc,
    )];
    for i in 0..5 {
        cols.push(cd(
            &format!("C{i}"),
            CqlType::Blob,
            ColumnKind::Regular,
            0,
            ClusteringOrder::Asc,
        ));
    }
    Arc::new(TableSchema::new(
        TableId(id),
        "keyspace1",
        "standard1",
        cols,
        TableOptions::default(),
    ))
}

pub fn i(x: i32) -> Bytes {
    Bytes::copy_from_slice(&x.to_be_bytes())
}

pub fn pk(k: &str) -> PartitionKey {
    PartitionKey::new(Bytes::copy_from_slice(k.as_bytes()))
}

pub fn row_write(table: u128, k: &str, c: i32, v: &str, ts: i64) -> Mutation {
    Mutation {
        table: TableId(table),
        key: pk(k),
        update: PartitionUpdate {
            rows: vec![Row {
                clustering: Clustering(vec![i(c)]),
                marker: Some(LivenessInfo::new(ts)),
                deletion: None,
                cells: vec![(
                    2,
                    ColumnData::Simple(Cell::live(ts, Bytes::copy_from_slice(v.as_bytes()))),
                )],
            }],
            ..Default::default()
        },
    }
}

/// Applies `update` to partition `key` of table `table` and waits for its ack.
#[allow(dead_code)]
pub async fn apply_update(s: &ShardStorage, table: u128, key: &str, update: PartitionUpdate) {
    s.apply(&Mutation {
        table: TableId(table),
        key: pk(key),
        update,
    })
    .expect("apply")
    .await
    .expect("ack");
}

/// A standard1 row (`table` has [`standard1`]'s columns): key `k`, five cells of `v`
/// written at timestamp 1.
#[allow(dead_code)]
pub fn standard1_write(table: u128, k: &str, v: Bytes) -> Mutation {
    standard1_write_with(table, k, || v.clone())
}

/// [`standard1_write`] with each of the five cells' value from `cell`.
#[allow(dead_code)]
pub fn standard1_write_with(table: u128, k: &str, mut cell: impl FnMut() -> Bytes) -> Mutation {
    Mutation {
        table: TableId(table),
        key: pk(k),
        update: PartitionUpdate {
            rows: vec![Row {
                clustering: Clustering::empty(),
                marker: None,
                deletion: None,
                cells: (1..6)
                    .map(|c| (c, ColumnData::Simple(Cell::live(1, cell()))))
                    .collect(),
            }],
            ..Default::default()
        },
    }
}

pub fn config(dir: &std::path::Path) -> StorageConfig {
    let mut c = StorageConfig::new(dir, 0);
    c.auto_compaction = false;
    c
}

pub fn read_all(s: &ShardStorage, table: u128, now: i32) -> amphora_storage::ReadResult {
    s.read(&ReadCommand::new(
        TableId(table),
        amphora_storage::PartitionRange::all(),
        now,
    ))
    .expect("read")
}

pub fn values(r: &amphora_storage::ReadResult) -> Vec<(String, i32, String)> {
    let mut out = Vec::new();
    for p in &r.partitions {
        for row in &p.rows {
            let c = i32::from_be_bytes(row.clustering.0[0][..].try_into().expect("int"));
            let v = match row.cell(2) {
                Some(ColumnData::Simple(c)) => String::from_utf8_lossy(&c.value).to_string(),
                _ => String::new(),
            };
            out.push((String::from_utf8_lossy(&p.key.key).to_string(), c, v));
        }
    }
    out
}

pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}
