//! The production [`Backend`]: the shard's coordinator.
//!
//! Until `amphora_coordinator` exports `Coordinator` and `local()`, [`NotWired`] stands in:
//! the handshake, OPTIONS and REGISTER work, every query answers ServerError.

use std::rc::Rc;

use amphora_coordinator::{
    ClientState, NodeEvent, PreparedInfo, QueryError, QueryOptions, QueryResult,
};
use tokio::net::TcpStream;
use tokio::sync::broadcast;

use super::backend::{Backend, BatchEntry, BatchKind, NodeFacts};
use super::{TransportConfig, serve_connection_with};

/// Serves one accepted connection on the calling shard with the shard's coordinator.
pub async fn serve_connection(stream: TcpStream, shard: u32, cfg: Rc<TransportConfig>) {
    serve_connection_with(stream, shard, cfg, local_backend()).await;
}

/// The calling shard's backend.
pub(crate) fn local_backend() -> Rc<NotWired> {
    Rc::new(NotWired)
}

/// Stand-in until the coordinator is wired.
pub struct NotWired;

const NOT_WIRED: &str = "the coordinator is not wired to the transport yet";

impl Backend for NotWired {
    fn node_facts(&self) -> NodeFacts {
        NodeFacts {
            host_id: [0; 16],
            nr_shards: amphora_rt::shards().map_or(1, |s| s.nr_shards()),
            ignore_msb: 12,
        }
    }

    fn events(&self) -> broadcast::Receiver<NodeEvent> {
        broadcast::channel(1).1
    }

    async fn query(
        &self,
        _: &ClientState,
        _: &str,
        _: QueryOptions,
    ) -> Result<QueryResult, QueryError> {
        Err(QueryError::Server(NOT_WIRED.into()))
    }

    async fn prepare(
        &self,
        _: &ClientState,
        _: &str,
        _: Option<&str>,
    ) -> Result<PreparedInfo, QueryError> {
        Err(QueryError::Server(NOT_WIRED.into()))
    }

    async fn execute(
        &self,
        _: &ClientState,
        _: &[u8],
        _: QueryOptions,
    ) -> Result<QueryResult, QueryError> {
        Err(QueryError::Server(NOT_WIRED.into()))
    }

    async fn batch(
        &self,
        _: &ClientState,
        _: BatchKind,
        _: Vec<BatchEntry>,
        _: QueryOptions,
    ) -> Result<QueryResult, QueryError> {
        Err(QueryError::Server(NOT_WIRED.into()))
    }
}
