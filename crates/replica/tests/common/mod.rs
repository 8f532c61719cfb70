//! Schemas shared by the replica's integration tests.

use std::sync::Arc;

use amphora_types::CqlType;
use amphora_types::schema::{
    ClusteringOrder, ColumnDef, ColumnKind, TableId, TableOptions, TableSchema,
};

/// A blob column.
pub fn column(name: &str, kind: ColumnKind) -> ColumnDef {
    ColumnDef {
        name: name.into(),
        ty: CqlType::Blob,
        kind,
        position: 0,
        order: ClusteringOrder::Asc,
    }
}

/// `ks.t (key blob PRIMARY KEY, v blob)` with id `id`.
pub fn key_value_table(id: u128) -> Arc<TableSchema> {
    Arc::new(TableSchema::new(
        TableId(id),
        "ks",
        "t",
        vec![
            column("key", ColumnKind::PartitionKey),
            column("v", ColumnKind::Regular),
        ],
        TableOptions::default(),
    ))
}
