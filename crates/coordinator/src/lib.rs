//! amphora-coordinator: turns CQL text and bound values into results.
//!
//! Owns: the per-shard prepared-statement cache, planning (AST + schema snapshot → plan),
//! execution of plans (token → replica shard, mutation building, reads, paging,
//! reconciliation), the schema (keyspaces, tables, types; DDL; persistence), the virtual
//! system tables drivers read (`system.local`, `system_schema.*` …) and DESCRIBE.
//!
//! Must never depend on: `server` or the wire protocol crate (values arrive as raw bytes in
//! [`QueryOptions`]); storage is reached only through `replica`.
//!
//! Key types: [`Coordinator`] (one per shard), [`QueryOptions`], [`QueryResult`],
//! [`QueryError`] (mapped to CQL error codes in exactly one place, in `server`).

pub mod ann;
pub mod api;
pub mod batchlog;
pub mod bignum;

pub use api::*;
pub mod consistency;
pub mod coordinator;
pub mod ddl;
pub mod describe;
pub mod exec;
pub mod functions;
pub mod guardrails;
pub mod index;
pub mod json;
pub mod lwt;
pub mod plan;
pub mod restrict;
pub mod schema;
pub mod schema_store;
pub mod select;
pub mod selector;
pub mod system;
pub mod values;
pub mod view;
pub mod write;

pub use coordinator::{BatchItem, BatchQuery, BatchType, Coordinator, NodeInfo};
pub use exec::{NodeShared, install, local, uninstall};
