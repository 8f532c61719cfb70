//! What the transport needs from the shard's coordinator. The production implementation is
//! in `coordinator_backend.rs`; tests use a fake.

use amphora_coordinator::{
    BoundValue, ClientState, NodeEvent, PreparedInfo, QueryError, QueryOptions, QueryResult,
};
use amphora_protocol as proto;
use bytes::Bytes;
use tokio::sync::broadcast;

/// Node facts advertised in SUPPORTED.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeFacts {
    pub host_id: [u8; 16],
    pub nr_shards: u32,
    pub ignore_msb: u32,
}

/// BATCH type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchKind {
    Logged,
    Unlogged,
    Counter,
}

/// The statement of one BATCH entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchQueryText {
    Text(String),
    Prepared(Bytes),
}

/// One BATCH entry with its values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchEntry {
    pub query: BatchQueryText,
    pub values: Vec<BoundValue>,
}

/// The shard-local request executor a connection talks to. Futures need not be `Send`:
/// they run on the shard's `LocalSet`.
#[allow(async_fn_in_trait)]
pub trait Backend: 'static {
    fn node_facts(&self) -> NodeFacts;

    /// A hint before the envelopes `batch` (read from the socket together) run: start
    /// loading what they will touch, so their cache misses overlap. Does nothing by default.
    fn prefetch(&self, batch: &[proto::Envelope]) {
        let _ = batch;
    }

    /// A new subscription to node events (for a REGISTERed connection).
    fn events(&self) -> broadcast::Receiver<NodeEvent>;

    async fn query(
        &self,
        state: &ClientState,
        query: &str,
        opts: QueryOptions,
    ) -> Result<QueryResult, QueryError>;

    async fn prepare(
        &self,
        state: &ClientState,
        query: &str,
        keyspace: Option<&str>,
    ) -> Result<PreparedInfo, QueryError>;

    async fn execute(
        &self,
        state: &ClientState,
        id: &[u8],
        opts: QueryOptions,
    ) -> Result<QueryResult, QueryError>;

    /// EXECUTE answered at once, with no future, when that needs no wait (a point read of a
    /// partition this shard owns, found without the disk); None, with nothing done, for the
    /// caller to take [`Self::execute`]. None by default.
    fn execute_now(
        &self,
        id: &[u8],
        opts: &QueryOptions,
    ) -> Option<Result<QueryResult, QueryError>> {
        let _ = (id, opts);
        None
    }

    async fn batch(
        &self,
        state: &ClientState,
        kind: BatchKind,
        entries: Vec<BatchEntry>,
        opts: QueryOptions,
    ) -> Result<QueryResult, QueryError>;
}
