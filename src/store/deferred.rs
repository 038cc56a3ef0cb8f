//! The store the HTTP layer holds from the moment the service listens: until start-up has
//! connected to the database (and applied the migrations), every operation fails with
//! `Unavailable`, which the HTTP layer answers with 503 and `Retry-After`; from then on each
//! operation goes to the connected store. The service can so listen, and answer `/healthz`,
//! while it waits for a database that is not up yet (`startup`).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::access::TokenRecord;
use crate::ledger::audit::{LogEntry, LogHead};
use crate::ledger::*;

pub struct Deferred {
    backend: &'static str,
    connected: OnceLock<Arc<dyn LedgerStore>>,
}

impl Deferred {
    /// Not connected yet, to a database of `backend` (`"postgres"` or `"sqlite"`).
    pub fn new(backend: &'static str) -> Self {
        Self {
            backend,
            connected: OnceLock::new(),
        }
    }

    /// The connected store; later calls change nothing (the first store stays).
    pub fn connect(&self, store: Arc<dyn LedgerStore>) {
        let _ = self.connected.set(store);
    }

    pub fn is_connected(&self) -> bool {
        self.connected.get().is_some()
    }

    fn store(&self) -> Result<&dyn LedgerStore, StoreError> {
        self.connected.get().map(|s| s.as_ref()).ok_or_else(|| {
            StoreError::Unavailable("start-up has not connected to the database yet".into())
        })
    }
}

#[async_trait]
impl LedgerStore for Deferred {
    fn backend(&self) -> &'static str {
        self.backend
    }

    fn commit_answer_bound(&self) -> Duration {
        // Asked only once a commit has started, which needs a connected store.
        self.connected
            .get()
            .map_or(Duration::ZERO, |s| s.commit_answer_bound())
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.store()?.ping().await
    }

    async fn create_dataset(&self, new: &NewDataset) -> Result<Dataset, StoreError> {
        self.store()?.create_dataset(new).await
    }

    async fn get_dataset(&self, id: Uuid) -> Result<Option<Dataset>, StoreError> {
        self.store()?.get_dataset(id).await
    }

    async fn list_datasets(&self, only: Option<&[Uuid]>) -> Result<Vec<Dataset>, StoreError> {
        self.store()?.list_datasets(only).await
    }

    async fn commit_release(&self, new: &NewRelease) -> Result<CommitOutcome, StoreError> {
        self.store()?.commit_release(new).await
    }

    async fn set_allocation(
        &self,
        dataset_id: Uuid,
        token_id: &str,
        total: Option<Units>,
        by: &str,
        at: DateTime<Utc>,
    ) -> Result<AllocationOutcome, StoreError> {
        self.store()?
            .set_allocation(dataset_id, token_id, total, by, at)
            .await
    }

    async fn list_allocations(
        &self,
        dataset_id: Uuid,
        token_id: Option<&str>,
    ) -> Result<Vec<Allocation>, StoreError> {
        self.store()?.list_allocations(dataset_id, token_id).await
    }

    async fn allocation_changes(
        &self,
        dataset_id: Uuid,
        token_id: Option<&str>,
    ) -> Result<Vec<AllocationChange>, StoreError> {
        self.store()?.allocation_changes(dataset_id, token_id).await
    }

    async fn find_by_idempotency_key(
        &self,
        dataset_id: Uuid,
        key: &str,
    ) -> Result<Option<(Release, [u8; 32])>, StoreError> {
        self.store()?.find_by_idempotency_key(dataset_id, key).await
    }

    async fn get_release(
        &self,
        dataset_id: Uuid,
        release_id: Uuid,
    ) -> Result<Option<Release>, StoreError> {
        self.store()?.get_release(dataset_id, release_id).await
    }

    async fn list_releases(
        &self,
        dataset_id: Uuid,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<Release>, StoreError> {
        self.store()?.list_releases(dataset_id, before, limit).await
    }

    async fn list_release_summaries(
        &self,
        dataset_id: Uuid,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<ReleaseSummary>, StoreError> {
        self.store()?
            .list_release_summaries(dataset_id, before, limit)
            .await
    }

    async fn release_sizes(
        &self,
        dataset_id: Uuid,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<(i64, i64, i64)>, StoreError> {
        self.store()?.release_sizes(dataset_id, before, limit).await
    }

    async fn create_token(&self, token: &TokenRecord) -> Result<(), StoreError> {
        self.store()?.create_token(token).await
    }

    async fn ensure_principal(&self, token: &TokenRecord) -> Result<(), StoreError> {
        self.store()?.ensure_principal(token).await
    }

    async fn find_token(&self, id: &str) -> Result<Option<TokenRecord>, StoreError> {
        self.store()?.find_token(id).await
    }

    async fn list_tokens(&self) -> Result<Vec<TokenRecord>, StoreError> {
        self.store()?.list_tokens().await
    }

    async fn revoke_token(&self, id: &str, at: DateTime<Utc>) -> Result<bool, StoreError> {
        self.store()?.revoke_token(id, at).await
    }

    async fn touch_token(&self, id: &str, at: DateTime<Utc>) -> Result<(), StoreError> {
        self.store()?.touch_token(id, at).await
    }

    async fn log_head(&self, dataset_id: Uuid) -> Result<Option<LogHead>, StoreError> {
        self.store()?.log_head(dataset_id).await
    }

    async fn log_entries(
        &self,
        dataset_id: Uuid,
        after: i64,
        upto: i64,
        limit: u32,
    ) -> Result<Vec<LogEntry>, StoreError> {
        self.store()?
            .log_entries(dataset_id, after, upto, limit)
            .await
    }

    async fn insert_secret_if_absent(&self, name: &str, value: &[u8]) -> Result<(), StoreError> {
        self.store()?.insert_secret_if_absent(name, value).await
    }

    async fn secret_or_init(&self, name: &str, init: &[u8]) -> Result<Vec<u8>, StoreError> {
        self.store()?.secret_or_init(name, init).await
    }

    async fn get_secret(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.store()?.get_secret(name).await
    }

    async fn block_spends(
        &self,
        dataset_id: Uuid,
        range: BlockRange,
    ) -> Result<Vec<BlockSpend>, StoreError> {
        self.store()?.block_spends(dataset_id, range).await
    }

    async fn most_spent_block(
        &self,
        dataset_id: Uuid,
        period: Period,
    ) -> Result<Option<BlockSpend>, StoreError> {
        self.store()?.most_spent_block(dataset_id, period).await
    }

    async fn ledger_summaries(&self) -> Result<Vec<LedgerSummary>, StoreError> {
        self.store()?.ledger_summaries().await
    }

    async fn create_population(&self, new: &NewPopulation) -> Result<Population, StoreError> {
        self.store()?.create_population(new).await
    }

    async fn get_population(&self, id: Uuid) -> Result<Option<Population>, StoreError> {
        self.store()?.get_population(id).await
    }

    async fn list_populations(&self) -> Result<Vec<Population>, StoreError> {
        self.store()?.list_populations().await
    }

    async fn set_dataset_population(
        &self,
        dataset_id: Uuid,
        population: Option<Uuid>,
    ) -> Result<Placement, StoreError> {
        self.store()?
            .set_dataset_population(dataset_id, population)
            .await
    }

    async fn set_population_parent(
        &self,
        id: Uuid,
        parent: Option<Uuid>,
    ) -> Result<Placement, StoreError> {
        self.store()?.set_population_parent(id, parent).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{sqlite::SqliteStore, StoreOptions};

    #[tokio::test]
    async fn unavailable_until_connected_then_the_connected_store() {
        let deferred = Deferred::new("sqlite");
        assert_eq!(deferred.backend(), "sqlite");
        assert!(!deferred.is_connected());
        assert!(matches!(
            deferred.ping().await,
            Err(StoreError::Unavailable(_))
        ));
        assert!(matches!(
            deferred.list_datasets(None).await,
            Err(StoreError::Unavailable(_))
        ));
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("d.db").display());
        let store = SqliteStore::connect(&url, &StoreOptions::default())
            .await
            .unwrap();
        deferred.connect(Arc::new(store));
        assert!(deferred.is_connected());
        deferred.ping().await.unwrap();
        assert!(deferred.list_datasets(None).await.unwrap().is_empty());
        assert!(deferred.commit_answer_bound() > Duration::ZERO);
    }
}
