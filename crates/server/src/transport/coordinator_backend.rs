//! The production [`Backend`]: the shard's coordinator (`amphora_coordinator::local()`).

use std::rc::Rc;

use amphora_coordinator::{
    BatchItem, BatchQuery, BatchType, ClientState, Coordinator, NodeEvent, PreparedInfo,
    QueryError, QueryOptions, QueryResult,
};
use tokio::net::TcpStream;
use tokio::sync::broadcast;

use super::backend::{Backend, BatchEntry, BatchKind, BatchQueryText, NodeFacts};
use super::{TransportConfig, serve_connection_with};

/// Serves one accepted connection on the calling shard with the shard's coordinator.
pub async fn serve_connection(stream: TcpStream, shard: u32, cfg: Rc<TransportConfig>) {
    serve_connection_with(stream, shard, cfg, local_backend()).await;
}

/// The calling shard's backend.
pub(crate) fn local_backend() -> Rc<LocalCoordinator> {
    Rc::new(LocalCoordinator(amphora_coordinator::local()))
}

/// The shard's coordinator; `None` only while the node is starting or stopping, when every
/// request answers ServerError.
pub struct LocalCoordinator(Option<Rc<Coordinator>>);

impl LocalCoordinator {
    fn get(&self) -> Result<&Coordinator, QueryError> {
        self.0.as_deref().ok_or_else(|| {
            QueryError::Server("this shard has no coordinator (node starting or stopping)".into())
        })
    }
}

impl Backend for LocalCoordinator {
    fn node_facts(&self) -> NodeFacts {
        match &self.0 {
            Some(c) => {
                let i = c.node_info();
                NodeFacts {
                    host_id: i.host_id,
                    nr_shards: i.nr_shards,
                    ignore_msb: i.ignore_msb,
                }
            }
            None => NodeFacts {
                host_id: [0; 16],
                nr_shards: amphora_rt::shards().map_or(1, |s| s.nr_shards()),
                ignore_msb: 12,
            },
        }
    }

    fn prefetch(&self, batch: &[amphora_protocol::Envelope]) {
        let Some(c) = &self.0 else {
            return;
        };
        let keys: Vec<_> = batch
            .iter()
            .filter_map(|env| {
                let e = amphora_protocol::peek_execute(env, false)?;
                c.partition_hint(e.id, |i| e.value(i))
            })
            .collect();
        if !keys.is_empty() {
            c.prefetch(&keys);
        }
    }

    fn events(&self) -> broadcast::Receiver<NodeEvent> {
        match &self.0 {
            Some(c) => c.events(),
            None => broadcast::channel(1).1,
        }
    }

    async fn query(
        &self,
        state: &ClientState,
        query: &str,
        opts: QueryOptions,
    ) -> Result<QueryResult, QueryError> {
        self.get()?.query(state, query, opts).await
    }

    async fn prepare(
        &self,
        state: &ClientState,
        query: &str,
        keyspace: Option<&str>,
    ) -> Result<PreparedInfo, QueryError> {
        self.get()?.prepare(state, query, keyspace).await
    }

    async fn execute(
        &self,
        state: &ClientState,
        id: &[u8],
        opts: QueryOptions,
    ) -> Result<QueryResult, QueryError> {
        self.get()?.execute(state, id, opts).await
    }

    fn execute_now(
        &self,
        id: &[u8],
        opts: &QueryOptions,
    ) -> Option<Result<QueryResult, QueryError>> {
        self.0.as_ref()?.execute_now(id, opts)
    }

    async fn batch(
        &self,
        state: &ClientState,
        kind: BatchKind,
        entries: Vec<BatchEntry>,
        opts: QueryOptions,
    ) -> Result<QueryResult, QueryError> {
        let kind = match kind {
            BatchKind::Logged => BatchType::Logged,
            BatchKind::Unlogged => BatchType::Unlogged,
            BatchKind::Counter => BatchType::Counter,
        };
        let items = entries
            .into_iter()
            .map(|e| BatchItem {
                query: match e.query {
                    BatchQueryText::Text(t) => BatchQuery::Text(t),
                    BatchQueryText::Prepared(id) => BatchQuery::Prepared(id),
                },
                values: e.values,
            })
            .collect();
        self.get()?.batch(state, kind, items, opts).await
    }
}
