//! Integration tests for amphora-cql: one binary, one module per area.

mod clients;
mod ddl;
mod dml;
mod errors;
mod oracle;
mod props;
mod roundtrip;

use amphora_cql::{ParsedStatement, Statement};

/// Parses or panics with Cassandra's error text.
pub fn p(cql: &str) -> Statement {
    match amphora_cql::parse_statement(cql) {
        Ok(s) => s,
        Err(e) => panic!("failed to parse {cql:?}: {e}"),
    }
}

pub fn pm(cql: &str) -> ParsedStatement {
    match amphora_cql::parse(cql) {
        Ok(s) => s,
        Err(e) => panic!("failed to parse {cql:?}: {e}"),
    }
}

/// The error text for a statement that must not parse.
pub fn err(cql: &str) -> String {
    match amphora_cql::parse_statement(cql) {
        Ok(s) => panic!("{cql:?} parsed unexpectedly: {s:?}"),
        Err(e) => e.to_string(),
    }
}
