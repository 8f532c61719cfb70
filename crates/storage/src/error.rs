//! Storage errors. Every error about a file names the file and, where known, the offset.

use std::path::PathBuf;

use amphora_types::schema::TableId;

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("corrupt file {path} at offset {offset}: {reason}")]
    Corrupt {
        path: PathBuf,
        offset: u64,
        reason: String,
    },
    #[error(
        "commitlog segment {path} is corrupt at offset {offset}: {reason} (commit_failure_policy = stop)"
    )]
    CommitlogCorrupt {
        path: PathBuf,
        offset: u64,
        reason: String,
    },
    #[error("commitlog sync failed: {0}")]
    CommitlogSync(String),
    #[error(
        "mutation of {size_bytes} bytes exceeds the maximum of {max_bytes} (half a commitlog segment)"
    )]
    MutationTooLarge { size_bytes: usize, max_bytes: usize },
    #[error("unknown table {0}")]
    UnknownTable(TableId),
    #[error("table {0} already exists")]
    TableExists(TableId),
    #[error("invalid request: {0}")]
    Invalid(String),
    #[error("storage is shut down")]
    ShutDown,
    #[error("background job failed: {0}")]
    Background(String),
    /// A strategy compaction stopped before it finished because a major compaction of
    /// the table took its place (`crate::compaction::JobControl::stop`); its inputs stay.
    #[error("compaction stopped: a major compaction of the table replaces it")]
    CompactionStopped,
    /// Writes wait while memtables exceed the shard's budget; this is returned instead when
    /// the flush that should free memory failed.
    #[error(
        "memtables hold {memtable_bytes} bytes, over the shard's budget of {budget_bytes}, and flushing failed: {cause}"
    )]
    MemtableFull {
        memtable_bytes: u64,
        budget_bytes: u64,
        cause: String,
    },
    /// A read inside [`crate::diskwait::without_waiting`] needs bytes that are not in the
    /// page cache: run the wait ([`crate::diskwait::DiskWait::fault_in`]), then the read
    /// again. Never returned outside that scope.
    #[error("read would wait for the disk ({})", .0.path().display())]
    WouldBlock(Box<crate::diskwait::DiskWait>),
}

impl StorageError {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        StorageError::Io {
            path: path.into(),
            source,
        }
    }
    pub fn corrupt(path: impl Into<PathBuf>, offset: u64, reason: impl Into<String>) -> Self {
        StorageError::Corrupt {
            path: path.into(),
            offset,
            reason: reason.into(),
        }
    }
}

pub type Result<T, E = StorageError> = std::result::Result<T, E>;
