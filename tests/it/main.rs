//! The integration tests: one binary (as zero-to-production and crates.io do), so the crate and
//! the shared harness in `common/` are compiled and linked once. Every module runs against real
//! servers on SQLite files and fresh PostgreSQL databases (`common::pg` finds or starts one).
//!
//! Run one module with `cargo test --test it <module>::`, e.g. `cargo test --test it api::`.

#[macro_use]
mod common;

mod api;
mod binary;
mod blocks;
mod console;
mod golden;
mod hygiene;
mod ledgerlog;
mod oidc;
mod openapi;
mod populations;
mod reliability;
mod repository;
mod security;
mod seeds;
mod sqlite_failures;
mod store_contract;
mod teams;
mod tls;
