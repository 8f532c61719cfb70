//! amphora-types: the Cassandra data model and CQL type system, shared by every crate.
//!
//! Owns: CQL types (comparators, validation, schema type strings) in [`CqlType`];
//! Murmur3 tokens and token → shard mapping in [`token`]; table schema and options in
//! [`schema`]; mutations, rows, cells, tombstones and their reconciliation in [`data`];
//! the compact mutation encoding in [`codec`].
//!
//! Must never depend on: any I/O, runtime, or other amphora crate. Everything here is pure
//! so it can be property-tested and fuzzed alone.
//!
//! Key types: [`CqlType`], [`schema::TableSchema`], [`data::Mutation`],
//! [`data::PartitionUpdate`], [`data::Row`], [`data::Cell`].

pub mod codec;
pub mod cql_type;
pub mod data;
pub mod schema;
pub mod token;

pub use cql_type::{CqlType, TypeError, UdtDef};
