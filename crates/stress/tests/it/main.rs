//! Integration tests: `amphora stress` against a real `amphora server`.
//!
//! The server binary is `$AMPHORA_BIN` or `target/debug/amphora` (build it first with
//! `cargo build -p amphora`).

mod server;
