//! amphora-server: the node as a library.
//!
//! Owns: configuration (cassandra.yaml names + flags), composing the subsystems into a
//! [`node::Node`] (`start` / `shutdown` in a short readable order), the CQL transport
//! (listeners, connection state machine), the one mapping from coordinator errors to CQL
//! error codes ([`error_map`]), the metrics endpoint, and the REST admin API ([`api`],
//! docs/dev/rest-api.md).
//!
//! Must never depend on: storage internals (it reaches data only through the coordinator;
//! the admin API and `/metrics` read each shard's counters and ask it to flush, compact or
//! snapshot through `amphora_replica::local()` on that shard).
//!
//! Key types: [`node::Node`], [`config::NodeConfig`], [`transport::TransportConfig`].

pub mod api;
pub mod config;
pub mod error_map;
pub mod logging;
pub mod metrics;
pub mod node;
pub mod transport;
