//! amphora-storage (skeleton; see docs/architecture.md)
