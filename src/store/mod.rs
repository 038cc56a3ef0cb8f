//! Storage backends: the SQL of each dialect behind [`crate::ledger::LedgerStore`].
//! Migrations live in `migrations/postgres` and `migrations/sqlite` and are applied at start-up.

pub mod codec;
pub mod postgres;
pub mod sqlite;

use std::sync::Arc;
use std::time::Duration;

use crate::ledger::{LedgerStore, StoreError};

/// Connection settings shared by both backends.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    pub max_connections: u32,
    /// How long a request waits for a connection (or, on SQLite, for the write lock) before the
    /// store reports `Unavailable`: the service fails fast instead of hanging when the database is down.
    pub acquire_timeout: Duration,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self { max_connections: 16, acquire_timeout: Duration::from_secs(5) }
    }
}

/// Open the store named by `url` (`postgres://…`/`postgresql://…` or `sqlite://…`/`sqlite:…`),
/// creating a SQLite file if needed, and apply that backend's migrations.
pub async fn connect(url: &str, options: &StoreOptions) -> Result<Arc<dyn LedgerStore>, StoreError> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Arc::new(postgres::PgStore::connect(url, options).await?))
    } else if url.starts_with("sqlite:") {
        Ok(Arc::new(sqlite::SqliteStore::connect(url, options).await?))
    } else {
        Err(StoreError::Internal("database URL must start with postgres://, postgresql:// or sqlite:".into()))
    }
}
