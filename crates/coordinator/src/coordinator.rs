//! The per-shard coordinator object the transport calls.

use std::rc::Rc;

use bytes::Bytes;
use tokio::sync::broadcast;

use crate::api::*;

/// One item of a BATCH request.
#[derive(Clone, Debug)]
pub enum BatchQuery {
    Text(String),
    Prepared(Bytes),
}

#[derive(Clone, Debug)]
pub struct BatchItem {
    pub query: BatchQuery,
    pub values: Vec<BoundValue>,
}

/// BATCH type byte: 0 logged, 1 unlogged, 2 counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchType {
    Logged,
    Unlogged,
    Counter,
}

/// Facts about this node the transport advertises (SUPPORTED, events).
#[derive(Clone, Debug)]
pub struct NodeInfo {
    pub host_id: [u8; 16],
    pub nr_shards: u32,
    pub ignore_msb: u32,
    pub shard_aware_port: u16,
    pub native_port: u16,
    pub listen_address: std::net::IpAddr,
    pub cluster_name: String,
}

/// The coordinator of one shard. Cheap to share within the shard (`Rc`).
pub struct Coordinator {
    pub(crate) inner: Rc<crate::exec::Inner>,
}

impl Coordinator {
    pub fn node_info(&self) -> NodeInfo {
        self.inner.node_info()
    }

    /// Subscribes to node events (schema changes …) for a REGISTERed connection.
    pub fn events(&self) -> broadcast::Receiver<NodeEvent> {
        self.inner.events()
    }

    /// QUERY: parses, plans and runs `query`.
    pub async fn query(
        &self,
        state: &ClientState,
        query: &str,
        opts: QueryOptions,
    ) -> Result<QueryResult, QueryError> {
        crate::exec::query(&self.inner, state, query, opts).await
    }

    /// PREPARE: plans `query` and caches it under its MD5 id.
    pub async fn prepare(
        &self,
        state: &ClientState,
        query: &str,
        keyspace: Option<&str>,
    ) -> Result<PreparedInfo, QueryError> {
        crate::exec::prepare(&self.inner, state, query, keyspace).await
    }

    /// EXECUTE: runs a prepared statement (Unprepared if this shard does not know `id`).
    pub async fn execute(
        &self,
        state: &ClientState,
        id: &[u8],
        opts: QueryOptions,
    ) -> Result<QueryResult, QueryError> {
        crate::exec::execute(&self.inner, state, id, opts).await
    }

    /// EXECUTE answered with no future when that needs no wait (see
    /// [`crate::exec::execute_now`]); None, with nothing done, otherwise.
    pub fn execute_now(
        &self,
        id: &[u8],
        opts: &QueryOptions,
    ) -> Option<Result<QueryResult, QueryError>> {
        crate::exec::execute_now(&self.inner, id, opts)
    }

    /// The partition an EXECUTE of prepared statement `id` with bound values
    /// `value(i)` addresses, when this shard owns it and the key is all bound markers: a
    /// prefetch hint ([`Self::prefetch`]), computed before the request runs.
    pub fn partition_hint<'a>(
        &self,
        id: &[u8],
        value: impl Fn(usize) -> Option<&'a [u8]>,
    ) -> Option<amphora_storage::PrefetchKey> {
        crate::exec::partition_hint(&self.inner, id, value)
    }

    /// Starts loading what requests for the partitions `keys` (from
    /// [`Self::partition_hint`]) will touch on this shard, so a batch of requests read
    /// at once overlaps its cache misses. A hint: nothing changes.
    pub fn prefetch(&self, keys: &[amphora_storage::PrefetchKey]) {
        crate::exec::prefetch(keys);
    }

    /// BATCH.
    pub async fn batch(
        &self,
        state: &ClientState,
        kind: BatchType,
        items: Vec<BatchItem>,
        opts: QueryOptions,
    ) -> Result<QueryResult, QueryError> {
        crate::exec::batch(&self.inner, state, kind, items, opts).await
    }
}
