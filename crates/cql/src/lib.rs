//! amphora-cql (skeleton; see docs/architecture.md)
