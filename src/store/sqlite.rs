//! SQLite backend: one file, one service process. Writes that must be serialised take the
//! database's write lock up front (`BEGIN IMMEDIATE`), so a transaction never discovers halfway
//! through that another writer got there first.

use std::str::FromStr;

use async_trait::async_trait;
use chrono::{DateTime, SubsecRound, Utc};
use sqlx::pool::PoolConnection;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use sqlx::{Connection, Row, Sqlite, SqliteConnection};
use uuid::fmt::Hyphenated;
use uuid::Uuid;

use super::codec::{
    self, committed_release, output_columns, BudgetColumns, DatasetColumns, ReleaseColumns,
    SummaryColumns, DATASET_COLUMNS,
};
use super::{store_error, StoreOptions};
use crate::ledger::*;

const RELEASE_COLUMNS: &str =
    "id, dataset_id, seq, created_at, created_by, mechanism, cost_units, \
     distribution, dimension, idempotency_key, fingerprint, table_rows, label";

pub struct SqliteStore {
    pool: sqlx::SqlitePool,
}

impl SqliteStore {
    pub async fn connect(url: &str, options: &StoreOptions) -> Result<Self, StoreError> {
        let connect = SqliteConnectOptions::from_str(url)
            .map_err(|e| store_error("connect", e))?
            .create_if_missing(true)
            // Readers do not block the writer and the writer does not block readers.
            .journal_mode(SqliteJournalMode::Wal)
            // Waiting for another connection's write lock is bounded like waiting for a connection.
            .busy_timeout(options.acquire_timeout)
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            .connect_with(connect)
            .await
            .map_err(|e| store_error("connect", e))?;
        sqlx::migrate!("migrations/sqlite")
            .run(&pool)
            .await
            .map_err(|e| store_error("connect", e.into()))?;
        Ok(Self { pool })
    }

    pub fn pool(&self) -> &sqlx::SqlitePool {
        &self.pool
    }
}

/// PostgreSQL keeps microseconds; so does this backend, so that both return the same instants.
fn now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(6)
}

async fn fetch_dataset(
    conn: &mut SqliteConnection,
    context: &str,
    id: Uuid,
) -> Result<Option<Dataset>, StoreError> {
    let sql = format!("SELECT {DATASET_COLUMNS} FROM datasets WHERE id = $1");
    sqlx::query_as::<_, DatasetColumns<Hyphenated>>(&sql)
        .bind(id.hyphenated())
        .fetch_optional(conn)
        .await
        .map_err(|e| store_error(context, e))?
        .map(Dataset::try_from)
        .transpose()
}

async fn fetch_keyed(
    conn: &mut SqliteConnection,
    context: &str,
    dataset_id: Uuid,
    key: &str,
) -> Result<Option<(Release, [u8; 32])>, StoreError> {
    let sql = format!(
        "SELECT {RELEASE_COLUMNS} FROM releases WHERE dataset_id = $1 AND idempotency_key = $2"
    );
    sqlx::query_as::<_, ReleaseColumns<Hyphenated>>(&sql)
        .bind(dataset_id.hyphenated())
        .bind(key)
        .fetch_optional(conn)
        .await
        .map_err(|e| store_error(context, e))?
        .map(ReleaseColumns::into_keyed_release)
        .transpose()
}

/// A connection whose transaction failed is closed rather than returned to the pool. After some
/// failures (SQLITE_FULL or SQLITE_IOERR on COMMIT, for instance) SQLite has already rolled the
/// transaction back; the driver's ROLLBACK on drop then fails, and the driver would go on
/// counting the connection as inside a transaction and refuse every later `BEGIN` on it — a
/// 500 on every release that drew that connection, long after the disk had space again.
fn discard_on_error<T>(
    conn: &mut PoolConnection<Sqlite>,
    result: Result<T, StoreError>,
) -> Result<T, StoreError> {
    if result.is_err() {
        conn.close_on_drop();
    }
    result
}

/// The transaction of [`LedgerStore::commit_release`], on one connection.
async fn commit_release_on(
    conn: &mut SqliteConnection,
    new: &NewRelease,
) -> Result<CommitOutcome, StoreError> {
    const CONTEXT: &str = "commit_release";
    let fail = |e| store_error(CONTEXT, e);
    // Taking the write lock first makes the key check, the admission and the record one
    // serial step: no other writer can interleave, in this process or another.
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.map_err(fail)?;

    if let Some(idempotency) = &new.idempotency {
        if let Some((release, fingerprint)) =
            fetch_keyed(&mut tx, CONTEXT, new.dataset_id, &idempotency.key).await?
        {
            tx.rollback().await.map_err(fail)?;
            return Ok(CommitOutcome::Existing {
                release,
                fingerprint,
            });
        }
    }

    let charged = sqlx::query_as::<_, BudgetColumns>(
        "UPDATE datasets SET spent_units = spent_units + $2, release_count = release_count + 1 \
         WHERE id = $1 AND spent_units + $2 <= total_units \
         RETURNING budget_order, total_units, spent_units, release_count, dp_epsilon, dp_delta",
    )
    .bind(new.dataset_id.hyphenated())
    .bind(new.cost.raw())
    .fetch_optional(&mut *tx)
    .await
    .map_err(fail)?;
    let Some(charged) = charged else {
        let outcome = match fetch_dataset(&mut tx, CONTEXT, new.dataset_id).await? {
            None => CommitOutcome::DatasetNotFound,
            Some(dataset) => CommitOutcome::Exhausted {
                budget: dataset.budget(),
            },
        };
        tx.rollback().await.map_err(fail)?;
        return Ok(outcome);
    };
    let budget = BudgetState::try_from(charged)?;

    let (distribution, dimension, table_rows) = output_columns(&new.output)?;
    let created_at = now();
    sqlx::query(
        "INSERT INTO releases (id, dataset_id, seq, created_at, created_by, mechanism, cost_units, \
                               distribution, dimension, idempotency_key, fingerprint, \
                               table_rows, label) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
    )
    .bind(new.id.hyphenated())
    .bind(new.dataset_id.hyphenated())
    .bind(budget.releases)
    .bind(created_at)
    .bind(&new.created_by)
    .bind(new.mechanism.to_string())
    .bind(new.cost.raw())
    .bind(distribution)
    .bind(dimension)
    .bind(new.idempotency.as_ref().map(|i| i.key.as_str()))
    .bind(new.idempotency.as_ref().map(|i| &i.fingerprint[..]))
    .bind(table_rows)
    .bind(new.label.as_ref().map(Label::as_str))
    .execute(&mut *tx)
    .await
    .map_err(fail)?;
    tx.commit().await.map_err(fail)?;

    let release = committed_release(new, budget.releases, created_at);
    Ok(CommitOutcome::Committed { release, budget })
}

/// The transaction of [`LedgerStore::create_token`], on one connection.
async fn create_token_on(
    conn: &mut SqliteConnection,
    token: &TokenRecord,
) -> Result<(), StoreError> {
    const CONTEXT: &str = "create_token";
    let fail = |e| store_error(CONTEXT, e);
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.map_err(fail)?;
    sqlx::query("INSERT INTO tokens (id, secret_hash, role, created_at) VALUES ($1, $2, $3, $4)")
        .bind(&token.id)
        .bind(&token.secret_hash[..])
        .bind(token.role.as_str())
        .bind(token.created_at.trunc_subsecs(6))
        .execute(&mut *tx)
        .await
        .map_err(fail)?;
    for dataset_id in &token.datasets {
        sqlx::query("INSERT OR IGNORE INTO token_datasets (token_id, dataset_id) VALUES ($1, $2)")
            .bind(&token.id)
            .bind(dataset_id.hyphenated())
            .execute(&mut *tx)
            .await
            .map_err(fail)?;
    }
    tx.commit().await.map_err(fail)
}

#[async_trait]
impl LedgerStore for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map(drop)
            .map_err(|e| store_error("ping", e))
    }

    async fn create_dataset(&self, new: &NewDataset) -> Result<Dataset, StoreError> {
        let sql = format!(
            "INSERT INTO datasets (id, name, budget_order, total_units, dp_epsilon, dp_delta, \
                                   l2_squared, linf, neighbouring, created_at, created_by) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING {DATASET_COLUMNS}"
        );
        sqlx::query_as::<_, DatasetColumns<Hyphenated>>(&sql)
            .bind(new.id.hyphenated())
            .bind(&new.name)
            .bind(new.order.get())
            .bind(new.total.raw())
            .bind(new.dp_target.map(|t| t.epsilon))
            .bind(new.dp_target.map(|t| t.delta))
            .bind(new.sensitivity.l2_squared())
            .bind(new.sensitivity.linf())
            .bind(&new.neighbouring)
            .bind(now())
            .bind(&new.created_by)
            .fetch_one(&self.pool)
            .await
            .map_err(|e| store_error("create_dataset", e))?
            .try_into()
    }

    async fn get_dataset(&self, id: Uuid) -> Result<Option<Dataset>, StoreError> {
        let mut conn = self
            .pool
            .acquire()
            .await
            .map_err(|e| store_error("get_dataset", e))?;
        fetch_dataset(&mut conn, "get_dataset", id).await
    }

    async fn list_datasets(&self, only: Option<&[Uuid]>) -> Result<Vec<Dataset>, StoreError> {
        // The id list travels as one JSON array, so the statement is the same for any length.
        let only = only.map(|ids| {
            serde_json::Value::from(
                ids.iter()
                    .map(|id| id.hyphenated().to_string())
                    .collect::<Vec<_>>(),
            )
            .to_string()
        });
        // rowid is insertion order: oldest first, ties impossible.
        let sql = format!(
            "SELECT {DATASET_COLUMNS} FROM datasets \
             WHERE $1 IS NULL OR id IN (SELECT value FROM json_each($1)) ORDER BY rowid"
        );
        sqlx::query_as::<_, DatasetColumns<Hyphenated>>(&sql)
            .bind(only)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| store_error("list_datasets", e))?
            .into_iter()
            .map(Dataset::try_from)
            .collect()
    }

    async fn commit_release(&self, new: &NewRelease) -> Result<CommitOutcome, StoreError> {
        let mut conn = self
            .pool
            .acquire()
            .await
            .map_err(|e| store_error("commit_release", e))?;
        let result = commit_release_on(&mut conn, new).await;
        discard_on_error(&mut conn, result)
    }

    async fn find_by_idempotency_key(
        &self,
        dataset_id: Uuid,
        key: &str,
    ) -> Result<Option<(Release, [u8; 32])>, StoreError> {
        const CONTEXT: &str = "find_by_idempotency_key";
        let mut conn = self
            .pool
            .acquire()
            .await
            .map_err(|e| store_error(CONTEXT, e))?;
        fetch_keyed(&mut conn, CONTEXT, dataset_id, key).await
    }

    async fn get_release(
        &self,
        dataset_id: Uuid,
        release_id: Uuid,
    ) -> Result<Option<Release>, StoreError> {
        let sql =
            format!("SELECT {RELEASE_COLUMNS} FROM releases WHERE dataset_id = $1 AND id = $2");
        sqlx::query_as::<_, ReleaseColumns<Hyphenated>>(&sql)
            .bind(dataset_id.hyphenated())
            .bind(release_id.hyphenated())
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| store_error("get_release", e))?
            .map(ReleaseColumns::into_release)
            .transpose()
    }

    async fn list_releases(
        &self,
        dataset_id: Uuid,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<Release>, StoreError> {
        let sql = format!(
            "SELECT {RELEASE_COLUMNS} FROM releases \
             WHERE dataset_id = $1 AND seq < COALESCE($2, 9223372036854775807) \
             ORDER BY seq DESC LIMIT $3"
        );
        sqlx::query_as::<_, ReleaseColumns<Hyphenated>>(&sql)
            .bind(dataset_id.hyphenated())
            .bind(before)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(|e| store_error("list_releases", e))?
            .into_iter()
            .map(ReleaseColumns::into_release)
            .collect()
    }

    async fn create_token(&self, token: &TokenRecord) -> Result<(), StoreError> {
        let mut conn = self
            .pool
            .acquire()
            .await
            .map_err(|e| store_error("create_token", e))?;
        let result = create_token_on(&mut conn, token).await;
        discard_on_error(&mut conn, result)
    }

    async fn find_token(&self, id: &str) -> Result<Option<TokenRecord>, StoreError> {
        const CONTEXT: &str = "find_token";
        let row = sqlx::query(
            "SELECT id, secret_hash, role, created_at, \
                    (SELECT json_group_array(dataset_id) FROM \
                        (SELECT dataset_id FROM token_datasets WHERE token_id = tokens.id \
                         ORDER BY dataset_id)) AS datasets \
             FROM tokens WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| store_error(CONTEXT, e))?;
        let Some(row) = row else { return Ok(None) };
        let get = |e| store_error(CONTEXT, e);
        let role: String = row.try_get("role").map_err(get)?;
        let datasets: String = row.try_get("datasets").map_err(get)?;
        Ok(Some(TokenRecord {
            id: row.try_get("id").map_err(get)?,
            secret_hash: codec::hash32(
                row.try_get("secret_hash").map_err(get)?,
                "tokens.secret_hash",
            )?,
            role: Role::parse(&role)
                .ok_or_else(|| StoreError::Corrupt("tokens.role is not a known role".into()))?,
            datasets: serde_json::from_str(&datasets).map_err(|_| {
                StoreError::Corrupt("token_datasets.dataset_id is not a UUID".into())
            })?,
            created_at: row.try_get("created_at").map_err(get)?,
        }))
    }

    async fn insert_secret_if_absent(&self, name: &str, value: &[u8]) -> Result<(), StoreError> {
        sqlx::query("INSERT INTO server_secrets (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING")
            .bind(name)
            .bind(value)
            .execute(&self.pool)
            .await
            .map(|_| ())
            .map_err(|e| store_error("insert_secret_if_absent", e))
    }

    async fn get_secret(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        sqlx::query_scalar("SELECT value FROM server_secrets WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| store_error("get_secret", e))
    }

    async fn ledger_summaries(&self) -> Result<Vec<LedgerSummary>, StoreError> {
        sqlx::query_as::<_, SummaryColumns<Hyphenated>>(
            "SELECT id, total_units, spent_units, release_count FROM datasets ORDER BY rowid",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(|e| store_error("ledger_summaries", e))?
        .into_iter()
        .map(LedgerSummary::try_from)
        .collect()
    }
}
