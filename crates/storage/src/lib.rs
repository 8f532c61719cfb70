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
pub mod deleter;
pub mod diskwait;
pub mod error;
mod frequency;
mod grant;
pub mod lz4;
pub mod maintenance;
pub mod memtable;
pub mod partmap;
mod prefetch;
pub use prefetch::PrefetchKey;
pub mod read;
pub mod rowcache;
pub mod rowindex;
pub mod shard;
pub mod spare;
pub mod sstable;
pub mod tools;
pub mod warm;
pub mod writeback;

pub use commitlog::{ReplayReport, WriteAck};
pub use config::{Clock, CommitFailurePolicy, DEFAULT_BACKGROUND_NICE, StorageConfig, SyncMode};
pub use error::StorageError;
pub use read::{PartitionData, PartitionRange, ReadCommand, ReadResult};
pub use shard::{RewriteInput, RewriteWork, ShardStorage, StorageMetrics, TableStats};

/// The unit tests' allocator: the system's, counting what each thread holds (requests
/// rounded to jemalloc's size classes, as the accounting assumes), so a test can compare
/// a structure's accounted bytes with what it took.
#[cfg(test)]
#[allow(unsafe_code)]
pub(crate) mod counting_alloc {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    use crate::alloc::alloc_size;

    thread_local! {
        static HELD: Cell<isize> = const { Cell::new(0) };
    }

    fn add(n: isize) {
        // During a thread's teardown the counter may be gone: that thread is not measured.
        let _ = HELD.try_with(|h| h.set(h.get() + n));
    }

    pub struct Counting;

    // SAFETY: every call goes to `System` unchanged; the counter is a thread-local `Cell`
    // that never allocates.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            add(alloc_size(layout.size()) as isize);
            // SAFETY: the caller's contract is `System`'s.
            unsafe { System.alloc(layout) }
        }
        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            add(alloc_size(layout.size()) as isize);
            // SAFETY: as above.
            unsafe { System.alloc_zeroed(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            add(-(alloc_size(layout.size()) as isize));
            // SAFETY: as above.
            unsafe { System.dealloc(ptr, layout) }
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            add(alloc_size(new_size) as isize - alloc_size(layout.size()) as isize);
            // SAFETY: as above.
            unsafe { System.realloc(ptr, layout, new_size) }
        }
    }

    #[global_allocator]
    static COUNTING: Counting = Counting;

    /// Bytes the calling thread allocated and has not freed (frees of other threads'
    /// allocations count against the freeing thread).
    pub fn held() -> isize {
        HELD.with(Cell::get)
    }
}

#[cfg(test)]
mod test_support {
    use amphora_types::CqlType;
    use amphora_types::schema::{ClusteringOrder, ColumnDef, ColumnKind, TableSchema};

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

    /// `ks.w` (id 8): blob key `k`, blob clustering `c`, static `s`, regular `v1` and `v2`
    /// (column ids 0-4), in 1 KiB chunks.
    pub fn wide_table_1k_chunks() -> TableSchema {
        use amphora_types::schema::{TableId, TableOptions};
        let cd = blob_column;
        let mut options = TableOptions::default();
        options
            .compression
            .insert("chunk_length_in_kb".into(), "1".into());
        let cols = vec![
            cd("k", ColumnKind::PartitionKey),
            cd("c", ColumnKind::Clustering),
            cd("s", ColumnKind::Static),
            cd("v1", ColumnKind::Regular),
            cd("v2", ColumnKind::Regular),
        ];
        TableSchema::new(TableId(8), "ks", "w", cols, options)
    }
}
