//! The coordinator's contract with the transport (`server`): request options in, results
//! and typed errors out. Values stay raw bytes; nothing here knows the wire layout.

use std::sync::Arc;

use amphora_types::CqlType;
use bytes::Bytes;

/// A bound value as the client sent it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BoundValue {
    Null,
    /// Protocol v4+ "not set": leave the column unchanged.
    Unset,
    Set(Bytes),
}

/// Consistency level code as on the wire (0 ANY … 0x0A LOCAL_ONE).
pub type ConsistencyCode = u16;

/// Options of a QUERY / EXECUTE / BATCH.
#[derive(Clone, Debug, Default)]
pub struct QueryOptions {
    pub consistency: ConsistencyCode,
    pub values: Vec<BoundValue>,
    /// Names of the values (QUERY/EXECUTE flag 0x40), same length as `values`.
    pub names: Option<Vec<String>>,
    pub skip_metadata: bool,
    /// Rows per page; `None` or ≤ 0 = no paging.
    pub page_size: Option<i32>,
    pub paging_state: Option<Bytes>,
    pub serial_consistency: Option<ConsistencyCode>,
    /// Client-side default timestamp (µs).
    pub timestamp: Option<i64>,
    /// v5 per-request keyspace.
    pub keyspace: Option<String>,
    pub now_in_seconds: Option<i32>,
}

/// Per-connection state the coordinator reads and updates (USE).
#[derive(Clone, Debug, Default)]
pub struct ClientState {
    pub keyspace: Option<String>,
    pub user: Option<String>,
    pub protocol_version: u8,
}

/// A result column.
#[derive(Clone, Debug, PartialEq)]
pub struct ResultColumn {
    pub keyspace: String,
    pub table: String,
    pub name: String,
    pub ty: CqlType,
}

/// Rows and their metadata.
#[derive(Clone, Debug, Default)]
pub struct ResultRows {
    pub columns: Arc<Vec<ResultColumn>>,
    /// Row-major cells: `rows.len() == row_count * columns.len()`.
    pub cells: Vec<Option<Bytes>>,
    pub row_count: usize,
    /// Present when more pages follow.
    pub paging_state: Option<Bytes>,
    /// Answer with No_metadata (the client asked to skip it).
    pub no_metadata: bool,
}

impl ResultRows {
    /// A complete (unpaged) result of one row.
    pub fn single_row(columns: Arc<Vec<ResultColumn>>, cells: Vec<Option<Bytes>>) -> Self {
        ResultRows {
            columns,
            cells,
            row_count: 1,
            paging_state: None,
            no_metadata: false,
        }
    }

    pub fn rows(&self) -> impl Iterator<Item = &[Option<Bytes>]> {
        let width = self.columns.len().max(1);
        self.cells.chunks(width).take(self.row_count)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchemaChangeKind {
    Created,
    Updated,
    Dropped,
}

/// What a DDL statement changed; also the body of the SCHEMA_CHANGE event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SchemaChangeTarget {
    Keyspace(String),
    Table {
        keyspace: String,
        table: String,
    },
    Type {
        keyspace: String,
        name: String,
    },
    Function {
        keyspace: String,
        name: String,
        args: Vec<String>,
    },
    Aggregate {
        keyspace: String,
        name: String,
        args: Vec<String>,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemaChange {
    pub kind: SchemaChangeKind,
    pub target: SchemaChangeTarget,
}

/// Bind-variable and result metadata of a prepared statement.
#[derive(Clone, Debug)]
pub struct PreparedInfo {
    /// MD5(keyspace + query) as Cassandra computes it: stable across restarts and nodes.
    pub id: Bytes,
    pub result_metadata_id: Bytes,
    pub bind_columns: Arc<Vec<ResultColumn>>,
    /// For each partition-key column (in key order) the bind marker index that supplies it.
    pub pk_indexes: Vec<u16>,
    /// Result columns (empty for non-SELECT).
    pub result_columns: Arc<Vec<ResultColumn>>,
    /// Conditional (LWT) statement: Scylla's LWT metadata mark.
    pub is_lwt: bool,
}

#[derive(Clone, Debug)]
pub enum QueryResult {
    Void,
    Rows(ResultRows),
    SetKeyspace(String),
    SchemaChange(SchemaChange),
}

/// Events pushed to connections that REGISTERed for them.
#[derive(Clone, Debug)]
pub enum NodeEvent {
    SchemaChange(SchemaChange),
}

/// Write type reported in write timeouts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteKind {
    Simple,
    Batch,
    UnloggedBatch,
    Counter,
    BatchLog,
    Cas,
}

/// Every way a request can fail; `server` maps each variant to one CQL error code.
#[derive(Debug, thiserror::Error, Clone)]
pub enum QueryError {
    #[error("{0}")]
    Syntax(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{message}")]
    AlreadyExists {
        keyspace: String,
        table: String,
        message: String,
    },
    #[error("Prepared query with ID {} not found", hex(.id))]
    Unprepared { id: Bytes },
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Config(String),
    #[error("{0}")]
    Truncate(String),
    #[error("Cannot achieve consistency level {}", crate::consistency::name(*.consistency))]
    Unavailable {
        consistency: ConsistencyCode,
        required: i32,
        alive: i32,
    },
    #[error("Operation timed out - received only {received} responses.")]
    WriteTimeout {
        consistency: ConsistencyCode,
        received: i32,
        block_for: i32,
        write_kind: WriteKind,
    },
    #[error("Operation timed out - received only {received} responses.")]
    ReadTimeout {
        consistency: ConsistencyCode,
        received: i32,
        block_for: i32,
        data_present: bool,
    },
    /// A replica failed the read (not a timeout): CQL `ReadFailure` (0x1300).
    #[error("Operation failed - received {received} responses and {failures} failures")]
    ReadFailure {
        consistency: ConsistencyCode,
        received: i32,
        block_for: i32,
        /// Replicas that failed (each reported with reason UNKNOWN).
        failures: i32,
        data_present: bool,
    },
    #[error("{0}")]
    Overloaded(String),
    #[error("{message}")]
    WriteFailure {
        consistency: ConsistencyCode,
        received: i32,
        block_for: i32,
        write_kind: WriteKind,
        message: String,
    },
    #[error("{0}")]
    Server(String),
    /// A function failed while executing (CQL FunctionFailure).
    #[error("{message}")]
    FunctionFailure {
        keyspace: String,
        function: String,
        arg_types: Vec<String>,
        message: String,
    },
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl QueryError {
    pub fn invalid(msg: impl Into<String>) -> Self {
        QueryError::Invalid(msg.into())
    }
}
