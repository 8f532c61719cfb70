//! Table schema: columns, keys, options (with Cassandra's names and defaults).

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::cql_type::CqlType;
use crate::data::{Clustering, ClusteringBound};

/// A table's id (a UUID, big-endian in the u128).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct TableId(pub u128);

impl TableId {
    pub fn to_bytes(self) -> [u8; 16] {
        self.0.to_be_bytes()
    }
    pub fn from_bytes(b: [u8; 16]) -> Self {
        TableId(u128::from_be_bytes(b))
    }
    /// Parses the hyphenated (or plain 32-hex-digit) form.
    pub fn parse(s: &str) -> Option<Self> {
        let hex: String = s.chars().filter(|c| *c != '-').collect();
        if hex.len() != 32 {
            return None;
        }
        u128::from_str_radix(&hex, 16).ok().map(TableId)
    }
    /// The 32 hex digits without hyphens (as Cassandra uses in table directory names).
    pub fn to_simple_string(self) -> String {
        format!("{:032x}", self.0)
    }
}

impl fmt::Display for TableId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let h = self.to_simple_string();
        write!(
            f,
            "{}-{}-{}-{}-{}",
            &h[0..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..32]
        )
    }
}

impl Serialize for TableId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for TableId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        TableId::parse(&s).ok_or_else(|| serde::de::Error::custom(format!("bad table id {s:?}")))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ColumnKind {
    PartitionKey,
    Clustering,
    Regular,
    Static,
}

impl ColumnKind {
    /// The `kind` string in system_schema.columns.
    pub fn as_cql_str(self) -> &'static str {
        match self {
            ColumnKind::PartitionKey => "partition_key",
            ColumnKind::Clustering => "clustering",
            ColumnKind::Regular => "regular",
            ColumnKind::Static => "static",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum ClusteringOrder {
    #[default]
    Asc,
    Desc,
}

impl ClusteringOrder {
    /// The `clustering_order` string in system_schema.columns (`none` for non-clustering).
    pub fn as_cql_str(self) -> &'static str {
        match self {
            ClusteringOrder::Asc => "asc",
            ClusteringOrder::Desc => "desc",
        }
    }
}

/// Index of a column in `TableSchema::columns`.
pub type ColumnId = u32;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ColumnDef {
    pub name: String,
    pub ty: CqlType,
    pub kind: ColumnKind,
    /// Position within the partition or clustering key (0 for regular/static columns;
    /// system_schema.columns shows -1 for those).
    pub position: u16,
    pub order: ClusteringOrder,
}

/// Table options, named as Cassandra names them (system_schema.tables / DESCRIBE).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TableOptions {
    pub additional_write_policy: String,
    pub allow_auto_snapshot: bool,
    pub bloom_filter_fp_chance: f64,
    pub caching: BTreeMap<String, String>,
    pub cdc: bool,
    pub comment: String,
    pub compaction: BTreeMap<String, String>,
    pub compression: BTreeMap<String, String>,
    pub crc_check_chance: f64,
    pub default_time_to_live: i32,
    pub extensions: BTreeMap<String, Vec<u8>>,
    pub gc_grace_seconds: i32,
    pub incremental_backups: bool,
    pub max_index_interval: i32,
    pub memtable: String,
    pub memtable_flush_period_in_ms: i32,
    pub min_index_interval: i32,
    pub read_repair: String,
    pub speculative_retry: String,
    /// Anything else given in WITH that we keep but do not interpret.
    pub other: BTreeMap<String, String>,
}

fn map(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
    kv.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

impl Default for TableOptions {
    fn default() -> Self {
        TableOptions {
            additional_write_policy: "99p".into(),
            allow_auto_snapshot: true,
            bloom_filter_fp_chance: 0.01,
            caching: map(&[("keys", "ALL"), ("rows_per_partition", "NONE")]),
            cdc: false,
            comment: String::new(),
            compaction: map(&[
                (
                    "class",
                    "org.apache.cassandra.db.compaction.SizeTieredCompactionStrategy",
                ),
                ("max_threshold", "32"),
                ("min_threshold", "4"),
            ]),
            compression: map(&[
                ("chunk_length_in_kb", "16"),
                ("class", "org.apache.cassandra.io.compress.LZ4Compressor"),
            ]),
            crc_check_chance: 1.0,
            default_time_to_live: 0,
            extensions: BTreeMap::new(),
            gc_grace_seconds: 864000,
            incremental_backups: true,
            max_index_interval: 2048,
            memtable: "default".into(),
            memtable_flush_period_in_ms: 0,
            min_index_interval: 128,
            read_repair: "BLOCKING".into(),
            speculative_retry: "99p".into(),
            other: BTreeMap::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableSchema {
    pub id: TableId,
    pub keyspace: String,
    pub name: String,
    pub columns: Vec<ColumnDef>,
    /// Partition key columns in key order.
    pub partition_key: Vec<ColumnId>,
    /// Clustering columns in key order.
    pub clustering_key: Vec<ColumnId>,
    pub is_counter: bool,
    pub options: TableOptions,
    /// Columns removed by `ALTER TABLE … DROP`, by id, with the drop time (microseconds).
    /// Their ids stay reserved (stored cells still carry them) and they are hidden from
    /// every lookup; a column added again under the same name gets a new id, so data
    /// written before the drop never reappears (Cassandra's dropped_columns).
    #[serde(default)]
    pub dropped_columns: BTreeMap<ColumnId, i64>,
}

impl TableSchema {
    /// Builds a schema, deriving key lists from column kinds and positions.
    pub fn new(
        id: TableId,
        keyspace: &str,
        name: &str,
        columns: Vec<ColumnDef>,
        options: TableOptions,
    ) -> Self {
        let mut pk: Vec<ColumnId> = Vec::new();
        let mut ck: Vec<ColumnId> = Vec::new();
        for (i, c) in columns.iter().enumerate() {
            match c.kind {
                ColumnKind::PartitionKey => pk.push(i as ColumnId),
                ColumnKind::Clustering => ck.push(i as ColumnId),
                _ => {}
            }
        }
        pk.sort_by_key(|i| columns[*i as usize].position);
        ck.sort_by_key(|i| columns[*i as usize].position);
        let is_counter = columns.iter().any(|c| c.ty.is_counter());
        TableSchema {
            id,
            keyspace: keyspace.into(),
            name: name.into(),
            columns,
            partition_key: pk,
            clustering_key: ck,
            is_counter,
            options,
            dropped_columns: BTreeMap::new(),
        }
    }

    /// A live (not dropped) column by name.
    pub fn column(&self, name: &str) -> Option<(ColumnId, &ColumnDef)> {
        self.columns
            .iter()
            .enumerate()
            .find(|(i, c)| c.name == name && !self.is_dropped(*i as ColumnId))
            .map(|(i, c)| (i as ColumnId, c))
    }

    /// Whether column `id` was dropped.
    pub fn is_dropped(&self, id: ColumnId) -> bool {
        !self.dropped_columns.is_empty() && self.dropped_columns.contains_key(&id)
    }

    /// Live columns with their ids, in id order.
    pub fn live_columns(&self) -> impl Iterator<Item = (ColumnId, &ColumnDef)> {
        self.columns
            .iter()
            .enumerate()
            .map(|(i, c)| (i as ColumnId, c))
            .filter(|(i, _)| !self.is_dropped(*i))
    }

    pub fn column_by_id(&self, id: ColumnId) -> Option<&ColumnDef> {
        self.columns.get(id as usize)
    }

    pub fn clustering_comparator(&self) -> ClusteringComparator {
        ClusteringComparator {
            types: self
                .clustering_key
                .iter()
                .filter_map(|i| self.columns.get(*i as usize))
                .map(|c| (c.ty.clone(), c.order))
                .collect(),
        }
    }

    /// Whether the table has static columns.
    pub fn has_statics(&self) -> bool {
        self.columns.iter().any(|c| c.kind == ColumnKind::Static)
    }
}

/// Orders clustering prefixes and bounds by the table's clustering types and ASC/DESC.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ClusteringComparator {
    pub types: Vec<(CqlType, ClusteringOrder)>,
}

/// Where a bound sits relative to the clusterings that extend its prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoundSide {
    /// Before every clustering having this prefix.
    Before,
    /// After every clustering having this prefix.
    After,
}

impl ClusteringComparator {
    pub fn compare_component(&self, i: usize, a: &[u8], b: &[u8]) -> Ordering {
        match self.types.get(i) {
            Some((t, ClusteringOrder::Asc)) => t.compare(a, b),
            Some((t, ClusteringOrder::Desc)) => t.compare(a, b).reverse(),
            None => a.cmp(b),
        }
    }

    /// Compares two clustering prefixes; on a common prefix the shorter sorts first.
    pub fn compare(&self, a: &[Bytes], b: &[Bytes]) -> Ordering {
        for (i, (x, y)) in a.iter().zip(b.iter()).enumerate() {
            let c = self.compare_component(i, x, y);
            if c != Ordering::Equal {
                return c;
            }
        }
        a.len().cmp(&b.len())
    }

    /// Compares two bound positions `(prefix, side)`.
    pub fn compare_positions(
        &self,
        a: (&[Bytes], BoundSide),
        b: (&[Bytes], BoundSide),
    ) -> Ordering {
        for (i, (x, y)) in a.0.iter().zip(b.0.iter()).enumerate() {
            let c = self.compare_component(i, x, y);
            if c != Ordering::Equal {
                return c;
            }
        }
        use BoundSide::*;
        match a.0.len().cmp(&b.0.len()) {
            Ordering::Equal => match (a.1, b.1) {
                (Before, After) => Ordering::Less,
                (After, Before) => Ordering::Greater,
                _ => Ordering::Equal,
            },
            // a is a strict prefix of b.
            Ordering::Less => {
                if a.1 == Before {
                    Ordering::Less
                } else {
                    Ordering::Greater
                }
            }
            Ordering::Greater => {
                if b.1 == Before {
                    Ordering::Greater
                } else {
                    Ordering::Less
                }
            }
        }
    }

    /// Compares a full clustering with a bound position.
    #[inline]
    pub fn compare_to_position(&self, c: &[Bytes], pos: (&[Bytes], BoundSide)) -> Ordering {
        for (i, (x, y)) in c.iter().zip(pos.0.iter()).enumerate() {
            let o = self.compare_component(i, x, y);
            if o != Ordering::Equal {
                return o;
            }
        }
        if c.len() < pos.0.len() {
            // c is a strict prefix of the bound (only for partial clusterings): sorts first.
            return Ordering::Less;
        }
        match pos.1 {
            BoundSide::Before => Ordering::Greater,
            BoundSide::After => Ordering::Less,
        }
    }

    /// Whether a clustering is at or after a start bound.
    #[inline]
    pub fn after_start(&self, c: &Clustering, start: &ClusteringBound) -> bool {
        self.compare_to_position(&c.0, start.start_position()) == Ordering::Greater
    }

    /// Whether a clustering is at or before an end bound.
    #[inline]
    pub fn before_end(&self, c: &Clustering, end: &ClusteringBound) -> bool {
        self.compare_to_position(&c.0, end.end_position()) == Ordering::Less
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cd(
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

    #[test]
    fn schema_basics_and_serde() {
        let s = TableSchema::new(
            TableId(0x1234),
            "ks",
            "t",
            vec![
                cd(
                    "v",
                    CqlType::Text,
                    ColumnKind::Regular,
                    0,
                    ClusteringOrder::Asc,
                ),
                cd(
                    "c2",
                    CqlType::Int,
                    ColumnKind::Clustering,
                    1,
                    ClusteringOrder::Desc,
                ),
                cd(
                    "c1",
                    CqlType::Int,
                    ColumnKind::Clustering,
                    0,
                    ClusteringOrder::Asc,
                ),
                cd(
                    "k",
                    CqlType::Blob,
                    ColumnKind::PartitionKey,
                    0,
                    ClusteringOrder::Asc,
                ),
            ],
            TableOptions::default(),
        );
        assert_eq!(s.partition_key, vec![3]);
        assert_eq!(s.clustering_key, vec![2, 1]);
        assert_eq!(s.column("v").map(|c| c.0), Some(0));
        let js = serde_json::to_string(&s).unwrap();
        let back: TableSchema = serde_json::from_str(&js).unwrap();
        assert_eq!(back, s);
        assert_eq!(s.id.to_string(), "00000000-0000-0000-0000-000000001234");
        assert_eq!(TableId::parse(&s.id.to_string()), Some(s.id));
        let cmp = s.clustering_comparator();
        let i = |x: i32| Bytes::copy_from_slice(&x.to_be_bytes());
        assert_eq!(
            cmp.compare(&[i(1), i(5)], &[i(1), i(3)]),
            Ordering::Less,
            "desc second component"
        );
        assert_eq!(cmp.compare(&[i(1)], &[i(1), i(3)]), Ordering::Less);
        assert_eq!(cmp.compare(&[i(0), i(0)], &[i(1), i(9)]), Ordering::Less);
        let p = [i(1)];
        assert_eq!(
            cmp.compare_to_position(&[i(1), i(5)], (&p, BoundSide::Before)),
            Ordering::Greater
        );
        assert_eq!(
            cmp.compare_to_position(&[i(1), i(5)], (&p, BoundSide::After)),
            Ordering::Less
        );
        assert_eq!(
            cmp.compare_to_position(&[i(2), i(5)], (&p, BoundSide::After)),
            Ordering::Greater
        );
        assert_eq!(
            cmp.compare_positions((&[], BoundSide::Before), (&p, BoundSide::Before)),
            Ordering::Less
        );
        assert_eq!(
            cmp.compare_positions((&[], BoundSide::After), (&p, BoundSide::After)),
            Ordering::Greater
        );
    }
}
