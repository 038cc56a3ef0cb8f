//! In-process caches that keep database round trips off the release path.
//!
//! - Analyst tokens: a token is never changed after creation and the service has no way to
//!   revoke one, so a verified record can be reused. Entries still expire after [`TOKEN_TTL`],
//!   so that a token removed from the database directly (or by a future revocation endpoint on
//!   another replica) stops working within that time. Only records whose secret was verified
//!   are cached; an unknown id always goes to the database.
//! - Datasets: a dataset's order, total, sensitivity and (ε, δ) target never change, and a
//!   dataset is never deleted. Only `spent` and `releases` move, and only upwards, so a cached
//!   copy is a lower bound on them: a budget check against it that refuses would also refuse
//!   against the database, and one that admits is repeated, atomically, by the commit.
//!
//! Both are bounded: when full, a cache is emptied rather than grown.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use uuid::Uuid;

use crate::ledger::{BudgetState, Dataset, TokenRecord};

pub const TOKEN_TTL: Duration = Duration::from_secs(5);
const MAX_ENTRIES: usize = 10_000;

#[derive(Default)]
pub struct Caches {
    tokens: RwLock<HashMap<String, (Arc<TokenRecord>, Instant)>>,
    datasets: RwLock<HashMap<Uuid, Arc<Dataset>>>,
}

fn insert<K: std::hash::Hash + Eq, V>(map: &RwLock<HashMap<K, V>>, key: K, value: V) {
    let mut map = map.write().unwrap_or_else(|e| e.into_inner());
    if map.len() >= MAX_ENTRIES {
        map.clear();
    }
    map.insert(key, value);
}

impl Caches {
    /// A verified token record fetched less than [`TOKEN_TTL`] ago.
    pub fn token(&self, id: &str) -> Option<Arc<TokenRecord>> {
        let map = self.tokens.read().unwrap_or_else(|e| e.into_inner());
        map.get(id)
            .filter(|(_, at)| at.elapsed() < TOKEN_TTL)
            .map(|(record, _)| record.clone())
    }

    /// Call only after the presented secret matched `record.secret_hash`.
    pub fn verified_token(&self, record: Arc<TokenRecord>) {
        insert(
            &self.tokens,
            record.id.clone(),
            (record.clone(), Instant::now()),
        );
    }

    /// The dataset as last seen: exact immutable fields, a possibly stale (low) `spent`.
    pub fn dataset(&self, id: Uuid) -> Option<Arc<Dataset>> {
        let map = self.datasets.read().unwrap_or_else(|e| e.into_inner());
        map.get(&id).cloned()
    }

    pub fn put_dataset(&self, dataset: Dataset) -> Arc<Dataset> {
        let dataset = Arc::new(dataset);
        insert(&self.datasets, dataset.id, dataset.clone());
        dataset
    }

    /// Move a cached dataset's ledger figures forward to a budget the database returned.
    /// Figures never move backwards, whatever order concurrent commits report in.
    pub fn observe_budget(&self, id: Uuid, budget: &BudgetState) {
        let mut map = self.datasets.write().unwrap_or_else(|e| e.into_inner());
        if let Some(cached) = map.get_mut(&id) {
            if budget.spent > cached.spent || budget.releases > cached.releases {
                let mut updated = Dataset::clone(cached);
                updated.spent = updated.spent.max(budget.spent);
                updated.releases = updated.releases.max(budget.releases);
                *cached = Arc::new(updated);
            }
        }
    }
}
