//! amphora-storage: one shard's LSM storage engine.
//!
//! Owns: the commitlog ([`commitlog`]), memtables ([`memtable`]), SSTable format v1
//! ([`sstable`], [`bloom`]; docs/dev/sstable-format.md), compaction strategies and their
//! executor ([`compaction`]), maintenance rewrites ([`maintenance`]: cleanup, scrub,
//! garbagecollect, refresh), the read path ([`read`]) and its row cache ([`rowcache`]),
//! and [`ShardStorage`], which ties them together for one shard thread.
//!
//! Must never depend on: the CQL layers (`protocol`, `cql`), `server`, `coordinator`, or
//! anything that knows about other shards or nodes. Its inputs are `amphora_types`
//! mutations and read commands.
//!
//! Key types: [`ShardStorage`], [`StorageConfig`], [`ReadCommand`], [`ReadResult`],
//! [`WriteAck`], [`StorageError`].
#![deny(clippy::unwrap_used)]

pub mod alloc;
pub mod bloom;
pub mod cache;
pub mod commitlog;
pub mod compaction;
pub mod config;
pub mod error;
pub mod lz4;
pub mod maintenance;
pub mod memtable;
pub mod partmap;
mod prefetch;
pub use prefetch::PrefetchKey;
pub mod read;
pub mod rowcache;
pub mod shard;
pub mod sstable;
pub mod tools;
pub mod writeback;

pub use commitlog::{ReplayReport, WriteAck};
pub use config::{Clock, CommitFailurePolicy, DEFAULT_BACKGROUND_NICE, StorageConfig, SyncMode};
pub use error::StorageError;
pub use read::{PartitionData, PartitionRange, ReadCommand, ReadResult};
pub use shard::{RewriteInput, RewriteWork, ShardStorage, StorageMetrics, TableStats};

#[cfg(test)]
mod test_support {
    use amphora_types::CqlType;
    use amphora_types::schema::{ClusteringOrder, ColumnDef, ColumnKind};

    /// A blob column of `kind` (position 0, ascending), for test schemas.
    pub fn blob_column(name: &str, kind: ColumnKind) -> ColumnDef {
        ColumnDef {
            name: name.into(),
            ty: CqlType::Blob,
            kind,
            position: 0,
            order: ClusteringOrder::Asc,
        }
    }
}
