//! Integration tests for amphora-storage (one binary, modules per topic).

mod basic;
mod cache;
mod commitlog;
mod common;
mod coverage;
mod crash;
mod fixtures;
mod maintenance;
mod model;
mod robustness;
mod rowcache;
mod rowindex;
