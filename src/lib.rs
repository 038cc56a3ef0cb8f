//! dirichlet-release: differentially private release of distributions.
//!
//! - [`access`]: roles, token records and token formats.
//! - [`privacy`]: pure math and sampling (no I/O, no async).
//! - [`ledger`]: budget rules and the storage trait with coarse, transactional operations.
//! - [`store`]: the SQL of each backend (PostgreSQL, SQLite).
//! - [`http`]: routes, extractors and the one API error type.
//! - [`wire`]: serde helpers of the JSON wire format (bounded number sequences, non-null options).
//! - [`schema`]: JSON Schema building blocks of the API description generated from the code.
//! - [`config`], [`telemetry`], [`startup`]: wiring; [`healthcheck`]: the container's health check.

pub mod access;
pub mod config;
pub mod healthcheck;
pub mod http;
pub mod ledger;
pub mod privacy;
pub mod release;
pub mod schema;
pub mod startup;
pub mod store;
pub mod telemetry;
pub mod wire;
