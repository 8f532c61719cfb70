//! amphora-server integration tests: raw CQL frames over TCP against the real listeners and
//! connection state machine, with a fake coordinator (`mock`).

mod bad_input;
mod client;
mod handshake;
mod listeners;
mod metrics_endpoint;
mod mock;
mod node;
mod requests;
