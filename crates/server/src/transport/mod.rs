//! The CQL native-protocol transport: listeners on the native and shard-aware ports, and the
//! per-connection state machine (handshake, v4 compression / v5 framing, many requests in
//! flight, backpressure, events). Written up in `docs/dev/transport.md`.
//!
//! The codec is `amphora-protocol` (sans-IO); this module owns the sockets. Requests go to
//! the shard's coordinator through the [`Backend`] trait, so the state machine can be tested
//! against a fake one.

mod backend;
mod connection;
mod convert;
mod coordinator_backend;
mod listener;

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

pub use amphora_protocol::DEFAULT_MAX_FRAME_SIZE;
pub use backend::{Backend, BatchEntry, BatchKind, BatchQueryText, NodeFacts};
pub use connection::{close_local_connections, local_connection_count, serve_connection_with};
pub use convert::{column_type, marshal_class};
pub use coordinator_backend::serve_connection;
pub use listener::{ListenersHandle, start_listeners, start_listeners_with};

/// Requests one connection may have in flight; past it the connection stops reading its
/// socket (or answers Overloaded when the client sent `THROW_ON_OVERLOAD=1`).
pub const MAX_INFLIGHT_PER_CONNECTION: usize = 1024;
/// Requests all connections of one shard may have in flight together.
pub const MAX_INFLIGHT_PER_SHARD: usize = 16 * 1024;
/// Encoded responses waiting for the socket; past it the connection stops reading requests
/// until the client reads its answers.
pub const MAX_QUEUED_RESPONSE_BYTES: usize = 8 * 1024 * 1024;
/// Bytes asked of the socket per read.
pub const READ_CHUNK_BYTES: usize = 64 * 1024;
/// How long a closing connection waits for its in-flight requests and its last writes.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// The authenticator class name clients see in AUTHENTICATE.
pub const PASSWORD_AUTHENTICATOR: &str = "org.apache.cassandra.auth.PasswordAuthenticator";

/// `authenticator` of cassandra.yaml.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Authenticator {
    /// `AllowAllAuthenticator`: STARTUP answers READY.
    #[default]
    AllowAll,
    /// `PasswordAuthenticator`: SASL PLAIN against the superuser.
    Password,
}

/// Transport settings, shared read-only by the connections of one shard.
#[derive(Debug, Clone)]
pub struct TransportConfig {
    pub listen_address: IpAddr,
    /// 9042; 0 picks a free port (see [`ListenersHandle::native_addr`]).
    pub native_port: u16,
    /// 19042; 0 picks a free port. Advertised as `SCYLLA_SHARD_AWARE_PORT`.
    pub shard_aware_port: u16,
    /// `native_transport_max_frame_size`, header included.
    pub max_frame_size: usize,
    pub authenticator: Authenticator,
    pub superuser_name: String,
    pub superuser_password: String,
    pub max_inflight_per_connection: usize,
    pub max_inflight_per_shard: usize,
}

impl Default for TransportConfig {
    fn default() -> Self {
        Self {
            listen_address: IpAddr::V4(Ipv4Addr::LOCALHOST),
            native_port: 9042,
            shard_aware_port: 19042,
            max_frame_size: DEFAULT_MAX_FRAME_SIZE,
            authenticator: Authenticator::AllowAll,
            superuser_name: "cassandra".to_string(),
            superuser_password: "cassandra".to_string(),
            max_inflight_per_connection: MAX_INFLIGHT_PER_CONNECTION,
            max_inflight_per_shard: MAX_INFLIGHT_PER_SHARD,
        }
    }
}
