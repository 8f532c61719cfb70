//! Whole-connection flows through the public API, as the server drives it.

mod session;
