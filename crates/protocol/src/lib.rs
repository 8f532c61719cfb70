//! amphora-protocol (skeleton; see docs/architecture.md)
