//! amphora-types (skeleton; see docs/architecture.md)
