//! SQLite backend.
// SKELETON: the storage helper implements this.
use async_trait::async_trait;
use uuid::Uuid;

use super::StoreOptions;
use crate::ledger::*;

pub struct SqliteStore {
    pool: sqlx::SqlitePool,
}

impl SqliteStore {
    pub async fn connect(url: &str, options: &StoreOptions) -> Result<Self, StoreError> {
        todo!("{url} {options:?}")
    }
    pub fn pool(&self) -> &sqlx::SqlitePool {
        &self.pool
    }
}

#[async_trait]
impl LedgerStore for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }
    async fn ping(&self) -> Result<(), StoreError> {
        todo!()
    }
    async fn create_dataset(&self, new: &NewDataset) -> Result<Dataset, StoreError> {
        todo!("{new:?}")
    }
    async fn get_dataset(&self, id: Uuid) -> Result<Option<Dataset>, StoreError> {
        todo!("{id}")
    }
    async fn list_datasets(&self, only: Option<&[Uuid]>) -> Result<Vec<Dataset>, StoreError> {
        todo!("{only:?}")
    }
    async fn commit_release(&self, new: &NewRelease) -> Result<CommitOutcome, StoreError> {
        todo!("{}", new.id)
    }
    async fn find_by_idempotency_key(&self, dataset_id: Uuid, key: &str) -> Result<Option<(Release, [u8; 32])>, StoreError> {
        todo!("{dataset_id} {key}")
    }
    async fn get_release(&self, dataset_id: Uuid, release_id: Uuid) -> Result<Option<Release>, StoreError> {
        todo!("{dataset_id} {release_id}")
    }
    async fn list_releases(&self, dataset_id: Uuid, before: Option<i64>, limit: u32) -> Result<Vec<Release>, StoreError> {
        todo!("{dataset_id} {before:?} {limit}")
    }
    async fn create_token(&self, token: &TokenRecord) -> Result<(), StoreError> {
        todo!("{}", token.id)
    }
    async fn find_token(&self, id: &str) -> Result<Option<TokenRecord>, StoreError> {
        todo!("{id}")
    }
    async fn secret_or_init(&self, name: &str, init: &[u8]) -> Result<Vec<u8>, StoreError> {
        todo!("{name} {}", init.len())
    }
    async fn get_secret(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        todo!("{name}")
    }
    async fn ledger_summaries(&self) -> Result<Vec<LedgerSummary>, StoreError> {
        todo!()
    }
}
