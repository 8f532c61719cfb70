//! Batch guardrails that warn the client or refuse the batch, with Cassandra 5.0's
//! thresholds, messages and defaults (`BatchStatement.verifyBatchSize` / `verifyBatchType`):
//!
//! | cassandra.yaml key | default | past it |
//! |---|---|---|
//! | `batch_size_warn_threshold` | 5 KiB | client warning "Batch for [ks.t] is of size N, exceeding specified threshold of 5120 by M." |
//! | `batch_size_fail_threshold` | 50 KiB | Invalid "Batch too large" |
//! | `unlogged_batch_across_partitions_warn_threshold` | 10 partitions | client warning "Unlogged batch covering N partitions detected …" |
//!
//! As in Cassandra the size checks apply only to batches spanning more than one partition
//! (CASSANDRA-10876), and the size is the data size of the mutations: clustering values,
//! cell values and paths plus 16 bytes of timestamp/TTL/deletion time per cell.
//! The thresholds are node-wide settings (set once at start).

use std::collections::{BTreeSet, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};

use amphora_types::data::{ColumnData, Mutation, Row};

use crate::api::QueryError;
use crate::coordinator::BatchType;
use crate::schema::Schema;
use crate::write::Planned;

/// Cassandra's default `batch_size_warn_threshold` (5 KiB).
pub const DEFAULT_BATCH_SIZE_WARN_BYTES: u64 = 5 * 1024;
/// Cassandra's default `batch_size_fail_threshold` (50 KiB).
pub const DEFAULT_BATCH_SIZE_FAIL_BYTES: u64 = 50 * 1024;
/// Cassandra's default `unlogged_batch_across_partitions_warn_threshold`.
pub const DEFAULT_UNLOGGED_BATCH_PARTITIONS_WARN: u64 = 10;

/// Bytes per cell besides its value and path: timestamp (8), TTL (4), deletion time (4).
const CELL_OVERHEAD_BYTES: usize = 16;
/// A complex column's deletion: timestamp (8) + deletion time (4).
const COMPLEX_DELETION_BYTES: usize = 12;

static WARN_BYTES: AtomicU64 = AtomicU64::new(DEFAULT_BATCH_SIZE_WARN_BYTES);
static FAIL_BYTES: AtomicU64 = AtomicU64::new(DEFAULT_BATCH_SIZE_FAIL_BYTES);
static UNLOGGED_PARTITIONS_WARN: AtomicU64 = AtomicU64::new(DEFAULT_UNLOGGED_BATCH_PARTITIONS_WARN);

/// Sets the node's batch thresholds (bytes, bytes, partitions).
pub fn set_batch_thresholds(warn_bytes: u64, fail_bytes: u64, unlogged_partitions_warn: u64) {
    WARN_BYTES.store(warn_bytes, Ordering::Relaxed);
    FAIL_BYTES.store(fail_bytes, Ordering::Relaxed);
    UNLOGGED_PARTITIONS_WARN.store(unlogged_partitions_warn, Ordering::Relaxed);
}

/// The current (warn, fail, unlogged partitions warn) thresholds.
pub fn batch_thresholds() -> (u64, u64, u64) {
    (
        WARN_BYTES.load(Ordering::Relaxed),
        FAIL_BYTES.load(Ordering::Relaxed),
        UNLOGGED_PARTITIONS_WARN.load(Ordering::Relaxed),
    )
}

/// What a batch's writes amount to, for the checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchShape {
    /// Distinct (keyspace, partition key): Cassandra's count of mutations.
    pub mutations: usize,
    /// Distinct partition keys over all tables.
    pub partitions: usize,
    pub data_size_bytes: u64,
    /// `ks.table` names, sorted.
    pub tables: Vec<String>,
}

impl BatchShape {
    pub fn of(schema: &Schema, planned: &[Planned]) -> Self {
        let mut mutations = HashSet::new();
        let mut partitions = HashSet::new();
        let mut table_ids = HashSet::new();
        let mut size = 0usize;
        for p in planned {
            let (table, key) = match p {
                Planned::Mutation(m) => {
                    size += mutation_data_size(m);
                    (m.table, &m.key)
                }
                Planned::Counter(c) => {
                    size += c.clustering.0.iter().map(|v| v.len()).sum::<usize>()
                        + c.deltas.len() * (CELL_OVERHEAD_BYTES + 8);
                    (c.table, &c.key)
                }
            };
            let ks = schema.table_by_id(table).map(|t| t.keyspace.as_str());
            mutations.insert((ks, key.key.clone()));
            partitions.insert(key.key.clone());
            table_ids.insert(table);
        }
        let tables: BTreeSet<String> = table_ids
            .into_iter()
            .filter_map(|id| schema.table_by_id(id))
            .map(|t| format!("{}.{}", t.keyspace, t.name))
            .collect();
        BatchShape {
            mutations: mutations.len(),
            partitions: partitions.len(),
            data_size_bytes: size as u64,
            tables: tables.into_iter().collect(),
        }
    }
}

fn mutation_data_size(m: &Mutation) -> usize {
    m.update.static_row.iter().map(row_data_size).sum::<usize>()
        + m.update.rows.iter().map(row_data_size).sum::<usize>()
}

fn row_data_size(r: &Row) -> usize {
    let clustering: usize = r.clustering.0.iter().map(|v| v.len()).sum();
    let cells: usize = r
        .cells
        .iter()
        .map(|(_, d)| match d {
            ColumnData::Simple(c) => CELL_OVERHEAD_BYTES + c.value.len(),
            ColumnData::Complex { deletion, cells } => {
                deletion.map_or(0, |_| COMPLEX_DELETION_BYTES)
                    + cells
                        .iter()
                        .map(|(path, c)| CELL_OVERHEAD_BYTES + path.len() + c.value.len())
                        .sum::<usize>()
            }
        })
        .sum();
    clustering + cells
}

/// Checks a batch before it is applied: warns the client (and the log) past the warn
/// thresholds, refuses it past the fail threshold.
pub fn check_batch(
    schema: &Schema,
    kind: BatchType,
    planned: &[Planned],
) -> Result<(), QueryError> {
    if planned.len() <= 1 {
        return Ok(());
    }
    let shape = BatchShape::of(schema, planned);
    let (warn, fail, unlogged_warn) = batch_thresholds();
    for message in batch_warnings(&shape, kind, warn, unlogged_warn) {
        tracing::warn!(target: "amphora::batch", "{message}");
        amphora_trace::warn(message);
    }
    if shape.mutations > 1 && shape.data_size_bytes > fail {
        tracing::error!(
            target: "amphora::batch",
            "Batch for [{}] is of size {}, exceeding specified threshold of {} by {}. (see batch_size_fail_threshold)",
            shape.tables.join(", "),
            shape.data_size_bytes,
            fail,
            shape.data_size_bytes - fail
        );
        return Err(QueryError::invalid("Batch too large"));
    }
    Ok(())
}

/// The client warnings for a batch of `shape` (Cassandra's texts).
pub fn batch_warnings(
    shape: &BatchShape,
    kind: BatchType,
    warn_bytes: u64,
    unlogged_partitions_warn: u64,
) -> Vec<String> {
    let mut out = Vec::new();
    let tables = shape.tables.join(", ");
    if kind != BatchType::Logged
        && shape.mutations > 1
        && shape.partitions as u64 > unlogged_partitions_warn
    {
        out.push(format!(
            "Unlogged batch covering {} partitions detected against table{} [{tables}]. You should use a logged batch for atomicity, or asynchronous writes for performance.",
            shape.partitions,
            if shape.tables.len() == 1 { "" } else { "s" },
        ));
    }
    if shape.mutations > 1 && shape.data_size_bytes > warn_bytes {
        out.push(format!(
            "Batch for [{tables}] is of size {}, exceeding specified threshold of {warn_bytes} by {}.",
            shape.data_size_bytes,
            shape.data_size_bytes - warn_bytes
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(mutations: usize, partitions: usize, size: u64, tables: &[&str]) -> BatchShape {
        BatchShape {
            mutations,
            partitions,
            data_size_bytes: size,
            tables: tables.iter().map(|t| t.to_string()).collect(),
        }
    }

    #[test]
    fn size_warning_has_cassandras_text_and_needs_two_partitions() {
        let s = shape(2, 2, 6000, &["ks.t1", "ks.t2"]);
        assert_eq!(
            batch_warnings(&s, BatchType::Logged, 5120, 10),
            vec![
                "Batch for [ks.t1, ks.t2] is of size 6000, exceeding specified threshold of 5120 by 880."
                    .to_string()
            ]
        );
        // One partition: no warning however large (CASSANDRA-10876).
        assert!(
            batch_warnings(&shape(1, 1, 60_000, &["ks.t"]), BatchType::Logged, 5120, 10).is_empty()
        );
        // At the threshold: no warning; one byte past it: a warning.
        assert!(
            batch_warnings(&shape(2, 2, 5120, &["ks.t"]), BatchType::Logged, 5120, 10).is_empty()
        );
        assert_eq!(
            batch_warnings(&shape(2, 2, 5121, &["ks.t"]), BatchType::Logged, 5120, 10).len(),
            1
        );
    }

    #[test]
    fn unlogged_batches_over_many_partitions_warn() {
        let s = shape(11, 11, 100, &["ks.t"]);
        assert_eq!(
            batch_warnings(&s, BatchType::Unlogged, 5120, 10),
            vec![
                "Unlogged batch covering 11 partitions detected against table [ks.t]. You should use a logged batch for atomicity, or asynchronous writes for performance."
                    .to_string()
            ]
        );
        assert!(batch_warnings(&s, BatchType::Logged, 5120, 10).is_empty());
        let ten = shape(10, 10, 100, &["ks.a", "ks.b"]);
        assert!(batch_warnings(&ten, BatchType::Unlogged, 5120, 10).is_empty());
        let two_tables = shape(11, 11, 100, &["ks.a", "ks.b"]);
        assert!(
            batch_warnings(&two_tables, BatchType::Unlogged, 5120, 10)[0]
                .contains("against tables [ks.a, ks.b]")
        );
    }
}
