//! The privacy ledger: budget rules and the storage contract.
//!
//! Each dataset has a fixed-order RDP *filter*: one running sum at the budget order λ₀, and a
//! release is admitted only if `spent + charge ≤ total` at that order (docs/PRIVACY.md,
//! "The ledger"). Admission, the charge and the stored release are one
//! transaction inside [`LedgerStore::commit_release`]; nothing else in the service may decide
//! admission.

pub mod audit;
pub mod blocks;
pub mod charge;
pub mod names;
pub mod population;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

pub use blocks::{BlockError, BlockKey, BlockRange, Period};
pub use charge::{charge_for, Units, UnitsError};
pub use names::{
    DatasetName, Label, NameError, Names, NamesError, MAX_LABEL_CHARS, MAX_NAME_CHARS,
};
pub use population::{Children, NewPopulation, Node, NodeRefusal, Population};

use crate::access::TokenRecord;

use crate::privacy::convert::rdp_to_dp;
use crate::privacy::{Delta, Order, Sensitivity};

/// A dataset's (ε, δ) target, when it was registered with one.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DpTarget {
    pub epsilon: f64,
    pub delta: f64,
}

/// What is stored about a dataset. `total` is the RDP budget at `order`, on the ledger grid.
#[derive(Debug, Clone, PartialEq)]
pub struct Dataset {
    pub id: Uuid,
    pub name: String,
    pub order: Order,
    pub total: Units,
    pub dp_target: Option<DpTarget>,
    pub sensitivity: Sensitivity,
    /// `replace_one`, `add_remove_one` or `custom`.
    pub neighbouring: String,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
    pub spent: Units,
    pub releases: i64,
    /// Public names of the cells, when the dataset was registered with them: every release's
    /// vector (or table row) then has exactly this many cells.
    pub cells: Option<Names>,
    /// The population the dataset is in, if any (src/ledger/population.rs).
    pub population: Option<Uuid>,
    /// How the dataset is split into blocks over time, if it is (src/ledger/blocks.rs). Its own
    /// ledger then has no cap of its own (`total` is the ledger's maximum): `spent` sums every
    /// release's cost, which is what the populations above it and the release log see, and
    /// each block is held to `Blocking::cap`.
    pub blocks: Option<Blocking>,
}

/// A blocked dataset's period and the cap of each of its blocks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Blocking {
    pub period: Period,
    pub cap: Units,
}

/// One block's ledger: what the releases that read it were charged in all.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlockSpend {
    pub key: BlockKey,
    pub spent: Units,
}

impl Dataset {
    pub fn budget(&self) -> BudgetState {
        BudgetState {
            order: self.order,
            total: self.total,
            spent: self.spent,
            releases: self.releases,
            dp_target: self.dp_target,
        }
    }

    /// The ledger right after `release` was charged: the `budget` of its 201, which a replay
    /// answers again (a dataset's order, total and target never change; its `releases` then was
    /// the release's `seq`).
    pub fn budget_after(&self, release: &Release) -> BudgetState {
        BudgetState {
            spent: release.spent_after,
            releases: release.seq,
            ..self.budget()
        }
    }
}

/// A dataset's ledger at one instant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BudgetState {
    pub order: Order,
    pub total: Units,
    pub spent: Units,
    pub releases: i64,
    pub dp_target: Option<DpTarget>,
}

impl BudgetState {
    pub fn remaining(&self) -> Units {
        self.total.saturating_sub(self.spent)
    }

    /// The admission rule of the filter. The stores implement the same comparison in SQL, inside
    /// the transaction; this copy is for pre-checks (saving a sample that would be refused) and
    /// previews, never for the decision itself.
    pub fn admits(&self, charge: Units) -> bool {
        self.spent
            .checked_add(charge)
            .is_some_and(|after| after <= self.total)
    }

    /// The (ε, δ) guarantee implied by an RDP amount at this ledger's order (CKS20), when the
    /// dataset has a δ. Zero spent means zero ε.
    pub fn dp_view(&self, amount: Units) -> Option<f64> {
        let target = self.dp_target?;
        let delta = Delta::new(target.delta).ok()?;
        if amount == Units::ZERO {
            return Some(0.0);
        }
        Some(rdp_to_dp(self.order, amount.to_f64(), delta).max(0.0))
    }
}

/// A dataset about to be registered.
#[derive(Debug, Clone)]
pub struct NewDataset {
    pub id: Uuid,
    pub name: DatasetName,
    pub order: Order,
    pub total: Units,
    pub dp_target: Option<DpTarget>,
    pub sensitivity: Sensitivity,
    pub neighbouring: String,
    pub created_by: String,
    pub cells: Option<Names>,
    /// The population it joins (the caller checked that it exists and has the dataset's order;
    /// a new dataset has spent nothing, so joining charges nothing).
    pub population: Option<Uuid>,
    /// Split into blocks of this period: `total` is then the cap of each block.
    pub blocks: Option<Period>,
}

impl NewDataset {
    /// The stored `total_units`, `block_period` and `block_total_units`: a blocked dataset's
    /// own ledger has the ledger's maximum as its total, and `total` caps each block.
    pub fn stored_totals(&self) -> (i64, Option<&'static str>, Option<i64>) {
        match self.blocks {
            None => (self.total.raw(), None, None),
            Some(period) => (
                Units::MAX.raw(),
                Some(period.as_str()),
                Some(self.total.raw()),
            ),
        }
    }
}

/// The retry identity of a release request: the client's `Idempotency-Key` and a keyed hash
/// (HMAC-SHA-256 under the server's fingerprint key) of the canonical request. The hash lets a
/// retry be told from a different request without storing anything readable about the counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Idempotency {
    pub key: String,
    pub fingerprint: [u8; 32],
}

/// What a release reveals: one probability vector, or a table of them (one row per disjoint
/// group of records, all over the same cells) released under one charge.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    Vector(Vec<f64>),
    Table(Table),
}

impl Output {
    /// Every value, row after row.
    pub fn values(&self) -> &[f64] {
        match self {
            Output::Vector(v) => v,
            Output::Table(t) => &t.values,
        }
    }

    /// The number of rows of a table; `None` for a vector.
    pub fn rows(&self) -> Option<usize> {
        match self {
            Output::Vector(_) => None,
            Output::Table(t) => Some(t.rows()),
        }
    }
}

/// Rows of equal length, stored row-major in one buffer (as the stores keep them).
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    cells: usize,
    values: Vec<f64>,
}

impl Table {
    /// `None` unless there is at least one row, every row has the same length, and that
    /// length is at least 1.
    pub fn from_rows(rows: Vec<Vec<f64>>) -> Option<Table> {
        let cells = rows.first()?.len();
        if cells == 0 || rows.iter().any(|r| r.len() != cells) {
            return None;
        }
        Some(Table {
            cells,
            values: rows.into_iter().flatten().collect(),
        })
    }

    /// `values` cut into `rows` rows; `None` unless that is a whole number ≥ 1 of cells each.
    pub fn from_flat(values: Vec<f64>, rows: usize) -> Option<Table> {
        if rows == 0 || values.is_empty() || !values.len().is_multiple_of(rows) {
            return None;
        }
        Some(Table {
            cells: values.len() / rows,
            values,
        })
    }

    pub fn rows(&self) -> usize {
        self.values.len() / self.cells
    }

    pub fn cells(&self) -> usize {
        self.cells
    }

    pub fn iter_rows(&self) -> std::slice::ChunksExact<'_, f64> {
        self.values.chunks_exact(self.cells)
    }
}

/// A release about to be charged and stored. Contains the *output* only, never the counts.
#[derive(Debug, Clone)]
pub struct NewRelease {
    pub id: Uuid,
    pub dataset_id: Uuid,
    pub created_by: String,
    /// The mechanism record as returned to clients (kind, r, alpha, sigma, scale, calibration).
    pub mechanism: serde_json::Value,
    pub cost: Units,
    pub output: Output,
    pub label: Option<Label>,
    /// Public names of a table's rows, stored with the release.
    pub row_names: Option<Names>,
    pub idempotency: Option<Idempotency>,
    /// The dataset's population when the caller read it: a hint that lets PostgreSQL go
    /// straight to the transaction that charges the nodes, and queue the releases of one
    /// population for the same group. Admission never rests on it: the stores read the
    /// dataset's population under its lock.
    pub population: Option<Uuid>,
    /// The blocks it reads, on a blocked dataset (required there, refused elsewhere): charged
    /// `cost` on every one of them.
    pub blocks: Option<BlockRange>,
}

/// A stored release.
#[derive(Debug, Clone, PartialEq)]
pub struct Release {
    pub id: Uuid,
    pub dataset_id: Uuid,
    /// 1, 2, … per dataset in commit order.
    pub seq: i64,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
    pub mechanism: serde_json::Value,
    /// Charged at the dataset's order.
    pub cost: Units,
    pub output: Output,
    pub label: Option<Label>,
    pub row_names: Option<Names>,
    pub idempotency_key: Option<String>,
    /// The dataset's `spent` right after this release was charged (its own cost included).
    pub spent_after: Units,
    /// The blocks it read and was charged on, on a blocked dataset.
    pub blocks: Option<BlockRange>,
}

/// A stored release without its output and mechanism record (either can hold a value per cell):
/// what a listing with `fields=summary` returns, e.g. to draw a dataset's spend over time.
#[derive(Debug, Clone, PartialEq)]
pub struct ReleaseSummary {
    pub id: Uuid,
    pub dataset_id: Uuid,
    pub seq: i64,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
    /// Charged at the dataset's order.
    pub cost: Units,
    pub label: Option<Label>,
}

/// An analyst token's allocation on a dataset: the most its releases on that dataset may cost
/// in all, at the dataset's order, under the dataset's own budget (which still binds: the
/// allocations of a dataset may add up to more than its total). `spent` is everything the
/// token's releases on the dataset were charged, whenever the allocation was set, so lowering an
/// allocation below it blocks further releases and loses nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    pub token_id: String,
    pub total: Units,
    pub spent: Units,
}

impl Allocation {
    pub fn remaining(&self) -> Units {
        self.total.saturating_sub(self.spent)
    }

    /// The allocation's admission rule; as with [`BudgetState::admits`], the stores decide
    /// inside the commit and this copy serves pre-checks and previews.
    pub fn admits(&self, charge: Units) -> bool {
        self.spent
            .checked_add(charge)
            .is_some_and(|after| after <= self.total)
    }
}

/// One change of an allocation, for the audit trail: who set it, when, from what to what
/// (`None`: no allocation, before it was first set or after it was removed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocationChange {
    pub token_id: String,
    pub changed_at: DateTime<Utc>,
    pub changed_by: String,
    pub old: Option<Units>,
    pub new: Option<Units>,
}

/// How [`LedgerStore::set_allocation`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllocationOutcome {
    /// Set (or removed, with `new: None`) and recorded in the audit trail; `spent` is the
    /// token's spend on the dataset.
    Changed {
        old: Option<Units>,
        new: Option<Units>,
        spent: Units,
    },
    /// The token does not exist or its scope does not include the dataset; nothing changed.
    NotInScope,
}

/// How [`LedgerStore::commit_release`] ended. Only `Committed` may reveal the new output.
#[derive(Debug, Clone, PartialEq)]
pub enum CommitOutcome {
    /// Charged and stored in one transaction; `budget` is the state right after it.
    Committed {
        release: Release,
        budget: BudgetState,
    },
    /// Refused by the filter; nothing was written. `budget` is the state that refused it.
    Exhausted { budget: BudgetState },
    /// The dataset's budget admitted it but the caller's allocation did not; nothing was
    /// written.
    AllocationExhausted {
        allocation: Allocation,
        budget: BudgetState,
    },
    /// A release with this idempotency key already exists (possibly committed by a concurrent
    /// request); nothing was written. The caller compares fingerprints.
    Existing {
        release: Release,
        fingerprint: [u8; 32],
    },
    /// The dataset's budget (and the allocation) admitted it but a population node on the
    /// dataset's path did not (`refusal`: that node as it refused); nothing was written.
    PopulationExhausted {
        refusal: NodeRefusal,
        budget: BudgetState,
    },
    /// A block of the release's range has no room for its cost (`block`: the first such
    /// block, with its ledger as it refused); nothing was written anywhere.
    BlockExhausted {
        block: BlockSpend,
        cap: Units,
        budget: BudgetState,
    },
    /// The release names blocks on a dataset that has none, names none on a blocked dataset,
    /// or names blocks of another period; nothing was written.
    BlocksMismatch,
    /// No such dataset; nothing was written.
    DatasetNotFound,
    /// The dataset's stored outputs would pass the per-dataset quota of `quota` cells; nothing
    /// was written.
    OutputQuotaExceeded { quota: i64 },
}

/// Per-dataset ledger figures for `/metrics`.
#[derive(Debug, Clone, PartialEq)]
pub struct LedgerSummary {
    pub dataset_id: Uuid,
    pub total: Units,
    pub spent: Units,
    pub releases: i64,
}

/// Storage failures. `Unavailable` is the database being unreachable, read-only, full or busy
/// past its timeout (→ 503 with Retry-After); `OutcomeUnknown` is a commit that may or may not
/// have happened: the connection was lost (or the driver failed) after the commit was sent, so
/// no answer from the database says which (→ 504); `Corrupt` is a stored value the ledger
/// cannot interpret; `Internal` is anything else. Messages never contain request data. `Clone`,
/// so that the members of a group commit can each be given the group's error.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("database unavailable: {0}")]
    Unavailable(String),
    #[error("commit outcome unknown: {0}")]
    OutcomeUnknown(String),
    #[error("stored data cannot be interpreted: {0}")]
    Corrupt(String),
    #[error("database error: {0}")]
    Internal(String),
}

/// One storage contract, implemented by [`crate::store::postgres`] and [`crate::store::sqlite`].
/// Operations are coarse and each is atomic on its own.
#[async_trait]
pub trait LedgerStore: Send + Sync + 'static {
    /// `"postgres"` or `"sqlite"`.
    fn backend(&self) -> &'static str;

    /// The longest a database that is up takes to answer [`LedgerStore::commit_release`]: the
    /// pool's acquire timeout, the database's own lock and statement deadlines (after which it
    /// answers with an error and rolls back), and a margin. A commit not answered by then is one
    /// the database is not answering at all (frozen, cut off), whose outcome cannot be known yet.
    fn commit_answer_bound(&self) -> std::time::Duration;

    /// A cheap round trip to the database (readiness).
    async fn ping(&self) -> Result<(), StoreError>;

    async fn create_dataset(&self, new: &NewDataset) -> Result<Dataset, StoreError>;
    async fn get_dataset(&self, id: Uuid) -> Result<Option<Dataset>, StoreError>;
    /// All datasets, or only those in `only`, oldest first.
    async fn list_datasets(&self, only: Option<&[Uuid]>) -> Result<Vec<Dataset>, StoreError>;

    /// Check, charge and record, in one transaction that serialises releases of the dataset
    /// (row lock on PostgreSQL, an immediate write transaction on SQLite): if a release with
    /// the same idempotency key exists → `Existing`; else if `spent + cost > total` →
    /// `Exhausted`; else if the release's `created_by` token has an allocation on the dataset
    /// that the cost would overrun → `AllocationExhausted`; else store the release, add its cost
    /// to `spent` (and to the token's spend on the dataset), increment `releases`, commit →
    /// `Committed`. On a dataset split into blocks the release must name a range of its period
    /// (else `BlocksMismatch`, as for a range on a dataset without blocks), every block of which
    /// must have room for the cost (else `BlockExhausted` naming the first that has none), and
    /// each is charged the cost in the same transaction. Any error but `OutcomeUnknown` leaves
    /// nothing written.
    async fn commit_release(&self, new: &NewRelease) -> Result<CommitOutcome, StoreError>;

    /// Set the allocation of analyst token `token_id` on a dataset in its scope (`None`
    /// removes it), and record the change with `by` and `at` in the same transaction (nothing
    /// is recorded when the allocation already was `total`). The
    /// token's spend on the dataset is kept by every release, so setting an allocation never
    /// forgets what was spent before it.
    async fn set_allocation(
        &self,
        dataset_id: Uuid,
        token_id: &str,
        total: Option<Units>,
        by: &str,
        at: DateTime<Utc>,
    ) -> Result<AllocationOutcome, StoreError>;

    /// The dataset's allocations (only `token_id`'s when given), by token id.
    async fn list_allocations(
        &self,
        dataset_id: Uuid,
        token_id: Option<&str>,
    ) -> Result<Vec<Allocation>, StoreError>;

    /// The dataset's allocation changes (only `token_id`'s when given), oldest first.
    async fn allocation_changes(
        &self,
        dataset_id: Uuid,
        token_id: Option<&str>,
    ) -> Result<Vec<AllocationChange>, StoreError>;

    /// The release stored under an idempotency key, with its fingerprint.
    async fn find_by_idempotency_key(
        &self,
        dataset_id: Uuid,
        key: &str,
    ) -> Result<Option<(Release, [u8; 32])>, StoreError>;
    async fn get_release(
        &self,
        dataset_id: Uuid,
        release_id: Uuid,
    ) -> Result<Option<Release>, StoreError>;
    /// Newest first: releases with `seq < before` (all when `None`), at most `limit`.
    async fn list_releases(
        &self,
        dataset_id: Uuid,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<Release>, StoreError>;

    /// [`LedgerStore::list_releases`] without outputs or mechanism records, which are not read.
    async fn list_release_summaries(
        &self,
        dataset_id: Uuid,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<ReleaseSummary>, StoreError>;

    /// `(seq, stored cells, bytes of stored row names)` of the releases
    /// [`LedgerStore::list_releases`] would return, without their outputs: what a listing reads
    /// first to bound a page by size.
    async fn release_sizes(
        &self,
        dataset_id: Uuid,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<(i64, i64, i64)>, StoreError>;

    async fn create_token(&self, token: &TokenRecord) -> Result<(), StoreError>;
    /// A single sign-on principal's row: `token` inserted unless a row of its id exists (which is
    /// left as it is, revocation included), then a scope row for each of `token.datasets` that
    /// exists and has none yet (spend 0, no allocation). Datasets that do not exist are skipped.
    async fn ensure_principal(&self, token: &TokenRecord) -> Result<(), StoreError>;
    /// The token, revoked or not (the caller checks [`TokenRecord::usable_at`]).
    async fn find_token(&self, id: &str) -> Result<Option<TokenRecord>, StoreError>;
    /// Every token, revoked ones included, oldest first.
    async fn list_tokens(&self) -> Result<Vec<TokenRecord>, StoreError>;
    /// Mark the token revoked at `at` (an earlier revocation time stays). `false` if no such token.
    async fn revoke_token(&self, id: &str, at: DateTime<Utc>) -> Result<bool, StoreError>;
    /// Record a sign-in at `at` (the caller rate-limits these writes).
    async fn touch_token(&self, id: &str, at: DateTime<Utc>) -> Result<(), StoreError>;

    /// The dataset's release-log head, read in one statement with its ledger figures.
    async fn log_head(&self, dataset_id: Uuid) -> Result<Option<audit::LogHead>, StoreError>;
    /// Releases with `after < seq <= upto`, oldest first, at most `limit`, each reduced to its
    /// link fields as it is read (so a page holds digests, not outputs).
    async fn log_entries(
        &self,
        dataset_id: Uuid,
        after: i64,
        upto: i64,
        limit: u32,
    ) -> Result<Vec<audit::LogEntry>, StoreError>;

    /// Store a server-wide secret unless one of that name exists (then do nothing).
    async fn insert_secret_if_absent(&self, name: &str, value: &[u8]) -> Result<(), StoreError>;

    /// A server-wide secret by name, created from `init` if absent (first writer wins across
    /// replicas; every caller gets the stored value, which never changes).
    async fn secret_or_init(&self, name: &str, init: &[u8]) -> Result<Vec<u8>, StoreError> {
        // Reading first keeps a start-up against an initialised database free of writes.
        if let Some(value) = self.get_secret(name).await? {
            return Ok(value);
        }
        self.insert_secret_if_absent(name, init).await?;
        self.get_secret(name).await?.ok_or_else(|| {
            StoreError::Internal("secret_or_init: the secret vanished after insertion".into())
        })
    }
    async fn get_secret(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError>;

    /// The blocks of `range` that were ever charged, in order, with their spend (a block not
    /// listed has spent nothing). Not a locked read: for views and previews.
    async fn block_spends(
        &self,
        dataset_id: Uuid,
        range: BlockRange,
    ) -> Result<Vec<BlockSpend>, StoreError>;

    /// The dataset's most-spent block (the earliest of equals), if any was charged.
    async fn most_spent_block(
        &self,
        dataset_id: Uuid,
        period: Period,
    ) -> Result<Option<BlockSpend>, StoreError>;

    /// Ledger figures of every dataset (for metrics).
    async fn ledger_summaries(&self) -> Result<Vec<LedgerSummary>, StoreError>;

    /// Store a new population (the caller checked its parent exists and has its order; a new
    /// node has spent nothing, so creating it charges nothing).
    async fn create_population(&self, new: &NewPopulation) -> Result<Population, StoreError>;
    async fn get_population(&self, id: Uuid) -> Result<Option<Population>, StoreError>;
    /// Every population, oldest first.
    async fn list_populations(&self) -> Result<Vec<Population>, StoreError>;

    /// Put the dataset in `population` (`None`: in none), in one transaction under the rows'
    /// locks (dataset, then the new path's nodes by id): admitted only if the dataset's spend so
    /// far fits every node of the new path, each then charged with it. The old path keeps what
    /// it was charged.
    async fn set_dataset_population(
        &self,
        dataset_id: Uuid,
        population: Option<Uuid>,
    ) -> Result<Placement, StoreError>;

    /// Move population `id` under `parent` (`None`: make it a root), in one transaction under
    /// the locks of the node and its new ancestors (by id): refused if `parent` is the node or
    /// under it, or has another order; admitted only if the node's spend fits every new
    /// ancestor, each then charged with it. The old ancestors keep what they were charged.
    async fn set_population_parent(
        &self,
        id: Uuid,
        parent: Option<Uuid>,
    ) -> Result<Placement, StoreError>;

    /// The population `id` and its ancestors up to the root (empty if there is no such node).
    /// Not a locked read: for the budget views.
    async fn population_path(&self, id: Uuid) -> Result<Vec<Population>, StoreError> {
        let mut path: Vec<Population> = Vec::new();
        let mut next = Some(id);
        while let Some(id) = next {
            if path.len() > population::MAX_DEPTH || path.iter().any(|p| p.id == id) {
                return Err(StoreError::Corrupt(
                    "populations.parent_id forms a cycle".into(),
                ));
            }
            let Some(node) = self.get_population(id).await? else {
                break;
            };
            next = node.parent;
            path.push(node);
        }
        Ok(path)
    }
}

/// How [`LedgerStore::set_dataset_population`] or [`LedgerStore::set_population_parent`] ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Placement {
    /// Placed, and the new path charged.
    Placed,
    /// The dataset (or the population being moved) does not exist.
    NotFound,
    /// The population to place it in does not exist.
    TargetNotFound,
    /// The target has another ledger order.
    OrderMismatch,
    /// The target is the node itself or under it.
    Cycle,
    /// The new path would be deeper than [`population::MAX_DEPTH`].
    TooDeep,
    /// What was already spent does not fit this node of the new path; nothing was written.
    Exhausted(NodeRefusal),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_keep_their_rows() {
        let t = Table::from_rows(vec![vec![0.5, 0.5], vec![1.0, 0.0], vec![0.25, 0.75]]).unwrap();
        assert_eq!((t.rows(), t.cells()), (3, 2));
        let rows: Vec<&[f64]> = t.iter_rows().collect();
        assert_eq!(rows, vec![&[0.5, 0.5][..], &[1.0, 0.0], &[0.25, 0.75]]);
        let output = Output::Table(t.clone());
        assert_eq!(output.rows(), Some(3));
        assert_eq!(output.values(), &[0.5, 0.5, 1.0, 0.0, 0.25, 0.75]);
        assert_eq!(Table::from_flat(output.values().to_vec(), 3), Some(t));
        assert_eq!(Output::Vector(vec![1.0]).rows(), None);

        assert_eq!(Table::from_rows(vec![]), None);
        assert_eq!(Table::from_rows(vec![vec![]]), None);
        assert_eq!(Table::from_rows(vec![vec![1.0], vec![0.5, 0.5]]), None);
        assert_eq!(Table::from_flat(vec![1.0; 6], 4), None);
        assert_eq!(Table::from_flat(vec![1.0; 6], 0), None);
        assert_eq!(Table::from_flat(vec![], 1), None);
    }
}
