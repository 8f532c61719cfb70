//! amphora-cql: the CQL language front end — lexer and parser producing an AST for
//! Cassandra 5.0's CQL plus ScyllaDB's `USING TIMEOUT` / `BYPASS CACHE`.
//!
//! Owns: tokens and keywords (`Lexer.g`), the grammar (`Parser.g`), the syntax tree
//! ([`ast`]) and Cassandra-style syntax error messages ([`ParseError`]).
//! Never depends on other amphora crates and does no I/O: types are written as
//! [`TypeExpr`] and names are unresolved, so the planner decides what they mean against a
//! schema snapshot.
//!
//! Key types: [`Statement`] (one variant per statement kind), [`Expr`] (terms and
//! selectors), [`Relation`] (WHERE), [`TypeExpr`], [`BindMarker`].
//!
//! ```
//! use amphora_cql::{parse_statement, Statement};
//! let st = parse_statement("SELECT * FROM system.local WHERE key = 'local'").unwrap();
//! assert!(matches!(st, Statement::Select(_)));
//! ```
#![deny(clippy::unwrap_used)]

pub mod ast;
mod display;
mod error;
mod keyword;
mod lexer;
mod parser;

pub use ast::*;
pub use display::{maybe_quote, needs_quoting, where_clause_to_string};
pub use error::{ParseError, ParseErrorKind};
pub use keyword::is_reserved_word;

/// Parses one statement (an optional trailing `;` is allowed).
pub fn parse_statement(cql: &str) -> Result<Statement, ParseError> {
    parser::parse_one(cql).map(|p| p.statement).map_err(|e| *e)
}

/// Parses one statement and returns its bind markers too (for PREPARE).
pub fn parse(cql: &str) -> Result<ParsedStatement, ParseError> {
    parser::parse_one(cql).map_err(|e| *e)
}

/// Parses a `;`-separated script (cqlsh `SOURCE`, schema files).
pub fn parse_statements(cql: &str) -> Result<Vec<Statement>, ParseError> {
    parser::parse_script(cql)
        .map(|v| v.into_iter().map(|p| p.statement).collect())
        .map_err(|e| *e)
}

/// Like [`parse_statements`], keeping each statement's bind markers.
pub fn parse_script(cql: &str) -> Result<Vec<ParsedStatement>, ParseError> {
    parser::parse_script(cql).map_err(|e| *e)
}
