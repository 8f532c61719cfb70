//! Typed errors of the stress tool.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum StressError {
    /// A command-line problem, reported like cassandra-stress does (then usage, exit 1).
    #[error("{0}")]
    Usage(String),
    #[error("invalid distribution '{spec}': {reason}")]
    Distribution { spec: String, reason: String },
    #[error("profile {path}: {reason}")]
    Profile { path: PathBuf, reason: String },
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("schema: {statement}: {reason}")]
    Schema { statement: String, reason: String },
    #[error("cannot connect to {nodes}: {reason}")]
    Connect { nodes: String, reason: String },
    #[error("operation {op} failed after {tries} tries: {reason}")]
    OperationFailed {
        op: String,
        tries: u32,
        reason: String,
    },
}

impl StressError {
    pub fn usage(msg: impl Into<String>) -> Self {
        Self::Usage(msg.into())
    }
}
