//! In-process caches that keep database round trips off the release path.
//!
//! - Analyst tokens: a token's secret and scope never change, but it can be revoked (on any
//!   replica) or removed from the database. An entry is trusted for [`TOKEN_TTL`] from the
//!   moment *before* the database read that produced it, so no request is admitted by a record
//!   read more than one second ago: a revocation committed at time t is seen by every replica
//!   from t + 1 s on. The cost is at most one indexed primary-key read per token per second per
//!   replica, off the release transaction (a revocation check on every request would be one
//!   round trip per request; LISTEN/NOTIFY would leave the window open whenever a replica's
//!   listener connection drops). Expiry is checked on every request against the cached
//!   `expires_at`. Only records whose secret was verified are cached; an unknown id always goes
//!   to the database.
//! - Datasets: a dataset's order, total, sensitivity and (ε, δ) target never change, and a
//!   dataset is never deleted. Only `spent` and `releases` move, and only upwards, so a cached
//!   copy is a lower bound on them: a budget check against it that refuses would also refuse
//!   against the database, and one that admits is repeated, atomically, by the commit.
//!
//! - Exhausted allocations: which (dataset, analyst token) pairs an allocation refused on this
//!   replica. Not a copy of the allocation (the admin can raise it on any replica): a release by
//!   such a pair re-reads the allocation before drawing, and is refused there if it still does
//!   not fit, so an analyst at their limit does not make the service draw samples it must throw
//!   away. Everyone else's releases read nothing more.
//!
//! All are bounded: when full, a cache is emptied rather than grown.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use uuid::Uuid;

use crate::access::TokenRecord;
use crate::ledger::{BudgetState, Dataset};

pub const TOKEN_TTL: Duration = Duration::from_secs(1);
const MAX_ENTRIES: usize = 10_000;

#[derive(Default)]
pub struct Caches {
    tokens: RwLock<HashMap<String, (Arc<TokenRecord>, Instant)>>,
    datasets: RwLock<HashMap<Uuid, Arc<Dataset>>>,
    exhausted_allocations: RwLock<HashMap<(Uuid, String), ()>>,
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

    /// Call only after the presented secret matched `record.secret_hash`; `read_at` is when the
    /// database read that returned `record` started.
    pub fn verified_token(&self, record: Arc<TokenRecord>, read_at: Instant) {
        insert(&self.tokens, record.id.clone(), (record.clone(), read_at));
    }

    /// Drop a token (revoked on this replica) at once.
    pub fn forget_token(&self, id: &str) {
        let mut map = self.tokens.write().unwrap_or_else(|e| e.into_inner());
        map.remove(id);
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

    /// Whether an allocation refused a release of `token_id` on `dataset` here, and has not been
    /// seen to admit one since.
    pub fn allocation_exhausted(&self, dataset: Uuid, token_id: &str) -> bool {
        let map = self
            .exhausted_allocations
            .read()
            .unwrap_or_else(|e| e.into_inner());
        map.contains_key(&(dataset, token_id.to_owned()))
    }

    /// Record that the allocation of `token_id` on `dataset` refused a release (`true`), or
    /// that it was seen to have room (`false`).
    pub fn set_allocation_exhausted(&self, dataset: Uuid, token_id: &str, exhausted: bool) {
        if exhausted {
            insert(
                &self.exhausted_allocations,
                (dataset, token_id.to_owned()),
                (),
            );
        } else {
            let mut map = self
                .exhausted_allocations
                .write()
                .unwrap_or_else(|e| e.into_inner());
            map.remove(&(dataset, token_id.to_owned()));
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::Role;

    fn record() -> Arc<TokenRecord> {
        Arc::new(TokenRecord {
            id: "00ff".into(),
            secret_hash: [1; 32],
            role: Role::Analyst,
            datasets: vec![],
            created_at: chrono::Utc::now(),
            expires_at: None,
            last_used_at: None,
            revoked_at: None,
        })
    }

    #[test]
    fn a_token_entry_lives_one_second_from_its_read() {
        let caches = Caches::default();
        let now = Instant::now();
        caches.verified_token(record(), now);
        assert!(caches.token("00ff").is_some());
        // Read before the TTL: refused even though it was inserted just now.
        caches.verified_token(record(), now - TOKEN_TTL);
        assert!(caches.token("00ff").is_none());
        caches.verified_token(record(), now);
        caches.forget_token("00ff");
        assert!(caches.token("00ff").is_none());
    }

    #[test]
    fn exhausted_allocations_are_per_dataset_and_token() {
        let caches = Caches::default();
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        caches.set_allocation_exhausted(a, "t1", true);
        assert!(caches.allocation_exhausted(a, "t1"));
        assert!(!caches.allocation_exhausted(a, "t2"));
        assert!(!caches.allocation_exhausted(b, "t1"));
        caches.set_allocation_exhausted(a, "t1", false);
        assert!(!caches.allocation_exhausted(a, "t1"));
    }
}
